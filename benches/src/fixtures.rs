//! Request payloads of realistic size: a Cluster of about 2 KB and an
//! instance Pod of about 4 KB, as CloudNativePG writes them.

use serde_json::{Value, json};

/// A Cluster enabling `plugins`, about 2 KB of JSON.
pub(crate) fn cluster(plugins: &[String]) -> Value {
    let plugins: Vec<Value> = plugins.iter().map(|name| json!({ "name": name })).collect();
    json!({
        "apiVersion": "cnpgi.io/v1",
        "kind": "Cluster",
        "metadata": {
            "name": "cluster-example", "namespace": "default",
            "uid": "8d1e5f5e-3b1c-4a5e-9f5e-2f6f0a7b9c10", "generation": 4, "resourceVersion": "182734",
            "labels": { "app.kubernetes.io/part-of": "billing", "team": "data-platform" },
            "annotations": { "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"cnpgi.io/v1\",\"kind\":\"Cluster\",\"metadata\":{\"name\":\"cluster-example\",\"namespace\":\"default\"},\"spec\":{\"instances\":3}}" }
        },
        "spec": {
            "instances": 3,
            "imageName": "ghcr.io/cloudnative-pg/postgresql:17.2-bookworm",
            "primaryUpdateStrategy": "unsupervised",
            "postgresql": { "parameters": {
                "max_connections": "200", "shared_buffers": "512MB", "work_mem": "16MB",
                "maintenance_work_mem": "256MB", "effective_cache_size": "1536MB", "wal_level": "logical",
                "max_wal_size": "2GB", "min_wal_size": "512MB", "random_page_cost": "1.1",
                "log_min_duration_statement": "500ms", "pg_stat_statements.max": "10000"
            }},
            "bootstrap": { "initdb": { "database": "app", "owner": "app", "dataChecksums": true, "encoding": "UTF8" } },
            "storage": { "size": "20Gi", "storageClass": "fast-ssd" },
            "walStorage": { "size": "5Gi", "storageClass": "fast-ssd" },
            "resources": { "requests": { "cpu": "1", "memory": "2Gi" }, "limits": { "memory": "2Gi" } },
            "affinity": { "enablePodAntiAffinity": true, "topologyKey": "kubernetes.io/hostname",
                "nodeSelector": { "node-role.kubernetes.io/database": "" },
                "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "database", "effect": "NoSchedule" }] },
            "monitoring": { "enablePodMonitor": true },
            "plugins": plugins
        }
    })
}

/// An instance Pod before plugins, about 4 KB of JSON.
pub(crate) fn pod() -> Value {
    let env: Vec<Value> = (0..24)
        .map(|i| json!({ "name": format!("CNPG_SETTING_{i:02}"), "value": format!("value-of-setting-number-{i:02}") }))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cluster-example-1", "namespace": "default",
            "labels": { "cnpgi.io/cluster": "cluster-example", "cnpgi.io/instanceName": "cluster-example-1",
                        "cnpg.io/podRole": "instance", "role": "primary" },
            "annotations": { "cnpg.io/operatorVersion": "1.25.0", "cnpg.io/podEnvHash": "5d8f7b6c4" },
            "ownerReferences": [{ "apiVersion": "cnpgi.io/v1", "kind": "Cluster", "name": "cluster-example",
                                   "uid": "8d1e5f5e-3b1c-4a5e-9f5e-2f6f0a7b9c10", "controller": true, "blockOwnerDeletion": true }]
        },
        "spec": {
            "initContainers": [{ "name": "bootstrap-controller", "image": "ghcr.io/cloudnative-pg/cloudnative-pg:1.25.0",
                "command": ["/manager", "bootstrap", "/controller/manager"],
                "volumeMounts": [{ "name": "scratch-data", "mountPath": "/controller" }] }],
            "containers": [{
                "name": "postgres",
                "image": "ghcr.io/cloudnative-pg/postgresql:17.2-bookworm",
                "command": ["/controller/manager", "instance", "run", "--log-level=info"],
                "env": env,
                "ports": [{ "name": "postgresql", "containerPort": 5432, "protocol": "TCP" },
                          { "name": "metrics", "containerPort": 9187, "protocol": "TCP" },
                          { "name": "status", "containerPort": 8000, "protocol": "TCP" }],
                "readinessProbe": { "httpGet": { "path": "/readyz", "port": 8000, "scheme": "HTTPS" }, "periodSeconds": 10 },
                "livenessProbe": { "httpGet": { "path": "/healthz", "port": 8000, "scheme": "HTTPS" }, "periodSeconds": 10 },
                "resources": { "requests": { "cpu": "1", "memory": "2Gi" }, "limits": { "memory": "2Gi" } },
                "securityContext": { "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                                     "runAsNonRoot": true, "capabilities": { "drop": ["ALL"] },
                                     "seccompProfile": { "type": "RuntimeDefault" } },
                "volumeMounts": [{ "name": "pgdata", "mountPath": "/var/lib/postgresql/data" },
                                 { "name": "scratch-data", "mountPath": "/run" },
                                 { "name": "shm", "mountPath": "/dev/shm" }]
            }],
            "volumes": [{ "name": "pgdata", "persistentVolumeClaim": { "claimName": "cluster-example-1" } },
                        { "name": "scratch-data", "emptyDir": {} },
                        { "name": "shm", "emptyDir": { "medium": "Memory" } }],
            "securityContext": { "runAsUser": 26, "runAsGroup": 26, "fsGroup": 26 },
            "tolerations": [{ "key": "dedicated", "operator": "Equal", "value": "database", "effect": "NoSchedule" }],
            "terminationGracePeriodSeconds": 1800
        }
    })
}
