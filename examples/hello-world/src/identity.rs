//! The Identity service: name, capabilities, readiness.

use cnpgi_pluginhelper::proto::identity::v1::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginMetadataRequest, GetPluginMetadataResponse,
    PluginCapability, ProbeRequest, ProbeResponse, identity_server, plugin_capability,
};
use tonic::{Request, Response, Status};

use crate::metadata;

/// The hello-world Identity implementation.
#[derive(Debug, Clone, Copy)]
pub struct Identity;

fn service(kind: plugin_capability::service::Type) -> PluginCapability {
    PluginCapability {
        r#type: Some(plugin_capability::Type::Service(plugin_capability::Service {
            r#type: kind.into(),
        })),
    }
}

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
                service(plugin_capability::service::Type::LifecycleService),
                service(plugin_capability::service::Type::OperatorService),
            ],
        }))
    }

    /// Nothing to wait for: ready as soon as it serves.
    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: true }))
    }
}
