//! The Operator service: validate, default, and report status.

use cnpgi_pluginhelper::{
    capabilities::{OperatorRpc, operator_rpc as rpc},
    cluster::decode_cluster,
    patch,
    proto::operator::v1::{
        OperatorCapabilitiesRequest, OperatorCapabilitiesResult, OperatorMutateClusterRequest,
        OperatorMutateClusterResult, OperatorValidateClusterChangeRequest, OperatorValidateClusterChangeResult,
        OperatorValidateClusterCreateRequest, OperatorValidateClusterCreateResult, SetStatusInClusterRequest,
        SetStatusInClusterResponse, operator_server,
    },
    status,
};
use serde_json::{Map, Value};
use tonic::{Request, Response, Status};

use crate::{
    config::{self, Configuration, schema},
    metadata::PLUGIN_NAME,
};

/// The hello-world Operator implementation.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

#[tonic::async_trait]
impl operator_server::Operator for Operator {
    /// Advertises every RPC implemented below; `Deregister` is not, and
    /// answers `UNIMPLEMENTED`.
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        Ok(Response::new(OperatorCapabilitiesResult {
            capabilities: vec![
                rpc(OperatorRpc::ValidateClusterCreate),
                rpc(OperatorRpc::ValidateClusterChange),
                rpc(OperatorRpc::MutateCluster),
                rpc(OperatorRpc::SetStatusInCluster),
            ],
        }))
    }

    /// A new Cluster must have well-formed parameters.
    async fn validate_cluster_create(
        &self,
        request: Request<OperatorValidateClusterCreateRequest>,
    ) -> Result<Response<OperatorValidateClusterCreateResult>, Status> {
        let cluster = decode_cluster(&request.into_inner().definition)?;
        let validation_errors = Configuration::from_cluster(&cluster).err().unwrap_or_default();
        Ok(Response::new(OperatorValidateClusterCreateResult { validation_errors }))
    }

    /// A changed Cluster must have well-formed parameters and the same labels.
    async fn validate_cluster_change(
        &self,
        request: Request<OperatorValidateClusterChangeRequest>,
    ) -> Result<Response<OperatorValidateClusterChangeResult>, Status> {
        let request = request.into_inner();
        let old = decode_cluster(&request.old_cluster)?;
        let new = decode_cluster(&request.new_cluster)?;
        let validation_errors = config::validate_change(&old, &new);
        Ok(Response::new(OperatorValidateClusterChangeResult { validation_errors }))
    }

    /// Writes the default of every missing parameter back into the Cluster,
    /// so that the stored object shows the configuration in force. Malformed
    /// parameters are left for validation to report.
    async fn mutate_cluster(
        &self,
        request: Request<OperatorMutateClusterRequest>,
    ) -> Result<Response<OperatorMutateClusterResult>, Status> {
        let definition = request.into_inner().definition;
        let cluster = decode_cluster(&definition)?;
        let Some(entry) = cluster.plugin(PLUGIN_NAME) else {
            return Ok(Response::new(OperatorMutateClusterResult::default()));
        };
        let defaulted = schema().with_defaults(entry.parameters());

        // Patch the JSON as received, so that fields this plugin does not
        // know about can never show up in the patch.
        let original: Value = serde_json::from_slice(&definition)
            .map_err(|e| Status::invalid_argument(format!("cannot decode Cluster: {e}")))?;
        let mut mutated = original.clone();
        let plugin = mutated
            .pointer_mut(&format!("/spec/plugins/{}", entry.index))
            .and_then(Value::as_object_mut)
            .ok_or_else(|| Status::internal("the plugin entry vanished from spec.plugins"))?;
        let parameters = defaulted
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect::<Map<_, _>>();
        plugin.insert("parameters".into(), Value::Object(parameters));

        let json_patch = patch::patch_bytes(&original, &mutated)
            .map_err(|e| Status::internal(format!("cannot encode the JSON patch: {e}")))?;
        Ok(Response::new(OperatorMutateClusterResult { json_patch }))
    }

    /// Reports `{"enabled": true}` once; afterwards leaves the entry as it is.
    /// As upstream, the operator must have written this plugin's
    /// `status.pluginStatus` entry before calling (CloudNativePG does).
    async fn set_status_in_cluster(
        &self,
        request: Request<SetStatusInClusterRequest>,
    ) -> Result<Response<SetStatusInClusterResponse>, Status> {
        let cluster = decode_cluster(&request.into_inner().cluster)?;
        let entry = cluster.plugin_status(PLUGIN_NAME).ok_or_else(|| {
            Status::failed_precondition(format!(
                "plugin entry not found: status.pluginStatus has no entry named {PLUGIN_NAME}"
            ))
        })?;
        let enabled = entry
            .status_json()
            .ok()
            .flatten()
            .and_then(|status| status.get("enabled").and_then(Value::as_bool))
            .unwrap_or(false);
        if enabled {
            return Ok(Response::new(status::no_op()));
        }
        Ok(Response::new(status::json_status(
            &serde_json::json!({ "enabled": true }),
        )?))
    }
}
