//! Lenient decoding of the CloudNativePG `Cluster` a plugin receives.
//!
//! CNPG-I sends the Cluster as JSON bytes (`definition`, `old_cluster`,
//! `new_cluster`, `cluster`, `cluster_definition`). A plugin only needs a few
//! fields of it: its own entry in `spec.plugins[]` (parameters and index, for
//! validation errors) and its entry in `status.pluginStatus[]`. [`Cluster`]
//! types exactly those fields and keeps **everything else** as JSON, so a
//! plugin keeps working when CloudNativePG adds fields, and re-serialising a
//! decoded Cluster (for example to compute a JSON patch in `MutateCluster`)
//! never drops data it did not understand.
//!
//! This mirrors cnpg-i-machinery's lenient Cluster decoding and its
//! `common.NewPlugin` helper (see [`Cluster::plugin`]).
//!
//! It is the one Cluster view of the project: plugins decode it, the operator
//! finds the plugins a Cluster enables with [`enabled_plugins`] (the same
//! `enabled` rule as [`PluginConfiguration::is_enabled`]), and the operator's
//! own CRD embeds [`PluginConfiguration`] and [`PluginStatus`] (with the
//! `schemars` feature, for its schema).
//!
//! ```
//! use cnpgi_core::cluster::decode_cluster;
//!
//! let json = br#"{
//!     "apiVersion": "postgresql.cnpg.io/v1",
//!     "kind": "Cluster",
//!     "metadata": {"name": "cluster-example", "namespace": "default"},
//!     "spec": {
//!         "instances": 3,
//!         "plugins": [{"name": "cnpg-i-hello-world.cloudnative-pg.io",
//!                      "parameters": {"labels": "{\"app\":\"demo\"}"}}]
//!     }
//! }"#;
//! let cluster = decode_cluster(json)?;
//! let entry = cluster.plugin("cnpg-i-hello-world.cloudnative-pg.io").unwrap();
//! assert_eq!(entry.index, 0);
//! assert_eq!(entry.parameters()["labels"], r#"{"app":"demo"}"#);
//! // Fields this crate does not model are kept.
//! assert_eq!(cluster.spec.other["instances"], 3);
//! # Ok::<(), cnpgi_core::cluster::DecodeError>(())
//! ```

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{DeserializeOwned, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Implements `Deserialize` for a struct whose known fields are listed and
/// whose other fields go to its `other: Map<String, Value>` field.
///
/// `#[serde(flatten)]` would do the same, but it buffers the whole object
/// before decoding the known fields, which loses the error path that
/// `serde_path_to_error` reports (`spec.plugins[0].parameters.labels`).
/// A JSON `null` for a known field decodes as the field's default, as Go's
/// `encoding/json` does.
macro_rules! deserialize_keeping_unknown_fields {
    ($ty:ident, $expecting:literal, { $($field:ident => $json:literal),+ $(,)? }) => {
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D>(deserializer: D) -> Result<Self, D::Error>
            where
                D: Deserializer<'de>,
            {
                struct FieldsVisitor;

                impl<'de> Visitor<'de> for FieldsVisitor {
                    type Value = $ty;

                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str($expecting)
                    }

                    fn visit_map<A>(self, mut map: A) -> Result<$ty, A::Error>
                    where
                        A: MapAccess<'de>,
                    {
                        let mut out = <$ty>::default();
                        while let Some(key) = map.next_key::<String>()? {
                            match key.as_str() {
                                $(
                                    $json => {
                                        let value: Option<_> = map.next_value()?;
                                        out.$field = value.unwrap_or_default();
                                    }
                                )+
                                _ => {
                                    let value: Value = map.next_value()?;
                                    out.other.insert(key, value);
                                }
                            }
                        }
                        Ok(out)
                    }
                }

                deserializer.deserialize_map(FieldsVisitor)
            }
        }
    };
}

/// A CloudNativePG `Cluster` (`postgresql.cnpg.io/v1`), decoded leniently.
///
/// Only the fields plugins commonly need are typed; every other field is kept
/// in the `other` maps, so `decode → serialise` round-trips without losing
/// data. Missing fields (and `null`s) decode as defaults.
///
/// ```
/// use cnpgi_core::cluster::decode_cluster;
///
/// let cluster = decode_cluster(br#"{"metadata":{"name":"pg"},"spec":{"instances":1}}"#)?;
/// assert_eq!(cluster.metadata.name.as_deref(), Some("pg"));
/// assert!(cluster.spec.plugins.is_empty());
/// let json = cluster.to_json_value()?;
/// assert_eq!(json["spec"]["instances"], 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// `apiVersion`, normally `postgresql.cnpg.io/v1`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    /// `kind`, normally `Cluster`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// `metadata`.
    pub metadata: ObjectMeta,
    /// `spec`.
    pub spec: ClusterSpec,
    /// `status`.
    #[serde(skip_serializing_if = "ClusterStatus::is_empty")]
    pub status: ClusterStatus,
    /// Top-level fields other than the ones above, kept as they were.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

deserialize_keeping_unknown_fields!(Cluster, "a Cluster object", {
    api_version => "apiVersion",
    kind => "kind",
    metadata => "metadata",
    spec => "spec",
    status => "status",
});

/// The `spec` of a [`Cluster`]: `plugins` is typed, the rest kept as JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// `spec.plugins`: the plugins the Cluster enables, with their parameters.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginConfiguration>,
    /// Every other field of `spec` (`instances`, `storage`, …), as it was.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

deserialize_keeping_unknown_fields!(ClusterSpec, "a Cluster spec object", {
    plugins => "plugins",
});

/// One entry of `spec.plugins[]`.
///
/// ```
/// use cnpgi_core::cluster::PluginConfiguration;
///
/// let config: PluginConfiguration =
///     serde_json::from_str(r#"{"name":"p.example.com","isWALArchiver":true}"#)?;
/// assert!(config.is_enabled()); // `enabled` defaults to true
/// assert_eq!(config.is_wal_archiver, Some(true));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schemars",
    schemars(description = "One plugin enabled on a Cluster (CloudNativePG's shape).")
)]
#[serde(rename_all = "camelCase")]
pub struct PluginConfiguration {
    /// The plugin name, as in its metadata.
    pub name: String,
    /// Whether the plugin is used. Default true.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(default = "enabled_by_default"))]
    pub enabled: Option<bool>,
    /// Whether the plugin archives WAL (kept for CloudNativePG compatibility).
    #[serde(rename = "isWALArchiver", skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub is_wal_archiver: Option<bool>,
    /// Plugin parameters, read by the plugin from the Cluster.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub parameters: BTreeMap<String, String>,
    /// Fields of the entry other than the ones above, kept as they were.
    #[serde(flatten)]
    #[cfg_attr(feature = "schemars", schemars(skip))]
    pub other: Map<String, Value>,
}

/// The schema's default of `enabled`: what an absent value means.
#[cfg(feature = "schemars")]
fn enabled_by_default() -> Option<bool> {
    Some(true)
}

deserialize_keeping_unknown_fields!(PluginConfiguration, "a plugin configuration object", {
    name => "name",
    enabled => "enabled",
    is_wal_archiver => "isWALArchiver",
    parameters => "parameters",
});

impl PluginConfiguration {
    /// Whether the plugin is enabled: `enabled` is `true` or absent.
    pub fn is_enabled(&self) -> bool {
        is_enabled(self.enabled)
    }
}

/// CloudNativePG's rule for `spec.plugins[].enabled`: only `false` disables.
fn is_enabled(enabled: Option<bool>) -> bool {
    enabled != Some(false)
}

/// The `status` of a [`Cluster`]: `pluginStatus` is typed, the rest kept as JSON.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `status.pluginStatus`: what the operator recorded about each plugin.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plugin_status: Vec<PluginStatus>,
    /// Every other field of `status`, as it was.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

deserialize_keeping_unknown_fields!(ClusterStatus, "a Cluster status object", {
    plugin_status => "pluginStatus",
});

impl ClusterStatus {
    /// Whether the status has no field at all (it is then not serialised).
    pub fn is_empty(&self) -> bool {
        self.plugin_status.is_empty() && self.other.is_empty()
    }
}

/// One entry of `status.pluginStatus[]`: what the operator recorded about a
/// plugin. The capabilities are enum names (see [`crate::capabilities`]).
///
/// ```
/// use cnpgi_core::cluster::PluginStatus;
///
/// let status: PluginStatus = serde_json::from_str(
///     r#"{"name":"p.example.com","version":"1.0.0","status":"{\"ready\":true}"}"#,
/// )?;
/// assert_eq!(status.status_json()?, Some(serde_json::json!({"ready": true})));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "schemars", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "schemars",
    schemars(description = "A plugin's entry in the Cluster status (CloudNativePG's shape).")
)]
#[serde(rename_all = "camelCase")]
pub struct PluginStatus {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub version: String,
    /// Advertised services (`TYPE_LIFECYCLE_SERVICE`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub capabilities: Vec<String>,
    /// Advertised Operator RPCs (`TYPE_MUTATE_CLUSTER`, ...).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub operator_capabilities: Vec<String>,
    /// Advertised WAL RPCs (`TYPE_ARCHIVE_WAL`, ...).
    #[serde(rename = "walCapabilities", skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub wal_capabilities: Vec<String>,
    /// Advertised Backup RPCs (`TYPE_BACKUP`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub backup_capabilities: Vec<String>,
    /// What the plugin's RestoreJobHooks handle (`KIND_RESTORE`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub restore_job_hook_capabilities: Vec<String>,
    /// The JSON object the plugin returned from `SetStatusInCluster`, as text.
    #[serde(skip_serializing_if = "String::is_empty")]
    #[cfg_attr(feature = "schemars", schemars(default))]
    pub status: String,
    /// Fields of the entry other than the ones above, kept as they were.
    #[serde(flatten)]
    #[cfg_attr(feature = "schemars", schemars(skip))]
    pub other: Map<String, Value>,
}

deserialize_keeping_unknown_fields!(PluginStatus, "a plugin status object", {
    name => "name",
    version => "version",
    capabilities => "capabilities",
    operator_capabilities => "operatorCapabilities",
    wal_capabilities => "walCapabilities",
    backup_capabilities => "backupCapabilities",
    restore_job_hook_capabilities => "restoreJobHookCapabilities",
    status => "status",
});

impl PluginStatus {
    /// Parses [`PluginStatus::status`]: `None` when it is empty (the plugin never
    /// set a status), otherwise the JSON it holds.
    ///
    /// # Errors
    ///
    /// The `serde_json` error when `status` is not valid JSON.
    pub fn status_json(&self) -> Result<Option<Value>, serde_json::Error> {
        if self.status.is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&self.status).map(Some)
    }
}

/// A plugin's entry in `spec.plugins[]`, with its position there.
///
/// The index is what validation errors about the plugin's parameters carry
/// (machinery's `["spec", "plugins", "<index>", "<parameter>"]`, see [`crate::path`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PluginEntry<'a> {
    /// Position of the entry in `spec.plugins`.
    pub index: usize,
    /// The entry itself.
    pub config: &'a PluginConfiguration,
}

impl<'a> PluginEntry<'a> {
    /// The entry's `parameters`.
    pub fn parameters(&self) -> &'a BTreeMap<String, String> {
        &self.config.parameters
    }
}

impl Cluster {
    /// The entry of `spec.plugins[]` named `name`, whether enabled or not
    /// (check [`PluginConfiguration::is_enabled`] if it matters).
    ///
    /// When several entries have that name the **last** one is returned, as
    /// cnpg-i-machinery's `common.NewPlugin` does.
    ///
    /// ```
    /// use cnpgi_core::cluster::decode_cluster;
    ///
    /// let cluster = decode_cluster(
    ///     br#"{"spec":{"plugins":[{"name":"a.example.com"},{"name":"b.example.com","parameters":{"x":"1"}}]}}"#,
    /// )?;
    /// let entry = cluster.plugin("b.example.com").unwrap();
    /// assert_eq!((entry.index, entry.parameters()["x"].as_str()), (1, "1"));
    /// assert!(cluster.plugin("c.example.com").is_none());
    /// # Ok::<(), cnpgi_core::cluster::DecodeError>(())
    /// ```
    pub fn plugin(&self, name: &str) -> Option<PluginEntry<'_>> {
        self.spec
            .plugins
            .iter()
            .enumerate()
            .rev()
            .find(|(_, config)| config.name == name)
            .map(|(index, config)| PluginEntry { index, config })
    }

    /// The entry of `status.pluginStatus[]` named `name` (the first one).
    pub fn plugin_status(&self, name: &str) -> Option<&PluginStatus> {
        self.status.plugin_status.iter().find(|s| s.name == name)
    }

    /// Serialises the Cluster back to JSON, unknown fields included.
    ///
    /// # Errors
    ///
    /// The `serde_json` error if serialisation fails (it does not for values
    /// obtained from [`decode_cluster`]).
    pub fn to_json_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::to_value(self)
    }
}

/// A plugin a Cluster enables, and where it is in `spec.plugins`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnabledPlugin {
    /// Its index in `spec.plugins` (first occurrence).
    pub index: usize,
    /// Its name.
    pub name: String,
}

/// The plugins a Cluster (as JSON) enables, in CloudNativePG's routing
/// order: `spec.plugins[]` entries whose `enabled` is not `false` (the rule
/// of [`PluginConfiguration::is_enabled`]), de-duplicated by name (first
/// occurrence) and sorted by name. Entries without a string `name` are
/// skipped; the rest of the Cluster is not decoded.
///
/// ```
/// let cluster = serde_json::json!({"spec": {"plugins": [
///     {"name": "b.example.com"}, {"name": "a.example.com"},
///     {"name": "c.example.com", "enabled": false}, {"name": "b.example.com"}]}});
/// let names: Vec<_> = cnpgi_core::cluster::enabled_plugins(&cluster).into_iter().map(|p| p.name).collect();
/// assert_eq!(names, ["a.example.com", "b.example.com"]);
/// ```
pub fn enabled_plugins(cluster: &Value) -> Vec<EnabledPlugin> {
    let entries = cluster
        .pointer("/spec/plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, entry)| is_enabled(entry.get("enabled").and_then(Value::as_bool)))
        .filter_map(|(index, entry)| Some((index, entry.get("name")?.as_str()?)));
    routing_order(entries)
}

impl Cluster {
    /// The plugins this Cluster enables, in routing order (see [`enabled_plugins`]).
    ///
    /// ```
    /// use cnpgi_core::cluster::decode_cluster;
    ///
    /// let cluster = decode_cluster(br#"{"spec":{"plugins":[{"name":"b"},{"name":"a","enabled":true},{"name":"c","enabled":false}]}}"#)?;
    /// let enabled: Vec<_> = cluster.enabled_plugins().into_iter().map(|p| (p.index, p.name)).collect();
    /// assert_eq!(enabled, [(1, "a".to_owned()), (0, "b".to_owned())]);
    /// # Ok::<(), cnpgi_core::cluster::DecodeError>(())
    /// ```
    pub fn enabled_plugins(&self) -> Vec<EnabledPlugin> {
        let entries = self
            .spec
            .plugins
            .iter()
            .enumerate()
            .filter(|(_, config)| config.is_enabled())
            .map(|(index, config)| (index, config.name.as_str()));
        routing_order(entries)
    }
}

/// De-duplicates `(index, name)` pairs by name (first occurrence wins) and
/// sorts them by name.
fn routing_order<'a>(entries: impl Iterator<Item = (usize, &'a str)>) -> Vec<EnabledPlugin> {
    let mut seen = std::collections::BTreeSet::new();
    let mut plugins: Vec<EnabledPlugin> = entries
        .filter(|(_, name)| seen.insert(*name))
        .map(|(index, name)| EnabledPlugin {
            index,
            name: name.to_owned(),
        })
        .collect();
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    plugins
}

/// An object sent by the operator could not be decoded.
///
/// Converts into a [`tonic::Status`] with code `InvalidArgument`, so gRPC
/// handlers can use `?`.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The input was empty (or only whitespace).
    #[error("cannot decode {what}: the JSON input is empty")]
    Empty {
        /// What was being decoded, e.g. `Cluster`.
        what: &'static str,
    },
    /// The input is valid JSON but not a JSON object.
    #[error("cannot decode {what}: expected a JSON object, found {found}")]
    NotAnObject {
        /// What was being decoded, e.g. `Pod`.
        what: &'static str,
        /// The JSON type found instead: `array`, `string`, `number`, `boolean` or `null`.
        found: &'static str,
    },
    /// The input is not valid JSON or does not have the expected shape.
    #[error("cannot decode {what}: {}{source}", path_prefix(.path))]
    Invalid {
        /// What was being decoded, e.g. `Cluster`.
        what: &'static str,
        /// Where the error is, like `spec.plugins[0].parameters.labels`; `.` for
        /// the document itself.
        path: String,
        /// The `serde_json` error, with line and column.
        #[source]
        source: serde_json::Error,
    },
}

fn path_prefix(path: &str) -> String {
    if path.is_empty() || path == "." {
        String::new()
    } else {
        format!("{path}: ")
    }
}

impl DecodeError {
    /// What was being decoded, e.g. `Cluster`.
    pub fn what(&self) -> &'static str {
        match self {
            Self::Empty { what } | Self::NotAnObject { what, .. } | Self::Invalid { what, .. } => what,
        }
    }
}

/// `InvalidArgument`, with the error's text bounded to 1 KiB (it may quote
/// the input).
impl From<DecodeError> for tonic::Status {
    fn from(err: DecodeError) -> Self {
        tonic::Status::invalid_argument(crate::echo::bounded_string(err.to_string()))
    }
}

/// Decodes a Cluster sent by the operator (see [`Cluster`]).
///
/// # Errors
///
/// [`DecodeError`] when the input is empty, is not JSON, is not a JSON object,
/// or a typed field has the wrong type; the error names the field, e.g.
/// `cannot decode Cluster: spec.plugins[0].parameters.labels: invalid type:
/// integer `1`, expected a string at line 1 column 56`.
///
/// ```
/// use cnpgi_core::cluster::decode_cluster;
///
/// let err = decode_cluster(br#"{"spec":{"plugins":[{"name":"p","parameters":{"labels":1}}]}}"#)
///     .unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "cannot decode Cluster: spec.plugins[0].parameters.labels: \
///      invalid type: integer `1`, expected a string at line 1 column 56",
/// );
/// let status = tonic::Status::from(err);
/// assert_eq!(status.code(), tonic::Code::InvalidArgument);
/// ```
pub fn decode_cluster(bytes: &[u8]) -> Result<Cluster, DecodeError> {
    decode_as(bytes, "Cluster")
}

/// Decodes any object sent by the operator (a Pod, a Job, …) as a JSON object,
/// keeping every field. `what` names it in errors.
///
/// # Errors
///
/// [`DecodeError`] when the input is empty, is not JSON, or is not a JSON object.
///
/// ```
/// use cnpgi_core::cluster::decode_object;
///
/// let pod = decode_object(br#"{"apiVersion":"v1","kind":"Pod","spec":{}}"#, "Pod")?;
/// assert_eq!(pod["kind"], "Pod");
/// let err = decode_object(b"[]", "Pod").unwrap_err();
/// assert_eq!(err.to_string(), "cannot decode Pod: expected a JSON object, found array");
/// # Ok::<(), cnpgi_core::cluster::DecodeError>(())
/// ```
pub fn decode_object(bytes: &[u8], what: &'static str) -> Result<Value, DecodeError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty { what });
    }
    // Any JSON fits a `Value`, so the only errors are syntax errors, which
    // carry their line and column; tracking the path (as for typed decoding)
    // would triple the cost of decoding a Pod for nothing.
    let value: Value = crate::json::from_bytes(bytes).map_err(|source| DecodeError::Invalid {
        what,
        path: ".".to_owned(),
        source,
    })?;
    if value.is_object() {
        Ok(value)
    } else {
        Err(DecodeError::NotAnObject {
            what,
            found: json_type_name(&value),
        })
    }
}

/// `value` as the JSON bytes sent to plugins (compact, as Go's
/// `json.Marshal`).
///
/// Twice as fast as `value.to_string()`, which goes through `fmt::Write`
/// and checks every fragment is UTF-8, and infallible, unlike the generic
/// `serde_json::to_vec`: a `Value` always serializes (its keys are strings)
/// and a `Vec` always accepts the bytes.
///
/// ```
/// use cnpgi_core::cluster::encode_object;
///
/// assert_eq!(encode_object(&serde_json::json!({"kind": "Pod"})), br#"{"kind":"Pod"}"#);
/// ```
pub fn encode_object(value: &Value) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1024);
    // No error can happen, see above; an empty answer would be refused by
    // the plugin as "empty", never silently used.
    if serde_json::to_writer(&mut bytes, value).is_err() {
        bytes.clear();
    }
    bytes
}

fn decode_as<T: DeserializeOwned>(bytes: &[u8], what: &'static str) -> Result<T, DecodeError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(DecodeError::Empty { what });
    }
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| DecodeError::Invalid {
        what,
        path: render_path(err.path()),
        source: err.into_inner(),
    })?;
    // Reject trailing data after the document, as `serde_json::from_slice` does.
    deserializer.end().map_err(|source| DecodeError::Invalid {
        what,
        path: ".".to_owned(),
        source,
    })?;
    Ok(value)
}

/// Renders an error path like `spec.plugins[0].name`, `.` for the document
/// itself. Trailing unknown segments (a syntax error inside an object key is
/// reported at an unknown key) are left out.
fn render_path(path: &serde_path_to_error::Path) -> String {
    use serde_path_to_error::Segment;

    let segments: Vec<&Segment> = path.iter().collect();
    let known = segments
        .iter()
        .rposition(|s| !matches!(s, Segment::Unknown))
        .map_or(0, |last| last + 1);
    let mut out = String::new();
    for segment in &segments[..known] {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("[{index}]")),
            other => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(&other.to_string());
            }
        }
    }
    if out.is_empty() { ".".to_owned() } else { out }
}

/// The JSON type of a value, for error messages: `null`, `boolean`,
/// `number`, `string`, `array` or `object`.
///
/// ```
/// assert_eq!(cnpgi_core::cluster::json_type_name(&serde_json::json!([1])), "array");
/// ```
pub fn json_type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME: &str = "cnpg-i-hello-world.cloudnative-pg.io";

    fn full_cluster() -> Value {
        json!({
            "apiVersion": "postgresql.cnpg.io/v1",
            "kind": "Cluster",
            "metadata": {
                "name": "cluster-example",
                "namespace": "default",
                "labels": {"app.kubernetes.io/name": "pg"},
                "annotations": {"a": "b"},
                "uid": "1234",
                "generation": 3
            },
            "spec": {
                "instances": 3,
                "storage": {"size": "1Gi"},
                "futureField": {"nested": [1, 2, {"x": null}]},
                "plugins": [
                    {"name": "other.example.com", "enabled": false},
                    {
                        "name": NAME,
                        "isWALArchiver": true,
                        "parameters": {"labels": "{\"a\":\"b\"}", "mode": "fast"},
                        "futurePluginField": "kept"
                    }
                ]
            },
            "status": {
                "phase": "Cluster in healthy state",
                "instances": 3,
                "pluginStatus": [{
                    "name": NAME,
                    "version": "0.1.0",
                    "capabilities": ["TYPE_OPERATOR_SERVICE", "TYPE_LIFECYCLE_SERVICE"],
                    "operatorCapabilities": ["TYPE_MUTATE_CLUSTER"],
                    "walCapabilities": ["TYPE_ARCHIVE_WAL"],
                    "status": "{\"enabled\":true}"
                }]
            },
            "someTopLevelExtension": true
        })
    }

    fn decode_value(value: &Value) -> Cluster {
        decode_cluster(value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn typed_fields_are_decoded() {
        let cluster = decode_value(&full_cluster());
        assert_eq!(cluster.api_version, "postgresql.cnpg.io/v1");
        assert_eq!(cluster.kind, "Cluster");
        assert_eq!(cluster.metadata.name.as_deref(), Some("cluster-example"));
        assert_eq!(cluster.spec.plugins.len(), 2);
        assert!(!cluster.spec.plugins[0].is_enabled());
        let entry = cluster.plugin(NAME).unwrap();
        assert_eq!(entry.index, 1);
        assert!(entry.config.is_enabled());
        assert_eq!(entry.config.is_wal_archiver, Some(true));
        assert_eq!(entry.parameters()["mode"], "fast");
        let status = cluster.plugin_status(NAME).unwrap();
        assert_eq!(status.version, "0.1.0");
        assert_eq!(status.capabilities.len(), 2);
        assert_eq!(status.operator_capabilities, vec!["TYPE_MUTATE_CLUSTER"]);
        assert_eq!(status.status_json().unwrap(), Some(json!({"enabled": true})));
        assert!(cluster.plugin_status("other.example.com").is_none());
    }

    #[test]
    fn round_trip_keeps_unknown_fields() {
        let original = full_cluster();
        let cluster = decode_value(&original);
        assert_eq!(cluster.to_json_value().unwrap(), original);
        assert_eq!(cluster.other["someTopLevelExtension"], true);
        assert_eq!(cluster.spec.plugins[1].other["futurePluginField"], "kept");
        assert_eq!(
            cluster.status.plugin_status[0].wal_capabilities,
            ["TYPE_ARCHIVE_WAL"],
            "CloudNativePG's walCapabilities is typed"
        );
        assert_eq!(cluster.status.other["phase"], "Cluster in healthy state");
    }

    #[test]
    fn empty_and_null_fields_are_lenient() {
        let cluster = decode_cluster(b"{}").unwrap();
        assert_eq!(cluster, Cluster::default());
        assert!(cluster.plugin(NAME).is_none());
        assert_eq!(cluster.to_json_value().unwrap(), json!({"metadata": {}, "spec": {}}));

        let cluster =
            decode_cluster(br#"{"metadata":null,"spec":{"plugins":null},"status":{"pluginStatus":null}}"#).unwrap();
        assert!(cluster.spec.plugins.is_empty());
        assert!(cluster.status.is_empty());

        let cluster =
            decode_cluster(br#"{"spec":{"plugins":[{"name":"p","enabled":null,"parameters":null}]}}"#).unwrap();
        assert!(cluster.spec.plugins[0].is_enabled());
        assert!(cluster.spec.plugins[0].parameters.is_empty());
    }

    #[test]
    fn last_entry_with_the_name_wins() {
        let cluster = decode_cluster(
            br#"{"spec":{"plugins":[{"name":"p","parameters":{"v":"1"}},{"name":"q"},{"name":"p","parameters":{"v":"2"}}]}}"#,
        )
        .unwrap();
        let entry = cluster.plugin("p").unwrap();
        assert_eq!(entry.index, 2);
        assert_eq!(entry.parameters()["v"], "2");
        assert_eq!(cluster.plugin("q").unwrap().index, 1);
    }

    #[test]
    fn errors_name_the_field() {
        let err = decode_cluster(br#"{"spec":{"plugins":[{"name":"p","parameters":{"labels":1}}]}}"#).unwrap_err();
        match &err {
            DecodeError::Invalid { what, path, .. } => {
                assert_eq!(*what, "Cluster");
                assert_eq!(path, "spec.plugins[0].parameters.labels");
            }
            other => panic!("unexpected error {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.starts_with(
                "cannot decode Cluster: spec.plugins[0].parameters.labels: invalid type: integer `1`, expected a string at line 1 column"
            ),
            "{message}"
        );

        let err = decode_cluster(br#"{"spec":{"plugins":[{"name":"p"},{"name":"q","enabled":"yes"}]}}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("spec.plugins[1].enabled: invalid type: string")
        );

        let err = decode_cluster(br#"{"metadata":{"name":5}}"#).unwrap_err();
        assert!(
            err.to_string().contains("metadata.name: invalid type: integer"),
            "{err}"
        );
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let err = decode_cluster(b"{\"spec\": ").unwrap_err();
        assert_eq!(err.what(), "Cluster");
        assert!(err.to_string().contains("at line 1 column"), "{err}");

        let err = decode_cluster(b"{} {}").unwrap_err();
        assert!(err.to_string().contains("trailing characters"), "{err}");
    }

    #[test]
    fn empty_and_non_object_inputs_are_errors() {
        for input in [&b""[..], b"  \n"] {
            let err = decode_cluster(input).unwrap_err();
            assert!(matches!(err, DecodeError::Empty { what: "Cluster" }), "{err:?}");
            assert_eq!(err.to_string(), "cannot decode Cluster: the JSON input is empty");
        }
        for input in [&b"[]"[..], b"null", b"1", b"\"x\"", b"true"] {
            let err = decode_cluster(input).unwrap_err();
            assert!(
                err.to_string().contains("expected a Cluster object"),
                "{}: {err}",
                String::from_utf8_lossy(input)
            );
        }
        let err = decode_cluster(br#"{"spec":[]}"#).unwrap_err();
        assert!(err.to_string().contains("spec: invalid type: sequence"), "{err}");
    }

    #[test]
    fn decode_error_becomes_invalid_argument() {
        let status = tonic::Status::from(decode_cluster(b"").unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert_eq!(status.message(), "cannot decode Cluster: the JSON input is empty");

        let status = tonic::Status::from(decode_cluster(b"{x").unwrap_err());
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status
                .message()
                .starts_with("cannot decode Cluster: key must be a string")
        );
        assert!(status.message().ends_with("at line 1 column 2"), "{}", status.message());
    }

    #[test]
    fn decode_object_requires_an_object() {
        let pod = decode_object(br#"{"kind":"Pod","x":{"y":1}}"#, "Pod").unwrap();
        assert_eq!(pod, json!({"kind": "Pod", "x": {"y": 1}}));
        for (input, found) in [
            (&b"[1]"[..], "array"),
            (b"null", "null"),
            (b"2", "number"),
            (b"\"s\"", "string"),
            (b"false", "boolean"),
        ] {
            let err = decode_object(input, "Pod").unwrap_err();
            assert!(
                matches!(err, DecodeError::NotAnObject { what: "Pod", found: f } if f == found),
                "{err:?}"
            );
        }
        assert!(matches!(
            decode_object(b"", "Pod"),
            Err(DecodeError::Empty { what: "Pod" })
        ));
        let err = decode_object(b"{", "Job").unwrap_err();
        assert!(err.to_string().starts_with("cannot decode Job: EOF"), "{err}");
    }

    #[test]
    fn status_json_handles_empty_and_invalid() {
        let mut status = PluginStatus::default();
        assert_eq!(status.status_json().unwrap(), None);
        status.status = "{not json".to_owned();
        assert!(status.status_json().is_err());
        status.status = "{}".to_owned();
        assert_eq!(status.status_json().unwrap(), Some(json!({})));
    }

    #[test]
    fn plugin_configuration_serialises_with_wire_names() {
        let config = PluginConfiguration {
            name: "p".to_owned(),
            enabled: Some(false),
            is_wal_archiver: Some(true),
            parameters: BTreeMap::from([("k".to_owned(), "v".to_owned())]),
            other: Map::new(),
        };
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            json!({"name": "p", "enabled": false, "isWALArchiver": true, "parameters": {"k": "v"}})
        );
        let back: PluginConfiguration = serde_json::from_value(serde_json::to_value(&config).unwrap()).unwrap();
        assert_eq!(back, config);
    }

    /// Issue 13, point 5: a decode error does not quote a huge input whole.
    #[test]
    fn decode_errors_echo_huge_input_bounded() {
        let huge = "x".repeat(3 * 1024 * 1024);
        for document in [
            format!(r#"{{"metadata": {{"generation": "{huge}"}}}}"#),
            format!(r#"{{"metadata": {{"labels": {{"{huge}": 1}}}}}}"#),
        ] {
            let status = tonic::Status::from(decode_cluster(document.as_bytes()).unwrap_err());
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(status.message().len() <= 1024, "{}", status.message().len());
        }
    }

    /// The JSON view (routing) and the typed view (plugins) agree on which
    /// plugins a Cluster enables, in which order.
    #[test]
    fn enabled_plugins_follow_one_rule_on_json_and_typed_clusters() {
        let cluster = json!({"spec": {"plugins": [
            {"name": "b", "enabled": true},
            {"name": "c", "enabled": false},
            {"name": "a"},
            {"name": "b"},
            {"name": "d", "enabled": null},
            {"enabled": true},
        ]}});
        let from_json = enabled_plugins(&cluster);
        let names: Vec<_> = from_json.iter().map(|p| (p.index, p.name.as_str())).collect();
        assert_eq!(names, [(2, "a"), (0, "b"), (4, "d")]);
        let typed = decode_cluster(cluster.to_string().as_bytes()).unwrap();
        // The typed view also keeps the entry without a name (as ""), first in name order.
        let typed_names: Vec<_> = typed
            .enabled_plugins()
            .into_iter()
            .filter(|p| !p.name.is_empty())
            .collect();
        assert_eq!(typed_names, from_json);
        assert!(enabled_plugins(&json!({"spec": {"plugins": "x"}})).is_empty());
        assert!(enabled_plugins(&json!([])).is_empty());
        // An `enabled` that is not a boolean does not disable (only `false` does).
        assert_eq!(
            enabled_plugins(&json!({"spec": {"plugins": [{"name": "p", "enabled": "no"}]}})).len(),
            1
        );
    }
}

/// Arbitrary input to the decoders: no panic, and every failure a typed
/// [`DecodeError`] naming what was decoded.
#[cfg(test)]
mod fuzz {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;
    use serde_json::{Value, json};

    use super::*;

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,8}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map("[a-z]{0,6}", inner, 0..4)
                    .prop_map(|map| Value::Object(map.into_iter().collect())),
            ]
        })
    }

    /// A Cluster whose every field the decoder types may hold anything.
    fn cluster_shaped() -> impl Strategy<Value = Value> {
        let plugin = (any_json(), any_json(), any_json(), any_json(), prop::sample::select(vec!["a", "b", ""]))
            .prop_map(|(enabled, parameters, archiver, extra, name)| {
                json!({"name": name, "enabled": enabled, "parameters": parameters, "isWALArchiver": archiver, "x": extra})
            });
        let entry = (any_json(), any_json(), any_json()).prop_map(
            |(name, capabilities, status)| json!({"name": name, "capabilities": capabilities, "status": status}),
        );
        (
            prop_oneof![prop::collection::vec(plugin, 0..4).prop_map(Value::from), any_json()],
            prop_oneof![prop::collection::vec(entry, 0..3).prop_map(Value::from), any_json()],
            any_json(),
        )
            .prop_map(|(plugins, entries, metadata)| {
                json!({"kind": "Cluster", "metadata": metadata, "spec": {"plugins": plugins}, "status": {"pluginStatus": entries}})
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn decoding_any_cluster_shaped_json_never_panics(value in cluster_shaped()) {
            let bytes = value.to_string().into_bytes();
            let outcome = std::panic::catch_unwind(|| match decode_cluster(&bytes) {
                Ok(cluster) => {
                    let _ = cluster.enabled_plugins();
                    for name in ["a", "b", ""] {
                        let _ = cluster.plugin(name).map(|entry| entry.parameters().len());
                        let _ = cluster.plugin_status(name).map(PluginStatus::status_json);
                    }
                    let _ = cluster.to_json_value().unwrap();
                    Ok(())
                }
                Err(error) => Err(error.what()),
            });
            prop_assert!(outcome.is_ok(), "panicked on {value}");
            if let Ok(Err(what)) = outcome {
                prop_assert_eq!(what, "Cluster");
            }
            let _ = enabled_plugins(&value);
        }

        #[test]
        fn decoding_any_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let outcome = std::panic::catch_unwind(|| {
                let cluster = decode_cluster(&bytes).map(|_| ()).map_err(|e| e.to_string());
                let object = decode_object(&bytes, "Pod").map(|_| ()).map_err(|e| e.to_string());
                (cluster, object)
            });
            prop_assert!(outcome.is_ok());
            let (cluster, object) = outcome.unwrap();
            if let Err(message) = cluster { prop_assert!(message.starts_with("cannot decode Cluster")); }
            if let Err(message) = object { prop_assert!(message.starts_with("cannot decode Pod")); }
        }
    }
}
