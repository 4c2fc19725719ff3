//! The whole plugin pipeline on one Cluster, without a Kubernetes cluster:
//! what `cnpgi-operator render` runs, through the operator's own plugin
//! host and Pod-building code.
//!
//! The Cluster stays JSON from end to end (the host's calls on JSON): it
//! may be one of CloudNativePG's (`postgresql.cnpg.io/v1`), whose fields the
//! `cnpgi.io/v1` type would not keep, and the plugins see every field the
//! user wrote.
//!
//! In the operator's order: the `MutateCluster` chain, then
//! `ValidateClusterCreate` (or `ValidateClusterChange` against an old
//! Cluster), then the instance Pods (their PostgreSQL configuration through
//! `EnrichConfiguration`) through the lifecycle `CREATE` chain, then
//! `SetStatusInCluster`.

use serde_json::Value;

use cnpgi_core::status::{PluginStatusUpdate, write_plugin_status};

use cnpgi_host::{
    Host, HostError,
    routing::{FieldError, PluginPatch},
};

use crate::{
    crd::Cluster,
    pods::{build_pod_with_patches, postgresql_configuration},
};

/// Why the pipeline stopped.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The plugins refused the Cluster.
    #[error("the Cluster is invalid")]
    Invalid(Vec<FieldError>),
    /// A plugin failed.
    #[error(transparent)]
    Plugin(#[from] HostError),
}

/// One instance Pod, and the patch each plugin made to it.
#[derive(Debug, Clone)]
pub struct RenderedPod {
    /// The template before the lifecycle hooks (with the PostgreSQL
    /// configuration the plugins enriched, see [`crate::pods`]).
    pub template: Value,
    /// The Pod the operator would create.
    pub pod: Value,
    /// Each plugin's patch, in order.
    pub patches: Vec<PluginPatch>,
}

/// Everything the pipeline produced.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The Cluster as the user wrote it.
    pub original: Value,
    /// The Cluster after the mutation chain, with `status.pluginStatus`.
    pub cluster: Value,
    /// Each plugin's mutation patch, in order.
    pub mutations: Vec<PluginPatch>,
    /// The instance Pods.
    pub pods: Vec<RenderedPod>,
    /// What each plugin reported for the status.
    pub status: Vec<PluginStatusUpdate>,
}

/// Runs the pipeline on `cluster` (and `old`, for a change) through `host`'s plugins.
pub async fn render(host: &Host<Cluster>, cluster: &Value, old: Option<&Value>) -> Result<Rendered, RenderError> {
    let mutated = host.mutate_json(host.routed_json(cluster.clone())).await?;
    let routed = host.routed_json(mutated.object);
    let errors = match old {
        Some(old) => {
            host.validate_change_json(&host.routed_json(old.clone()), &routed)
                .await?
        }
        None => host.validate_create_json(&routed).await?,
    };
    if !errors.is_empty() {
        return Err(RenderError::Invalid(errors));
    }
    let instances = routed
        .value()
        .pointer("/spec/instances")
        .and_then(Value::as_i64)
        .unwrap_or(1)
        .clamp(0, 1000) as i32;
    let mut pods = Vec::new();
    let configuration = postgresql_configuration(host, &routed).await?;
    for n in 1..=instances {
        let (template, patched) = build_pod_with_patches(host, &routed, &configuration, n).await?;
        pods.push(RenderedPod {
            template,
            pod: patched.object,
            patches: patched.patches,
        });
    }
    let status = host.status_entries(&routed).await?;
    let mut cluster_json = routed.into_value();
    write_plugin_status(&mut cluster_json, &status);
    Ok(Rendered {
        original: cluster.clone(),
        cluster: cluster_json,
        mutations: mutated.patches,
        pods,
        status,
    })
}
