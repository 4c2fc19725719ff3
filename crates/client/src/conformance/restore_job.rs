//! The RestoreJobHooks service: consistent capabilities, and Restore
//! refusing garbage (nothing else is sent it: checking a plugin restores
//! nothing).

use cnpgi_core::{capabilities::RestoreJobKind, service};
use cnpgi_proto::wal::v1::RestoreRequest;

use super::checker::{Checker, GARBAGE, Running};

/// The checks of the RestoreJobHooks service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let Some(kinds) = c.advertised::<crate::capabilities::RestoreJob>().await else {
            return;
        };
        if kinds.contains(&RestoreJobKind::Restore) {
            let request = client.request(RestoreRequest {
                cluster_definition: GARBAGE.to_vec(),
                check_empty_wal_archive: None,
            });
            c.refuses_as_described(&service::restore_job::RESTORE, client.restore_job().restore(request))
                .await;
        }
    })
}
