//! Rust types, clients and servers for the CNPG-I protocol.
//!
//! The code is generated at build time from the `.proto` files in the
//! repository's `proto/` directory. Package names, service names, message
//! names and field numbers are those of upstream CNPG-I, so the generated
//! clients talk to any CNPG-I plugin and the generated servers answer the
//! CloudNativePG operator.
//!
//! ```
//! use cnpgi_proto::identity::v1::{plugin_capability, PluginCapability};
//!
//! let capability = PluginCapability {
//!     r#type: Some(plugin_capability::Type::Service(plugin_capability::Service {
//!         r#type: plugin_capability::service::Type::OperatorService.into(),
//!     })),
//! };
//! assert!(capability.r#type.is_some());
//! ```
//!
//! [`FILE_DESCRIPTOR_SET`] holds the encoded descriptors, for gRPC reflection.

#![forbid(unsafe_code)]

pub mod echo;

/// The encoded `FileDescriptorSet` of every CNPG-I `.proto` file in this
/// crate, for use with gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cnpgi_descriptor.bin"));

/// `cnpgi.identity.*`: the service every plugin implements, and the
/// `Postgres` service (PostgreSQL configuration), which shares its package.
pub mod identity {
    /// `cnpgi.identity.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.identity.v1");
    }
}

/// `cnpgi.operator.*`: Cluster validation, defaulting and status.
pub mod operator {
    /// `cnpgi.operator.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.operator.v1");
    }
}

/// `cnpgi.operator_lifecycle.*`: patches of objects before they are written.
pub mod operator_lifecycle {
    /// `cnpgi.operator_lifecycle.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.operator_lifecycle.v1");
    }
}

/// `cnpgi.reconciler.*`: hooks before and after the operator reconciles an object.
pub mod reconciler {
    /// `cnpgi.reconciler.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.reconciler.v1");
    }
}

/// `cnpgi.wal.*`: WAL archiving and restoring (`WAL`), and restoring a backup
/// in the recovery Job (`RestoreJobHooks`), which shares the package.
pub mod wal {
    /// `cnpgi.wal.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.wal.v1");
    }
}

/// `cnpgi.backup.*`: base backups.
pub mod backup {
    /// `cnpgi.backup.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.backup.v1");
    }
}

/// `cnpgi.metrics.*`: metrics added to the instance's Prometheus endpoint.
pub mod metrics {
    /// `cnpgi.metrics.v1`.
    pub mod v1 {
        #![allow(missing_docs, unreachable_pub, clippy::all)]
        tonic::include_proto!("cnpgi.metrics.v1");
    }
}

/// Fully qualified gRPC service names, as they appear on the wire and in the
/// gRPC health service.
pub mod service_names {
    /// `cnpgi.identity.v1.Identity`.
    pub const IDENTITY: &str = "cnpgi.identity.v1.Identity";
    /// `cnpgi.operator.v1.Operator`.
    pub const OPERATOR: &str = "cnpgi.operator.v1.Operator";
    /// `cnpgi.operator_lifecycle.v1.OperatorLifecycle`.
    pub const OPERATOR_LIFECYCLE: &str = "cnpgi.operator_lifecycle.v1.OperatorLifecycle";
    /// `cnpgi.identity.v1.Postgres`.
    pub const POSTGRES: &str = "cnpgi.identity.v1.Postgres";
    /// `cnpgi.reconciler.v1.ReconcilerHooks`.
    pub const RECONCILER_HOOKS: &str = "cnpgi.reconciler.v1.ReconcilerHooks";
    /// `cnpgi.wal.v1.WAL`.
    pub const WAL: &str = "cnpgi.wal.v1.WAL";
    /// `cnpgi.wal.v1.RestoreJobHooks`.
    pub const RESTORE_JOB_HOOKS: &str = "cnpgi.wal.v1.RestoreJobHooks";
    /// `cnpgi.backup.v1.Backup`.
    pub const BACKUP: &str = "cnpgi.backup.v1.Backup";
    /// `cnpgi.metrics.v1.Metrics`.
    pub const METRICS: &str = "cnpgi.metrics.v1.Metrics";
}

/// Checks a plugin name against the CNPG-I rules: 1 to 63 characters, ASCII
/// letters, digits, `-` and `.`, beginning and ending with a letter or digit.
/// The same string names the plugin's Service label, socket file and
/// `spec.plugins[].name`.
///
/// ```
/// assert!(cnpgi_proto::validate_plugin_name("cnpg-i-hello-world.cloudnative-pg.io").is_ok());
/// assert!(cnpgi_proto::validate_plugin_name("-bad").is_err());
/// ```
pub fn validate_plugin_name(name: &str) -> Result<(), String> {
    const MAX: usize = 63;
    if name.is_empty() {
        return Err("plugin name is empty".into());
    }
    if name.len() > MAX {
        return Err(format!(
            "plugin name {name:?} is {} characters long, at most {MAX} are allowed",
            name.len()
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-' || *c == '.'))
    {
        return Err(format!(
            "plugin name {name:?} contains {bad:?}; only ASCII letters, digits, '-' and '.' are allowed"
        ));
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !edge_ok(name.chars().next()) || !edge_ok(name.chars().last()) {
        return Err(format!(
            "plugin name {name:?} must begin and end with a letter or digit"
        ));
    }
    Ok(())
}

/// Renders a `ValidationError`'s `path_components` as a field path of the
/// Cluster, for messages.
///
/// # The CNPG-I convention for plugin parameters
///
/// An error about a plugin parameter is built the way cnpg-i-machinery's
/// `validation.BuildErrorForParameter` builds it, which is what Go plugins
/// send:
///
/// * `path_components` = `["spec", "plugins", "<index in spec.plugins>", "<parameter name>"]`,
///   or `["spec", "plugins", "<parameter name>"]` when the plugin is not in
///   `spec.plugins` (machinery's index `-1`);
/// * `value` = the raw parameter string;
/// * `message` = what is wrong.
///
/// CloudNativePG shows the components joined by dots
/// (`spec.plugins.0.labels`); this project reports the field the user wrote,
/// `spec.plugins[0].parameters.labels`.
///
/// # Rendering
///
/// * `["spec", "plugins", "<i>", "<name>", rest...]` → `spec.plugins[<i>].parameters.<name>` then `.<rest>`;
/// * `["spec", "plugins", "<name>", rest...]` → the same with the index of the
///   plugin that reported the error (`plugin_index`), when known;
/// * `["<i>", "<name>", rest...]` (an older short form, still accepted) → `spec.plugins[<i>].parameters.<name>`;
/// * `[]` → `spec` (the error is about the Cluster spec as a whole);
/// * any other path → its components joined with `.`, numeric ones rendered
///   as an index: `["spec", "foo", "2", "bar"]` → `spec.foo[2].bar`.
///
/// Never panics, whatever the input.
///
/// ```
/// use cnpgi_proto::field_path;
///
/// let path = |c: &[&str], index| field_path(&c.iter().map(|s| s.to_string()).collect::<Vec<_>>(), index);
/// assert_eq!(path(&["spec", "plugins", "0", "labels"], None), "spec.plugins[0].parameters.labels");
/// assert_eq!(path(&["spec", "plugins", "labels"], Some(2)), "spec.plugins[2].parameters.labels");
/// assert_eq!(path(&["0", "labels"], None), "spec.plugins[0].parameters.labels");
/// assert_eq!(path(&[], None), "spec");
/// assert_eq!(path(&["spec", "foo", "2", "bar"], Some(0)), "spec.foo[2].bar");
/// ```
pub fn field_path(path_components: &[String], plugin_index: Option<usize>) -> String {
    let is = |component: &String, text: &str| component == text;
    match path_components {
        [] => "spec".to_owned(),
        [spec, plugins, index, name, rest @ ..] if is(spec, "spec") && is(plugins, "plugins") && is_index(index) => {
            parameter_path(index, name, rest)
        }
        [spec, plugins, name, rest @ ..] if is(spec, "spec") && is(plugins, "plugins") && !is_index(name) => {
            match plugin_index {
                Some(index) => parameter_path(&index.to_string(), name, rest),
                None => joined(path_components),
            }
        }
        [index, name, rest @ ..] if is_index(index) => parameter_path(index, name, rest),
        [index] if is_index(index) => format!("spec.plugins[{index}]"),
        _ => joined(path_components),
    }
}

/// `spec.plugins[<index>].parameters.<name>`, then `.<c>` for each of `rest`.
fn parameter_path(index: &str, name: &str, rest: &[String]) -> String {
    let mut out = format!("spec.plugins[{index}].parameters.{name}");
    for component in rest {
        out.push('.');
        out.push_str(component);
    }
    out
}

/// The components joined with `.`, numeric ones rendered as `[n]`.
fn joined(components: &[String]) -> String {
    let mut out = String::new();
    for (i, component) in components.iter().enumerate() {
        if is_index(component) {
            out.push('[');
            out.push_str(component);
            out.push(']');
        } else {
            if i > 0 {
                out.push('.');
            }
            out.push_str(component);
        }
    }
    out
}

/// Whether a path component is an array index (non-empty, ASCII digits only).
fn is_index(component: &str) -> bool {
    !component.is_empty() && component.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::{field_path, validate_plugin_name};

    fn strings(components: &[&str]) -> Vec<String> {
        components.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn service_names_are_the_generated_ones() {
        use super::service_names as names;
        for (ours, generated) in [
            (names::IDENTITY, super::identity::v1::identity_server::SERVICE_NAME),
            (names::POSTGRES, super::identity::v1::postgres_server::SERVICE_NAME),
            (names::OPERATOR, super::operator::v1::operator_server::SERVICE_NAME),
            (
                names::OPERATOR_LIFECYCLE,
                super::operator_lifecycle::v1::operator_lifecycle_server::SERVICE_NAME,
            ),
            (
                names::RECONCILER_HOOKS,
                super::reconciler::v1::reconciler_hooks_server::SERVICE_NAME,
            ),
            (names::WAL, super::wal::v1::wal_server::SERVICE_NAME),
            (
                names::RESTORE_JOB_HOOKS,
                super::wal::v1::restore_job_hooks_server::SERVICE_NAME,
            ),
            (names::BACKUP, super::backup::v1::backup_server::SERVICE_NAME),
            (names::METRICS, super::metrics::v1::metrics_server::SERVICE_NAME),
        ] {
            assert_eq!(ours, generated);
        }
    }

    #[test]
    fn proto3_optional_fields_track_presence() {
        // `check_empty_wal_archive` is proto3 `optional` upstream: unset must
        // differ from false on the wire and in the generated type.
        use prost::Message;
        let unset = super::wal::v1::WalArchiveRequest::default();
        let set_false = super::wal::v1::WalArchiveRequest {
            check_empty_wal_archive: Some(false),
            ..Default::default()
        };
        assert!(unset.encode_to_vec().is_empty());
        assert_eq!(set_false.encode_to_vec(), [0x20, 0x00]);
        let restore = super::wal::v1::RestoreRequest::decode(&[0x10, 0x01][..]).unwrap();
        assert_eq!(restore.check_empty_wal_archive, Some(true));
    }

    #[test]
    fn field_paths() {
        let cases: &[(&[&str], Option<usize>, &str)] = &[
            (&[], None, "spec"),
            // cnpg-i-machinery's BuildErrorForParameter, with and without an index.
            (
                &["spec", "plugins", "0", "labels"],
                None,
                "spec.plugins[0].parameters.labels",
            ),
            (
                &["spec", "plugins", "3", "a.b"],
                Some(1),
                "spec.plugins[3].parameters.a.b",
            ),
            (
                &["spec", "plugins", "labels"],
                Some(2),
                "spec.plugins[2].parameters.labels",
            ),
            (&["spec", "plugins", "labels"], None, "spec.plugins.labels"),
            (
                &["spec", "plugins", "1", "labels", "x"],
                None,
                "spec.plugins[1].parameters.labels.x",
            ),
            (&["spec", "plugins", "1"], None, "spec.plugins[1]"),
            (&["spec", "plugins"], Some(0), "spec.plugins"),
            // The older short form.
            (&["0"], None, "spec.plugins[0]"),
            (&["0", "labels"], Some(5), "spec.plugins[0].parameters.labels"),
            (
                &["1", "labels", "extra"],
                None,
                "spec.plugins[1].parameters.labels.extra",
            ),
            // Anything else is a field path.
            (&["spec", "instances"], Some(0), "spec.instances"),
            (&["spec", "foo", "2", "bar"], None, "spec.foo[2].bar"),
            (&["metadata", "name"], None, "metadata.name"),
            (&["labels"], Some(0), "labels"),
            (&["-1", "x"], None, "-1.x"),
            (&["+1"], None, "+1"),
            (
                &["99999999999999999999999999", "x"],
                None,
                "spec.plugins[99999999999999999999999999].parameters.x",
            ),
        ];
        for (components, index, expected) in cases {
            assert_eq!(
                field_path(&strings(components), *index),
                *expected,
                "{components:?} {index:?}"
            );
        }
    }

    #[test]
    fn field_path_never_panics_on_odd_input() {
        for components in [
            strings(&[""]),
            strings(&["", ""]),
            strings(&["0", ""]),
            strings(&["spec", "plugins", ""]),
            strings(&["spec", "plugins", "", ""]),
            strings(&["é", "💥", "0"]),
            strings(&["[", "]", "."]),
        ] {
            let _ = field_path(&components, None);
            let _ = field_path(&components, Some(usize::MAX));
        }
        assert_eq!(field_path(&strings(&["", "0"]), None), "[0]");
    }

    #[test]
    fn plugin_names() {
        for good in ["a", "cnpg-i-hello-world.cloudnative-pg.io", "x1", &"a".repeat(63)] {
            assert!(validate_plugin_name(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("", "empty"),
            ("-a", "begin and end"),
            ("a.", "begin and end"),
            ("a_b", "'_'"),
            ("a/b", "'/'"),
            (&"a".repeat(64), "at most 63"),
        ] {
            let err = validate_plugin_name(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }
}
