//! The Backup service: consistent capabilities, and Backup refusing garbage
//! (nothing else is sent it: checking a plugin takes no backup).

use std::collections::HashMap;

use cnpgi_core::{capabilities::BackupRpc, service};
use cnpgi_proto::backup::v1::BackupRequest;

use super::checker::{Checker, GARBAGE, Running};

/// The checks of the Backup service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let Some(rpcs) = c.advertised::<crate::capabilities::Backup>().await else {
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
