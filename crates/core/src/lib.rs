//! The CNPG-I protocol logic both sides share, without I/O.
//!
//! A plugin (through `cnpgi-pluginhelper`) and an operator (through
//! `cnpgi-client` and `cnpgi-operator`) agree on more than the generated
//! types of `cnpgi-proto`: what a Cluster looks like on the wire, which
//! plugins it enables, how a JSON Patch answer applies, how a validation
//! error is located, how capabilities are encoded and named. Each of these
//! is written once, here; no module does I/O (no sockets, files, tasks or
//! clocks), so every one is tested with plain values.
//!
//! * [`cluster`]: THE Cluster wire view: lenient decoding, `spec.plugins[]`
//!   entries (`enabled` absent = true), [`cluster::enabled_plugins`] in
//!   routing order, `status.pluginStatus[]` entries;
//! * [`layout`]: where a resource lists its plugins, their parameters and
//!   status entries ([`layout::CnpgLayout`]: CloudNativePG's shape), read by
//!   the host's routing and by a plugin looking for its own entry;
//! * [`patch`]: RFC 6902 patches: diff, and the one application (never panics);
//! * [`path`]: field paths of validation errors (cnpg-i-machinery's
//!   `["spec","plugins","<i>","<name>"]` convention);
//! * [`capabilities`]: capability messages built, read back, and named as in
//!   `status.pluginStatus[]`;
//! * [`status`]: `SetStatusInCluster` answers and the `pluginStatus` entries
//!   an operator writes;
//! * [`pod`]: the instance Pod template, before plugins;
//! * [`postgres`]: what a Cluster says about its PostgreSQL instances (WAL
//!   archiver, restore plugins, recovery target, parameters) and
//!   configuration-file quoting;
//! * [`wal_segment`]: whether a file handed to `archive_command` can be a
//!   WAL segment (size and long page header);
//! * [`service`]: THE description of each CNPG-I service (capability, names,
//!   RPCs, where a plugin finds its parameters, how conformance exercises
//!   it), read by probing, conformance, the SDK's dispatch and the routing;
//! * [`names`]: plugin-name rules;
//! * [`echo`]: bounding the input that errors and logs repeat (1 KiB);
//! * [`ratelimit`]: one warning line every few seconds, with a count, for
//!   events that come in floods (refused connections).
//!
//! ```
//! use cnpgi_core::{cluster::decode_cluster, patch::patch_bytes};
//!
//! let cluster = decode_cluster(br#"{"spec":{"plugins":[{"name":"p.example.com"}]}}"#)?;
//! let mut changed = cluster.to_json_value()?;
//! changed["spec"]["plugins"][0]["parameters"] = serde_json::json!({"mode": "fast"});
//! let answer = patch_bytes(&cluster.to_json_value()?, &changed)?;
//! assert!(!answer.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![forbid(unsafe_code)]

pub mod capabilities;
pub mod cluster;
pub mod echo;
mod json;
pub mod layout;
pub mod names;
pub mod patch;
pub mod path;
pub mod pod;
pub mod postgres;
pub mod ratelimit;
pub mod references;
pub mod service;
pub mod status;
pub mod wal_segment;
