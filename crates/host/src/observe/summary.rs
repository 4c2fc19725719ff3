//! Short summaries of what routing sends plugins and what they answer, one
//! line each, for [`RoutedCall`](super::RoutedCall): enough to follow a
//! pipeline (which object, which paths a patch touches, which fields are in
//! error), never the payload itself.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

/// At most this many items (paths, fields, keys) are listed; the rest are counted.
const LISTED: usize = 3;

/// A summary is cut at this many bytes (a plugin chooses its paths and keys).
const MAX_SUMMARY: usize = 240;

/// `items` joined with `, `, the first [`LISTED`] of them, then `+N more`.
fn list<S: AsRef<str>>(items: &[S]) -> String {
    let mut out = items
        .iter()
        .take(LISTED)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > LISTED {
        out.push_str(&format!(", +{} more", items.len() - LISTED));
    }
    out
}

/// `text` cut to [`MAX_SUMMARY`] bytes on a character boundary, with `…`.
fn short(mut text: String) -> String {
    if text.len() > MAX_SUMMARY {
        let mut end = MAX_SUMMARY;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

/// `n thing` or `n things`.
fn count(n: usize, thing: &str) -> String {
    if n == 1 {
        format!("1 {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// The object sent: `Kind namespace/name` (`Kind name` without a
/// namespace, `Kind (unnamed)` without a name, `object` without a kind).
pub(crate) fn object(value: &Value) -> String {
    let text = |pointer: &str| value.pointer(pointer).and_then(Value::as_str).filter(|s| !s.is_empty());
    let kind = text("/kind").unwrap_or("object");
    let name = match (text("/metadata/namespace"), text("/metadata/name")) {
        (Some(namespace), Some(name)) => format!("{namespace}/{name}"),
        (None, Some(name)) => name.to_owned(),
        (_, None) => "(unnamed)".to_owned(),
    };
    short(format!("{kind} {name}"))
}

/// [`object`] of JSON bytes (a reconciler hook's resource), or their size
/// when they are not a JSON object.
pub(crate) fn object_bytes(bytes: &[u8]) -> String {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(value) if value.is_object() => object(&value),
        _ => format!("{} bytes that are not a JSON object", bytes.len()),
    }
}

/// A JSON Patch answer: `no change`, or the number of operations, then
/// each `op path` (the first few).
pub(crate) fn patch(bytes: &[u8]) -> String {
    let patch = match cnpgi_core::patch::parse_patch(bytes) {
        Ok(patch) => patch,
        Err(error) => return short(format!("unusable patch: {error}")),
    };
    if patch.0.is_empty() {
        return "no change".to_owned();
    }
    let operations: Vec<String> = patch
        .0
        .iter()
        .map(|operation| {
            let op = match operation {
                json_patch::PatchOperation::Add(_) => "add",
                json_patch::PatchOperation::Remove(_) => "remove",
                json_patch::PatchOperation::Replace(_) => "replace",
                json_patch::PatchOperation::Move(_) => "move",
                json_patch::PatchOperation::Copy(_) => "copy",
                json_patch::PatchOperation::Test(_) => "test",
            };
            format!("{op} {}", operation.path())
        })
        .collect();
    short(format!("{}: {}", count(operations.len(), "op"), list(&operations)))
}

/// A validation answer: `valid`, or the number of errors and their fields.
pub(crate) fn validation(fields: &[String]) -> String {
    if fields.is_empty() {
        return "valid".to_owned();
    }
    short(format!("{}: {}", count(fields.len(), "error"), list(fields)))
}

/// A `SetStatusInCluster` answer: `no status` when empty (the previous one
/// is kept), else the keys of the status object.
pub(crate) fn status(bytes: &[u8]) -> String {
    match cnpgi_core::status::parse_json_status(bytes) {
        Ok(None) => "no status (the previous one is kept)".to_owned(),
        Ok(Some(Value::Object(fields))) if fields.is_empty() => "status {}".to_owned(),
        Ok(Some(Value::Object(fields))) => {
            let keys: Vec<&String> = fields.keys().collect();
            short(format!("status with {}", list(&keys)))
        }
        // `parse_json_status` refuses what is not an object.
        Ok(Some(other)) => short(format!("unusable status: {other}")),
        Err(error) => short(format!("unusable status: {error}")),
    }
}

/// `keys`, sorted (a `HashMap`'s order changes from run to run).
fn sorted<'a>(keys: impl Iterator<Item = &'a String>) -> Vec<&'a String> {
    let mut keys: Vec<&String> = keys.collect();
    keys.sort();
    keys
}

/// An `EnrichConfiguration` answer against the `original` parameters sent:
/// `no change` when empty, else what it added, changed and removed.
pub(crate) fn configuration(original: &HashMap<String, String>, answer: &HashMap<String, String>) -> String {
    if answer.is_empty() {
        return "no change".to_owned();
    }
    let added = sorted(answer.keys().filter(|k| !original.contains_key(*k)));
    let changed = sorted(
        answer
            .iter()
            .filter(|(k, v)| original.get(*k).is_some_and(|old| old != *v))
            .map(|(k, _)| k),
    );
    let removed = sorted(original.keys().filter(|k| !answer.contains_key(*k)));
    let mut parts = vec![count(answer.len(), "parameter")];
    for (what, keys) in [("added", added), ("changed", changed), ("removed", removed)] {
        if !keys.is_empty() {
            parts.push(format!("{what} {}", list(&keys)));
        }
    }
    if parts.len() == 1 {
        parts.push("none changed".to_owned());
    }
    short(parts.join("; "))
}

/// An `EnrichConfiguration` request: the parameters sent and the operation.
pub(crate) fn configuration_request(configs: &BTreeMap<String, String>, operation: &str, cluster: &Value) -> String {
    short(format!(
        "{}, {}, {operation}",
        object(cluster),
        count(configs.len(), "parameter")
    ))
}

/// A protocol enum's name without the prefix every value of its enum
/// repeats (`TYPE_`, `BEHAVIOR_`): `CREATE`, `SETUP`, `CONTINUE`.
pub(crate) fn enum_name(name: &str) -> &str {
    name.split_once('_').map_or(name, |(_, value)| value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn objects_are_named_by_kind_namespace_and_name() {
        assert_eq!(
            object(&json!({"kind": "Pod", "metadata": {"namespace": "db", "name": "pg-1"}})),
            "Pod db/pg-1"
        );
        assert_eq!(
            object(&json!({"kind": "Cluster", "metadata": {"name": "pg"}})),
            "Cluster pg"
        );
        assert_eq!(object(&json!({"kind": "Job"})), "Job (unnamed)");
        assert_eq!(object(&json!([1])), "object (unnamed)");
        assert_eq!(
            object_bytes(br#"{"kind":"Backup","metadata":{"name":"b"}}"#),
            "Backup b"
        );
        assert_eq!(object_bytes(b"\x00\x01"), "2 bytes that are not a JSON object");
    }

    #[test]
    fn patches_give_their_operations_and_paths() {
        assert_eq!(patch(b""), "no change");
        assert_eq!(patch(b"[]"), "no change");
        assert_eq!(
            patch(br#"[{"op":"add","path":"/metadata/labels/a","value":"1"}]"#),
            "1 op: add /metadata/labels/a"
        );
        let five = br#"[{"op":"add","path":"/a","value":1},{"op":"remove","path":"/b"},
            {"op":"replace","path":"/c","value":2},{"op":"test","path":"/d","value":3},
            {"op":"move","from":"/e","path":"/f"}]"#;
        assert_eq!(patch(five), "5 ops: add /a, remove /b, replace /c, +2 more");
        assert!(patch(b"{").starts_with("unusable patch: "), "{}", patch(b"{"));
    }

    #[test]
    fn validations_give_their_fields() {
        assert_eq!(validation(&[]), "valid");
        assert_eq!(
            validation(&["spec.plugins[0].parameters.labels".into()]),
            "1 error: spec.plugins[0].parameters.labels"
        );
    }

    #[test]
    fn statuses_give_their_keys() {
        assert_eq!(status(b""), "no status (the previous one is kept)");
        assert_eq!(status(b"{}"), "status {}");
        assert_eq!(status(br#"{"enabled":true,"lag":3}"#), "status with enabled, lag");
        assert_eq!(
            status(b"[1]"),
            "unusable status: the plugin status must serialize to a JSON object, not to array"
        );
        assert!(status(b"{").starts_with("unusable status: "));
    }

    #[test]
    fn configurations_give_what_changed() {
        let map = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        let original = map(&[("max_connections", "100"), ("wal_level", "replica")]);
        assert_eq!(configuration(&original, &HashMap::new()), "no change");
        assert_eq!(
            configuration(
                &original,
                &map(&[
                    ("max_connections", "100"),
                    ("wal_level", "logical"),
                    ("archive_timeout", "60s")
                ])
            ),
            "3 parameters; added archive_timeout; changed wal_level"
        );
        assert_eq!(
            configuration(&original, &map(&[("wal_level", "replica")])),
            "1 parameter; removed max_connections"
        );
        assert_eq!(configuration(&original, &original), "2 parameters; none changed");
    }

    #[test]
    fn summaries_are_short_whatever_the_plugin_answers() {
        let long_path = format!("/{}", "é".repeat(1_000));
        let answer = format!(r#"[{{"op":"add","path":"{long_path}","value":1}}]"#);
        let summary = patch(answer.as_bytes());
        assert!(summary.len() <= MAX_SUMMARY + '…'.len_utf8(), "{}", summary.len());
        assert!(summary.ends_with('…'));
        assert_eq!(enum_name("TYPE_CREATE"), "CREATE");
        assert_eq!(enum_name("BEHAVIOR_CONTINUE"), "CONTINUE");
        assert_eq!(enum_name("UNPREFIXED"), "UNPREFIXED");
    }
}
