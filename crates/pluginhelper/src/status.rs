//! Answers to `SetStatusInCluster`.
//!
//! The answer's `json_status` becomes the plugin's `status` in the Cluster's
//! `status.pluginStatus[]`. It must be a JSON object; **empty** bytes mean
//! "keep the status as it is". These builders mirror cnpg-i-machinery's
//! `clusterstatus` package.
//!
//! ```
//! use cnpgi_pluginhelper::status;
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
//! # Ok::<(), cnpgi_pluginhelper::status::StatusError>(())
//! ```

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
        tonic::Status::internal(cnpgi_proto::echo::bounded_string(err.to_string()))
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
/// use cnpgi_pluginhelper::status::{json_status, StatusError};
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
/// use cnpgi_pluginhelper::status::{empty_object, no_op, parse_json_status};
///
/// assert_eq!(parse_json_status(&no_op().json_status)?, None);
/// assert_eq!(parse_json_status(&empty_object().json_status)?, Some(serde_json::json!({})));
/// # Ok::<(), cnpgi_pluginhelper::status::StatusError>(())
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
}
