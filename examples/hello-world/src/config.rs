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

/// The declared parameters, with their types and defaults.
pub fn schema() -> ParameterSchema {
    let default = json!({ "plugin-metadata": "default" });
    ParameterSchema::new()
        .with(Parameter::json::<StringMap>(LABELS).default_json(default.clone()))
        .with(Parameter::json::<StringMap>(ANNOTATIONS).default_json(default))
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
        let empty = StringMap::new();
        let (index, params) = cluster
            .plugin(PLUGIN_NAME)
            .map_or((0, &empty), |entry| (entry.index, entry.parameters()));
        let parsed = schema().parse(index, params)?;
        let read = |name: &str| {
            parsed
                .json::<StringMap>(name)
                .map_err(|e| vec![parameter_error(index, name, "", e.to_string())])
        };
        let mut labels = read(LABELS)?;
        let mut annotations = read(ANNOTATIONS)?;
        // As upstream: an explicitly empty object also means "use the default".
        let default = || StringMap::from([("plugin-metadata".to_owned(), "default".to_owned())]);
        if labels.is_empty() {
            labels = default();
        }
        if annotations.is_empty() {
            annotations = default();
        }
        Ok(Self {
            labels,
            annotations,
            index,
        })
    }

    /// The errors of changing from `old` to `self`: the labels are fixed
    /// once the Cluster exists.
    pub fn validate_change(&self, old: &Self) -> Vec<ValidationError> {
        if self.labels == old.labels {
            return Vec::new();
        }
        let value = serde_json::to_string(&self.labels).unwrap_or_default();
        vec![parameter_error(self.index, LABELS, value, "Labels cannot be changed")]
    }
}
