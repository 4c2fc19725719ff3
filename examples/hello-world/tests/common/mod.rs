//! Fixtures shared by the hello-world tests: Clusters and an instance Pod as
//! the operator sends them.

#![allow(dead_code, unreachable_pub, missing_docs, clippy::unwrap_used)]

use serde_json::{Value, json};

pub const PLUGIN: &str = "cnpg-i-hello-world.cloudnative-pg.io";

pub fn cluster(parameters: Option<Value>) -> Value {
    let mut plugin = json!({ "name": PLUGIN });
    if let Some(parameters) = parameters {
        plugin["parameters"] = parameters;
    }
    json!({
        "apiVersion": "postgresql.cnpg.io/v1",
        "kind": "Cluster",
        "metadata": { "name": "cluster-example", "namespace": "default", "uid": "6a1f", "generation": 1 },
        "spec": {
            "instances": 3,
            "imageName": "ghcr.io/cloudnative-pg/postgresql:17",
            "storage": { "size": "1Gi" },
            "plugins": [ plugin ]
        }
    })
}

/// The upstream example with the mistake in the annotations.
pub fn cluster_with_mistake() -> Value {
    cluster(Some(json!({
        "labels": "{\n  \"first-label\": \"first-label-value\",\n  \"second-label\": \"second-label-value\"\n}\n",
        "annotations": "{\n  \"first-annotation\": \"first-annotation-value\",\n  this is a mistake\n}\n"
    })))
}

pub fn cluster_with_labels(labels: Value) -> Value {
    cluster(Some(json!({ "labels": labels.to_string() })))
}

pub fn pod() -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "cluster-example-1",
            "namespace": "default",
            "labels": { "cnpg.io/cluster": "cluster-example", "cnpg.io/instanceName": "cluster-example-1" },
            "annotations": { "cnpg.io/podSpec": "{}" },
            "ownerReferences": [{ "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": "cluster-example", "uid": "6a1f", "controller": true }]
        },
        "spec": {
            "initContainers": [{ "name": "bootstrap-controller", "image": "ghcr.io/cloudnative-pg/cloudnative-pg:1.25" }],
            "containers": [{
                "name": "postgres",
                "image": "ghcr.io/cloudnative-pg/postgresql:17",
                "ports": [{ "containerPort": 5432, "name": "postgresql", "protocol": "TCP" }],
                "volumeMounts": [{ "name": "pgdata", "mountPath": "/var/lib/postgresql/data" }],
                "futureField": { "kept": true }
            }],
            "volumes": [{ "name": "pgdata", "persistentVolumeClaim": { "claimName": "cluster-example-1" } }]
        }
    })
}

pub fn bytes(value: &Value) -> Vec<u8> {
    serde_json::to_vec(value).unwrap()
}

/// Applies an RFC 6902 patch as the operator would (the same code); empty
/// means no change.
pub fn apply(doc: &Value, patch: &[u8]) -> Value {
    let mut doc = doc.clone();
    cnpgi_pluginhelper::patch::apply_patch_bytes(&mut doc, patch)
        .expect("the answer is an RFC 6902 JSON patch that applies to the object it was computed for");
    doc
}
