//! The Operator service of a declarative plugin: validation, defaults,
//! status, deregistration.

use std::sync::Arc;

use cnpgi_proto::operator::v1::{
    DeregisterRequest, DeregisterResponse, OperatorCapabilitiesRequest, OperatorCapabilitiesResult,
    OperatorMutateClusterRequest, OperatorMutateClusterResult, OperatorValidateClusterChangeRequest,
    OperatorValidateClusterChangeResult, OperatorValidateClusterCreateRequest, OperatorValidateClusterCreateResult,
    SetStatusInClusterRequest, SetStatusInClusterResponse, ValidationError, operator_server,
};
use serde::Serialize;
use serde_json::{Map, Value};
use tonic::{Request, Response, Status};

use super::{AsyncHandler, BoxedHandler, Plugin, Shared, boxed};
use crate::{
    capabilities::{OperatorRpc, operator_rpc},
    cluster::{Cluster, decode_cluster},
    parameters::Parameters,
    patch,
    status::{self, StatusError},
};

type Validate<P> = Arc<dyn Fn(&Cluster, &P) -> Vec<ValidationError> + Send + Sync>;
type ValidateChange<P> = Arc<dyn Fn(&Cluster, &P, &Cluster, &P) -> Vec<ValidationError> + Send + Sync>;
type ValidateCluster = Arc<dyn Fn(&Cluster) -> Vec<ValidationError> + Send + Sync>;
type Mutate<P> = Arc<dyn Fn(&Cluster, &P, &mut Value) -> Result<(), Status> + Send + Sync>;
type SetStatus = Arc<dyn Fn(&Cluster) -> Result<Value, Status> + Send + Sync>;

/// The Operator handlers registered.
pub(super) struct Handlers<P> {
    validate_create: Option<Validate<P>>,
    validate_change: Option<ValidateChange<P>>,
    validate_cluster: Option<ValidateCluster>,
    mutate: Option<Mutate<P>>,
    set_status: Option<SetStatus>,
    deregister: Option<BoxedHandler<Cluster, ()>>,
}

impl<P: Parameters> super::Registered for Handlers<P> {
    fn registered(&self) -> bool {
        !rpcs::<P>(self).is_empty()
    }
}

impl<P> Default for Handlers<P> {
    fn default() -> Self {
        Self {
            validate_create: None,
            validate_change: None,
            validate_cluster: None,
            mutate: None,
            set_status: None,
            deregister: None,
        }
    }
}

/// The RPCs advertised, in the protocol's order: the validations when the
/// parameters validate anything or a validation handler is registered, `MutateCluster`
/// when a parameter has a default or a handler is registered, the others
/// when their handler is.
pub(super) fn rpcs<P: Parameters>(handlers: &Handlers<P>) -> Vec<OperatorRpc> {
    let validates = P::validates() || handlers.validate_cluster.is_some();
    [
        (
            OperatorRpc::ValidateClusterCreate,
            validates || handlers.validate_create.is_some(),
        ),
        (
            OperatorRpc::ValidateClusterChange,
            validates || handlers.validate_change.is_some(),
        ),
        (
            OperatorRpc::MutateCluster,
            P::has_defaults() || handlers.mutate.is_some(),
        ),
        (OperatorRpc::SetStatusInCluster, handlers.set_status.is_some()),
        (OperatorRpc::Deregister, handlers.deregister.is_some()),
    ]
    .into_iter()
    .filter_map(|(rpc, registered)| registered.then_some(rpc))
    .collect()
}

impl<P: Parameters> Plugin<P> {
    /// More checks of a new Cluster, run once its parameters are valid (their
    /// own errors need no handler). Build errors with
    /// [`validation::parameter_error`](crate::validation::parameter_error) or
    /// [`validation::error`](crate::validation::error).
    pub fn validate_create(
        mut self,
        handler: impl Fn(&Cluster, &P) -> Vec<ValidationError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.operator.validate_create = Some(Arc::new(handler));
        self
    }

    /// More checks of a change, `(old, its parameters, new, its parameters)`,
    /// run once both sides' parameters are valid (the new parameters' errors
    /// and changes of `immutable` ones need no handler).
    pub fn validate_change(
        mut self,
        handler: impl Fn(&Cluster, &P, &Cluster, &P) -> Vec<ValidationError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.operator.validate_change = Some(Arc::new(handler));
        self
    }

    /// Checks of the whole Cluster, on creation and on every change (of the
    /// new Cluster), for a plugin whose configuration is more than its
    /// `spec.plugins` entry: it runs whenever the Cluster names this plugin,
    /// in `spec.plugins` or as the `plugin` of one of its
    /// `spec.externalClusters` (a recovery or replica source, which
    /// CloudNativePG also asks to validate), and its errors follow those of
    /// the parameters and of the other validation handlers.
    pub fn validate_cluster(
        mut self,
        handler: impl Fn(&Cluster) -> Vec<ValidationError> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.operator.validate_cluster = Some(Arc::new(handler));
        self
    }

    /// Changes to a Cluster that enables this plugin, made on its JSON (as
    /// received, with the parameter defaults already written back); the SDK
    /// answers the JSON patch. Not called while the parameters are invalid:
    /// validation reports them.
    pub fn mutate_cluster(
        mut self,
        handler: impl Fn(&Cluster, &P, &mut Value) -> Result<(), Status> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.operator.mutate = Some(Arc::new(handler));
        self
    }

    /// The status this plugin reports in the Cluster's `status.pluginStatus`
    /// entry (anything that serializes to a JSON object). The SDK answers
    /// "no change" when it equals the stored one, and, as upstream's plugins,
    /// `FAILED_PRECONDITION` when the operator has not written this plugin's
    /// entry before calling.
    pub fn set_status<S: Serialize>(
        mut self,
        handler: impl Fn(&Cluster) -> Result<S, Status> + Send + Sync + 'static,
    ) -> Self {
        self.handlers.operator.set_status = Some(Arc::new(move |cluster| {
            let wanted = handler(cluster)?;
            serde_json::to_value(&wanted).map_err(|e| StatusError::Serialize(e).into())
        }));
        self
    }

    /// Cleans up after a Cluster that stops using the plugin (`Deregister`).
    pub fn deregister(mut self, handler: impl AsyncHandler<Cluster, ()>) -> Self {
        self.handlers.operator.deregister = Some(boxed(handler));
        self
    }
}

/// The Operator service of a [`Plugin`], dispatching to its handlers.
pub struct OperatorService<P>(pub(super) Arc<Shared<P>>);

impl<P: Parameters> OperatorService<P> {
    fn handlers(&self) -> &Handlers<P> {
        &self.0.handlers.operator
    }

    /// The errors of the [`Plugin::validate_cluster`] handler, when the
    /// Cluster names this plugin.
    fn validate_cluster(&self, cluster: &Cluster) -> Vec<ValidationError> {
        let name = &self.0.name;
        match &self.handlers().validate_cluster {
            Some(validate)
                if self.0.entry(cluster).is_some() || super::external_cluster_parameters(cluster, name).is_some() =>
            {
                validate(cluster)
            }
            _ => Vec::new(),
        }
    }

    fn require(&self, rpc: OperatorRpc) -> Result<(), Status> {
        if rpcs(self.handlers()).contains(&rpc) {
            Ok(())
        } else {
            Err(Status::unimplemented(format!(
                "{} is not implemented by this plugin",
                rpc.as_str_name()
            )))
        }
    }
}

#[tonic::async_trait]
impl<P: Parameters> operator_server::Operator for OperatorService<P> {
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        let capabilities = rpcs(self.handlers()).into_iter().map(operator_rpc).collect();
        Ok(Response::new(OperatorCapabilitiesResult { capabilities }))
    }

    async fn validate_cluster_create(
        &self,
        request: Request<OperatorValidateClusterCreateRequest>,
    ) -> Result<Response<OperatorValidateClusterCreateResult>, Status> {
        self.require(OperatorRpc::ValidateClusterCreate)?;
        let cluster = decode_cluster(&request.into_inner().definition)?;
        // A Cluster that does not list this plugin is not its business.
        let mut validation_errors = match self.0.entry(&cluster) {
            None => Vec::new(),
            Some(entry) => match P::parse(entry.index, &entry.parameters) {
                Err(errors) => errors,
                Ok(parameters) => self
                    .handlers()
                    .validate_create
                    .as_ref()
                    .map(|validate| validate(&cluster, &parameters))
                    .unwrap_or_default(),
            },
        };
        validation_errors.extend(self.validate_cluster(&cluster));
        Ok(Response::new(OperatorValidateClusterCreateResult { validation_errors }))
    }

    async fn validate_cluster_change(
        &self,
        request: Request<OperatorValidateClusterChangeRequest>,
    ) -> Result<Response<OperatorValidateClusterChangeResult>, Status> {
        self.require(OperatorRpc::ValidateClusterChange)?;
        let request = request.into_inner();
        let old = decode_cluster(&request.old_cluster)?;
        let new = decode_cluster(&request.new_cluster)?;
        let Some(entry) = self.0.entry(&new) else {
            let validation_errors = self.validate_cluster(&new);
            return Ok(Response::new(OperatorValidateClusterChangeResult { validation_errors }));
        };
        let parsed = P::parse(entry.index, &entry.parameters);
        let mut validation_errors = parsed.as_ref().err().cloned().unwrap_or_default();
        // Nothing is fixed yet when the plugin is being enabled.
        let old_entry = self.0.entry(&old);
        if let Some(old_entry) = &old_entry {
            validation_errors.extend(P::check_change(entry.index, &old_entry.parameters, &entry.parameters));
        }
        if let (Some(validate), Ok(parameters)) = (&self.handlers().validate_change, &parsed) {
            let old_parameters = match old_entry {
                Some(old_entry) => P::parse(old_entry.index, &old_entry.parameters),
                None => P::parse(0, &Default::default()),
            };
            if let Ok(old_parameters) = old_parameters {
                validation_errors.extend(validate(&old, &old_parameters, &new, parameters));
            }
        }
        validation_errors.extend(self.validate_cluster(&new));
        Ok(Response::new(OperatorValidateClusterChangeResult { validation_errors }))
    }

    async fn mutate_cluster(
        &self,
        request: Request<OperatorMutateClusterRequest>,
    ) -> Result<Response<OperatorMutateClusterResult>, Status> {
        self.require(OperatorRpc::MutateCluster)?;
        let definition = request.into_inner().definition;
        let cluster = decode_cluster(&definition)?;
        let Some(entry) = self.0.entry(&cluster) else {
            return Ok(Response::new(OperatorMutateClusterResult::default()));
        };
        // The JSON as received is what the patch applies to, so that fields
        // the Cluster view does not type can never show up in the patch.
        let original: Value = serde_json::from_slice(&definition)
            .map_err(|e| Status::invalid_argument(format!("cannot decode Cluster: {e}")))?;
        let mut mutated = original.clone();
        let filled = P::with_defaults(&entry.parameters);
        // Written back only where CloudNativePG's layout keeps them.
        if self.0.layout.is_none() && filled != *entry.parameters {
            let params = parameters_object(&mut mutated, entry.index)?;
            for (name, value) in &filled {
                if entry.parameters.get(name) != Some(value) {
                    params.insert(name.clone(), Value::String(value.clone()));
                }
            }
        }
        if let Some(mutate) = &self.handlers().mutate
            && let Ok(parameters) = P::parse(entry.index, &filled)
        {
            mutate(&cluster, &parameters, &mut mutated)?;
        }
        let json_patch = patch::patch_bytes(&original, &mutated)
            .map_err(|e| Status::internal(format!("cannot encode the JSON patch: {e}")))?;
        Ok(Response::new(OperatorMutateClusterResult { json_patch }))
    }

    async fn set_status_in_cluster(
        &self,
        request: Request<SetStatusInClusterRequest>,
    ) -> Result<Response<SetStatusInClusterResponse>, Status> {
        self.require(OperatorRpc::SetStatusInCluster)?;
        let cluster = decode_cluster(&request.into_inner().cluster)?;
        let name = &self.0.name;
        let previous = match &self.0.layout {
            None => {
                let entry = cluster.plugin_status(name).ok_or_else(|| {
                    Status::failed_precondition(format!(
                        "plugin entry not found: status.pluginStatus has no entry named {name}"
                    ))
                })?;
                entry.status_json().ok().flatten()
            }
            Some(layout) => {
                let resource = cluster
                    .to_json_value()
                    .map_err(|e| Status::internal(format!("cannot re-encode the resource: {e}")))?;
                let previous = layout.previous_statuses(&resource).remove(name.as_str());
                previous.and_then(|status| serde_json::from_str::<Value>(&status).ok())
            }
        };
        let Some(set_status) = &self.handlers().set_status else {
            return Ok(Response::new(status::no_op()));
        };
        let wanted = set_status(&cluster)?;
        if previous.as_ref() == Some(&wanted) {
            return Ok(Response::new(status::no_op()));
        }
        Ok(Response::new(status::json_status(&wanted)?))
    }

    async fn deregister(&self, request: Request<DeregisterRequest>) -> Result<Response<DeregisterResponse>, Status> {
        self.require(OperatorRpc::Deregister)?;
        let cluster = decode_cluster(&request.into_inner().definition)?;
        if let Some(deregister) = &self.handlers().deregister {
            deregister(cluster).await?;
        }
        Ok(Response::new(DeregisterResponse {}))
    }
}

/// `spec.plugins[index].parameters` of the Cluster JSON, created when missing
/// or `null`.
fn parameters_object(cluster: &mut Value, index: usize) -> Result<&mut Map<String, Value>, Status> {
    let entry = cluster
        .pointer_mut(&format!("/spec/plugins/{index}"))
        .and_then(Value::as_object_mut)
        .ok_or_else(|| Status::internal("the plugin entry vanished from spec.plugins"))?;
    let params = entry.entry("parameters").or_insert_with(|| Value::Object(Map::new()));
    if params.is_null() {
        *params = Value::Object(Map::new());
    }
    params
        .as_object_mut()
        .ok_or_else(|| Status::invalid_argument("spec.plugins[].parameters is not a JSON object"))
}
