//! Instance Pods: the template ([`cnpgi_core::pod`]) with the PostgreSQL
//! configuration the plugins enriched, through the plugins' lifecycle chain,
//! and the drift hash.
//!
//! The configuration (`spec.postgresql.parameters` through every enabled
//! plugin's `Postgres.EnrichConfiguration`, CloudNativePG's rule: the last
//! non-empty answer wins) is written, when not empty, as the JSON object
//! (keys sorted) of the annotation [`CONFIGURATION_ANNOTATION`], before the
//! lifecycle hooks run: the hooks see it, and the drift hash covers it, so a
//! change of the parameters or of a plugin's answer rolls the Pods.
//!
//! Shared by the reconciler and the local mode, on the Cluster as JSON (so
//! that plugins see every field the user wrote).

use std::collections::BTreeMap;

use cnpgi_core::service;
use cnpgi_host::{
    ConfigurationOperation, Host, HostError, Operation,
    routing::{Patched, RouteError, RoutedResource},
};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::crd::Cluster;

pub use cnpgi_core::{
    pod::{CLUSTER_LABEL, INSTANCE_LABEL, instance_pod},
    postgres::CONFIGURATION_ANNOTATION,
};

/// Annotation with the hash of what the plugins want for the Pod.
pub const PLUGINS_HASH_ANNOTATION: &str = "cnpgi.io/pluginsHash";

/// Annotation with the fingerprint of what the Pod was built from
/// ([`inputs_fingerprint`]): while it still matches, the plugins need not be
/// asked whether the Pod drifted.
pub const PLUGINS_INPUTS_ANNOTATION: &str = "cnpgi.io/pluginsInputs";

/// Hash of the parts of a Pod plugins may change: labels, annotations, spec.
///
/// SHA-256 (lowercase hex) of the canonical JSON text of
/// `{"annotations": …, "labels": …, "spec": …}` (a missing part is `null`):
/// serde_json's compact form with every object's keys sorted by their UTF-8
/// bytes, whatever the map type serde_json was built with. The value is
/// stored on every Pod, so it must only change when the Pod's wanted content
/// does: not with the Rust toolchain (std's `DefaultHasher` may change
/// between releases) nor with key order.
fn plugins_hash(pod: &Value) -> String {
    let part = |pointer: &str| pod.pointer(pointer).cloned().unwrap_or(Value::Null);
    let parts = json!({
        "annotations": part("/metadata/annotations"),
        "labels": part("/metadata/labels"),
        "spec": part("/spec"),
    });
    let mut hasher = Sha256::new();
    write_canonical(&parts, &mut hasher);
    hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Feeds `value`'s canonical JSON text (compact, object keys sorted) to `hasher`.
fn write_canonical(value: &Value, hasher: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            hasher.update(b"{");
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                // A key is a JSON string: its text is that of a string value.
                hasher.update(Value::from(key.as_str()).to_string().as_bytes());
                hasher.update(b":");
                write_canonical(value, hasher);
            }
            hasher.update(b"}");
        }
        Value::Array(items) => {
            hasher.update(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    hasher.update(b",");
                }
                write_canonical(item, hasher);
            }
            hasher.update(b"]");
        }
        scalar => hasher.update(scalar.to_string().as_bytes()),
    }
}

/// The PostgreSQL configuration of the instances: `spec.postgresql.parameters`
/// through the plugins' `EnrichConfiguration` (`TYPE_RECONCILE`). One call
/// chain per reconcile: every Pod's template shares it.
pub async fn postgresql_configuration(
    host: &Host<Cluster>,
    cluster: &RoutedResource,
) -> Result<BTreeMap<String, String>, HostError> {
    host.enrich_configuration(
        cluster,
        &cnpgi_core::postgres::parameters(cluster.value()),
        ConfigurationOperation::Reconcile,
    )
    .await
}

/// The template of instance `n` before the lifecycle hooks: [`instance_pod`]
/// with [`CONFIGURATION_ANNOTATION`] when `configuration` is not empty.
pub fn instance_template(
    cluster: &RoutedResource,
    configuration: &BTreeMap<String, String>,
    n: i32,
) -> Result<Value, RouteError> {
    let mut pod = instance_pod(cluster.value(), n);
    if !configuration.is_empty()
        && let Some(annotations) = pod.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut)
    {
        annotations.insert(
            CONFIGURATION_ANNOTATION.to_owned(),
            Value::from(serde_json::to_string(configuration)?),
        );
    }
    Ok(pod)
}

/// What the plugins want for instance `n` now (the EVALUATE chain on
/// [`instance_template`]), as a hash.
pub async fn wanted_hash(
    host: &Host<Cluster>,
    cluster: &RoutedResource,
    configuration: &BTreeMap<String, String>,
    n: i32,
) -> Result<String, HostError> {
    let template = instance_template(cluster, configuration, n)?;
    let evaluated = host.lifecycle_hook_json(cluster, template, Operation::Evaluate).await?;
    Ok(plugins_hash(&evaluated.object))
}

/// The fingerprint of everything the plugins' answers for instance `n`
/// depend on: the Pod template, the Cluster's identity, labels,
/// annotations and spec (not its status, which the operator rewrites on
/// every reconcile), and the name, version and capabilities of each enabled
/// plugin (so the `EnrichConfiguration` answer too, for plugins that answer
/// alike for alike inputs). Two equal fingerprints mean an `EVALUATE` would
/// answer as before, so the reconciler skips it; it lives with the
/// operator's build, unlike [`PLUGINS_HASH_ANNOTATION`] (an upgrade costs
/// one evaluation round, not a roll).
pub fn inputs_fingerprint(host: &Host<Cluster>, cluster: &RoutedResource, n: i32) -> String {
    let value = cluster.value();
    let part = |pointer: &str| value.pointer(pointer).cloned().unwrap_or(Value::Null);
    let plugins: Vec<Value> = cluster
        .enabled()
        .iter()
        .map(|plugin| match host.routable(&plugin.name) {
            Ok(routable) => json!([
                plugin.name,
                routable.info.metadata.version,
                format!("{:?}", routable.info)
            ]),
            Err(_) => json!([plugin.name, null]),
        })
        .collect();
    let inputs = json!({
        "template": instance_pod(value, n),
        "cluster": {
            "name": part("/metadata/name"),
            "namespace": part("/metadata/namespace"),
            "labels": part("/metadata/labels"),
            "annotations": part("/metadata/annotations"),
            "spec": part("/spec"),
        },
        "plugins": plugins,
    });
    let mut hasher = Sha256::new();
    write_canonical(&inputs, &mut hasher);
    hasher.finalize().iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The Pod to create for instance `n`: [`instance_template`] through the
/// CREATE chain, annotated with the hash of the result and
/// [`inputs_fingerprint`].
///
/// One chain per Pod: the CREATE answer is what the plugins want, so its
/// hash is the drift hash an `EVALUATE` of the same inputs gives later
/// (CloudNativePG too compares a live Pod with the `EVALUATE` answer).
pub async fn build_pod(
    host: &Host<Cluster>,
    cluster: &RoutedResource,
    configuration: &BTreeMap<String, String>,
    n: i32,
) -> Result<Value, HostError> {
    let template = instance_template(cluster, configuration, n)?;
    Ok(create_chain(host, cluster, template, n).await?.object)
}

/// Like [`build_pod`], with the template and each plugin's patch (for
/// `render --diff`).
pub async fn build_pod_with_patches(
    host: &Host<Cluster>,
    cluster: &RoutedResource,
    configuration: &BTreeMap<String, String>,
    n: i32,
) -> Result<(Value, Patched), HostError> {
    let template = instance_template(cluster, configuration, n)?;
    let patched = create_chain(host, cluster, template.clone(), n).await?;
    Ok((template, patched))
}

/// The CREATE chain on `template`, annotated as [`build_pod`] says.
async fn create_chain(
    host: &Host<Cluster>,
    cluster: &RoutedResource,
    template: Value,
    n: i32,
) -> Result<Patched, HostError> {
    let mut patched = host.lifecycle_hook_json(cluster, template, Operation::Create).await?;
    let hash = plugins_hash(&patched.object);
    annotate(
        &mut patched,
        [
            (PLUGINS_HASH_ANNOTATION, hash),
            (PLUGINS_INPUTS_ANNOTATION, inputs_fingerprint(host, cluster, n)),
        ],
    )?;
    Ok(patched)
}

/// Sets `annotations` on the patched Pod, creating `metadata` and
/// `metadata.annotations` when missing or null.
///
/// A patch may have turned the Pod, its `metadata` or its `annotations`
/// into something else than an object: that is the plugin's unusable
/// answer, blamed on the last plugin whose patch wrote there.
fn annotate<const N: usize>(patched: &mut Patched, annotations: [(&str, String); N]) -> Result<(), RouteError> {
    let not_an_object = |patched: &Patched, what: &str, value: &Value| {
        let wrote = |patch: &json_patch::Patch| {
            patch.0.iter().any(|op| {
                let path = op.path().to_string();
                path.is_empty() || path == "/metadata" || path == "/metadata/annotations"
            })
        };
        let plugin = patched
            .patches
            .iter()
            .rev()
            .find(|p| wrote(&p.patch))
            .or_else(|| patched.patches.iter().rev().find(|p| !p.patch.0.is_empty()))
            .map_or_else(|| "(none)".to_owned(), |p| p.plugin.clone());
        let kind = match value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        };
        RouteError::BadAnswer {
            plugin,
            rpc: service::lifecycle::LIFECYCLE_HOOK.method,
            reason: format!("the patched Pod's {what} must be a JSON object, got {kind}"),
        }
    };
    let Some(pod) = patched.object.as_object_mut() else {
        return Err(not_an_object(patched, "root", &patched.object));
    };
    let metadata = pod
        .entry("metadata")
        .and_modify(|m| {
            if m.is_null() {
                *m = json!({});
            }
        })
        .or_insert_with(|| json!({}));
    let Some(metadata) = metadata.as_object_mut() else {
        let metadata = metadata.clone();
        return Err(not_an_object(patched, "metadata", &metadata));
    };
    let existing = metadata
        .entry("annotations")
        .and_modify(|a| {
            if a.is_null() {
                *a = json!({});
            }
        })
        .or_insert_with(|| json!({}));
    let Some(existing) = existing.as_object_mut() else {
        let existing = existing.clone();
        return Err(not_an_object(patched, "metadata.annotations", &existing));
    };
    for (key, value) in annotations {
        existing.insert(key.to_owned(), Value::from(value));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The drift hash is part of every Pod: it must not change with the
    /// toolchain, the serde_json features or the order of object keys, or
    /// an upgrade would roll every Pod. The literal values were computed
    /// independently (Python: `hashlib.sha256(json.dumps({"annotations": …,
    /// "labels": …, "spec": …}, sort_keys=True, separators=(",", ":"),
    /// ensure_ascii=False).encode())`).
    #[test]
    fn plugins_hash_is_pinned_sha256_of_canonical_json() {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "pg-1",
                "labels": {"z": "1", "a": "2", "cnpgi.io/cluster": "pg"},
                "annotations": {"note": "é ✓"},
            },
            "spec": {
                "containers": [{"name": "postgres", "image": "postgres:16", "env": [{"value": "x", "name": "A"}]}],
                "securityContext": {"runAsUser": 26, "runAsNonRoot": true},
            }
        });
        assert_eq!(
            plugins_hash(&pod),
            "b329cc865c72e02e29ccc04492d9bb314ff34a83018aa8ddd20f988f37bcd96c"
        );
        // Fields outside labels, annotations and spec do not count.
        let mut renamed = pod.clone();
        renamed["metadata"]["name"] = json!("other");
        assert_eq!(plugins_hash(&renamed), plugins_hash(&pod));
        assert_eq!(
            plugins_hash(&json!({})),
            "e019688eeb1d3b2b1c6f87091008fbab67b25c6bf84549bb3c5f6ed29498bbc8"
        );
    }
}

/// Property test: whatever the plugins answer, building a Pod never panics;
/// every failure is a typed error.
#[cfg(test)]
mod answers {
    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;
    use cnpgi_host::routing::{Patched, PluginPatch, apply_in_place};

    /// Any JSON value, nested a few levels, now and then a large string.
    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            4 => Just(Value::Null),
            4 => any::<bool>().prop_map(Value::from),
            4 => any::<i64>().prop_map(Value::from),
            4 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
            4 => ".{0,12}".prop_map(Value::from),
            1 => (1usize..3).prop_map(|n| Value::from("x".repeat(n * 512 * 1024))),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
                prop::collection::btree_map("[a-z/~]{0,8}", inner, 0..6)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// Paths a lifecycle patch may touch, the dangerous ones first.
    fn any_path() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("/metadata".to_owned()),
            Just("/spec".to_owned()),
            Just("/metadata/annotations".to_owned()),
            Just("/metadata/labels".to_owned()),
            Just("/metadata/annotations/cnpgi.io~1pluginsHash".to_owned()),
            Just("/spec/containers/0".to_owned()),
            Just("/spec/containers/-".to_owned()),
            "(/[a-z0-9~-]{0,6}){0,4}",
        ]
    }

    /// A plugin's answer: an RFC 6902 patch of any operations, or bytes.
    fn any_answer() -> impl Strategy<Value = Vec<u8>> {
        let op = (
            prop::sample::select(vec!["add", "remove", "replace", "move", "copy", "test", "bogus"]),
            any_path(),
            any_path(),
            any_json(),
        )
            .prop_map(|(op, path, from, value)| json!({"op": op, "path": path, "from": from, "value": value}));
        prop_oneof![
            4 => prop::collection::vec(op, 0..4).prop_map(|ops| Value::from(ops).to_string().into_bytes()),
            1 => any_json().prop_map(|v| v.to_string().into_bytes()),
            1 => prop::collection::vec(any::<u8>(), 0..64),
        ]
    }

    /// What the reconciler does with the answers: the chain of patches on
    /// the template, the hash, the annotation, and the typed Pod.
    fn build(answers: &[Vec<u8>]) -> Result<Value, String> {
        let cluster = json!({"metadata": {"name": "pg", "namespace": "db", "uid": "u"}});
        let mut patched = Patched {
            object: instance_pod(&cluster, 1),
            patches: Vec::new(),
        };
        for (i, answer) in answers.iter().enumerate() {
            let plugin = format!("plugin-{i}");
            let patch = apply_in_place(&plugin, "OperatorLifecycle/LifecycleHook", &mut patched.object, answer)
                .map_err(|e| e.to_string())?;
            patched.patches.push(PluginPatch { plugin, patch });
        }
        let hash = plugins_hash(&patched.object);
        annotate(&mut patched, [(PLUGINS_HASH_ANNOTATION, hash.clone())]).map_err(|e| e.to_string())?;
        assert_eq!(
            patched.object.pointer("/metadata/annotations/cnpgi.io~1pluginsHash"),
            Some(&Value::from(hash))
        );
        let _: Result<k8s_openapi::api::core::v1::Pod, _> = serde_json::from_value(patched.object.clone());
        Ok(patched.object)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn no_plugin_answer_panics(answers in prop::collection::vec(any_answer(), 1..4)) {
            match std::panic::catch_unwind(|| build(&answers)) {
                Ok(Ok(_)) => {}
                Ok(Err(error)) => prop_assert!(error.starts_with("plugin plugin-"), "{error}"),
                Err(_) => prop_assert!(false, "panicked on {:?}", answers.iter().map(|a| String::from_utf8_lossy(a)).collect::<Vec<_>>()),
            }
        }
    }

    #[test]
    fn a_patch_replacing_the_metadata_or_the_pod_is_a_typed_error() {
        for answer in [
            json!([{"op": "replace", "path": "/metadata", "value": "text"}]),
            json!([{"op": "replace", "path": "", "value": 7}]),
            json!([{"op": "replace", "path": "", "value": []}]),
            json!([{"op": "replace", "path": "/metadata/annotations", "value": 1}]),
        ] {
            let error = build(&[answer.to_string().into_bytes()]).expect_err("a broken Pod is refused");
            assert!(error.contains("plugin-0"), "{answer}: {error}");
        }
        // A patch replacing the annotations with null, or the metadata with
        // an empty object, leaves a usable Pod.
        for answer in [
            json!([{"op": "replace", "path": "/metadata/annotations", "value": null}]),
            json!([{"op": "replace", "path": "/metadata", "value": {}}]),
        ] {
            build(&[answer.to_string().into_bytes()]).expect("a usable Pod");
        }
    }
}
