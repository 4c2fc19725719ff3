//! The operator side of CNPG-I.
//!
//! An operator that hosts CNPG-I plugins must reach each plugin, learn what it
//! can do, and know whether it may receive work right now. This crate does
//! that, in layers:
//!
//! * [`crd`]: the `Cluster` custom resource;
//! * [`client`]: one long-lived HTTP/2 channel per plugin (mutual TLS over
//!   TCP, or a Unix socket), shared by every caller, with a deadline on every
//!   call;
//! * [`probe`]: the CNPG-I probing sequence and the capabilities it yields;
//! * [`registry`]: the plugins known, their readiness, and routing lookups
//!   (read it to see how a plugin goes from discovered to routable);
//! * [`discovery`]: where plugins come from (Kubernetes Services, a socket
//!   directory, a static list), behind one trait;
//! * [`routing`]: the CNPG-I fan-out rules: chained mutations and lifecycle
//!   patches, collected validation errors, status, fail-closed by default;
//! * [`webhook`]: the mutating and validating admission webhooks;
//! * [`pods`]: instance Pods, from a template through the lifecycle hooks;
//! * [`controller`]: the Cluster reconciler;
//! * [`local`]: the whole pipeline on one Cluster, without Kubernetes (`render`);
//! * [`conformance`]: the conformance suite of `check-plugin`;
//! * [`metrics`]: Prometheus metrics of calls, readiness and discovery.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use cnpgi_operator::{client::{ClientOptions, PluginClient, Transport}, probe::probe};
//!
//! let client = PluginClient::connect(
//!     "cnpg-i-hello-world.cloudnative-pg.io",
//!     Transport::Unix { path: "/plugins/cnpg-i-hello-world.cloudnative-pg.io".into() },
//!     &ClientOptions::default(),
//! )?;
//! let info = probe(&client).await?;
//! println!("{} {}", info.metadata.name, info.metadata.version);
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod client;
pub mod conformance;
pub mod controller;
pub mod crd;
pub mod discovery;
pub mod leader;
pub mod local;
pub mod metrics;
pub mod pods;
pub mod probe;
pub mod rbac;
pub mod registry;
pub mod routing;
pub mod serving;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhook;
