//! The Postgres service of a declarative plugin: `EnrichConfiguration`.

use std::{collections::HashMap, sync::Arc};

use cnpgi_proto::identity::v1::{
    EnrichConfigurationRequest, EnrichConfigurationResult, OperationType, PostgresCapabilitiesRequest,
    PostgresCapabilitiesResult, postgres_server,
};
use tonic::{Request, Response, Status};

use super::{Plugin, Shared};
use crate::{
    cluster::{Cluster, decode_cluster},
    lowlevel::enrich,
    parameters::Parameters,
};

/// Why the configuration is written (`OperationType.Type`): `Init`,
/// `Restore`, `Upgrade` (in Jobs) or `Reconcile` (in instances).
pub use cnpgi_proto::identity::v1::operation_type::Type as PostgresOperation;

/// The handler, once registered.
pub(super) type Handlers<P> = Option<Handler<P>>;

pub(super) type Handler<P> =
    Arc<dyn Fn(&Cluster, &P, PostgresOperation, &mut HashMap<String, String>) -> Result<(), Status> + Send + Sync>;

impl<P: Parameters> Plugin<P> {
    /// Edits the PostgreSQL configuration the instance manager is about to
    /// write. The handler gets the complete map CloudNativePG computed and
    /// changes it in place; the SDK answers the complete result (an answer
    /// replaces the whole map), or "no change".
    pub fn enrich_configuration(
        mut self,
        handler: impl Fn(&Cluster, &P, PostgresOperation, &mut HashMap<String, String>) -> Result<(), Status>
        + Send
        + Sync
        + 'static,
    ) -> Self {
        self.handlers.postgres = Some(Arc::new(handler));
        self
    }
}

/// The Postgres service of a [`Plugin`], dispatching to its handler.
pub struct PostgresService<P>(pub(super) Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Parameters> postgres_server::Postgres for PostgresService<P> {
    async fn get_capabilities(
        &self,
        _: Request<PostgresCapabilitiesRequest>,
    ) -> Result<Response<PostgresCapabilitiesResult>, Status> {
        Ok(Response::new(enrich::capabilities()))
    }

    async fn enrich_configuration(
        &self,
        request: Request<EnrichConfigurationRequest>,
    ) -> Result<Response<EnrichConfigurationResult>, Status> {
        let handler = self
            .0
            .handlers
            .postgres
            .as_ref()
            .ok_or_else(|| Status::unimplemented("EnrichConfiguration is not implemented by this plugin"))?;
        let request = request.into_inner();
        let cluster = decode_cluster(&request.cluster_definition)?;
        let parameters = self.0.parameters(&cluster)?;
        let operation = request
            .operation_type
            .as_ref()
            .map_or(PostgresOperation::Unspecified, OperationType::r#type);
        let mut outcome = Ok(());
        let answer = enrich::enrich(&request.configs, |configs| {
            outcome = handler(&cluster, &parameters, operation, configs);
        });
        outcome?;
        Ok(Response::new(answer))
    }
}
