//! A minimal CNPG-I plugin on the SDK's low-level API: the Identity and
//! OperatorLifecycle services written by hand as tonic services, served by
//! `create_main_cmd`. It labels every instance Pod `example.com/low-level:
//! "true"`.
//!
//! Everything the declarative `cnpgi_pluginhelper::plugin::Plugin` does for
//! you is done here by hand: the capabilities (kept in step with the
//! services registered), decoding, dispatch on kind and operation, and the
//! JSON patch. Write a plugin this way when you need full control of the
//! gRPC services; otherwise see `examples/hello-world`. The other services
//! written by hand find their `GetCapabilities` answers and the rules of
//! their answers (WAL file names, metric definitions, hook answers,
//! `EnrichConfiguration`) in [`cnpgi_pluginhelper::lowlevel`].

#![forbid(unsafe_code)]

use cnpgi_pluginhelper::{
    PluginCommand,
    capabilities::{Operation, ServiceType, lifecycle, service},
    cluster::decode_object,
    create_main_cmd,
    object::object_mut,
    patch,
    proto::{
        identity::v1::{
            GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginMetadataRequest,
            GetPluginMetadataResponse, ProbeRequest, ProbeResponse, identity_server,
        },
        operator_lifecycle::v1::{
            OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse, OperatorLifecycleRequest,
            OperatorLifecycleResponse, operator_lifecycle_server,
        },
    },
    transport::PluginServer,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

/// The plugin name.
pub const PLUGIN_NAME: &str = "low-level.cnpgi.example.com";
/// The label added to every instance Pod.
pub const LABEL: &str = "example.com/low-level";

/// The Identity service: who the plugin is and which services it serves.
#[derive(Debug, Clone, Copy)]
pub struct Identity;

#[tonic::async_trait]
impl identity_server::Identity for Identity {
    async fn get_plugin_metadata(
        &self,
        _: Request<GetPluginMetadataRequest>,
    ) -> Result<Response<GetPluginMetadataResponse>, Status> {
        Ok(Response::new(GetPluginMetadataResponse {
            name: PLUGIN_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            display_name: "Low-level example".into(),
            ..Default::default()
        }))
    }

    /// Must list exactly the services `register` adds.
    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: vec![service(ServiceType::LifecycleService)],
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: true }))
    }
}

/// The OperatorLifecycle service: labels Pods on CREATE and EVALUATE.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle;

#[tonic::async_trait]
impl operator_lifecycle_server::OperatorLifecycle for Lifecycle {
    async fn get_capabilities(
        &self,
        _: Request<OperatorLifecycleCapabilitiesRequest>,
    ) -> Result<Response<OperatorLifecycleCapabilitiesResponse>, Status> {
        Ok(Response::new(OperatorLifecycleCapabilitiesResponse {
            lifecycle_capabilities: vec![lifecycle("", "Pod", [Operation::Create, Operation::Evaluate])],
        }))
    }

    async fn lifecycle_hook(
        &self,
        request: Request<OperatorLifecycleRequest>,
    ) -> Result<Response<OperatorLifecycleResponse>, Status> {
        let request = request.into_inner();
        let operation = request.operation_type.map(|o| o.r#type());
        let pod = decode_object(&request.object_definition, "object")?;
        let is_pod = pod.get("kind").and_then(Value::as_str) == Some("Pod");
        if !is_pod || !matches!(operation, Some(Operation::Create | Operation::Evaluate)) {
            return Ok(Response::new(OperatorLifecycleResponse::default()));
        }
        let mut labelled = pod.clone();
        object_mut(&mut labelled, &["metadata", "labels"])?.insert(LABEL.into(), "true".into());
        let json_patch = patch::patch_bytes(&pod, &labelled).map_err(|e| Status::internal(e.to_string()))?;
        Ok(Response::new(OperatorLifecycleResponse { json_patch }))
    }
}

fn register(routes: &mut cnpgi_pluginhelper::tonic::service::RoutesBuilder) {
    routes.add_service(operator_lifecycle_server::OperatorLifecycleServer::new(Lifecycle));
}

/// The `plugin` command of the binary.
pub fn command() -> PluginCommand<Identity> {
    create_main_cmd(Identity, register)
}

/// The plugin as a server, for in-process tests.
pub fn server() -> PluginServer<Identity> {
    PluginServer::new(Identity).register(register)
}
