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
//! WAL objects have the format of [`crate::storage::object`]. The store is a local
//! directory (`object_store`'s `LocalFileSystem`, which writes to a staging
//! file and renames it, so readers never see half an object, and here
//! fsyncs the file and its directory before a write returns) or an
//! S3-compatible bucket. Every call is bounded in time: S3 requests by the
//! client's timeouts and retries (at most [`S3_MAX_RETRIES`] retries within
//! [`S3_RETRY_TIMEOUT`], each logged by `object_store` at `info`), and every
//! operation here by [`OPERATION_TIMEOUT`].
//!
//! # Absent, damaged or unreachable: never confused
//!
//! `restore_command` ends recovery when a WAL file is reported absent, so
//! [`StoreError::NotFound`] means one thing only: the store was read and the
//! key is not in it. Everything else that prevents reading it is another
//! error (and another gRPC code: [`crate::codes`]):
//!
//! * a local store whose directory is missing (an unmounted volume) is
//!   [`StoreError::RootMissing`]: reads never create it (only writes do),
//!   and every operation checks it first, since `object_store` would answer
//!   `NotFound` for any key under a missing directory;
//! * S3 answers 404 both for a missing key (`NoSuchKey`) and a missing
//!   bucket (`NoSuchBucket`), which `object_store` maps alike to
//!   `NotFound`: the error body tells them apart, and when it says neither
//!   (a HEAD, a proxy) the bucket is listed to find out;
//! * refused credentials, a refused connection or a timeout are errors of
//!   their own, naming the endpoint.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use cnpgi_pluginhelper::lowlevel::{WalFileKind, WalFileName};
use futures_util::TryStreamExt;
use object_store::{
    ClientOptions, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, RetryConfig,
    aws::AmazonS3Builder, local::LocalFileSystem, path::Path,
};

/// Where objects go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Location {
    /// A local directory (absolute).
    Local(std::path::PathBuf),
    /// An S3 bucket, with a key prefix (no leading or trailing `/`).
    S3 {
        /// Bucket name.
        bucket: String,
        /// Prefix inside the bucket, possibly empty.
        prefix: String,
        /// `endpointURL`, for S3-compatible stores.
        endpoint: Option<String>,
        /// `region`.
        region: String,
    },
}

/// The store and the folder of one cluster in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoreConfig {
    /// The store.
    pub location: Location,
    /// The cluster's folder (`serverName`).
    pub server_name: String,
}

/// The longest any single store operation may take (a 16 MiB object over a
/// slow link included); a backup's data is streamed in parts, each bounded
/// by the S3 client's own timeouts.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(300);
/// How many times the S3 client retries a request that failed transiently
/// (5xx, connection errors, timeouts of idempotent requests).
pub const S3_MAX_RETRIES: usize = 3;
/// How long after its first attempt an S3 request is no longer retried.
pub const S3_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// A store operation that failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store was read and the object is not in it.
    #[error("{key} is not in {store}")]
    NotFound {
        /// The store.
        store: String,
        /// The key.
        key: String,
    },
    /// The local store's directory does not exist or cannot be read (an
    /// unmounted volume): nothing can be said about any key.
    #[error("the store directory {dir} {reason}")]
    RootMissing {
        /// The directory (`destinationPath`).
        dir: String,
        /// Why it is unusable.
        reason: String,
    },
    /// The S3 bucket does not exist.
    #[error("bucket {bucket} does not exist ({store}: {operation} {key})")]
    BucketMissing {
        /// The bucket.
        bucket: String,
        /// The store.
        store: String,
        /// What was done.
        operation: &'static str,
        /// The key.
        key: String,
    },
    /// The store refused the credentials, or they lack a permission.
    #[error("object store {store}: {operation} {key}: the credentials were refused: {detail}")]
    Denied {
        /// The store.
        store: String,
        /// What was done.
        operation: &'static str,
        /// The key.
        key: String,
        /// The store's answer (S3's error code and message when it gave them).
        detail: String,
    },
    /// The store's endpoint cannot be reached (connection refused, DNS,
    /// timeout), after the client's retries.
    #[error("object store {store}: {operation} {key}: {reason}")]
    Unreachable {
        /// The store.
        store: String,
        /// What was done.
        operation: &'static str,
        /// The key.
        key: String,
        /// `cannot connect to <endpoint>: …` or `no answer from <endpoint>: …`.
        reason: String,
    },
    /// The store cannot be opened (bad directory, bad S3 settings).
    #[error("cannot open the object store {store}: {reason}")]
    Open {
        /// The store.
        store: String,
        /// Why.
        reason: String,
    },
    /// The store answered with another error.
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

/// An error with its causes, `: `-separated (`object_store` puts the S3
/// answer's body, and reqwest the connection error, in the causes).
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The text of `<element>` in an S3 XML error body.
fn xml_element<'a>(text: &'a str, element: &str) -> Option<&'a str> {
    let start = text.find(&format!("<{element}>"))? + element.len() + 2;
    let length = text[start..].find(&format!("</{element}>"))?;
    Some(&text[start..start + length])
}

/// The kind of the HTTP error among `error`'s causes, if any.
fn http_error_kind(error: &(dyn std::error::Error + 'static)) -> Option<object_store::client::HttpErrorKind> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(http) = error.downcast_ref::<object_store::client::HttpError>() {
            return Some(http.kind());
        }
        current = error.source();
    }
    None
}

/// Where a store lives, for classifying its errors.
#[derive(Debug, Clone)]
enum Backend {
    /// A local directory.
    Local {
        /// `destinationPath`.
        dir: std::path::PathBuf,
    },
    /// An S3 bucket.
    S3 {
        /// The bucket.
        bucket: String,
        /// The endpoint URL (AWS's regional one when not configured).
        endpoint: String,
    },
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
    backend: Backend,
}

/// A store opened, before the cluster's folder is chosen in it.
struct Opened {
    inner: Arc<dyn ObjectStore>,
    /// Where keys start (no leading or trailing `/`).
    prefix: String,
    description: String,
    backend: Backend,
}

/// A local directory.
fn open_local(dir: &std::path::Path) -> Result<Opened, StoreError> {
    let description = format!("file://{}", dir.display());
    // Keys are absolute paths from `/` (rather than relative to a prefix
    // store, which needs the directory to exist already).
    let prefix = Path::from_absolute_path(dir)
        .map_err(|e| StoreError::Open {
            store: description.clone(),
            reason: e.to_string(),
        })?
        .to_string();
    // fsync files and directories before answering: PostgreSQL deletes a
    // WAL segment once its archive_command succeeded.
    let local = LocalFileSystem::new().with_fsync(true);
    Ok(Opened {
        inner: Arc::new(local),
        prefix,
        description,
        backend: Backend::Local { dir: dir.to_owned() },
    })
}

/// An S3 bucket, on AWS or at `endpoint`.
fn open_s3(bucket: &str, prefix: &str, endpoint: Option<&str>, region: &str) -> Result<Opened, StoreError> {
    let description = match endpoint {
        Some(endpoint) => format!("s3://{bucket}/{prefix} at {endpoint}"),
        None => format!("s3://{bucket}/{prefix}"),
    };
    // reqwest's rustls has no crypto provider of its own here: use ring, the
    // workspace's one (an error means one is installed).
    let _ = rustls::crypto::ring::default_provider().install_default();
    // Credentials (and anything else not set here) come from the
    // environment: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, which the
    // sidecar gets from s3CredentialsSecret, or the usual AWS web identity /
    // instance metadata.
    let mut builder = AmazonS3Builder::from_env()
        .with_bucket_name(bucket)
        .with_region(region)
        .with_client_options(
            ClientOptions::new()
                .with_timeout(Duration::from_secs(60))
                .with_connect_timeout(Duration::from_secs(10)),
        )
        // Bounded: a store that stays down is reported, not waited for
        // (PostgreSQL retries archive_command itself).
        .with_retry(RetryConfig {
            max_retries: S3_MAX_RETRIES,
            retry_timeout: S3_RETRY_TIMEOUT,
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
    Ok(Opened {
        inner: Arc::new(s3),
        prefix: prefix.to_owned(),
        description,
        backend: Backend::S3 {
            bucket: bucket.to_owned(),
            endpoint: endpoint.map_or_else(|| format!("https://s3.{region}.amazonaws.com"), str::to_owned),
        },
    })
}

impl Store {
    /// Opens the store `config` describes. Nothing is created: a local
    /// directory is created by the first write (never by a read, so that an
    /// unmounted volume is not mistaken for an empty archive).
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] when the directory is not a usable absolute path
    /// or the S3 settings are unusable.
    pub fn open(config: &StoreConfig) -> Result<Self, StoreError> {
        let opened = match &config.location {
            Location::Local(dir) => open_local(dir)?,
            Location::S3 {
                bucket,
                prefix,
                endpoint,
                region,
            } => open_s3(bucket, prefix, endpoint.as_deref(), region)?,
        };
        let root = if opened.prefix.is_empty() {
            Path::from(config.server_name.as_str())
        } else {
            Path::from(format!("{}/{}", opened.prefix, config.server_name))
        };
        Ok(Self {
            inner: opened.inner,
            description: format!("{} (server {})", opened.description, config.server_name),
            root,
            backend: opened.backend,
        })
    }

    /// The size of a backup's upload parts: 5 MiB on S3 (its smallest
    /// part), 256 KiB in a directory, where a part is a positioned write
    /// into a staging file and the size only bounds the memory held.
    pub fn upload_part_size(&self) -> usize {
        match self.backend {
            Backend::Local { .. } => 256 * 1024,
            Backend::S3 { .. } => 5 * 1024 * 1024,
        }
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

    /// `key` for messages: a local store's keys are absolute paths, shown
    /// with their leading `/`.
    pub fn show(&self, key: &Path) -> String {
        match self.backend {
            Backend::Local { .. } => format!("/{key}"),
            Backend::S3 { .. } => key.to_string(),
        }
    }

    /// Classifies an error of `operation` on `key` (see the module
    /// documentation): only a plain `NotFound` is an absence, and on S3 only
    /// once [`Store::confirm_absent`] ruled out a missing bucket.
    pub(crate) fn classify(&self, operation: &'static str, key: &Path, source: object_store::Error) -> StoreError {
        let text = error_chain(&source);
        let store = self.description.clone();
        let key_text = self.show(key);
        if let Backend::S3 { bucket, endpoint } = &self.backend {
            if text.contains("<Code>NoSuchBucket</Code>") {
                return StoreError::BucketMissing {
                    bucket: bucket.clone(),
                    store,
                    operation,
                    key: key_text,
                };
            }
            let what = match http_error_kind(&source) {
                Some(object_store::client::HttpErrorKind::Connect) => Some("cannot connect to"),
                Some(object_store::client::HttpErrorKind::Timeout) => Some("no answer from"),
                _ => None,
            };
            if let Some(what) = what {
                return StoreError::Unreachable {
                    store,
                    operation,
                    key: key_text,
                    reason: format!("{what} {endpoint}: {text}"),
                };
            }
        }
        match source {
            // A 404 on a write or a listing is not an absence of the key.
            object_store::Error::NotFound { .. } if matches!(operation, "get" | "delete") => {
                StoreError::NotFound { store, key: key_text }
            }
            object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. } => {
                let detail = match (xml_element(&text, "Code"), xml_element(&text, "Message")) {
                    (Some(code), Some(message)) => format!("{code}: {message}"),
                    (Some(code), None) => code.to_owned(),
                    _ => text,
                };
                StoreError::Denied {
                    store,
                    operation,
                    key: key_text,
                    detail,
                }
            }
            source => StoreError::Failed {
                store,
                operation,
                key: key_text,
                source: Box::new(source),
            },
        }
    }

    /// Turns a [`StoreError::NotFound`] from S3 whose answer did not say
    /// `NoSuchKey` into what it is: the bucket is listed, and its absence
    /// (or any failure) replaces the `NotFound`.
    async fn confirm_absent(&self, error: StoreError, source_text: &str) -> StoreError {
        if !matches!(error, StoreError::NotFound { .. })
            || !matches!(self.backend, Backend::S3 { .. })
            || source_text.contains("<Code>NoSuchKey</Code>")
        {
            return error;
        }
        let root = self.root.clone();
        let probe = tokio::time::timeout(OPERATION_TIMEOUT, self.inner.list_with_delimiter(Some(&root))).await;
        match probe {
            Ok(Ok(_)) => error,
            Ok(Err(object_store::Error::NotFound { .. })) => match &self.backend {
                Backend::S3 { bucket, .. } => StoreError::BucketMissing {
                    bucket: bucket.clone(),
                    store: self.description.clone(),
                    operation: "list",
                    key: self.show(&root),
                },
                Backend::Local { .. } => error,
            },
            Ok(Err(other)) => self.classify("list", &root, other),
            Err(_) => StoreError::Timeout {
                store: self.description.clone(),
                operation: "list",
                key: self.show(&root),
            },
        }
    }

    /// For a local store: whether its directory exists (`None` for S3).
    /// Bounded in time and off the async threads: a hung network mount must
    /// not stall the plugin.
    async fn local_root_exists(&self) -> Result<Option<bool>, StoreError> {
        let Backend::Local { dir } = &self.backend else {
            return Ok(None);
        };
        let unusable = |reason: String| StoreError::RootMissing {
            dir: dir.display().to_string(),
            reason,
        };
        match tokio::time::timeout(OPERATION_TIMEOUT, tokio::fs::metadata(dir)).await {
            Ok(Ok(metadata)) if metadata.is_dir() => Ok(Some(true)),
            Ok(Ok(_)) => Err(unusable("is not a directory".into())),
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => Ok(Some(false)),
            Ok(Err(error)) => Err(unusable(format!("cannot be read: {error}"))),
            Err(_) => Err(unusable(format!(
                "does not answer within {} s",
                OPERATION_TIMEOUT.as_secs()
            ))),
        }
    }

    /// For a local store: fails unless its directory exists. Reads never
    /// create it: an unmounted volume must not look like an empty archive.
    ///
    /// # Errors
    ///
    /// [`StoreError::RootMissing`].
    pub async fn check_root(&self) -> Result<(), StoreError> {
        match self.local_root_exists().await? {
            Some(false) => Err(StoreError::RootMissing {
                dir: match &self.backend {
                    Backend::Local { dir } => dir.display().to_string(),
                    Backend::S3 { .. } => String::new(),
                },
                reason: "does not exist (is its volume mounted?)".into(),
            }),
            Some(true) | None => Ok(()),
        }
    }

    /// For a local store: creates its directory before a write (the first
    /// archive into a new destination).
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] when it cannot be created.
    pub async fn prepare_write(&self) -> Result<(), StoreError> {
        let Backend::Local { dir } = &self.backend else {
            return Ok(());
        };
        let failed = |reason: String| StoreError::Open {
            store: self.description.clone(),
            reason: format!("cannot create the directory {}: {reason}", dir.display()),
        };
        match tokio::time::timeout(OPERATION_TIMEOUT, tokio::fs::create_dir_all(dir)).await {
            Ok(result) => result.map_err(|e| failed(e.to_string())),
            Err(_) => Err(failed(format!("no answer within {} s", OPERATION_TIMEOUT.as_secs()))),
        }
    }

    async fn bounded<T>(
        &self,
        operation: &'static str,
        key: &Path,
        future: impl Future<Output = Result<T, object_store::Error>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(OPERATION_TIMEOUT, future).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(error)) => {
                let text = error_chain(&error);
                let classified = self.classify(operation, key, error);
                Err(self.confirm_absent(classified, &text).await)
            }
            Err(_) => Err(StoreError::Timeout {
                store: self.description.clone(),
                operation,
                key: self.show(key),
            }),
        }
    }

    /// The whole object, or `None` when the store was read and lacks it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails (never for an absent key).
    pub async fn get(&self, key: &Path) -> Result<Option<Bytes>, StoreError> {
        self.check_root().await?;
        let result = self
            .bounded("get", key, async { self.inner.get(key).await?.bytes().await })
            .await;
        match result {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// The object as a stream (a backup's data), or `None` when the store
    /// was read and lacks it. Errors in the stream itself are the caller's
    /// to classify (`Store::classify`, crate-internal, with operation `"get"`).
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails (never for an absent key).
    pub async fn get_stream(&self, key: &Path) -> Result<Option<object_store::GetResult>, StoreError> {
        self.check_root().await?;
        match self.bounded("get", key, self.inner.get(key)).await {
            Ok(result) => Ok(Some(result)),
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
        self.prepare_write().await?;
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
        self.prepare_write().await?;
        self.bounded("put", key, self.inner.put(key, PutPayload::from(data)))
            .await
            .map(drop)
    }

    /// Every object under `prefix`.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails, including a local store whose
    /// directory is missing.
    pub async fn list(&self, prefix: &Path) -> Result<Vec<ObjectMeta>, StoreError> {
        self.check_root().await?;
        self.bounded("list", prefix, self.inner.list(Some(prefix)).try_collect())
            .await
    }

    /// Whether the cluster's folder holds no object at all. A local store
    /// whose directory does not exist yet is empty: this answers whether a
    /// write may go there, and the write creates it.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the store fails.
    pub async fn is_empty(&self) -> Result<bool, StoreError> {
        if self.local_root_exists().await? == Some(false) {
            return Ok(true);
        }
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
        self.check_root().await?;
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
        // A local store's keys are absolute paths (without the leading /).
        let root = dir.path().to_str().unwrap().trim_start_matches('/');
        let segment = WalFileName::parse("000000010000000200000003").unwrap();
        assert_eq!(
            store.wal_key(&segment).as_ref(),
            format!("{root}/pg1/wals/0000000100000002/000000010000000200000003.zst")
        );
        let history = WalFileName::parse("00000002.history").unwrap();
        assert_eq!(
            store.wal_key(&history).as_ref(),
            format!("{root}/pg1/wals/00000002.history.zst")
        );
        let backup = WalFileName::parse("000000010000000200000003.00000028.backup").unwrap();
        assert_eq!(
            store.wal_key(&backup).as_ref(),
            format!("{root}/pg1/wals/0000000100000002/000000010000000200000003.00000028.backup.zst")
        );
        assert_eq!(
            store.backup_prefix("20260101T000000").as_ref(),
            format!("{root}/pg1/backups/20260101T000000")
        );
        // The same files as before on disk.
        let key = store.wal_key(&history);
        assert_eq!(
            std::path::Path::new("/").join(key.as_ref()),
            dir.path().join("pg1/wals/00000002.history.zst")
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

    #[tokio::test]
    async fn an_unusable_directory_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let store = local(&file.join("sub"));
        let key = store.key("wals/x");
        let err = store.put(&key, Bytes::from_static(b"x")).await.unwrap_err();
        assert!(err.to_string().contains("cannot create the directory"), "{err}");
        assert!(matches!(err, StoreError::Open { .. }), "{err}");
        // Reads say what is wrong with it, never "not found".
        let err = store.get(&key).await.unwrap_err();
        assert!(matches!(err, StoreError::RootMissing { .. }), "{err}");
        assert!(err.to_string().contains("cannot be read: Not a directory"), "{err}");
    }

    #[tokio::test]
    async fn reads_never_create_a_missing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("volume");
        let store = local(&root);
        let key = store.key("wals/x");
        for err in [
            store.get(&key).await.unwrap_err(),
            store.list(&store.wal_prefix()).await.unwrap_err(),
            store.delete(&key).await.unwrap_err(),
        ] {
            assert!(
                err.to_string()
                    .contains(&format!("{} does not exist (is its volume mounted?)", root.display())),
                "{err}"
            );
            assert!(matches!(err, StoreError::RootMissing { .. }), "{err}");
        }
        assert!(!root.exists());
        // A missing directory holds nothing: a first write may go there,
        // and creates it.
        assert!(store.is_empty().await.unwrap());
        assert_eq!(
            store.put_new(&key, Bytes::from_static(b"x")).await.unwrap(),
            PutOutcome::Created
        );
        assert!(root.join("pg1/wals/x").is_file());
    }

    #[test]
    fn s3_error_bodies() {
        let body = "<?xml version=\"1.0\"?><Error><Code>InvalidAccessKeyId</Code><Message>The key is unknown.</Message></Error>";
        assert_eq!(xml_element(body, "Code"), Some("InvalidAccessKeyId"));
        assert_eq!(xml_element(body, "Message"), Some("The key is unknown."));
        assert_eq!(xml_element(body, "Resource"), None);
        assert_eq!(xml_element("<Code>unterminated", "Code"), None);
    }
}
