//! The WAL service: PostgreSQL's `archive_command` and `restore_command`.
//!
//! * `Archive` stores `source_file_name` (PGDATA + `%p`) as
//!   `wals/…/<name>.zst`: compressed, checksummed ([`crate::object`]) and
//!   created only if absent. The same name archived again with the same
//!   content succeeds (PostgreSQL retries after a crash); with other content
//!   it is refused with `ALREADY_EXISTS`, never overwritten.
//! * The empty-archive check: when asked (`check_empty_wal_archive`), or
//!   when unset while `PGDATA/.check-empty-wal-archive` exists (CloudNativePG
//!   creates it after initdb, a restore or a join, and cnpg-i v0.5 never sets
//!   the field) and the Cluster lacks `cnpg.io/skipEmptyWalArchiveCheck:
//!   enabled`, a first archive into a non-empty folder is refused
//!   (`FAILED_PRECONDITION`): two clusters must not share one. The marker
//!   file is removed after the first success.
//! * `Restore` fetches `source_wal_name`, checks it against its checksum and
//!   writes `destination_file_name` through a temporary file renamed into
//!   place, so PostgreSQL never reads half a file. A name the archive lacks
//!   is `NOT_FOUND` (PostgreSQL then ends recovery, or tries the next
//!   timeline), and only that: a damaged object (checksum, decompression,
//!   format, truncation) is `DATA_LOSS` naming the key; a store that cannot
//!   be read (missing directory, network, 5xx) `UNAVAILABLE`; a missing
//!   bucket or refused credentials `FAILED_PRECONDITION`
//!   ([`crate::store::StoreError`]).
//! * `Archive` over an existing object with the same content checks that
//!   copy whole: a damaged one is `DATA_LOSS`, never OK (PostgreSQL would
//!   recycle the segment) and never overwritten.
//! * `Status` gives the first and last archived segments.

use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use cnpgi_pluginhelper::{
    cluster::decode_cluster,
    proto::wal::v1::{
        SetFirstRequiredRequest, SetFirstRequiredResult, WalArchiveRequest, WalArchiveResult, WalCapabilitiesRequest,
        WalCapabilitiesResult, WalRestoreRequest, WalRestoreResult, WalStatusRequest, WalStatusResult,
        wal_capability::rpc::Type as WalRpc, wal_server,
    },
    wal::{self, ArchiveDecision, WalFileKind, WalFileName},
};
use tonic::{Request, Response, Status};

use crate::cluster::ClusterView;
use crate::object::{self, ObjectError};
use crate::parameters;
use crate::state::State;
use crate::store::{PutOutcome, Store};

/// The marker CloudNativePG leaves in PGDATA when the archive must be empty.
pub const CHECK_EMPTY_WAL_ARCHIVE_FILE: &str = ".check-empty-wal-archive";

/// The WAL service.
#[derive(Debug, Clone)]
pub struct Wal {
    state: State,
}

impl Wal {
    /// The service, sharing `state`.
    pub fn new(state: State) -> Self {
        Self { state }
    }
}

/// PGDATA, from the path of a file in `PGDATA/pg_wal`.
fn pgdata_of(source: &Path) -> Option<&Path> {
    let wal_dir = source.parent()?;
    (wal_dir.file_name()? == "pg_wal").then(|| wal_dir.parent()).flatten()
}

fn blocking_failed(error: tokio::task::JoinError) -> Status {
    Status::internal(format!("a worker thread failed: {error}"))
}

/// A stored object that cannot be read back: `DATA_LOSS`, naming the key.
fn damaged(name: &WalFileName, key: &object_store::path::Path, store: &Store, error: &ObjectError) -> Status {
    Status::data_loss(format!(
        "the archived WAL file {name} (object {} in {}) is damaged: {error}",
        store.show(key),
        store.description()
    ))
}

/// The SHA-256 of the archived copy of `name`, once that copy is known to
/// be intact: a copy whose header says "same content" but whose data is
/// damaged must not let `Archive` answer OK (PostgreSQL would then recycle
/// the only good copy of the segment).
async fn archived_sha256(
    store: &Store,
    name: &WalFileName,
    key: &object_store::path::Path,
    stored: Bytes,
    sha256: &str,
) -> Result<String, Status> {
    let (header, _) = object::header(&stored).map_err(|e| damaged(name, key, store, &e))?;
    if header.sha256 != sha256 {
        // Different content: refused whatever the state of the stored copy.
        return Ok(header.sha256);
    }
    let expected = name.to_string();
    tokio::task::spawn_blocking(move || object::decode(&stored, &expected))
        .await
        .map_err(blocking_failed)?
        .map_err(|e| damaged(name, key, store, &e))?;
    Ok(header.sha256)
}

/// Archives `content` as `name` unless the same content is there: the
/// decision of [`wal::decide_archive`] on SHA-256s.
pub(crate) async fn store_wal(
    store: &Store,
    name: &WalFileName,
    content: Vec<u8>,
    level: i32,
) -> Result<ArchiveDecision, Status> {
    let key = store.wal_key(name);
    // Archiving creates a local store's directory (a restore never does).
    store.prepare_write().await?;
    let owned_name = name.to_string();
    let (sha256, encoded) = tokio::task::spawn_blocking(move || {
        let sha256 = object::sha256_hex(&content);
        let header = object::Header {
            format: object::FORMAT.to_owned(),
            name: owned_name,
            size: content.len() as u64,
            sha256: sha256.clone(),
        };
        object::encode_with_header(&header, &content, level).map(|encoded| (sha256, encoded))
    })
    .await
    .map_err(blocking_failed)?
    .map_err(|e: ObjectError| Status::internal(e.to_string()))?;
    let encoded = Bytes::from(encoded);

    // Twice at most: a writer that created the key between our look and our
    // write makes the conditional put report it, and we compare again.
    for _ in 0..2 {
        let existing = match store.get(&key).await? {
            Some(stored) => Some(archived_sha256(store, name, &key, stored, &sha256).await?),
            None => None,
        };
        match wal::decide_archive(name, existing.as_deref(), sha256.as_str())? {
            ArchiveDecision::AlreadyArchived => return Ok(ArchiveDecision::AlreadyArchived),
            ArchiveDecision::Store => {
                if store.put_new(&key, encoded.clone()).await? == PutOutcome::Created {
                    return Ok(ArchiveDecision::Store);
                }
            }
        }
    }
    Err(Status::aborted(format!(
        "WAL file {name} changed in the store while it was being archived; try again"
    )))
}

/// Writes `content` to `destination` atomically: a temporary file in the
/// same directory, synced, then renamed over the destination.
pub(crate) async fn write_atomically(destination: &Path, content: Vec<u8>) -> std::io::Result<()> {
    let destination = destination.to_owned();
    tokio::task::spawn_blocking(move || {
        use std::io::Write;
        let dir = destination.parent().unwrap_or(Path::new("/"));
        let file_name = destination
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temporary = dir.join(format!(".{file_name}.wal-archive-{}.tmp", std::process::id()));
        let result = (|| {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&content)?;
            file.sync_all()?;
            std::fs::rename(&temporary, &destination)?;
            std::fs::File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temporary);
        }
        result
    })
    .await
    .map_err(std::io::Error::other)?
}

impl Wal {
    async fn archive_file(&self, request: WalArchiveRequest) -> Result<(WalFileName, ArchiveDecision), Status> {
        let cluster = decode_cluster(&request.cluster_definition)?;
        let config = parameters::own(&cluster)?;
        let name = WalFileName::from_path(&request.source_file_name)?;
        let source = PathBuf::from(&request.source_file_name);
        if !source.is_absolute() {
            return Err(Status::invalid_argument(format!(
                "source_file_name {:?} is not an absolute path",
                request.source_file_name
            )));
        }
        let store = self.state.store(&config.store)?;

        let marker = pgdata_of(&source).map(|pgdata| pgdata.join(CHECK_EMPTY_WAL_ARCHIVE_FILE));
        let marker_present = marker.as_ref().is_some_and(|m| m.exists());
        let must_be_empty = match request.check_empty_wal_archive {
            Some(asked) => asked,
            None => marker_present && !ClusterView::new(&cluster).skips_empty_archive_check(),
        };

        let content = tokio::fs::read(&source).await.map_err(|e| {
            let message = format!("cannot read {}: {e}", source.display());
            match e.kind() {
                std::io::ErrorKind::NotFound => Status::not_found(message),
                _ => Status::internal(message),
            }
        })?;
        if content.len() as u64 > object::MAX_CONTENT {
            return Err(Status::invalid_argument(format!("{name} is larger than 1 GiB")));
        }

        if must_be_empty && !store.is_empty().await? {
            // Our own earlier success (the marker outlived it) is not a
            // foreign archive: the very same file is already there.
            let same = match store.get(&store.wal_key(&name)).await? {
                Some(stored) => object::header(&stored).is_ok_and(|(h, _)| h.sha256 == object::sha256_hex(&content)),
                None => false,
            };
            if !same {
                return Err(Status::failed_precondition(format!(
                    "the archive {} is not empty: this instance was just created, restored or joined, and must \
                     not archive into another cluster's WAL; use another serverName or destinationPath, empty \
                     it, or annotate the Cluster with cnpg.io/skipEmptyWalArchiveCheck=enabled",
                    store.description()
                )));
            }
        }

        let decision = store_wal(&store, &name, content, config.compression_level).await?;
        if marker_present && let Some(marker) = marker {
            // Checked once: later archives go to what is now our archive.
            if let Err(error) = std::fs::remove_file(&marker)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(marker = %marker.display(), %error, "cannot remove the empty-archive marker");
            }
        }
        Ok((name, decision))
    }

    async fn restore_file(&self, request: WalRestoreRequest) -> Result<WalFileName, Status> {
        let cluster = decode_cluster(&request.cluster_definition)?;
        let config = parameters::for_wal_restore(&cluster)?;
        let name = WalFileName::parse(&request.source_wal_name)?;
        let destination = PathBuf::from(&request.destination_file_name);
        if !destination.is_absolute() {
            return Err(Status::invalid_argument(format!(
                "destination_file_name {:?} is not an absolute path",
                request.destination_file_name
            )));
        }
        let store = self.state.store(&config.store)?;
        let key = store.wal_key(&name);
        // `None` only when the store was read and lacks the key: any other
        // failure (a missing bucket or directory, the network) is an error
        // that must not end PostgreSQL's recovery.
        let stored = store.get(&key).await?.ok_or_else(|| wal::not_in_archive(&name))?;
        let expected = name.to_string();
        let content = tokio::task::spawn_blocking(move || object::decode(&stored, &expected))
            .await
            .map_err(blocking_failed)?
            .map_err(|e| damaged(&name, &key, &store, &e))?
            .1;
        write_atomically(&destination, content)
            .await
            .map_err(|e| Status::internal(format!("cannot write {}: {e}", destination.display())))?;
        Ok(name)
    }
}

#[tonic::async_trait]
impl wal_server::Wal for Wal {
    async fn get_capabilities(
        &self,
        _: Request<WalCapabilitiesRequest>,
    ) -> Result<Response<WalCapabilitiesResult>, Status> {
        Ok(Response::new(wal::capabilities([
            WalRpc::ArchiveWal,
            WalRpc::RestoreWal,
            WalRpc::Status,
        ])))
    }

    async fn archive(&self, request: Request<WalArchiveRequest>) -> Result<Response<WalArchiveResult>, Status> {
        let started = Instant::now();
        let source = request.get_ref().source_file_name.clone();
        match self.archive_file(request.into_inner()).await {
            Ok((name, decision)) => {
                self.state.record(|a| {
                    a.archived += 1;
                    a.last_archived = Some((name.to_string(), SystemTime::now()));
                });
                tracing::info!(wal = %name, already_archived = decision == ArchiveDecision::AlreadyArchived,
                    elapsed_ms = started.elapsed().as_millis() as u64, "archived");
                Ok(Response::new(WalArchiveResult {}))
            }
            Err(status) => {
                self.state.record(|a| {
                    a.archive_failures += 1;
                    a.last_failure = Some(SystemTime::now());
                });
                tracing::warn!(source = %source, code = ?status.code(), error = %status.message(), "archive failed");
                Err(status)
            }
        }
    }

    async fn restore(&self, request: Request<WalRestoreRequest>) -> Result<Response<WalRestoreResult>, Status> {
        let started = Instant::now();
        let wanted = request.get_ref().source_wal_name.clone();
        match self.restore_file(request.into_inner()).await {
            Ok(name) => {
                self.state.record(|a| a.restored += 1);
                tracing::info!(wal = %name, elapsed_ms = started.elapsed().as_millis() as u64, "restored");
                Ok(Response::new(WalRestoreResult {}))
            }
            Err(status) => {
                // A miss is routine (PostgreSQL probes for the next timeline).
                if status.code() == tonic::Code::NotFound {
                    tracing::info!(wal = %wanted.chars().take(64).collect::<String>(), "not in the archive");
                } else {
                    tracing::warn!(wal = %wanted.chars().take(64).collect::<String>(), code = ?status.code(),
                        error = %status.message(), "restore failed");
                }
                Err(status)
            }
        }
    }

    async fn status(&self, request: Request<WalStatusRequest>) -> Result<Response<WalStatusResult>, Status> {
        let cluster = decode_cluster(&request.into_inner().cluster_definition)?;
        let config = parameters::own(&cluster)?;
        let store = self.state.store(&config.store)?;
        let mut segments: Vec<String> = store
            .list(&store.wal_prefix())
            .await?
            .into_iter()
            .filter_map(|meta| {
                let file = meta.location.filename()?.strip_suffix(".zst")?.to_owned();
                let name = WalFileName::parse(&file).ok()?;
                (name.kind() == WalFileKind::Segment).then_some(file)
            })
            .collect();
        segments.sort();
        let count = segments.len();
        Ok(Response::new(WalStatusResult {
            first_wal: segments.first().cloned().unwrap_or_default(),
            last_wal: segments.last().cloned().unwrap_or_default(),
            additional_information: [
                ("store".to_owned(), store.description().to_owned()),
                ("segments".to_owned(), count.to_string()),
            ]
            .into(),
        }))
    }

    async fn set_first_required(
        &self,
        _: Request<SetFirstRequiredRequest>,
    ) -> Result<Response<SetFirstRequiredResult>, Status> {
        Err(Status::unimplemented(
            "SetFirstRequired is not offered: retention follows backups (keepBackups)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgdata_is_the_parent_of_pg_wal() {
        assert_eq!(
            pgdata_of(Path::new(
                "/var/lib/postgresql/data/pgdata/pg_wal/000000010000000000000001"
            )),
            Some(Path::new("/var/lib/postgresql/data/pgdata"))
        );
        assert_eq!(pgdata_of(Path::new("/tmp/000000010000000000000001")), None);
    }

    #[tokio::test]
    async fn atomic_writes_leave_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let destination = dir.path().join("RECOVERYXLOG");
        std::fs::write(&destination, b"old").unwrap();
        write_atomically(&destination, b"new".to_vec()).await.unwrap();
        assert_eq!(std::fs::read(&destination).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [std::ffi::OsString::from("RECOVERYXLOG")]);
        // A destination in a missing directory fails and leaves nothing.
        assert!(
            write_atomically(&dir.path().join("missing/x"), b"x".to_vec())
                .await
                .is_err()
        );
    }
}
