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

/// The hello-world Identity implementation.
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

    /// The plugin implements the Operator and OperatorLifecycle services.
    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: vec![
                service(ServiceType::LifecycleService),
                service(ServiceType::OperatorService),
            ],
        }))
    }

    /// Nothing to wait for: ready as soon as it serves.
    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: true }))
    }
}
