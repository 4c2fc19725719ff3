//! The `cluster_wire` target: the Cluster wire view plugins decode and read.

use cnpgi_core::cluster::{decode_cluster, decode_object};

/// The Cluster a CNPG-I operator sends a plugin (`cluster_definition`
/// bytes): decoded, then read the way plugins read it. Any input is a
/// Cluster or a DecodeError, never a panic.
pub fn cluster_wire(data: &[u8]) {
    let _ = decode_object(data, "Pod");
    let Ok(cluster) = decode_cluster(data) else { return };
    for plugin in cluster.enabled_plugins() {
        let _ = cluster.plugin(&plugin.name).map(|entry| entry.parameters().len());
        if let Some(status) = cluster.plugin_status(&plugin.name) {
            let _ = status.status_json();
        }
    }
    let value = cluster.to_json_value().expect("a decoded Cluster serialises");
    // What a plugin sends back decodes again.
    let again = serde_json::to_vec(&value).expect("a JSON value serialises");
    decode_cluster(&again).expect("a decoded Cluster, serialised, decodes again");
}
