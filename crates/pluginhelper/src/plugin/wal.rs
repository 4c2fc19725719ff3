//! The WAL service of a declarative plugin: archive, restore, status, and
//! the first WAL file still needed.

use std::{future::Future, sync::Arc};

use cnpgi_proto::wal::v1::{
    SetFirstRequiredRequest, SetFirstRequiredResult, WalArchiveRequest, WalArchiveResult, WalCapabilitiesRequest,
    WalCapabilitiesResult, WalRestoreRequest, WalRestoreResult, WalStatusRequest, WalStatusResult,
    wal_capability::rpc::Type as WalRpc, wal_restore_request::Mode, wal_server,
};
use tonic::{Request, Response, Status};

use super::{AsyncHandler, Plugin, Shared, boxed};
use crate::{
    cluster::{Cluster, decode_cluster},
    parameters::Parameters,
    service,
    wal::{self, WalFileName},
};

/// What the archive handler receives: one WAL file to store.
#[derive(Debug, Clone)]
pub struct WalArchiveCall<P> {
    /// The Cluster.
    pub cluster: Cluster,
    /// This plugin's parameters in it.
    pub parameters: P,
    /// The file's name (a segment, `.partial`, `.history` or `.backup`).
    pub file: WalFileName,
    /// Where it is: PGDATA joined with PostgreSQL's `%p`.
    pub source_path: String,
    /// Whether to refuse archiving into a non-empty archive (unset by
    /// CloudNativePG 1.29).
    pub check_empty_wal_archive: Option<bool>,
}

/// What the restore handler receives: one WAL file to fetch. A file the
/// archive does not have is answered with [`wal::not_in_archive`].
#[derive(Debug, Clone)]
pub struct WalRestoreCall<P> {
    /// The Cluster.
    pub cluster: Cluster,
    /// This plugin's parameters: its `spec.plugins` entry, else the `plugin`
    /// of the external cluster that names it (a replica's or recovery's
    /// source).
    pub parameters: P,
    /// The file wanted (PostgreSQL's `%f`).
    pub file: WalFileName,
    /// Where to write it, whole (PostgreSQL's `%p`, absolute).
    pub destination_path: String,
    /// Recovery or `pg_rewind` (unset by CloudNativePG 1.29).
    pub mode: Mode,
}

/// What the status handler receives.
#[derive(Debug, Clone)]
pub struct WalStatusCall<P> {
    /// The Cluster.
    pub cluster: Cluster,
    /// This plugin's parameters in it.
    pub parameters: P,
}

/// What the `SetFirstRequired` handler receives: WAL files before this one
/// are no longer needed.
#[derive(Debug, Clone)]
pub struct SetFirstRequiredCall<P> {
    /// The Cluster.
    pub cluster: Cluster,
    /// This plugin's parameters in it.
    pub parameters: P,
    /// The first WAL file still needed.
    pub first_required: WalFileName,
}

/// The WAL handlers registered.
pub(super) struct Handlers<P> {
    archive: Option<AsyncHandler<WalArchiveCall<P>, ()>>,
    restore: Option<AsyncHandler<WalRestoreCall<P>, ()>>,
    status: Option<AsyncHandler<WalStatusCall<P>, WalStatusResult>>,
    set_first_required: Option<AsyncHandler<SetFirstRequiredCall<P>, ()>>,
}

impl<P> Default for Handlers<P> {
    fn default() -> Self {
        Self {
            archive: None,
            restore: None,
            status: None,
            set_first_required: None,
        }
    }
}

impl<P> Handlers<P> {
    pub(super) fn is_empty(&self) -> bool {
        self.rpcs().is_empty()
    }

    /// The RPCs with a handler, in the protocol's order.
    fn rpcs(&self) -> Vec<WalRpc> {
        [
            (WalRpc::ArchiveWal, self.archive.is_some()),
            (WalRpc::RestoreWal, self.restore.is_some()),
            (WalRpc::Status, self.status.is_some()),
            (WalRpc::SetFirstRequired, self.set_first_required.is_some()),
        ]
        .into_iter()
        .filter_map(|(rpc, registered)| registered.then_some(rpc))
        .collect()
    }
}

impl<P: Parameters> Plugin<P> {
    /// Archives one WAL file (CloudNativePG runs it as PostgreSQL's
    /// `archive_command`). PostgreSQL's rule applies: a file already archived
    /// with the same content succeeds, with other content fails
    /// ([`wal::decide_archive`]).
    pub fn wal_archive<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(WalArchiveCall<P>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Status>> + Send + 'static,
    {
        self.handlers.wal.archive = Some(boxed(handler));
        self
    }

    /// Restores one WAL file (PostgreSQL's `restore_command`): write it whole,
    /// then answer.
    pub fn wal_restore<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(WalRestoreCall<P>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Status>> + Send + 'static,
    {
        self.handlers.wal.restore = Some(boxed(handler));
        self
    }

    /// Reports the archive's first and last WAL files.
    pub fn wal_status<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(WalStatusCall<P>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<WalStatusResult, Status>> + Send + 'static,
    {
        self.handlers.wal.status = Some(boxed(handler));
        self
    }

    /// Learns the first WAL file still needed (older ones may be removed).
    pub fn wal_set_first_required<F, Fut>(mut self, handler: F) -> Self
    where
        F: Fn(SetFirstRequiredCall<P>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), Status>> + Send + 'static,
    {
        self.handlers.wal.set_first_required = Some(boxed(handler));
        self
    }
}

/// The WAL service of a [`Plugin`], dispatching to its handlers.
pub struct WalService<P>(pub(super) Arc<Shared<P>>);

/// The handler, or `UNIMPLEMENTED`.
fn registered<'a, T>(handler: &'a Option<T>, rpc: &str) -> Result<&'a T, Status> {
    handler
        .as_ref()
        .ok_or_else(|| Status::unimplemented(format!("WAL {rpc} is not implemented by this plugin")))
}

#[tonic::async_trait]
impl<P: Parameters> wal_server::Wal for WalService<P> {
    async fn get_capabilities(
        &self,
        _: Request<WalCapabilitiesRequest>,
    ) -> Result<Response<WalCapabilitiesResult>, Status> {
        Ok(Response::new(wal::capabilities(self.0.handlers.wal.rpcs())))
    }

    async fn archive(&self, request: Request<WalArchiveRequest>) -> Result<Response<WalArchiveResult>, Status> {
        let handler = registered(&self.0.handlers.wal.archive, "Archive")?;
        let request = request.into_inner();
        let cluster = decode_cluster(&request.cluster_definition)?;
        let file = WalFileName::from_path(&request.source_file_name)?;
        let parameters = self.0.parameters_for(
            &service::wal::ARCHIVE,
            &cluster,
            &request.parameters.into_iter().collect(),
        )?;
        handler(WalArchiveCall {
            cluster,
            parameters,
            file,
            source_path: request.source_file_name,
            check_empty_wal_archive: request.check_empty_wal_archive,
        })
        .await?;
        Ok(Response::new(WalArchiveResult {}))
    }

    async fn restore(&self, request: Request<WalRestoreRequest>) -> Result<Response<WalRestoreResult>, Status> {
        let handler = registered(&self.0.handlers.wal.restore, "Restore")?;
        let request = request.into_inner();
        let mode = request.mode();
        let cluster = decode_cluster(&request.cluster_definition)?;
        let file = WalFileName::parse(&request.source_wal_name)?;
        if request.destination_file_name.is_empty() {
            return Err(Status::invalid_argument("destination_file_name is required"));
        }
        let parameters = self.0.parameters_for(
            &service::wal::RESTORE,
            &cluster,
            &request.parameters.into_iter().collect(),
        )?;
        handler(WalRestoreCall {
            cluster,
            parameters,
            file,
            destination_path: request.destination_file_name,
            mode,
        })
        .await?;
        Ok(Response::new(WalRestoreResult {}))
    }

    async fn status(&self, request: Request<WalStatusRequest>) -> Result<Response<WalStatusResult>, Status> {
        let handler = registered(&self.0.handlers.wal.status, "Status")?;
        let cluster = decode_cluster(&request.into_inner().cluster_definition)?;
        let parameters = self.0.parameters(&cluster)?;
        let answer = handler(WalStatusCall { cluster, parameters }).await?;
        Ok(Response::new(answer))
    }

    async fn set_first_required(
        &self,
        request: Request<SetFirstRequiredRequest>,
    ) -> Result<Response<SetFirstRequiredResult>, Status> {
        let handler = registered(&self.0.handlers.wal.set_first_required, "SetFirstRequired")?;
        let request = request.into_inner();
        let cluster = decode_cluster(&request.cluster_definition)?;
        let first_required = WalFileName::parse(&request.first_required_wal)?;
        let parameters = self.0.parameters(&cluster)?;
        handler(SetFirstRequiredCall {
            cluster,
            parameters,
            first_required,
        })
        .await?;
        Ok(Response::new(SetFirstRequiredResult {}))
    }
}
