//! Restoring a base backup into an empty PGDATA.
//!
//! [`choose_backup`] picks the backup in the store for a recovery target
//! ([`crate::storage::manifest::choose`]: the `backupID`, else the newest
//! that ended before `targetTime` or `targetLSN`, else the newest); a
//! damaged manifest is [`RestoreError::DamagedManifest`] (or
//! [`RestoreError::NoneUsable`]), not an absent backup.
//!
//! [`restore_backup`] streams its data into a staging directory beside
//! PGDATA (which must be empty or absent), checking the SHA-256 and size
//! the manifest recorded, and only once the whole object matched renames
//! the staging directory into place (see `Staging`): a damaged backup
//! (checksum, decompression, tar format, truncation, or a data object
//! missing while its manifest is there) fails with [`RestoreError::Damaged`]
//! and leaves PGDATA as it was, and so does a store that fails mid-way
//! ([`RestoreError::Store`]).
//!
//! [`crate::codes`] gives each error the gRPC code CloudNativePG reads.

use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::TryStreamExt;
use sha2::{Digest, Sha256};
use tokio_util::io::{StreamReader, SyncIoBridge};

use crate::cluster::RecoveryTarget;
use crate::storage::manifest::{self, ChooseError, Manifest};
use crate::storage::object;
use crate::storage::retention::scan_backups;
use crate::storage::store::{Store, StoreError};

/// Why a base backup could not be chosen or restored: what failed, and on
/// which backup, object or path.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// The store failed, listing the backups or reading the data.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The manifest of the backup asked for (`backupID`) cannot be read.
    #[error("the manifest of backup {backup_id} ({key} in {store}) is damaged: {reason}")]
    DamagedManifest {
        /// The backup.
        backup_id: String,
        /// Its manifest's key.
        key: String,
        /// The store.
        store: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No readable backup fits the target, and some manifests are damaged:
    /// damage, not absence.
    #[error("{source} in {store}; these backups' manifests are damaged: {damaged}")]
    NoneUsable {
        /// Why no readable backup fits.
        source: ChooseError,
        /// The store.
        store: String,
        /// The damaged manifests: backup id, key and reason of each.
        damaged: String,
    },
    /// No backup fits the recovery target (or it cannot be read).
    #[error(transparent)]
    Choose(#[from] ChooseError),
    /// PGDATA holds files.
    #[error("PGDATA {} is not empty: a backup is restored into an empty directory only", .pgdata.display())]
    PgdataNotEmpty {
        /// PGDATA.
        pgdata: PathBuf,
    },
    /// PGDATA cannot be read.
    #[error("cannot read PGDATA {}: {source}", .pgdata.display())]
    PgdataUnreadable {
        /// PGDATA.
        pgdata: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The backup's data is damaged (checksum or size, decompression, tar
    /// format, truncation, no `backup_label`, or missing).
    #[error("backup {id} ({key} in {store}) is damaged: {detail}")]
    Damaged {
        /// The backup.
        id: String,
        /// Its data object.
        key: String,
        /// The store.
        store: String,
        /// What is wrong with it.
        detail: String,
    },
    /// Writing the files failed (disk full, permissions).
    #[error("cannot unpack into {path}: {source}")]
    Local {
        /// The directory written.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The worker thread unpacking the backup failed.
    #[error("a worker thread failed: {0}")]
    Worker(#[source] tokio::task::JoinError),
}

/// The backup of `store` a recovery to `target` starts from.
///
/// # Errors
///
/// [`RestoreError::DamagedManifest`] when the backup asked for has a
/// damaged manifest, [`RestoreError::NoneUsable`] when none fits and some
/// manifests are damaged, [`RestoreError::Choose`] when none fits, the
/// store's errors.
pub async fn choose_backup(store: &Store, target: &RecoveryTarget) -> Result<Manifest, RestoreError> {
    let backups = scan_backups(store).await?;
    let damaged_manifests = || {
        backups
            .damaged
            .iter()
            .map(|d| format!("{} ({}: {})", d.backup_id, d.key, d.reason))
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(damaged) = backups.damaged.iter().find(|d| d.backup_id == target.backup_id) {
        return Err(RestoreError::DamagedManifest {
            backup_id: damaged.backup_id.clone(),
            key: damaged.key.clone(),
            store: store.description().to_owned(),
            reason: damaged.reason.clone(),
        });
    }
    // No usable backup while some manifests are damaged: damage, not
    // absence. (A damaged newest backup with an older one usable is
    // only logged: the older one reaches the same target, replaying
    // more WAL.)
    match manifest::choose(&backups.complete, target) {
        Ok(chosen) => Ok(chosen.clone()),
        Err(source) if !backups.damaged.is_empty() => Err(RestoreError::NoneUsable {
            source,
            store: store.description().to_owned(),
            damaged: damaged_manifests(),
        }),
        Err(error) => Err(error.into()),
    }
}

/// Refuses a `pgdata` that is neither empty nor absent.
fn refuse_non_empty(pgdata: &Path) -> Result<(), RestoreError> {
    match is_empty_or_absent(pgdata) {
        Ok(true) => Ok(()),
        Ok(false) => Err(RestoreError::PgdataNotEmpty {
            pgdata: pgdata.to_owned(),
        }),
        Err(source) => Err(RestoreError::PgdataUnreadable {
            pgdata: pgdata.to_owned(),
            source,
        }),
    }
}

/// Restores the backup `chosen` of `store` into `pgdata`, which must be
/// empty or absent; PGDATA gets the backup whole, once verified, or stays
/// as it was.
///
/// # Errors
///
/// [`RestoreError::PgdataNotEmpty`] for a PGDATA with files,
/// [`RestoreError::Damaged`] for a damaged backup, the store's errors,
/// [`RestoreError::Local`] (and the other PGDATA errors) for local failures.
pub async fn restore_backup(store: &Store, chosen: &Manifest, pgdata: &Path) -> Result<(), RestoreError> {
    refuse_non_empty(pgdata)?;
    tracing::info!(backup = %chosen.backup_id, store = %store.description(), pgdata = %pgdata.display(),
        "restoring");

    let key = store.backup_prefix(&chosen.backup_id).join(chosen.data.file.as_str());
    let damaged = {
        let (id, key, store) = (
            chosen.backup_id.clone(),
            store.show(&key),
            store.description().to_owned(),
        );
        move |detail| RestoreError::Damaged {
            id: id.clone(),
            key: key.clone(),
            store: store.clone(),
            detail,
        }
    };
    // The manifest is written after the data: a manifest without its
    // data is a damaged backup, not an absent one.
    let Some(data) = store.get_stream(&key).await? else {
        return Err(damaged("its manifest is there but its data object is missing".into()));
    };
    let store_failure = Arc::new(Mutex::new(None));
    let stream = data.into_stream().map_err({
        let (store, key, store_failure) = (store.clone(), key.clone(), store_failure.clone());
        move |error| {
            let classified = store.classify("get", &key, error);
            let text = classified.to_string();
            *store_failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(classified);
            io::Error::other(text)
        }
    });
    let reader = SyncIoBridge::new(StreamReader::new(stream));
    let pgdata = pgdata.to_owned();
    let expected_sha256 = chosen.data.sha256.clone();
    let expected_size = chosen.data.size;
    tokio::task::spawn_blocking(move || -> Result<(), RestoreError> {
        let local = |source| RestoreError::Local {
            path: pgdata.display().to_string(),
            source,
        };
        let staging = Staging::for_pgdata(&pgdata).map_err(local)?;
        staging.create().map_err(local)?;
        let result = unpack_and_verify(
            reader,
            staging.dir(),
            &expected_sha256,
            expected_size,
            &store_failure,
            damaged,
        )
        .and_then(|()| staging.publish(&pgdata).map_err(local));
        if result.is_err()
            && let Err(error) = staging.remove()
        {
            tracing::warn!(staging = %staging.dir().display(), %error,
                "cannot remove the staging directory of a failed restore");
        }
        result
    })
    .await
    .map_err(RestoreError::Worker)?
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

/// Remembers whether reading through it failed (the zstd decoder: a
/// failure there, unless the store failed underneath, is damaged data).
struct Watched<R> {
    inner: R,
    failed: Option<String>,
}

impl<R: Read> Read for Watched<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.read(buf).inspect_err(|error| {
            self.failed.get_or_insert_with(|| error.to_string());
        })
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

/// Errors of the local filesystem, never of the data: no need to read the
/// rest of the backup to know the data is not to blame.
fn is_local_failure(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::StorageFull
            | io::ErrorKind::QuotaExceeded
            | io::ErrorKind::ReadOnlyFilesystem
            | io::ErrorKind::PermissionDenied
    )
}

/// Where a backup is unpacked before it is verified, so that PGDATA never
/// holds a half-written or damaged backup.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Staging {
    /// `<parent>/.<pgdata name>.wal-archive-restore`, renamed to PGDATA once
    /// verified (one rename: PGDATA appears whole or not at all).
    Beside(PathBuf),
    /// `<pgdata>/.wal-archive-restore`, when PGDATA is a mount point (a
    /// rename across filesystems is impossible): its entries are moved up
    /// once verified.
    Inside(PathBuf),
}

impl Staging {
    /// The staging directory for `pgdata`: beside it, on the same
    /// filesystem, unless PGDATA is itself a mount point.
    fn for_pgdata(pgdata: &Path) -> io::Result<Self> {
        use std::os::unix::fs::MetadataExt;
        let parent = pgdata.parent().unwrap_or(Path::new("/"));
        let name = pgdata
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mount_point = match std::fs::metadata(pgdata) {
            Ok(metadata) => metadata.dev() != std::fs::metadata(parent)?.dev(),
            Err(error) if error.kind() == io::ErrorKind::NotFound => false,
            Err(error) => return Err(error),
        };
        Ok(if mount_point {
            Self::Inside(pgdata.join(".wal-archive-restore"))
        } else {
            Self::Beside(parent.join(format!(".{name}.wal-archive-restore")))
        })
    }

    fn dir(&self) -> &Path {
        match self {
            Self::Beside(dir) | Self::Inside(dir) => dir,
        }
    }

    /// A new, empty, private staging directory (a leftover of an attempt
    /// killed half-way is ours, and removed).
    fn create(&self) -> io::Result<()> {
        self.remove()?;
        if let Some(parent) = self.dir().parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::create_dir(self.dir())?;
        std::fs::set_permissions(self.dir(), std::fs::Permissions::from_mode(0o700))
    }

    /// Removes the staging directory and everything in it.
    fn remove(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(self.dir()) {
            Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
            _ => Ok(()),
        }
    }

    /// Moves the verified backup into `pgdata` (empty or absent), and syncs
    /// the directory that changed.
    fn publish(&self, pgdata: &Path) -> io::Result<()> {
        match self {
            Self::Beside(dir) => {
                // rename(2) replaces an empty directory.
                std::fs::rename(dir, pgdata)?;
                std::fs::File::open(pgdata.parent().unwrap_or(Path::new("/")))?.sync_all()
            }
            Self::Inside(dir) => {
                let mut moved = Vec::new();
                let result = (|| {
                    for entry in std::fs::read_dir(dir)? {
                        let entry = entry?;
                        let target = pgdata.join(entry.file_name());
                        std::fs::rename(entry.path(), &target)?;
                        moved.push(target);
                    }
                    std::fs::remove_dir(dir)?;
                    std::fs::set_permissions(pgdata, std::fs::Permissions::from_mode(0o700))?;
                    std::fs::File::open(pgdata)?.sync_all()
                })();
                if result.is_err() {
                    // Back to an empty PGDATA: what was moved goes again.
                    for path in moved {
                        let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
                    }
                }
                result
            }
        }
    }
}

/// Unpacks the backup read from `stream` into `staging`, and checks the
/// whole object against the manifest. `store_failure` holds what the
/// store's stream failed with, if it did.
fn unpack_and_verify(
    stream: impl Read,
    staging: &Path,
    expected_sha256: &str,
    expected_size: u64,
    store_failure: &Mutex<Option<StoreError>>,
    damaged: impl Fn(String) -> RestoreError,
) -> Result<(), RestoreError> {
    let store_failed = || store_failure.lock().unwrap_or_else(PoisonError::into_inner).take();
    let local = |source| RestoreError::Local {
        path: staging.display().to_string(),
        source,
    };
    let mut hashing = Hashing {
        inner: stream,
        hasher: Sha256::new(),
        count: 0,
    };
    let mut decoder_failure = None;
    let unpacked = (|| {
        let decoder = Watched {
            inner: zstd::stream::read::Decoder::new(&mut hashing)?,
            failed: None,
        };
        let mut archive = tar::Archive::new(decoder);
        archive.set_preserve_permissions(true);
        archive.set_preserve_mtime(true);
        archive.set_overwrite(false);
        let result = archive.unpack(staging);
        decoder_failure = archive.into_inner().failed;
        result
    })();
    if let Err(error) = &unpacked {
        if let Some(store_error) = store_failed() {
            return Err(store_error.into());
        }
        if let Some(failure) = decoder_failure {
            return Err(damaged(format!("cannot decompress: {failure}")));
        }
        if is_local_failure(error) {
            return Err(local(io::Error::new(error.kind(), error.to_string())));
        }
        // A tar error: damaged data, unless the whole object matches the
        // manifest (then the fault is local), which reading the rest tells.
    }
    // What the decoder did not need (the tar padding, the zstd epilogue)
    // counts for the checksum.
    if let Err(error) = io::copy(&mut hashing, &mut io::sink()) {
        return Err(match store_failed() {
            Some(store_error) => store_error.into(),
            None => local(error),
        });
    }
    let found = object::hex(&hashing.hasher.finalize());
    let mismatch = (found != expected_sha256 || hashing.count != expected_size).then(|| {
        format!(
            "{} bytes with SHA-256 {found}, the manifest says {expected_size} bytes with SHA-256 {expected_sha256}",
            hashing.count
        )
    });
    match (unpacked, mismatch) {
        (Err(error), Some(mismatch)) => Err(damaged(format!("{error}; the data has {mismatch}"))),
        (Err(error), None) => Err(local(error)),
        (Ok(()), Some(mismatch)) => Err(damaged(format!("the data has {mismatch}"))),
        (Ok(()), None) if !staging.join("backup_label").is_file() => {
            Err(damaged("it matches its manifest but holds no backup_label".into()))
        }
        (Ok(()), None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emptiness() {
        let dir = tempfile::tempdir().unwrap();
        assert!(is_empty_or_absent(dir.path()).unwrap());
        assert!(is_empty_or_absent(&dir.path().join("missing")).unwrap());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/file"), b"x").unwrap();
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        assert!(!is_empty_or_absent(dir.path()).unwrap());
    }

    #[test]
    fn staging_is_beside_pgdata_and_replaces_an_empty_one() {
        let dir = tempfile::tempdir().unwrap();
        let pgdata = dir.path().join("pgdata");
        let staging = Staging::for_pgdata(&pgdata).unwrap();
        assert_eq!(staging, Staging::Beside(dir.path().join(".pgdata.wal-archive-restore")));
        std::fs::create_dir(&pgdata).unwrap();
        assert_eq!(Staging::for_pgdata(&pgdata).unwrap(), staging);
        // A leftover of a killed attempt is cleared.
        std::fs::create_dir(staging.dir()).unwrap();
        std::fs::write(staging.dir().join("old"), b"x").unwrap();
        staging.create().unwrap();
        assert!(is_empty_or_absent(staging.dir()).unwrap());
        std::fs::write(staging.dir().join("PG_VERSION"), b"17").unwrap();
        staging.publish(&pgdata).unwrap();
        assert!(!staging.dir().exists());
        assert_eq!(std::fs::read(pgdata.join("PG_VERSION")).unwrap(), b"17");
        assert_eq!(std::fs::metadata(&pgdata).unwrap().permissions().mode() & 0o777, 0o700);
    }
}
