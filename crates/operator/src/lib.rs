//! The operator side of CNPG-I.
//!
//! An operator that hosts CNPG-I plugins must reach each plugin, learn what it
//! can do, and know whether it may receive work right now. This crate does
//! that, in layers:
//!
//! * [`crd`]: the `Cluster` custom resource;
//! * [`registry`]: the plugins known, their readiness, and routing lookups
//!   (read it to see how a plugin goes from discovered to routable);
//! * [`discovery`]: where plugins come from (Kubernetes Services, a socket
//!   directory, a static list), behind one trait;
//! * [`routing`]: the CNPG-I fan-out rules: chained mutations and lifecycle
//!   patches, collected validation errors, status, fail-closed by default;
//! * [`webhook`]: the mutating and validating admission webhooks;
//! * [`pods`]: instance Pods, from a template through the lifecycle hooks;
//! * [`controller`]: the Cluster reconciler;
//! * [`render`]: the whole pipeline on one Cluster, without Kubernetes (`cnpgi-operator render`);
//! * [`metrics`]: Prometheus metrics of calls, readiness and discovery.
//!
//! It is built on `cnpgi-core` (the protocol logic: Cluster view, patches,
//! capabilities, status), `cnpgi-client` (plugin channels, probing, the
//! conformance suite) and `cnpgi-tls`.
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
pub mod discovery;
pub mod leader;
pub mod metrics;
pub mod pods;
pub mod rbac;
pub mod registry;
pub mod render;
pub mod routing;
pub mod serving;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhook;
