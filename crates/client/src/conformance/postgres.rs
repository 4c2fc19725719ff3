//! The Postgres service: consistent capabilities, EnrichConfiguration
//! called with the sample Cluster and answering nothing or the complete map
//! (a non-empty answer replaces CloudNativePG's), and garbage refused.

use std::collections::{BTreeSet, HashMap};

use cnpgi_core::capabilities::PostgresRpc;
use cnpgi_proto::identity::v1::{EnrichConfigurationRequest, OperationType, operation_type};

use super::checker::{Checker, GARBAGE, Running};

/// The checks of the Postgres service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let Some(rpcs) = c.advertised::<crate::capabilities::Postgres>().await else {
            return;
        };
        if !rpcs.contains(&PostgresRpc::EnrichConfiguration) {
            return;
        }
        enrich(c).await;
        let request = client.request(enrich_request(GARBAGE.to_vec()));
        c.refuses(
            "EnrichConfiguration: garbage Cluster is refused",
            tonic::Code::InvalidArgument,
            client.postgres().enrich_configuration(request),
        )
        .await;
    })
}

/// What CloudNativePG sends: the whole map it computed.
fn sent_configs() -> HashMap<String, String> {
    [
        ("shared_buffers", "128MB"),
        ("max_connections", "100"),
        ("archive_command", "/controller/manager wal-archive %p"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn enrich_request(cluster_definition: Vec<u8>) -> EnrichConfigurationRequest {
    EnrichConfigurationRequest {
        configs: sent_configs(),
        cluster_definition,
        operation_type: Some(OperationType {
            r#type: operation_type::Type::Reconcile.into(),
        }),
    }
}

/// EnrichConfiguration with the sample Cluster: nothing, or a map keeping
/// every parameter sent.
async fn enrich(c: &mut Checker) {
    let client = c.client.clone();
    let sent = sent_configs();
    let request = client.request(enrich_request(c.cluster_bytes.clone()));
    let name = "EnrichConfiguration: answers nothing or the complete map";
    let answer = match c.timed(client.postgres().enrich_configuration(request)).await {
        Ok(answer) if !answer.configs.is_empty() => answer.configs,
        Ok(_) => {
            c.report.record(name, Ok("empty (no change)".into()));
            return;
        }
        Err(reason) => {
            c.report.record(name, Err(reason));
            return;
        }
    };
    let dropped: BTreeSet<&String> = sent.keys().filter(|k| !answer.contains_key(*k)).collect();
    if dropped.is_empty() {
        c.report
            .record(name, Ok(format!("the complete map ({} parameters)", answer.len())));
    } else if dropped.len() == sent.len() {
        let kept: BTreeSet<&String> = answer.keys().collect();
        c.report.record(
            name,
            Err(format!(
                "the answer has none of the {} parameters sent, only {}: a non-empty answer replaces \
                 the whole map, so CloudNativePG would lose every other parameter",
                sent.len(),
                kept.into_iter().cloned().collect::<Vec<_>>().join(", ")
            )),
        );
    } else {
        c.report.advise(
            name,
            format!(
                "the answer drops {}: a non-empty answer replaces the whole map, so CloudNativePG would lose them",
                dropped.into_iter().cloned().collect::<Vec<_>>().join(", ")
            ),
            c.strict,
        );
    }
}
