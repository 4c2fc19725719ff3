//! The Operator service: parameter validation.
//!
//! `ValidateClusterCreate` and `ValidateClusterChange` report every bad
//! parameter of the Cluster's `spec.plugins[]` entry and of the external
//! clusters that use this plugin, on the field the user wrote
//! ([`crate::parameters::validate`]). A change may not move the archive of
//! a running cluster to another `serverName` or `destinationPath` silently:
//! that is allowed (a new archive starts, which the empty-archive check then
//! guards), so it is not refused here either.

use cnpgi_pluginhelper::{
    capabilities::{OperatorRpc, operator_rpc as rpc},
    cluster::decode_cluster,
    proto::operator::v1::{
        OperatorCapabilitiesRequest, OperatorCapabilitiesResult, OperatorValidateClusterChangeRequest,
        OperatorValidateClusterChangeResult, OperatorValidateClusterCreateRequest, OperatorValidateClusterCreateResult,
        operator_server,
    },
};
use tonic::{Request, Response, Status};

use crate::parameters;

/// The Operator implementation.
#[derive(Debug, Clone, Copy)]
pub struct Operator;

#[tonic::async_trait]
impl operator_server::Operator for Operator {
    /// Validation only; the other RPCs answer `UNIMPLEMENTED`.
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        Ok(Response::new(OperatorCapabilitiesResult {
            capabilities: vec![
                rpc(OperatorRpc::ValidateClusterCreate),
                rpc(OperatorRpc::ValidateClusterChange),
            ],
        }))
    }

    async fn validate_cluster_create(
        &self,
        request: Request<OperatorValidateClusterCreateRequest>,
    ) -> Result<Response<OperatorValidateClusterCreateResult>, Status> {
        let cluster = decode_cluster(&request.into_inner().definition)?;
        Ok(Response::new(OperatorValidateClusterCreateResult {
            validation_errors: parameters::validate(&cluster),
        }))
    }

    async fn validate_cluster_change(
        &self,
        request: Request<OperatorValidateClusterChangeRequest>,
    ) -> Result<Response<OperatorValidateClusterChangeResult>, Status> {
        let request = request.into_inner();
        // The old Cluster must at least decode; only the new one is judged.
        decode_cluster(&request.old_cluster)?;
        let cluster = decode_cluster(&request.new_cluster)?;
        Ok(Response::new(OperatorValidateClusterChangeResult {
            validation_errors: parameters::validate(&cluster),
        }))
    }
}
