//! The Backup service of a declarative plugin.

use std::{collections::BTreeMap, future::Future, sync::Arc};

use cnpgi_proto::backup::v1::{
    BackupCapabilitiesRequest, BackupCapabilitiesResult, BackupRequest, BackupResult, backup_capability, backup_server,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::{AsyncHandler, Plugin, Shared, boxed};
use crate::{
    capabilities::backup_rpc,
    cluster::{Cluster, decode_cluster, decode_object},
    parameters::Parameters,
};

/// What the backup handler receives.
#[derive(Debug, Clone)]
pub struct BackupCall<P> {
    /// The Cluster to back up.
    pub cluster: Cluster,
    /// This plugin's parameters in the Cluster.
    pub parameters: P,
    /// The `Backup` object (phase `started`), as received.
    pub backup: Value,
    /// The Backup's own `pluginConfiguration.parameters`.
    pub backup_parameters: BTreeMap<String, String>,
}

pub(super) type Handler<P> = AsyncHandler<BackupCall<P>, BackupResult>;

impl<P: Parameters> Plugin<P> {
    /// Takes a backup and answers once it is done (CloudNativePG waits,
    /// without a deadline); the answer becomes the Backup's status.
    pub fn backup<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(BackupCall<P>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<BackupResult, Status>> + Send + 'static,
    {
        self.handlers.backup = Some(boxed(handler));
        self
    }
}

/// The Backup service of a [`Plugin`], dispatching to its handler.
pub struct BackupService<P>(pub(super) Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Parameters> backup_server::Backup for BackupService<P> {
    async fn get_capabilities(
        &self,
        _: Request<BackupCapabilitiesRequest>,
    ) -> Result<Response<BackupCapabilitiesResult>, Status> {
        Ok(Response::new(BackupCapabilitiesResult {
            capabilities: vec![backup_rpc(backup_capability::rpc::Type::Backup)],
        }))
    }

    async fn backup(&self, request: Request<BackupRequest>) -> Result<Response<BackupResult>, Status> {
        let handler = self
            .0
            .handlers
            .backup
            .as_ref()
            .ok_or_else(|| Status::unimplemented("Backup is not implemented by this plugin"))?;
        let request = request.into_inner();
        let cluster = decode_cluster(&request.cluster_definition)?;
        let backup = decode_object(&request.backup_definition, "Backup")?;
        let parameters = self.0.parameters(&cluster)?;
        let answer = handler(BackupCall {
            cluster,
            parameters,
            backup,
            backup_parameters: request.parameters.into_iter().collect(),
        })
        .await?;
        Ok(Response::new(answer))
    }
}
