//! The CNPG-I hello-world plugin, written with `cnpgi-pluginhelper`'s
//! declarative API.
//!
//! It does what upstream's Go hello-world does: it reads two parameters,
//! `labels` and `annotations` (JSON objects of strings), validates them,
//! writes their defaults back into the Cluster, forbids changing the labels,
//! reports `{"enabled": true}` in the Cluster status, and adds the labels,
//! the annotations and a `pauser` sidecar to every instance Pod. Read
//! [`metadata`], [`config`], [`lifecycle`], then [`plugin`].

#![forbid(unsafe_code)]

pub mod config;
pub mod lifecycle;
pub mod metadata;

use cnpgi_pluginhelper::prelude::*;
use serde_json::json;

/// The plugin. Its parameters ([`config::Config`]) give `ValidateClusterCreate`,
/// `ValidateClusterChange` and `MutateCluster` without code; each handler
/// below adds an RPC, and registering it is what advertises it.
pub fn plugin() -> Plugin<config::Config> {
    Plugin::<config::Config>::new(metadata::metadata())
        // The SDK answers "no change" once this is what the Cluster holds.
        .set_status(|_cluster| Ok(json!({ "enabled": true })))
        // Each instance Pod, before it is created (CREATE) and when the
        // operator checks for drift (EVALUATE).
        .lifecycle_pod([Operation::Create, Operation::Evaluate], |_cluster, config, pod| {
            lifecycle::patch_pod(config, pod)
        })
}

/// The `plugin` command of the binary.
pub fn command() -> PluginCommand<PluginIdentity> {
    plugin().command()
}

/// The plugin as a server, for in-process tests.
pub fn server() -> PluginServer<PluginIdentity> {
    plugin().server()
}
