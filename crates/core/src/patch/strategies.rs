//! Random JSON documents for the property tests of the diffs and the
//! patch application.

use proptest::prelude::*;
use serde_json::Value;

/// Any JSON value up to depth 4: every number kind serde_json decodes
/// (negative, unsigned, floats), and keys with the characters JSON pointers
/// and JSON strings escape (`/`, `~`, `"`, `\`) and non-ASCII ones.
pub(crate) fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::from),
            prop::collection::btree_map("[a-c/~\"\\\\é0-1]{0,3}", inner, 0..5)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}
