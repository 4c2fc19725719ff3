//! What several of the host's integration tests route: a `Table` resource
//! listing its plugins the CloudNativePG way, and the hello-world plugin's name.

use cnpgi_host::PluginResource;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The name of the hello-world plugin the tests serve.
pub(crate) const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

/// A resource listing its plugins the CloudNativePG way.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Table", namespaced)]
pub(crate) struct TableSpec {
    /// `[{"name": ..., "parameters": {...}}]`.
    #[serde(default)]
    pub(crate) plugins: Vec<Value>,
}

impl PluginResource for Table {}
