//! The `cnpgi.io/v1` Cluster operator, a CNPG-I plugin host.
//!
//! The plugin host itself (discovery, the registry and its readiness,
//! routing, admission handlers, metrics, leader election) is the generic
//! [`cnpgi_host`] library, reached under its own name; this crate is the
//! Cluster's use of it, through one [`cnpgi_host::Host`]`<`[`crd::Cluster`]`>`:
//!
//! * [`crd`]: the `Cluster` custom resource;
//! * [`pods`]: instance Pods, from a template through the lifecycle hooks;
//! * [`controller`]: the Cluster reconciler;
//! * [`render`]: the whole pipeline on one Cluster, without Kubernetes (`cnpgi-operator render`);
//! * [`webhook`]: the host's admission routes at the Cluster's paths;
//! * [`rbac`]: the permissions the operator needs.
//!
//! It is built on `cnpgi-host`, `cnpgi-core` (the protocol logic: Cluster
//! view, patches, capabilities, status), `cnpgi-client` (plugin channels,
//! probing, the conformance suite) and `cnpgi-tls`.
//!
//! The composition `cnpgi-operator run` makes, in short: one host, its
//! discovery, the webhooks and the reconciler on it.
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use std::{sync::Arc, time::Duration};
//!
//! use cnpgi_host::{Host, HostOptions, discovery::socket_dir::SocketDirectory};
//! use cnpgi_operator::{
//!     controller::{self, Context},
//!     crd::Cluster,
//!     webhook,
//! };
//!
//! let host = Host::<Cluster>::new(HostOptions::default());
//! host.discover(SocketDirectory {
//!     options: host.client_options(),
//!     ..SocketDirectory::new("/plugins")
//! });
//! host.ready().await;
//! for plugin in host.plugins() {
//!     println!("{} ({:?})", plugin.name(), plugin.state());
//! }
//! // Served over HTTPS with cnpgi_host::webhook::serve_https_with.
//! let _admission: axum::Router = webhook::routes(&host, Duration::from_secs(8));
//! let ctx = Arc::new(Context::new(kube::Client::try_default().await?, host, "cnpgi-operator"));
//! controller::run(ctx, None, std::future::pending()).await;
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod controller;
pub mod crd;
pub mod pods;
pub mod rbac;
pub mod render;
pub mod webhook;
