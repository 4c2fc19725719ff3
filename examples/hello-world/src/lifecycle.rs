//! The OperatorLifecycle service: patch each instance Pod before it is
//! created (and tell, on EVALUATE, what the patch would be today).

use cnpgi_pluginhelper::{
    capabilities::{Operation, lifecycle},
    cluster::{decode_cluster, decode_object},
    patch,
    proto::operator_lifecycle::v1::{
        OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse, OperatorLifecycleRequest,
        OperatorLifecycleResponse, OperatorOperationType, operator_lifecycle_server,
    },
    sidecar::{SidecarOptions, inject_sidecar},
    validation,
};
use k8s_openapi::api::core::v1::Container;
use serde_json::{Map, Value};
use tonic::{Request, Response, Status};

use crate::config::Configuration;

/// Image of the sidecar the plugin adds. Upstream's hello-world uses
/// `pause:3.5`; this one uses the current release, which runs as a non-root
/// user, so that the Pod also passes the `restricted` Pod Security Standard.
pub const PAUSER_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// The hello-world OperatorLifecycle implementation.
#[derive(Debug, Clone, Copy)]
pub struct Lifecycle;

#[tonic::async_trait]
impl operator_lifecycle_server::OperatorLifecycle for Lifecycle {
    /// Core-group Pods, on CREATE and EVALUATE.
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
        let operation = request
            .operation_type
            .as_ref()
            .map(OperatorOperationType::r#type)
            .ok_or_else(|| Status::invalid_argument("operation_type is required"))?;
        let object = decode_object(&request.object_definition, "object")?;
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
        match (kind, operation) {
            ("Pod", Operation::Create | Operation::Evaluate) => {
                let json_patch = patch_pod(&request.cluster_definition, object)?;
                Ok(Response::new(OperatorLifecycleResponse { json_patch }))
            }
            // Anything else is not this plugin's business: no change.
            _ => Ok(Response::new(OperatorLifecycleResponse::default())),
        }
    }
}

/// Adds the configured labels and annotations and the `pauser` sidecar.
fn patch_pod(cluster_definition: &[u8], pod: Value) -> Result<Vec<u8>, Status> {
    let cluster = decode_cluster(cluster_definition)?;
    let configuration = Configuration::from_cluster(&cluster).map_err(|errors| validation::to_status(&errors))?;

    let mut mutated = pod.clone();
    let root = mutated
        .as_object_mut()
        .ok_or_else(|| Status::invalid_argument("the Pod is not a JSON object"))?;
    let metadata = child_object(root, "metadata")?;
    for (field, values) in [
        ("labels", &configuration.labels),
        ("annotations", &configuration.annotations),
    ] {
        let map = child_object(metadata, field)?;
        for (key, value) in values {
            map.insert(key.clone(), Value::String(value.clone()));
        }
    }

    let pauser = Container {
        name: "pauser".into(),
        image: Some(PAUSER_IMAGE.into()),
        ..Container::default()
    };
    inject_sidecar(&mut mutated, &pauser, SidecarOptions::default())?;

    patch::patch_bytes(&pod, &mutated).map_err(|e| Status::internal(format!("cannot encode the JSON patch: {e}")))
}

/// The object under `field`, created when missing or `null`.
fn child_object<'a>(object: &'a mut Map<String, Value>, field: &str) -> Result<&'a mut Map<String, Value>, Status> {
    let entry = object.entry(field).or_insert_with(|| Value::Object(Map::new()));
    if entry.is_null() {
        *entry = Value::Object(Map::new());
    }
    entry
        .as_object_mut()
        .ok_or_else(|| Status::invalid_argument(format!("the Pod's {field} is not a JSON object")))
}
