//! The ReconcilerHooks service: consistent capabilities, and Pre and Post
//! refusing garbage (they may act, creating objects say: nothing else is
//! sent them).

use cnpgi_core::service;
use cnpgi_proto::reconciler::v1::ReconcilerHooksRequest;

use super::checker::{Checker, GARBAGE, Running};

/// The checks of the ReconcilerHooks service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let Some(kinds) = c.advertised::<crate::capabilities::Reconciler>().await else {
            return;
        };
        if kinds.is_empty() {
            return;
        }
        for rpc in [service::reconciler::PRE, service::reconciler::POST] {
            let request = client.request(ReconcilerHooksRequest {
                cluster_definition: GARBAGE.to_vec(),
                resource_definition: GARBAGE.to_vec(),
            });
            let mut reconciler = client.reconciler();
            if rpc == service::reconciler::PRE {
                c.refuses_as_described(&rpc, reconciler.pre(request)).await;
            } else {
                c.refuses_as_described(&rpc, reconciler.post(request)).await;
            }
        }
    })
}
