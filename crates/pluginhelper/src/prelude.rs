//! What a plugin author needs, in one `use`: the declarative [`Plugin`], its
//! [`Parameters`], the values its handlers receive and answer, and the
//! helpers most handlers call.
//!
//! ```no_run
//! use cnpgi_pluginhelper::prelude::*;
//!
//! #[derive(Parameters)]
//! struct Config {
//!     /// The label every instance Pod gets.
//!     #[param(default = "blue")]
//!     color: String,
//! }
//!
//! fn plugin() -> Plugin<Config> {
//!     Plugin::<Config>::new(GetPluginMetadataResponse {
//!         name: "color.example.com".into(),
//!         version: "0.1.0".into(),
//!         ..Default::default()
//!     })
//!     .lifecycle_pod([Operation::Create, Operation::Evaluate], |_cluster, config, pod| {
//!         let labels = object_mut(pod, &["metadata", "labels"])?;
//!         labels.insert("color".into(), config.color.clone().into());
//!         Ok(())
//!     })
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     plugin().command().execute()
//! }
//! ```
//!
//! Everything else (low-level services, capability builders, WAL file
//! names, validation error builders) stays in its own module.

pub use crate::{
    PluginCommand,
    capabilities::{Operation, ReconcilerKind, ServiceType},
    cluster::Cluster,
    metrics::MetricSet,
    object::object_mut,
    parameters::Parameters,
    plugin::{
        BackupCall, LocalPlugin, MetricsCall, Plugin, PluginIdentity, PostgresOperation, ReconcilerCall,
        RestoreJobCall, Sample, SetFirstRequiredCall, WalArchiveCall, WalRestoreCall, WalStatusCall,
    },
    proto::identity::v1::GetPluginMetadataResponse,
    reconciler::Hook,
    sidecar::{SidecarOptions, inject_sidecar},
    tonic::Status,
    transport::PluginServer,
    validation::ValidationError,
};
