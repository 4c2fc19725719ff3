//! The Backup service of a declarative plugin.

use std::{collections::BTreeMap, sync::Arc};

use cnpgi_proto::backup::v1::{
    BackupCapabilitiesRequest, BackupCapabilitiesResult, BackupRequest, BackupResult, backup_capability, backup_server,
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use super::{AsyncHandler, AsyncRpc, Plugin, Shared};
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

/// The backup handler, once registered.
pub(super) type Handlers<P> = AsyncRpc<BackupCall<P>, BackupResult>;

impl<P: Parameters> Plugin<P> {
    /// Takes a backup and answers once it is done (CloudNativePG waits,
    /// without a deadline); the answer becomes the Backup's status.
    pub fn backup(mut self, handler: impl AsyncHandler<BackupCall<P>, BackupResult>) -> Self {
        self.handlers.backup.register(handler);
        self
    }
}

impl<P: Parameters> BackupCall<P> {
    /// The call a `Backup` request makes: the Cluster and the Backup
    /// decoded, this plugin's parameters read.
    fn decode(shared: &Shared<P>, request: BackupRequest) -> Result<Self, Status> {
        let cluster = decode_cluster(&request.cluster_definition)?;
        let backup = decode_object(&request.backup_definition, "Backup")?;
        let parameters = shared.parameters(&cluster)?;
        Ok(Self {
            cluster,
            parameters,
            backup,
            backup_parameters: request.parameters.into_iter().collect(),
        })
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
        let backup = &self.0.handlers.backup;
        let answer = backup.call("Backup", || BackupCall::decode(&self.0, request.into_inner()));
        Ok(Response::new(answer.await?))
    }
}
