//! The RestoreJobHooks service of a declarative plugin: filling PGDATA in
//! the recovery Job.

use std::sync::Arc;

use cnpgi_proto::wal::v1::{
    RestoreJobHooksCapabilitiesRequest, RestoreJobHooksCapabilitiesResult, RestoreRequest, RestoreResponse,
    restore_job_hooks_capability::Kind, restore_job_hooks_server,
};
use tonic::{Request, Response, Status};

use super::{AsyncHandler, AsyncRpc, Plugin, Shared};
use crate::{
    capabilities::restore_job_hook,
    cluster::{Cluster, decode_cluster},
    parameters::Parameters,
    service,
};

/// What the restore hook receives.
#[derive(Debug, Clone)]
pub struct RestoreJobCall<P> {
    /// The Cluster being bootstrapped.
    pub cluster: Cluster,
    /// This plugin's parameters: its `spec.plugins` entry, else the
    /// `plugin` of the external cluster that names it (the recovery source).
    pub parameters: P,
    /// Whether to refuse restoring into a non-empty WAL archive (unset by
    /// CloudNativePG 1.29).
    pub check_empty_wal_archive: Option<bool>,
}

/// The restore hook, once registered.
pub(super) type Handlers<P> = AsyncRpc<RestoreJobCall<P>, RestoreResponse>;

impl<P: Parameters> Plugin<P> {
    /// Restores PGDATA in the `full-recovery` Job, then answers the lines to
    /// append to the configuration (`restore_config`) and the environment of
    /// the recovering PostgreSQL (`envs`, `K=V`).
    pub fn restore_job(mut self, handler: impl AsyncHandler<RestoreJobCall<P>, RestoreResponse>) -> Self {
        self.handlers.restore_job.register(handler);
        self
    }
}

impl<P: Parameters> RestoreJobCall<P> {
    /// The call a `Restore` request makes, with this plugin's parameters
    /// where a recovery source has them.
    fn decode(shared: &Shared<P>, request: RestoreRequest) -> Result<Self, Status> {
        let cluster = decode_cluster(&request.cluster_definition)?;
        let parameters = shared.parameters_for(&service::restore_job::RESTORE, &cluster, &Default::default())?;
        Ok(Self {
            cluster,
            parameters,
            check_empty_wal_archive: request.check_empty_wal_archive,
        })
    }
}

/// The RestoreJobHooks service of a [`Plugin`], dispatching to its handler.
pub struct RestoreJobService<P>(pub(super) Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Parameters> restore_job_hooks_server::RestoreJobHooks for RestoreJobService<P> {
    async fn get_capabilities(
        &self,
        _: Request<RestoreJobHooksCapabilitiesRequest>,
    ) -> Result<Response<RestoreJobHooksCapabilitiesResult>, Status> {
        Ok(Response::new(RestoreJobHooksCapabilitiesResult {
            capabilities: vec![restore_job_hook(Kind::Restore)],
        }))
    }

    async fn restore(&self, request: Request<RestoreRequest>) -> Result<Response<RestoreResponse>, Status> {
        let restore_job = &self.0.handlers.restore_job;
        let answer = restore_job.call("RestoreJobHooks.Restore", || {
            RestoreJobCall::decode(&self.0, request.into_inner())
        });
        Ok(Response::new(answer.await?))
    }
}
