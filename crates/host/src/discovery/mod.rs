//! Where plugins come from.
//!
//! Every source implements [`DiscoverySource`]: it runs for the life of the
//! operator and keeps the [`Registry`] in step with what it sees, through
//! [`Registry::add`] and [`Registry::remove`] only, and says when its
//! first pass is done ([`Registry::first_pass_done`]). Routing code reads the
//! registry and never knows which source found a plugin.
//!
//! * [`static_list::StaticList`]: a fixed list of plugins, for local runs and tests;
//! * [`socket_dir::SocketDirectory`]: sidecar plugins' Unix sockets in a directory
//!   (`/plugins` by default), rescanned when it changes;
//! * [`kubernetes::KubernetesServices`]: plugin Services in the operator's
//!   namespace, watched, with their certificate Secrets;
//! * [`registration::Registration`]: plugins that register themselves over
//!   mutual TLS and send heartbeats, forgotten when the heartbeats stop.

use std::{fmt::Display, future::Future, pin::Pin, sync::Arc};

use tokio::task::JoinHandle;

use cnpgi_client::client::PluginClient;

use crate::registry::Registry;

pub mod kubernetes;
pub mod registration;
pub mod socket_dir;
pub mod static_list;

/// A future a discovery source runs until the operator stops.
pub type DiscoveryFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A place plugins are found.
pub trait DiscoverySource: Send + 'static {
    /// How the source names itself in logs and as the registry's `source`
    /// (e.g. `socket-dir:/plugins`).
    fn name(&self) -> String;

    /// Keeps `registry` in step with this source until cancelled (dropped),
    /// calling [`Registry::first_pass_done`] with its name once its first
    /// look is complete (what the registry's ready signal waits for).
    fn run(self: Box<Self>, registry: Arc<Registry>) -> DiscoveryFuture;
}

/// Starts `source` on the current Tokio runtime, keeping `registry` in step
/// with it, and makes [`Registry::ready`] wait for its first pass.
/// Aborting the returned task stops the source.
pub fn spawn(source: Box<dyn DiscoverySource>, registry: Arc<Registry>) -> JoinHandle<()> {
    let name = source.name();
    registry.expect_first_pass(&name);
    tokio::spawn(source.run(registry))
}

/// Adds a plugin whose client may have failed to build; a failure is
/// logged and counted (in the registry's metrics). Returns whether the
/// plugin was registered.
pub(crate) async fn register<E: Display>(
    registry: &Registry,
    source: &str,
    plugin: &str,
    client: Result<PluginClient, E>,
) -> bool {
    let added = match client {
        Ok(client) => registry
            .add(source, client)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
        Err(error) => Err(error.to_string()),
    };
    if let Err(error) = &added {
        tracing::error!(plugin, source, %error, "cannot register plugin");
        registry.options().metrics.discovery_error(source);
    }
    added.is_ok()
}
