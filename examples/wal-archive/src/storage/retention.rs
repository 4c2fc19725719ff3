//! The backups in a store, and retention: keeping the `keepBackups` newest
//! and the WAL they need.

use cnpgi_pluginhelper::lowlevel::WalFileName;

use crate::storage::manifest::{self, Manifest};
use crate::storage::store::{Store, StoreError};

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
