//! WAL archiving and restoring through plugins: PostgreSQL's
//! `archive_command` and `restore_command`, as CloudNativePG's
//! `wal-archive` and `wal-restore` run them.
//!
//! * [`archive_wal`] calls `WAL.Archive` on **every** enabled plugin that
//!   advertises `TYPE_ARCHIVE_WAL`, in name order; the first error fails.
//!   The Cluster's `isWALArchiver` plugin must have a socket.
//! * [`restore_wal`] asks the enabled plugins and those of
//!   `spec.externalClusters[].plugin` that advertise `TYPE_RESTORE_WAL`, in
//!   name order; the first that answers OK wins.
//!
//! The requests carry the Cluster as JSON and empty `parameters` (plugins
//! read theirs from the Cluster), and leave `check_empty_wal_archive` and
//! `mode` unset, as CloudNativePG 1.29 does.

use std::path::Path;

use cnpgi_core::{
    capabilities::{ServiceType, WalRpc},
    cluster::enabled_plugins,
    echo::bounded_string,
    postgres::{external_cluster_plugins, wal_archiver},
};
use cnpgi_proto::wal::v1::{WalArchiveRequest, WalRestoreRequest};
use serde_json::Value;

use super::{InstanceError, InstanceOptions, connect, list};

/// `WAL.Archive` of `source_file` (an absolute path: PGDATA joined with
/// PostgreSQL's `%p`) on every enabled plugin that archives WAL. Returns the
/// plugins that archived it.
///
/// Where CloudNativePG would report success with no plugin called (it then
/// falls back to its in-tree Barman Cloud support, or skips archiving when
/// that is not configured), this fails: without Kubernetes there is no
/// fallback, and PostgreSQL must not recycle a segment nobody archived.
///
/// # Errors
///
/// The `isWALArchiver` plugin has no socket; a plugin cannot be reached or
/// refuses the file; no plugin archives WAL.
pub async fn archive_wal(
    cluster: &Value,
    source_file: &Path,
    options: &InstanceOptions,
) -> Result<Vec<String>, InstanceError> {
    let enabled: Vec<String> = enabled_plugins(cluster).into_iter().map(|p| p.name).collect();
    let (plugins, missing) = connect(enabled.iter().map(String::as_str), &[ServiceType::WalService], options).await?;
    if let Some(archiver) = wal_archiver(cluster)
        && missing.iter().any(|name| name == archiver)
    {
        return Err(InstanceError::Unavailable {
            plugin: archiver.to_owned(),
            socket: options.socket_dir.join(archiver),
        });
    }
    let definition = serde_json::to_vec(cluster)?;
    let mut archived = Vec::new();
    for plugin in plugins
        .iter()
        .filter(|p| p.info.has_service(ServiceType::WalService) && p.info.wal_rpcs.contains(&WalRpc::ArchiveWal))
    {
        let request = WalArchiveRequest {
            cluster_definition: definition.clone(),
            source_file_name: source_file.to_string_lossy().into_owned(),
            parameters: Default::default(),
            check_empty_wal_archive: None,
        };
        plugin
            .client
            .wal()
            .archive(plugin.client.request(request))
            .await
            .map_err(|s| InstanceError::call(&plugin.name, "WAL/Archive", &s))?;
        archived.push(plugin.name.clone());
    }
    if archived.is_empty() {
        return Err(InstanceError::NoPlugin(format!(
            "no plugin archives WAL: enabled {}; with a socket in {}: {}; none advertises TYPE_ARCHIVE_WAL",
            list(&enabled),
            options.socket_dir.display(),
            list(&plugins.iter().map(|p| p.name.clone()).collect::<Vec<_>>()),
        )));
    }
    Ok(archived)
}

/// One plugin's refusal to restore a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// The plugin.
    pub plugin: String,
    /// Its gRPC code (`NotFound` for a file it does not have).
    pub code: tonic::Code,
    /// Its message.
    pub message: String,
}

/// Why [`restore_wal`] restored nothing.
#[derive(Debug, thiserror::Error)]
pub enum RestoreWalError {
    /// Every plugin that restores WAL refused (for a file not archived, the
    /// ordinary case PostgreSQL expects).
    #[error("{wal} not restored: {}", misses.iter().map(|m| format!("plugin {}: {:?}: {}", m.plugin, m.code, m.message)).collect::<Vec<_>>().join("; "))]
    NotRestored {
        /// The WAL file asked for.
        wal: String,
        /// Each plugin's refusal, in the order asked.
        misses: Vec<Miss>,
    },
    /// Nothing could be asked.
    #[error(transparent)]
    Instance(#[from] InstanceError),
}

/// `WAL.Restore` of `wal_name` (PostgreSQL's `%f`) into `destination` (an
/// absolute path: PGDATA joined with `%p`), from the first plugin that has
/// it. Returns that plugin.
///
/// # Errors
///
/// [`RestoreWalError::NotRestored`] when every plugin refused;
/// [`RestoreWalError::Instance`] when no plugin restores WAL or one cannot
/// be reached.
pub async fn restore_wal(
    cluster: &Value,
    wal_name: &str,
    destination: &Path,
    options: &InstanceOptions,
) -> Result<String, RestoreWalError> {
    let mut names: Vec<String> = enabled_plugins(cluster).into_iter().map(|p| p.name).collect();
    names.extend(external_cluster_plugins(cluster).into_iter().map(str::to_owned));
    let (plugins, _) = connect(names.iter().map(String::as_str), &[ServiceType::WalService], options).await?;
    let definition = serde_json::to_vec(cluster).map_err(InstanceError::from)?;
    let mut misses = Vec::new();
    for plugin in plugins
        .iter()
        .filter(|p| p.info.has_service(ServiceType::WalService) && p.info.wal_rpcs.contains(&WalRpc::RestoreWal))
    {
        let request = WalRestoreRequest {
            cluster_definition: definition.clone(),
            source_wal_name: wal_name.to_owned(),
            destination_file_name: destination.to_string_lossy().into_owned(),
            parameters: Default::default(),
            mode: 0,
        };
        match plugin.client.wal().restore(plugin.client.request(request)).await {
            Ok(_) => return Ok(plugin.name.clone()),
            Err(status) => misses.push(Miss {
                plugin: plugin.name.clone(),
                code: status.code(),
                message: bounded_string(status.message().replace('\n', " ")),
            }),
        }
    }
    if misses.is_empty() {
        names.sort();
        names.dedup();
        return Err(InstanceError::NoPlugin(format!(
            "no plugin restores WAL: enabled or external {}; with a socket in {}: {}; none advertises TYPE_RESTORE_WAL",
            list(&names),
            options.socket_dir.display(),
            list(&plugins.iter().map(|p| p.name.clone()).collect::<Vec<_>>()),
        ))
        .into());
    }
    Err(RestoreWalError::NotRestored {
        wal: wal_name.to_owned(),
        misses,
    })
}
