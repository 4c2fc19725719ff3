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
//! read theirs from the Cluster), and, as CloudNativePG's main branch (cnpg-i
//! v0.6) does, `check_empty_wal_archive` on every archive (see
//! [`should_check_empty_wal_archive`]) and `mode` on every restore.
//!
//! A restore tells absence from failure ([`RestoreWalError::is_absent`]):
//! PostgreSQL reads a failed `restore_command` as "not in the archive" and
//! ends recovery, so only a file that every plugin answered `NOT_FOUND` for
//! may be reported that way.

use std::{io::Read as _, path::Path};

use cnpgi_core::{
    capabilities::{ServiceType, WalRpc},
    cluster::enabled_plugins,
    echo::bounded_string,
    postgres::{empty_wal_archive_check_enabled, external_cluster_plugins, wal_archiver},
    service,
    wal_segment::{HEADER_LEN, check_segment, cluster_segment_size, is_segment_name},
};
use cnpgi_proto::wal::v1::{WalArchiveRequest, WalRestoreRequest, wal_restore_request::Mode};
use serde_json::Value;

use super::{InstanceError, InstanceOptions, InstancePlugin, backup::CHECK_EMPTY_WAL_ARCHIVE_FILE, connect, list};
use crate::probe::ProbeError;

/// CloudNativePG's `shouldCheckEmptyWalArchive`: whether an archive must
/// first check that the archive is empty. True while
/// `PGDATA/.check-empty-wal-archive` exists (created after initdb, a
/// restore or a join; removed once the first WAL file is archived) unless
/// the Cluster is annotated `cnpg.io/skipEmptyWalArchiveCheck: enabled`.
pub fn should_check_empty_wal_archive(cluster: &Value, pgdata: &Path) -> bool {
    empty_wal_archive_check_enabled(cluster) && pgdata.join(CHECK_EMPTY_WAL_ARCHIVE_FILE).exists()
}

/// Refuses `source_file` when its name is a WAL segment's but it cannot be
/// one (empty, truncated, not the Cluster's segment size, no long page
/// header): archiving it would store a segment recovery cannot replay.
///
/// # Errors
///
/// [`InstanceError::NotASegment`] saying why, or [`InstanceError::Io`] when
/// the file cannot be read.
pub fn check_wal_file(cluster: &Value, source_file: &Path) -> Result<(), InstanceError> {
    let Some(name) = source_file.file_name().and_then(|n| n.to_str()) else {
        return Ok(());
    };
    if !is_segment_name(name) {
        return Ok(());
    }
    let io = |source| InstanceError::Io {
        what: format!("cannot read {}", source_file.display()),
        source,
    };
    let mut file = std::fs::File::open(source_file).map_err(io)?;
    let size = file.metadata().map_err(io)?.len();
    let mut header = Vec::with_capacity(HEADER_LEN);
    file.by_ref()
        .take(HEADER_LEN as u64)
        .read_to_end(&mut header)
        .map_err(io)?;
    check_segment(size, &header, cluster_segment_size(cluster)).map_err(|reason| InstanceError::NotASegment {
        path: source_file.to_owned(),
        reason,
    })
}

/// `WAL.Archive` of `source_file` (an absolute path: PGDATA joined with
/// PostgreSQL's `%p`) on every enabled plugin that archives WAL, with
/// `check_empty_wal_archive` (see [`should_check_empty_wal_archive`]).
/// Returns the plugins that archived it. A file named like a WAL segment
/// must be one ([`check_wal_file`]).
///
/// Where CloudNativePG would report success with no plugin called (it then
/// falls back to its in-tree Barman Cloud support, or skips archiving when
/// that is not configured), this fails: without Kubernetes there is no
/// fallback, and PostgreSQL must not recycle a segment nobody archived.
///
/// # Errors
///
/// The file cannot be a WAL segment; the `isWALArchiver` plugin has no
/// socket; a plugin cannot be reached or refuses the file; no plugin
/// archives WAL.
pub async fn archive_wal(
    cluster: &Value,
    source_file: &Path,
    check_empty_wal_archive: bool,
    options: &InstanceOptions,
) -> Result<Vec<String>, InstanceError> {
    check_wal_file(cluster, source_file)?;
    Archivers::connect(cluster, options)
        .await?
        .archive(source_file, check_empty_wal_archive)
        .await
}

/// The plugins that archive a Cluster's WAL, connected and probed once for
/// any number of files (see [`crate::instance::archive_ahead`]).
#[derive(Debug, Clone)]
pub(crate) struct Archivers {
    /// The plugins advertising `TYPE_ARCHIVE_WAL`, in name order.
    plugins: Vec<InstancePlugin>,
    /// The Cluster as the requests carry it.
    definition: Vec<u8>,
}

impl Archivers {
    /// Connects to the enabled plugins with a socket. The `isWALArchiver`
    /// plugin must have one, and at least one plugin must archive WAL.
    pub(crate) async fn connect(cluster: &Value, options: &InstanceOptions) -> Result<Self, InstanceError> {
        let enabled: Vec<String> = enabled_plugins(cluster).into_iter().map(|p| p.name).collect();
        let (plugins, missing) =
            connect(enabled.iter().map(String::as_str), &[ServiceType::WalService], options).await?;
        if let Some(archiver) = wal_archiver(cluster)
            && missing.iter().any(|name| name == archiver)
        {
            return Err(InstanceError::Unavailable {
                plugin: archiver.to_owned(),
                socket: options.socket_dir.join(archiver),
            });
        }
        let connected: Vec<String> = plugins.iter().map(|p| p.name.clone()).collect();
        let plugins: Vec<InstancePlugin> = plugins
            .into_iter()
            .filter(|p| p.info.has_service(ServiceType::WalService) && p.info.wal_rpcs.contains(&WalRpc::ArchiveWal))
            .collect();
        if plugins.is_empty() {
            return Err(InstanceError::NoPlugin(format!(
                "no plugin archives WAL: enabled {}; with a socket in {}: {}; none advertises TYPE_ARCHIVE_WAL",
                list(&enabled),
                options.socket_dir.display(),
                list(&connected),
            )));
        }
        Ok(Self {
            plugins,
            definition: serde_json::to_vec(cluster)?,
        })
    }

    /// `WAL.Archive` of `source_file` on every archiving plugin, in name
    /// order; the first refusal fails. Returns the plugins that archived it.
    pub(crate) async fn archive(
        &self,
        source_file: &Path,
        check_empty_wal_archive: bool,
    ) -> Result<Vec<String>, InstanceError> {
        let mut archived = Vec::with_capacity(self.plugins.len());
        for plugin in &self.plugins {
            let request = WalArchiveRequest {
                cluster_definition: self.definition.clone(),
                source_file_name: source_file.to_string_lossy().into_owned(),
                parameters: Default::default(),
                check_empty_wal_archive: Some(check_empty_wal_archive),
            };
            plugin
                .client
                .wal()
                .archive(plugin.client.request(request))
                .await
                .map_err(|s| InstanceError::call(&plugin.name, service::wal::ARCHIVE.method, &s))?;
            archived.push(plugin.name.clone());
        }
        Ok(archived)
    }
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
    /// Every plugin that restores WAL refused: all with `NOT_FOUND` for a
    /// file not archived (the ordinary case PostgreSQL expects at the end of
    /// the archive), otherwise at least one failed ([`Self::is_absent`]).
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

impl RestoreWalError {
    /// Whether the file is simply not in the archive: every plugin asked
    /// answered `NOT_FOUND`. Anything else (damage, `DATA_LOSS`; an
    /// unreachable store, `UNAVAILABLE`; a deadline; a plugin that cannot be
    /// reached; no plugin at all) is a failure, which must not end a
    /// recovery.
    pub fn is_absent(&self) -> bool {
        match self {
            Self::NotRestored { misses, .. } => {
                !misses.is_empty() && misses.iter().all(|m| m.code == tonic::Code::NotFound)
            }
            Self::Instance(_) => false,
        }
    }

    /// Whether trying again may succeed: a plugin was unreachable, busy or
    /// out of time (`UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`,
    /// `ABORTED`, `UNKNOWN`, or a connection that failed), and none reported
    /// damage. Absence, damage and refusals are answers, not accidents; a
    /// plugin under the wrong name or unusable TLS files are set-up errors.
    pub fn is_transient(&self) -> bool {
        use tonic::Code;
        let transient = |code: Code| {
            matches!(
                code,
                Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Aborted | Code::Unknown
            )
        };
        match self {
            Self::NotRestored { misses, .. } => {
                misses.iter().any(|m| transient(m.code))
                    && misses.iter().all(|m| transient(m.code) || m.code == Code::NotFound)
            }
            // A probe call that failed may work next time; a plugin that
            // calls itself by another name, or a client that cannot be set
            // up (bad TLS files, an invalid address), will not.
            Self::Instance(InstanceError::Probe(ProbeError::Rpc { code, .. }) | InstanceError::Call { code, .. }) => {
                transient(*code)
            }
            Self::Instance(_) => false,
        }
    }
}

/// `WAL.Restore` of `wal_name` (PostgreSQL's `%f`) into `destination` (an
/// absolute path: PGDATA joined with `%p`) in `mode`, from the first plugin
/// that has it. Returns that plugin.
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
    mode: Mode,
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
            mode: mode.into(),
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

#[cfg(test)]
mod tests {
    use tonic::Code;

    use super::*;
    use crate::client::ClientError;

    fn probe(code: Code) -> RestoreWalError {
        RestoreWalError::Instance(InstanceError::Probe(ProbeError::Rpc {
            plugin: "p".into(),
            address: "unix:///plugins/p".into(),
            rpc: "Identity/GetPluginMetadata",
            code,
            message: String::new(),
        }))
    }

    fn misses(codes: &[Code]) -> RestoreWalError {
        RestoreWalError::NotRestored {
            wal: "000000010000000000000001".into(),
            misses: codes
                .iter()
                .map(|code| Miss {
                    plugin: "p".into(),
                    code: *code,
                    message: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn only_failures_that_may_pass_next_time_are_transient() {
        assert!(probe(Code::Unavailable).is_transient());
        assert!(probe(Code::DeadlineExceeded).is_transient());
        assert!(!probe(Code::Unimplemented).is_transient());
        assert!(!probe(Code::InvalidArgument).is_transient());
        let mismatch = RestoreWalError::Instance(InstanceError::Probe(ProbeError::NameMismatch {
            expected: "a".into(),
            actual: "b".into(),
            address: "unix:///plugins/a".into(),
        }));
        assert!(!mismatch.is_transient());
        let bad_address = RestoreWalError::Instance(InstanceError::Client(ClientError::Address {
            plugin: "p".into(),
            address: "::".into(),
            reason: "no scheme".into(),
        }));
        assert!(!bad_address.is_transient());

        assert!(misses(&[Code::NotFound, Code::Unavailable]).is_transient());
        assert!(!misses(&[Code::NotFound]).is_transient());
        // Damage anywhere is an answer: retrying would only hide it.
        assert!(!misses(&[Code::Unavailable, Code::DataLoss]).is_transient());
    }
}
