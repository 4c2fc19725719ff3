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
//! service with RPCs, in the order of [`cnpgi_core::service::SERVICES`]
//! (capabilities consistent, advertised RPCs served, answers usable,
//! garbage refused, nothing changed on the plugin's side: each RPC as its
//! [`Exercise`](cnpgi_core::service::Exercise) says). They share one
//! context, `checker.rs`: the plugin, the deadline, the report; it depends
//! only on `options.rs` and `report.rs`, and every service's file on it.

use cnpgi_core::{capabilities::ServiceType, for_each_service, service};

use crate::client::PluginClient;

mod checker;
mod identity;
mod options;
mod report;

use checker::{Checker, Running};
pub use options::ConformanceOptions;
pub use report::{Check, Report};

/// The check file of each service of the table (`<key>.rs`), and
/// `checks_of`: the checks of the service advertised as `capability`, run
/// after Identity in the order of [`cnpgi_core::service::SERVICES`].
macro_rules! dispatch {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, $($rest:tt)*
    } )*) => {
        $(mod $key;)*

        fn checks_of(capability: ServiceType) -> Option<fn(&mut Checker) -> Running<'_>> {
            match capability {
                $(ServiceType::$cap => Some($key::checks),)*
                // Advertised only: no RPC to check.
                _ => None,
            }
        }
    };
}

for_each_service!(dispatch);

/// Runs the suite on the plugin behind `client`, expected to be named `expected_name`.
pub async fn check_plugin(client: &PluginClient, expected_name: &str, options: &ConformanceOptions) -> Report {
    let mut checker = Checker::new(client, expected_name, options);
    let Some(identity) = identity::check(&mut checker).await else {
        return checker.report;
    };
    let operator_rpcs = operator::capabilities(&mut checker, &identity.services).await;
    checker.load(identity, operator_rpcs);
    operator::validation_verdict(&mut checker).await;
    for service in service::with_rpcs() {
        if let Some(checks) = checks_of(service.capability) {
            checks(&mut checker).await;
        }
    }
    checker.finish().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_service_with_rpcs_has_checks() {
        for service in service::with_rpcs() {
            assert!(checks_of(service.capability).is_some(), "{}", service.label);
        }
    }
}
