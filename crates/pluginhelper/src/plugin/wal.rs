//! The WAL service of a declarative plugin: archive, restore, status, and
//! the first WAL file still needed.

use std::sync::Arc;

use cnpgi_proto::wal::v1::{
    SetFirstRequiredRequest, SetFirstRequiredResult, WalArchiveRequest, WalArchiveResult, WalCapabilitiesRequest,
    WalCapabilitiesResult, WalRestoreRequest, WalRestoreResult, WalStatusRequest, WalStatusResult,
    wal_capability::rpc::Type as WalRpc, wal_restore_request::Mode, wal_server,
};
use tonic::{Request, Response, Status};

use super::{AsyncHandler, AsyncRpc, Plugin, Shared};
use crate::{
    cluster::{Cluster, decode_cluster},
    lowlevel::wal_files::{self, WalFileName},
    parameters::Parameters,
    service,
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
/// archive does not have is answered with [`wal_files::not_in_archive`].
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
    archive: AsyncRpc<WalArchiveCall<P>, ()>,
    restore: AsyncRpc<WalRestoreCall<P>, ()>,
    status: AsyncRpc<WalStatusCall<P>, WalStatusResult>,
    set_first_required: AsyncRpc<SetFirstRequiredCall<P>, ()>,
}

impl<P: Parameters> super::Registered for Handlers<P> {
    fn registered(&self) -> bool {
        !self.is_empty()
    }
}

impl<P> Default for Handlers<P> {
    fn default() -> Self {
        Self {
            archive: AsyncRpc::default(),
            restore: AsyncRpc::default(),
            status: AsyncRpc::default(),
            set_first_required: AsyncRpc::default(),
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
            (WalRpc::ArchiveWal, self.archive.is_registered()),
            (WalRpc::RestoreWal, self.restore.is_registered()),
            (WalRpc::Status, self.status.is_registered()),
            (WalRpc::SetFirstRequired, self.set_first_required.is_registered()),
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
    /// ([`wal_files::decide_archive`]).
    pub fn wal_archive(mut self, handler: impl AsyncHandler<WalArchiveCall<P>, ()>) -> Self {
        self.handlers.wal.archive.register(handler);
        self
    }

    /// Restores one WAL file (PostgreSQL's `restore_command`): write it whole,
    /// then answer.
    pub fn wal_restore(mut self, handler: impl AsyncHandler<WalRestoreCall<P>, ()>) -> Self {
        self.handlers.wal.restore.register(handler);
        self
    }

    /// Reports the archive's first and last WAL files.
    pub fn wal_status(mut self, handler: impl AsyncHandler<WalStatusCall<P>, WalStatusResult>) -> Self {
        self.handlers.wal.status.register(handler);
        self
    }

    /// Learns the first WAL file still needed (older ones may be removed).
    pub fn wal_set_first_required(mut self, handler: impl AsyncHandler<SetFirstRequiredCall<P>, ()>) -> Self {
        self.handlers.wal.set_first_required.register(handler);
        self
    }
}

/// The WAL service of a [`Plugin`], dispatching to its handlers.
pub struct WalService<P>(pub(super) Arc<Shared<P>>);

#[tonic::async_trait]
impl<P: Parameters> wal_server::Wal for WalService<P> {
    async fn get_capabilities(
        &self,
        _: Request<WalCapabilitiesRequest>,
    ) -> Result<Response<WalCapabilitiesResult>, Status> {
        Ok(Response::new(wal_files::capabilities(self.0.handlers.wal.rpcs())))
    }

    async fn archive(&self, request: Request<WalArchiveRequest>) -> Result<Response<WalArchiveResult>, Status> {
        let request = request.into_inner();
        let archived = self.0.handlers.wal.archive.call("WAL Archive", || {
            let cluster = decode_cluster(&request.cluster_definition)?;
            let file = WalFileName::from_path(&request.source_file_name)?;
            let parameters = self.0.parameters_for(
                &service::wal::ARCHIVE,
                &cluster,
                &request.parameters.into_iter().collect(),
            )?;
            Ok(WalArchiveCall {
                cluster,
                parameters,
                file,
                source_path: request.source_file_name,
                check_empty_wal_archive: request.check_empty_wal_archive,
            })
        });
        archived.await?;
        Ok(Response::new(WalArchiveResult {}))
    }

    async fn restore(&self, request: Request<WalRestoreRequest>) -> Result<Response<WalRestoreResult>, Status> {
        let request = request.into_inner();
        let restored = self.0.handlers.wal.restore.call("WAL Restore", || {
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
            Ok(WalRestoreCall {
                cluster,
                parameters,
                file,
                destination_path: request.destination_file_name,
                mode,
            })
        });
        restored.await?;
        Ok(Response::new(WalRestoreResult {}))
    }

    async fn status(&self, request: Request<WalStatusRequest>) -> Result<Response<WalStatusResult>, Status> {
        let answer = self.0.handlers.wal.status.call("WAL Status", || {
            let cluster = decode_cluster(&request.into_inner().cluster_definition)?;
            let parameters = self.0.parameters(&cluster)?;
            Ok(WalStatusCall { cluster, parameters })
        });
        Ok(Response::new(answer.await?))
    }

    async fn set_first_required(
        &self,
        request: Request<SetFirstRequiredRequest>,
    ) -> Result<Response<SetFirstRequiredResult>, Status> {
        let answered = self.0.handlers.wal.set_first_required.call("WAL SetFirstRequired", || {
            let request = request.into_inner();
            let cluster = decode_cluster(&request.cluster_definition)?;
            let first_required = WalFileName::parse(&request.first_required_wal)?;
            let parameters = self.0.parameters(&cluster)?;
            Ok(SetFirstRequiredCall {
                cluster,
                parameters,
                first_required,
            })
        });
        answered.await?;
        Ok(Response::new(SetFirstRequiredResult {}))
    }
}
