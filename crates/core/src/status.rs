//! `status.pluginStatus[]`: what plugins answer to `SetStatusInCluster`, and
//! the entries the operator writes.
//!
//! The answer's `json_status` becomes the plugin's `status` in the Cluster's
//! `status.pluginStatus[]`. It must be a JSON object; **empty** bytes mean
//! "keep the status as it is". The builders ([`json_status`], [`no_op`],
//! [`empty_object`]) mirror cnpg-i-machinery's `clusterstatus` package;
//! [`parse_json_status`] reads an answer back.
//!
//! Before calling `SetStatusInCluster`, an operator writes every enabled
//! plugin's entry (name, version, capability names) into the Cluster, as
//! CloudNativePG does ([`write_plugin_status`], [`PluginStatusUpdate`],
//! [`previous_statuses`]): upstream plugins answer an error when their entry
//! is missing.
//!
//! ```
//! use cnpgi_core::status;
//! use serde::Serialize;
//!
//! #[derive(Serialize)]
//! struct MyStatus {
//!     enabled: bool,
//! }
//!
//! let answer = status::json_status(&MyStatus { enabled: true })?;
//! assert_eq!(answer.json_status, br#"{"enabled":true}"#);
//! assert!(status::no_op().json_status.is_empty());
//! assert_eq!(status::empty_object().json_status, b"{}");
//! # Ok::<(), cnpgi_core::status::StatusError>(())
//! ```

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

pub use cnpgi_proto::operator::v1::SetStatusInClusterResponse;

use crate::cluster::json_type_name;

/// Leave the plugin's status as it is (empty `json_status`).
pub fn no_op() -> SetStatusInClusterResponse {
    SetStatusInClusterResponse {
        json_status: Vec::new(),
    }
}

/// Set the plugin's status to the empty object `{}`, wiping what was there.
pub fn empty_object() -> SetStatusInClusterResponse {
    SetStatusInClusterResponse {
        json_status: b"{}".to_vec(),
    }
}

/// A status could not be turned into a `SetStatusInCluster` answer.
///
/// Converts into a [`tonic::Status`] with code `Internal`: the plugin built a
/// bad status.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The value could not be serialized to JSON.
    #[error("cannot serialize the plugin status: {0}")]
    Serialize(#[source] serde_json::Error),
    /// A `json_status` is not valid JSON.
    #[error("the plugin status is not valid JSON: {0}")]
    Parse(#[source] serde_json::Error),
    /// The value serializes to JSON that is not an object.
    #[error("the plugin status must serialize to a JSON object, not to {found}")]
    NotAnObject {
        /// The JSON type found: `array`, `string`, `number`, `boolean` or `null`.
        found: &'static str,
    },
}

impl From<StatusError> for tonic::Status {
    fn from(err: StatusError) -> Self {
        tonic::Status::internal(crate::echo::bounded_string(err.to_string()))
    }
}

/// Set the plugin's status to `value`, which must serialize to a JSON object
/// (a struct, a map, or a [`serde_json::Value`] object).
///
/// # Errors
///
/// [`StatusError::NotAnObject`] when `value` serializes to anything but an
/// object (including `null`, e.g. for `None`), [`StatusError::Serialize`]
/// when it cannot be serialized.
///
/// ```
/// use cnpgi_core::status::{json_status, StatusError};
///
/// let err = json_status(&vec![1, 2]).unwrap_err();
/// assert_eq!(err.to_string(), "the plugin status must serialize to a JSON object, not to array");
/// assert_eq!(tonic::Status::from(err).code(), tonic::Code::Internal);
/// ```
pub fn json_status<T: Serialize + ?Sized>(value: &T) -> Result<SetStatusInClusterResponse, StatusError> {
    let value = serde_json::to_value(value).map_err(StatusError::Serialize)?;
    if !value.is_object() {
        return Err(StatusError::NotAnObject {
            found: json_type_name(&value),
        });
    }
    let json_status = serde_json::to_vec(&value).map_err(StatusError::Serialize)?;
    Ok(SetStatusInClusterResponse { json_status })
}

/// Parses a `json_status` (as found in an answer): `None` for "keep as is"
/// (empty bytes), otherwise the JSON object.
///
/// # Errors
///
/// [`StatusError::Parse`] when the bytes are not JSON,
/// [`StatusError::NotAnObject`] when they are JSON but not an
/// object.
///
/// ```
/// use cnpgi_core::status::{empty_object, no_op, parse_json_status};
///
/// assert_eq!(parse_json_status(&no_op().json_status)?, None);
/// assert_eq!(parse_json_status(&empty_object().json_status)?, Some(serde_json::json!({})));
/// # Ok::<(), cnpgi_core::status::StatusError>(())
/// ```
pub fn parse_json_status(json_status: &[u8]) -> Result<Option<Value>, StatusError> {
    if json_status.is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_slice(json_status).map_err(StatusError::Parse)?;
    if value.is_object() {
        Ok(Some(value))
    } else {
        Err(StatusError::NotAnObject {
            found: json_type_name(&value),
        })
    }
}

/// The entry an operator writes in `status.pluginStatus[]` for a plugin.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PluginStatusUpdate {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// Advertised services, as enum names ([`crate::capabilities::service_names`]).
    pub capabilities: Vec<String>,
    /// Advertised Operator RPCs, as enum names ([`crate::capabilities::operator_rpc_names`]).
    pub operator_capabilities: Vec<String>,
    /// Advertised WAL RPCs, as enum names (`TYPE_ARCHIVE_WAL`); written when not empty.
    pub wal_capabilities: Vec<String>,
    /// Advertised Backup RPCs, as enum names (`TYPE_BACKUP`); written when not empty.
    pub backup_capabilities: Vec<String>,
    /// RestoreJobHooks kinds, as enum names (`KIND_RESTORE`); written when not empty.
    pub restore_job_hook_capabilities: Vec<String>,
    /// The JSON object stored as `status`, as text: the plugin's answer, or
    /// the previous status when it answered empty; `None` when there is none.
    pub status: Option<String>,
}

impl PluginStatusUpdate {
    /// The typed `status.pluginStatus[]` entry, keeping `previous` (the
    /// entry's status before) when this update has no status.
    ///
    /// ```
    /// use cnpgi_core::status::PluginStatusUpdate;
    ///
    /// let update = PluginStatusUpdate { name: "p".into(), ..Default::default() };
    /// assert_eq!(update.into_status(Some(r#"{"k":1}"#)).status, r#"{"k":1}"#);
    /// ```
    pub fn into_status(self, previous: Option<&str>) -> crate::cluster::PluginStatus {
        crate::cluster::PluginStatus {
            status: self.status.unwrap_or_else(|| previous.unwrap_or_default().to_owned()),
            name: self.name,
            version: self.version,
            capabilities: self.capabilities,
            operator_capabilities: self.operator_capabilities,
            wal_capabilities: self.wal_capabilities,
            backup_capabilities: self.backup_capabilities,
            restore_job_hook_capabilities: self.restore_job_hook_capabilities,
            other: Default::default(),
        }
    }
}

/// `status.pluginStatus[].status` of `cluster`, by plugin name (non-empty ones).
///
/// ```
/// let cluster = serde_json::json!({"status": {"pluginStatus": [
///     {"name": "a", "status": "{\"k\":1}"}, {"name": "b", "status": ""}]}});
/// let previous = cnpgi_core::status::previous_statuses(&cluster);
/// assert_eq!(previous.get("a").map(String::as_str), Some("{\"k\":1}"));
/// assert!(!previous.contains_key("b"));
/// ```
pub fn previous_statuses(cluster: &Value) -> BTreeMap<&str, String> {
    cluster
        .pointer("/status/pluginStatus")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|entry| {
            let name = entry.get("name")?.as_str()?;
            let status = entry.get("status")?.as_str().filter(|s| !s.is_empty())?;
            Some((name, status.to_owned()))
        })
        .collect()
}

/// Replaces `status.pluginStatus` of `cluster` with `entries`, in
/// CloudNativePG's shape, creating `status` when missing. A `status` that is
/// not an object (a malformed Cluster) is replaced; a Cluster that is not an
/// object is left alone.
///
/// ```
/// use cnpgi_core::status::{write_plugin_status, PluginStatusUpdate};
///
/// let mut cluster = serde_json::json!({"spec": {}});
/// write_plugin_status(&mut cluster, &[PluginStatusUpdate {
///     name: "p.example.com".into(),
///     version: "1.0.0".into(),
///     capabilities: vec!["TYPE_OPERATOR_SERVICE".into()],
///     operator_capabilities: vec![],
///     wal_capabilities: vec![],
///     backup_capabilities: vec![],
///     restore_job_hook_capabilities: vec![],
///     status: None,
/// }]);
/// assert_eq!(cluster["status"]["pluginStatus"][0]["version"], "1.0.0");
/// ```
pub fn write_plugin_status(cluster: &mut Value, entries: &[PluginStatusUpdate]) {
    let entries: Vec<Value> = entries
        .iter()
        .map(|entry| {
            let mut object = serde_json::json!({
                "name": entry.name,
                "version": entry.version,
                "capabilities": entry.capabilities,
                "operatorCapabilities": entry.operator_capabilities,
            });
            // CloudNativePG omits these when empty.
            for (field, values) in [
                ("walCapabilities", &entry.wal_capabilities),
                ("backupCapabilities", &entry.backup_capabilities),
                ("restoreJobHookCapabilities", &entry.restore_job_hook_capabilities),
            ] {
                if !values.is_empty() {
                    object[field] = serde_json::json!(values);
                }
            }
            if let Some(status) = entry.status.as_ref().filter(|s| !s.is_empty()) {
                object["status"] = Value::String(status.clone());
            }
            object
        })
        .collect();
    let Some(root) = cluster.as_object_mut() else {
        return;
    };
    let status = root
        .entry("status")
        .and_modify(|s| {
            if !s.is_object() {
                *s = Value::Object(Default::default());
            }
        })
        .or_insert_with(|| Value::Object(Default::default()));
    if let Some(status) = status.as_object_mut() {
        status.insert("pluginStatus".to_owned(), Value::Array(entries));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::ser::Error as _;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Status {
        enabled: bool,
        last_archived_wal: Option<String>,
    }

    struct Unserializable;

    impl Serialize for Unserializable {
        fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
            Err(S::Error::custom("refused"))
        }
    }

    #[test]
    fn builders() {
        assert!(no_op().json_status.is_empty());
        assert_eq!(empty_object().json_status, b"{}".to_vec());
    }

    #[test]
    fn objects_are_accepted() {
        let answer = json_status(&Status {
            enabled: true,
            last_archived_wal: Some("000000010000000000000001".to_owned()),
        })
        .unwrap();
        let value: Value = serde_json::from_slice(&answer.json_status).unwrap();
        assert_eq!(
            value,
            json!({"enabled": true, "lastArchivedWal": "000000010000000000000001"})
        );
        let map = BTreeMap::from([("a", 1)]);
        assert_eq!(json_status(&map).unwrap().json_status, br#"{"a":1}"#.to_vec());
        assert_eq!(json_status(&json!({})).unwrap().json_status, b"{}".to_vec());
    }

    #[test]
    fn non_objects_are_rejected() {
        let cases: Vec<(Result<SetStatusInClusterResponse, StatusError>, &str)> = vec![
            (json_status(&[1, 2]), "array"),
            (json_status("text"), "string"),
            (json_status(&3), "number"),
            (json_status(&true), "boolean"),
            (json_status(&None::<Status>), "null"),
            (json_status(&()), "null"),
            (json_status(&json!(null)), "null"),
        ];
        for (result, found) in cases {
            match result {
                Err(StatusError::NotAnObject { found: f }) => assert_eq!(f, found),
                other => panic!("expected NotAnObject({found}), got {other:?}"),
            }
        }
    }

    #[test]
    fn serialization_errors_are_reported() {
        let err = json_status(&Unserializable).unwrap_err();
        assert!(matches!(err, StatusError::Serialize(_)));
        assert_eq!(err.to_string(), "cannot serialize the plugin status: refused");
        let status = tonic::Status::from(err);
        assert_eq!(status.code(), tonic::Code::Internal);
        assert_eq!(status.message(), "cannot serialize the plugin status: refused");
    }

    #[test]
    fn parse_round_trips() {
        assert_eq!(parse_json_status(b"").unwrap(), None);
        let answer = json_status(&json!({"x": [1]})).unwrap();
        assert_eq!(parse_json_status(&answer.json_status).unwrap(), Some(json!({"x": [1]})));
        assert!(matches!(
            parse_json_status(b"[]"),
            Err(StatusError::NotAnObject { found: "array" })
        ));
        assert!(matches!(parse_json_status(b"{"), Err(StatusError::Parse(_))));
    }

    #[test]
    fn the_other_services_capabilities_are_written_when_advertised() {
        let mut cluster = json!({});
        write_plugin_status(
            &mut cluster,
            &[PluginStatusUpdate {
                name: "w".into(),
                version: "1".into(),
                capabilities: vec!["TYPE_WAL_SERVICE".into(), "TYPE_RESTORE_JOB".into()],
                operator_capabilities: vec![],
                wal_capabilities: vec!["TYPE_ARCHIVE_WAL".into()],
                backup_capabilities: vec![],
                restore_job_hook_capabilities: vec!["KIND_RESTORE".into()],
                status: None,
            }],
        );
        let entry = &cluster["status"]["pluginStatus"][0];
        assert_eq!(entry["walCapabilities"], json!(["TYPE_ARCHIVE_WAL"]));
        assert_eq!(entry["restoreJobHookCapabilities"], json!(["KIND_RESTORE"]));
        assert!(
            entry.get("backupCapabilities").is_none(),
            "omitted when empty, as upstream"
        );
    }

    #[test]
    fn plugin_status_entries_replace_the_old_ones() {
        let entry = |name: &str, status: Option<&str>| PluginStatusUpdate {
            name: name.into(),
            version: "1.0".into(),
            capabilities: vec!["TYPE_OPERATOR_SERVICE".into()],
            operator_capabilities: vec!["TYPE_SET_STATUS_IN_CLUSTER".into()],
            wal_capabilities: Vec::new(),
            backup_capabilities: Vec::new(),
            restore_job_hook_capabilities: Vec::new(),
            status: status.map(str::to_owned),
        };
        let mut cluster = json!({"spec": {}, "status": {"phase": "x", "pluginStatus": [{"name": "old"}]}});
        write_plugin_status(&mut cluster, &[entry("a", Some("{\"k\":1}")), entry("b", None)]);
        assert_eq!(
            cluster["status"],
            json!({"phase": "x", "pluginStatus": [
                {"name": "a", "version": "1.0", "capabilities": ["TYPE_OPERATOR_SERVICE"],
                 "operatorCapabilities": ["TYPE_SET_STATUS_IN_CLUSTER"], "status": "{\"k\":1}"},
                {"name": "b", "version": "1.0", "capabilities": ["TYPE_OPERATOR_SERVICE"],
                 "operatorCapabilities": ["TYPE_SET_STATUS_IN_CLUSTER"]},
            ]})
        );
        assert_eq!(
            previous_statuses(&cluster).get("a").map(String::as_str),
            Some("{\"k\":1}")
        );
        assert_eq!(previous_statuses(&cluster).get("b"), None);

        // No status yet, or a status that is not an object: written anyway.
        for status in [json!(null), json!("text"), json!([1])] {
            let mut cluster = json!({"spec": {}, "status": status});
            write_plugin_status(&mut cluster, &[entry("a", None)]);
            assert_eq!(cluster["status"]["pluginStatus"][0]["name"], "a");
        }
        let mut cluster = json!({"spec": {}});
        write_plugin_status(&mut cluster, &[]);
        assert_eq!(cluster["status"], json!({"pluginStatus": []}));
        // Not an object at all: left alone, no panic.
        let mut not_a_cluster = json!([1, 2]);
        write_plugin_status(&mut not_a_cluster, &[entry("a", None)]);
        assert_eq!(not_a_cluster, json!([1, 2]));
    }
}
