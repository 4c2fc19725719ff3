//! RFC 6902 JSON Patches, as `MutateCluster` and lifecycle hooks answer them.
//!
//! A plugin decodes the object it receives, changes a copy, and answers with
//! the patch from the original to the copy; an **empty** answer means "no
//! change" ([`patch_bytes`]). The operator side applies the answers in turn
//! ([`parse_patch`] then [`patched`], or [`apply_patch_bytes`]).
//!
//! This is the one JSON Patch application of the project (the plugin SDK,
//! the operator's routing, the conformance suite and the tests use it). It
//! never panics, whatever the patch: operations are applied with
//! `json_patch::patch_unsafe` to a copy, which is dropped on error
//! (`json_patch::patch` undoes applied operations on failure and panics
//! when an undo fails, e.g. after a `move` into a path an earlier `add`
//! created, json-patch 4.2).
//!
//! ```
//! use cnpgi_core::patch::{apply_patch_bytes, patch_bytes};
//! use serde_json::json;
//!
//! let old = json!({"metadata": {"labels": {"app": "pg"}}});
//! let mut new = old.clone();
//! new["metadata"]["labels"]["app.kubernetes.io/name"] = json!("pg");
//!
//! let patch = patch_bytes(&old, &new)?;
//! assert_eq!(
//!     String::from_utf8_lossy(&patch),
//!     r#"[{"op":"add","path":"/metadata/labels/app.kubernetes.io~1name","value":"pg"}]"#,
//! );
//! assert!(patch_bytes(&old, &old)?.is_empty());
//!
//! let mut doc = old.clone();
//! apply_patch_bytes(&mut doc, &patch)?;
//! assert_eq!(doc, new);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, jsonptr::PointerBuf};
use serde_json::Value;

mod from_json;
#[cfg(test)]
mod strategies;

pub use from_json::{create_patch_from_json, patch_bytes_from_json};

/// The JSON Patch that turns `old` into `new` (empty when they are equal).
///
/// ```
/// use cnpgi_core::patch::create_patch;
/// use serde_json::json;
///
/// let patch = create_patch(&json!({"a": 1}), &json!({"a": 2}));
/// assert_eq!(serde_json::to_value(&patch)?, json!([{"op": "replace", "path": "/a", "value": 2}]));
/// # Ok::<(), serde_json::Error>(())
/// ```
pub fn create_patch(old: &Value, new: &Value) -> Patch {
    let mut patch = Patch::default();
    diff_into(old, new, &mut PointerBuf::new(), &mut patch);
    patch
}

/// The operations `json_patch::diff` gives, in the same order, found
/// faster: equal subtrees are skipped by comparing them (no allocation)
/// instead of being walked with a JSON pointer built for every key, so the
/// cost of diffing a Pod a hook changed in two places is mostly one
/// comparison of the Pod. Kept equal to `json_patch::diff` by a property
/// test.
fn diff_into(old: &Value, new: &Value, at: &mut PointerBuf, patch: &mut Patch) {
    let add = |at: &PointerBuf, value: &Value| {
        PatchOperation::Add(AddOperation {
            path: at.clone(),
            value: value.clone(),
        })
    };
    let remove = |at: &PointerBuf| PatchOperation::Remove(RemoveOperation { path: at.clone() });
    match (old, new) {
        (Value::Object(old), Value::Object(new)) => {
            for (key, new_value) in new {
                match old.get(key) {
                    Some(old_value) if old_value == new_value => {}
                    Some(old_value) => {
                        at.push_back(key);
                        diff_into(old_value, new_value, at, patch);
                        at.pop_back();
                    }
                    None => {
                        at.push_back(key);
                        patch.0.push(add(at, new_value));
                        at.pop_back();
                    }
                }
            }
            for key in old.keys().filter(|key| !new.contains_key(*key)) {
                at.push_back(key);
                patch.0.push(remove(at));
                at.pop_back();
            }
        }
        (Value::Array(old), Value::Array(new)) => {
            for (index, (old_item, new_item)) in old.iter().zip(new).enumerate() {
                if old_item != new_item {
                    at.push_back(index);
                    diff_into(old_item, new_item, at, patch);
                    at.pop_back();
                }
            }
            // Items past the end of `new` are removed one by one at the
            // same index; items past the end of `old` are added in order.
            at.push_back(new.len());
            for _ in new.len()..old.len() {
                patch.0.push(remove(at));
            }
            at.pop_back();
            for (index, new_item) in new.iter().enumerate().skip(old.len()) {
                at.push_back(index);
                patch.0.push(add(at, new_item));
                at.pop_back();
            }
        }
        _ if old == new => {}
        _ => patch.0.push(PatchOperation::Replace(ReplaceOperation {
            path: at.clone(),
            value: new.clone(),
        })),
    }
}

/// The serialized JSON Patch that turns `old` into `new`, or **empty bytes**
/// when they are equal (CNPG-I's "no change").
///
/// # Errors
///
/// The `serde_json` error if the patch cannot be serialized (not expected
/// for patches between JSON values).
pub fn patch_bytes(old: &Value, new: &Value) -> Result<Vec<u8>, serde_json::Error> {
    let patch = create_patch(old, new);
    if patch.0.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::to_vec(&patch)
}

/// A JSON Patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The bytes are not a JSON Patch (not JSON, not an array, or an
    /// operation without the fields its `op` needs).
    #[error("not an RFC 6902 JSON Patch: {source}")]
    Malformed {
        /// The `serde_json` error.
        #[source]
        source: serde_json::Error,
    },
    /// An operation of a well-formed patch does not apply to the document.
    #[error(
        "JSON patch operation {index} ({op} at {path:?}) does not apply: {}",
        .source.kind
    )]
    Apply {
        /// Position of the failing operation in the patch, from 0.
        index: usize,
        /// The failing operation: `add`, `remove`, `replace`, `move`, `copy`
        /// or `test`.
        op: &'static str,
        /// The operation's `path`, a JSON pointer.
        path: String,
        /// The `json_patch` error.
        #[source]
        source: json_patch::PatchError,
    },
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

/// Parses a serialized JSON Patch, as a plugin answers it; empty bytes are
/// the empty patch ("no change").
///
/// # Errors
///
/// [`PatchError::Malformed`] when `bytes` are not a JSON Patch.
///
/// ```
/// use cnpgi_core::patch::parse_patch;
///
/// assert!(parse_patch(b"")?.0.is_empty());
/// assert_eq!(parse_patch(br#"[{"op":"remove","path":"/a"}]"#)?.0.len(), 1);
/// assert!(parse_patch(b"{").is_err());
/// # Ok::<(), cnpgi_core::patch::PatchError>(())
/// ```
pub fn parse_patch(bytes: &[u8]) -> Result<Patch, PatchError> {
    if bytes.is_empty() {
        return Ok(Patch(Vec::new()));
    }
    crate::json::from_bytes(bytes).map_err(|source| PatchError::Malformed { source })
}

/// `object` with `patch` applied, as a new value; `object` is left as it is.
/// Never panics, whatever the patch (see the module documentation).
///
/// # Errors
///
/// [`PatchError::Apply`] naming the operation that failed.
///
/// ```
/// use cnpgi_core::patch::{parse_patch, patched};
/// use serde_json::json;
///
/// let object = json!({"a": 1});
/// let patch = parse_patch(br#"[{"op":"add","path":"/b","value":2}]"#)?;
/// assert_eq!(patched(&object, &patch)?, json!({"a": 1, "b": 2}));
/// # Ok::<(), cnpgi_core::patch::PatchError>(())
/// ```
pub fn patched(object: &Value, patch: &Patch) -> Result<Value, PatchError> {
    let mut copy = object.clone();
    apply_unchecked(&mut copy, patch)?;
    Ok(copy)
}

/// Applies `patch` to `doc` in place, without the copy that makes
/// [`apply_patch`] atomic: on error `doc` may hold the operations before the
/// failed one. For a caller that drops `doc` on error (a chain that fails
/// as a whole). Never panics.
///
/// # Errors
///
/// [`PatchError::Apply`] naming the operation that failed.
///
/// ```
/// use cnpgi_core::patch::{apply_unchecked, parse_patch};
/// use serde_json::json;
///
/// let mut doc = json!({"a": 1});
/// apply_unchecked(&mut doc, &parse_patch(br#"[{"op":"add","path":"/b","value":2}]"#)?)?;
/// assert_eq!(doc, json!({"a": 1, "b": 2}));
/// # Ok::<(), cnpgi_core::patch::PatchError>(())
/// ```
pub fn apply_unchecked(doc: &mut Value, patch: &Patch) -> Result<(), PatchError> {
    json_patch::patch_unsafe(doc, patch).map_err(|source| {
        let op = patch.0.get(source.operation);
        PatchError::Apply {
            index: source.operation,
            op: op.map_or("unknown", op_name),
            path: source.path.to_string(),
            source,
        }
    })
}

/// Applies a serialized JSON Patch to `doc`; empty bytes are a no-op.
///
/// The patch applies atomically: on error `doc` is left exactly as it was.
///
/// # Errors
///
/// [`PatchError::Malformed`] when `patch` is not a JSON Patch,
/// [`PatchError::Apply`] naming the operation that failed otherwise.
///
/// ```
/// use cnpgi_core::patch::{apply_patch_bytes, PatchError};
/// use serde_json::json;
///
/// let mut doc = json!({"a": 1});
/// let err = apply_patch_bytes(
///     &mut doc,
///     br#"[{"op":"replace","path":"/a","value":2},{"op":"remove","path":"/b"}]"#,
/// )
/// .unwrap_err();
/// assert!(matches!(err, PatchError::Apply { index: 1, op: "remove", .. }));
/// assert_eq!(doc, json!({"a": 1})); // unchanged
/// ```
pub fn apply_patch_bytes(doc: &mut Value, patch: &[u8]) -> Result<(), PatchError> {
    if patch.is_empty() {
        return Ok(());
    }
    apply_patch(doc, &parse_patch(patch)?)
}

/// Applies a JSON Patch to `doc`, atomically (see [`apply_patch_bytes`]).
///
/// # Errors
///
/// [`PatchError::Apply`] naming the operation that failed.
pub fn apply_patch(doc: &mut Value, patch: &Patch) -> Result<(), PatchError> {
    *doc = patched(doc, patch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pairs() -> Vec<(Value, Value)> {
        vec![
            (json!({}), json!({})),
            (json!({}), json!({"a": 1})),
            (json!({"a": 1}), json!({})),
            (json!({"a": 1}), json!({"a": "1"})),
            (
                json!({"metadata": {"labels": {"app.kubernetes.io/name": "x"}}}),
                json!({"metadata": {"labels": {"app.kubernetes.io/name": "y", "a~b": "z"}}}),
            ),
            (json!({"a~b": {"c/d": 1}}), json!({"a~b": {"c/d": 2, "~0": true}})),
            (json!({"": 1}), json!({"": 2, " ": 3})),
            (json!({"list": [1, 2, 3]}), json!({"list": [1, 3]})),
            (json!({"list": [1, 2, 3]}), json!({"list": [0, 1, 2, 3, 4]})),
            (
                json!({"list": [{"n": "a"}, {"n": "b"}]}),
                json!({"list": [{"n": "b", "x": 1}]}),
            ),
            (
                json!({"a": {"b": {"c": [1, {"d": null}]}}}),
                json!({"a": {"b": {"c": [1, {"d": false}], "e": []}}}),
            ),
            (json!({"a": [1]}), json!({"a": {"0": 1}})),
            (json!({"a": {"0": 1}}), json!({"a": [1]})),
            (json!([1, 2]), json!({"x": 1})),
            (json!("s"), json!(null)),
            (
                json!({"spec": {"containers": [{"name": "postgres"}]}, "status": {}}),
                json!({"spec": {"containers": [{"name": "postgres"}, {"name": "side", "restartPolicy": "Always"}], "volumes": [{"name": "plugins", "emptyDir": {}}]}}),
            ),
        ]
    }

    #[test]
    fn applying_the_created_patch_gives_new() {
        for (old, new) in pairs() {
            let mut doc = old.clone();
            json_patch::patch(&mut doc, &create_patch(&old, &new)).unwrap();
            assert_eq!(doc, new, "{old} -> {new}");

            let bytes = patch_bytes(&old, &new).unwrap();
            assert_eq!(bytes.is_empty(), old == new, "{old} -> {new}");
            let mut doc = old.clone();
            apply_patch_bytes(&mut doc, &bytes).unwrap();
            assert_eq!(doc, new, "{old} -> {new}");
        }
    }

    #[test]
    fn pointer_escaping() {
        let old = json!({"labels": {}});
        let new = json!({"labels": {"app.kubernetes.io/name": "v", "a~b": "w"}});
        let text = String::from_utf8(patch_bytes(&old, &new).unwrap()).unwrap();
        assert!(text.contains(r#""path":"/labels/app.kubernetes.io~1name""#), "{text}");
        assert!(text.contains(r#""path":"/labels/a~0b""#), "{text}");
    }

    #[test]
    fn empty_patch_is_a_no_op() {
        let mut doc = json!({"a": 1});
        apply_patch_bytes(&mut doc, b"").unwrap();
        apply_patch_bytes(&mut doc, b"[]").unwrap();
        assert_eq!(doc, json!({"a": 1}));
    }

    #[test]
    fn malformed_patches() {
        for bytes in [
            &b" "[..],
            b"{",
            b"{}",
            b"null",
            br#"[{"op":"jump","path":"/a"}]"#,
            br#"[{"op":"add","path":"/a"}]"#,
        ] {
            let mut doc = json!({"a": 1});
            let err = apply_patch_bytes(&mut doc, bytes).unwrap_err();
            assert!(matches!(err, PatchError::Malformed { .. }), "{err:?}");
            assert!(err.to_string().starts_with("not an RFC 6902 JSON Patch: "), "{err}");
            assert_eq!(doc, json!({"a": 1}));
        }
    }

    #[test]
    fn failing_operation_is_named_and_doc_unchanged() {
        let original = json!({"a": {"b": [1, 2]}, "c": "d"});
        let cases: &[(&str, usize, &str, &str)] = &[
            (r#"[{"op":"remove","path":"/x"}]"#, 0, "remove", "/x"),
            (
                r#"[{"op":"add","path":"/new","value":1},{"op":"replace","path":"/a/b/5","value":0}]"#,
                1,
                "replace",
                "/a/b/5",
            ),
            (
                r#"[{"op":"remove","path":"/c"},{"op":"add","path":"/a/b/-","value":3},{"op":"test","path":"/a/b/0","value":9}]"#,
                2,
                "test",
                "/a/b/0",
            ),
            (
                r#"[{"op":"add","path":"/a/b/0","value":0},{"op":"move","from":"/nope","path":"/z"}]"#,
                1,
                "move",
                "/z",
            ),
            (r#"[{"op":"copy","from":"/a","path":"/q/r"}]"#, 0, "copy", "/q/r"),
            (r#"[{"op":"add","path":"/c/x","value":1}]"#, 0, "add", "/c/x"),
        ];
        for (patch, index, op, path) in cases {
            let mut doc = original.clone();
            let err = apply_patch_bytes(&mut doc, patch.as_bytes()).unwrap_err();
            match &err {
                PatchError::Apply {
                    index: i,
                    op: o,
                    path: p,
                    ..
                } => {
                    assert_eq!((*i, *o, p.as_str()), (*index, *op, *path), "{patch}");
                }
                other => panic!("{patch}: unexpected {other:?}"),
            }
            assert!(
                err.to_string().starts_with(&format!(
                    "JSON patch operation {index} ({op} at \"{path}\") does not apply: "
                )),
                "{err}"
            );
            assert_eq!(doc, original, "{patch} changed the document");
        }
    }

    #[test]
    fn patches_apply_in_sequence() {
        let mut doc = json!({"a": [1]});
        apply_patch_bytes(
            &mut doc,
            br#"[{"op":"add","path":"/a/-","value":2},{"op":"copy","from":"/a","path":"/b"},{"op":"move","from":"/a/0","path":"/first"},{"op":"test","path":"/b","value":[1,2]}]"#,
        )
        .unwrap();
        assert_eq!(doc, json!({"a": [2], "b": [1, 2], "first": 1}));
    }
}

/// Property tests: no patch, however odd, makes [`patched`] panic, and a
/// failed patch leaves the object as it was; [`create_patch`] is
/// `json_patch::diff`.
#[cfg(test)]
mod never_panics {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{apply_patch_bytes, create_patch, parse_patch, patched, strategies::any_json};

    fn any_path() -> impl Strategy<Value = String> {
        prop_oneof![Just(String::new()), "(/[a-c0-2~-]{0,2}){0,3}"]
    }

    fn any_patch() -> impl Strategy<Value = Vec<u8>> {
        let op = (
            prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test"]),
            any_path(),
            any_path(),
            any_json(),
        )
            .prop_map(|(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}));
        prop::collection::vec(op, 0..5).prop_map(|ops| Value::from(ops).to_string().into_bytes())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn patching_never_panics(object in any_json(), patch in any_patch()) {
            let outcome = std::panic::catch_unwind(|| {
                let mut doc = object.clone();
                let Ok(parsed) = parse_patch(&patch) else {
                    // A malformed JSON pointer (`~` not followed by 0 or 1).
                    assert!(apply_patch_bytes(&mut doc, &patch).is_err());
                    assert_eq!(doc, object);
                    return;
                };
                let result = patched(&object, &parsed);
                let applied = apply_patch_bytes(&mut doc, &patch);
                assert_eq!(result.is_ok(), applied.is_ok());
                match result {
                    Ok(value) => assert_eq!(value, doc),
                    Err(_) => assert_eq!(doc, object, "a failed patch changed the document"),
                }
            });
            prop_assert!(outcome.is_ok(), "panicked on {}", String::from_utf8_lossy(&patch));
        }

        /// [`create_patch`] answers exactly what `json_patch::diff` does,
        /// between a document and itself changed by a random patch (related
        /// documents, as a hook makes them) or another random document.
        #[test]
        fn diff_is_json_patch_diff(old in any_json(), patch in any_patch(), other in any_json()) {
            let new = parse_patch(&patch)
                .ok()
                .and_then(|parsed| patched(&old, &parsed).ok())
                .unwrap_or(other);
            let ours = create_patch(&old, &new);
            prop_assert_eq!(&ours, &json_patch::diff(&old, &new));
            prop_assert_eq!(patched(&old, &ours).ok(), Some(new));
        }
    }

    /// json-patch 4.2's `patch` panics undoing this one (found by a
    /// property test): the failing `remove` makes it undo the `move` and the
    /// `copy`, and an undo fails.
    #[test]
    fn an_undo_that_would_panic_is_an_error() {
        let object = json!({"a": {"b": [1]}, "b": [1, 2]});
        let patch = parse_patch(
            br#"[{"op":"copy","from":"","path":"/0"},{"op":"move","from":"/0","path":""},{"op":"remove","path":""}]"#,
        )
        .unwrap();
        let mut copy = object.clone();
        let undo_panics = std::panic::catch_unwind(move || json_patch::patch(&mut copy, &patch).is_ok()).is_err();
        assert!(
            undo_panics,
            "json_patch::patch no longer panics here; keep patch_unsafe anyway"
        );
        let patch = parse_patch(
            br#"[{"op":"copy","from":"","path":"/0"},{"op":"move","from":"/0","path":""},{"op":"remove","path":""}]"#,
        )
        .unwrap();
        let result = patched(&object, &patch);
        assert!(
            matches!(
                result,
                Err(super::PatchError::Apply {
                    index: 2,
                    op: "remove",
                    ..
                })
            ),
            "{result:?}"
        );
    }
}
