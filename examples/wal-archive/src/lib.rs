//! A CNPG-I plugin that archives PostgreSQL's WAL and takes base backups
//! into an object store (a local directory or an S3-compatible bucket), and
//! restores them. Read the README first, then [`plugin`]: this file is the
//! whole plugin as CloudNativePG sees it, every handler a few named steps.
//!
//! One binary plays both sides. The operator calls the Operator and
//! OperatorLifecycle handlers (validation, the sidecar); the instance
//! manager calls WAL, Backup and Metrics on the sidecar in each instance
//! Pod, and RestoreJobHooks on the sidecar in the recovery Job.
//!
//! What the handlers use, by job:
//!
//! * [`parameters`] and [`cluster`]: what a Cluster asks for;
//! * [`storage`]: the storage engine (stores, compression, checksums,
//!   backups, retention, restores), which knows nothing of CNPG-I: its
//!   functions answer their own errors, which [`codes`] turns into the gRPC
//!   status each answers;
//! * [`sidecar`]: the sidecar container in instance Pods and the recovery Job;
//! * [`recovery`] and [`pgtime`]: the configuration a recovering PostgreSQL gets;
//! * [`metrics`] and [`state`]: what this process did, for the scrapes;
//! * [`metadata`]: who the plugin is.
//!
//! The configuration is derived from the whole Cluster, not from the
//! plugin's parameter map alone: `serverName` defaults to the Cluster's (or
//! the recovery source's) name, and WAL is restored from the recovery
//! source's archive until the Cluster has a primary. So the plugin declares
//! no typed parameters (`Plugin<()>`); each handler reads its
//! [`parameters::Config`] with [`parameters::own`], [`parameters::external`]
//! or [`parameters::for_wal_restore`], and the whole-Cluster validation
//! reports [`parameters::validate`] (also for a Cluster that names the plugin
//! only as its recovery source).

#![forbid(unsafe_code)]

pub mod cluster;
pub mod codes;
pub mod metadata;
pub mod metrics;
pub mod parameters;
pub mod pgtime;
pub mod recovery;
pub mod sidecar;
pub mod state;
pub mod storage;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use cnpgi_pluginhelper::{
    PluginCommand,
    capabilities::{Operation, ServiceType},
    lowlevel::ArchiveDecision,
    parameters::ParameterSchema,
    plugin::{
        BackupCall, MetricsCall, Plugin, PluginIdentity, RestoreJobCall, Sample, WalArchiveCall, WalRestoreCall,
        WalStatusCall,
    },
    proto::{
        backup::v1::BackupResult,
        wal::v1::{RestoreResponse, WalStatusResult},
    },
    transport::PluginServer,
};
use serde_json::Value;
use tonic::Status;

use crate::cluster::{ClusterView, RecoveryTarget};
use crate::metadata::PLUGIN_NAME;
use crate::state::State;
use crate::storage::{backup, manifest::Manifest, restore, store::Store, wal};

/// What the plugin takes from its environment rather than from Clusters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// The image of the sidecar the operator-side process injects
    /// (`$SIDECAR_IMAGE`, by default [`sidecar::default_sidecar_image`]).
    pub sidecar_image: String,
    /// Where the restore job's sidecar restores a backup (`$PGDATA`, by
    /// default [`recovery::DEFAULT_PGDATA`]).
    pub pgdata: PathBuf,
    /// The `restore_command` a recovering PostgreSQL gets
    /// (`$WAL_ARCHIVE_RESTORE_COMMAND`, by default
    /// [`recovery::DEFAULT_RESTORE_COMMAND`]).
    pub restore_command: String,
}

impl Settings {
    /// The settings from the environment.
    pub fn from_env() -> Self {
        Self {
            sidecar_image: std::env::var(sidecar::SIDECAR_IMAGE_ENV)
                .unwrap_or_else(|_| sidecar::default_sidecar_image()),
            pgdata: std::env::var_os("PGDATA").map_or_else(|| PathBuf::from(recovery::DEFAULT_PGDATA), PathBuf::from),
            restore_command: std::env::var(recovery::RESTORE_COMMAND_ENV)
                .unwrap_or_else(|_| recovery::DEFAULT_RESTORE_COMMAND.to_owned()),
        }
    }
}

/// The plugin, configured from the environment ([`Settings::from_env`]).
pub fn plugin() -> Plugin<()> {
    plugin_with(Settings::from_env())
}

/// The plugin with these settings. Registering a handler advertises it:
/// Operator (the two validations), OperatorLifecycle (Pods and the recovery
/// Job), WAL (archive, restore, status), Backup, RestoreJobHooks and
/// Metrics; `InstanceSidecarInjection` tells CloudNativePG that instance
/// Pods carry the plugin as a sidecar (so their metrics are collected).
pub fn plugin_with(settings: Settings) -> Plugin<()> {
    let state = State::new();
    let (pod_image, job_image) = (settings.sidecar_image.clone(), settings.sidecar_image.clone());
    Plugin::<()>::new(metadata::metadata())
        // Every bad parameter of the Cluster's entry and of the external
        // clusters using the plugin, on the field the user wrote, for a new
        // Cluster and a change (of which only the new Cluster is judged:
        // moving a running cluster's archive, serverName or destinationPath,
        // is allowed; a new archive starts, which the empty-archive check
        // then guards).
        .validate_cluster(parameters::validate)
        // The sidecar, in each instance Pod (created, and checked for drift)
        // and in the recovery Job.
        .lifecycle_pod([Operation::Create, Operation::Evaluate], move |cluster, (), pod| {
            sidecar::add_to_pod(&pod_image, cluster, pod)
        })
        .lifecycle("batch", "Job", [Operation::Create], move |cluster, (), job| {
            sidecar::add_to_recovery_job(&job_image, cluster, job)
        })
        .advertise(ServiceType::InstanceSidecarInjection)
        // PostgreSQL's archive_command and restore_command. SetFirstRequired
        // is not offered: retention follows backups (keepBackups).
        .wal_archive(sharing(&state, archive_wal))
        .wal_restore(sharing(&state, restore_wal))
        .wal_status(sharing(&state, wal_status))
        .backup(sharing(&state, take_backup))
        .restore_job(sharing(&(state.clone(), settings), restore_job))
        .metrics(metrics::definitions(), sharing(&state, collect_metrics))
}

/// The `plugin` command of the binary.
pub fn command() -> PluginCommand<PluginIdentity> {
    plugin().command()
}

/// The plugin as a server, for in-process tests.
pub fn server() -> PluginServer<PluginIdentity> {
    plugin().server()
}

/// A handler given its own clone of `shared` on every call.
fn sharing<S, C, F, Fut>(shared: &S, handler: F) -> impl Fn(C) -> Fut + Send + Sync + 'static
where
    S: Clone + Send + Sync + 'static,
    F: Fn(S, C) -> Fut + Send + Sync + 'static,
{
    let shared = shared.clone();
    move |call| handler(shared.clone(), call)
}

/// `archive_command`: stores one WAL file, compressed and checksummed,
/// unless the same content is there already ([`wal::store_wal`]); counted
/// and logged, failures too.
async fn archive_wal(state: State, call: WalArchiveCall<()>) -> Result<(), Status> {
    let started = Instant::now();
    match archive_wal_file(&state, &call).await {
        Ok(decision) => {
            state.record(|a| {
                a.archived += 1;
                a.last_archived = Some((call.file.to_string(), SystemTime::now()));
            });
            tracing::info!(wal = %call.file, already_archived = decision == ArchiveDecision::AlreadyArchived,
                elapsed_ms = started.elapsed().as_millis() as u64, "archived");
            Ok(())
        }
        Err(status) => {
            state.record(|a| {
                a.archive_failures += 1;
                a.last_failure = Some(SystemTime::now());
            });
            tracing::warn!(source = %call.source_path, code = ?status.code(), error = %status.message(),
                "archive failed");
            Err(status)
        }
    }
}

/// The steps of [`archive_wal`]. The empty-archive check runs when asked
/// (`check_empty_wal_archive`), or when unset while PGDATA holds
/// CloudNativePG's marker (it creates it after initdb, a restore or a join,
/// and cnpg-i v0.5 never sets the field) and the Cluster does not skip the
/// check; the marker goes after the first success.
async fn archive_wal_file(state: &State, call: &WalArchiveCall<()>) -> Result<ArchiveDecision, Status> {
    let config = parameters::own(&call.cluster)?;
    let source = absolute(&call.source_path, "source_file_name")?;
    let store = state.store(&config.store)?;
    let marker = wal::empty_archive_marker(source);
    let must_be_empty = call
        .check_empty_wal_archive
        .unwrap_or_else(|| marker.is_some() && !ClusterView::new(&call.cluster).skips_empty_archive_check());
    let encoded = wal::encode_wal_file(source, &call.file, config.compression_level).await?;
    if must_be_empty {
        wal::refuse_foreign_archive(&store, &call.file, &encoded.blake3).await?;
    }
    let decision = wal::store_wal(&store, &call.file, encoded).await?;
    if let Some(marker) = marker {
        wal::remove_marker(&marker);
    }
    Ok(decision)
}

/// `restore_command`: writes one archived WAL file whole, once checked
/// against its checksum. `NOT_FOUND` only for a file the archive was read
/// for and lacks (a routine miss: PostgreSQL probes for the next timeline).
async fn restore_wal(state: State, call: WalRestoreCall<()>) -> Result<(), Status> {
    let started = Instant::now();
    let result = restore_wal_file(&state, &call).await;
    match &result {
        Ok(()) => {
            state.record(|a| a.restored += 1);
            tracing::info!(wal = %call.file, elapsed_ms = started.elapsed().as_millis() as u64, "restored");
        }
        Err(status) if status.code() == tonic::Code::NotFound => {
            tracing::info!(wal = %call.file, "not in the archive");
        }
        Err(status) => {
            tracing::warn!(wal = %call.file, code = ?status.code(), error = %status.message(), "restore failed");
        }
    }
    result
}

/// The steps of [`restore_wal`], from the archive
/// [`parameters::for_wal_restore`] picks.
async fn restore_wal_file(state: &State, call: &WalRestoreCall<()>) -> Result<(), Status> {
    let config = parameters::for_wal_restore(&call.cluster)?;
    let destination = absolute(&call.destination_path, "destination_file_name")?;
    let store = state.store(&config.store)?;
    Ok(wal::restore_wal(&store, &call.file, destination).await?)
}

/// `path`, a path in the request's `field`, when it is absolute.
fn absolute<'p>(path: &'p str, field: &str) -> Result<&'p Path, Status> {
    let path = Path::new(path);
    if path.is_absolute() {
        Ok(path)
    } else {
        Err(Status::invalid_argument(format!(
            "{field} {:?} is not an absolute path",
            path.display().to_string()
        )))
    }
}

/// The first and last archived segments.
async fn wal_status(state: State, call: WalStatusCall<()>) -> Result<WalStatusResult, Status> {
    let config = parameters::own(&call.cluster)?;
    let store = state.store(&config.store)?;
    let segments = wal::archived_segments(&store).await?;
    Ok(WalStatusResult {
        first_wal: segments.first().cloned().unwrap_or_default(),
        last_wal: segments.last().cloned().unwrap_or_default(),
        additional_information: [
            ("store".to_owned(), store.description().to_owned()),
            ("segments".to_owned(), segments.len().to_string()),
        ]
        .into(),
    })
}

/// A base backup of the running instance ([`backup::take_backup`]), then
/// retention; the answer becomes the Backup's status.
async fn take_backup(state: State, call: BackupCall<()>) -> Result<BackupResult, Status> {
    let config = parameters::own(&call.cluster)?;
    refuse_backup_parameters(&call.backup_parameters)?;
    let backup_name = call.backup.pointer("/metadata/name").and_then(Value::as_str);
    let view = ClusterView::new(&call.cluster);
    let cluster_name = view.name();
    let taken = async {
        let store = state.store(&config.store)?;
        let manifest = backup::take_backup(&store, &config, cluster_name, backup_name.unwrap_or_default()).await?;
        Ok::<_, backup::BackupError>((manifest, store))
    };
    match taken.await {
        Ok((manifest, store)) => {
            state.record(|a| a.backups += 1);
            Ok(backup_result(&manifest, &store))
        }
        Err(error) => {
            state.record(|a| a.backup_failures += 1);
            tracing::warn!(%error, "backup failed");
            Err(error.into())
        }
    }
}

/// `Backup` takes no parameters of its own (the Cluster's configure it):
/// any is refused, by name.
fn refuse_backup_parameters(parameters: &BTreeMap<String, String>) -> Result<(), Status> {
    let errors = match ParameterSchema::new().deny_unknown().parse(0, parameters) {
        Ok(_) => return Ok(()),
        Err(errors) => errors,
    };
    let names: Vec<String> = errors
        .iter()
        .map(|e| e.path_components.last().cloned().unwrap_or_default())
        .collect();
    Err(Status::invalid_argument(format!(
        "this plugin takes no backup parameters: {}",
        names.join(", ")
    )))
}

/// The Backup's status, from the manifest of the backup taken.
fn backup_result(manifest: &Manifest, store: &Store) -> BackupResult {
    BackupResult {
        backup_id: manifest.backup_id.clone(),
        backup_name: manifest.backup_name.clone(),
        started_at: manifest.started_at.timestamp(),
        stopped_at: manifest.stopped_at.timestamp(),
        begin_wal: manifest.begin_wal.clone(),
        end_wal: manifest.end_wal.clone(),
        begin_lsn: manifest.begin_lsn.clone(),
        end_lsn: manifest.end_lsn.clone(),
        backup_label_file: manifest.backup_label.clone().into_bytes(),
        tablespace_map_file: manifest.tablespace_map.clone().into_bytes(),
        instance_id: std::env::var("HOSTNAME").unwrap_or_default(),
        online: true,
        metadata: [
            ("timeline".to_owned(), manifest.timeline.to_string()),
            ("serverName".to_owned(), manifest.server_name.clone()),
            ("store".to_owned(), store.description().to_owned()),
            ("dataSha256".to_owned(), manifest.data.sha256.clone()),
            ("dataSize".to_owned(), manifest.data.size.to_string()),
        ]
        .into(),
    }
}

/// The recovery Job: restores the backup of the recovery source's archive
/// that reaches `recoveryTarget` into the empty PGDATA, and answers the
/// configuration PostgreSQL recovers with ([`recovery::restore_config`]).
async fn restore_job(
    (state, settings): (State, Settings),
    call: RestoreJobCall<()>,
) -> Result<RestoreResponse, Status> {
    let started = Instant::now();
    match restore_base_backup(&state, &settings, &call).await {
        Ok((chosen, target)) => {
            tracing::info!(backup = %chosen.backup_id, elapsed_ms = started.elapsed().as_millis() as u64,
                "backup restored");
            Ok(RestoreResponse {
                restore_config: recovery::restore_config(&settings.restore_command, &target),
                envs: Vec::new(),
            })
        }
        Err(status) => {
            tracing::warn!(code = ?status.code(), error = %status.message(), "restore failed");
            Err(status)
        }
    }
}

/// The steps of [`restore_job`]: the source and target the Cluster names,
/// the empty-archive check of the new cluster's own archive when asked,
/// the backup chosen, and the restore.
async fn restore_base_backup(
    state: &State,
    settings: &Settings,
    call: &RestoreJobCall<()>,
) -> Result<(Manifest, RecoveryTarget), Status> {
    let view = ClusterView::new(&call.cluster);
    let source = view.recovery_source_using(PLUGIN_NAME).ok_or_else(|| {
        Status::failed_precondition(format!(
            "spec.bootstrap.recovery.source does not name an external cluster whose plugin is {PLUGIN_NAME}"
        ))
    })?;
    let config = parameters::external(&source)?;
    let target = view
        .recovery_target()
        .map_err(|e| Status::invalid_argument(format!("spec.bootstrap.recovery.recoveryTarget: {e}")))?;
    if call.check_empty_wal_archive == Some(true)
        && let Ok(own) = parameters::own(&call.cluster)
    {
        let own_store = state.store(&own.store)?;
        if !own_store.is_empty().await? {
            return Err(Status::failed_precondition(format!(
                "the new cluster's archive {} is not empty",
                own_store.description()
            )));
        }
    }
    let store = state.store(&config.store)?;
    let chosen = restore::choose_backup(&store, &target).await?;
    restore::restore_backup(&store, &chosen, &settings.pgdata).await?;
    Ok((chosen, target))
}

/// This process's counters, and the backups in the Cluster's store when it
/// can be read (a scrape never fails on the store).
async fn collect_metrics(state: State, call: MetricsCall<()>) -> Result<Vec<Sample>, Status> {
    let mut samples = metrics::activity_samples(&state.activity());
    if let Ok(config) = parameters::own(&call.cluster)
        && let Ok(store) = state.store(&config.store)
    {
        samples.extend(metrics::store_samples(&store).await);
    }
    Ok(samples)
}
