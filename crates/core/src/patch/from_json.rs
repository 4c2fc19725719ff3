//! The diff of [`create_patch`](super::create_patch), read from the old
//! document's JSON text instead of a decoded copy of it.
//!
//! A lifecycle hook receives the Pod as JSON and must answer the patch from
//! that Pod to the one it makes. Keeping a decoded copy to diff against cost
//! a deep clone, its comparison and its drop on every call: more than half
//! of what a hook added to a routed call (BENCHMARKS.md). Here the received
//! bytes are parsed a second time beside the edited value, without
//! allocating: strings and keys are borrowed from the input, skipped
//! subtrees are not built, and only the operations themselves allocate.

use std::{borrow::Cow, fmt, ops::Range};

use json_patch::{AddOperation, Patch, PatchOperation, RemoveOperation, ReplaceOperation, jsonptr::PointerBuf};
use serde::{
    Serialize, Serializer,
    de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor},
    ser::SerializeStruct,
};
use serde_json::{Map, Number, Value};

use crate::json::Reader;

/// The JSON Patch that turns the JSON document `old` into `new`: exactly
/// what [`create_patch`](super::create_patch) answers for `old` decoded,
/// operation for operation, without decoding it.
///
/// ```
/// use cnpgi_core::patch::{create_patch, create_patch_from_json};
/// use serde_json::json;
///
/// let received = br#"{"metadata": {"name": "pg-1"}, "spec": {"containers": []}}"#;
/// let mut pod: serde_json::Value = serde_json::from_slice(received)?;
/// pod["metadata"]["labels"] = json!({"app": "pg"});
///
/// let patch = create_patch_from_json(received, &pod)?;
/// assert_eq!(patch, create_patch(&serde_json::from_slice(received)?, &pod));
/// # Ok::<(), serde_json::Error>(())
/// ```
///
/// # Errors
///
/// `old` is not one JSON document, or an object in it repeats a key (the
/// operator sends neither).
pub fn create_patch_from_json(old: &[u8], new: &Value) -> Result<Patch, serde_json::Error> {
    Ok(Patch(walk(old, new)?.into_iter().map(Op::into_owned).collect()))
}

/// The operations from `old` to `new`, their values borrowed from `new`.
fn walk<'n>(old: &[u8], new: &'n Value) -> Result<Vec<Op<'n>>, serde_json::Error> {
    match crate::json::reader(old) {
        Reader::Text(reader) => walk_with(reader, new),
        Reader::Bytes(reader) => walk_with(reader, new),
    }
}

fn walk_with<'de, 'n, R: serde_json::de::Read<'de>>(
    mut reader: serde_json::Deserializer<R>,
    new: &'n Value,
) -> Result<Vec<Op<'n>>, serde_json::Error> {
    let mut walk = Walk::default();
    Node { walk: &mut walk, new }.deserialize(&mut reader)?;
    reader.end()?;
    Ok(walk.patch)
}

/// The serialized JSON Patch that turns the JSON document `old` into `new`,
/// or **empty bytes** when they are equal: [`patch_bytes`](super::patch_bytes)
/// for the bytes a hook received.
///
/// # Errors
///
/// As [`create_patch_from_json`].
pub fn patch_bytes_from_json(old: &[u8], new: &Value) -> Result<Vec<u8>, serde_json::Error> {
    // Serialized from the borrowed operations: the values a hook added are
    // not copied into the patch first.
    let ops = walk(old, new)?;
    if ops.is_empty() {
        return Ok(Vec::new());
    }
    serde_json::to_vec(&ops)
}

/// One step of the path from the document's root.
enum Step<'de> {
    Key(Cow<'de, str>),
    Index(usize),
}

/// What the walk carries down: where it is, the keys of the objects it is
/// in, and the operations so far.
#[derive(Default)]
struct Walk<'de, 'n> {
    path: Vec<Step<'de>>,
    /// The keys met so far in each enclosing object, innermost last (one
    /// stack for the whole walk, so that objects allocate nothing).
    keys: Vec<Cow<'de, str>>,
    patch: Vec<Op<'n>>,
}

impl<'n> Walk<'_, 'n> {
    /// The JSON pointer of the current place, then `last` if given.
    fn pointer(&self, last: Option<&Step<'_>>) -> PointerBuf {
        let mut pointer = PointerBuf::new();
        for step in self.path.iter().chain(last) {
            match step {
                Step::Key(key) => pointer.push_back(&**key),
                Step::Index(index) => pointer.push_back(*index),
            }
        }
        pointer
    }

    fn replace(&mut self, new: &'n Value) {
        let path = self.pointer(None);
        self.patch.push(Op::Replace(path, new));
    }

    fn add(&mut self, last: Step<'_>, value: &'n Value) {
        let path = self.pointer(Some(&last));
        self.patch.push(Op::Add(path, value));
    }

    fn remove(&mut self, last: Step<'_>) {
        let path = self.pointer(Some(&last));
        self.patch.push(Op::Remove(path));
    }
}

/// A JSON Patch operation whose value is borrowed from the edited document.
enum Op<'n> {
    Add(PointerBuf, &'n Value),
    Remove(PointerBuf),
    Replace(PointerBuf, &'n Value),
}

impl Op<'_> {
    fn into_owned(self) -> PatchOperation {
        match self {
            Op::Add(path, value) => PatchOperation::Add(AddOperation {
                path,
                value: value.clone(),
            }),
            Op::Remove(path) => PatchOperation::Remove(RemoveOperation { path }),
            Op::Replace(path, value) => PatchOperation::Replace(ReplaceOperation {
                path,
                value: value.clone(),
            }),
        }
    }
}

/// As json-patch serializes a `PatchOperation`: `op`, `path`, then `value`.
impl Serialize for Op<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let (op, path, value) = match self {
            Op::Add(path, value) => ("add", path, Some(value)),
            Op::Remove(path) => ("remove", path, None),
            Op::Replace(path, value) => ("replace", path, Some(value)),
        };
        let mut fields = serializer.serialize_struct("PatchOperation", 2 + usize::from(value.is_some()))?;
        fields.serialize_field("op", op)?;
        fields.serialize_field("path", path)?;
        if let Some(value) = value {
            fields.serialize_field("value", value)?;
        }
        fields.end()
    }
}

/// The old value at the walk's place, compared with `new` as it is read.
struct Node<'w, 'de, 'n> {
    walk: &'w mut Walk<'de, 'n>,
    new: &'n Value,
}

impl<'n> Node<'_, '_, 'n> {
    fn scalar(self, old: &Value) {
        if old != self.new {
            self.walk.replace(self.new);
        }
    }

    fn string(self, old: &str) {
        if self.new.as_str() != Some(old) {
            self.walk.replace(self.new);
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_, 'de, '_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, 'de, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.scalar(&Value::Null);
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.scalar(&Value::Bool(v));
        Ok(())
    }

    // Numbers become what `serde_json::Value` would decode them to, so that
    // they compare as in `create_patch`.
    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.scalar(&Value::from(v));
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.scalar(&Value::from(v));
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.scalar(&Number::from_f64(v).map_or(Value::Null, Value::Number));
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.string(v);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Value::Array(items) = self.new else {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            self.walk.replace(self.new);
            return Ok(());
        };
        let mut len = 0;
        loop {
            let more = match items.get(len) {
                Some(item) => {
                    self.walk.path.push(Step::Index(len));
                    let more = seq.next_element_seed(Node {
                        walk: &mut *self.walk,
                        new: item,
                    })?;
                    self.walk.path.pop();
                    more.is_some()
                }
                None => seq.next_element::<IgnoredAny>()?.is_some(),
            };
            if !more {
                break;
            }
            len += 1;
        }
        // As `create_patch`: items past the end of `new` are removed one by
        // one at the same index; items past the end of `old` are added.
        for _ in items.len()..len {
            self.walk.remove(Step::Index(items.len()));
        }
        for (index, item) in items.iter().enumerate().skip(len) {
            self.walk.add(Step::Index(index), item);
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Value::Object(fields) = self.new else {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            self.walk.replace(self.new);
            return Ok(());
        };
        let walk = self.walk;
        let (keys_start, ops_start) = (walk.keys.len(), walk.patch.len());
        // The operations of each changed key, in the order read; and the
        // keys `new` no longer has.
        let mut changed: Vec<(Cow<'de, str>, Range<usize>)> = Vec::new();
        let mut removed: Vec<Cow<'de, str>> = Vec::new();
        // Text the operator encoded has its keys in `new`'s order (sorted),
        // so the next field is usually the one read: one comparison instead
        // of a search of the map.
        let mut next_fields = fields.iter();
        let mut next_field = next_fields.next();
        while let Some(key) = map.next_key_seed(KeySeed)? {
            if walk.keys[keys_start..].contains(&key) {
                return Err(de::Error::custom(format_args!("duplicate key `{key}`")));
            }
            let value = match next_field {
                Some((name, value)) if *name == *key => {
                    next_field = next_fields.next();
                    Some(value)
                }
                // One key `new` added before this one (a hook's new label).
                _ => {
                    let mut ahead = next_fields.clone();
                    match ahead.next() {
                        Some((name, value)) if *name == *key => {
                            next_fields = ahead;
                            next_field = next_fields.next();
                            Some(value)
                        }
                        _ => fields.get(&*key),
                    }
                }
            };
            match value {
                Some(value) => {
                    let before = walk.patch.len();
                    walk.path.push(Step::Key(key.clone()));
                    map.next_value_seed(Node {
                        walk: &mut *walk,
                        new: value,
                    })?;
                    walk.path.pop();
                    if walk.patch.len() > before {
                        changed.push((key.clone(), before..walk.patch.len()));
                    }
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                    removed.push(key.clone());
                }
            }
            walk.keys.push(key);
        }
        let present = walk.keys.len() - keys_start - removed.len();
        if changed.len() > 1 || present < fields.len() || !removed.is_empty() {
            order_like_create_patch(walk, fields, keys_start, ops_start, changed, removed);
        }
        walk.keys.truncate(keys_start);
        Ok(())
    }
}

/// Puts an object's operations in `create_patch`'s order: `new`'s keys in
/// its map order (the operations of a changed key, or the addition of a new
/// one), then the removals in the order the old map would iterate them.
fn order_like_create_patch<'de, 'n>(
    walk: &mut Walk<'de, 'n>,
    fields: &'n Map<String, Value>,
    keys_start: usize,
    ops_start: usize,
    changed: Vec<(Cow<'de, str>, Range<usize>)>,
    removed: Vec<Cow<'de, str>>,
) {
    let mut read: Vec<Option<Op<'n>>> = walk.patch.drain(ops_start..).map(Some).collect();
    for (key, value) in fields {
        if let Some((_, range)) = changed.iter().find(|(changed, _)| changed == key) {
            let ops = &mut read[range.start - ops_start..range.end - ops_start];
            walk.patch.extend(ops.iter_mut().filter_map(Option::take));
        } else if !walk.keys[keys_start..].iter().any(|old| old == key) {
            walk.add(Step::Key(Cow::Borrowed(key)), value);
        }
    }
    // A map of the removed keys iterates them as the old document's decoded
    // map would: sorted, or as read under serde_json's `preserve_order`.
    let removed: Map<String, Value> = removed.into_iter().map(|key| (key.into_owned(), Value::Null)).collect();
    for key in removed.keys() {
        walk.remove(Step::Key(Cow::Borrowed(key)));
    }
}

/// An object key, borrowed from the input unless it had escapes.
struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
        Ok(Cow::Owned(v))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::{create_patch_from_json, patch_bytes_from_json};
    use crate::patch::{create_patch, parse_patch, patch_bytes, patched, strategies::any_json};

    /// `value` as JSON text with every object's keys in reverse order, as
    /// a Go encoder's struct order differs from serde_json's sorted maps.
    fn reversed_json(value: &Value) -> String {
        match value {
            Value::Object(map) => {
                let fields: Vec<String> = map
                    .iter()
                    .rev()
                    .map(|(key, value)| format!("{}:{}", Value::from(key.as_str()), reversed_json(value)))
                    .collect();
                format!("{{{}}}", fields.join(","))
            }
            Value::Array(items) => format!("[{}]", items.iter().map(reversed_json).collect::<Vec<_>>().join(",")),
            scalar => scalar.to_string(),
        }
    }

    /// `old` changed in place by a few random edits, as a hook changes the
    /// Pod it is given: related documents, where most subtrees are equal.
    fn edited(old: &Value, edits: &[(u8, u8, Value)]) -> Value {
        let mut new = old.clone();
        for (choice, depth, value) in edits {
            // Find the place to edit by reading, then edit it through its pointer.
            let mut pointer = json_patch::jsonptr::PointerBuf::new();
            let mut here = &new;
            for _ in 0..*depth {
                let next = match here {
                    Value::Object(map) if !map.is_empty() => map
                        .iter()
                        .nth(usize::from(*choice) % map.len())
                        .map(|(key, value)| (json_patch::jsonptr::Token::new(key.clone()), value)),
                    Value::Array(items) if !items.is_empty() => {
                        let index = usize::from(*choice) % items.len();
                        Some((index.into(), &items[index]))
                    }
                    _ => None,
                };
                match next {
                    Some((token, value)) => {
                        pointer.push_back(token);
                        here = value;
                    }
                    None => break,
                }
            }
            let Some(at) = new.pointer_mut(pointer.as_str()) else {
                continue;
            };
            match (at, choice % 4) {
                (Value::Object(map), 0) => {
                    map.insert(format!("k{choice}"), value.clone());
                }
                (Value::Object(map), 1) => {
                    let key = map.keys().next().cloned();
                    key.map(|key| map.remove(&key));
                }
                (Value::Array(items), 0) => items.push(value.clone()),
                (Value::Array(items), 1) => {
                    items.pop();
                }
                (at, _) => *at = value.clone(),
            }
        }
        new
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

        /// The same operations as `create_patch` on the decoded document,
        /// whatever the order of keys in the text.
        #[test]
        fn equals_create_patch_on_the_decoded_text(
            old in any_json(),
            edits in prop::collection::vec((any::<u8>(), 0u8..5, any_json()), 0..4),
            other in any_json(),
            unrelated in any::<bool>(),
        ) {
            let new = if unrelated { other } else { edited(&old, &edits) };
            for text in [serde_json::to_string(&old).unwrap(), reversed_json(&old)] {
                // Compared with the document as serde_json decodes the text
                // (which rounds some floats differently from the generated ones).
                let decoded: Value = serde_json::from_str(&text).unwrap();
                let expected = create_patch(&decoded, &new);
                let ours = create_patch_from_json(text.as_bytes(), &new).unwrap();
                prop_assert_eq!(&ours, &expected, "old {}, new {}", text, new);
                prop_assert_eq!(patched(&decoded, &ours).ok(), Some(new.clone()));
                prop_assert_eq!(
                    patch_bytes_from_json(text.as_bytes(), &new).unwrap(),
                    patch_bytes(&decoded, &new).unwrap()
                );
            }
        }
    }

    #[test]
    fn a_hook_that_changes_nothing_answers_empty_bytes() {
        let pod =
            br#"{"metadata": {"name": "pg-1", "labels": {"a": "b"}}, "spec": {"containers": [{"name": "postgres"}]}}"#;
        let decoded: Value = serde_json::from_slice(pod).unwrap();
        assert!(patch_bytes_from_json(pod, &decoded).unwrap().is_empty());
    }

    #[test]
    fn escaped_keys_and_strings_compare_by_their_text() {
        let old = br#"{"a\/b": "x\u00e9", "c~d": {"\"q\"": 1}}"#;
        let mut new: Value = serde_json::from_slice(old).unwrap();
        new["c~d"]["\"q\""] = json!(2);
        new["a/b"] = json!("y");
        let patch = create_patch_from_json(old, &new).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([
                {"op": "replace", "path": "/a~1b", "value": "y"},
                {"op": "replace", "path": "/c~0d/\"q\"", "value": 2},
            ])
        );
    }

    #[test]
    fn numbers_compare_as_decoded() {
        // 1 and 1.0 differ in serde_json, so a hook writing 1.0 over 1 is a change.
        let patch =
            create_patch_from_json(br#"{"a": 1, "b": -2, "c": 1.5}"#, &json!({"a": 1.0, "b": -2, "c": 1.5})).unwrap();
        assert_eq!(
            serde_json::to_value(&patch).unwrap(),
            json!([{"op": "replace", "path": "/a", "value": 1.0}])
        );
    }

    #[test]
    fn not_one_json_document_is_an_error() {
        for text in [&b""[..], b"{", b"{} {}", b"nul", b"[1,]", b"\"\xff\""] {
            let error = create_patch_from_json(text, &json!({})).unwrap_err();
            assert!(
                error.is_syntax() || error.is_eof(),
                "{}: {error}",
                String::from_utf8_lossy(text)
            );
        }
    }

    #[test]
    fn a_repeated_key_is_an_error_not_a_wrong_patch() {
        let error = create_patch_from_json(br#"{"a": {"x": 1}, "a": {"y": 2}}"#, &json!({"a": {"y": 2}})).unwrap_err();
        assert!(error.to_string().contains("duplicate key `a`"), "{error}");
    }

    #[test]
    fn malformed_patch_text_cannot_come_out() {
        // Whatever the edit, the answer parses back as a JSON Patch.
        let old = br#"{"spec": {"containers": [{"name": "postgres"}], "volumes": []}}"#;
        let mut new: Value = serde_json::from_slice(old).unwrap();
        new["spec"]["initContainers"] = json!([{"name": "sidecar"}]);
        new["spec"]["volumes"] = json!([{"name": "plugins", "emptyDir": {}}]);
        let bytes = patch_bytes_from_json(old, &new).unwrap();
        let parsed = parse_patch(&bytes).unwrap();
        let decoded: Value = serde_json::from_slice(old).unwrap();
        assert_eq!(patched(&decoded, &parsed).unwrap(), new);
    }
}
