//! The plugin's parameters: `labels` and `annotations`, each a JSON object of
//! strings, defaulting to `{"plugin-metadata": "default"}`.

use std::collections::BTreeMap;

use cnpgi_pluginhelper::prelude::*;

/// A JSON object of strings.
pub type StringMap = BTreeMap<String, String>;

/// The value of a missing (or empty) parameter, written back by MutateCluster.
pub const DEFAULT: &str = r#"{"plugin-metadata":"default"}"#;

/// The plugin's configuration for one Cluster. Every error is reported at
/// once, on `spec.plugins[<index>].parameters.<name>`.
#[derive(Parameters, Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Labels added to each instance Pod; fixed once the Cluster exists.
    #[param(json, default = DEFAULT, map = or_default, immutable = "Labels cannot be changed")]
    pub labels: StringMap,
    /// Annotations added to each instance Pod.
    #[param(json, default = DEFAULT, map = or_default)]
    pub annotations: StringMap,
}

/// As upstream: an empty object also means the default.
fn or_default(map: StringMap) -> StringMap {
    if map.is_empty() {
        StringMap::from([("plugin-metadata".into(), "default".into())])
    } else {
        map
    }
}
