//! The WAL service: consistent capabilities, and each advertised RPC
//! refusing what it is sent: garbage, or for Restore a file no archive can
//! have (checking a plugin archives and restores nothing).

use cnpgi_core::{capabilities::WalRpc, service};
use cnpgi_proto::wal::v1::{SetFirstRequiredRequest, WalArchiveRequest, WalRestoreRequest, WalStatusRequest};

use super::checker::{Checker, GARBAGE, Running};

/// The checks of the WAL service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let Some(rpcs) = c.advertised::<crate::capabilities::Wal>().await else {
            return;
        };
        if rpcs.contains(&WalRpc::ArchiveWal) {
            archive(c).await;
        }
        if rpcs.contains(&WalRpc::RestoreWal) {
            restore(c).await;
        }
        if rpcs.contains(&WalRpc::Status) {
            status(c).await;
        }
        if rpcs.contains(&WalRpc::SetFirstRequired) {
            set_first_required(c).await;
        }
    })
}

async fn archive(c: &mut Checker) {
    let client = c.client.clone();
    let request = client.request(WalArchiveRequest {
        cluster_definition: GARBAGE.to_vec(),
        source_file_name: "/nonexistent/cnpgi-check-plugin/pg_wal/000000010000000000000001".into(),
        ..Default::default()
    });
    c.refuses_as_described(&service::wal::ARCHIVE, client.wal().archive(request))
        .await;
}

async fn restore(c: &mut Checker) {
    let client = c.client.clone();
    // A file no archive can have (timeline 0xFFFFFFFF), into a directory
    // that does not exist.
    let request = client.request(WalRestoreRequest {
        cluster_definition: c.cluster_bytes.clone(),
        source_wal_name: "FFFFFFFF.history".into(),
        destination_file_name: "/nonexistent/cnpgi-check-plugin/pg_wal/RECOVERYHISTORY".into(),
        ..Default::default()
    });
    c.refuses_as_described(&service::wal::RESTORE, client.wal().restore(request))
        .await;
}

async fn status(c: &mut Checker) {
    let client = c.client.clone();
    let request = client.request(WalStatusRequest {
        cluster_definition: GARBAGE.to_vec(),
    });
    c.refuses_as_described(&service::wal::STATUS, client.wal().status(request))
        .await;
}

async fn set_first_required(c: &mut Checker) {
    let client = c.client.clone();
    let request = client.request(SetFirstRequiredRequest {
        cluster_definition: GARBAGE.to_vec(),
        first_required_wal: "000000010000000000000001".into(),
    });
    c.refuses_as_described(
        &service::wal::SET_FIRST_REQUIRED,
        client.wal().set_first_required(request),
    )
    .await;
}
