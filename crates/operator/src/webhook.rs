//! Admission webhooks for Clusters, routed to plugins: the host's admission
//! routes ([`Host::admission_routes`]) at the Cluster's paths.
//!
//! * `POST /mutate-cluster`: chained `MutateCluster` through the Cluster's
//!   plugins; the combined change goes back as a base64-encoded JSON Patch.
//! * `POST /validate-cluster`: `ValidateClusterCreate` on CREATE,
//!   `ValidateClusterChange` on UPDATE; every plugin's errors are returned as
//!   one denial (`Cluster is invalid: ...`), one kubectl-style line per field.

use std::time::Duration;

use axum::Router as HttpRouter;
use cnpgi_host::{Host, webhook::AdmissionPaths};

use crate::crd::Cluster;

/// Path of the mutating webhook.
pub const MUTATE_PATH: &str = "/mutate-cluster";
/// Path of the validating webhook.
pub const VALIDATE_PATH: &str = "/validate-cluster";

/// The Cluster's webhook paths, as denials name it.
pub fn cluster_paths() -> AdmissionPaths {
    AdmissionPaths::new("Cluster", MUTATE_PATH, VALIDATE_PATH)
}

/// The webhooks' HTTP routes through `host`, answering within `deadline`
/// (keep it below the `timeoutSeconds` of the webhook configuration),
/// accepting bodies of up to [`cnpgi_host::webhook::MAX_BODY_BYTES`], each
/// admission request measured in the host's metrics as controller-runtime
/// does: serve them with [`cnpgi_host::webhook::serve_https_with`].
pub fn routes(host: &Host<Cluster>, deadline: Duration) -> HttpRouter {
    host.admission_routes(&cluster_paths(), deadline)
}
