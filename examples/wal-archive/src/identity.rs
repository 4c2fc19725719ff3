//! The Identity service: name, capabilities, readiness.

use cnpgi_pluginhelper::{
    capabilities::{ServiceType, service},
    proto::identity::v1::{
        GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginMetadataRequest,
        GetPluginMetadataResponse, ProbeRequest, ProbeResponse, identity_server,
    },
};
use tonic::{Request, Response, Status};

use crate::metadata;

/// The services this plugin implements. One binary plays both sides: the
/// operator calls Operator and OperatorLifecycle (validation, sidecar
/// injection); the instance manager calls WAL, Backup and Metrics on the
/// sidecar in each instance Pod, and RestoreJobHooks on the sidecar in the
/// recovery Job. `TYPE_INSTANCE_SIDECAR_INJECTION` tells CloudNativePG that
/// instance Pods carry the plugin as a sidecar (so their metrics are
/// collected).
pub const SERVICES: [ServiceType; 7] = [
    ServiceType::OperatorService,
    ServiceType::LifecycleService,
    ServiceType::WalService,
    ServiceType::BackupService,
    ServiceType::RestoreJob,
    ServiceType::Metrics,
    ServiceType::InstanceSidecarInjection,
];

/// The Identity implementation.
#[derive(Debug, Clone, Copy)]
pub struct Identity;

#[tonic::async_trait]
impl identity_server::Identity for Identity {
    async fn get_plugin_metadata(
        &self,
        _: Request<GetPluginMetadataRequest>,
    ) -> Result<Response<GetPluginMetadataResponse>, Status> {
        Ok(Response::new(metadata::metadata()))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: SERVICES.into_iter().map(service).collect(),
        }))
    }

    /// Ready as soon as it serves: every call opens the store it needs.
    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: true }))
    }
}
