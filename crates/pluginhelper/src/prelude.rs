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
//! Only the declarative API is here: [`Plugin`] and what its handlers
//! receive and answer (the call types, [`Cluster`], [`Hook`],
//! [`MetricSet`], [`WalFileName`], the proto messages they return), the
//! arguments its registrations take, and the helpers most handlers call.
//! Services written by hand use [`lowlevel`](crate::lowlevel),
//! [`create_main_cmd`](crate::create_main_cmd) and
//! [`proto`](crate::proto)'s servers instead; capability builders,
//! validation error builders and the WAL archiving rules stay in their own
//! modules.

pub use crate::{
    PluginCommand,
    capabilities::{Operation, ReconcilerKind, ServiceType},
    cluster::Cluster,
    object::object_mut,
    parameters::Parameters,
    plugin::{
        BackupCall, Hook, LocalPlugin, MetricSet, MetricsCall, Plugin, PluginIdentity, PostgresOperation,
        ReconcilerCall, RestoreJobCall, Sample, SetFirstRequiredCall, WalArchiveCall, WalFileKind, WalFileName,
        WalRestoreCall, WalStatusCall,
    },
    proto::{
        backup::v1::BackupResult,
        identity::v1::GetPluginMetadataResponse,
        wal::v1::{RestoreResponse, WalStatusResult},
    },
    sidecar::{SidecarOptions, inject_sidecar},
    tonic::Status,
    transport::PluginServer,
    validation::ValidationError,
};
