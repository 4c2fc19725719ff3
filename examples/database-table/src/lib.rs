//! The `DatabaseTable` custom resource (`example.cnpgi.io/v1`): a table on a
//! database server, implemented by a CNPG-I plugin named in
//! `spec.implementation` and checked by the plugins in `spec.policies`, and
//! where its plugins are found ([`ImplementationLayout`], a
//! [`PluginLayout`] that is not CloudNativePG's).
//!
//! This is the API both sides import: the operator (feature `host`, the
//! default) and the plugins (`default-features = false`: the types and the
//! layout, no host).
//!
//! ```
//! use cnpgi_core::layout::PluginLayout;
//! use cnpgi_example_database_table::{Column, DatabaseServer, DatabaseTable, DatabaseTableSpec, ImplementationLayout};
//!
//! let table = DatabaseTable::new("users", DatabaseTableSpec {
//!     table: "users".into(),
//!     columns: vec![Column { name: "id".into(), column_type: "bigint".into(), nullable: false }],
//!     server: DatabaseServer { host: "pg".into(), port: None, database: "app".into(), credentials_secret: "pg-app".into() },
//!     implementation: "postgres.tables.example.cnpgi.io".into(),
//!     policies: vec!["naming.tables.example.cnpgi.io".into()],
//!     drop_extra_columns: false,
//! });
//! let json = serde_json::to_value(&table)?;
//! let enabled: Vec<_> = ImplementationLayout.enabled_plugins(&json).into_iter().map(|p| p.name).collect();
//! assert_eq!(enabled, ["naming.tables.example.cnpgi.io", "postgres.tables.example.cnpgi.io"]);
//! # Ok::<(), serde_json::Error>(())
//! ```

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};

use cnpgi_core::{cluster::EnabledPlugin, layout::PluginLayout, status::PluginStatusUpdate};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// A table: its name, columns and server, and the plugin implementing it.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.cnpgi.io",
    version = "v1",
    kind = "DatabaseTable",
    namespaced,
    status = "DatabaseTableStatus",
    shortname = "dbt",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseTableSpec {
    /// The table's name in the database.
    pub table: String,
    /// Its columns, in order.
    pub columns: Vec<Column>,
    /// Where the table lives.
    pub server: DatabaseServer,
    /// The CNPG-I plugin implementing the table (its name, e.g. `postgres.tables.example.cnpgi.io`).
    pub implementation: String,
    /// Plugins that only check the table at admission (e.g. naming rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// Whether columns the database has and the spec does not list are dropped.
    #[serde(default)]
    pub drop_extra_columns: bool,
}

/// A column.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Column {
    /// Its name.
    pub name: String,
    /// Its type, in the server's own words (`bigint`, `text`, `varchar(20)`...).
    #[serde(rename = "type", default)]
    pub column_type: String,
    /// Whether it may be NULL.
    #[serde(default)]
    pub nullable: bool,
}

/// A database server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseServer {
    /// Host name (e.g. a Service's).
    pub host: String,
    /// Port (PostgreSQL's 5432 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Database name.
    pub database: String,
    /// The Secret holding `username` and `password`, in the resource's namespace.
    pub credentials_secret: String,
}

/// What the operator and the implementing plugin observed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseTableStatus {
    /// The generation last reconciled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why, in a sentence (the plugin's error, a missing plugin...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// One entry per plugin: what it is, and what it reported.
    #[serde(default)]
    pub plugins: Vec<PluginEntry>,
}

/// A plugin's entry in the status.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginEntry {
    /// Its name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The services it advertises.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// What it reported (a JSON object, as text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// `spec.implementation` and `spec.policies[]` are the plugins (index 0 and
/// 1 + the policy's index; no parameters: the spec is their input); entries
/// in `status.plugins[]`; field paths as plugins write them
/// (`spec.columns[1].type`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ImplementationLayout;

impl PluginLayout for ImplementationLayout {
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
        let implementation = resource.pointer("/spec/implementation").into_iter();
        let policies = resource.pointer("/spec/policies").and_then(Value::as_array);
        let names = implementation.chain(policies.into_iter().flatten());
        // CNPG-I's routing order: de-duplicated by name (first wins), sorted by name.
        let mut seen = BTreeSet::new();
        let mut enabled: Vec<EnabledPlugin> = names
            .enumerate()
            .filter_map(|(index, name)| Some((index, name.as_str().filter(|name| !name.is_empty())?)))
            .filter(|(_, name)| seen.insert(*name))
            .map(|(index, name)| EnabledPlugin {
                index,
                name: name.to_owned(),
            })
            .collect();
        enabled.sort_by(|a, b| a.name.cmp(&b.name));
        enabled
    }

    fn previous_statuses(&self, resource: &Value) -> BTreeMap<String, String> {
        let entries = resource.pointer("/status/plugins").and_then(Value::as_array);
        entries
            .into_iter()
            .flatten()
            .filter_map(|entry| Some((entry["name"].as_str()?.to_owned(), entry["status"].as_str()?.to_owned())))
            .collect()
    }

    fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]) {
        let entries: Vec<Value> = entries
            .iter()
            .map(|entry| {
                json!(PluginEntry {
                    name: entry.name.clone(),
                    version: entry.version.clone(),
                    capabilities: entry.capabilities.clone(),
                    status: entry.status.clone(),
                })
            })
            .collect();
        let Some(root) = resource.as_object_mut() else { return };
        let status = root.entry("status").or_insert_with(|| json!({}));
        if !status.is_object() {
            *status = json!({});
        }
        status["plugins"] = Value::Array(entries);
    }
}

#[cfg(feature = "host")]
impl cnpgi_host::PluginResource for DatabaseTable {
    fn layout() -> std::sync::Arc<dyn PluginLayout> {
        std::sync::Arc::new(ImplementationLayout)
    }
}
