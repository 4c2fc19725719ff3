//! The Backup service: consistent capabilities, and Backup refusing garbage
//! (nothing else is sent it: checking a plugin takes no backup).

use std::collections::HashMap;

use cnpgi_core::{
    capabilities::{self, BackupRpc},
    service,
};
use cnpgi_proto::backup::v1::{BackupCapabilitiesRequest, BackupRequest};

use super::checker::{Checker, GARBAGE, Running};

/// The checks of the Backup service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let mut stub = client.backup();
        let ask = stub.get_capabilities(client.request(BackupCapabilitiesRequest {}));
        let Some(rpcs) = c
            .advertised(
                &service::BACKUP,
                ask,
                |a| &a.capabilities,
                capabilities::backup_rpc_type,
                BackupRpc::as_str_name,
            )
            .await
        else {
            return;
        };
        if rpcs.contains(&BackupRpc::Backup) {
            let request = client.request(BackupRequest {
                cluster_definition: GARBAGE.to_vec(),
                backup_definition: GARBAGE.to_vec(),
                parameters: HashMap::new(),
            });
            c.refuses_as_described(&service::backup::BACKUP, client.backup().backup(request))
                .await;
        }
    })
}
