//! A backup's data object uploaded in parts from a blocking thread, in two
//! buffers allocated once: one part fills while the one before it uploads.
//!
//! A sidecar's memory during a backup is then two parts (10 MiB on S3,
//! whose parts are 5 MiB at least) whatever the size of PGDATA.
//! object_store's `BufWriter` did the same job with a fresh buffer of 8 KiB
//! blocks per part, freed by another thread after the upload; the allocator
//! kept several parts' worth of those blocks a while (BENCHMARKS.md, "WAL
//! archiving under load").
//!
//! An upload that is dropped before [`PartUpload::shutdown`] completed it
//! (the backup failed) is aborted: S3 would otherwise keep, and bill, the
//! parts of an unfinished multipart upload until a lifecycle rule removes
//! them.
//!
//! ```no_run
//! use std::io::Write as _;
//! use cnpgi_wal_archive::storage::part_upload::{PartUpload, UploadFailure};
//! use cnpgi_wal_archive::storage::store::Store;
//!
//! # async fn upload(store: Store) -> std::io::Result<()> {
//! let key = store.backup_prefix("20260101T000000").join("data.tar.zst");
//! let part_size = store.upload_part_size();
//! let failure = UploadFailure::default();
//! let mut upload = PartUpload::new(tokio::runtime::Handle::current(), &store, key, part_size, &failure);
//! // Writes block on the runtime: from a blocking thread.
//! tokio::task::spawn_blocking(move || {
//!     upload.write_all(b"the data")?;
//!     upload.shutdown()
//! })
//! .await?
//! # }
//! ```

use std::io::{self, Write};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use object_store::{MultipartUpload, ObjectStoreExt as _, PutPayload, path::Path};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::storage::store::{Store, StoreError};

/// What the upload failed with, kept classified: the tar and zstd layers
/// above it only pass its text on.
pub type UploadFailure = Arc<Mutex<Option<StoreError>>>;

/// How long the abort of an unfinished upload may take; it runs after the
/// backup already failed, and nobody waits for it.
const ABORT_TIMEOUT: Duration = Duration::from_secs(30);

/// The upload of one object in parts, written to from a blocking thread
/// (`Write` blocks on the runtime of `runtime`).
pub struct PartUpload {
    runtime: Handle,
    store: Store,
    key: Path,
    failure: UploadFailure,
    part_size: usize,
    /// `None` until the first part (the upload is created then), and once
    /// completed.
    upload: Option<Box<dyn MultipartUpload>>,
    filling: BytesMut,
    /// The part uploading, and its buffer, taken back once it is done.
    in_flight: Option<(JoinHandle<object_store::Result<()>>, Bytes)>,
    /// Parts sent so far.
    parts: usize,
}

impl PartUpload {
    /// An upload into `key` of `store`, in parts of `part_size` bytes (the
    /// last one may be shorter); a failure of the store is kept in
    /// `failure`. Nothing is sent before the first part is full.
    pub fn new(runtime: Handle, store: &Store, key: Path, part_size: usize, failure: &UploadFailure) -> Self {
        Self {
            runtime,
            store: store.clone(),
            key,
            failure: failure.clone(),
            part_size,
            upload: None,
            filling: BytesMut::with_capacity(part_size),
            in_flight: None,
            parts: 0,
        }
    }

    /// Keeps the store's error, classified, and gives its text to the
    /// layers above.
    fn fail(&self, operation: &'static str, error: object_store::Error) -> io::Error {
        let classified = self.store.classify(operation, &self.key, error);
        let text = classified.to_string();
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(classified);
        io::Error::other(text)
    }

    /// Waits for the part uploading, and gives its buffer back when nothing
    /// else holds it any more.
    fn wait_in_flight(&mut self) -> io::Result<Option<BytesMut>> {
        let Some((task, part)) = self.in_flight.take() else {
            return Ok(None);
        };
        match self.runtime.block_on(task) {
            Ok(Ok(())) => {}
            Ok(Err(error)) => return Err(self.fail("upload", error)),
            Err(join) => return Err(io::Error::other(format!("the upload of a part stopped: {join}"))),
        }
        Ok(part.try_into_mut().ok().map(|mut buffer| {
            buffer.clear();
            buffer
        }))
    }

    /// Sends the part filled so far, once the one before it is uploaded.
    fn send_part(&mut self) -> io::Result<()> {
        let spare = self.wait_in_flight()?;
        if self.upload.is_none() {
            let created = self
                .runtime
                .block_on(self.store.object_store().put_multipart(&self.key));
            self.upload = Some(created.map_err(|error| self.fail("upload", error))?);
        }
        let next = spare.unwrap_or_else(|| BytesMut::with_capacity(self.part_size));
        let part = std::mem::replace(&mut self.filling, next).freeze();
        let Some(upload) = self.upload.as_mut() else {
            return Err(io::Error::other("the upload is already complete"));
        };
        let sending = upload.put_part(PutPayload::from(part.clone()));
        self.in_flight = Some((self.runtime.spawn(sending), part));
        self.parts += 1;
        Ok(())
    }

    /// Sends the last part and completes the upload (S3's multipart
    /// completion, or a local store's rename).
    pub fn shutdown(&mut self) -> io::Result<()> {
        // An object is at least one part, even an empty one.
        if !self.filling.is_empty() || self.parts == 0 {
            self.send_part()?;
        }
        self.wait_in_flight()?;
        let Some(mut upload) = self.upload.take() else {
            return Err(io::Error::other("the upload is already complete"));
        };
        match self.runtime.block_on(upload.complete()) {
            Ok(_) => Ok(()),
            Err(error) => {
                self.upload = Some(upload);
                Err(self.fail("upload", error))
            }
        }
    }
}

impl Write for PartUpload {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let taken = buf.len().min(self.part_size - self.filling.len());
        self.filling.extend_from_slice(&buf[..taken]);
        if self.filling.len() == self.part_size {
            self.send_part()?;
        }
        Ok(taken)
    }

    /// Nothing to do: a part goes when it is full, the last one at
    /// [`PartUpload::shutdown`].
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for PartUpload {
    fn drop(&mut self) {
        let Some(mut upload) = self.upload.take() else {
            return;
        };
        if let Some((task, _)) = self.in_flight.take() {
            task.abort();
        }
        let key = self.key.clone();
        // Dropped on a blocking thread or in async code: never block here.
        self.runtime.spawn(async move {
            match tokio::time::timeout(ABORT_TIMEOUT, upload.abort()).await {
                Ok(Ok(())) => tracing::debug!(%key, "aborted the unfinished upload"),
                Ok(Err(error)) => tracing::warn!(%key, %error, "cannot abort the unfinished upload; its parts stay in the store until a lifecycle rule removes them"),
                Err(_) => tracing::warn!(%key, "the abort of the unfinished upload timed out; its parts stay in the store until a lifecycle rule removes them"),
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::store::{Location, StoreConfig};

    fn local_store(dir: &std::path::Path) -> Store {
        Store::open(&StoreConfig {
            location: Location::Local(dir.to_owned()),
            server_name: "pg1".into(),
        })
        .unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn parts_reuse_two_buffers_and_make_the_object() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path());
        store.prepare_write().await.unwrap();
        let key = store.key("data");
        let failure = UploadFailure::default();
        let mut upload = PartUpload::new(Handle::current(), &store, key.clone(), 1000, &failure);
        let content: Vec<u8> = (0..10_500u32).map(|i| (i % 251) as u8).collect();
        let (upload, buffers) = tokio::task::spawn_blocking(move || {
            let mut buffers = std::collections::BTreeSet::new();
            for chunk in content.chunks(300) {
                upload.write_all(chunk).unwrap();
                buffers.insert(upload.filling.as_ptr() as usize);
            }
            upload.shutdown().unwrap();
            (upload, buffers)
        })
        .await
        .unwrap();
        assert_eq!(upload.parts, 11);
        // Eleven parts through two buffers (a third only if an upload still
        // held its part's buffer when it was done).
        assert!(buffers.len() <= 3, "{} buffers", buffers.len());
        drop(upload);
        let stored = store.get(&key).await.unwrap().unwrap();
        let expected: Vec<u8> = (0..10_500u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(stored.to_vec(), expected);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_empty_object_is_one_empty_part() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path());
        store.prepare_write().await.unwrap();
        let key = store.key("empty");
        let mut upload = PartUpload::new(Handle::current(), &store, key.clone(), 1000, &UploadFailure::default());
        tokio::task::spawn_blocking(move || upload.shutdown())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(store.get(&key).await.unwrap().unwrap().len(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_upload_dropped_unfinished_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = local_store(dir.path());
        store.prepare_write().await.unwrap();
        let key = store.key("data");
        let mut upload = PartUpload::new(Handle::current(), &store, key.clone(), 1000, &UploadFailure::default());
        tokio::task::spawn_blocking(move || {
            upload.write_all(&[7u8; 2500]).unwrap();
            drop(upload);
        })
        .await
        .unwrap();
        // The abort runs on the runtime: give it a moment, then nothing is
        // left of the object, staged or not.
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            if std::fs::read_dir(dir.path().join("pg1")).unwrap().next().is_none() {
                break;
            }
        }
        let left: Vec<_> = std::fs::read_dir(dir.path().join("pg1"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert!(store.get(&key).await.unwrap().is_none());
    }
}
