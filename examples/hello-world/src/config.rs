//! The plugin's parameters: `labels` and `annotations`, each a JSON object of
//! strings, defaulting to `{"plugin-metadata": "default"}`.

use std::collections::BTreeMap;

use cnpgi_pluginhelper::{
    cluster::Cluster,
    parameters::{Parameter, ParameterSchema},
    proto::operator::v1::ValidationError,
    validation::parameter_error,
};
use serde_json::json;

use crate::metadata::PLUGIN_NAME;

/// Name of the labels parameter.
pub const LABELS: &str = "labels";
/// Name of the annotations parameter.
pub const ANNOTATIONS: &str = "annotations";

type StringMap = BTreeMap<String, String>;

/// One of the two parameters: a JSON object of strings, with the default.
fn string_map(name: &str) -> Parameter {
    Parameter::json::<StringMap>(name).default_json(json!({ "plugin-metadata": "default" }))
}

/// The declared parameters, with their types and defaults.
pub fn schema() -> ParameterSchema {
    ParameterSchema::new()
        .with(string_map(LABELS))
        .with(string_map(ANNOTATIONS))
}

/// As upstream: an empty object also means "use the default".
fn or_default(map: StringMap) -> StringMap {
    if map.is_empty() {
        StringMap::from([("plugin-metadata".to_owned(), "default".to_owned())])
    } else {
        map
    }
}

/// The plugin's configuration for one Cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configuration {
    /// Labels to add to each instance Pod.
    pub labels: StringMap,
    /// Annotations to add to each instance Pod.
    pub annotations: StringMap,
    /// Where this plugin is in `spec.plugins` (0 when it is not listed).
    pub index: usize,
}

impl Configuration {
    /// Reads the configuration of this plugin from a Cluster, or every
    /// validation error of its parameters.
    pub fn from_cluster(cluster: &Cluster) -> Result<Self, Vec<ValidationError>> {
        let (index, params) = plugin_parameters(cluster);
        let parsed = schema().parse(index, params)?;
        let read = |name: &str| {
            parsed.json::<StringMap>(name).map(or_default).map_err(|e| {
                let raw = params.get(name).cloned().unwrap_or_default();
                vec![parameter_error(index, name, raw, e.to_string())]
            })
        };
        Ok(Self {
            labels: read(LABELS)?,
            annotations: read(ANNOTATIONS)?,
            index,
        })
    }
}

/// This plugin's index in `spec.plugins` (0 when it is not listed) and its parameters.
fn plugin_parameters(cluster: &Cluster) -> (usize, &StringMap) {
    static EMPTY: StringMap = StringMap::new();
    cluster
        .plugin(PLUGIN_NAME)
        .map_or((0, &EMPTY), |entry| (entry.index, entry.parameters()))
}

/// The labels a Cluster asks for, or `None` when its `labels` parameter is
/// malformed (that error is reported by [`Configuration::from_cluster`]).
fn labels(cluster: &Cluster) -> Option<StringMap> {
    let (index, params) = plugin_parameters(cluster);
    let parsed = ParameterSchema::new()
        .with(string_map(LABELS))
        .parse(index, params)
        .ok()?;
    parsed.json::<StringMap>(LABELS).ok().map(or_default)
}

/// Every error of changing `old` into `new`: the new parameters' errors, and
/// a change of labels (fixed once the Cluster exists), together.
pub fn validate_change(old: &Cluster, new: &Cluster) -> Vec<ValidationError> {
    let mut errors = Configuration::from_cluster(new).err().unwrap_or_default();
    if let (Some(before), Some(after)) = (labels(old), labels(new))
        && before != after
    {
        let (index, params) = plugin_parameters(new);
        let raw = params.get(LABELS).cloned().unwrap_or_default();
        errors.push(parameter_error(index, LABELS, raw, "Labels cannot be changed"));
    }
    errors
}
