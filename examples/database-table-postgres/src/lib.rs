//! `postgres.tables.example.cnpgi.io`: the PostgreSQL implementation of the
//! `DatabaseTable` example resource, a CNPG-I plugin on the declarative SDK.
//!
//! The resource is not a CloudNativePG Cluster: the plugin finds itself in
//! `spec.implementation` through the resource's own layout
//! ([`ImplementationLayout`], shared with the operator), and takes the whole
//! spec as its input. What it does, read in this order:
//!
//! * [`columns`]: at admission, every column checked (a lower-case
//!   identifier, a type it knows, no duplicate; errors on
//!   `spec.columns[<i>].<field>`), the table and its server fixed once
//!   created, and a missing type defaulted to `text`;
//! * [`sync`]: in its reconciler hook, the table in PostgreSQL made to match
//!   the spec (created; missing columns added, types and `NOT NULL` changed;
//!   extra columns dropped only when `dropExtraColumns` says so), with the
//!   credentials of the Secret the spec names ([`credentials`]);
//! * the result, reported in the resource's `status.plugins[]` entry.

#![forbid(unsafe_code)]

pub mod columns;
pub mod credentials;
pub mod sync;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use cnpgi_example_database_table::{DatabaseTable, ImplementationLayout};
use cnpgi_pluginhelper::prelude::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The plugin name: its socket file name, and what tables write in `spec.implementation`.
pub const PLUGIN_NAME: &str = "postgres.tables.example.cnpgi.io";

/// What `GetPluginMetadata` answers.
pub fn metadata() -> GetPluginMetadataResponse {
    GetPluginMetadataResponse {
        name: PLUGIN_NAME.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        display_name: "DatabaseTable: PostgreSQL".into(),
        description: "Creates and alters PostgreSQL tables so that they match DatabaseTable resources".into(),
        license: "Apache-2.0".into(),
        maturity: "alpha".into(),
        vendor: "cnpgi-rs".into(),
        ..Default::default()
    }
}

/// The plugin.
pub fn plugin() -> Plugin {
    let reports = Reports::default();
    let reported = reports.clone();
    Plugin::new(metadata())
        .layout(ImplementationLayout)
        .validate_create(|table, ()| match decode(table) {
            Ok(table) => columns::validate(&table.spec),
            Err(error) => vec![error],
        })
        .validate_change(|old, (), new, ()| match (decode(old), decode(new)) {
            (Ok(old), Ok(new)) => columns::validate_change(&old.spec, &new.spec),
            (_, Err(error)) | (Err(error), _) => vec![error],
        })
        .mutate_cluster(|_, (), table| {
            columns::default_types(table);
            Ok(())
        })
        // Called on every reconcile of a table naming this plugin.
        .reconciler_pre(ReconcilerKind::Cluster, move |call| {
            let reports = reports.clone();
            async move {
                let table: DatabaseTable = serde_json::from_value(call.object)
                    .map_err(|e| Status::invalid_argument(format!("not a DatabaseTable: {e}")))?;
                let report = sync::sync(&table).await?;
                reports.insert(key(&table.metadata), report);
                Ok(Hook::Continue)
            }
        })
        // What the last reconcile did, in the table's `status.plugins[]` entry.
        .set_status(move |table| Ok(reported.get(&key(&table.metadata)).unwrap_or_default()))
}

/// Decodes the resource a handler received as a `DatabaseTable`; one that
/// does not decode is refused on `spec` (the API server's schema makes
/// that rare).
fn decode(resource: &Cluster) -> Result<DatabaseTable, ValidationError> {
    let value = resource.to_json_value().map_err(invalid_spec)?;
    serde_json::from_value(value).map_err(invalid_spec)
}

fn invalid_spec(error: serde_json::Error) -> ValidationError {
    cnpgi_pluginhelper::validation::error(["spec"], "", format!("not a DatabaseTable: {error}"))
}

/// `namespace/name` of a table.
fn key(metadata: &ObjectMeta) -> String {
    format!(
        "{}/{}",
        metadata.namespace.as_deref().unwrap_or_default(),
        metadata.name.as_deref().unwrap_or_default()
    )
}

/// The last sync report of each table, by `namespace/name`.
#[derive(Clone, Default)]
struct Reports(Arc<Mutex<HashMap<String, sync::Report>>>);

impl Reports {
    fn insert(&self, key: String, report: sync::Report) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, report);
    }

    fn get(&self, key: &str) -> Option<sync::Report> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).get(key).cloned()
    }
}
