//! What a run of the suite can be told: the deadline, the Cluster sent, strictness.

use std::time::Duration;

use serde_json::Value;

/// Tunables of the suite.
#[derive(Debug, Clone)]
pub struct ConformanceOptions {
    /// Every call must answer within this. Default 5 s.
    pub deadline: Duration,
    /// The Cluster to send (its `spec.plugins` gets the plugin if missing,
    /// and `status.pluginStatus` the plugin's entry, as CloudNativePG writes it).
    pub cluster: Option<Value>,
    /// Turn recommendations (`NOTE`) into failures. Default off.
    pub strict: bool,
}

impl Default for ConformanceOptions {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(5),
            cluster: None,
            strict: false,
        }
    }
}
