//! The OperatorLifecycle service of a declarative plugin: hooks per group,
//! kind and operation, answered with the patch of what the hook changed.

use std::sync::Arc;

use cnpgi_proto::operator_lifecycle::v1::{
    OperatorLifecycleCapabilities, OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse,
    OperatorLifecycleRequest, OperatorLifecycleResponse, OperatorOperationType, operator_lifecycle_server,
};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::{Plugin, Shared};
use crate::{
    capabilities::{self, Operation},
    cluster::{Cluster, decode_object},
    parameters::Parameters,
    patch,
};

type Hook<P> = Arc<dyn Fn(&Cluster, &P, &mut Value) -> Result<(), Status> + Send + Sync>;

/// One registration: objects of `group`/`kind`, for `operations`.
struct Entry<P> {
    group: String,
    kind: String,
    operations: Vec<Operation>,
    hook: Hook<P>,
}

/// The lifecycle hooks registered, in order.
pub(super) struct Handlers<P> {
    entries: Vec<Entry<P>>,
}

impl<P: Parameters> super::Registered for Handlers<P> {
    fn registered(&self) -> bool {
        !self.is_empty()
    }
}

impl<P> Default for Handlers<P> {
    fn default() -> Self {
        Self { entries: Vec::new() }
    }
}

impl<P> Handlers<P> {
    pub(super) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One capability per group and kind, in the order they were first
    /// registered, with every operation registered for them.
    fn capabilities(&self) -> Vec<OperatorLifecycleCapabilities> {
        let mut merged: Vec<(&str, &str, Vec<Operation>)> = Vec::new();
        for entry in &self.entries {
            let position = merged
                .iter()
                .position(|(group, kind, _)| *group == entry.group && *kind == entry.kind);
            let position = position.unwrap_or_else(|| {
                merged.push((&entry.group, &entry.kind, Vec::new()));
                merged.len() - 1
            });
            merged[position].2.extend(&entry.operations);
        }
        merged
            .into_iter()
            .map(|(group, kind, mut operations)| {
                operations.sort_by_key(|operation| *operation as i32);
                operations.dedup();
                capabilities::lifecycle(group, kind, operations)
            })
            .collect()
    }

    /// The hook for an object and operation: the last one registered.
    fn find(&self, group: &str, kind: &str, operation: Operation) -> Option<&Hook<P>> {
        self.entries
            .iter()
            .rev()
            .find(|entry| entry.group == group && entry.kind == kind && entry.operations.contains(&operation))
            .map(|entry| &entry.hook)
    }
}

/// The API group of an `apiVersion`: `apps` for `apps/v1`, `""` for `v1`.
fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

impl<P: Parameters> Plugin<P> {
    /// A hook on objects of API `group` (`""` for the core group) and `kind`,
    /// for `operations`. It changes the object's JSON (as received, so no
    /// field is ever lost) and the SDK answers the JSON patch; other objects
    /// and operations get "no change". A later registration for the same
    /// object and operation wins.
    ///
    /// `EVALUATE` asks for the patch the plugin would apply to an existing
    /// object (the operator compares it to detect drift): register the same
    /// hook for `CREATE` and `EVALUATE`.
    pub fn lifecycle(
        mut self,
        group: &str,
        kind: &str,
        operations: impl IntoIterator<Item = Operation>,
        hook: impl Fn(&Cluster, &P, &mut Value) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        let operations: Vec<Operation> = operations
            .into_iter()
            .filter(|operation| *operation != Operation::Unspecified)
            .collect();
        if !operations.is_empty() {
            self.handlers.lifecycle.entries.push(Entry {
                group: group.to_owned(),
                kind: kind.to_owned(),
                operations,
                hook: Arc::new(hook),
            });
        }
        self
    }

    /// [`Plugin::lifecycle`] on core-group `Pod`s, such as the instance Pods.
    pub fn lifecycle_pod(
        self,
        operations: impl IntoIterator<Item = Operation>,
        hook: impl Fn(&Cluster, &P, &mut Value) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        self.lifecycle("", "Pod", operations, hook)
    }

    /// [`Plugin::lifecycle`] with the object as a `k8s_openapi` type, e.g.
    /// `lifecycle_typed::<Pod>(…)`; group and kind are the type's.
    ///
    /// The patch is what the hook changed in the typed value, applied to the
    /// object as received: fields the type does not know are kept.
    pub fn lifecycle_typed<K>(
        self,
        operations: impl IntoIterator<Item = Operation>,
        hook: impl Fn(&Cluster, &P, &mut K) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self
    where
        K: k8s_openapi::Resource + Serialize + DeserializeOwned,
    {
        self.lifecycle(K::GROUP, K::KIND, operations, move |cluster, parameters, object| {
            let mut typed: K = serde_json::from_value(object.clone())
                .map_err(|e| Status::invalid_argument(format!("cannot decode the {}: {e}", K::KIND)))?;
            let encode = |typed: &K| {
                serde_json::to_value(typed).map_err(|e| Status::internal(format!("cannot encode the {}: {e}", K::KIND)))
            };
            let before = encode(&typed)?;
            hook(cluster, parameters, &mut typed)?;
            let changes = patch::create_patch(&before, &encode(&typed)?);
            patch::apply_patch(object, &changes).map_err(|e| {
                Status::internal(format!(
                    "the changes to the {} do not apply to it as received: {e}",
                    K::KIND
                ))
            })
        })
    }
}

/// The OperatorLifecycle service of a [`Plugin`], dispatching to its hooks.
pub struct LifecycleService<P>(pub(super) Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Parameters> operator_lifecycle_server::OperatorLifecycle for LifecycleService<P> {
    async fn get_capabilities(
        &self,
        _: Request<OperatorLifecycleCapabilitiesRequest>,
    ) -> Result<Response<OperatorLifecycleCapabilitiesResponse>, Status> {
        Ok(Response::new(OperatorLifecycleCapabilitiesResponse {
            lifecycle_capabilities: self.0.handlers.lifecycle.capabilities(),
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
        let mut object = decode_object(&request.object_definition, "object")?;
        let text = |field| object.get(field).and_then(Value::as_str).unwrap_or_default();
        let Some(hook) = self
            .0
            .handlers
            .lifecycle
            .find(group_of(text("apiVersion")), text("kind"), operation)
        else {
            // Not this plugin's business: no change.
            return Ok(Response::new(OperatorLifecycleResponse::default()));
        };
        let decoded = self.0.decoded(&request.cluster_definition)?;
        // The hook edits the one decoded copy; the patch is read against the
        // bytes received (no second copy to keep, compare and drop).
        hook(&decoded.cluster, &decoded.parameters, &mut object)?;
        let json_patch = patch::patch_bytes_from_json(&request.object_definition, &object)
            .map_err(|e| Status::internal(format!("cannot make the JSON patch: {e}")))?;
        Ok(Response::new(OperatorLifecycleResponse { json_patch }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_of_api_versions() {
        assert_eq!(group_of("v1"), "");
        assert_eq!(group_of("apps/v1"), "apps");
        assert_eq!(group_of("postgresql.cnpg.io/v1"), "postgresql.cnpg.io");
        assert_eq!(group_of(""), "");
    }
}
