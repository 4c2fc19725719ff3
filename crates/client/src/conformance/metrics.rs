//! The Metrics service: consistent capabilities, then Define and Collect
//! called with the sample Cluster, their answers checked as CloudNativePG
//! uses them.

use std::collections::BTreeSet;

use cnpgi_core::capabilities::MetricsRpc;
use cnpgi_proto::metrics::v1::{CollectMetricsRequest, DefineMetricsRequest};

use super::checker::{Checker, Running};
use crate::instance::metrics;

/// The checks of the Metrics service.
pub(super) fn checks(c: &mut Checker) -> Running<'_> {
    Box::pin(async move {
        let client = c.client.clone();
        let Some(rpcs) = c.advertised::<crate::capabilities::Metrics>().await else {
            return;
        };
        if !rpcs.contains(&MetricsRpc::Metrics) {
            return;
        }
        let request = client.request(DefineMetricsRequest {
            cluster_definition: c.cluster_bytes.clone(),
        });
        let defined = c
            .timed(client.metrics().define(request))
            .await
            .and_then(|answer| metrics::definitions(&answer, &BTreeSet::new()));
        let definitions = match defined {
            Ok(definitions) => {
                c.report.record(
                    "Metrics/Define: definitions are usable",
                    Ok(format!("{} metric(s)", definitions.len())),
                );
                definitions
            }
            Err(reason) => {
                c.report.record("Metrics/Define: definitions are usable", Err(reason));
                return;
            }
        };
        let request = client.request(CollectMetricsRequest {
            cluster_definition: c.cluster_bytes.clone(),
        });
        c.record_call(
            "Metrics/Collect: values fit their definitions",
            client.metrics().collect(request),
            |answer| match metrics::samples(&definitions, &answer) {
                (values, None) => Ok(format!("{} value(s), each as defined", values.len())),
                (_, Some(reason)) => Err(reason),
            },
        )
        .await;
    })
}
