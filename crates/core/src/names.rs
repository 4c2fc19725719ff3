//! Names on the wire: plugin names and gRPC service names.
//!
//! ```
//! use cnpgi_core::names::{services, validate_plugin_name};
//!
//! assert!(validate_plugin_name("cnpg-i-hello-world.cloudnative-pg.io").is_ok());
//! assert_eq!(services::OPERATOR, "cnpgi.operator.v1.Operator");
//! ```

/// Fully qualified gRPC service names, as they appear on the wire and in the
/// gRPC health service.
pub mod services {
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
/// assert!(cnpgi_core::names::validate_plugin_name("cnpg-i-hello-world.cloudnative-pg.io").is_ok());
/// assert!(cnpgi_core::names::validate_plugin_name("-bad").is_err());
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

#[cfg(test)]
mod tests {
    use super::validate_plugin_name;
    use cnpgi_proto as proto;

    #[test]
    fn service_names_are_the_generated_ones() {
        use super::services as names;
        for (ours, generated) in [
            (names::IDENTITY, proto::identity::v1::identity_server::SERVICE_NAME),
            (names::POSTGRES, proto::identity::v1::postgres_server::SERVICE_NAME),
            (names::OPERATOR, proto::operator::v1::operator_server::SERVICE_NAME),
            (
                names::OPERATOR_LIFECYCLE,
                proto::operator_lifecycle::v1::operator_lifecycle_server::SERVICE_NAME,
            ),
            (
                names::RECONCILER_HOOKS,
                proto::reconciler::v1::reconciler_hooks_server::SERVICE_NAME,
            ),
            (names::WAL, proto::wal::v1::wal_server::SERVICE_NAME),
            (
                names::RESTORE_JOB_HOOKS,
                proto::wal::v1::restore_job_hooks_server::SERVICE_NAME,
            ),
            (names::BACKUP, proto::backup::v1::backup_server::SERVICE_NAME),
            (names::METRICS, proto::metrics::v1::metrics_server::SERVICE_NAME),
        ] {
            assert_eq!(ours, generated);
        }
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
