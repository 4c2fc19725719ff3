//! What the objects that use a plugin need of it, and whether it advertises it.
//!
//! Read with kube's dynamic API (the CRDs may be absent; an absent kind is
//! skipped), in every namespace:
//!
//! * a Cluster (`postgresql.cnpg.io/v1` or `cnpgi.io/v1`) enabling the plugin in
//!   `spec.plugins[]` uses it; with `isWALArchiver: true` it needs WAL with
//!   `TYPE_ARCHIVE_WAL`;
//! * a Cluster whose `spec.bootstrap.recovery.source` names an
//!   `spec.externalClusters[]` entry with `plugin.name` needs RestoreJobHooks
//!   (`KIND_RESTORE`) and WAL with `TYPE_RESTORE_WAL`; one whose
//!   `spec.replica.source` does (a replica cluster) needs `TYPE_RESTORE_WAL`;
//! * a Backup or ScheduledBackup (`postgresql.cnpg.io/v1`) with `method: plugin`
//!   naming it in `spec.pluginConfiguration.name` needs Backup (`TYPE_BACKUP`).
//!
//! The instance side (WAL, Backup, RestoreJobHooks) is called in the instance
//! Pods and the recovery Job, on the plugin's socket there. A plugin that
//! serves it from a sidecar it injects (it advertises
//! `TYPE_INSTANCE_SIDECAR_INJECTION`, as CloudNativePG's barman-cloud plugin
//! does) need not advertise it on its Service: an unmet need is then a note,
//! not an error, since the doctor cannot reach that sidecar.

use std::time::Duration;

use cnpgi_client::probe::PluginInfo;
use cnpgi_core::capabilities::{BackupRpc, RestoreJobKind, ServiceType, WalRpc};
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, ListParams},
};
use serde_json::Value;

use super::finding::{Finding, Object};

/// What a use of the plugin needs of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Need {
    /// Only that it is there (it is enabled).
    Enabled,
    /// WAL with `TYPE_ARCHIVE_WAL`.
    ArchiveWal,
    /// WAL with `TYPE_RESTORE_WAL`.
    RestoreWal,
    /// RestoreJobHooks with `KIND_RESTORE`.
    RestoreJob,
    /// Backup with `TYPE_BACKUP`.
    Backup,
}

impl Need {
    /// What it needs, in the plugin's own terms.
    fn what(self) -> &'static str {
        match self {
            Self::Enabled => "nothing in particular",
            Self::ArchiveWal => "WAL archiving (the WAL service with TYPE_ARCHIVE_WAL)",
            Self::RestoreWal => "WAL restoring (the WAL service with TYPE_RESTORE_WAL)",
            Self::RestoreJob => "restoring a base backup (the RestoreJobHooks service with KIND_RESTORE)",
            Self::Backup => "base backups (the Backup service with TYPE_BACKUP)",
        }
    }

    /// Whether the probed plugin advertises it.
    pub(crate) fn met_by(self, info: &PluginInfo) -> bool {
        match self {
            Self::Enabled => true,
            Self::ArchiveWal => info.wal_rpcs.contains(&WalRpc::ArchiveWal),
            Self::RestoreWal => info.wal_rpcs.contains(&WalRpc::RestoreWal),
            Self::RestoreJob => info.restore_job_kinds.contains(&RestoreJobKind::Restore),
            Self::Backup => info.backup_rpcs.contains(&BackupRpc::Backup),
        }
    }
}

/// One object using a plugin, and what for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Use {
    /// The plugin name.
    pub(crate) plugin: String,
    /// The object.
    pub(crate) object: Object,
    /// The field that makes it need this.
    pub(crate) field: String,
    /// What it needs.
    pub(crate) need: Need,
}

/// The kinds read, as `(group, version, kind)`.
pub(crate) const KINDS: [(&str, &str, &str); 4] = [
    ("postgresql.cnpg.io", "v1", "Cluster"),
    ("cnpgi.io", "v1", "Cluster"),
    ("postgresql.cnpg.io", "v1", "Backup"),
    ("postgresql.cnpg.io", "v1", "ScheduledBackup"),
];

/// The uses of every plugin by one object of `kind` (`group`), as JSON.
pub(crate) fn uses(group: &str, kind: &str, object: &Value) -> Vec<Use> {
    let meta = &object["metadata"];
    let at = Object::new(
        format!("{kind}.{group}"),
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default(),
    );
    let spec = &object["spec"];
    let mut found = Vec::new();
    let mut add = |plugin: &str, field: String, need: Need| {
        found.push(Use {
            plugin: plugin.to_owned(),
            object: at.clone(),
            field,
            need,
        });
    };
    if kind == "Cluster" {
        for (i, entry) in spec["plugins"].as_array().into_iter().flatten().enumerate() {
            let (Some(name), enabled) = (entry["name"].as_str(), entry["enabled"].as_bool().unwrap_or(true)) else {
                continue;
            };
            if !enabled {
                continue;
            }
            add(name, format!("spec.plugins[{i}].name"), Need::Enabled);
            if entry["isWALArchiver"].as_bool() == Some(true) {
                add(name, format!("spec.plugins[{i}].isWALArchiver"), Need::ArchiveWal);
            }
        }
        let external = |source: &str| {
            spec["externalClusters"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
                .find(|(_, e)| e["name"].as_str() == Some(source))
                .and_then(|(j, e)| {
                    let plugin = &e["plugin"];
                    let enabled = plugin["enabled"].as_bool().unwrap_or(true);
                    plugin["name"]
                        .as_str()
                        .filter(|_| enabled)
                        .map(|name| (j, name.to_owned()))
                })
        };
        if let Some((j, name)) = spec["bootstrap"]["recovery"]["source"].as_str().and_then(external) {
            let field = format!("spec.externalClusters[{j}].plugin.name");
            add(&name, field.clone(), Need::RestoreJob);
            add(&name, field, Need::RestoreWal);
        }
        let replica = &spec["replica"];
        if replica["enabled"].as_bool() != Some(false)
            && let Some((j, name)) = replica["source"].as_str().and_then(external)
        {
            add(
                &name,
                format!("spec.externalClusters[{j}].plugin.name"),
                Need::RestoreWal,
            );
        }
    } else if spec["method"].as_str() == Some("plugin")
        && let Some(name) = spec["pluginConfiguration"]["name"].as_str()
    {
        add(name, "spec.pluginConfiguration.name".to_owned(), Need::Backup);
    }
    found
}

/// Lists every kind of [`KINDS`] in all namespaces, each within `timeout`:
/// the uses found, and notes for kinds that could not be read (an absent
/// CRD is no note: that operator is simply not installed).
pub(crate) async fn list_uses(client: &Client, timeout: Duration) -> (Vec<Use>, Vec<Finding>) {
    let mut found = Vec::new();
    let mut notes = Vec::new();
    for (group, version, kind) in KINDS {
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let listed = tokio::time::timeout(timeout, api.list(&ListParams::default())).await;
        let error = match listed {
            Ok(Ok(list)) => {
                for object in list.items {
                    match serde_json::to_value(&object) {
                        Ok(value) => found.extend(uses(group, kind, &value)),
                        Err(error) => tracing::debug!(%error, "cannot re-encode a {kind}"),
                    }
                }
                continue;
            }
            Ok(Err(kube::Error::Api(status))) if status.code == 404 => continue,
            Ok(Err(error)) => error.to_string(),
            Err(_) => format!("no answer within {} s", timeout.as_secs()),
        };
        notes.push(
            Finding::error(
                "clusters.list",
                Object {
                    kind: format!("{kind}.{group}"),
                    namespace: None,
                    name: "*".into(),
                },
                None,
                format!("cannot list them ({error}): what they need of the plugins is not checked"),
                format!("allow the doctor to list {}s ({group})", kind.to_lowercase()),
            )
            .note(),
        );
    }
    (found, notes)
}

/// Findings for the uses of `plugin` its advertised capabilities do not
/// meet; `service` is the plugin's Service (`namespace/name`).
pub(crate) fn unmet(uses: &[Use], plugin: &str, service: &str, info: &PluginInfo) -> Vec<Finding> {
    let sidecar = info.has_service(ServiceType::InstanceSidecarInjection)
        || info.has_service(ServiceType::InstanceJobSidecarInjection);
    let advertised = if info.services.is_empty() {
        "no service".to_owned()
    } else {
        info.service_names().join(", ")
    };
    uses.iter()
        .filter(|u| u.plugin == plugin && !u.need.met_by(info))
        .map(|u| {
            let finding = Finding::error(
                "clusters.need",
                u.object.clone(),
                Some(&u.field),
                format!(
                    "needs {} of the plugin {plugin}, which its Service {service} does not advertise (it advertises {advertised})",
                    u.need.what()
                ),
                "deploy a version of the plugin that does, or use another plugin for it here".to_owned(),
            )
            .for_plugin(plugin);
            if sidecar {
                Finding {
                    problem: format!(
                        "{}; the plugin injects a sidecar (TYPE_INSTANCE_SIDECAR_INJECTION) which may serve it in the instance Pods, where the doctor cannot reach",
                        finding.problem
                    ),
                    fix: "check the sidecar's capabilities in an instance Pod (cnpgi-operator check-plugin --plugin-dir)".into(),
                    ..finding
                }
                .note()
            } else {
                finding
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_wal_archiver_a_recovery_a_replica_and_a_backup_each_need_their_service() {
        let cluster = json!({
            "metadata": {"name": "pg", "namespace": "db"},
            "spec": {
                "plugins": [{"name": "hello"}, {"name": "wal", "isWALArchiver": true}, {"name": "off", "enabled": false, "isWALArchiver": true}],
                "bootstrap": {"recovery": {"source": "origin"}},
                "replica": {"source": "origin"},
                "externalClusters": [{"name": "other"}, {"name": "origin", "plugin": {"name": "store"}}],
            },
        });
        let found = uses("postgresql.cnpg.io", "Cluster", &cluster);
        let summary: Vec<(&str, &str, Need)> = found
            .iter()
            .map(|u| (u.plugin.as_str(), u.field.as_str(), u.need))
            .collect();
        assert_eq!(
            summary,
            [
                ("hello", "spec.plugins[0].name", Need::Enabled),
                ("wal", "spec.plugins[1].name", Need::Enabled),
                ("wal", "spec.plugins[1].isWALArchiver", Need::ArchiveWal),
                ("store", "spec.externalClusters[1].plugin.name", Need::RestoreJob),
                ("store", "spec.externalClusters[1].plugin.name", Need::RestoreWal),
                ("store", "spec.externalClusters[1].plugin.name", Need::RestoreWal),
            ]
        );
        assert_eq!(found[0].object.to_string(), "Cluster.postgresql.cnpg.io/db/pg");
        let backup = json!({"metadata": {"name": "b", "namespace": "db"}, "spec": {"method": "plugin", "pluginConfiguration": {"name": "wal"}}});
        assert_eq!(
            uses("postgresql.cnpg.io", "ScheduledBackup", &backup)[0].need,
            Need::Backup
        );
        let barman = json!({"metadata": {"name": "b", "namespace": "db"}, "spec": {"method": "barmanObjectStore"}});
        assert_eq!(uses("postgresql.cnpg.io", "Backup", &barman), []);
    }

    #[test]
    fn an_unmet_need_is_an_error_naming_the_field_unless_a_sidecar_may_serve_it() {
        let cluster = json!({"metadata": {"name": "pg", "namespace": "db"}, "spec": {"plugins": [{"name": "hello", "isWALArchiver": true}]}});
        let found = uses("cnpgi.io", "Cluster", &cluster);
        let mut info = PluginInfo {
            services: vec![ServiceType::LifecycleService],
            ..PluginInfo::default()
        };
        let findings = unmet(&found, "hello", "cnpgi-system/hello", &info);
        assert_eq!(findings.len(), 1);
        let line = findings[0].to_string();
        assert!(
            line.starts_with("error   Cluster.cnpgi.io/db/pg spec.plugins[0].isWALArchiver: needs WAL archiving"),
            "{line}"
        );
        assert!(line.contains("TYPE_LIFECYCLE_SERVICE"), "{line}");
        info.services.push(ServiceType::InstanceSidecarInjection);
        assert_eq!(
            unmet(&found, "hello", "s", &info)[0].severity,
            super::super::finding::Severity::Note
        );
        info.services.push(ServiceType::WalService);
        info.wal_rpcs = vec![WalRpc::ArchiveWal];
        assert_eq!(unmet(&found, "hello", "s", &info), []);
    }
}
