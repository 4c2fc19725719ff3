//! Instance Pods: the template, and the plugins' lifecycle chain on it.
//!
//! Shared by the reconciler and the local mode, on the Cluster as JSON (so
//! that plugins see every field the user wrote).

use cnpgi_proto::operator_lifecycle::v1::operator_operation_type::Type as Operation;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::{
    crd::DEFAULT_IMAGE,
    routing::{RouteError, Router},
};

/// Label carrying the Cluster name on its Pods.
pub const CLUSTER_LABEL: &str = "cnpgi.io/cluster";
/// Label carrying the instance name on its Pod.
pub const INSTANCE_LABEL: &str = "cnpgi.io/instanceName";
/// Annotation with the hash of what the plugins want for the Pod.
pub const PLUGINS_HASH_ANNOTATION: &str = "cnpgi.io/pluginsHash";
/// User and group of the `postgres` container: the `postgres` user of the
/// CloudNativePG PostgreSQL images (and CloudNativePG's default).
pub const POSTGRES_UID: i64 = 26;

/// The Pod-level security context of instance Pods: non-root as
/// [`POSTGRES_UID`], the runtime's default seccomp profile. With
/// [`container_security_context`] this passes the `restricted` Pod Security
/// Standard.
pub fn pod_security_context() -> Value {
    json!({
        "runAsNonRoot": true,
        "runAsUser": POSTGRES_UID,
        "runAsGroup": POSTGRES_UID,
        "fsGroup": POSTGRES_UID,
        "seccompProfile": { "type": "RuntimeDefault" },
    })
}

/// The security context of the `postgres` container: no privilege
/// escalation, no capabilities, non-root, default seccomp profile (the
/// container-level fields the `restricted` Pod Security Standard checks).
pub fn container_security_context() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": { "drop": ["ALL"] },
        "runAsNonRoot": true,
        "seccompProfile": { "type": "RuntimeDefault" },
    })
}

fn text<'a>(cluster: &'a Value, pointer: &str) -> Option<&'a str> {
    cluster.pointer(pointer).and_then(Value::as_str)
}

/// The instance Pod template, before plugins: `<cluster>-<n>` with a
/// `postgres` container, owned by the Cluster when it has a `uid`, and
/// compliant with the `restricted` Pod Security Standard.
pub fn instance_pod(cluster: &Value, n: i32) -> Value {
    let cluster_name = text(cluster, "/metadata/name").unwrap_or("cluster");
    let name = format!("{cluster_name}-{n}");
    let owners = text(cluster, "/metadata/uid").map(|uid| {
        json!([{
            "apiVersion": text(cluster, "/apiVersion").unwrap_or("cnpgi.io/v1"),
            "kind": text(cluster, "/kind").unwrap_or("Cluster"),
            "name": cluster_name,
            "uid": uid,
            "controller": true,
            "blockOwnerDeletion": true,
        }])
    });
    let mut metadata = json!({
        "name": name,
        "labels": { CLUSTER_LABEL: cluster_name, INSTANCE_LABEL: name },
        "annotations": {},
    });
    if let Some(owners) = owners {
        metadata["ownerReferences"] = owners;
    }
    if let Some(namespace) = text(cluster, "/metadata/namespace") {
        metadata["namespace"] = Value::from(namespace);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "securityContext": pod_security_context(),
            "containers": [{
                "name": "postgres",
                "image": text(cluster, "/spec/imageName").unwrap_or(DEFAULT_IMAGE),
                "env": [{ "name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata" }],
                "ports": [{ "name": "postgresql", "containerPort": 5432, "protocol": "TCP" }],
                "volumeMounts": [{ "name": "pgdata", "mountPath": "/var/lib/postgresql/data" }],
                "securityContext": container_security_context(),
            }],
            "volumes": [{ "name": "pgdata", "emptyDir": {} }],
        }
    })
}

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

/// What the plugins want for instance `n` now (the EVALUATE chain), as a hash.
pub async fn wanted_hash(router: &Router, cluster: &Value, n: i32) -> Result<String, RouteError> {
    let evaluated = router
        .lifecycle_hook(cluster, &instance_pod(cluster, n), Operation::Evaluate)
        .await?;
    Ok(plugins_hash(&evaluated.object))
}

/// The Pod to create for instance `n`: the template through the CREATE
/// chain, annotated with [`wanted_hash`].
pub async fn build_pod(router: &Router, cluster: &Value, n: i32) -> Result<Value, RouteError> {
    Ok(build_pod_with_patches(router, cluster, n).await?.object)
}

/// Like [`build_pod`], keeping each plugin's patch (for `render --diff`).
pub async fn build_pod_with_patches(
    router: &Router,
    cluster: &Value,
    n: i32,
) -> Result<crate::routing::Patched, RouteError> {
    let hash = wanted_hash(router, cluster, n).await?;
    let mut patched = router
        .lifecycle_hook(cluster, &instance_pod(cluster, n), Operation::Create)
        .await?;
    let metadata = &mut patched.object["metadata"];
    if !metadata["annotations"].is_object() {
        metadata["annotations"] = json!({});
    }
    metadata["annotations"][PLUGINS_HASH_ANNOTATION] = Value::from(hash);
    Ok(patched)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_follows_the_cluster() {
        let cluster = json!({
            "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": "pg", "namespace": "db", "uid": "u-1"},
            "spec": {"imageName": "postgres:16"}
        });
        let pod = instance_pod(&cluster, 2);
        assert_eq!(pod["metadata"]["name"], "pg-2");
        assert_eq!(pod["metadata"]["namespace"], "db");
        assert_eq!(pod["metadata"]["labels"][CLUSTER_LABEL], "pg");
        assert_eq!(
            pod["metadata"]["ownerReferences"][0]["apiVersion"],
            "postgresql.cnpg.io/v1"
        );
        assert_eq!(pod["spec"]["containers"][0]["image"], "postgres:16");
        // Restricted Pod Security: what the admission plugin checks.
        let security = &pod["spec"]["containers"][0]["securityContext"];
        assert_eq!(security["allowPrivilegeEscalation"], false);
        assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(security["runAsNonRoot"], true);
        assert_eq!(security["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            pod["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        let bare = instance_pod(&json!({"metadata": {"name": "x"}}), 1);
        assert_eq!(bare["spec"]["containers"][0]["image"], DEFAULT_IMAGE);
        assert!(bare["metadata"].get("ownerReferences").is_none());
    }

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
