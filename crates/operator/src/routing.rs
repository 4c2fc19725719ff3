//! Routing a Cluster, and the objects written for it, through its plugins:
//! [`cnpgi_host::routing`], with CloudNativePG's layout
//! ([`CnpgLayout`]: `spec.plugins[]`, `status.pluginStatus[]`).

pub use cnpgi_host::routing::*;

/// A Cluster as routed to plugins: its JSON, encoded once.
///
/// ```
/// use cnpgi_operator::routing::RoutedCluster;
///
/// let cluster = RoutedCluster::new(serde_json::json!({"kind": "Cluster", "spec": {}}));
/// assert_eq!(cluster.definition(), br#"{"kind":"Cluster","spec":{}}"#);
/// assert_eq!(cluster.value()["kind"], "Cluster");
/// ```
pub type RoutedCluster = RoutedResource;
