//! Archiving ahead: when PostgreSQL asks to archive one WAL segment and more
//! are ready, archive up to [`ArchiveAhead::max_parallel`] of them at once,
//! and answer PostgreSQL's later requests for them from a spool, as
//! CloudNativePG's instance manager does with `maxParallel`.
//!
//! PostgreSQL runs `archive_command` for one file at a time, so a store 50 ms
//! away caps archiving at 20 segments a second whatever the plugin can do.
//! Here the segments after the one asked for (their `.ready` files in
//! `pg_wal/archive_status`, in name order, which is PostgreSQL's) go to the
//! plugins together; for each one every archiving plugin confirmed, a marker
//! is written in the spool directory. When PostgreSQL then asks for it, the
//! answer is immediate.
//!
//! A marker never claims more than what happened:
//!
//! * it is written (to a temporary name, synced, renamed, the directory
//!   synced) only after **every** archiving plugin answered OK, so a crash
//!   before that leaves no marker and PostgreSQL's request archives the
//!   segment again, with the same bytes;
//! * it records the Cluster's `metadata.uid`, the plugins the Cluster
//!   enables, and the segment's size and BLAKE3 digest. A request is answered from
//!   it only when all of these still hold for the file in `pg_wal`; any
//!   difference (PGDATA restored or re-created under the same spool, a
//!   plugin enabled since, another Cluster) drops the marker and archives
//!   the file as usual;
//! * it is removed once used, and markers of segments that are no longer
//!   `.ready` are removed when the next batch starts.
//!
//! The first archive after initdb, a restore or a join (the empty-archive
//! check) is never done ahead: that check must see the archive as it was.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
};

use cnpgi_core::{cluster::enabled_plugins, wal_segment::is_segment_name};
use serde_json::{Value, json};

use super::{
    InstanceError, InstanceOptions,
    wal::{Archivers, check_wal_file},
};

/// The format of a marker (a JSON object with this `version`). Version 1
/// held a SHA-256; a marker of another version is dropped, and its segment
/// archived again in its turn.
const MARKER_VERSION: u64 = 2;

/// How far ahead to archive, and where the markers go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveAhead {
    /// How many segments one request archives at once, the one asked for
    /// included (1: only that one, as PostgreSQL alone does).
    pub max_parallel: usize,
    /// The spool directory: one marker per segment archived ahead. Keep it
    /// out of PGDATA (a base backup would copy it) but on the same volume
    /// (it must survive a restart with `pg_wal`).
    pub spool_dir: PathBuf,
}

/// How the file PostgreSQL asked for is archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Archived {
    /// Now, by these plugins.
    Now(Vec<String>),
    /// Earlier, ahead of its turn: the answer came from its marker.
    FromSpool,
}

/// What [`archive_wal_ahead`] did.
#[derive(Debug)]
pub struct AheadReport {
    /// The answer for the file asked for: archived, or why not (as
    /// [`super::wal::archive_wal`]'s errors). Only this decides the answer
    /// to PostgreSQL.
    pub outcome: Result<Archived, InstanceError>,
    /// The segments archived ahead, each with its marker written.
    pub spooled: Vec<String>,
    /// What went wrong on the side, whatever the outcome: a segment ahead
    /// not archived (PostgreSQL asks for it again in its turn), a marker
    /// dropped or not written, a spool that cannot be used.
    pub warnings: Vec<String>,
}

/// Archives `source_file` (an absolute path in `pg_wal`, as
/// [`super::wal::archive_wal`] takes it) and, unless
/// `check_empty_wal_archive` or `ahead.max_parallel` is 1, up to
/// `max_parallel - 1` more ready segments beside it. A request for a
/// segment archived ahead earlier is answered from its marker.
///
/// The segments ahead never change [`AheadReport::outcome`].
///
/// ```no_run
/// use cnpgi_client::{
///     client::ClientOptions,
///     instance::{InstanceOptions, archive_ahead::{ArchiveAhead, archive_wal_ahead}},
/// };
/// # async fn run(cluster: serde_json::Value) -> Result<(), cnpgi_client::instance::InstanceError> {
/// let options = InstanceOptions { socket_dir: "/plugins".into(), client: ClientOptions::default() };
/// let ahead = ArchiveAhead { max_parallel: 8, spool_dir: "/var/lib/postgresql/cnpgi-wal-spool/pgdata".into() };
/// // PostgreSQL's `%p`, made absolute.
/// let segment = std::path::Path::new("/var/lib/postgresql/pgdata/pg_wal/000000010000000000000007");
/// let report = archive_wal_ahead(&cluster, segment, false, &ahead, &options).await;
/// for warning in &report.warnings {
///     eprintln!("{warning}");
/// }
/// report.outcome?; // archived now or earlier: PostgreSQL may recycle the segment
/// # Ok(())
/// # }
/// ```
pub async fn archive_wal_ahead(
    cluster: &Value,
    source_file: &Path,
    check_empty_wal_archive: bool,
    ahead: &ArchiveAhead,
    options: &InstanceOptions,
) -> AheadReport {
    let mut warnings = Vec::new();
    let mut spooled = Vec::new();
    let outcome = archive(
        cluster,
        source_file,
        check_empty_wal_archive,
        ahead,
        options,
        &mut spooled,
        &mut warnings,
    )
    .await;
    AheadReport {
        outcome,
        spooled,
        warnings,
    }
}

/// [`archive_wal_ahead`], with what happens on the side pushed as it goes.
async fn archive(
    cluster: &Value,
    source_file: &Path,
    check_empty_wal_archive: bool,
    ahead: &ArchiveAhead,
    options: &InstanceOptions,
    spooled: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<Archived, InstanceError> {
    let name = source_file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let identity = Identity::of(cluster);
    let spool = Spool {
        dir: ahead.spool_dir.clone(),
    };
    if is_segment_name(&name) && !check_empty_wal_archive {
        match spool.take(&name, source_file, &identity).await {
            Ok(true) => return Ok(Archived::FromSpool),
            Ok(false) => {}
            Err(why) => warnings.push(why),
        }
    }
    check_wal_file(cluster, source_file)?;

    let mut batch = Vec::new();
    if ahead.max_parallel > 1 && !check_empty_wal_archive && is_segment_name(&name) {
        match spool.prepare(source_file, &name) {
            Ok(ready) => {
                for next in ready {
                    if batch.len() + 1 >= ahead.max_parallel {
                        break;
                    }
                    let path = source_file.with_file_name(&next);
                    // A file that cannot be a segment is left for its turn,
                    // where its refusal fails PostgreSQL's request.
                    if check_wal_file(cluster, &path).is_ok() {
                        batch.push((next, path));
                    }
                }
            }
            Err(why) => warnings.push(why),
        }
    }

    let archivers = Archivers::connect(cluster, options).await?;
    let asked = archivers.archive(source_file, check_empty_wal_archive);
    let others = futures_util::future::join_all(
        batch
            .iter()
            .map(|(next, path)| archive_and_mark(&archivers, &spool, &identity, next, path)),
    );
    let (asked, others) = tokio::join!(asked, others);
    for (next, outcome) in batch.iter().map(|(next, _)| next).zip(others) {
        match outcome {
            Ok(()) => spooled.push(next.clone()),
            Err(why) => warnings.push(format!("{next} not archived ahead: {why}")),
        }
    }
    asked.map(Archived::Now)
}

/// Archives one segment ahead and writes its marker once every plugin has it.
async fn archive_and_mark(
    archivers: &Archivers,
    spool: &Spool,
    identity: &Identity,
    name: &str,
    path: &Path,
) -> Result<(), String> {
    let digest = digest(path.to_owned());
    let (archived, digest) = tokio::join!(archivers.archive(path, false), digest);
    let plugins = archived.map_err(|e| e.to_string())?;
    let (size, blake3) = digest.map_err(|e| format!("archived, but cannot read it again for its marker: {e}"))?;
    spool
        .write(name, &identity.marker(size, &blake3, &plugins))
        .map_err(|e| format!("archived, but its marker cannot be written: {e} (it is archived again in its turn)"))
}

/// What a marker must match besides the file: whose archive, through which
/// plugins.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    cluster_uid: String,
    enabled: Vec<String>,
}

impl Identity {
    fn of(cluster: &Value) -> Self {
        let mut enabled: Vec<String> = enabled_plugins(cluster).into_iter().map(|p| p.name).collect();
        enabled.sort();
        enabled.dedup();
        Self {
            cluster_uid: cluster
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            enabled,
        }
    }

    fn marker(&self, size: u64, blake3: &str, plugins: &[String]) -> Vec<u8> {
        let marker = json!({
            "version": MARKER_VERSION,
            "clusterUid": self.cluster_uid,
            "enabledPlugins": self.enabled,
            "archivedBy": plugins,
            "size": size,
            "blake3": blake3,
        });
        marker.to_string().into_bytes()
    }

    /// Why `marker` does not vouch for a file of `size` bytes hashing to
    /// `blake3` archived by these plugins, if it does not.
    fn mismatch(&self, marker: &Value, size: u64, blake3: &str) -> Option<String> {
        let field = |key: &str| marker.get(key).cloned().unwrap_or(Value::Null);
        if field("version") != json!(MARKER_VERSION) {
            return Some(format!("unknown marker version {}", field("version")));
        }
        if field("clusterUid") != json!(self.cluster_uid) {
            return Some(format!(
                "written for Cluster uid {}, this one is {:?}",
                field("clusterUid"),
                self.cluster_uid
            ));
        }
        if field("enabledPlugins") != json!(self.enabled) {
            return Some(format!(
                "written when the Cluster enabled {}, it now enables {:?}",
                field("enabledPlugins"),
                self.enabled
            ));
        }
        if field("size") != json!(size) || field("blake3") != json!(blake3) {
            return Some(format!(
                "the file changed since it was archived (size {}, BLAKE3 {}; now {size}, {blake3})",
                field("size"),
                field("blake3")
            ));
        }
        None
    }
}

/// The size and BLAKE3 digest (lower-case hex) of a file, read off the
/// runtime's threads.
///
/// BLAKE3, not SHA-256: a segment archived ahead is hashed twice (for its
/// marker, then when PostgreSQL asks for it), and with SHA-256 those two
/// hashes took more CPU than the plugin's own SHA-256 of the segment
/// (BENCHMARKS.md, "Where the CPU goes"); BLAKE3 is as collision-resistant
/// and several times faster on one core.
async fn digest(path: PathBuf) -> std::io::Result<(u64, String)> {
    tokio::task::spawn_blocking(move || {
        let mut file = std::fs::File::open(&path)?;
        let mut hasher = blake3::Hasher::new();
        let size = std::io::copy(&mut file, &mut hasher)?;
        Ok((size, hasher.finalize().to_hex().to_string()))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// The spool directory and its markers, one file per segment name.
#[derive(Debug)]
struct Spool {
    dir: PathBuf,
}

impl Spool {
    /// Uses the marker of `name`, if there is one that vouches for
    /// `source_file`: true then, and the marker is gone. A marker that does
    /// not vouch for it is removed (the error says why).
    async fn take(&self, name: &str, source_file: &Path, identity: &Identity) -> Result<bool, String> {
        let path = self.dir.join(name);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(format!("cannot read the spool's marker {}: {e}", path.display())),
        };
        let verdict = match serde_json::from_slice::<Value>(&bytes) {
            Err(e) => Some(format!("not a marker: {e}")),
            Ok(marker) => match digest(source_file.to_owned()).await {
                Ok((size, sha256)) => identity.mismatch(&marker, size, &sha256),
                Err(e) => Some(format!("cannot read {}: {e}", source_file.display())),
            },
        };
        let removed = std::fs::remove_file(&path);
        match (verdict, removed) {
            (None, Ok(())) => Ok(true),
            (None, Err(e)) => Err(format!(
                "cannot remove the spool's marker {}: {e}; archiving {name} again",
                path.display()
            )),
            (Some(why), _) => Err(format!(
                "spool marker {} dropped: {why}; archiving {name} again",
                path.display()
            )),
        }
    }

    /// Makes the directory, removes what a crash or an older batch left in
    /// it, and returns the ready segments other than `name` that have no
    /// marker yet, in name order.
    fn prepare(&self, source_file: &Path, name: &str) -> Result<Vec<String>, String> {
        let status_dir = source_file
            .parent()
            .map(|wal| wal.join("archive_status"))
            .unwrap_or_default();
        let read = |dir: &Path| -> Result<Vec<String>, String> {
            let entries = std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
            Ok(entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .collect())
        };
        let mut ready: Vec<String> = read(&status_dir)?
            .into_iter()
            .filter_map(|file| file.strip_suffix(".ready").map(str::to_owned))
            .filter(|segment| is_segment_name(segment) && segment != name)
            .collect();
        ready.sort();
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| format!("cannot create the spool directory {}: {e}", self.dir.display()))?;
        let mut marked = Vec::new();
        for file in read(&self.dir)? {
            // A marker whose segment is no longer ready was used, or its
            // segment archived without it; a temporary file is a crash's.
            if file.ends_with(".tmp") || (file != name && ready.binary_search(&file).is_err()) {
                let _ = std::fs::remove_file(self.dir.join(&file));
            } else {
                marked.push(file);
            }
        }
        ready.retain(|segment| !marked.contains(segment));
        Ok(ready)
    }

    /// Writes the marker of `name` durably: a temporary file, synced,
    /// renamed, and the directory synced.
    fn write(&self, name: &str, marker: &[u8]) -> std::io::Result<()> {
        let temporary = self.dir.join(format!("{name}.tmp"));
        let mut file = std::fs::File::create(&temporary)?;
        file.write_all(marker)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&temporary, self.dir.join(name))?;
        std::fs::File::open(&self.dir)?.sync_all()
    }
}

#[cfg(test)]
#[path = "archive_ahead_tests.rs"]
mod tests;
