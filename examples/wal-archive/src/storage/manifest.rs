//! Backup manifests, choosing the backup a recovery starts from, and
//! retention.
//!
//! `backups/<id>/backup.json` describes a completed backup: where it begins
//! and ends in WAL (LSNs and segment names), its timeline, when it ran, the
//! `backup_label` PostgreSQL gave, and the name, size and SHA-256 of its data
//! object. It is written after the data, so a backup without a manifest is
//! an incomplete one, never restored and removed by retention.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::cluster::RecoveryTarget;
use crate::pgtime;
use crate::storage::lsn::Lsn;

/// The `format` of the current manifest.
pub const FORMAT: &str = "cnpgi-wal-archive-backup/1";
/// The manifest's file name in a backup's folder.
pub const MANIFEST_FILE: &str = "backup.json";
/// The data's file name in a backup's folder.
pub const DATA_FILE: &str = "data.tar.zst";

/// The data object of a backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataObject {
    /// File name in the backup's folder ([`DATA_FILE`]).
    pub file: String,
    /// Size of the stored (compressed) object, in bytes.
    pub size: u64,
    /// SHA-256 of the stored object, lowercase hexadecimal.
    pub sha256: String,
    /// Size of the uncompressed tar stream, in bytes.
    pub tar_size: u64,
    /// `zstd`.
    pub compression: String,
}

/// A completed backup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// The backup's id: its folder name, the UTC start time `YYYYMMDDTHHMMSS`.
    pub backup_id: String,
    /// The name of the `Backup` object that asked for it (may be empty).
    pub backup_name: String,
    /// The Cluster's name.
    pub cluster_name: String,
    /// The `serverName` it was stored under.
    pub server_name: String,
    /// When the backup started (`pg_backup_start`).
    pub started_at: DateTime<Utc>,
    /// When it ended (`pg_backup_stop` returned).
    pub stopped_at: DateTime<Utc>,
    /// Where replay must start.
    pub begin_lsn: String,
    /// Where the backup is consistent.
    pub end_lsn: String,
    /// The segment holding `begin_lsn`.
    pub begin_wal: String,
    /// The last segment needed to reach `end_lsn`.
    pub end_wal: String,
    /// The timeline it was taken on.
    pub timeline: u32,
    /// `server_version_num`.
    pub pg_version: u32,
    /// The instance's system identifier.
    pub system_identifier: String,
    /// `wal_segment_size`, in bytes.
    pub wal_segment_size: u64,
    /// The data object.
    pub data: DataObject,
    /// The `backup_label` PostgreSQL returned; also inside the data.
    pub backup_label: String,
    /// The `tablespace_map` PostgreSQL returned (empty without tablespaces).
    pub tablespace_map: String,
}

/// No backup fits a recovery target.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ChooseError {
    /// There are no backups at all.
    #[error("there is no completed backup in the archive")]
    NoBackups,
    /// `backupID` names no backup.
    #[error("no backup has the id {wanted:?} (available: {available})")]
    UnknownId {
        /// The id asked for.
        wanted: String,
        /// The ids available.
        available: String,
    },
    /// Every backup ends after the target.
    #[error("no backup ended before the recovery target {0}")]
    TooEarly(String),
    /// The target cannot be read.
    #[error("invalid recovery target: {0}")]
    BadTarget(String),
}

/// The backup to restore for `target`: the one named by `backupID`; else
/// the newest that ended before `targetTime` or `targetLSN`; else the
/// newest. (PostgreSQL can only replay forward from a backup's end.)
///
/// # Errors
///
/// [`ChooseError`] when none fits.
pub fn choose<'a>(backups: &'a [Manifest], target: &RecoveryTarget) -> Result<&'a Manifest, ChooseError> {
    if backups.is_empty() {
        return Err(ChooseError::NoBackups);
    }
    if !target.backup_id.is_empty() {
        return backups
            .iter()
            .find(|b| b.backup_id == target.backup_id)
            .ok_or_else(|| ChooseError::UnknownId {
                wanted: target.backup_id.clone(),
                available: backups
                    .iter()
                    .map(|b| b.backup_id.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            });
    }
    let newest = |candidates: Vec<&'a Manifest>| {
        candidates
            .into_iter()
            .max_by_key(|b| (b.stopped_at, b.backup_id.clone()))
    };
    if !target.target_time.is_empty() {
        let time = pgtime::parse(&target.target_time).map_err(|e| ChooseError::BadTarget(e.to_string()))?;
        return newest(backups.iter().filter(|b| b.stopped_at <= time).collect())
            .ok_or_else(|| ChooseError::TooEarly(format!("time {}", target.target_time)));
    }
    if !target.target_lsn.is_empty() {
        let lsn: Lsn = target
            .target_lsn
            .parse()
            .map_err(|e: crate::storage::lsn::LsnError| ChooseError::BadTarget(e.to_string()))?;
        return newest(
            backups
                .iter()
                .filter(|b| b.end_lsn.parse::<Lsn>().is_ok_and(|end| end <= lsn))
                .collect(),
        )
        .ok_or_else(|| ChooseError::TooEarly(format!("LSN {}", target.target_lsn)));
    }
    newest(backups.iter().collect()).ok_or(ChooseError::NoBackups)
}

/// What retention removes when `keep` backups are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    /// Ids of the backups to delete (the oldest).
    pub delete_backups: Vec<String>,
    /// WAL files named before this segment are no longer needed by any kept
    /// backup (`None`: keep all WAL).
    pub delete_wal_before: Option<String>,
}

/// Retention keeping the `keep` newest backups and the WAL they need: every
/// WAL file whose name sorts before the oldest kept backup's `begin_wal`
/// (timeline, then position) goes; timeline history files stay.
pub fn retention(backups: &[Manifest], keep: usize) -> Retention {
    let mut sorted: Vec<&Manifest> = backups.iter().collect();
    sorted.sort_by(|a, b| (b.stopped_at, &b.backup_id).cmp(&(a.stopped_at, &a.backup_id)));
    let keep = keep.max(1);
    let kept = &sorted[..sorted.len().min(keep)];
    Retention {
        delete_backups: sorted.iter().skip(keep).map(|b| b.backup_id.clone()).collect(),
        delete_wal_before: kept.iter().map(|b| b.begin_wal.clone()).min(),
    }
}

/// Whether a WAL file (by name) is older than `first_needed` (a segment
/// name): segments, `.partial` and `.backup` files compare by their first 24
/// characters; `.history` files are always kept.
pub fn wal_is_older(name: &str, first_needed: &str) -> bool {
    if name.ends_with(".history") || name.len() < 24 {
        return false;
    }
    name[..24] < *first_needed
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn manifest(id: &str, stopped: &str, begin_wal: &str, end_lsn: &str) -> Manifest {
        let stopped_at = pgtime::parse(stopped).unwrap();
        Manifest {
            format: FORMAT.into(),
            backup_id: id.into(),
            backup_name: String::new(),
            cluster_name: "pg1".into(),
            server_name: "pg1".into(),
            started_at: stopped_at - chrono::Duration::seconds(10),
            stopped_at,
            begin_lsn: "0/2000028".into(),
            end_lsn: end_lsn.into(),
            begin_wal: begin_wal.into(),
            end_wal: begin_wal.into(),
            timeline: 1,
            pg_version: 150000,
            system_identifier: "1".into(),
            wal_segment_size: 16 << 20,
            data: DataObject {
                file: DATA_FILE.into(),
                size: 1,
                sha256: String::new(),
                tar_size: 1,
                compression: "zstd".into(),
            },
            backup_label: String::new(),
            tablespace_map: String::new(),
        }
    }

    fn backups() -> Vec<Manifest> {
        vec![
            manifest("b1", "2026-01-01 10:00:00+00", "000000010000000000000002", "0/2000100"),
            manifest("b3", "2026-01-03 10:00:00+00", "000000020000000000000009", "0/9000100"),
            manifest("b2", "2026-01-02 10:00:00+00", "000000010000000000000005", "0/5000100"),
        ]
    }

    fn target(set: impl FnOnce(&mut RecoveryTarget)) -> RecoveryTarget {
        let mut target = RecoveryTarget::default();
        set(&mut target);
        target
    }

    #[test]
    fn choosing_the_backup_for_a_target() {
        let all = backups();
        assert_eq!(choose(&all, &RecoveryTarget::default()).unwrap().backup_id, "b3");
        assert_eq!(
            choose(&all, &target(|t| t.backup_id = "b1".into())).unwrap().backup_id,
            "b1"
        );
        assert!(matches!(
            choose(&all, &target(|t| t.backup_id = "zz".into())),
            Err(ChooseError::UnknownId { .. })
        ));
        let at = |time: &str| choose(&all, &target(|t| t.target_time = time.into())).map(|b| b.backup_id.clone());
        assert_eq!(at("2026-01-02T12:00:00Z").unwrap(), "b2");
        assert_eq!(at("2026-01-02 10:00:00+00").unwrap(), "b2");
        assert_eq!(at("2027-01-01T00:00:00Z").unwrap(), "b3");
        assert!(matches!(at("2025-12-31T00:00:00Z"), Err(ChooseError::TooEarly(_))));
        assert!(matches!(at("soon"), Err(ChooseError::BadTarget(_))));
        let lsn = |value: &str| choose(&all, &target(|t| t.target_lsn = value.into())).map(|b| b.backup_id.clone());
        assert_eq!(lsn("0/6000000").unwrap(), "b2");
        assert!(lsn("0/1000000").is_err());
        assert_eq!(choose(&[], &RecoveryTarget::default()), Err(ChooseError::NoBackups));
    }

    #[test]
    fn retention_keeps_the_newest_and_their_wal() {
        let all = backups();
        let plan = retention(&all, 2);
        assert_eq!(plan.delete_backups, ["b1"]);
        assert_eq!(plan.delete_wal_before.as_deref(), Some("000000010000000000000005"));
        let plan = retention(&all, 5);
        assert!(plan.delete_backups.is_empty());
        assert_eq!(plan.delete_wal_before.as_deref(), Some("000000010000000000000002"));
        assert_eq!(retention(&all, 1).delete_backups, ["b2", "b1"]);

        let first = "000000010000000000000005";
        assert!(wal_is_older("000000010000000000000004", first));
        assert!(wal_is_older("000000010000000000000004.partial", first));
        assert!(wal_is_older("000000010000000000000004.00000028.backup", first));
        assert!(!wal_is_older("000000010000000000000005", first));
        assert!(!wal_is_older("000000020000000000000001", first));
        assert!(!wal_is_older("00000001.history", first));
    }
}
