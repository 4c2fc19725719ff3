//! `postgres.tables.example.cnpgi.io`: the PostgreSQL implementation of the
//! `DatabaseTable` example resource, a CNPG-I plugin on the declarative SDK.
//!
//! The resource is not a CloudNativePG Cluster: the plugin reads it through
//! the resource's own layout (`ImplementationLayout`, shared with the
//! operator; as it implements the layout's kind, the SDK has it stand in
//! for the preferred implementation when the host chose it instead), and
//! takes the whole spec as its input, with the
//! `PostgreSqlDatabaseTable` it references (sent by the host under
//! `cnpgi.io/references`; none: not partitioned). It says it implements
//! `tables.example.cnpgi.io` in its metadata manifest
//! (`cnpgi.io/implements`), so the host chooses it for a table preferring
//! an implementation that is not there. What it does, read in this order:
//!
//! * [`columns`]: at admission, every column checked (a lower-case
//!   identifier, an agnostic type, no duplicate; errors on
//!   `spec.columns[<i>].<field>`), the table's name and server fixed once
//!   created, the partition column a column of the table, and the defaults
//!   written (`deletionPolicy: Keep`, `nullable: false`);
//! * [`server`]: the server `spec.serverName` names (a CloudNativePG
//!   Cluster's `-rw` Service and `-app` Secret, or `--server-override`);
//! * [`sync`]: in its reconciler hook, the table in PostgreSQL made to match
//!   the spec and the partitioning ([`partitions`]; a change rebuilds the
//!   table in one transaction), extra columns dropped only when
//!   `dropExtraColumns` says so;
//! * the result, reported in the table's `status.plugins[]` entry, and the
//!   partitions (count, rows each) in the `PostgreSqlDatabaseTable`'s status
//!   (a `ReferenceReport`) and on `/metrics` ([`metrics`]);
//! * on deletion (`metadata.deletionTimestamp` set in the hook's object),
//!   the table dropped only with `deletionPolicy: Delete`, then `CONTINUE`.

#![forbid(unsafe_code)]

pub mod columns;
pub mod metrics;
pub mod partitions;
pub mod server;
pub mod sync;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use cnpgi_example_database_table::{
    API_VERSION, DeletionPolicy, IMPLEMENTATION_KIND, ImplementationLayout, PostgreSqlDatabaseTable,
};
use cnpgi_pluginhelper::{
    layout::IMPLEMENTS_MANIFEST_KEY,
    prelude::*,
    references::{REFERENCES_KEY, ReferenceReport, references_of},
    validation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use serde_json::{Value, json};

use crate::{metrics::Metrics, partitions::Partitioning, server::Servers};

/// The plugin name: its socket file name, and what tables write in `spec.preferredImplementation`.
pub const PLUGIN_NAME: &str = "postgres.tables.example.cnpgi.io";

/// What `GetPluginMetadata` answers: the manifest says it implements
/// `tables.example.cnpgi.io`.
pub fn metadata() -> GetPluginMetadataResponse {
    GetPluginMetadataResponse {
        name: PLUGIN_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        display_name: "DatabaseTable: PostgreSQL".into(),
        description: "Creates, partitions and alters PostgreSQL tables so that they match DatabaseTable resources"
            .into(),
        license: "Apache-2.0".into(),
        maturity: "alpha".into(),
        vendor: "cnpgi-rs".into(),
        manifest: HashMap::from([(IMPLEMENTS_MANIFEST_KEY.to_owned(), IMPLEMENTATION_KIND.to_owned())]),
        ..Default::default()
    }
}

/// What the plugin is run with: where servers are, and the metrics it keeps.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// The servers' addresses (`--server-override`).
    pub servers: Servers,
    /// The partitions' metrics (served by `--metrics-address`).
    pub metrics: Metrics,
}

/// What the hooks share.
#[derive(Clone)]
struct State {
    servers: Arc<Servers>,
    metrics: Metrics,
    reports: Reports,
}

/// The plugin.
pub fn plugin(config: Config) -> Plugin {
    let state = State {
        servers: Arc::new(config.servers),
        metrics: config.metrics,
        reports: Reports::default(),
    };
    let reported = state.reports.clone();
    Plugin::new(metadata())
        .layout(ImplementationLayout)
        .validate_create(|table, ()| validate(table, None))
        .validate_change(|old, (), new, ()| validate(new, Some(old)))
        .mutate_cluster(|_, (), table| {
            columns::defaults(table);
            Ok(())
        })
        // Called on every reconcile of a table routed to this plugin, and
        // when it is deleted.
        .reconciler_pre(ReconcilerKind::Cluster, move |call| {
            let state = state.clone();
            async move { reconcile(&state, call).await }
        })
        // What the last sync did, in the table's `status.plugins[]` entry;
        // the partitions, in its PostgreSqlDatabaseTable's status.
        .set_status(move |table| Ok(reported.status(&key(&table.metadata))))
}

/// Every error of a table at admission (of a change when `old` is given).
fn validate(table: &Cluster, old: Option<&Cluster>) -> Vec<ValidationError> {
    let decoded = |cluster: &Cluster| {
        cluster
            .to_json_value()
            .map_err(|e| vec![validation::error(["spec"], "", format!("not a DatabaseTable: {e}"))])
            .and_then(|value| {
                let table = columns::decode(&value)?;
                Ok((value, table))
            })
    };
    let (value, new) = match decoded(table) {
        Ok(decoded) => decoded,
        Err(errors) => return errors,
    };
    // The host sends no references at admission today; when a reference is
    // sent and readable, its partition column is checked too.
    let reference = partitioning_reference(&value).ok().flatten();
    let partitioning = reference.as_ref().map(|r| (&r.partitioning, r.field.as_str()));
    match old.map(decoded) {
        None => columns::validate(&new.spec, partitioning),
        Some(Ok((_, old))) => columns::validate_change(&old.spec, &new.spec, partitioning),
        Some(Err(errors)) => errors,
    }
}

/// The `PostgreSqlDatabaseTable` a table references: its partitioning, and
/// where the table names it.
#[derive(Debug, Clone, PartialEq)]
struct PartitioningReference {
    name: String,
    field: String,
    partitioning: Partitioning,
}

/// The `PostgreSqlDatabaseTable` among the references the table was sent
/// with (`None`: it references none, and is not partitioned); an error when
/// it is referenced and missing, or does not say a partitioning.
fn partitioning_reference(resource: &Value) -> Result<Option<PartitioningReference>, String> {
    let kind = PostgreSqlDatabaseTable::kind(&());
    let Some(reference) = references_of(resource)
        .into_iter()
        .find(|r| r.kind == kind && r.api_version == API_VERSION)
    else {
        return Ok(None);
    };
    let what = format!("{kind} {} ({})", reference.name, reference.field);
    let object = match (reference.object, reference.error) {
        (Some(object), _) => object,
        (None, error) => {
            return Err(format!(
                "{what}: {}; create it, or remove it from spec.references",
                error.unwrap_or_else(|| "not sent by the operator".to_owned())
            ));
        }
    };
    let object: PostgreSqlDatabaseTable =
        serde_json::from_value(object).map_err(|error| format!("{what} does not decode: {error}"))?;
    let partitioning =
        columns::partitioning(object.spec.partition_by.as_ref()).map_err(|error| format!("{what}: {error}"))?;
    Ok(Some(PartitioningReference {
        name: reference.name,
        field: reference.field,
        partitioning,
    }))
}

/// The reconciler hook: the table dropped (with `deletionPolicy: Delete`)
/// when it is being deleted, else made to match.
async fn reconcile(state: &State, call: ReconcilerCall<()>) -> Result<Hook, Status> {
    let deleted = call.is_being_deleted();
    let table = columns::decode(&call.object).map_err(|errors| {
        Status::invalid_argument(format!("not a valid DatabaseTable: {}", validation::describe(&errors)))
    })?;
    let namespace = table.metadata.namespace.clone().unwrap_or_default();
    let name = table.metadata.name.clone().unwrap_or_default();
    if deleted {
        if table.spec.deletion_policy == DeletionPolicy::Delete {
            let dropped = sync::drop_table(&state.servers, &table).await?;
            tracing::info!(%namespace, %name, table = %table.spec.name, dropped, "DatabaseTable deleted with deletionPolicy Delete");
        } else {
            tracing::info!(%namespace, %name, table = %table.spec.name, "DatabaseTable deleted; its table is kept (deletionPolicy Keep)");
        }
        state.reports.remove(&key(&table.metadata));
        state.metrics.forget(&namespace, &name);
        return Ok(Hook::Continue);
    }
    let reference = partitioning_reference(&call.object).map_err(sync::SyncError::Reference)?;
    let partitioning = reference.as_ref().map(|r| r.partitioning.clone()).unwrap_or_default();
    let errors = columns::validate(
        &table.spec,
        reference.as_ref().map(|r| (&r.partitioning, r.field.as_str())),
    );
    if !errors.is_empty() {
        return Err(sync::SyncError::Invalid(validation::describe(&errors)).into());
    }
    let report = sync::sync(&state.servers, &table, &partitioning).await?;
    state
        .metrics
        .record(&namespace, &name, &table.spec.name, &report.partitions, report.rows);
    state.reports.insert(
        key(&table.metadata),
        Stored {
            report,
            reference: reference.map(|r| r.name),
        },
    );
    Ok(Hook::Continue)
}

/// `namespace/name` of a table.
fn key(metadata: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        metadata.namespace.as_deref().unwrap_or_default(),
        metadata.name.as_deref().unwrap_or_default()
    )
}

/// A table's last sync, and the `PostgreSqlDatabaseTable` it applied.
#[derive(Debug, Clone)]
struct Stored {
    report: sync::Report,
    reference: Option<String>,
}

/// The last sync of each table, by `namespace/name`.
#[derive(Clone, Default)]
struct Reports(Arc<Mutex<HashMap<String, Stored>>>);

impl Reports {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Stored>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, key: String, stored: Stored) {
        self.lock().insert(key, stored);
    }

    fn remove(&self, key: &str) {
        self.lock().remove(key);
    }

    /// What `SetStatusInCluster` answers for table `key`: its last sync's
    /// report, with the partitions reported on its `PostgreSqlDatabaseTable`
    /// under `cnpgi.io/references`; nothing before a sync.
    fn status(&self, key: &str) -> Option<Value> {
        let stored = self.lock().get(key).cloned()?;
        Some(status(&stored))
    }
}

/// The status answer of a stored sync.
fn status(stored: &Stored) -> Value {
    let mut status = serde_json::to_value(&stored.report).unwrap_or_else(|_| json!({}));
    if let Some(name) = &stored.reference {
        let report = ReferenceReport {
            api_version: API_VERSION.to_owned(),
            kind: PostgreSqlDatabaseTable::kind(&()).into_owned(),
            name: name.clone(),
            status: serde_json::to_value(stored.report.partition_report()).unwrap_or_default(),
        };
        status[REFERENCES_KEY] = json!([report]);
    }
    status
}

#[cfg(test)]
mod tests {
    use cnpgi_pluginhelper::references::{ObjectReference, ResolvedReference, with_references};

    use super::*;

    fn reference(object: Option<Value>) -> ResolvedReference {
        let reference = ObjectReference {
            api_version: API_VERSION.into(),
            kind: "PostgreSqlDatabaseTable".into(),
            name: "users".into(),
            field: "spec.references[1]".into(),
        };
        match object {
            Some(object) => ResolvedReference::found(reference, object),
            None => ResolvedReference::missing(reference, "PostgreSqlDatabaseTable tables/users not found"),
        }
    }

    fn pg(partition_by: Value) -> Value {
        json!({"apiVersion": API_VERSION, "kind": "PostgreSqlDatabaseTable", "metadata": {"name": "users"},
               "spec": {"partitionBy": partition_by}})
    }

    #[test]
    fn the_manifest_says_what_it_implements() {
        let metadata = metadata();
        assert_eq!(metadata.manifest["cnpgi.io/implements"], "tables.example.cnpgi.io");
    }

    #[test]
    fn its_own_reference_is_read_and_the_others_ignored() {
        let table = json!({"spec": {}});
        assert_eq!(partitioning_reference(&table), Ok(None));
        let maria = ResolvedReference::found(
            ObjectReference {
                api_version: API_VERSION.into(),
                kind: "MariaDbDatabaseTable".into(),
                name: "users".into(),
                field: "spec.references[0]".into(),
            },
            json!({"spec": {"storageEngine": "Aria"}}),
        );
        let hash = pg(json!({"type": "hash", "column": "id", "partitions": 4}));
        let sent = with_references(&table, &[maria.clone(), reference(Some(hash))]);
        assert_eq!(
            partitioning_reference(&sent),
            Ok(Some(PartitioningReference {
                name: "users".into(),
                field: "spec.references[1]".into(),
                partitioning: Partitioning::Hash {
                    column: "id".into(),
                    partitions: 4
                },
            }))
        );
        // Only the MariaDB one: not partitioned.
        assert_eq!(partitioning_reference(&with_references(&table, &[maria])), Ok(None));
        // Missing: an error naming it and its field.
        let missing = partitioning_reference(&with_references(&table, &[reference(None)])).unwrap_err();
        assert!(
            missing.contains("PostgreSqlDatabaseTable users (spec.references[1])"),
            "{missing}"
        );
        assert!(missing.contains("not found"), "{missing}");
        // A hash partitioning without its count.
        let bad = with_references(&table, &[reference(Some(pg(json!({"type": "hash", "column": "id"}))))]);
        assert!(
            partitioning_reference(&bad)
                .unwrap_err()
                .contains("needs partitionBy.partitions")
        );
    }

    #[test]
    fn the_status_carries_the_partition_report_for_the_reference() {
        let report = sync::Report {
            generation: 3,
            table: "app.public.users".into(),
            partitions: vec![sync::PartitionRows {
                name: "users_default".into(),
                rows: 7,
            }],
            rows: 7,
            ..sync::Report::default()
        };
        let with = status(&Stored {
            report: report.clone(),
            reference: Some("users".into()),
        });
        assert_eq!(with["generation"], 3);
        let reports = &with[REFERENCES_KEY];
        assert_eq!(reports[0]["kind"], "PostgreSqlDatabaseTable");
        assert_eq!(reports[0]["status"]["partitionCount"], 1);
        assert_eq!(reports[0]["status"]["partitions"][0]["rows"], 7);
        let without = status(&Stored {
            report,
            reference: None,
        });
        assert!(without.get(REFERENCES_KEY).is_none());
    }
}
