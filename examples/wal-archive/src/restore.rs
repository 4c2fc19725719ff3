//! RestoreJobHooks: a new cluster from a backup in another cluster's archive.
//!
//! CloudNativePG calls `Restore` from the `full-recovery` Job of a Cluster
//! whose `spec.bootstrap.recovery.source` names an external cluster with
//! `plugin: {name: wal-archive.cnpgi.io, parameters: …}`. The plugin, a
//! sidecar of that Job sharing its PGDATA volume:
//!
//! 1. picks the backup in the source's archive for
//!    `bootstrap.recovery.recoveryTarget` ([`crate::manifest::choose`]: the
//!    `backupID`, else the newest that ended before `targetTime` or
//!    `targetLSN`, else the newest);
//! 2. streams its data into `$PGDATA`, which must be empty or absent,
//!    checking the SHA-256 the manifest recorded (a mismatch empties PGDATA
//!    again and fails with `DATA_LOSS`);
//! 3. answers the `restore_config` PostgreSQL recovers with:
//!    `recovery_target_action = promote`, the `restore_command` (the
//!    instance manager's `wal-restore`, which calls this plugin's WAL
//!    `Restore` on the source's archive), and the recovery target lines
//!    written exactly as CloudNativePG writes them (so that CloudNativePG
//!    appending its own copy changes nothing).
//!
//! The restore command is `$WAL_ARCHIVE_RESTORE_COMMAND`, by default
//! CloudNativePG's [`DEFAULT_RESTORE_COMMAND`].

use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use cnpgi_pluginhelper::{
    cluster::decode_cluster,
    proto::wal::v1::{
        RestoreJobHooksCapabilitiesRequest, RestoreJobHooksCapabilitiesResult, RestoreRequest, RestoreResponse,
        restore_job_hooks_capability::Kind, restore_job_hooks_server,
    },
};
use futures_util::TryStreamExt;
use object_store::ObjectStoreExt;
use sha2::{Digest, Sha256};
use tokio_util::io::{StreamReader, SyncIoBridge};
use tonic::{Request, Response, Status};

use crate::backup::list_backups;
use crate::cluster::{ClusterView, RecoveryTarget};
use crate::manifest::{self, Manifest};
use crate::metadata::PLUGIN_NAME;
use crate::object;
use crate::parameters;
use crate::pgtime;
use crate::state::State;

/// Where PGDATA is when `$PGDATA` is not set: CloudNativePG's.
pub const DEFAULT_PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// CloudNativePG's `restore_command`: its instance manager's `wal-restore`.
pub const DEFAULT_RESTORE_COMMAND: &str =
    "/controller/manager wal-restore --log-destination /controller/log/postgres.json %f %p";
/// The environment variable overriding [`DEFAULT_RESTORE_COMMAND`].
pub const RESTORE_COMMAND_ENV: &str = "WAL_ARCHIVE_RESTORE_COMMAND";

/// The RestoreJobHooks service.
#[derive(Debug, Clone)]
pub struct Restore {
    state: State,
    pgdata: PathBuf,
    restore_command: String,
}

impl Restore {
    /// The service, restoring into `$PGDATA` with `$WAL_ARCHIVE_RESTORE_COMMAND`.
    pub fn new(state: State) -> Self {
        Self::with(
            state,
            std::env::var_os("PGDATA").map_or_else(|| PathBuf::from(DEFAULT_PGDATA), PathBuf::from),
            std::env::var(RESTORE_COMMAND_ENV).unwrap_or_else(|_| DEFAULT_RESTORE_COMMAND.to_owned()),
        )
    }

    /// The service restoring into `pgdata`, answering `restore_command`.
    pub fn with(state: State, pgdata: PathBuf, restore_command: String) -> Self {
        Self {
            state,
            pgdata,
            restore_command,
        }
    }
}

/// `'text'` as a postgresql.conf string.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The recovery target lines, as CloudNativePG's `BuildPostgresOptions`.
pub fn target_options(target: &RecoveryTarget) -> String {
    let mut lines = String::new();
    for (setting, value) in [
        ("recovery_target_timeline", &target.target_tli),
        ("recovery_target_xid", &target.target_xid),
        ("recovery_target_name", &target.target_name),
        ("recovery_target_lsn", &target.target_lsn),
    ] {
        if !value.is_empty() {
            lines.push_str(&format!("{setting} = {}\n", quote(value)));
        }
    }
    if !target.target_time.is_empty() {
        lines.push_str(&format!(
            "recovery_target_time = {}\n",
            quote(&pgtime::to_postgres(&target.target_time))
        ));
    }
    if target.target_immediate == Some(true) {
        lines.push_str("recovery_target = immediate\n");
    }
    let inclusive = if target.exclusive == Some(true) {
        "false"
    } else {
        "true"
    };
    lines.push_str(&format!("recovery_target_inclusive = {inclusive}\n"));
    lines
}

/// The whole `restore_config` answer.
pub fn restore_config(restore_command: &str, target: &RecoveryTarget) -> String {
    format!(
        "recovery_target_action = promote\nrestore_command = {}\n{}",
        quote(restore_command),
        target_options(target)
    )
}

/// Hashes and counts what is read through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = self.inner.read(buf)?;
        self.hasher.update(&buf[..read]);
        self.count += read as u64;
        Ok(read)
    }
}

/// Whether `dir` is absent or an empty directory.
fn is_empty_or_absent(dir: &Path) -> io::Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_none()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(true),
        Err(error) => Err(error),
    }
}

/// Removes everything inside `dir` (after a failed restore into it).
fn empty_directory(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let path = entry.path();
            let result = match entry.file_type() {
                Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
                _ => std::fs::remove_file(&path),
            };
            if let Err(error) = result {
                tracing::warn!(path = %path.display(), %error, "cannot clean up after a failed restore");
            }
        }
    }
}

/// What went wrong unpacking a backup.
#[derive(Debug, thiserror::Error)]
enum UnpackError {
    #[error("cannot unpack into {pgdata}: {source}")]
    Io {
        pgdata: String,
        #[source]
        source: io::Error,
    },
    #[error(
        "the backup data does not match its manifest: {found_size} bytes with SHA-256 {found}, \
         the manifest says {expected_size} bytes with SHA-256 {expected}"
    )]
    Checksum {
        expected: String,
        found: String,
        expected_size: u64,
        found_size: u64,
    },
}

impl Restore {
    async fn restore_backup(&self, request: RestoreRequest) -> Result<(Manifest, String), Status> {
        let cluster = decode_cluster(&request.cluster_definition)?;
        let view = ClusterView::new(&cluster);
        let source = view.recovery_source_using(PLUGIN_NAME).ok_or_else(|| {
            Status::failed_precondition(format!(
                "spec.bootstrap.recovery.source does not name an external cluster whose plugin is {PLUGIN_NAME}"
            ))
        })?;
        let config = parameters::external(&source)?;
        let target = view
            .recovery_target()
            .map_err(|e| Status::invalid_argument(format!("spec.bootstrap.recovery.recoveryTarget: {e}")))?;

        if request.check_empty_wal_archive == Some(true)
            && let Ok(own) = parameters::own(&cluster)
        {
            let own_store = self.state.store(&own.store)?;
            if !own_store.is_empty().await? {
                return Err(Status::failed_precondition(format!(
                    "the new cluster's archive {} is not empty",
                    own_store.description()
                )));
            }
        }

        let store = self.state.store(&config.store)?;
        let backups = list_backups(&store).await?;
        let chosen = manifest::choose(&backups, &target)?.clone();
        match is_empty_or_absent(&self.pgdata) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Status::failed_precondition(format!(
                    "PGDATA {} is not empty: a backup is restored into an empty directory only",
                    self.pgdata.display()
                )));
            }
            Err(error) => {
                return Err(Status::internal(format!(
                    "cannot read PGDATA {}: {error}",
                    self.pgdata.display()
                )));
            }
        }
        tracing::info!(backup = %chosen.backup_id, store = %store.description(), pgdata = %self.pgdata.display(),
            "restoring");

        let key = store.backup_prefix(&chosen.backup_id).join(chosen.data.file.as_str());
        let stream = store
            .object_store()
            .get(&key)
            .await
            .map_err(|e| Status::unavailable(format!("{}: cannot read {key}: {e}", store.description())))?
            .into_stream()
            .map_err(io::Error::other);
        let reader = SyncIoBridge::new(StreamReader::new(stream));
        let pgdata = self.pgdata.clone();
        let expected_sha256 = chosen.data.sha256.clone();
        let expected_size = chosen.data.size;
        let unpacked = tokio::task::spawn_blocking(move || -> Result<(), UnpackError> {
            let io_error = |source| UnpackError::Io {
                pgdata: pgdata.display().to_string(),
                source,
            };
            std::fs::create_dir_all(&pgdata).map_err(io_error)?;
            std::fs::set_permissions(&pgdata, std::fs::Permissions::from_mode(0o700)).map_err(io_error)?;
            let mut hashing = Hashing {
                inner: reader,
                hasher: Sha256::new(),
                count: 0,
            };
            let result = (|| {
                let decoder = zstd::stream::read::Decoder::new(&mut hashing)?;
                let mut archive = tar::Archive::new(decoder);
                archive.set_preserve_permissions(true);
                archive.set_preserve_mtime(true);
                archive.set_overwrite(false);
                archive.unpack(&pgdata)?;
                Ok(())
            })();
            result.map_err(io_error)?;
            // What the decoder did not need (padding) counts for the checksum.
            io::copy(&mut hashing, &mut io::sink()).map_err(io_error)?;
            let found = object::hex(&hashing.hasher.finalize());
            if found != expected_sha256 || hashing.count != expected_size {
                return Err(UnpackError::Checksum {
                    expected: expected_sha256,
                    found,
                    expected_size,
                    found_size: hashing.count,
                });
            }
            if !pgdata.join("backup_label").is_file() {
                return Err(io_error(io::Error::other("the backup has no backup_label")));
            }
            Ok(())
        })
        .await
        .map_err(|e| Status::internal(format!("a worker thread failed: {e}")))?;
        if let Err(error) = unpacked {
            empty_directory(&self.pgdata);
            return Err(match error {
                UnpackError::Checksum { .. } => Status::data_loss(error.to_string()),
                UnpackError::Io { .. } => Status::internal(error.to_string()),
            });
        }
        Ok((chosen, restore_config(&self.restore_command, &target)))
    }
}

#[tonic::async_trait]
impl restore_job_hooks_server::RestoreJobHooks for Restore {
    async fn get_capabilities(
        &self,
        _: Request<RestoreJobHooksCapabilitiesRequest>,
    ) -> Result<Response<RestoreJobHooksCapabilitiesResult>, Status> {
        Ok(Response::new(RestoreJobHooksCapabilitiesResult {
            capabilities: vec![cnpgi_pluginhelper::capabilities::restore_job_hook(Kind::Restore)],
        }))
    }

    async fn restore(&self, request: Request<RestoreRequest>) -> Result<Response<RestoreResponse>, Status> {
        let started = Instant::now();
        match self.restore_backup(request.into_inner()).await {
            Ok((chosen, restore_config)) => {
                tracing::info!(backup = %chosen.backup_id, elapsed_ms = started.elapsed().as_millis() as u64,
                    "backup restored");
                Ok(Response::new(RestoreResponse {
                    restore_config,
                    envs: Vec::new(),
                }))
            }
            Err(status) => {
                tracing::warn!(code = ?status.code(), error = %status.message(), "restore failed");
                Err(status)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_config_as_cloudnative_pg_writes_it() {
        let target = RecoveryTarget {
            target_time: "2026-01-02T03:04:05Z".into(),
            ..RecoveryTarget::default()
        };
        assert_eq!(
            restore_config("cli wal-restore %f %p", &target),
            "recovery_target_action = promote\n\
             restore_command = 'cli wal-restore %f %p'\n\
             recovery_target_time = '2026-01-02 03:04:05.000000+00:00'\n\
             recovery_target_inclusive = true\n"
        );
        let target = RecoveryTarget {
            target_tli: "latest".into(),
            target_lsn: "0/3000000".into(),
            target_immediate: Some(true),
            exclusive: Some(true),
            ..RecoveryTarget::default()
        };
        assert_eq!(
            target_options(&target),
            "recovery_target_timeline = 'latest'\nrecovery_target_lsn = '0/3000000'\n\
             recovery_target = immediate\nrecovery_target_inclusive = false\n"
        );
        assert_eq!(quote("it's"), "'it''s'");
    }

    #[test]
    fn emptiness() {
        let dir = tempfile::tempdir().unwrap();
        assert!(is_empty_or_absent(dir.path()).unwrap());
        assert!(is_empty_or_absent(&dir.path().join("missing")).unwrap());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/file"), b"x").unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        assert!(!is_empty_or_absent(dir.path()).unwrap());
        empty_directory(dir.path());
        assert!(is_empty_or_absent(dir.path()).unwrap());
    }
}
