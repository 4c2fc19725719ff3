//! Admission webhooks for Clusters, routed to plugins: the host library's
//! handlers ([`cnpgi_host::webhook`]) at the Cluster's paths.
//!
//! * `POST /mutate-cluster`: chained `MutateCluster` through the Cluster's
//!   plugins; the combined change goes back as a base64-encoded JSON Patch.
//! * `POST /validate-cluster`: `ValidateClusterCreate` on CREATE,
//!   `ValidateClusterChange` on UPDATE; every plugin's errors are returned as
//!   one denial (`Cluster is invalid: ...`), one kubectl-style line per field.

use std::time::Duration;

use axum::Router as HttpRouter;

pub use cnpgi_host::webhook::{
    AdmissionPaths, MAX_BODY_BYTES, ReloadingTlsAcceptor, admission_routes, observed_paths, serve_https,
    serve_https_with,
};

use crate::{metrics::Metrics, routing::Router};

/// Path of the mutating webhook.
pub const MUTATE_PATH: &str = "/mutate-cluster";
/// Path of the validating webhook.
pub const VALIDATE_PATH: &str = "/validate-cluster";

/// The Cluster's webhook paths, as denials name it.
pub fn cluster_paths() -> AdmissionPaths {
    AdmissionPaths::new("Cluster", MUTATE_PATH, VALIDATE_PATH)
}

/// The webhook's HTTP routes, answering within `deadline` (keep it below
/// the `timeoutSeconds` of the webhook configuration), accepting bodies of
/// up to [`MAX_BODY_BYTES`].
pub fn routes(router: Router, deadline: Duration) -> HttpRouter {
    admission_routes(router, &cluster_paths(), deadline)
}

/// `app` (the webhook routes) with each admission request to
/// [`MUTATE_PATH`] or [`VALIDATE_PATH`] measured in `metrics`, as
/// controller-runtime does (see [`observed_paths`]).
pub fn observed(app: HttpRouter, metrics: Metrics) -> HttpRouter {
    observed_paths(app, metrics, &[MUTATE_PATH, VALIDATE_PATH])
}
