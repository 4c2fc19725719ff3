//! The Backup service: a base backup of the running instance.
//!
//! The backup uses PostgreSQL's low-level API over one connection to the
//! local instance (`pgHost`, by default CloudNativePG's socket directory
//! `/controller/run`), so the sidecar needs no PostgreSQL binaries:
//!
//! 1. `pg_backup_start(label, fast => true)` (`pg_start_backup` before
//!    PostgreSQL 15);
//! 2. PGDATA (read through the mount the sidecar shares with PostgreSQL) is
//!    streamed as a tar archive through zstd into `backups/<id>/data.tar.zst`,
//!    leaving out what `pg_basebackup` leaves out (WAL, temporary files,
//!    `postmaster.pid`, …); files that change while being read are fine, WAL
//!    replay repairs them, and files that vanish are skipped;
//! 3. `pg_backup_stop(wait_for_archive => true)` returns the `backup_label`
//!    (added to the tar) once the WAL the backup needs is archived;
//! 4. the manifest (`backups/<id>/backup.json`, [`crate::manifest`]) is
//!    written last, with the SHA-256 of the data object;
//! 5. with `keepBackups`, retention deletes older backups and the WAL no
//!    kept backup needs.
//!
//! Tablespaces are not supported: a backup of an instance with one fails
//! before starting.

use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use chrono::{DateTime, Utc};
use cnpgi_pluginhelper::{
    cluster::decode_cluster,
    parameters::ParameterSchema,
    proto::backup::v1::{
        BackupCapabilitiesRequest, BackupCapabilitiesResult, BackupRequest, BackupResult, backup_capability,
        backup_server,
    },
    wal::WalFileName,
};
use object_store::buffered::BufWriter;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio_util::io::SyncIoBridge;
use tonic::{Request, Response, Status};

use crate::lsn::Lsn;
use crate::manifest::{self, DataObject, Manifest};
use crate::object;
use crate::parameters::{self, Config, Location, PgConnection};
use crate::state::State;
use crate::store::{Store, StoreError};

/// How long `pg_backup_start` (a checkpoint) and `pg_backup_stop` (waiting
/// for the WAL to be archived) may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long connecting to PostgreSQL may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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
    crate::wal::CHECK_EMPTY_WAL_ARCHIVE_FILE,
];

/// A backup that failed.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// PostgreSQL cannot be reached or refused a query.
    #[error("PostgreSQL at {target}: {what}: {detail}")]
    Postgres {
        /// host:port.
        target: String,
        /// What was done.
        what: &'static str,
        /// The driver's error with its causes (its own text alone says
        /// little: "error connecting to server").
        detail: String,
    },
    /// PostgreSQL did not answer in time.
    #[error("PostgreSQL at {target}: {what}: no answer within {} s", .timeout.as_secs())]
    Timeout {
        /// host:port.
        target: String,
        /// What was done.
        what: &'static str,
        /// The bound.
        timeout: Duration,
    },
    /// The instance cannot be backed up this way.
    #[error("{0}")]
    Unsupported(String),
    /// Reading PGDATA or writing the stream failed.
    #[error("streaming PGDATA ({pgdata}) to the store: {source}")]
    Stream {
        /// PGDATA.
        pgdata: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Something PostgreSQL answered cannot be read.
    #[error("unexpected answer from PostgreSQL: {0}")]
    Answer(String),
}

impl From<BackupError> for Status {
    fn from(error: BackupError) -> Self {
        match error {
            BackupError::Store(store) => store.into(),
            BackupError::Unsupported(_) => Status::failed_precondition(error.to_string()),
            BackupError::Postgres { .. } | BackupError::Timeout { .. } => Status::unavailable(error.to_string()),
            BackupError::Stream { .. } | BackupError::Answer(_) => Status::internal(error.to_string()),
        }
    }
}

/// The Backup service.
#[derive(Debug, Clone)]
pub struct Backup {
    state: State,
}

impl Backup {
    /// The service, sharing `state`.
    pub fn new(state: State) -> Self {
        Self { state }
    }
}

/// A backup folder whose manifest cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedManifest {
    /// The backup's id (its folder).
    pub backup_id: String,
    /// The manifest's key.
    pub key: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The backups in a store.
#[derive(Debug, Clone, Default)]
pub struct Backups {
    /// Completed backups (a readable manifest), oldest first.
    pub complete: Vec<Manifest>,
    /// Folders whose manifest is there but cannot be read: damaged, which a
    /// restore must report rather than take for absent.
    pub damaged: Vec<DamagedManifest>,
}

/// Every backup in the store, completed or with a damaged manifest.
///
/// # Errors
///
/// [`StoreError`] when the store fails.
pub async fn scan_backups(store: &Store) -> Result<Backups, StoreError> {
    let mut backups = Backups::default();
    for meta in store.list(&store.backups_prefix()).await? {
        if meta.location.filename() != Some(manifest::MANIFEST_FILE) {
            continue;
        }
        let Some(bytes) = store.get(&meta.location).await? else {
            continue;
        };
        let reason = match serde_json::from_slice::<Manifest>(&bytes) {
            Ok(manifest) if manifest.format == manifest::FORMAT => {
                backups.complete.push(manifest);
                continue;
            }
            Ok(other) => format!("unknown format {:?}", other.format.chars().take(64).collect::<String>()),
            Err(error) => format!("unreadable: {error}"),
        };
        tracing::warn!(key = %meta.location, %reason, "skipping a damaged backup manifest");
        let backup_id = backup_id_of(&meta.location);
        backups.damaged.push(DamagedManifest {
            backup_id,
            key: store.show(&meta.location),
            reason,
        });
    }
    backups
        .complete
        .sort_by(|a, b| (a.stopped_at, &a.backup_id).cmp(&(b.stopped_at, &b.backup_id)));
    Ok(backups)
}

/// The backup id of a key under `backups/<id>/`.
fn backup_id_of(location: &object_store::path::Path) -> String {
    let parts: Vec<_> = location.parts().collect();
    parts
        .iter()
        .rev()
        .nth(1)
        .map(|p| p.as_ref().to_owned())
        .unwrap_or_default()
}

/// Every completed backup in the store (folders with a readable manifest).
///
/// # Errors
///
/// [`StoreError`] when the store fails.
pub async fn list_backups(store: &Store) -> Result<Vec<Manifest>, StoreError> {
    Ok(scan_backups(store).await?.complete)
}

async fn bounded<T>(
    target: &str,
    what: &'static str,
    timeout: Duration,
    future: impl Future<Output = Result<T, tokio_postgres::Error>>,
) -> Result<T, BackupError> {
    match tokio::time::timeout(timeout, future).await {
        Ok(result) => result.map_err(|error| BackupError::Postgres {
            target: target.to_owned(),
            what,
            detail: crate::store::error_chain(&error),
        }),
        Err(_) => Err(BackupError::Timeout {
            target: target.to_owned(),
            what,
            timeout,
        }),
    }
}

/// A connection to the instance; the backup lives as long as it does
/// (PostgreSQL aborts a non-exclusive backup whose session ends).
struct Session {
    client: tokio_postgres::Client,
    target: String,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl Session {
    async fn open(postgres: &PgConnection) -> Result<Self, BackupError> {
        let target = format!("{}:{}", postgres.host, postgres.port);
        let mut config = tokio_postgres::Config::new();
        if postgres.host.starts_with('/') {
            config.host_path(&postgres.host);
        } else {
            config.host(&postgres.host);
        }
        config
            .port(postgres.port)
            .user(&postgres.user)
            .dbname(&postgres.database)
            .application_name("cnpgi-wal-archive")
            .connect_timeout(CONNECT_TIMEOUT);
        let (client, connection) = bounded(
            &target,
            "connect",
            CONNECT_TIMEOUT,
            config.connect(tokio_postgres::NoTls),
        )
        .await?;
        let connection = tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::warn!(%error, "backup connection to PostgreSQL ended");
            }
        });
        Ok(Self {
            client,
            target,
            connection,
        })
    }

    async fn query_one(
        &self,
        what: &'static str,
        timeout: Duration,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, BackupError> {
        bounded(&self.target, what, timeout, self.client.query_one(sql, params)).await
    }
}

/// Facts about the instance, read before starting.
struct Instance {
    version: u32,
    data_directory: PathBuf,
    segment_size: u64,
    system_identifier: String,
}

async fn inspect(session: &Session) -> Result<Instance, BackupError> {
    let row = session
        .query_one(
            "read the instance's settings",
            CONNECT_TIMEOUT,
            "SELECT current_setting('server_version_num')::int4, current_setting('data_directory'), \
                    (SELECT setting FROM pg_settings WHERE name = 'wal_segment_size'), \
                    (SELECT system_identifier::text FROM pg_control_system()), \
                    (SELECT count(*)::int4 FROM pg_tablespace WHERE spcname NOT IN ('pg_default', 'pg_global'))",
            &[],
        )
        .await?;
    let version: i32 = row.get(0);
    let segment_size: String = row.get(2);
    let tablespaces: i32 = row.get(4);
    if tablespaces > 0 {
        return Err(BackupError::Unsupported(format!(
            "the instance has {tablespaces} tablespace(s); this plugin backs up PGDATA only and does not support tablespaces"
        )));
    }
    if version < 100000 {
        return Err(BackupError::Unsupported(format!(
            "PostgreSQL {version} is too old (10 or newer is needed)"
        )));
    }
    Ok(Instance {
        version: version as u32,
        data_directory: PathBuf::from(row.get::<_, String>(1)),
        segment_size: segment_size
            .parse()
            .map_err(|_| BackupError::Answer(format!("wal_segment_size is {segment_size:?}")))?,
        system_identifier: row.get(3),
    })
}

/// Reads `size` bytes of a file that may shrink or grow meanwhile: extra
/// bytes are not read, missing ones are zeros (replay rewrites them).
struct ExactSize<R> {
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
struct Counting<W> {
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
struct Hashing<W> {
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

/// The upload of a backup's data: an error there is the store's, kept
/// classified in `failure` (the tar and zstd layers above it only pass its
/// text on), so that a backup failing on the store is answered with the
/// store's code (`UNAVAILABLE`, `FAILED_PRECONDITION`…), not `INTERNAL`.
struct Upload {
    inner: SyncIoBridge<BufWriter>,
    store: Store,
    key: object_store::path::Path,
    failure: Arc<Mutex<Option<StoreError>>>,
}

impl Upload {
    fn record(&self, error: io::Error) -> io::Error {
        if !error.get_ref().is_some_and(|e| e.is::<object_store::Error>()) {
            return error;
        }
        let kind = error.kind();
        match error.into_inner().map(|e| e.downcast::<object_store::Error>()) {
            Some(Ok(source)) => {
                let classified = self.store.classify("upload", &self.key, *source);
                let text = classified.to_string();
                *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(classified);
                io::Error::new(kind, text)
            }
            Some(Err(other)) => io::Error::new(kind, other),
            None => io::Error::from(kind),
        }
    }

    /// Completes the upload (the last part, then the rename or the S3
    /// multipart completion).
    fn shutdown(&mut self) -> io::Result<()> {
        self.inner.shutdown().map_err(|e| self.record(e))
    }
}

impl Write for Upload {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.record(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.record(e))
    }
}

type Sink = Counting<zstd::stream::write::Encoder<'static, Hashing<Upload>>>;

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
fn add_pgdata(builder: &mut tar::Builder<Sink>, pgdata: &Path, skip: Option<&Path>) -> io::Result<u64> {
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
fn add_generated(builder: &mut tar::Builder<Sink>, name: &str, content: &[u8]) -> io::Result<()> {
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
fn finish(builder: tar::Builder<Sink>) -> io::Result<(u64, u64, String)> {
    let counting = builder.into_inner()?;
    let tar_size = counting.count;
    let mut hashing = counting.inner.finish()?;
    hashing.flush()?;
    let stored_size = hashing.count;
    let sha256 = object::hex(&hashing.hasher.finalize());
    let mut upload = hashing.inner;
    upload.shutdown()?;
    Ok((tar_size, stored_size, sha256))
}

/// `START TIMELINE: <n>` of a `backup_label`.
fn label_timeline(label: &str) -> Option<u32> {
    label
        .lines()
        .find_map(|line| line.strip_prefix("START TIMELINE: "))
        .and_then(|value| value.trim().parse().ok())
}

/// A backup id: the UTC start time.
fn backup_id(at: DateTime<Utc>) -> String {
    at.format("%Y%m%dT%H%M%S").to_string()
}

/// Takes a backup of the instance `config` points at, into its store.
///
/// # Errors
///
/// [`BackupError`] naming the step that failed.
pub async fn take_backup(
    state: &State,
    config: &Config,
    cluster_name: &str,
    backup_name: &str,
) -> Result<Manifest, BackupError> {
    let store = state.store(&config.store)?;
    // A backup writes: it creates a local store's directory.
    store.prepare_write().await?;
    let session = Session::open(&config.postgres).await?;
    let instance = inspect(&session).await?;

    let started_at = Utc::now();
    let id = backup_id(started_at);
    let folder = store.backup_prefix(&id);
    let manifest_key = folder.clone().join(manifest::MANIFEST_FILE);
    if store.get(&manifest_key).await?.is_some() {
        return Err(BackupError::Unsupported(format!(
            "a backup with id {id} exists already; start the next one a second later"
        )));
    }
    let label = format!("cnpgi-wal-archive {id}");
    let start_sql = if instance.version >= 150000 {
        "SELECT pg_backup_start($1, true)::text"
    } else {
        "SELECT pg_start_backup($1, true, false)::text"
    };
    let begin_lsn: String = session
        .query_one("start the backup", CONTROL_TIMEOUT, start_sql, &[&label])
        .await?
        .get(0);
    tracing::info!(backup = %id, begin_lsn = %begin_lsn, pgdata = %instance.data_directory.display(), "backup started");

    // Stream PGDATA; the builder comes back open, to receive backup_label.
    let data_key = folder.clone().join(manifest::DATA_FILE);
    let upload_failure = Arc::new(Mutex::new(None));
    let upload = Upload {
        inner: SyncIoBridge::new(BufWriter::new(store.object_store(), data_key.clone())),
        store: store.clone(),
        key: data_key.clone(),
        failure: upload_failure.clone(),
    };
    let pgdata = instance.data_directory.clone();
    let skip = match &config.store.location {
        Location::Local(dir) => Some(dir.clone()),
        Location::S3 { .. } => None,
    };
    let level = config.compression_level;
    // The store's own error when the upload failed, else reading PGDATA's.
    let stream_error = |source: io::Error| match upload_failure.lock().unwrap_or_else(PoisonError::into_inner).take() {
        Some(store_error) => BackupError::Store(store_error),
        None => BackupError::Stream {
            pgdata: instance.data_directory.display().to_string(),
            source,
        },
    };
    let streaming = Instant::now();
    let (builder, files) = tokio::task::spawn_blocking(move || -> io::Result<_> {
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
        let files = add_pgdata(&mut builder, &pgdata, skip.as_deref())?;
        Ok((builder, files))
    })
    .await
    .map_err(|e| stream_error(io::Error::other(e)))?
    .map_err(stream_error)?;

    let stop_sql = if instance.version >= 150000 {
        "SELECT lsn::text, labelfile, spcmapfile FROM pg_backup_stop(true)"
    } else {
        "SELECT lsn::text, labelfile, spcmapfile FROM pg_stop_backup(false, true)"
    };
    let stop = session
        .query_one("stop the backup", CONTROL_TIMEOUT, stop_sql, &[])
        .await?;
    let stopped_at = Utc::now();
    let end_lsn: String = stop.get(0);
    let backup_label: String = stop.get(1);
    let tablespace_map: Option<String> = stop.get(2);
    let tablespace_map = tablespace_map.unwrap_or_default();
    drop(session);

    let label_for_tar = backup_label.clone();
    let map_for_tar = tablespace_map.clone();
    let (tar_size, stored_size, sha256) = tokio::task::spawn_blocking(move || -> io::Result<_> {
        let mut builder = builder;
        add_generated(&mut builder, "backup_label", label_for_tar.as_bytes())?;
        if !map_for_tar.is_empty() {
            add_generated(&mut builder, "tablespace_map", map_for_tar.as_bytes())?;
        }
        finish(builder)
    })
    .await
    .map_err(|e| stream_error(io::Error::other(e)))?
    .map_err(stream_error)?;

    let timeline = label_timeline(&backup_label)
        .ok_or_else(|| BackupError::Answer("backup_label has no START TIMELINE line".into()))?;
    let lsn = |text: &str| text.parse::<Lsn>().map_err(|e| BackupError::Answer(e.to_string()));
    let manifest = Manifest {
        format: manifest::FORMAT.into(),
        backup_id: id.clone(),
        backup_name: backup_name.to_owned(),
        cluster_name: cluster_name.to_owned(),
        server_name: config.store.server_name.clone(),
        started_at,
        stopped_at,
        begin_wal: lsn(&begin_lsn)?.segment_file_name(timeline, instance.segment_size),
        end_wal: lsn(&end_lsn)?.previous_segment_file_name(timeline, instance.segment_size),
        begin_lsn,
        end_lsn,
        timeline,
        pg_version: instance.version,
        system_identifier: instance.system_identifier,
        wal_segment_size: instance.segment_size,
        data: DataObject {
            file: manifest::DATA_FILE.into(),
            size: stored_size,
            sha256,
            tar_size,
            compression: "zstd".into(),
        },
        backup_label,
        tablespace_map,
    };
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| BackupError::Answer(e.to_string()))?;
    store.put(&manifest_key, Bytes::from(json)).await?;
    tracing::info!(backup = %id, files, tar_bytes = tar_size, stored_bytes = stored_size,
        begin_wal = %manifest.begin_wal, end_wal = %manifest.end_wal,
        streaming_ms = streaming.elapsed().as_millis() as u64, "backup completed");

    if let Some(keep) = config.keep_backups {
        apply_retention(&store, keep).await?;
    }
    Ok(manifest)
}

/// Deletes the backups beyond the `keep` newest, and the WAL none of the
/// kept ones needs (see [`manifest::retention`]); also incomplete backups
/// older than the oldest kept one.
///
/// # Errors
///
/// [`StoreError`] when the store fails.
pub async fn apply_retention(store: &Store, keep: usize) -> Result<(), StoreError> {
    let backups = list_backups(store).await?;
    let plan = manifest::retention(&backups, keep);
    for id in &plan.delete_backups {
        let folder = store.backup_prefix(id);
        // The manifest first: a half-deleted backup is an incomplete one.
        store.delete(&folder.clone().join(manifest::MANIFEST_FILE)).await?;
        store.delete(&folder.clone().join(manifest::DATA_FILE)).await?;
        tracing::info!(backup = %id, "retention: backup deleted");
    }
    let Some(first_needed) = plan.delete_wal_before else {
        return Ok(());
    };
    let oldest_kept = backups
        .iter()
        .filter(|b| !plan.delete_backups.contains(&b.backup_id))
        .map(|b| b.backup_id.as_str())
        .min()
        .unwrap_or_default()
        .to_owned();
    let complete: Vec<&str> = backups.iter().map(|b| b.backup_id.as_str()).collect();
    for meta in store.list(&store.backups_prefix()).await? {
        let id = backup_id_of(&meta.location);
        if !complete.contains(&id.as_str()) && id < oldest_kept {
            store.delete(&meta.location).await?;
        }
    }
    let mut deleted = 0;
    for meta in store.list(&store.wal_prefix()).await? {
        let Some(name) = meta.location.filename().and_then(|f| f.strip_suffix(".zst")) else {
            continue;
        };
        if WalFileName::parse(name).is_ok() && manifest::wal_is_older(name, &first_needed) {
            store.delete(&meta.location).await?;
            deleted += 1;
        }
    }
    tracing::info!(kept = backups.len() - plan.delete_backups.len(), wal_deleted = deleted, first_needed = %first_needed,
        "retention applied");
    Ok(())
}

/// `Backup` takes no parameters of its own (the Cluster's configure it).
fn backup_parameters() -> ParameterSchema {
    ParameterSchema::new().deny_unknown()
}

#[tonic::async_trait]
impl backup_server::Backup for Backup {
    async fn get_capabilities(
        &self,
        _: Request<BackupCapabilitiesRequest>,
    ) -> Result<Response<BackupCapabilitiesResult>, Status> {
        Ok(Response::new(BackupCapabilitiesResult {
            capabilities: vec![cnpgi_pluginhelper::capabilities::backup_rpc(
                backup_capability::rpc::Type::Backup,
            )],
        }))
    }

    async fn backup(&self, request: Request<BackupRequest>) -> Result<Response<BackupResult>, Status> {
        let request = request.into_inner();
        let cluster = decode_cluster(&request.cluster_definition)?;
        let config = parameters::own(&cluster)?;
        let parameters = request.parameters.into_iter().collect();
        if let Err(errors) = backup_parameters().parse(0, &parameters) {
            return Err(Status::invalid_argument(format!(
                "this plugin takes no backup parameters: {}",
                errors
                    .iter()
                    .map(|e| e.path_components.last().cloned().unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let backup: Value = if request.backup_definition.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&request.backup_definition)
                .map_err(|e| Status::invalid_argument(format!("backup_definition is not JSON: {e}")))?
        };
        let backup_name = backup
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let cluster_name = crate::cluster::ClusterView::new(&cluster).name().to_owned();
        let result = take_backup(&self.state, &config, &cluster_name, &backup_name).await;
        let manifest = match result {
            Ok(manifest) => {
                self.state.record(|a| a.backups += 1);
                manifest
            }
            Err(error) => {
                self.state.record(|a| a.backup_failures += 1);
                tracing::warn!(%error, "backup failed");
                return Err(error.into());
            }
        };
        let store = self.state.store(&config.store)?;
        Ok(Response::new(BackupResult {
            backup_id: manifest.backup_id.clone(),
            backup_name: manifest.backup_name.clone(),
            started_at: manifest.started_at.timestamp(),
            stopped_at: manifest.stopped_at.timestamp(),
            begin_wal: manifest.begin_wal.clone(),
            end_wal: manifest.end_wal.clone(),
            begin_lsn: manifest.begin_lsn.clone(),
            end_lsn: manifest.end_lsn.clone(),
            backup_label_file: manifest.backup_label.clone().into_bytes(),
            tablespace_map_file: manifest.tablespace_map.clone().into_bytes(),
            instance_id: std::env::var("HOSTNAME").unwrap_or_default(),
            online: true,
            metadata: [
                ("timeline".to_owned(), manifest.timeline.to_string()),
                ("serverName".to_owned(), manifest.server_name.clone()),
                ("store".to_owned(), store.description().to_owned()),
                ("dataSha256".to_owned(), manifest.data.sha256.clone()),
                ("dataSize".to_owned(), manifest.data.size.to_string()),
            ]
            .into(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let store = Store::open(&crate::parameters::StoreConfig {
            location: Location::Local(dir.path().to_owned()),
            server_name: "pg1".into(),
        })
        .unwrap();
        // The backup's folder is a file: the store cannot create the object.
        std::fs::create_dir_all(dir.path().join("pg1/backups")).unwrap();
        std::fs::write(dir.path().join("pg1/backups/20260101T000000"), b"x").unwrap();
        let key = store.backup_prefix("20260101T000000").join(manifest::DATA_FILE);
        let failure = Arc::new(Mutex::new(None));
        let mut upload = Upload {
            inner: SyncIoBridge::new(BufWriter::new(store.object_store(), key.clone())),
            store: store.clone(),
            key,
            failure: failure.clone(),
        };
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
        assert_eq!(Status::from(BackupError::Store(kept)).code(), tonic::Code::Unavailable);
    }

    #[test]
    fn label_and_ids() {
        let label = "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nCHECKPOINT LOCATION: 0/2000060\n\
                     BACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: 2026-01-01 00:00:00 UTC\n\
                     LABEL: x\nSTART TIMELINE: 3\n";
        assert_eq!(label_timeline(label), Some(3));
        assert_eq!(label_timeline("nothing"), None);
        let at = crate::pgtime::parse("2026-01-02 03:04:05+00").unwrap();
        assert_eq!(backup_id(at), "20260102T030405");
    }
}
