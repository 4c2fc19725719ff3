//! PGDATA as a tar stream, compressed with zstd, hashed and uploaded to the
//! store as it is read: `backups/<id>/data.tar.zst` of a base backup.
//!
//! What `pg_basebackup` leaves out is left out (WAL, temporary files,
//! `postmaster.pid`, …). Files that change while being read are fine, WAL
//! replay repairs them; files that vanish are skipped.

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::PoisonError;
use std::time::SystemTime;

use sha2::{Digest, Sha256};

use crate::storage::object;
use crate::storage::part_upload::PartUpload;
use crate::storage::store::{Store, StoreError};

/// Top-level directories whose contents are not backed up (the directory
/// itself is, empty), as `pg_basebackup`.
const EMPTY_DIRECTORIES: [&str; 8] = [
    "pg_wal",
    "pg_replslot",
    "pg_dynshmem",
    "pg_notify",
    "pg_serial",
    "pg_snapshots",
    "pg_stat_tmp",
    "pg_subtrans",
];
/// Top-level files never backed up: runtime state, files the backup writes
/// itself, and signal files (a restore decides its own mode).
const SKIPPED_FILES: [&str; 10] = [
    "postmaster.pid",
    "postmaster.opts",
    "backup_label",
    "tablespace_map",
    "backup_manifest",
    "postgresql.auto.conf.tmp",
    "current_logfiles.tmp",
    "recovery.signal",
    "standby.signal",
    crate::storage::wal::CHECK_EMPTY_WAL_ARCHIVE_FILE,
];

/// The tar stream of a backup's data, open: PGDATA's files go in with
/// [`add_pgdata`], the files the backup makes with [`add_generated`], and
/// [`finish`] closes it.
pub(crate) type DataTar = tar::Builder<Sink>;

pub(crate) use crate::storage::part_upload::UploadFailure;

/// The stream into `key` of `store`, at zstd `level`; a failure of the
/// store is kept in `failure`. Blocking: call it on a blocking thread.
pub(crate) fn open(
    store: &Store,
    key: object_store::path::Path,
    level: i32,
    failure: &UploadFailure,
) -> io::Result<DataTar> {
    let upload = PartUpload::new(
        tokio::runtime::Handle::current(),
        store,
        key,
        store.upload_part_size(),
        failure,
    );
    let hashing = Hashing {
        inner: upload,
        hasher: Sha256::new(),
        count: 0,
    };
    let mut encoder = zstd::stream::write::Encoder::new(hashing, level)?;
    encoder.include_checksum(true)?;
    let mut builder = tar::Builder::new(Counting {
        inner: encoder,
        count: 0,
    });
    builder.mode(tar::HeaderMode::Complete);
    Ok(builder)
}

/// What [`finish`] tells of the stored data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredData {
    /// The size of the tar stream.
    pub(crate) tar_size: u64,
    /// The size of the stored (compressed) object.
    pub(crate) stored_size: u64,
    /// The SHA-256 of the stored object.
    pub(crate) sha256: String,
}

/// The store's error, when the upload failed.
pub(crate) fn take_failure(failure: &UploadFailure) -> Option<StoreError> {
    failure.lock().unwrap_or_else(PoisonError::into_inner).take()
}

/// Reads `size` bytes of a file that may shrink or grow meanwhile: extra
/// bytes are not read, missing ones are zeros (replay rewrites them).
pub(crate) struct ExactSize<R> {
    inner: io::Take<R>,
    remaining: u64,
}

impl<R: Read> Read for ExactSize<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 {
            return Ok(0);
        }
        let limit = buf.len().min(self.remaining.try_into().unwrap_or(usize::MAX));
        let mut read = self.inner.read(&mut buf[..limit])?;
        if read == 0 {
            buf[..limit].fill(0);
            read = limit;
        }
        self.remaining -= read as u64;
        Ok(read)
    }
}

/// Counts the bytes written through it.
pub(crate) struct Counting<W> {
    inner: W,
    count: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.count += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Counts and hashes the bytes written through it.
pub(crate) struct Hashing<W> {
    inner: W,
    hasher: Sha256,
    count: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = self.inner.write(buf)?;
        self.hasher.update(&buf[..written]);
        self.count += written as u64;
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

pub(crate) type Sink = Counting<zstd::stream::write::Encoder<'static, Hashing<PartUpload>>>;

fn header_for(metadata: &std::fs::Metadata, kind: tar::EntryType, size: u64) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(metadata.permissions().mode() & 0o7777);
    header.set_mtime(metadata.mtime().max(0) as u64);
    header.set_size(size);
    header
}

/// Adds PGDATA's files to the tar (see the module documentation for what is
/// left out). `skip` is a directory never descended into (a local archive
/// configured inside PGDATA).
pub(crate) fn add_pgdata(builder: &mut DataTar, pgdata: &Path, skip: Option<&Path>) -> io::Result<u64> {
    let mut files = 0;
    let mut pending = vec![PathBuf::new()];
    while let Some(relative) = pending.pop() {
        let directory = pgdata.join(&relative);
        let mut entries: Vec<_> = match std::fs::read_dir(&directory) {
            Ok(entries) => entries.collect::<Result<_, _>>()?,
            Err(error) if error.kind() == io::ErrorKind::NotFound && !relative.as_os_str().is_empty() => continue,
            Err(error) => return Err(error),
        };
        entries.sort_by_key(std::fs::DirEntry::file_name);
        for entry in entries {
            let name = entry.file_name();
            let name_text = name.to_string_lossy();
            let path = relative.join(&name);
            let absolute = pgdata.join(&path);
            let top_level = relative.as_os_str().is_empty();
            if (top_level && SKIPPED_FILES.contains(&name_text.as_ref()))
                || name_text.starts_with("pgsql_tmp")
                || name_text == "pg_internal.init"
                || skip.is_some_and(|s| s == absolute)
            {
                continue;
            }
            // A file dropped since the listing is no loss: replay drops it too.
            let metadata = match std::fs::symlink_metadata(&absolute) {
                Ok(metadata) => metadata,
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            };
            let kind = metadata.file_type();
            if top_level && EMPTY_DIRECTORIES.contains(&name_text.as_ref()) {
                // pg_wal may be a symlink to a WAL volume: restore a directory.
                let dir_metadata = std::fs::metadata(&absolute)?;
                let mut header = header_for(&dir_metadata, tar::EntryType::Directory, 0);
                builder.append_data(&mut header, &path, io::empty())?;
                if name_text == "pg_wal" {
                    let mut header = header_for(&dir_metadata, tar::EntryType::Directory, 0);
                    builder.append_data(&mut header, path.join("archive_status"), io::empty())?;
                }
            } else if kind.is_dir() {
                let mut header = header_for(&metadata, tar::EntryType::Directory, 0);
                builder.append_data(&mut header, &path, io::empty())?;
                pending.push(path);
            } else if kind.is_symlink() {
                let target = std::fs::read_link(&absolute)?;
                let mut header = header_for(&metadata, tar::EntryType::Symlink, 0);
                builder.append_link(&mut header, &path, target)?;
            } else if kind.is_file() {
                let file = match std::fs::File::open(&absolute) {
                    Ok(file) => file,
                    Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                    Err(error) => return Err(error),
                };
                let size = metadata.len();
                let mut header = header_for(&metadata, tar::EntryType::Regular, size);
                let data = ExactSize {
                    inner: file.take(size),
                    remaining: size,
                };
                builder.append_data(&mut header, &path, data)?;
                files += 1;
            }
            // Sockets and other special files are not data.
        }
    }
    Ok(files)
}

/// Adds a file the backup itself makes (`backup_label`, `tablespace_map`).
pub(crate) fn add_generated(builder: &mut DataTar, name: &str, content: &[u8]) -> io::Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o600);
    header.set_mtime(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    );
    header.set_size(content.len() as u64);
    builder.append_data(&mut header, name, content)
}

/// Closes the stream: the tar trailer, the zstd epilogue, the upload.
pub(crate) fn finish(builder: DataTar) -> io::Result<StoredData> {
    let counting = builder.into_inner()?;
    let tar_size = counting.count;
    let mut hashing = counting.inner.finish()?;
    hashing.flush()?;
    let stored_size = hashing.count;
    let sha256 = object::hex(&hashing.hasher.finalize());
    let mut upload = hashing.inner;
    upload.shutdown()?;
    Ok(StoredData {
        tar_size,
        stored_size,
        sha256,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::manifest;
    use crate::storage::store::{Location, StoreConfig};

    #[test]
    fn exact_size_reads_pad_or_cut() {
        let mut out = Vec::new();
        ExactSize {
            inner: (&b"abc"[..]).take(5),
            remaining: 5,
        }
        .read_to_end(&mut out)
        .unwrap();
        assert_eq!(out, b"abc\0\0");
        out.clear();
        ExactSize {
            inner: (&b"abcdef"[..]).take(4),
            remaining: 4,
        }
        .read_to_end(&mut out)
        .unwrap();
        assert_eq!(out, b"abcd");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_failing_on_the_store_keeps_the_store_error() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&StoreConfig {
            location: Location::Local(dir.path().to_owned()),
            server_name: "pg1".into(),
        })
        .unwrap();
        // The backup's folder is a file: the store cannot create the object.
        std::fs::create_dir_all(dir.path().join("pg1/backups")).unwrap();
        std::fs::write(dir.path().join("pg1/backups/20260101T000000"), b"x").unwrap();
        let key = store.backup_prefix("20260101T000000").join(manifest::DATA_FILE);
        let failure = UploadFailure::default();
        let mut upload = PartUpload::new(tokio::runtime::Handle::current(), &store, key, 1024, &failure);
        let error = tokio::task::spawn_blocking(move || {
            upload.write_all(b"data")?;
            upload.shutdown()
        })
        .await
        .unwrap()
        .unwrap_err();
        let kept = failure.lock().unwrap().take().unwrap();
        assert_eq!(error.to_string(), kept.to_string());
        assert!(
            kept.to_string().contains("pg1/backups/20260101T000000/data.tar.zst"),
            "{kept}"
        );
        assert!(matches!(kept, StoreError::Failed { .. }), "{kept:?}");
    }
}
