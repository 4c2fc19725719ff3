//! A declarative plugin without a server, for unit tests: the same dispatch
//! code as over gRPC, called in-process with JSON values.

use std::sync::Arc;

use std::collections::HashMap;

use cnpgi_proto::{
    identity::v1::{
        EnrichConfigurationRequest, GetPluginCapabilitiesRequest, OperationType, identity_server::Identity,
        postgres_server::Postgres,
    },
    metrics::v1::{CollectMetric, CollectMetricsRequest, DefineMetricsRequest, Metric, metrics_server::Metrics},
    operator::v1::{
        OperatorCapabilitiesRequest, OperatorMutateClusterRequest, OperatorValidateClusterChangeRequest,
        OperatorValidateClusterCreateRequest, SetStatusInClusterRequest, ValidationError, operator_server::Operator,
    },
    operator_lifecycle::v1::{
        OperatorLifecycleCapabilities, OperatorLifecycleCapabilitiesRequest, OperatorLifecycleRequest,
        OperatorOperationType, operator_lifecycle_server::OperatorLifecycle,
    },
    reconciler::v1::{ReconcilerHooksRequest, reconciler_hooks_server::ReconcilerHooks},
};
use serde_json::Value;
use tonic::{Request, Status};

use super::{
    BackupService, LifecycleService, MetricsService, OperatorService, PluginIdentity, PostgresOperation,
    PostgresService, ReconcilerService, RestoreJobService, Shared, WalService,
};
use crate::{
    capabilities::{self, Operation, OperatorRpc, ServiceType},
    lowlevel::Hook,
    parameters::Parameters,
    patch, status,
};
use cnpgi_core::for_each_service;

/// A [`Plugin`](super::Plugin) called in-process, from
/// [`Plugin::local`](super::Plugin::local): every call goes through the
/// dispatch the gRPC services use (decoding, parameters, capabilities,
/// patches, status codes), without a server.
///
/// ```
/// # async fn example() -> Result<(), tonic::Status> {
/// use cnpgi_pluginhelper::{capabilities::Operation, plugin::Plugin, proto::identity::v1::GetPluginMetadataResponse};
/// use serde_json::json;
///
/// let plugin = Plugin::<()>::new(GetPluginMetadataResponse { name: "p.example.com".into(), ..Default::default() })
///     .lifecycle_pod([Operation::Create], |_, _, pod| {
///         pod["metadata"]["labels"]["seen"] = "yes".into();
///         Ok(())
///     })
///     .local();
/// let cluster = json!({"spec": {"plugins": [{"name": "p.example.com"}]}});
/// let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": {}}});
/// let patched = plugin.lifecycle(Operation::Create, &cluster, &pod).await?;
/// assert_eq!(patched["metadata"]["labels"]["seen"], "yes");
/// // Not registered for DELETE: unchanged.
/// assert_eq!(plugin.lifecycle(Operation::Delete, &cluster, &pod).await?, pod);
/// # Ok(()) }
/// ```
pub struct LocalPlugin<P> {
    identity: PluginIdentity,
    shared: Arc<Shared<P>>,
}

impl<P> std::fmt::Debug for LocalPlugin<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalPlugin")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

fn bytes(value: &Value) -> Vec<u8> {
    // Serializing a `Value` cannot fail (its map keys are strings).
    serde_json::to_vec(value).unwrap_or_default()
}

/// `object` with the answered patch applied, as an operator would.
fn applied(object: &Value, json_patch: &[u8]) -> Result<Value, Status> {
    let mut object = object.clone();
    patch::apply_patch_bytes(&mut object, json_patch)
        .map_err(|e| Status::internal(format!("the plugin answered a patch that does not apply: {e}")))?;
    Ok(object)
}

/// Each service of the table, to call as over gRPC (`wal_service`).
macro_rules! accessors {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, proto: $($proto:ident)::+, client: $($client:ident)::+, server: $($server:ident)::+,
        capabilities: $request:ident -> $answer:ident { $field:ident: [$entry:ident] },
        values: $values:ident $($oneof:ident)?, info: $info:ident, sdk: $sdk:ident, local: $local:ident,
        $($rest:tt)*
    } )*) => {$(
        #[doc = concat!("The ", $label, " service, to call as over gRPC.")]
        pub fn $local(&self) -> $sdk<P> {
            $sdk(self.shared.clone())
        }
    )*};
}

impl<P: Parameters> LocalPlugin<P> {
    pub(super) fn new(identity: PluginIdentity, shared: Arc<Shared<P>>) -> Self {
        Self { identity, shared }
    }

    /// The Identity service.
    pub fn identity(&self) -> &PluginIdentity {
        &self.identity
    }

    for_each_service!(accessors);

    /// The services `GetPluginCapabilities` advertises.
    pub async fn services(&self) -> Vec<ServiceType> {
        let answer = self
            .identity
            .get_plugin_capabilities(Request::new(GetPluginCapabilitiesRequest {}))
            .await
            .map(tonic::Response::into_inner)
            .unwrap_or_default();
        capabilities::services_of(&answer.capabilities)
    }

    /// The RPCs `Operator/GetCapabilities` advertises.
    pub async fn operator_rpcs(&self) -> Vec<OperatorRpc> {
        let answer = self
            .operator_service()
            .get_capabilities(Request::new(OperatorCapabilitiesRequest {}))
            .await
            .map(tonic::Response::into_inner)
            .unwrap_or_default();
        capabilities::values_of(&answer.capabilities)
    }

    /// What `OperatorLifecycle/GetCapabilities` advertises.
    pub async fn lifecycle_capabilities(&self) -> Vec<OperatorLifecycleCapabilities> {
        self.lifecycle_service()
            .get_capabilities(Request::new(OperatorLifecycleCapabilitiesRequest {}))
            .await
            .map(|answer| answer.into_inner().lifecycle_capabilities)
            .unwrap_or_default()
    }

    /// `ValidateClusterCreate` of `cluster`.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn validate_create(&self, cluster: &Value) -> Result<Vec<ValidationError>, Status> {
        let request = OperatorValidateClusterCreateRequest {
            definition: bytes(cluster),
        };
        let answer = self
            .operator_service()
            .validate_cluster_create(Request::new(request))
            .await?;
        Ok(answer.into_inner().validation_errors)
    }

    /// `ValidateClusterChange` from `old` to `new`.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn validate_change(&self, old: &Value, new: &Value) -> Result<Vec<ValidationError>, Status> {
        let request = OperatorValidateClusterChangeRequest {
            old_cluster: bytes(old),
            new_cluster: bytes(new),
        };
        let answer = self
            .operator_service()
            .validate_cluster_change(Request::new(request))
            .await?;
        Ok(answer.into_inner().validation_errors)
    }

    /// `MutateCluster` of `cluster`: the Cluster with the answered patch applied.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers, or `INTERNAL` if its patch does not apply.
    pub async fn mutate(&self, cluster: &Value) -> Result<Value, Status> {
        let request = OperatorMutateClusterRequest {
            definition: bytes(cluster),
        };
        let answer = self.operator_service().mutate_cluster(Request::new(request)).await?;
        applied(cluster, &answer.into_inner().json_patch)
    }

    /// `SetStatusInCluster`: the status answered, `None` for "no change".
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn set_status(&self, cluster: &Value) -> Result<Option<Value>, Status> {
        let request = SetStatusInClusterRequest {
            cluster: bytes(cluster),
        };
        let answer = self
            .operator_service()
            .set_status_in_cluster(Request::new(request))
            .await?;
        Ok(status::parse_json_status(&answer.into_inner().json_status)?)
    }

    /// `LifecycleHook` for `operation` on `object`: the object with the
    /// answered patch applied.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers, or `INTERNAL` if its patch does not apply.
    pub async fn lifecycle(&self, operation: Operation, cluster: &Value, object: &Value) -> Result<Value, Status> {
        let request = OperatorLifecycleRequest {
            operation_type: Some(OperatorOperationType {
                r#type: operation.into(),
            }),
            cluster_definition: bytes(cluster),
            object_definition: bytes(object),
        };
        let answer = self.lifecycle_service().lifecycle_hook(Request::new(request)).await?;
        applied(object, &answer.into_inner().json_patch)
    }

    /// `ReconcilerHooks/Pre` (or `Post`, when `post`) for `object`, the
    /// Cluster or a Backup, as CloudNativePG reads the answer.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn reconcile(&self, post: bool, cluster: &Value, object: &Value) -> Result<Hook, Status> {
        let request = Request::new(ReconcilerHooksRequest {
            cluster_definition: bytes(cluster),
            resource_definition: bytes(object),
        });
        let service = self.reconciler_service();
        let answer = if post {
            service.post(request).await?
        } else {
            service.pre(request).await?
        };
        Ok(Hook::from(&answer.into_inner()))
    }

    /// `EnrichConfiguration` of `configs`: the map answered, `None` for "no
    /// change".
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn enrich_configuration(
        &self,
        operation: PostgresOperation,
        cluster: &Value,
        configs: &HashMap<String, String>,
    ) -> Result<Option<HashMap<String, String>>, Status> {
        let request = EnrichConfigurationRequest {
            configs: configs.clone(),
            cluster_definition: bytes(cluster),
            operation_type: Some(OperationType {
                r#type: operation.into(),
            }),
        };
        let answer = self
            .postgres_service()
            .enrich_configuration(Request::new(request))
            .await?;
        let configs = answer.into_inner().configs;
        Ok((!configs.is_empty()).then_some(configs))
    }

    /// `Metrics/Define`.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn define_metrics(&self, cluster: &Value) -> Result<Vec<Metric>, Status> {
        let request = DefineMetricsRequest {
            cluster_definition: bytes(cluster),
        };
        Ok(self
            .metrics_service()
            .define(Request::new(request))
            .await?
            .into_inner()
            .metrics)
    }

    /// `Metrics/Collect`.
    ///
    /// # Errors
    ///
    /// The `Status` the plugin answers.
    pub async fn collect_metrics(&self, cluster: &Value) -> Result<Vec<CollectMetric>, Status> {
        let request = CollectMetricsRequest {
            cluster_definition: bytes(cluster),
        };
        Ok(self
            .metrics_service()
            .collect(Request::new(request))
            .await?
            .into_inner()
            .metrics)
    }
}
