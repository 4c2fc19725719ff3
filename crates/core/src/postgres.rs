//! What a Cluster says about its PostgreSQL instances, as CloudNativePG
//! reads it: which plugin archives WAL, which plugins may restore it, the
//! plugin a recovery bootstraps from, the recovery target, and the
//! configuration parameters; and the text PostgreSQL's configuration files
//! take.
//!
//! Read from the Cluster as JSON, so that a file written by hand (`render`,
//! the instance commands) and an API object are read alike.
//!
//! ```
//! use cnpgi_core::postgres::{wal_archiver, quote};
//!
//! let cluster = serde_json::json!({"spec": {"plugins": [
//!     {"name": "a.example.com"},
//!     {"name": "wal.example.com", "isWALArchiver": true}]}});
//! assert_eq!(wal_archiver(&cluster), Some("wal.example.com"));
//! assert_eq!(quote("it's"), "'it''s'");
//! ```

use std::collections::BTreeMap;

use serde_json::Value;

/// The annotation of instance Pods holding the PostgreSQL configuration
/// parameters (a JSON object, keys sorted) after the plugins'
/// `EnrichConfiguration`.
pub const CONFIGURATION_ANNOTATION: &str = "cnpgi.io/postgresqlConfiguration";

fn entries<'a>(cluster: &'a Value, pointer: &str) -> impl Iterator<Item = &'a Value> {
    cluster.pointer(pointer).and_then(Value::as_array).into_iter().flatten()
}

/// CloudNativePG's `GetEnabledWALArchivePluginName`: the first entry of
/// `spec.plugins` (in the order written) that is enabled (`enabled` not
/// `false`) and has `isWALArchiver: true`.
pub fn wal_archiver(cluster: &Value) -> Option<&str> {
    entries(cluster, "/spec/plugins")
        .filter(|entry| entry.get("enabled").and_then(Value::as_bool) != Some(false))
        .filter(|entry| entry.get("isWALArchiver").and_then(Value::as_bool) == Some(true))
        .find_map(|entry| entry.get("name")?.as_str())
}

/// The annotation that turns CloudNativePG's empty-archive check off when
/// set to `enabled`.
pub const SKIP_EMPTY_WAL_ARCHIVE_CHECK_ANNOTATION: &str = "cnpg.io/skipEmptyWalArchiveCheck";

/// CloudNativePG's `IsEmptyWalArchiveCheckEnabled`: whether a new instance
/// must check that the archive it is about to write to is empty (true
/// unless the Cluster is annotated `cnpg.io/skipEmptyWalArchiveCheck:
/// enabled`). CloudNativePG sends it as `RestoreRequest.check_empty_wal_archive`,
/// and, while `PGDATA/.check-empty-wal-archive` exists, as
/// `WALArchiveRequest.check_empty_wal_archive`.
///
/// ```
/// let skip = serde_json::json!({"metadata": {"annotations": {"cnpg.io/skipEmptyWalArchiveCheck": "enabled"}}});
/// assert!(!cnpgi_core::postgres::empty_wal_archive_check_enabled(&skip));
/// assert!(cnpgi_core::postgres::empty_wal_archive_check_enabled(&serde_json::json!({})));
/// ```
pub fn empty_wal_archive_check_enabled(cluster: &Value) -> bool {
    cluster
        .pointer("/metadata/annotations")
        .and_then(|annotations| annotations.get(SKIP_EMPTY_WAL_ARCHIVE_CHECK_ANNOTATION))
        .and_then(Value::as_str)
        != Some("enabled")
}

/// CloudNativePG's `GetExternalClustersEnabledPluginNames`: the plugin of
/// every `spec.externalClusters[]` entry that has one, in the order written.
/// Upstream does not look at their `enabled` field; neither does this.
///
/// ```
/// let cluster = serde_json::json!({"spec": {"externalClusters": [
///     {"name": "origin", "plugin": {"name": "wal.example.com"}}, {"name": "other"}]}});
/// assert_eq!(cnpgi_core::postgres::external_cluster_plugins(&cluster), ["wal.example.com"]);
/// ```
pub fn external_cluster_plugins(cluster: &Value) -> Vec<&str> {
    entries(cluster, "/spec/externalClusters")
        .filter_map(|entry| entry.pointer("/plugin/name")?.as_str())
        .collect()
}

/// CloudNativePG's `GetRecoverySourcePlugin`: the plugin of the external
/// cluster that `spec.bootstrap.recovery.source` names, if it has one.
///
/// ```
/// let cluster = serde_json::json!({"spec": {
///     "bootstrap": {"recovery": {"source": "origin"}},
///     "externalClusters": [{"name": "origin", "plugin": {"name": "wal.example.com"}}]}});
/// assert_eq!(cnpgi_core::postgres::recovery_source_plugin(&cluster), Some("wal.example.com"));
/// ```
pub fn recovery_source_plugin(cluster: &Value) -> Option<&str> {
    let source = cluster.pointer("/spec/bootstrap/recovery/source")?.as_str()?;
    entries(cluster, "/spec/externalClusters")
        .find(|entry| entry.get("name").and_then(Value::as_str) == Some(source))?
        .pointer("/plugin/name")?
        .as_str()
}

/// The parameters of `spec.postgresql.parameters` (CloudNativePG's shape).
/// Numbers and booleans, which a hand-written YAML file may hold where the
/// API server would only accept strings, are taken as their text; other
/// values are left out.
///
/// ```
/// let cluster = serde_json::json!({"spec": {"postgresql": {"parameters": {
///     "shared_buffers": "256MB", "max_connections": 200}}}});
/// let parameters = cnpgi_core::postgres::parameters(&cluster);
/// assert_eq!(parameters["max_connections"], "200");
/// ```
pub fn parameters(cluster: &Value) -> BTreeMap<String, String> {
    cluster
        .pointer("/spec/postgresql/parameters")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(name, value)| {
            let text = match value {
                Value::String(text) => text.clone(),
                Value::Number(number) => number.to_string(),
                Value::Bool(flag) => flag.to_string(),
                _ => return None,
            };
            Some((name.clone(), text))
        })
        .collect()
}

/// A value quoted for a PostgreSQL configuration file: in single quotes,
/// with `'` doubled and `\` and line breaks escaped, so that no value can end
/// its line and add a setting.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// CloudNativePG's `RecoveryTarget.BuildPostgresOptions`: the recovery
/// target lines for `spec.bootstrap.recovery.recoveryTarget` (empty when
/// there is none). Values are quoted with [`quote`] (upstream pastes them
/// between quotes as they are); `targetTime` is converted with
/// [`postgres_time`], as upstream does (PostgreSQL refuses an RFC 3339
/// `…T…Z` value for `recovery_target_time`).
///
/// ```
/// let cluster = serde_json::json!({"spec": {"bootstrap": {"recovery": {
///     "recoveryTarget": {"targetName": "before-upgrade", "exclusive": true}}}}});
/// assert_eq!(
///     cnpgi_core::postgres::recovery_target_options(&cluster),
///     "recovery_target_name = 'before-upgrade'\nrecovery_target_inclusive = false\n"
/// );
/// ```
pub fn recovery_target_options(cluster: &Value) -> String {
    let Some(target) = cluster.pointer("/spec/bootstrap/recovery/recoveryTarget") else {
        return String::new();
    };
    if !target.is_object() {
        return String::new();
    }
    let text = |field: &str| target.get(field).and_then(Value::as_str).filter(|v| !v.is_empty());
    let flag = |field: &str| target.get(field).and_then(Value::as_bool) == Some(true);
    let mut out = String::new();
    for (field, setting) in [
        ("targetTLI", "recovery_target_timeline"),
        ("targetXID", "recovery_target_xid"),
        ("targetName", "recovery_target_name"),
        ("targetLSN", "recovery_target_lsn"),
        ("targetTime", "recovery_target_time"),
    ] {
        if let Some(value) = text(field) {
            let value = if field == "targetTime" {
                postgres_time(value)
            } else {
                value.to_owned()
            };
            out.push_str(&format!("{setting} = {}\n", quote(&value)));
        }
    }
    if flag("targetImmediate") {
        out.push_str("recovery_target = immediate\n");
    }
    if flag("exclusive") {
        out.push_str("recovery_target_inclusive = false\n");
    } else {
        out.push_str("recovery_target_inclusive = true\n");
    }
    out
}

/// An RFC 3339 time (`2026-01-02T03:04:05.5Z`, `…+02:00`, or without a
/// zone, taken as UTC) as PostgreSQL reads it, the way cnpg-i-machinery's
/// `ConvertToPostgresFormat` writes it: `2026-01-02 03:04:05.500000+00:00`
/// (microseconds, the offset as written, `+00:00` for `Z`). Anything else is
/// returned as it is.
///
/// ```
/// use cnpgi_core::postgres::postgres_time;
///
/// assert_eq!(postgres_time("2026-11-23T18:01:23.288832Z"), "2026-11-23 18:01:23.288832+00:00");
/// assert_eq!(postgres_time("2026-01-02T03:04:05+02:00"), "2026-01-02 03:04:05.000000+02:00");
/// assert_eq!(postgres_time("yesterday"), "yesterday");
/// ```
pub fn postgres_time(timestamp: &str) -> String {
    fn digits(text: &str) -> bool {
        !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())
    }
    let convert = || -> Option<String> {
        let (date, rest) = timestamp.split_once(['T', 't'])?;
        let date_ok = date.len() == 10 && date.split('-').map(str::len).eq([4, 2, 2]) && date.split('-').all(digits);
        let (clock, rest) = (rest.get(..8)?, rest.get(8..)?);
        let clock_ok = clock.split(':').map(str::len).eq([2, 2, 2]) && clock.split(':').all(digits);
        if !date_ok || !clock_ok {
            return None;
        }
        let (fraction, zone) = match rest.strip_prefix('.') {
            Some(rest) => {
                let end = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
            None => ("", rest),
        };
        let zone = match zone {
            "" | "Z" | "z" => "+00:00",
            offset
                if offset.len() == 6
                    && offset.starts_with(['+', '-'])
                    && offset[1..].split(':').map(str::len).eq([2, 2])
                    && offset[1..].split(':').all(digits) =>
            {
                offset
            }
            _ => return None,
        };
        let micros: String = fraction.chars().chain(std::iter::repeat('0')).take(6).collect();
        Some(format!("{date} {clock}.{micros}{zone}"))
    };
    convert().unwrap_or_else(|| timestamp.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_wal_archiver_is_the_first_enabled_one_in_spec_order() {
        let cluster = json!({"spec": {"plugins": [
            {"name": "z.example.com", "isWALArchiver": true, "enabled": false},
            {"name": "b.example.com", "isWALArchiver": true},
            {"name": "a.example.com", "isWALArchiver": true},
        ]}});
        assert_eq!(wal_archiver(&cluster), Some("b.example.com"));
        assert_eq!(wal_archiver(&json!({"spec": {"plugins": [{"name": "a"}]}})), None);
        assert_eq!(wal_archiver(&json!({"spec": {"plugins": "nonsense"}})), None);
        assert_eq!(wal_archiver(&json!(null)), None);
    }

    #[test]
    fn external_and_recovery_plugins() {
        let cluster = json!({"spec": {
        "bootstrap": {"recovery": {"source": "b"}},
        "externalClusters": [
            {"name": "a", "plugin": {"name": "one.example.com"}},
            {"name": "b", "plugin": {"name": "two.example.com", "parameters": {"x": "1"}}},
            {"name": "c"},
        ]}});
        assert_eq!(
            external_cluster_plugins(&cluster),
            ["one.example.com", "two.example.com"]
        );
        assert_eq!(recovery_source_plugin(&cluster), Some("two.example.com"));
        let mut no_plugin = cluster.clone();
        no_plugin["spec"]["bootstrap"]["recovery"]["source"] = json!("c");
        assert_eq!(recovery_source_plugin(&no_plugin), None);
        assert_eq!(recovery_source_plugin(&json!({})), None);
    }

    #[test]
    fn parameters_are_text() {
        let cluster = json!({"spec": {"postgresql": {"parameters": {
            "a": "x", "b": 2, "c": true, "d": null, "e": {"nested": 1}}}}});
        let parameters = parameters(&cluster);
        assert_eq!(
            parameters.into_iter().collect::<Vec<_>>(),
            [
                ("a".to_owned(), "x".to_owned()),
                ("b".to_owned(), "2".to_owned()),
                ("c".to_owned(), "true".to_owned())
            ]
        );
        assert!(super::parameters(&json!({"spec": {}})).is_empty());
    }

    #[test]
    fn quoting_keeps_a_value_on_its_line() {
        assert_eq!(quote("plain"), "'plain'");
        assert_eq!(quote("a'b"), "'a''b'");
        assert_eq!(quote("c:\\dir"), "'c:\\\\dir'");
        assert_eq!(quote("x'\narchive_command = 'evil"), "'x''\\narchive_command = ''evil'");
    }

    #[test]
    fn recovery_targets_as_cloudnative_pg_writes_them() {
        assert_eq!(recovery_target_options(&json!({})), "");
        let cluster = json!({"spec": {"bootstrap": {"recovery": {"recoveryTarget": {
            "targetTLI": "latest",
            "targetXID": "",
            "targetLSN": "0/3000060",
            "targetTime": "2026-01-02T03:04:05Z",
            "targetImmediate": true,
        }}}}});
        assert_eq!(
            recovery_target_options(&cluster),
            "recovery_target_timeline = 'latest'\nrecovery_target_lsn = '0/3000060'\n\
             recovery_target_time = '2026-01-02 03:04:05.000000+00:00'\nrecovery_target = immediate\n\
             recovery_target_inclusive = true\n"
        );
    }
}
