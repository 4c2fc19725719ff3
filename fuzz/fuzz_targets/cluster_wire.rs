//! The Cluster a CNPG-I operator sends a plugin (`cluster_definition`
//! bytes): decoded, then read the way plugins read it. Any input is a
//! Cluster or a DecodeError, never a panic.
#![no_main]

use cnpgi_core::cluster::{decode_cluster, decode_object};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = decode_object(data, "Pod");
    let Ok(cluster) = decode_cluster(data) else { return };
    for plugin in cluster.enabled_plugins() {
        let _ = cluster.plugin(&plugin.name);
        let _ = cluster.plugin_status(&plugin.name);
    }
    let _ = cluster.status_json();
    let _ = cluster.to_json_value();
});
