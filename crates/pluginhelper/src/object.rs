//! Editing Kubernetes objects as JSON, as lifecycle hooks receive them.

use serde_json::{Map, Value};

use cnpgi_core::cluster::json_type_name;

/// A field on the way is not a JSON object.
///
/// Converts into `INVALID_ARGUMENT`: the object sent is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} is not a JSON object but {found}")]
pub struct NotAnObject {
    /// The field, dotted (`metadata.labels`; `the object` for the root).
    pub path: String,
    /// The JSON type found.
    pub found: &'static str,
}

impl From<NotAnObject> for tonic::Status {
    fn from(err: NotAnObject) -> Self {
        tonic::Status::invalid_argument(cnpgi_core::echo::bounded_string(err.to_string()))
    }
}

/// The object at `path` in `value`, with every missing (or `null`) object on
/// the way created.
///
/// # Errors
///
/// [`NotAnObject`] when `value`, or a field on the way, holds something else.
///
/// ```
/// use cnpgi_pluginhelper::object::object_mut;
/// use serde_json::json;
///
/// let mut pod = json!({"metadata": {"name": "pg-1", "labels": null}});
/// object_mut(&mut pod, &["metadata", "labels"])?.insert("team".into(), "db".into());
/// assert_eq!(pod["metadata"]["labels"], json!({"team": "db"}));
/// assert!(object_mut(&mut pod, &["metadata", "name"]).is_err());
/// # Ok::<(), cnpgi_pluginhelper::object::NotAnObject>(())
/// ```
pub fn object_mut<'a>(value: &'a mut Value, path: &[&str]) -> Result<&'a mut Map<String, Value>, NotAnObject> {
    let mut current = value;
    let mut depth = 0;
    loop {
        if depth > 0 && current.is_null() {
            *current = Value::Object(Map::new());
        }
        let Value::Object(object) = current else {
            return Err(not_an_object(path, depth, current));
        };
        let Some(field) = path.get(depth) else {
            return Ok(object);
        };
        current = object.entry(*field).or_insert(Value::Null);
        depth += 1;
    }
}

fn not_an_object(path: &[&str], depth: usize, found: &Value) -> NotAnObject {
    NotAnObject {
        path: if depth == 0 {
            "the object".to_owned()
        } else {
            path[..depth].join(".")
        },
        found: json_type_name(found),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn creates_missing_objects_and_names_the_wrong_field() {
        let mut value = json!({});
        object_mut(&mut value, &["a", "b"])
            .unwrap()
            .insert("c".into(), json!(1));
        assert_eq!(value, json!({"a": {"b": {"c": 1}}}));
        assert!(object_mut(&mut value, &[]).unwrap().contains_key("a"));

        let mut value = json!({"a": [1]});
        let err = object_mut(&mut value, &["a", "b"]).unwrap_err();
        assert_eq!(err.to_string(), "a is not a JSON object but array");
        assert_eq!(tonic::Status::from(err).code(), tonic::Code::InvalidArgument);

        let mut value = json!("text");
        let err = object_mut(&mut value, &["a"]).unwrap_err();
        assert_eq!(err.to_string(), "the object is not a JSON object but string");
        let mut value = Value::Null;
        assert!(object_mut(&mut value, &[]).is_err(), "the root is never created");
    }
}
