//! The `cnpgi.io/v1` Cluster operator, a CNPG-I plugin host.
//!
//! The plugin host itself (discovery, the registry and its readiness,
//! routing, admission handlers, metrics, leader election) is the generic
//! [`cnpgi_host`] library, re-exported here under its module names; this
//! crate is the Cluster's use of it:
//!
//! * [`crd`]: the `Cluster` custom resource;
//! * [`pods`]: instance Pods, from a template through the lifecycle hooks;
//! * [`controller`]: the Cluster reconciler;
//! * [`render`]: the whole pipeline on one Cluster, without Kubernetes (`cnpgi-operator render`);
//! * [`webhook`]: the host's admission handlers at the Cluster's paths;
//! * [`routing`]: the host's routing, with [`routing::RoutedCluster`];
//! * [`rbac`]: the permissions the operator needs;
//! * re-exported from [`cnpgi_host`]: [`registry`], [`discovery`],
//!   [`metrics`], [`serving`], [`leader`] (and `testing`, with the feature).
//!
//! It is built on `cnpgi-host`, `cnpgi-core` (the protocol logic: Cluster
//! view, patches, capabilities, status), `cnpgi-client` (plugin channels,
//! probing, the conformance suite) and `cnpgi-tls`.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//!
//! use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
//! use cnpgi_operator::{
//!     metrics::Metrics,
//!     registry::{Registry, RegistryOptions},
//! };
//!
//! let metrics = Metrics::default();
//! let options = ClientOptions { observer: Arc::new(metrics.clone()), ..ClientOptions::default() };
//! let client = PluginClient::new(
//!     "cnpg-i-hello-world.cloudnative-pg.io",
//!     Transport::Unix { path: "/plugins/cnpg-i-hello-world.cloudnative-pg.io".into() },
//!     &options,
//! )?;
//! let registry = Registry::new(RegistryOptions { metrics, ..RegistryOptions::default() });
//! registry.add("static", client).await?;
//! let routable = registry.get("cnpg-i-hello-world.cloudnative-pg.io")?;
//! println!("{}", routable.info.metadata.version);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod controller;
pub mod crd;
pub mod pods;
pub mod rbac;
pub mod render;
pub mod routing;
pub mod webhook;

#[cfg(feature = "testing")]
pub use cnpgi_host::testing;
pub use cnpgi_host::{discovery, leader, metrics, registry, serving};
