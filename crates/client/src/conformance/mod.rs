//! A conformance suite any CNPG-I plugin, in any language, can be held to.
//!
//! [`check_plugin`] calls a plugin the way an operator would, with a sample
//! Cluster (and Pod), and reports each check with a reason. It is what
//! `cnpgi-operator check-plugin` prints, and what a plugin's own tests can
//! assert on.
//!
//! Every service is covered, one file each: Identity first (`identity.rs`,
//! with the Operator capabilities of `operator.rs`: what CloudNativePG
//! writes in the Cluster's status before calling), then the checks of each
//! service in `SERVICES`: Operator, OperatorLifecycle, ReconcilerHooks,
//! WAL, Backup, RestoreJobHooks, Postgres and Metrics (capabilities
//! consistent, advertised RPCs served, answers usable, garbage refused,
//! nothing changed on the plugin's side). They share one context,
//! `checker.rs`: the plugin, the deadline, the report.

use std::time::Duration;

use serde_json::Value;

use crate::client::PluginClient;

mod backup;
mod checker;
mod identity;
mod lifecycle;
mod metrics;
mod operator;
mod postgres;
mod reconciler;
mod report;
mod restore_job;
mod wal;

use checker::{Checker, Running};
pub use report::{Check, Report};

/// The checks of each service, in the order run, after Identity.
const SERVICES: &[fn(&mut Checker) -> Running<'_>] = &[
    operator::checks,
    lifecycle::checks,
    reconciler::checks,
    wal::checks,
    backup::checks,
    restore_job::checks,
    postgres::checks,
    metrics::checks,
];

/// A plugin's message, bounded and on one line, for a report.
fn short(message: &str) -> String {
    cnpgi_core::echo::bounded_string(message.replace('\n', " "))
}

/// Tunables of the suite.
#[derive(Debug, Clone)]
pub struct ConformanceOptions {
    /// Every call must answer within this. Default 5 s.
    pub deadline: Duration,
    /// The Cluster to send (its `spec.plugins` gets the plugin if missing,
    /// and `status.pluginStatus` the plugin's entry, as CloudNativePG writes it).
    pub cluster: Option<Value>,
    /// Turn recommendations (`NOTE`) into failures. Default off.
    pub strict: bool,
}

impl Default for ConformanceOptions {
    fn default() -> Self {
        Self {
            deadline: Duration::from_secs(5),
            cluster: None,
            strict: false,
        }
    }
}

/// Runs the suite on the plugin behind `client`, expected to be named `expected_name`.
pub async fn check_plugin(client: &PluginClient, expected_name: &str, options: &ConformanceOptions) -> Report {
    let mut checker = Checker::new(client, expected_name, options);
    let Some(identity) = identity::check(&mut checker).await else {
        return checker.report;
    };
    let operator_rpcs = operator::capabilities(&mut checker, &identity.services).await;
    checker.load(identity, operator_rpcs);
    for checks in SERVICES {
        checks(&mut checker).await;
    }
    checker.finish().await
}
