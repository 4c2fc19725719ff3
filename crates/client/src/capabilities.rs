//! Each CNPG-I service's `GetCapabilities`, asked and read one way: one row
//! per service in the table below, which probing ([`crate::probe`]) and the
//! conformance suite's skeleton both use.
//!
//! ```no_run
//! # async fn example(client: cnpgi_client::client::PluginClient) -> Result<(), tonic::Status> {
//! use cnpgi_client::capabilities::{Wal, ask};
//!
//! let (rpcs, problems) = ask::<Wal>(&client).await?;
//! println!("WAL RPCs: {rpcs:?} ({problems:?})");
//! # Ok(()) }
//! ```

use std::{fmt::Debug, future::Future, pin::Pin};

use cnpgi_core::{
    capabilities::{
        self, BackupRpc, CapabilityError, MetricsRpc, OperatorRpc, PostgresRpc, ReconcilerKind, RestoreJobKind, WalRpc,
    },
    service::{self, Service},
};
use cnpgi_proto::{
    backup::v1::{BackupCapabilitiesRequest, BackupCapabilitiesResult, BackupCapability},
    // The Postgres service's messages are in upstream's identity package.
    identity::v1::{PostgresCapabilitiesRequest, PostgresCapabilitiesResult, PostgresCapability},
    metrics::v1::{MetricsCapabilitiesRequest, MetricsCapabilitiesResult, MetricsCapability},
    operator::v1::{OperatorCapabilitiesRequest, OperatorCapabilitiesResult, OperatorCapability},
    reconciler::v1::{
        ReconcilerHooksCapabilitiesRequest, ReconcilerHooksCapabilitiesResult, ReconcilerHooksCapability,
    },
    wal::v1::{
        RestoreJobHooksCapabilitiesRequest, RestoreJobHooksCapabilitiesResult, RestoreJobHooksCapability,
        WalCapabilitiesRequest, WalCapabilitiesResult, WalCapability,
    },
};

use crate::client::PluginClient;

/// A call in flight, as the generated clients return it.
pub type Call<A> = Pin<Box<dyn Future<Output = Result<tonic::Response<A>, tonic::Status>> + Send>>;

/// A service whose `GetCapabilities` lists values of one kind (RPCs, or
/// reconciler and restore-job kinds). Implemented by the table below.
pub trait ServiceCapabilities {
    /// The service's description (name, capability, RPCs).
    const SERVICE: &'static Service;
    /// What one entry advertises.
    type Value: Copy + PartialEq + Debug + Send + 'static;
    /// One entry of the answer.
    type Entry: Send + 'static;
    /// The answer of `GetCapabilities`.
    type Answer: Send + 'static;

    /// Asks the plugin.
    fn call(client: &PluginClient) -> Call<Self::Answer>;
    /// The entries of an answer.
    fn entries(answer: &Self::Answer) -> &[Self::Entry];
    /// One entry's value, or what is wrong with it.
    fn read(entry: &Self::Entry) -> Result<Self::Value, CapabilityError>;
    /// A value's name on the wire (`TYPE_ARCHIVE_WAL`).
    fn name(value: Self::Value) -> &'static str;
}

/// The values `answer` advertises, read as routing reads them: entries
/// that cannot be read are left out (and said in the second list).
pub fn read<S: ServiceCapabilities>(answer: &S::Answer) -> (Vec<S::Value>, Vec<CapabilityError>) {
    let mut values = Vec::new();
    let mut problems = Vec::new();
    for entry in S::entries(answer) {
        match S::read(entry) {
            Ok(value) if !values.contains(&value) => values.push(value),
            Ok(_) => {}
            Err(problem) => problems.push(problem),
        }
    }
    (values, problems)
}

/// Asks `S`'s `GetCapabilities` and [`read`]s the answer.
pub async fn ask<S: ServiceCapabilities>(
    client: &PluginClient,
) -> Result<(Vec<S::Value>, Vec<CapabilityError>), tonic::Status> {
    let answer = S::call(client).await?.into_inner();
    Ok(read::<S>(&answer))
}

/// One row per service: `Name: Value = SERVICE, accessor(Request) -> Answer
/// { field: Entry }, reader, namer`.
macro_rules! services {
    ($(
        $(#[$doc:meta])*
        $name:ident: $value:ty = $service:expr,
            $accessor:ident($request:ident) -> $answer:ty { $field:ident: $entry:ty },
            $read:expr, $show:expr;
    )*) => {$(
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name;

        impl ServiceCapabilities for $name {
            const SERVICE: &'static Service = &$service;
            type Value = $value;
            type Entry = $entry;
            type Answer = $answer;

            fn call(client: &PluginClient) -> Call<Self::Answer> {
                let mut stub = client.$accessor();
                let request = client.request($request {});
                Box::pin(async move { stub.get_capabilities(request).await })
            }

            fn entries(answer: &Self::Answer) -> &[Self::Entry] {
                &answer.$field
            }

            fn read(entry: &Self::Entry) -> Result<Self::Value, CapabilityError> {
                $read(entry)
            }

            fn name(value: Self::Value) -> &'static str {
                $show(&value)
            }
        }
    )*};
}

services! {
    /// The Operator service: the RPCs CloudNativePG's webhooks would call.
    Operator: OperatorRpc = service::OPERATOR,
        operator(OperatorCapabilitiesRequest) -> OperatorCapabilitiesResult { capabilities: OperatorCapability },
        capabilities::operator_rpc_type, OperatorRpc::as_str_name;
    /// The WAL service.
    Wal: WalRpc = service::WAL,
        wal(WalCapabilitiesRequest) -> WalCapabilitiesResult { capabilities: WalCapability },
        capabilities::wal_rpc_type, WalRpc::as_str_name;
    /// The Backup service.
    Backup: BackupRpc = service::BACKUP,
        backup(BackupCapabilitiesRequest) -> BackupCapabilitiesResult { capabilities: BackupCapability },
        capabilities::backup_rpc_type, BackupRpc::as_str_name;
    /// The ReconcilerHooks service: the kinds it hooks.
    Reconciler: ReconcilerKind = service::RECONCILER_HOOKS,
        reconciler(ReconcilerHooksCapabilitiesRequest) -> ReconcilerHooksCapabilitiesResult {
            reconciler_capabilities: ReconcilerHooksCapability
        },
        capabilities::reconciler_kind, ReconcilerKind::as_str_name;
    /// The RestoreJobHooks service: the kinds it hooks.
    RestoreJob: RestoreJobKind = service::RESTORE_JOB_HOOKS,
        restore_job(RestoreJobHooksCapabilitiesRequest) -> RestoreJobHooksCapabilitiesResult {
            capabilities: RestoreJobHooksCapability
        },
        capabilities::restore_job_kind, RestoreJobKind::as_str_name;
    /// The Postgres service.
    Postgres: PostgresRpc = service::POSTGRES,
        postgres(PostgresCapabilitiesRequest) -> PostgresCapabilitiesResult { capabilities: PostgresCapability },
        capabilities::postgres_rpc_type, PostgresRpc::as_str_name;
    /// The Metrics service.
    Metrics: MetricsRpc = service::METRICS,
        metrics(MetricsCapabilitiesRequest) -> MetricsCapabilitiesResult { capabilities: MetricsCapability },
        capabilities::metrics_rpc_type, MetricsRpc::as_str_name;
}

#[cfg(test)]
mod tests {
    use cnpgi_proto::wal::v1::wal_capability;

    use super::*;

    fn wal_entry(rpc: i32) -> WalCapability {
        WalCapability {
            r#type: Some(wal_capability::Type::Rpc(wal_capability::Rpc { r#type: rpc })),
        }
    }

    #[test]
    fn unreadable_and_repeated_entries_are_left_out_and_said() {
        let answer = WalCapabilitiesResult {
            capabilities: vec![
                wal_entry(WalRpc::ArchiveWal as i32),
                wal_entry(WalRpc::ArchiveWal as i32),
                wal_entry(9_999),
                WalCapability { r#type: None },
            ],
        };
        let (values, problems) = read::<Wal>(&answer);
        assert_eq!(values, vec![WalRpc::ArchiveWal]);
        assert_eq!(
            problems,
            vec![CapabilityError::Unknown(9_999), CapabilityError::Missing]
        );
        assert_eq!(Wal::name(WalRpc::ArchiveWal), "TYPE_ARCHIVE_WAL");
        assert_eq!(Wal::SERVICE.label, "WAL");
    }
}
