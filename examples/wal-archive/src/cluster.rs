//! What this plugin reads from a CloudNativePG `Cluster` besides its own
//! `spec.plugins[]` entry: the recovery bootstrap (`spec.bootstrap.recovery`:
//! its `source` and `recoveryTarget`), the external clusters it names, the
//! current primary, and the annotation that skips the empty-archive check.
//! Field names are CloudNativePG's (`api/v1/cluster_types.go`).

use std::collections::BTreeMap;

use cnpgi_pluginhelper::cluster::Cluster;
use serde::Deserialize;
use serde_json::Value;

/// CloudNativePG's annotation that disables the empty-archive check.
pub const SKIP_EMPTY_WAL_ARCHIVE_CHECK: &str = "cnpg.io/skipEmptyWalArchiveCheck";

/// `spec.bootstrap.recovery.recoveryTarget`, as CloudNativePG names it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecoveryTarget {
    /// `backupID`: restore this backup.
    #[serde(rename = "backupID", default)]
    pub backup_id: String,
    /// `targetTLI`: `recovery_target_timeline`.
    #[serde(rename = "targetTLI", default)]
    pub target_tli: String,
    /// `targetXID`: `recovery_target_xid`.
    #[serde(rename = "targetXID", default)]
    pub target_xid: String,
    /// `targetName`: `recovery_target_name` (a restore point).
    #[serde(default)]
    pub target_name: String,
    /// `targetLSN`: `recovery_target_lsn`.
    #[serde(rename = "targetLSN", default)]
    pub target_lsn: String,
    /// `targetTime`: `recovery_target_time` (RFC 3339 or PostgreSQL's format).
    #[serde(default)]
    pub target_time: String,
    /// `targetImmediate`: stop as soon as the backup is consistent.
    #[serde(default)]
    pub target_immediate: Option<bool>,
    /// `exclusive`: stop just before the target rather than just after.
    #[serde(default)]
    pub exclusive: Option<bool>,
}

/// `spec.plugins[]`-like configuration of an external cluster's `plugin`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct ExternalPlugin {
    /// The plugin name.
    #[serde(default)]
    pub name: String,
    /// Its parameters.
    #[serde(default)]
    pub parameters: BTreeMap<String, String>,
}

/// One entry of `spec.externalClusters[]` using a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalCluster {
    /// Index in `spec.externalClusters`, for validation error paths.
    pub index: usize,
    /// `name`: what `bootstrap.recovery.source` refers to.
    pub name: String,
    /// `plugin`.
    pub plugin: ExternalPlugin,
}

/// Lenient typed access to the fields listed in the module documentation.
#[derive(Debug, Clone)]
pub struct ClusterView<'a> {
    cluster: &'a Cluster,
}

impl<'a> ClusterView<'a> {
    /// A view of `cluster`.
    pub fn new(cluster: &'a Cluster) -> Self {
        Self { cluster }
    }

    /// `metadata.name` (empty when missing).
    pub fn name(&self) -> &str {
        self.cluster.metadata.name.as_deref().unwrap_or_default()
    }

    /// `status.currentPrimary` (empty when missing).
    pub fn current_primary(&self) -> &str {
        self.cluster
            .status
            .other
            .get("currentPrimary")
            .and_then(Value::as_str)
            .unwrap_or_default()
    }

    /// Whether the annotation [`SKIP_EMPTY_WAL_ARCHIVE_CHECK`] is `enabled`.
    pub fn skips_empty_archive_check(&self) -> bool {
        self.cluster
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(SKIP_EMPTY_WAL_ARCHIVE_CHECK))
            .is_some_and(|v| v == "enabled")
    }

    fn recovery(&self) -> Option<&'a Value> {
        self.cluster
            .spec
            .other
            .get("bootstrap")
            .and_then(|b| b.get("recovery"))
            .filter(|r| r.is_object())
    }

    /// `spec.bootstrap.recovery.source`, when set.
    pub fn recovery_source(&self) -> Option<&'a str> {
        self.recovery()
            .and_then(|r| r.get("source"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }

    /// `spec.bootstrap.recovery.recoveryTarget` (all fields empty when absent).
    ///
    /// # Errors
    ///
    /// The `serde_json` error when the target has fields of the wrong type.
    pub fn recovery_target(&self) -> Result<RecoveryTarget, serde_json::Error> {
        match self.recovery().and_then(|r| r.get("recoveryTarget")) {
            None | Some(Value::Null) => Ok(RecoveryTarget::default()),
            Some(target) => RecoveryTarget::deserialize(target),
        }
    }

    /// Every `spec.externalClusters[]` entry whose `plugin` is `plugin_name`.
    pub fn external_clusters_using(&self, plugin_name: &str) -> Vec<ExternalCluster> {
        let Some(list) = self
            .cluster
            .spec
            .other
            .get("externalClusters")
            .and_then(Value::as_array)
        else {
            return Vec::new();
        };
        list.iter()
            .enumerate()
            .filter_map(|(index, entry)| {
                let plugin = ExternalPlugin::deserialize(entry.get("plugin")?).ok()?;
                (plugin.name == plugin_name).then(|| ExternalCluster {
                    index,
                    name: entry.get("name").and_then(Value::as_str).unwrap_or_default().to_owned(),
                    plugin,
                })
            })
            .collect()
    }

    /// The external cluster `bootstrap.recovery.source` names, when it uses
    /// the plugin `plugin_name` (CloudNativePG's `GetRecoverySourcePlugin`).
    pub fn recovery_source_using(&self, plugin_name: &str) -> Option<ExternalCluster> {
        let source = self.recovery_source()?;
        self.external_clusters_using(plugin_name)
            .into_iter()
            .find(|external| external.name == source)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnpgi_pluginhelper::cluster::decode_cluster;

    #[test]
    fn reads_the_recovery_bootstrap() {
        let cluster = decode_cluster(
            br#"{"metadata": {"name": "pg2", "annotations": {"cnpg.io/skipEmptyWalArchiveCheck": "enabled"}},
                 "spec": {
                   "bootstrap": {"recovery": {"source": "origin",
                     "recoveryTarget": {"targetTime": "2026-01-02 03:04:05+00", "backupID": "x", "exclusive": true}}},
                   "externalClusters": [
                     {"name": "other", "plugin": {"name": "else.example.com"}},
                     {"name": "origin", "plugin": {"name": "wal-archive.cnpgi.io", "parameters": {"serverName": "pg1"}}}
                   ]},
                 "status": {"currentPrimary": ""}}"#,
        )
        .unwrap();
        let view = ClusterView::new(&cluster);
        assert_eq!(view.name(), "pg2");
        assert!(view.skips_empty_archive_check());
        assert_eq!(view.current_primary(), "");
        let target = view.recovery_target().unwrap();
        assert_eq!(target.target_time, "2026-01-02 03:04:05+00");
        assert_eq!(target.backup_id, "x");
        assert_eq!(target.exclusive, Some(true));
        let source = view.recovery_source_using("wal-archive.cnpgi.io").unwrap();
        assert_eq!((source.index, source.name.as_str()), (1, "origin"));
        assert_eq!(source.plugin.parameters["serverName"], "pg1");
        assert!(view.recovery_source_using("else.example.com").is_none());
    }

    #[test]
    fn absent_fields_are_empty() {
        let cluster = decode_cluster(br#"{"spec": {"bootstrap": {"initdb": {}}}}"#).unwrap();
        let view = ClusterView::new(&cluster);
        assert_eq!(view.recovery_source(), None);
        assert_eq!(view.recovery_target().unwrap(), RecoveryTarget::default());
        assert!(!view.skips_empty_archive_check());
        assert!(view.external_clusters_using("wal-archive.cnpgi.io").is_empty());
    }
}
