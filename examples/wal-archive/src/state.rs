//! What the services share: open stores, and the facts the metrics report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use crate::storage::store::{Store, StoreConfig, StoreError};

/// Facts about this process's work since it started.
#[derive(Debug, Clone, Default)]
pub struct Activity {
    /// WAL files archived (or found already archived with the same content).
    pub archived: u64,
    /// `Archive` calls that failed.
    pub archive_failures: u64,
    /// The last WAL file archived and when.
    pub last_archived: Option<(String, SystemTime)>,
    /// When the last `Archive` failure happened.
    pub last_failure: Option<SystemTime>,
    /// WAL files restored.
    pub restored: u64,
    /// Backups completed, and the end time of the last one.
    pub backups: u64,
    /// Backups that failed.
    pub backup_failures: u64,
}

/// The plugin's shared state. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct State {
    stores: Arc<Mutex<HashMap<StoreConfig, Store>>>,
    activity: Arc<Mutex<Activity>>,
}

/// A poisoned lock only means another call panicked while holding it; the
/// data (counters, a cache) stays usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl State {
    /// Fresh state.
    pub fn new() -> Self {
        Self::default()
    }

    /// The store for `config`, opened once and then reused.
    ///
    /// # Errors
    ///
    /// [`StoreError::Open`] when it cannot be opened.
    pub fn store(&self, config: &StoreConfig) -> Result<Store, StoreError> {
        if let Some(store) = lock(&self.stores).get(config) {
            return Ok(store.clone());
        }
        let store = Store::open(config)?;
        lock(&self.stores).insert(config.clone(), store.clone());
        Ok(store)
    }

    /// Updates the activity.
    pub fn record(&self, update: impl FnOnce(&mut Activity)) {
        update(&mut lock(&self.activity));
    }

    /// A copy of the activity.
    pub fn activity(&self) -> Activity {
        lock(&self.activity).clone()
    }
}
