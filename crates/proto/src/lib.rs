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

/// The encoded `FileDescriptorSet` of every CNPG-I `.proto` file in this
/// crate, for use with gRPC server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/cnpgi_descriptor.bin"));

/// `cnpgi.identity.*`: the service every plugin implements.
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

/// Fully qualified gRPC service names, as they appear on the wire and in the
/// gRPC health service.
pub mod service_names {
    /// `cnpgi.identity.v1.Identity`.
    pub const IDENTITY: &str = "cnpgi.identity.v1.Identity";
    /// `cnpgi.operator.v1.Operator`.
    pub const OPERATOR: &str = "cnpgi.operator.v1.Operator";
    /// `cnpgi.operator_lifecycle.v1.OperatorLifecycle`.
    pub const OPERATOR_LIFECYCLE: &str = "cnpgi.operator_lifecycle.v1.OperatorLifecycle";
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

/// Renders `path_components` as a field path of the Cluster, for messages.
///
/// * `[]` → `spec` (the error is about the Cluster spec as a whole);
/// * first component numeric (the CNPG-I convention) → `spec.plugins[<index>]`,
///   then `.parameters.<name>` for the second component and `.<c>` for any
///   further one: `["0", "labels"]` → `spec.plugins[0].parameters.labels`;
/// * otherwise the components joined with `.`, numeric ones rendered as an
///   index: `["spec", "plugins", "1", "name"]` → `spec.plugins[1].name`.
///
/// Never panics, whatever the input.
///
/// ```
/// use cnpgi_proto::field_path;
///
/// let path = |c: &[&str]| field_path(&c.iter().map(|s| s.to_string()).collect::<Vec<_>>());
/// assert_eq!(path(&[]), "spec");
/// assert_eq!(path(&["3"]), "spec.plugins[3]");
/// assert_eq!(path(&["0", "labels"]), "spec.plugins[0].parameters.labels");
/// assert_eq!(path(&["metadata", "name"]), "metadata.name");
/// ```
pub fn field_path(path_components: &[String]) -> String {
    let Some((first, rest)) = path_components.split_first() else {
        return "spec".to_owned();
    };
    if is_index(first) {
        let mut out = format!("spec.plugins[{first}]");
        let mut rest = rest.iter();
        if let Some(parameter) = rest.next() {
            out.push_str(".parameters.");
            out.push_str(parameter);
        }
        for component in rest {
            out.push('.');
            out.push_str(component);
        }
        return out;
    }
    let mut out = first.clone();
    for component in rest {
        if is_index(component) {
            out.push('[');
            out.push_str(component);
            out.push(']');
        } else {
            out.push('.');
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
    use super::validate_plugin_name;

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
