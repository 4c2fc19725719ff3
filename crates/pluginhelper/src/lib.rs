//! Write CNPG-I plugins in Rust.
//!
//! A CNPG-I plugin is a gRPC server that an operator (CloudNativePG, or
//! `cnpgi-operator` from this project) calls to validate and default
//! Clusters and to patch the objects it writes.
//!
//! Start with [`plugin`] (and `use cnpgi_pluginhelper::prelude::*`, which
//! brings what a plugin needs): a plugin is its metadata, its
//! [`Parameters`](parameters::Parameters) (`#[derive(Parameters)]`) and the
//! handlers it registers for any CNPG-I service; the SDK derives the
//! capabilities from the handlers and does the decoding, the lookup of the
//! plugin's entry, the diffing and the status codes.
//!
//! Under it are the low-level building blocks, public for full control (what
//! cnpg-i-machinery's `pluginhelper` is to Go plugin authors):
//!
//! * [`create_main_cmd`]: the `plugin` command of a plugin binary, serving
//!   over mutual TLS (TLS 1.3, client certificate required, files re-read on
//!   rotation) or a Unix socket, with health, reflection, per-call logs,
//!   panic recovery and graceful shutdown ([`transport`], [`cmd`]);
//! * [`cluster`]: lenient Cluster decoding and the plugin's own entry;
//! * [`parameters`]: typed parameters or a run-time schema, yielding
//!   validation errors and defaults; [`validation`]: `ValidationError`
//!   builders;
//! * [`object`]: editing objects as JSON;
//! * [`patch`]: RFC 6902 JSON patches from before/after JSON;
//! * [`capabilities`]: capability messages for `GetCapabilities` answers;
//! * [`sidecar`]: sidecar injection into instance Pods;
//! * [`status`]: `SetStatusInCluster` answers;
//! * the other CNPG-I services, whose servers come from [`proto`] and are
//!   registered with `create_main_cmd` like any other: [`wal`] (WAL file
//!   names, archive idempotence, restore misses), [`metrics`] (definitions
//!   that collected values are checked against), [`reconciler`] (hook
//!   answers) and [`postgres`] (`EnrichConfiguration` answering the complete
//!   map);
//! * `testing` (feature `testing`): in-process test servers and clients.
//!
//! [`cluster`], [`patch`], [`capabilities`], [`service`] and [`status`] are `cnpgi-core`'s
//! modules, re-exported: the operator side uses the very same code.
//!
//! See `examples/hello-world` (declarative) and `examples/low-level`
//! (hand-written services) in the repository for complete plugins.

#![forbid(unsafe_code)]

// So that `#[derive(Parameters)]`'s `::cnpgi_pluginhelper` paths resolve in
// this crate's own tests.
#[cfg(test)]
extern crate self as cnpgi_pluginhelper;

pub mod cmd;
pub mod metrics;
mod middleware;
pub mod object;
pub mod parameters;
pub mod plugin;
pub mod postgres;
pub mod prelude;
pub mod reconciler;
pub mod sidecar;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
pub mod validation;
pub mod wal;

pub use cmd::{PluginArgs, PluginCommand, create_main_cmd};
pub use cnpgi_core::{capabilities, cluster, layout, patch, service, status};
/// Log lines on stderr, as the `plugin` command sets them up (shared with
/// the `cnpgi-operator` binary).
pub use cnpgi_process::logging;
/// The generated CNPG-I protocol types, clients and servers.
pub use cnpgi_proto as proto;
/// The gRPC framework the generated code uses.
pub use tonic;
