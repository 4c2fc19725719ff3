//! WAL files in the store: PostgreSQL's `archive_command` and
//! `restore_command`, without the CNPG-I around them.
//!
//! * A WAL file is stored as `wals/…/<name>.zst`: compressed, checksummed
//!   ([`crate::storage::object`]) and created only if absent. The same name
//!   archived again with the same content succeeds (PostgreSQL retries
//!   after a crash); with other content it is refused
//!   ([`WalStoreError::Conflict`]), never overwritten ([`store_wal`]).
//! * Archiving over an existing object with the same content checks that
//!   copy whole: a damaged one is [`WalStoreError::Damaged`], never a
//!   success (PostgreSQL would recycle the segment) and never overwritten.
//! * The empty-archive check ([`refuse_foreign_archive`]): a first archive
//!   into a non-empty folder is refused ([`WalStoreError::NotEmpty`]), two
//!   clusters must not share one; CloudNativePG asks for it through
//!   [`CHECK_EMPTY_WAL_ARCHIVE_FILE`] in PGDATA ([`empty_archive_marker`]).
//! * [`restore_wal`] reads a file back, checks it against its checksum
//!   ([`fetch_wal`]) and writes it through a temporary file renamed into
//!   place ([`write_atomically`]), so PostgreSQL never reads half a file. A
//!   name the archive lacks is [`WalStoreError::NotInArchive`] (PostgreSQL
//!   then ends recovery, or tries the next timeline), and only that: a
//!   damaged object (checksum, decompression, format, truncation) is
//!   [`WalStoreError::Damaged`] naming the key, and a store that cannot be
//!   read is the store's own error ([`StoreError`]), never an absence.
//!
//! [`crate::codes`] gives each error the gRPC code CloudNativePG reads.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use bytes::Bytes;
use cnpgi_pluginhelper::lowlevel::{ArchiveDecision, WalFileKind, WalFileName, decide_archive};

use crate::storage::object::{self, ObjectError};
use crate::storage::store::{PutOutcome, Store, StoreError};

/// Why a WAL file could not be archived or restored: what failed, and on
/// which file, object or path.
#[derive(Debug, thiserror::Error)]
pub enum WalStoreError {
    /// The WAL file to archive cannot be read.
    #[error("cannot read {}: {source}", .path.display())]
    ReadSource {
        /// Where PostgreSQL said it is.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The WAL file to archive is larger than any WAL file.
    #[error("{name} is larger than 1 GiB ({size} bytes at {})", .path.display())]
    TooLarge {
        /// The WAL file.
        name: String,
        /// Where it is.
        path: PathBuf,
        /// Its size.
        size: u64,
    },
    /// A first archive into a folder that already holds objects (another
    /// cluster's WAL).
    #[error(
        "the archive {store} is not empty: this instance was just created, restored or joined, and must \
         not archive into another cluster's WAL; use another serverName or destinationPath, empty \
         it, or annotate the Cluster with cnpg.io/skipEmptyWalArchiveCheck=enabled"
    )]
    NotEmpty {
        /// The store and folder.
        store: String,
    },
    /// The store was read and has no object for the file: the only
    /// absence.
    #[error("WAL file {name} is not in the archive (no object {key} in {store})")]
    NotInArchive {
        /// The WAL file.
        name: String,
        /// The key looked up.
        key: String,
        /// The store.
        store: String,
    },
    /// The stored object cannot be read back.
    #[error("the archived WAL file {name} (object {key} in {store}) is damaged: {source}")]
    Damaged {
        /// The WAL file.
        name: String,
        /// Its object.
        key: String,
        /// The store.
        store: String,
        /// What is wrong with it.
        #[source]
        source: ObjectError,
    },
    /// The file cannot be encoded as an object.
    #[error("WAL file {name}: {source}")]
    Encode {
        /// The WAL file.
        name: String,
        /// Why.
        #[source]
        source: ObjectError,
    },
    /// The name is archived with other content.
    #[error(
        "WAL file {name} is already archived with different content (object {key} in {store}); refusing to overwrite it"
    )]
    Conflict {
        /// The WAL file.
        name: String,
        /// Its object.
        key: String,
        /// The store.
        store: String,
    },
    /// Another writer kept changing the object while it was archived.
    #[error("WAL file {name} changed in the store while it was being archived (object {key} in {store}); try again")]
    Raced {
        /// The WAL file.
        name: String,
        /// Its object.
        key: String,
        /// The store.
        store: String,
    },
    /// The restored file cannot be written.
    #[error("cannot write {}: {source}", .path.display())]
    Write {
        /// The destination.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A worker thread (compressing, checking, writing) failed.
    #[error("a worker thread failed: {0}")]
    Worker(#[source] tokio::task::JoinError),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The marker CloudNativePG leaves in PGDATA when the archive must be empty.
pub const CHECK_EMPTY_WAL_ARCHIVE_FILE: &str = ".check-empty-wal-archive";

/// The empty-archive marker of the PGDATA the WAL file `source` is in, when
/// CloudNativePG left one (after initdb, a restore or a join).
pub fn empty_archive_marker(source: &Path) -> Option<PathBuf> {
    pgdata_of(source)
        .map(|pgdata| pgdata.join(CHECK_EMPTY_WAL_ARCHIVE_FILE))
        .filter(|marker| marker.exists())
}

/// Removes the empty-archive marker once a file is archived: the check is
/// made once, later archives go to what is now this cluster's archive.
pub fn remove_marker(marker: &Path) {
    if let Err(error) = std::fs::remove_file(marker)
        && error.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(marker = %marker.display(), %error, "cannot remove the empty-archive marker");
    }
}

/// How many WAL files are encoded at once: as many as the process may use
/// cores (cgroup quotas included). Compressing is CPU work: more at once
/// only adds a zstd context and an object each to the memory, while the
/// uploads, which wait on the network, still overlap without bound.
static ENCODING: LazyLock<tokio::sync::Semaphore> = LazyLock::new(|| {
    tokio::sync::Semaphore::new(std::thread::available_parallelism().map_or(2, std::num::NonZeroUsize::get))
});

/// The WAL file `name` at `source` encoded as its object, read in chunks
/// ([`object::encode_file`], off the runtime's threads, at most
/// one per core at once) at zstd `level`.
///
/// # Errors
///
/// [`WalStoreError::ReadSource`], [`WalStoreError::TooLarge`],
/// [`WalStoreError::Encode`].
pub async fn encode_wal_file(source: &Path, name: &WalFileName, level: i32) -> Result<object::Encoded, WalStoreError> {
    let (path, owned_name) = (source.to_owned(), name.to_string());
    // The semaphore is never closed: a permit always comes.
    let _permit = ENCODING.acquire().await.ok();
    tokio::task::spawn_blocking(move || object::encode_file(&path, &owned_name, level))
        .await
        .map_err(WalStoreError::Worker)?
        .map_err(|error| match error {
            object::EncodeFileError::Read(source_error) => WalStoreError::ReadSource {
                path: source.to_owned(),
                source: source_error,
            },
            object::EncodeFileError::TooLarge(size) => WalStoreError::TooLarge {
                name: name.to_string(),
                path: source.to_owned(),
                size,
            },
            object::EncodeFileError::Object(source_error) => WalStoreError::Encode {
                name: name.to_string(),
                source: source_error,
            },
        })
}

/// Refuses to archive into a folder another cluster already uses: the
/// archive must be empty, or hold exactly this file with this content, its
/// BLAKE3 (this instance's own earlier success, the marker having outlived
/// it).
///
/// # Errors
///
/// [`WalStoreError::NotEmpty`], or the store's.
pub async fn refuse_foreign_archive(store: &Store, name: &WalFileName, blake3: &str) -> Result<(), WalStoreError> {
    if store.is_empty().await? {
        return Ok(());
    }
    let key = store.wal_key(name);
    let same = match store.get(&key).await? {
        // Unreadable or damaged: not this instance's success either.
        Some(stored) => archived_blake3(store, name, &key, stored, blake3)
            .await
            .is_ok_and(|theirs| theirs == blake3),
        None => false,
    };
    if same {
        return Ok(());
    }
    Err(WalStoreError::NotEmpty {
        store: store.description().to_owned(),
    })
}

/// The content of the archived WAL file `name`, checked against its
/// checksum. `None` from the store means only that it was read and lacks
/// the key: any other failure (a missing bucket or directory, the network)
/// is an error that must not end PostgreSQL's recovery.
///
/// # Errors
///
/// [`WalStoreError::NotInArchive`] only when the store was read and lacks
/// the object; [`WalStoreError::Damaged`]; the store's.
pub async fn fetch_wal(store: &Store, name: &WalFileName) -> Result<Vec<u8>, WalStoreError> {
    let key = store.wal_key(name);
    let stored = store.get(&key).await?.ok_or_else(|| WalStoreError::NotInArchive {
        name: name.to_string(),
        key: store.show(&key),
        store: store.description().to_owned(),
    })?;
    let expected = name.to_string();
    let decoded = tokio::task::spawn_blocking(move || object::decode(&stored, &expected))
        .await
        .map_err(WalStoreError::Worker)?
        .map_err(|e| damaged(name, &key, store, e))?;
    Ok(decoded.1)
}

/// Restores the archived WAL file `name` to `destination`, whole
/// ([`fetch_wal`], then [`write_atomically`]).
///
/// # Errors
///
/// [`fetch_wal`]'s, and [`WalStoreError::Write`].
pub async fn restore_wal(store: &Store, name: &WalFileName, destination: &Path) -> Result<(), WalStoreError> {
    let content = fetch_wal(store, name).await?;
    write_atomically(destination, content)
        .await
        .map_err(|source| WalStoreError::Write {
            path: destination.to_owned(),
            source,
        })
}

/// The archived segments (not `.partial`, `.history` or `.backup` files),
/// sorted.
pub async fn archived_segments(store: &Store) -> Result<Vec<String>, StoreError> {
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
    Ok(segments)
}

/// PGDATA, from the path of a file in `PGDATA/pg_wal`.
fn pgdata_of(source: &Path) -> Option<&Path> {
    let wal_dir = source.parent()?;
    (wal_dir.file_name()? == "pg_wal").then(|| wal_dir.parent()).flatten()
}

/// A stored object that cannot be read back, naming its key.
fn damaged(name: &WalFileName, key: &object_store::path::Path, store: &Store, source: ObjectError) -> WalStoreError {
    WalStoreError::Damaged {
        name: name.to_string(),
        key: store.show(key),
        store: store.description().to_owned(),
        source,
    }
}

/// The BLAKE3 of the archived copy of `name`, once that copy is known to be
/// intact ([`object::content_blake3`]): a copy whose header says "same
/// content" but whose data is damaged must not let `Archive` answer OK
/// (PostgreSQL would then recycle the only good copy of the segment).
async fn archived_blake3(
    store: &Store,
    name: &WalFileName,
    key: &object_store::path::Path,
    stored: Bytes,
    blake3: &str,
) -> Result<String, WalStoreError> {
    let expected = name.to_string();
    let ours = blake3.to_owned();
    tokio::task::spawn_blocking(move || object::content_blake3(&stored, &expected, &ours))
        .await
        .map_err(WalStoreError::Worker)?
        .map_err(|e| damaged(name, key, store, e))
}

/// Archives `encoded` ([`encode_wal_file`]) as `name` unless the same
/// content is there: the decision of [`decide_archive`] on BLAKE3 digests.
///
/// # Errors
///
/// [`WalStoreError::Conflict`] for other content under that name,
/// [`WalStoreError::Damaged`] for a damaged copy of the same content,
/// [`WalStoreError::Raced`], the store's.
pub async fn store_wal(
    store: &Store,
    name: &WalFileName,
    encoded: object::Encoded,
) -> Result<ArchiveDecision, WalStoreError> {
    let key = store.wal_key(name);
    // Archiving creates a local store's directory (a restore never does).
    store.prepare_write().await?;
    let object::Encoded { blake3, object } = encoded;
    let encoded = Bytes::from(object);

    // The conditional put first: a new segment, the usual case, costs one
    // round trip; only a name that exists is read back and compared. Twice
    // at most: the object may go between the put and the read (retention),
    // and we put again.
    for _ in 0..2 {
        if store.put_new(&key, encoded.clone()).await? == PutOutcome::Created {
            return Ok(ArchiveDecision::Store);
        }
        let Some(stored) = store.get(&key).await? else {
            continue;
        };
        let existing = archived_blake3(store, name, &key, stored, &blake3).await?;
        // The only refusal of PostgreSQL's rule is other content.
        return decide_archive(name, Some(existing.as_str()), blake3.as_str()).map_err(|_| WalStoreError::Conflict {
            name: name.to_string(),
            key: store.show(&key),
            store: store.description().to_owned(),
        });
    }
    Err(WalStoreError::Raced {
        name: name.to_string(),
        key: store.show(&key),
        store: store.description().to_owned(),
    })
}

/// Writes `content` to `destination` atomically: a temporary file in the
/// same directory, synced, then renamed over the destination.
///
/// # Errors
///
/// Any I/O error; the temporary file is then removed.
pub async fn write_atomically(destination: &Path, content: Vec<u8>) -> io::Result<()> {
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
    .map_err(io::Error::other)?
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
