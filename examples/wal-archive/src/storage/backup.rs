//! A base backup of the running instance into the store.
//!
//! The backup uses PostgreSQL's low-level API over one connection to the
//! local instance (`pgHost`, by default CloudNativePG's socket directory
//! `/controller/run`), so the sidecar needs no PostgreSQL binaries. The
//! steps of [`take_backup`]:
//!
//! 1. `pg_backup_start(label, fast => true)` (`pg_start_backup` before
//!    PostgreSQL 15);
//! 2. PGDATA (read through the mount the sidecar shares with PostgreSQL) is
//!    streamed as a tar archive through zstd into `backups/<id>/data.tar.zst`
//!    ([`crate::storage::pgdata_tar`]);
//! 3. `pg_backup_stop(wait_for_archive => true)` returns the `backup_label`
//!    (added to the tar) once the WAL the backup needs is archived;
//! 4. the manifest (`backups/<id>/backup.json`, [`crate::storage::manifest`])
//!    is written last, with the SHA-256 of the data object;
//! 5. with `keepBackups`, retention deletes older backups and the WAL no
//!    kept backup needs ([`crate::storage::retention`]).
//!
//! Tablespaces are not supported: a backup of an instance with one fails
//! before starting.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::{DateTime, Utc};

use crate::parameters::{Config, PgConnection};
use crate::storage::lsn::Lsn;
use crate::storage::manifest::{self, DataObject, Manifest};
use crate::storage::pgdata_tar::{self, DataTar, StoredData, UploadFailure};
use crate::storage::retention::apply_retention;
use crate::storage::store::{Location, Store, StoreError};

/// How long `pg_backup_start` (a checkpoint) and `pg_backup_stop` (waiting
/// for the WAL to be archived) may take.
const CONTROL_TIMEOUT: Duration = Duration::from_secs(30 * 60);
/// How long connecting to PostgreSQL may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

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

/// Takes a backup of the instance `config` points at, into `store`.
///
/// # Errors
///
/// [`BackupError`] naming the step that failed.
pub async fn take_backup(
    store: &Store,
    config: &Config,
    cluster_name: &str,
    backup_name: &str,
) -> Result<Manifest, BackupError> {
    // A backup writes: it creates a local store's directory.
    store.prepare_write().await?;
    let session = Session::open(&config.postgres).await?;
    let instance = inspect(&session).await?;

    let started = start_backup(&session, &instance, store).await?;
    let streaming = Instant::now();
    let stream = DataStream::new(store, config, &instance, &started.id);
    let (tar, files) = stream.add_pgdata().await?;
    let stopped = stop_backup(&session, &instance).await?;
    drop(session);
    let data = stream.finish(tar, &stopped).await?;

    let names = Names {
        backup: backup_name,
        cluster: cluster_name,
        server: &config.store.server_name,
    };
    let manifest = describe(&names, &instance, &started, stopped, data)?;
    let json = serde_json::to_vec_pretty(&manifest).map_err(|e| BackupError::Answer(e.to_string()))?;
    store.put(&started.manifest_key, Bytes::from(json)).await?;
    tracing::info!(backup = %started.id, files, tar_bytes = manifest.data.tar_size, stored_bytes = manifest.data.size,
        begin_wal = %manifest.begin_wal, end_wal = %manifest.end_wal,
        streaming_ms = streaming.elapsed().as_millis() as u64, "backup completed");

    if let Some(keep) = config.keep_backups {
        apply_retention(store, keep).await?;
    }
    Ok(manifest)
}

/// A backup started: its id (the start time), where its manifest goes,
/// and its begin LSN.
struct Started {
    id: String,
    at: DateTime<Utc>,
    manifest_key: object_store::path::Path,
    begin_lsn: String,
}

/// Starts the backup (a checkpoint), under an id not used yet.
async fn start_backup(session: &Session, instance: &Instance, store: &Store) -> Result<Started, BackupError> {
    let at = Utc::now();
    let id = backup_id(at);
    let manifest_key = store.backup_prefix(&id).join(manifest::MANIFEST_FILE);
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
    Ok(Started {
        id,
        at,
        manifest_key,
        begin_lsn,
    })
}

/// What `pg_backup_stop` answers, and when.
struct Stopped {
    at: DateTime<Utc>,
    end_lsn: String,
    backup_label: String,
    tablespace_map: String,
}

/// Stops the backup, once the WAL it needs is archived.
async fn stop_backup(session: &Session, instance: &Instance) -> Result<Stopped, BackupError> {
    let stop_sql = if instance.version >= 150000 {
        "SELECT lsn::text, labelfile, spcmapfile FROM pg_backup_stop(true)"
    } else {
        "SELECT lsn::text, labelfile, spcmapfile FROM pg_stop_backup(false, true)"
    };
    let stop = session
        .query_one("stop the backup", CONTROL_TIMEOUT, stop_sql, &[])
        .await?;
    let tablespace_map: Option<String> = stop.get(2);
    Ok(Stopped {
        at: Utc::now(),
        end_lsn: stop.get(0),
        backup_label: stop.get(1),
        tablespace_map: tablespace_map.unwrap_or_default(),
    })
}

/// Whose backup it is, for the manifest.
struct Names<'a> {
    backup: &'a str,
    cluster: &'a str,
    server: &'a str,
}

/// The manifest of a backup, from what PostgreSQL answered and the data
/// stored.
fn describe(
    names: &Names<'_>,
    instance: &Instance,
    started: &Started,
    stopped: Stopped,
    data: StoredData,
) -> Result<Manifest, BackupError> {
    let timeline = label_timeline(&stopped.backup_label)
        .ok_or_else(|| BackupError::Answer("backup_label has no START TIMELINE line".into()))?;
    let lsn = |text: &str| text.parse::<Lsn>().map_err(|e| BackupError::Answer(e.to_string()));
    Ok(Manifest {
        format: manifest::FORMAT.into(),
        backup_id: started.id.clone(),
        backup_name: names.backup.to_owned(),
        cluster_name: names.cluster.to_owned(),
        server_name: names.server.to_owned(),
        started_at: started.at,
        stopped_at: stopped.at,
        begin_wal: lsn(&started.begin_lsn)?.segment_file_name(timeline, instance.segment_size),
        end_wal: lsn(&stopped.end_lsn)?.previous_segment_file_name(timeline, instance.segment_size),
        begin_lsn: started.begin_lsn.clone(),
        end_lsn: stopped.end_lsn,
        timeline,
        pg_version: instance.version,
        system_identifier: instance.system_identifier.clone(),
        wal_segment_size: instance.segment_size,
        data: DataObject {
            file: manifest::DATA_FILE.into(),
            size: data.stored_size,
            sha256: data.sha256,
            tar_size: data.tar_size,
            compression: "zstd".into(),
        },
        backup_label: stopped.backup_label,
        tablespace_map: stopped.tablespace_map,
    })
}

/// The upload of a backup's data object, run on blocking threads.
struct DataStream {
    store: Store,
    key: object_store::path::Path,
    level: i32,
    pgdata: PathBuf,
    /// A local store's directory, never backed up when it is inside PGDATA.
    skip: Option<PathBuf>,
    failure: UploadFailure,
}

impl DataStream {
    fn new(store: &Store, config: &Config, instance: &Instance, id: &str) -> Self {
        Self {
            store: store.clone(),
            key: store.backup_prefix(id).join(manifest::DATA_FILE),
            level: config.compression_level,
            pgdata: instance.data_directory.clone(),
            skip: match &config.store.location {
                Location::Local(dir) => Some(dir.clone()),
                Location::S3 { .. } => None,
            },
            failure: UploadFailure::default(),
        }
    }

    /// The store's own error when the upload failed, else reading PGDATA's.
    fn error(&self, source: io::Error) -> BackupError {
        match pgdata_tar::take_failure(&self.failure) {
            Some(store_error) => BackupError::Store(store_error),
            None => BackupError::Stream {
                pgdata: self.pgdata.display().to_string(),
                source,
            },
        }
    }

    /// Opens the stream and adds PGDATA's files; the stream comes back open,
    /// to receive `backup_label`, with the number of files added.
    async fn add_pgdata(&self) -> Result<(DataTar, u64), BackupError> {
        let (store, key, level) = (self.store.clone(), self.key.clone(), self.level);
        let (pgdata, skip, failure) = (self.pgdata.clone(), self.skip.clone(), self.failure.clone());
        tokio::task::spawn_blocking(move || -> io::Result<_> {
            let mut tar = pgdata_tar::open(&store, key, level, &failure)?;
            let files = pgdata_tar::add_pgdata(&mut tar, &pgdata, skip.as_deref())?;
            Ok((tar, files))
        })
        .await
        .map_err(|e| self.error(io::Error::other(e)))?
        .map_err(|e| self.error(e))
    }

    /// Adds the files `pg_backup_stop` gave and closes the stream.
    async fn finish(&self, tar: DataTar, stopped: &Stopped) -> Result<StoredData, BackupError> {
        let label = stopped.backup_label.clone();
        let map = stopped.tablespace_map.clone();
        tokio::task::spawn_blocking(move || -> io::Result<_> {
            let mut tar = tar;
            pgdata_tar::add_generated(&mut tar, "backup_label", label.as_bytes())?;
            if !map.is_empty() {
                pgdata_tar::add_generated(&mut tar, "tablespace_map", map.as_bytes())?;
            }
            pgdata_tar::finish(tar)
        })
        .await
        .map_err(|e| self.error(io::Error::other(e)))?
        .map_err(|e| self.error(e))
    }
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
            detail: crate::storage::store::error_chain(&error),
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

#[cfg(test)]
mod tests {
    use super::*;

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
