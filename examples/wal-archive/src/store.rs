//! The object store and the layout of a cluster's archive in it.
//!
//! Objects of one cluster live under `[<prefix>/]<serverName>/`:
//!
//! | key | what |
//! |---|---|
//! | `wals/<timeline+log>/<segment>.zst` | a WAL segment (also `.partial` and `.backup` files), grouped by their first 16 hex digits |
//! | `wals/<timeline>.history.zst` | a timeline history file |
//! | `backups/<id>/data.tar.zst` | a base backup: PGDATA as a tar stream, zstd-compressed |
//! | `backups/<id>/backup.json` | its manifest, written last: a backup without one is incomplete |
//!
//! WAL objects have the format of [`crate::object`]. The store is a local
//! directory (`object_store`'s `LocalFileSystem`, which writes to a staging
//! file and renames it, so readers never see half an object, and here
//! fsyncs the file and its directory before a write returns) or an
//! S3-compatible bucket. Every call is bounded in time: S3 requests by the
//! client's timeouts and retries, and every operation here by
//! [`OPERATION_TIMEOUT`].

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cnpgi_pluginhelper::wal::{WalFileKind, WalFileName};
use futures_util::TryStreamExt;
use object_store::{
    ClientOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    aws::AmazonS3Builder, local::LocalFileSystem, path::Path,
};

use crate::parameters::{Location, StoreConfig};

/// The longest any single store operation may take (a 16 MiB object over a
/// slow link included); a backup's data is streamed in parts, each bounded
/// by the S3 client's own timeouts.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(300);

/// A store operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The object does not exist.
    #[error("{key} is not in {store}")]
    NotFound {
        /// The store.
        store: String,
        /// The key.
        key: String,
    },
    /// The store cannot be opened (bad directory, bad S3 settings).
    #[error("cannot open the object store {store}: {reason}")]
    Open {
        /// The store.
        store: String,
        /// Why.
        reason: String,
    },
    /// The store answered with an error.
    #[error("object store {store}: {operation} {key}: {source}")]
    Failed {
        /// The store.
        store: String,
        /// What was done.
        operation: &'static str,
        /// The key.
        key: String,
        /// The store's error (boxed: it is large).
        #[source]
        source: Box<object_store::Error>,
    },
    /// The store did not answer in time.
    #[error("object store {store}: {operation} {key}: no answer within {} s", OPERATION_TIMEOUT.as_secs())]
    Timeout {
        /// The store.
        store: String,
        /// What was done.
        operation: &'static str,
        /// The key.
        key: String,
    },
}

impl From<StoreError> for tonic::Status {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::NotFound { .. } => tonic::Status::not_found(error.to_string()),
            StoreError::Open { .. } => tonic::Status::failed_precondition(error.to_string()),
            StoreError::Failed { .. } | StoreError::Timeout { .. } => tonic::Status::unavailable(error.to_string()),
        }
    }
}

/// What [`Store::put_new`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was created.
    Created,
    /// An object of that key exists already; nothing was written.
    Exists,
}

/// One cluster's folder in an object store.
#[derive(Debug, Clone)]
pub struct Store {
    inner: Arc<dyn ObjectStore>,
    root: Path,
    description: String,
}

impl Store {
    /// Opens the store `config` describes (creating a local directory).
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] when the directory cannot be created or the S3
    /// settings are unusable.
    pub fn open(config: &StoreConfig) -> Result<Self, StoreError> {
        let (inner, prefix, description): (Arc<dyn ObjectStore>, String, String) = match &config.location {
            Location::Local(dir) => {
                let description = format!("file://{}", dir.display());
                let open_error = |reason: String| StoreError::Open {
                    store: description.clone(),
                    reason,
                };
                std::fs::create_dir_all(dir).map_err(|e| open_error(format!("cannot create the directory: {e}")))?;
                // fsync files and directories before answering: PostgreSQL
                // deletes a WAL segment once its archive_command succeeded.
                let local = LocalFileSystem::new_with_prefix(dir)
                    .map_err(|e| open_error(e.to_string()))?
                    .with_fsync(true);
                (Arc::new(local), String::new(), description)
            }
            Location::S3 {
                bucket,
                prefix,
                endpoint,
                region,
            } => {
                let description = match endpoint {
                    Some(endpoint) => format!("s3://{bucket}/{prefix} at {endpoint}"),
                    None => format!("s3://{bucket}/{prefix}"),
                };
                // reqwest's rustls has no crypto provider of its own here: use
                // ring, the workspace's one (an error means one is installed).
                let _ = rustls::crypto::ring::default_provider().install_default();
                // Credentials (and anything else not set here) come from the
                // environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
                // which the sidecar gets from s3CredentialsSecret, or the
                // usual AWS web identity / instance metadata.
                let mut builder = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_region(region)
                    .with_client_options(
                        ClientOptions::new()
                            .with_timeout(Duration::from_secs(60))
                            .with_connect_timeout(Duration::from_secs(10)),
                    )
                    .with_retry(RetryConfig {
                        max_retries: 3,
                        retry_timeout: Duration::from_secs(60),
                        ..RetryConfig::default()
                    });
                if let Some(endpoint) = endpoint {
                    builder = builder
                        .with_endpoint(endpoint)
                        .with_allow_http(endpoint.starts_with("http://"));
                }
                let s3 = builder.build().map_err(|e| StoreError::Open {
                    store: description.clone(),
                    reason: e.to_string(),
                })?;
                (Arc::new(s3), prefix.clone(), description)
            }
        };
        let root = if prefix.is_empty() {
            Path::from(config.server_name.as_str())
        } else {
            Path::from(format!("{prefix}/{}", config.server_name))
        };
        Ok(Self {
            inner,
            description: format!("{description} (server {})", config.server_name),
            root,
        })
    }

    /// A human-readable name of the store, for logs and errors.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// The underlying store (for streaming uploads and downloads).
    pub fn object_store(&self) -> Arc<dyn ObjectStore> {
        self.inner.clone()
    }

    /// `<root>/<relative>`.
    pub fn key(&self, relative: &str) -> Path {
        relative
            .split('/')
            .filter(|p| !p.is_empty())
            .fold(self.root.clone(), |path, part| path.join(part))
    }

    /// The key of a WAL file (see the module documentation).
    pub fn wal_key(&self, name: &WalFileName) -> Path {
        match name.kind() {
            WalFileKind::History => self.key(&format!("wals/{name}.zst")),
            _ => self.key(&format!("wals/{}/{name}.zst", &name.as_str()[..16])),
        }
    }

    /// The folder of WAL files.
    pub fn wal_prefix(&self) -> Path {
        self.key("wals")
    }

    /// The folder of backups.
    pub fn backups_prefix(&self) -> Path {
        self.key("backups")
    }

    /// The folder of one backup.
    pub fn backup_prefix(&self, id: &str) -> Path {
        self.key(&format!("backups/{id}"))
    }

    fn failed(&self, operation: &'static str, key: &Path, source: object_store::Error) -> StoreError {
        match source {
            object_store::Error::NotFound { .. } => StoreError::NotFound {
                store: self.description.clone(),
                key: key.to_string(),
            },
            source => StoreError::Failed {
                store: self.description.clone(),
                operation,
                key: key.to_string(),
                source: Box::new(source),
            },
        }
    }

    async fn bounded<T>(
        &self,
        operation: &'static str,
        key: &Path,
        future: impl Future<Output = Result<T, object_store::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(OPERATION_TIMEOUT, future).await {
            Ok(result) => result.map_err(|e| self.failed(operation, key, e)),
            Err(_) => Err(StoreError::Timeout {
                store: self.description.clone(),
                operation,
                key: key.to_string(),
            }),
        }
    }

    /// The whole object, or `None` when it does not exist.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn get(&self, key: &Path) -> Result<Option<Bytes>, StoreError> {
        let result = self
            .bounded("get", key, async { self.inner.get(key).await?.bytes().await })
            .await;
        match result {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Creates the object unless one exists with that key (conditional
    /// put: `If-None-Match: *` on S3, a hard link on a local directory), so
    /// that two writers can never both think they created it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn put_new(&self, key: &Path, data: Bytes) -> Result<PutOutcome, StoreError> {
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        let result = self
            .bounded("create", key, self.inner.put_opts(key, PutPayload::from(data), options))
            .await;
        match result {
            Ok(_) => Ok(PutOutcome::Created),
            Err(StoreError::Failed { source, .. }) if matches!(*source, object_store::Error::AlreadyExists { .. }) => {
                Ok(PutOutcome::Exists)
            }
            Err(error) => Err(error),
        }
    }

    /// Writes the object, replacing any (manifests).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn put(&self, key: &Path, data: Bytes) -> Result<(), StoreError> {
        self.bounded("put", key, self.inner.put(key, PutPayload::from(data)))
            .await
            .map(drop)
    }

    /// Every object under `prefix`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<ObjectMeta>, StoreError> {
        self.bounded("list", prefix, self.inner.list(Some(prefix)).try_collect())
            .await
    }

    /// Whether the cluster's folder holds no object at all.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn is_empty(&self) -> Result<bool, StoreError> {
        let root = self.root.clone();
        self.bounded("list", &root, async {
            let mut objects = self.inner.list(Some(&root));
            Ok(objects.try_next().await?.is_none())
        })
        .await
    }

    /// Deletes the object (a missing one is not an error).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn delete(&self, key: &Path) -> Result<(), StoreError> {
        match self.bounded("delete", key, self.inner.delete(key)).await {
            Ok(()) | Err(StoreError::NotFound { .. }) => Ok(()),
            Err(error) => Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local(dir: &std::path::Path) -> Store {
        Store::open(&StoreConfig {
            location: Location::Local(dir.to_owned()),
            server_name: "pg1".into(),
        })
        .unwrap()
    }

    #[test]
    fn layout() {
        let dir = tempfile::tempdir().unwrap();
        let store = local(dir.path());
        let segment = WalFileName::parse("000000010000000200000003").unwrap();
        assert_eq!(
            store.wal_key(&segment).as_ref(),
            "pg1/wals/0000000100000002/000000010000000200000003.zst"
        );
        let history = WalFileName::parse("00000002.history").unwrap();
        assert_eq!(store.wal_key(&history).as_ref(), "pg1/wals/00000002.history.zst");
        let backup = WalFileName::parse("000000010000000200000003.00000028.backup").unwrap();
        assert_eq!(
            store.wal_key(&backup).as_ref(),
            "pg1/wals/0000000100000002/000000010000000200000003.00000028.backup.zst"
        );
        assert_eq!(
            store.backup_prefix("20260101T000000").as_ref(),
            "pg1/backups/20260101T000000"
        );
        let s3 = Store::open(&StoreConfig {
            location: Location::S3 {
                bucket: "bucket".into(),
                prefix: "a/b".into(),
                endpoint: Some("http://127.0.0.1:1".into()),
                region: "us-east-1".into(),
            },
            server_name: "pg1".into(),
        })
        .unwrap();
        assert_eq!(s3.wal_key(&history).as_ref(), "a/b/pg1/wals/00000002.history.zst");
    }

    #[tokio::test]
    async fn put_new_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let store = local(dir.path());
        let key = store.key("wals/x");
        assert!(store.is_empty().await.unwrap());
        assert_eq!(store.get(&key).await.unwrap(), None);
        assert_eq!(
            store.put_new(&key, Bytes::from_static(b"one")).await.unwrap(),
            PutOutcome::Created
        );
        assert_eq!(
            store.put_new(&key, Bytes::from_static(b"two")).await.unwrap(),
            PutOutcome::Exists
        );
        assert_eq!(store.get(&key).await.unwrap().unwrap(), Bytes::from_static(b"one"));
        assert!(!store.is_empty().await.unwrap());
        assert_eq!(store.list(&store.wal_prefix()).await.unwrap().len(), 1);
        store.delete(&key).await.unwrap();
        store.delete(&key).await.unwrap();
        assert!(store.is_empty().await.unwrap());
    }

    #[test]
    fn an_unusable_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let err = Store::open(&StoreConfig {
            location: Location::Local(file.join("sub")),
            server_name: "pg1".into(),
        })
        .unwrap_err();
        assert!(err.to_string().contains("cannot create the directory"), "{err}");
    }
}
