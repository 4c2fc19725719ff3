//! The instance Pod template: what an operator writes for instance `n` of a
//! Cluster before its plugins' lifecycle hooks patch it.
//!
//! `cnpgi-operator` creates these Pods (through the plugins' `CREATE`
//! chain), `render` shows them, and the conformance suite sends one to a
//! plugin's Pod hooks. The template passes the `restricted` Pod Security
//! Standard.
//!
//! ```
//! use cnpgi_core::pod::{instance_pod, CLUSTER_LABEL};
//!
//! let cluster = serde_json::json!({"metadata": {"name": "pg", "namespace": "db"}});
//! let pod = instance_pod(&cluster, 1);
//! assert_eq!(pod["metadata"]["name"], "pg-1");
//! assert_eq!(pod["metadata"]["labels"][CLUSTER_LABEL], "pg");
//! ```

use serde_json::{Value, json};

/// The PostgreSQL image used when `spec.imageName` is not set.
pub const DEFAULT_IMAGE: &str = "ghcr.io/cloudnative-pg/postgresql:17";

/// Label carrying the Cluster name on its Pods.
pub const CLUSTER_LABEL: &str = "cnpgi.io/cluster";
/// Label carrying the instance name on its Pod.
pub const INSTANCE_LABEL: &str = "cnpgi.io/instanceName";
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

/// The `postgres` container's command: initialise PGDATA when it is empty,
/// then run PostgreSQL in the foreground as the container's main process (so
/// the Pod's SIGTERM reaches the postmaster, which shuts down cleanly). Needs a
/// POSIX shell, `initdb` and `postgres` on `PATH`: PostgreSQL images (Debian's
/// packages with `/usr/lib/postgresql/<major>/bin` on `PATH`, as
/// CloudNativePG's images) have them. The socket goes to `/tmp` (writable by
/// any user); local connections use peer authentication, remote ones need a
/// password.
pub const POSTGRES_COMMAND: &str = r#"set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  initdb --pgdata="$PGDATA" --username=postgres --auth-local=peer --auth-host=scram-sha-256 --no-instructions
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp"#;

fn text<'a>(cluster: &'a Value, pointer: &str) -> Option<&'a str> {
    cluster.pointer(pointer).and_then(Value::as_str)
}

/// The instance Pod template, before plugins: `<cluster>-<n>` with a
/// `postgres` container, owned by the Cluster when it has a `uid`, and
/// compliant with the `restricted` Pod Security Standard.
///
/// ```
/// use cnpgi_core::pod::{instance_pod, DEFAULT_IMAGE};
///
/// let cluster = serde_json::json!({"metadata": {"name": "pg", "uid": "u-1"}});
/// let pod = instance_pod(&cluster, 2);
/// assert_eq!(pod["metadata"]["ownerReferences"][0]["uid"], "u-1");
/// assert_eq!(pod["spec"]["containers"][0]["image"], DEFAULT_IMAGE);
/// ```
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
                "command": ["/bin/sh", "-c", POSTGRES_COMMAND],
                "env": [{ "name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata" }],
                "ports": [{ "name": "postgresql", "containerPort": 5432, "protocol": "TCP" }],
                // Ready once PostgreSQL accepts connections (what `readyInstances` counts).
                "readinessProbe": {
                    "tcpSocket": { "port": "postgresql" },
                    "periodSeconds": 5,
                },
                "resources": { "requests": { "cpu": "100m", "memory": "128Mi" } },
                "volumeMounts": [{ "name": "pgdata", "mountPath": "/var/lib/postgresql/data" }],
                "securityContext": container_security_context(),
            }],
            "volumes": [{ "name": "pgdata", "emptyDir": {} }],
        }
    })
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
        // Runnable as is: a command that starts PostgreSQL, and a readiness probe.
        assert_eq!(pod["spec"]["containers"][0]["command"][2], POSTGRES_COMMAND);
        assert_eq!(
            pod["spec"]["containers"][0]["readinessProbe"]["tcpSocket"]["port"],
            "postgresql"
        );
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
}
