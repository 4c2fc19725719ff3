//! The DatabaseTable example's API (`example.cnpgi.io/v1`): a
//! database-agnostic [`DatabaseTable`], implemented by one CNPG-I plugin
//! among several (the one it prefers, [`DatabaseTableSpec::preferred_implementation`],
//! or another implementing the same kind when that one is not there) and
//! checked by the plugins in `spec.policies`; the implementation-specific
//! settings it references ([`PostgreSqlDatabaseTable`]'s partitions,
//! [`MariaDbDatabaseTable`]'s storage engine); and where its plugins and
//! references are found ([`ImplementationLayout`], a [`PluginLayout`] that
//! is not CloudNativePG's).
//!
//! This is the API both sides import: the operator (feature `host`, the
//! default) and the plugins (`default-features = false`: the types and the
//! layout, no host).
//!
//! ```
//! use cnpgi_core::layout::PluginLayout;
//! use cnpgi_example_database_table::{
//!     Column, ColumnType, DatabaseTable, DatabaseTableSpec, ImplementationLayout, TableReference,
//! };
//!
//! let table = DatabaseTable::new("users", DatabaseTableSpec {
//!     name: "users".into(),
//!     server_name: "app-db".into(),
//!     preferred_implementation: "mariadb.tables.example.cnpgi.io".into(),
//!     policies: vec!["naming.tables.example.cnpgi.io".into()],
//!     columns: vec![Column { name: "id".into(), column_type: ColumnType::Uint64, nullable: false }],
//!     references: vec![TableReference::new("PostgreSqlDatabaseTable", "users")],
//!     deletion_policy: Default::default(),
//!     drop_extra_columns: false,
//! });
//! let json = serde_json::to_value(&table)?;
//! assert_eq!(json["spec"]["columns"][0]["type"], "uint64");
//! let enabled: Vec<_> = ImplementationLayout.enabled_plugins(&json).into_iter().map(|p| p.name).collect();
//! assert_eq!(enabled, ["mariadb.tables.example.cnpgi.io", "naming.tables.example.cnpgi.io"]);
//! let references = ImplementationLayout.references(&json);
//! assert_eq!((references[0].kind.as_str(), references[0].field.as_str()), ("PostgreSqlDatabaseTable", "spec.references[0]"));
//! # Ok::<(), serde_json::Error>(())
//! ```

#![forbid(unsafe_code)]

use std::collections::{BTreeMap, BTreeSet};

use cnpgi_core::{
    cluster::EnabledPlugin,
    layout::{ImplementationChoice, PluginLayout},
    references::ObjectReference,
    status::PluginStatusUpdate,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The API group and version of the example's resources.
pub const API_VERSION: &str = "example.cnpgi.io/v1";

/// The kind of implementation DatabaseTable plugins declare in their
/// metadata manifest (`cnpgi.io/implements: tables.example.cnpgi.io`).
pub const IMPLEMENTATION_KIND: &str = "tables.example.cnpgi.io";

/// A table, whatever the database: its name, its server, its columns in the
/// resource's own types, and which implementation it prefers.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.cnpgi.io",
    version = "v1",
    kind = "DatabaseTable",
    namespaced,
    status = "DatabaseTableStatus",
    shortname = "dbt",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Implementation","type":"string","jsonPath":".status.implementationChoice.chosen"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct DatabaseTableSpec {
    /// The table's name in the database (fixed once created).
    pub name: String,
    /// The server in the cluster, in the resource's namespace (fixed once
    /// created): for PostgreSQL a CloudNativePG Cluster of this name (its
    /// `<serverName>-rw` Service and `<serverName>-app` Secret), for MariaDB
    /// a Service of this name and the Secret `<serverName>-app`.
    pub server_name: String,
    /// The implementation preferred (a plugin name, e.g.
    /// `postgres.tables.example.cnpgi.io`); another implementing
    /// `tables.example.cnpgi.io` is chosen when it is not available, and the
    /// choice is recorded in `status.implementationChoice`.
    pub preferred_implementation: String,
    /// Plugins that only check the table at admission (e.g. naming rules).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<String>,
    /// Its columns, in order.
    pub columns: Vec<Column>,
    /// Implementation-specific settings: objects of the table's namespace
    /// (`PostgreSqlDatabaseTable`, `MariaDbDatabaseTable`); each
    /// implementation reads the one of its kind and ignores the others.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<TableReference>,
    /// What happens to the table in the database when the resource is
    /// deleted: `Keep` (the default) or `Delete` (dropped).
    #[serde(default)]
    pub deletion_policy: DeletionPolicy,
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
    /// Its type, in the resource's own words; each implementation maps it to its server's.
    #[serde(rename = "type")]
    pub column_type: ColumnType,
    /// Whether it may be NULL.
    #[serde(default)]
    pub nullable: bool,
}

/// A column's database-agnostic type.
///
/// | type        | PostgreSQL                 | MariaDB           |
/// |-------------|----------------------------|-------------------|
/// | `int32`     | `integer`                  | `INT`             |
/// | `int64`     | `bigint`                   | `BIGINT`          |
/// | `uint64`    | `numeric(20,0)`            | `BIGINT UNSIGNED` |
/// | `string`    | `varchar(255)`             | `VARCHAR(255)`    |
/// | `text`      | `text`                     | `TEXT`            |
/// | `bool`      | `boolean`                  | `BOOLEAN`         |
/// | `timestamp` | `timestamp with time zone` | `DATETIME(6)`     |
/// | `float64`   | `double precision`         | `DOUBLE`          |
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    /// A 32-bit signed integer.
    Int32,
    /// A 64-bit signed integer.
    Int64,
    /// A 64-bit unsigned integer.
    Uint64,
    /// A short string (up to 255 characters).
    String,
    /// A string of any length.
    Text,
    /// True or false.
    Bool,
    /// An instant (with time zone where the server has one).
    Timestamp,
    /// A 64-bit floating-point number.
    Float64,
}

impl ColumnType {
    /// Every type, in the order of the table above.
    pub const ALL: [ColumnType; 8] = [
        Self::Int32,
        Self::Int64,
        Self::Uint64,
        Self::String,
        Self::Text,
        Self::Bool,
        Self::Timestamp,
        Self::Float64,
    ];

    /// Its name, as written in `spec.columns[i].type`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Int32 => "int32",
            Self::Int64 => "int64",
            Self::Uint64 => "uint64",
            Self::String => "string",
            Self::Text => "text",
            Self::Bool => "bool",
            Self::Timestamp => "timestamp",
            Self::Float64 => "float64",
        }
    }

    /// The type named `name`, if there is one.
    ///
    /// ```
    /// use cnpgi_example_database_table::ColumnType;
    ///
    /// assert_eq!(ColumnType::from_name("uint64"), Some(ColumnType::Uint64));
    /// assert_eq!(ColumnType::from_name("bigint"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.as_str() == name)
    }
}

impl std::fmt::Display for ColumnType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A reference to an implementation-specific object of the table's namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TableReference {
    /// Its `apiVersion`, e.g. `example.cnpgi.io/v1`.
    pub api_version: String,
    /// Its kind, e.g. `PostgreSqlDatabaseTable`.
    pub kind: String,
    /// Its name.
    pub name: String,
}

impl TableReference {
    /// A reference to the `example.cnpgi.io/v1` object `kind`/`name`.
    pub fn new(kind: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            api_version: API_VERSION.to_owned(),
            kind: kind.into(),
            name: name.into(),
        }
    }
}

/// What happens to the table in the database when its resource is deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum DeletionPolicy {
    /// The table stays in the database (unmanaged).
    #[default]
    Keep,
    /// The table is dropped.
    Delete,
}

/// What the operator and the plugins observed.
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
    /// The implementation routed to, and why (written by the host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implementation_choice: Option<ImplementationChoiceStatus>,
    /// Conditions: `ReferencesResolved` (written by the host).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// One entry per plugin: what it is, and what it reported.
    #[serde(default)]
    pub plugins: Vec<PluginEntry>,
}

/// The implementation chosen for a table (`cnpgi_host::choice::ImplementationDecision`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImplementationChoiceStatus {
    /// The kind of implementation (`tables.example.cnpgi.io`).
    pub kind: String,
    /// The plugin the table prefers.
    pub preferred: String,
    /// The plugin routed to; absent when no implementation is ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chosen: Option<String>,
    /// Why: `PreferredReady`, `PreferredUnavailable` or `NoImplementationReady`.
    pub reason: String,
    /// Why, in words.
    pub message: String,
    /// The annotation `cnpgi.io/reselect-implementation` when the choice was made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reselect: Option<String>,
    /// Why the chosen plugin is not available now, when it is not (it stays
    /// chosen: the table is served again when it is back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// A condition, as Kubernetes writes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Its type, e.g. `ReferencesResolved`.
    #[serde(rename = "type")]
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Why, as a word.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Why, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When `status` last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<String>,
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

/// PostgreSQL's settings for a table: how it is partitioned.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.cnpgi.io",
    version = "v1",
    kind = "PostgreSqlDatabaseTable",
    namespaced,
    status = "ReferenceStatus",
    shortname = "pgdbt",
    printcolumn = r#"{"name":"Partitioning","type":"string","jsonPath":".spec.partitionBy.type"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PostgreSqlDatabaseTableSpec {
    /// How the table is partitioned; absent: not partitioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_by: Option<PartitionBy>,
}

/// A partitioning: `PARTITION BY HASH` in `partitions` partitions, or
/// `PARTITION BY RANGE` with one default partition, on a column.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PartitionBy {
    /// `none`, `hash` or `range`.
    #[serde(rename = "type")]
    pub partition_type: PartitionType,
    /// The partition key: a column of the DatabaseTable (required for `hash` and `range`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// How many partitions, for `hash` (2 to 64).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 2, max = 64))]
    pub partitions: Option<u32>,
}

/// How a table is partitioned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PartitionType {
    /// Not partitioned.
    #[default]
    None,
    /// `PARTITION BY HASH`: rows spread over `partitions` partitions.
    Hash,
    /// `PARTITION BY RANGE`, with one `DEFAULT` partition.
    Range,
}

/// MariaDB's settings for a table: its storage engine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "example.cnpgi.io",
    version = "v1",
    kind = "MariaDbDatabaseTable",
    namespaced,
    status = "ReferenceStatus",
    shortname = "mdbt",
    printcolumn = r#"{"name":"Engine","type":"string","jsonPath":".spec.storageEngine"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct MariaDbDatabaseTableSpec {
    /// The storage engine (`ENGINE=`): `InnoDB` (the default), `Aria`, `MyISAM` or `MEMORY`.
    #[serde(default)]
    pub storage_engine: StorageEngine,
}

/// A MariaDB storage engine.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StorageEngine {
    /// InnoDB, MariaDB's default.
    #[default]
    InnoDB,
    /// Aria.
    Aria,
    /// MyISAM.
    MyISAM,
    /// MEMORY.
    #[serde(rename = "MEMORY")]
    Memory,
}

/// The status of a referenced object: what each plugin reported about it,
/// by plugin name (written by the host from the plugins' reference
/// reports; any JSON, so the schema keeps unknown fields).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReferenceStatus {
    /// Each plugin's report, by plugin name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "preserved_object")]
    pub cnpgi_reports: BTreeMap<String, Value>,
}

/// An object whose fields are kept as written (`x-kubernetes-preserve-unknown-fields`).
fn preserved_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `spec.preferredImplementation` and `spec.policies[]` are the plugins
/// (index 0 and 1 + the policy's index; no parameters: the spec is their
/// input); `spec.preferredImplementation` is one implementation of
/// [`IMPLEMENTATION_KIND`] among several (the host chooses another when it
/// is not available: [`PluginLayout::implementation_choice`]);
/// `spec.references[]` are the objects sent with the table; entries in
/// `status.plugins[]`; field paths as plugins write them
/// (`spec.columns[1].type`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ImplementationLayout;

impl PluginLayout for ImplementationLayout {
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
        let implementation = resource.pointer("/spec/preferredImplementation").into_iter();
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

    fn field_path(&self, path_components: &[String], _plugin_index: usize) -> String {
        field_path(path_components)
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

    fn implementation_choice(&self) -> Option<ImplementationChoice> {
        Some(ImplementationChoice::new(
            IMPLEMENTATION_KIND,
            "/spec/preferredImplementation",
        ))
    }

    fn references(&self, resource: &Value) -> Vec<ObjectReference> {
        let listed = resource.pointer("/spec/references").and_then(Value::as_array);
        listed
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(index, reference)| {
                let field = |name: &str| reference.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
                Some(ObjectReference {
                    api_version: field("apiVersion")?.to_owned(),
                    kind: field("kind")?.to_owned(),
                    name: field("name")?.to_owned(),
                    field: format!("spec.references[{index}]"),
                })
            })
            .collect()
    }
}

/// A plugin's error path as a field of the table: `["spec", "columns",
/// "1", "type"]` is `spec.columns[1].type`; none is `spec`.
///
/// ```
/// assert_eq!(cnpgi_example_database_table::field_path(&["spec".into(), "references".into(), "0".into()]), "spec.references[0]");
/// ```
pub fn field_path(components: &[String]) -> String {
    if components.is_empty() {
        return "spec".to_owned();
    }
    cnpgi_core::path::joined(components)
}

/// The reference of `kind` among the references a plugin was sent with a
/// table (`cnpgi.io/references`, [`cnpgi_core::references::references_of`]),
/// if the table references one: its object decoded, or why not (missing, or
/// not decoding as `T`). Each implementation takes its own kind and ignores
/// the others.
///
/// ```
/// use cnpgi_example_database_table::{PartitionType, PostgreSqlDatabaseTable, reference_of_kind};
///
/// let table = serde_json::json!({"cnpgi.io/references": [{
///     "apiVersion": "example.cnpgi.io/v1", "kind": "PostgreSqlDatabaseTable", "name": "users",
///     "field": "spec.references[0]",
///     "object": {"apiVersion": "example.cnpgi.io/v1", "kind": "PostgreSqlDatabaseTable",
///                "metadata": {"name": "users"}, "spec": {"partitionBy": {"type": "hash", "column": "id", "partitions": 4}}},
/// }]});
/// let found = reference_of_kind::<PostgreSqlDatabaseTable>(&table).unwrap()?;
/// assert_eq!(found.spec.partition_by.unwrap().partition_type, PartitionType::Hash);
/// assert!(reference_of_kind::<cnpgi_example_database_table::MariaDbDatabaseTable>(&table).is_none());
/// # Ok::<(), String>(())
/// ```
pub fn reference_of_kind<T>(resource: &Value) -> Option<Result<T, String>>
where
    T: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned,
{
    let kind = T::kind(&());
    let reference = cnpgi_core::references::references_of(resource)
        .into_iter()
        .find(|reference| reference.kind == kind && reference.api_version == T::api_version(&()))?;
    let what = format!("{} {} ({})", reference.kind, reference.name, reference.field);
    Some(match (reference.object, reference.error) {
        (Some(object), _) => serde_json::from_value(object).map_err(|error| format!("{what} does not decode: {error}")),
        (None, error) => Err(format!("{what}: {}", error.unwrap_or_else(|| "not sent".to_owned()))),
    })
}

#[cfg(feature = "host")]
impl cnpgi_host::PluginResource for DatabaseTable {
    fn layout() -> std::sync::Arc<dyn PluginLayout> {
        std::sync::Arc::new(ImplementationLayout)
    }
}
