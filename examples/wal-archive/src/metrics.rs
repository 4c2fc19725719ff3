//! The plugin's metrics: what the instance manager adds to each scrape of
//! `:9187/metrics` (names used as they are, no prefix added).
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `cnpgi_wal_archive_archived_total` | counter | WAL files archived by this sidecar since it started |
//! | `cnpgi_wal_archive_failures_total` | counter | `Archive` calls that failed |
//! | `cnpgi_wal_archive_last_archived_timestamp_seconds` | gauge | when the last WAL file was archived |
//! | `cnpgi_wal_archive_last_archived_info{wal}` | gauge (1) | the name of the last WAL file archived |
//! | `cnpgi_wal_archive_last_failure_timestamp_seconds` | gauge | when the last `Archive` failed |
//! | `cnpgi_wal_archive_restored_total` | counter | WAL files restored |
//! | `cnpgi_wal_archive_backups_total` / `…_backup_failures_total` | counter | backups taken / failed |
//! | `cnpgi_wal_archive_backups_in_store` | gauge | completed backups in the store |
//! | `cnpgi_wal_archive_last_backup_timestamp_seconds` | gauge | end of the newest backup in the store |
//! | `cnpgi_wal_archive_last_backup_age_seconds` | gauge | how long ago that was |
//!
//! Counters and `last_*archived*` are this process's; the backup gauges
//! come from the store (one listing and one manifest read per scrape), and
//! are left out when the store cannot be read within 10 s.

use std::time::{Duration, SystemTime};

use cnpgi_pluginhelper::plugin::{MetricSet, Sample};

use crate::state::Activity;
use crate::storage::retention::list_backups;
use crate::storage::store::Store;

const PREFIX: &str = "cnpgi_wal_archive_";
/// How long a scrape may wait for the store.
pub const STORE_TIMEOUT: Duration = Duration::from_secs(10);

fn name(suffix: &str) -> String {
    format!("{PREFIX}{suffix}")
}

/// The definitions.
pub fn definitions() -> MetricSet {
    MetricSet::new()
        .counter(
            &name("archived_total"),
            "WAL files archived by this sidecar since it started",
            &[],
        )
        .counter(&name("failures_total"), "WAL archive attempts that failed", &[])
        .gauge(
            &name("last_archived_timestamp_seconds"),
            "When the last WAL file was archived (Unix time)",
            &[],
        )
        .gauge(
            &name("last_archived_info"),
            "The last WAL file archived (value 1)",
            &["wal"],
        )
        .gauge(
            &name("last_failure_timestamp_seconds"),
            "When the last WAL archive attempt failed (Unix time)",
            &[],
        )
        .counter(&name("restored_total"), "WAL files restored by this sidecar", &[])
        .counter(&name("backups_total"), "Base backups taken by this sidecar", &[])
        .counter(&name("backup_failures_total"), "Base backups that failed", &[])
        .gauge(&name("backups_in_store"), "Completed base backups in the store", &[])
        .gauge(
            &name("last_backup_timestamp_seconds"),
            "When the newest base backup in the store ended (Unix time)",
            &[],
        )
        .gauge(
            &name("last_backup_age_seconds"),
            "Seconds since the newest base backup in the store ended",
            &[],
        )
}

fn unix_seconds(time: SystemTime) -> f64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// This process's counters and last events.
pub fn activity_samples(activity: &Activity) -> Vec<Sample> {
    let mut samples = vec![
        Sample::new(name("archived_total"), activity.archived as f64),
        Sample::new(name("failures_total"), activity.archive_failures as f64),
        Sample::new(name("restored_total"), activity.restored as f64),
        Sample::new(name("backups_total"), activity.backups as f64),
        Sample::new(name("backup_failures_total"), activity.backup_failures as f64),
    ];
    if let Some((wal, at)) = &activity.last_archived {
        samples.push(Sample::new(name("last_archived_timestamp_seconds"), unix_seconds(*at)));
        samples.push(Sample::new(name("last_archived_info"), 1.0).with_labels([wal.as_str()]));
    }
    if let Some(at) = activity.last_failure {
        samples.push(Sample::new(name("last_failure_timestamp_seconds"), unix_seconds(at)));
    }
    samples
}

/// The backups in `store`; none when it cannot be listed within
/// [`STORE_TIMEOUT`] (a scrape must not hang, nor fail, on the store).
pub async fn store_samples(store: &Store) -> Vec<Sample> {
    let mut samples = Vec::new();
    match tokio::time::timeout(STORE_TIMEOUT, list_backups(store)).await {
        Ok(Ok(backups)) => {
            samples.push(Sample::new(name("backups_in_store"), backups.len() as f64));
            if let Some(newest) = backups.iter().max_by_key(|b| b.stopped_at) {
                let ended = newest.stopped_at.timestamp_millis() as f64 / 1000.0;
                samples.push(Sample::new(name("last_backup_timestamp_seconds"), ended));
                samples.push(Sample::new(
                    name("last_backup_age_seconds"),
                    (unix_seconds(SystemTime::now()) - ended).max(0.0),
                ));
            }
        }
        Ok(Err(error)) => tracing::warn!(%error, "metrics: cannot list backups"),
        Err(_) => tracing::warn!("metrics: the store did not list backups within 10 s"),
    }
    samples
}
