//! Write CNPG-I plugins in Rust.
//!
//! A CNPG-I plugin is a gRPC server that an operator (CloudNativePG, or
//! `cnpgi-operator` from this project) calls to validate and default
//! Clusters and to patch the objects it writes.
//!
//! The front door is the declarative [`plugin`] API, and
//! `use cnpgi_pluginhelper::prelude::*` brings all of it: a plugin is its
//! metadata, its [`Parameters`](parameters::Parameters)
//! (`#[derive(Parameters)]`) and the handlers it registers for any CNPG-I
//! service; the SDK derives the capabilities from the handlers and does the
//! decoding, the lookup of the plugin's entry, the diffing and the status
//! codes.
//!
//! Under it are the building blocks, public for full control (what
//! cnpg-i-machinery's `pluginhelper` is to Go plugin authors):
//!
//! * [`create_main_cmd`]: the `plugin` command of a plugin binary, serving
//!   over mutual TLS (TLS 1.3, client certificate required, files re-read on
//!   rotation) or a Unix socket, with health, reflection, per-call logs,
//!   panic recovery and graceful shutdown ([`transport`], [`cmd`]);
//! * [`lowlevel`]: for services written by hand, each CNPG-I service's
//!   `GetCapabilities` answer and the rules of its answers (WAL file names,
//!   archive idempotence and restore misses, metric definitions, hook
//!   answers, `EnrichConfiguration` answering the complete map);
//! * [`cluster`]: lenient Cluster decoding and the plugin's own entry;
//! * [`parameters`]: typed parameters or a run-time schema, yielding
//!   validation errors and defaults; [`validation`]: `ValidationError`
//!   builders;
//! * [`object`]: editing objects as JSON;
//! * [`patch`]: RFC 6902 JSON patches from before/after JSON;
//! * [`capabilities`]: capability messages for `GetCapabilities` answers;
//! * [`sidecar`]: sidecar injection into instance Pods;
//! * [`status`]: `SetStatusInCluster` answers;
//! * the generated servers of every service in [`proto`], registered with
//!   `create_main_cmd` (or mixed into a declarative plugin with
//!   [`Plugin::add_service`](plugin::Plugin::add_service));
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
pub mod lowlevel;
mod middleware;
pub mod object;
pub mod parameters;
pub mod plugin;
pub mod prelude;
pub mod registration;
pub mod sidecar;
#[cfg(feature = "testing")]
pub mod testing;
pub mod transport;
pub mod validation;

// The per-service helpers' paths before they moved under `lowlevel` (issue
// 30), kept for one release so that code written against them still
// compiles. rustc does not warn about a deprecated re-export
// (rust-lang/rust#30827); rustdoc marks them.
/// Moved: [`lowlevel::enrich`](mod@lowlevel::enrich).
#[deprecated(since = "0.1.0", note = "moved to `lowlevel::enrich`")]
pub use lowlevel::enrich::{self as postgres};
/// Moved: [`lowlevel::hook`] (and [`Hook`](plugin::Hook) in [`plugin`] and
/// the [`prelude`]).
#[deprecated(
    since = "0.1.0",
    note = "moved to `lowlevel::hook`; `Hook` is also in `plugin` and the prelude"
)]
pub use lowlevel::hook as reconciler;
/// Moved: [`lowlevel::metric_set`] (and [`MetricSet`](plugin::MetricSet) in
/// [`plugin`] and the [`prelude`]).
#[deprecated(
    since = "0.1.0",
    note = "moved to `lowlevel::metric_set`; `MetricSet` is also in `plugin` and the prelude"
)]
pub use lowlevel::metric_set as metrics;
/// Moved: [`lowlevel::wal_files`] (and [`WalFileName`](plugin::WalFileName)
/// in [`plugin`] and the [`prelude`]).
#[deprecated(
    since = "0.1.0",
    note = "moved to `lowlevel::wal_files`; `WalFileName` is also in `plugin` and the prelude"
)]
pub use lowlevel::wal_files as wal;

pub use cmd::{PluginArgs, PluginCommand, create_main_cmd};
pub use cnpgi_core::{capabilities, cluster, layout, patch, references, service, status};
/// Log lines on stderr, as the `plugin` command sets them up (shared with
/// the `cnpgi-operator` binary).
pub use cnpgi_process::logging;
/// The generated CNPG-I protocol types, clients and servers.
pub use cnpgi_proto as proto;
/// The gRPC framework the generated code uses.
pub use tonic;
