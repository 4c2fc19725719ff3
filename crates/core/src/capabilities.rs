//! Capabilities: the one place where they are built, read and named.
//!
//! CNPG-I capabilities are protobuf `oneof`s wrapping enums
//! (`PluginCapability { type: Service { type: TYPE_OPERATOR_SERVICE } }`).
//! A plugin **builds** them in its `GetCapabilities` answers; the operator
//! **reads** them when probing and **names** them in
//! `status.pluginStatus[]` (the enum names, e.g. `TYPE_OPERATOR_SERVICE`,
//! as CloudNativePG writes them). Every crate of the project goes through
//! this module for each of the three.
//!
//! ```
//! use cnpgi_core::capabilities::{self, Capability, OperatorRpc, ServiceType};
//!
//! // A plugin builds its answer...
//! let advertised = [capabilities::service(ServiceType::OperatorService)];
//! // ...the operator reads it back...
//! let services = capabilities::services_of(&advertised);
//! assert_eq!(services, [ServiceType::OperatorService]);
//! // ...and writes the names into status.pluginStatus[].
//! assert_eq!(capabilities::service_names(&services), ["TYPE_OPERATOR_SERVICE"]);
//!
//! let rpc = capabilities::operator_rpc(OperatorRpc::MutateCluster);
//! assert_eq!(rpc.value(), Ok(OperatorRpc::MutateCluster));
//! ```

use std::{borrow::Cow, fmt::Debug};

use cnpgi_proto::{
    backup::v1::BackupCapability,
    identity::v1::{PluginCapability, PostgresCapability, plugin_capability},
    metrics::v1::MetricsCapability,
    operator::v1::OperatorCapability,
    operator_lifecycle::v1::{OperatorLifecycleCapabilities, OperatorOperationType},
    reconciler::v1::ReconcilerHooksCapability,
    wal::v1::{RestoreJobHooksCapability, WalCapability},
};

/// The Backup RPCs a plugin advertises (`BackupCapability.RPC.Type`).
pub use cnpgi_proto::backup::v1::backup_capability::rpc::Type as BackupRpc;
/// The services a plugin advertises (`PluginCapability.Service.Type`).
pub use cnpgi_proto::identity::v1::plugin_capability::service::Type as ServiceType;
/// The Postgres RPCs a plugin advertises (`PostgresCapability.RPC.Type`).
pub use cnpgi_proto::identity::v1::postgres_capability::rpc::Type as PostgresRpc;
/// The Metrics RPCs a plugin advertises (`MetricsCapability.RPC.Type`).
pub use cnpgi_proto::metrics::v1::metrics_capability::rpc::Type as MetricsRpc;
/// The Operator RPCs a plugin advertises (`OperatorCapability.RPC.Type`).
pub use cnpgi_proto::operator::v1::operator_capability::rpc::Type as OperatorRpc;
/// The operations a lifecycle hook is called for (`OperatorOperationType.Type`).
pub use cnpgi_proto::operator_lifecycle::v1::operator_operation_type::Type as Operation;
/// The kinds of object whose reconciliation a plugin hooks into.
pub use cnpgi_proto::reconciler::v1::reconciler_hooks_capability::Kind as ReconcilerKind;
/// What a plugin's `RestoreJobHooks` handle (`RestoreJobHooksCapability.Kind`).
pub use cnpgi_proto::wal::v1::restore_job_hooks_capability::Kind as RestoreJobKind;
/// The WAL RPCs a plugin advertises (`WALCapability.RPC.Type`).
pub use cnpgi_proto::wal::v1::wal_capability::rpc::Type as WalRpc;

/// A capability entry that does not say what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CapabilityError {
    /// The `oneof` is not set.
    #[error("capability without a type")]
    Missing,
    /// The enum value is `TYPE_UNSPECIFIED` (0) or one this build does not know.
    #[error("unknown type {0}")]
    Unknown(i32),
}

/// `PluginCapability` advertising `service`, for `GetPluginCapabilities`.
///
/// ```
/// use cnpgi_core::capabilities::{service, service_type, ServiceType};
///
/// let capability = service(ServiceType::LifecycleService);
/// assert_eq!(service_type(&capability), Ok(ServiceType::LifecycleService));
/// ```
pub fn service(service: ServiceType) -> PluginCapability {
    PluginCapability {
        r#type: Some(plugin_capability::Type::Service(plugin_capability::Service {
            r#type: service.into(),
        })),
    }
}

/// A lifecycle hook on objects of `group` (`""` for the core group) and
/// `kind`, for `operations`, for `OperatorLifecycle/GetCapabilities`.
///
/// ```
/// use cnpgi_core::capabilities::{lifecycle, Operation};
///
/// let hook = lifecycle("", "Pod", [Operation::Create, Operation::Evaluate]);
/// assert_eq!((hook.kind.as_str(), hook.operation_types.len()), ("Pod", 2));
/// ```
pub fn lifecycle(
    group: &str,
    kind: &str,
    operations: impl IntoIterator<Item = Operation>,
) -> OperatorLifecycleCapabilities {
    OperatorLifecycleCapabilities {
        group: group.to_owned(),
        kind: kind.to_owned(),
        operation_types: operations
            .into_iter()
            .map(|operation| OperatorOperationType {
                r#type: operation.into(),
            })
            .collect(),
    }
}

/// An entry of a service's `GetCapabilities` answer: built from what it
/// advertises ([`Capability::of`]), read back ([`Capability::value`]) and
/// named ([`Capability::name`]). Implemented for each service's entry by
/// its row of [`for_each_service!`](crate::for_each_service).
///
/// ```
/// use cnpgi_core::capabilities::{
///     Capability, CapabilityError, OperatorRpc, ReconcilerKind, RestoreJobKind, WalRpc, operator_rpc, reconciler_hook,
///     values_of, wal_rpc,
/// };
/// use cnpgi_proto::{
///     operator::v1::OperatorCapability,
///     reconciler::v1::ReconcilerHooksCapability,
///     wal::v1::{RestoreJobHooksCapability, WalCapability},
/// };
///
/// let capability = operator_rpc(OperatorRpc::SetStatusInCluster);
/// assert_eq!(capability.value(), Ok(OperatorRpc::SetStatusInCluster));
/// assert_eq!(reconciler_hook(ReconcilerKind::Cluster).value(), Ok(ReconcilerKind::Cluster));
/// assert!(wal_rpc(WalRpc::ArchiveWal).r#type.is_some());
/// assert_eq!(wal_rpc(WalRpc::RestoreWal).value(), Ok(WalRpc::RestoreWal));
/// assert_eq!(WalCapability::default().value(), Err(CapabilityError::Missing));
/// assert_eq!(RestoreJobHooksCapability::of(RestoreJobKind::Restore).value(), Ok(RestoreJobKind::Restore));
/// assert_eq!(WalCapability::name(&WalRpc::ArchiveWal), "TYPE_ARCHIVE_WAL");
///
/// let answer = [operator_rpc(OperatorRpc::MutateCluster), OperatorCapability::default()];
/// assert_eq!(values_of(&answer), [OperatorRpc::MutateCluster]);
/// assert_eq!(values_of(&[ReconcilerHooksCapability { kind: 0 }]), []);
/// ```
pub trait Capability: Sized {
    /// What one entry advertises: an RPC, a kind, or (lifecycle hooks) the entry itself.
    type Value: Clone + PartialEq + Debug + Send + Sync + 'static;
    /// Whether a value listed twice is one value (RPCs, kinds) or kept as
    /// sent (lifecycle hooks).
    const DISTINCT: bool = true;

    /// The entry advertising `value`.
    fn of(value: Self::Value) -> Self;
    /// What the entry advertises.
    ///
    /// # Errors
    ///
    /// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
    fn value(&self) -> Result<Self::Value, CapabilityError>;
    /// A value's name on the wire (`TYPE_ARCHIVE_WAL`), for messages.
    fn name(value: &Self::Value) -> Cow<'static, str>;
}

/// The values `entries` advertise, in order; entries that do not say a
/// known value are left out.
pub fn values_of<C: Capability>(entries: &[C]) -> Vec<C::Value> {
    entries.iter().filter_map(|entry| entry.value().ok()).collect()
}

/// The builders of the entries, by the name the SDK and the tests use.
macro_rules! builders {
    ($( $name:ident($value:ident) -> $entry:ident; )*) => {$(
        #[doc = concat!("`", stringify!($entry), "` advertising `", stringify!($value), "` ([`Capability::of`]).")]
        pub fn $name($value: <$entry as Capability>::Value) -> $entry {
            $entry::of($value)
        }
    )*};
}

builders! {
    operator_rpc(rpc) -> OperatorCapability;
    reconciler_hook(kind) -> ReconcilerHooksCapability;
    wal_rpc(rpc) -> WalCapability;
    restore_job_hook(kind) -> RestoreJobHooksCapability;
    postgres_rpc(rpc) -> PostgresCapability;
    metrics_rpc(rpc) -> MetricsCapability;
    backup_rpc(rpc) -> BackupCapability;
}

/// A known, specified enum value, or why not.
pub(crate) fn known<T: TryFrom<i32> + PartialEq>(value: i32, unspecified: T) -> Result<T, CapabilityError> {
    match T::try_from(value) {
        Ok(known) if known != unspecified => Ok(known),
        _ => Err(CapabilityError::Unknown(value)),
    }
}

/// The service a `PluginCapability` advertises.
///
/// # Errors
///
/// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
///
/// ```
/// use cnpgi_core::capabilities::{service, service_type, CapabilityError, ServiceType};
/// use cnpgi_proto::identity::v1::PluginCapability;
///
/// assert_eq!(service_type(&service(ServiceType::LifecycleService)), Ok(ServiceType::LifecycleService));
/// assert_eq!(service_type(&PluginCapability::default()), Err(CapabilityError::Missing));
/// ```
pub fn service_type(capability: &PluginCapability) -> Result<ServiceType, CapabilityError> {
    match &capability.r#type {
        Some(plugin_capability::Type::Service(service)) => known(service.r#type, ServiceType::Unspecified),
        None => Err(CapabilityError::Missing),
    }
}

/// The services advertised, in order; entries that do not name a known
/// service are left out.
///
/// ```
/// use cnpgi_core::capabilities::{service, services_of, ServiceType};
/// use cnpgi_proto::identity::v1::PluginCapability;
///
/// let answer = [service(ServiceType::OperatorService), PluginCapability::default()];
/// assert_eq!(services_of(&answer), [ServiceType::OperatorService]);
/// ```
pub fn services_of(capabilities: &[PluginCapability]) -> Vec<ServiceType> {
    capabilities.iter().filter_map(|c| service_type(c).ok()).collect()
}

/// The names CloudNativePG writes in `status.pluginStatus[].capabilities`,
/// e.g. `TYPE_LIFECYCLE_SERVICE`.
pub fn service_names(services: &[ServiceType]) -> Vec<String> {
    services.iter().map(|s| s.as_str_name().to_owned()).collect()
}

/// The names written in `status.pluginStatus[].operatorCapabilities`, e.g.
/// `TYPE_MUTATE_CLUSTER`.
///
/// ```
/// use cnpgi_core::capabilities::{operator_rpc_names, OperatorRpc};
///
/// assert_eq!(operator_rpc_names(&[OperatorRpc::MutateCluster]), ["TYPE_MUTATE_CLUSTER"]);
/// ```
pub fn operator_rpc_names(rpcs: &[OperatorRpc]) -> Vec<String> {
    rpcs.iter().map(|r| r.as_str_name().to_owned()).collect()
}

/// Enum names of WAL RPCs, as in `status.pluginStatus[].walCapabilities`.
pub fn wal_rpc_names(rpcs: &[WalRpc]) -> Vec<String> {
    rpcs.iter().map(|r| r.as_str_name().to_owned()).collect()
}

/// Enum names of Backup RPCs, as in `status.pluginStatus[].backupCapabilities`.
pub fn backup_rpc_names(rpcs: &[BackupRpc]) -> Vec<String> {
    rpcs.iter().map(|r| r.as_str_name().to_owned()).collect()
}

/// Enum names of restore-job kinds, as in
/// `status.pluginStatus[].restoreJobHookCapabilities`.
///
/// ```
/// use cnpgi_core::capabilities::{restore_job_kind_names, RestoreJobKind};
///
/// assert_eq!(restore_job_kind_names(&[RestoreJobKind::Restore]), ["KIND_RESTORE"]);
/// ```
pub fn restore_job_kind_names(kinds: &[RestoreJobKind]) -> Vec<String> {
    kinds.iter().map(|k| k.as_str_name().to_owned()).collect()
}

/// The short name of a lifecycle operation, for messages: `CREATE`, `EVALUATE`.
///
/// ```
/// use cnpgi_core::capabilities::{operation_name, Operation};
///
/// assert_eq!(operation_name(Operation::Evaluate), "EVALUATE");
/// ```
pub fn operation_name(operation: Operation) -> &'static str {
    operation.as_str_name().trim_start_matches("TYPE_")
}

/// Whether a lifecycle capability matches an object of `group`/`kind`
/// (`""` is the core group) for `operation`.
///
/// ```
/// use cnpgi_core::capabilities::{lifecycle, matches_lifecycle, Operation};
///
/// let hook = lifecycle("", "Pod", [Operation::Create]);
/// assert!(matches_lifecycle(&hook, "", "Pod", Operation::Create));
/// assert!(!matches_lifecycle(&hook, "", "Pod", Operation::Evaluate));
/// assert!(!matches_lifecycle(&hook, "batch", "Job", Operation::Create));
/// ```
pub fn matches_lifecycle(
    capability: &OperatorLifecycleCapabilities,
    group: &str,
    kind: &str,
    operation: Operation,
) -> bool {
    capability.group == group
        && capability.kind == kind
        && capability.operation_types.iter().any(|t| t.r#type() == operation)
}

#[cfg(test)]
mod tests {
    use cnpgi_proto::{
        backup::v1::backup_capability, identity::v1::postgres_capability, metrics::v1::metrics_capability,
        wal::v1::wal_capability,
    };

    use super::*;

    #[test]
    fn every_service_round_trips_through_its_capability_and_name() {
        for service_type_ in [
            ServiceType::OperatorService,
            ServiceType::LifecycleService,
            ServiceType::WalService,
            ServiceType::BackupService,
            ServiceType::ReconcilerHooks,
            ServiceType::RestoreJob,
            ServiceType::Postgres,
            ServiceType::InstanceSidecarInjection,
            ServiceType::InstanceJobSidecarInjection,
            ServiceType::Metrics,
        ] {
            let capability = service(service_type_);
            assert_eq!(service_type(&capability), Ok(service_type_));
            let name = service_names(&[service_type_]).remove(0);
            assert_eq!(ServiceType::from_str_name(&name), Some(service_type_), "{name}");
        }
    }

    #[test]
    fn unspecified_unknown_and_missing_types_are_errors() {
        let unspecified = PluginCapability {
            r#type: Some(plugin_capability::Type::Service(plugin_capability::Service {
                r#type: 0,
            })),
        };
        assert_eq!(service_type(&unspecified), Err(CapabilityError::Unknown(0)));
        let unknown = PluginCapability {
            r#type: Some(plugin_capability::Type::Service(plugin_capability::Service {
                r#type: 99,
            })),
        };
        assert_eq!(service_type(&unknown), Err(CapabilityError::Unknown(99)));
        assert_eq!(
            service_type(&PluginCapability::default()),
            Err(CapabilityError::Missing)
        );
        assert!(services_of(&[unspecified, unknown, PluginCapability::default()]).is_empty());

        assert_eq!(OperatorCapability::default().value(), Err(CapabilityError::Missing));
        assert_eq!(
            ReconcilerHooksCapability { kind: 0 }.value(),
            Err(CapabilityError::Unknown(0))
        );
    }

    #[test]
    fn operator_rpcs_and_kinds_are_read_back_in_order() {
        let rpcs = [
            operator_rpc(OperatorRpc::ValidateClusterCreate),
            OperatorCapability::default(),
            operator_rpc(OperatorRpc::MutateCluster),
        ];
        assert_eq!(
            values_of(&rpcs),
            [OperatorRpc::ValidateClusterCreate, OperatorRpc::MutateCluster]
        );
        assert_eq!(
            operator_rpc_names(&values_of(&rpcs)),
            ["TYPE_VALIDATE_CLUSTER_CREATE", "TYPE_MUTATE_CLUSTER"]
        );
        assert_eq!(
            values_of(&[
                reconciler_hook(ReconcilerKind::Cluster),
                ReconcilerHooksCapability { kind: 0 }
            ]),
            [ReconcilerKind::Cluster]
        );
    }

    #[test]
    fn builders_of_the_other_services_set_their_oneof() {
        use cnpgi_proto::wal::v1::restore_job_hooks_capability::Kind as RestoreKind;
        assert!(wal_rpc(wal_capability::rpc::Type::ArchiveWal).r#type.is_some());
        assert!(
            postgres_rpc(postgres_capability::rpc::Type::EnrichConfiguration)
                .r#type
                .is_some()
        );
        assert!(metrics_rpc(metrics_capability::rpc::Type::Metrics).r#type.is_some());
        assert!(backup_rpc(backup_capability::rpc::Type::Backup).r#type.is_some());
        assert_eq!(
            restore_job_hook(RestoreKind::Restore).kind,
            i32::from(RestoreKind::Restore)
        );
    }

    #[test]
    fn the_other_services_capabilities_are_read_back_in_order() {
        assert_eq!(
            values_of(&[
                wal_rpc(WalRpc::RestoreWal),
                WalCapability::default(),
                wal_rpc(WalRpc::ArchiveWal)
            ]),
            [WalRpc::RestoreWal, WalRpc::ArchiveWal]
        );
        assert_eq!(WalCapability::default().value(), Err(CapabilityError::Missing));
        assert_eq!(
            values_of(&[backup_rpc(BackupRpc::Backup), backup_rpc(BackupRpc::Unspecified)]),
            [BackupRpc::Backup]
        );
        assert_eq!(
            values_of(&[
                RestoreJobHooksCapability { kind: 7 },
                restore_job_hook(RestoreJobKind::Restore)
            ]),
            [RestoreJobKind::Restore]
        );
        assert_eq!(
            values_of(&[postgres_rpc(PostgresRpc::EnrichConfiguration)]),
            [PostgresRpc::EnrichConfiguration]
        );
        assert_eq!(
            metrics_rpc(MetricsRpc::Unspecified).value(),
            Err(CapabilityError::Unknown(0))
        );
        assert_eq!(values_of(&[metrics_rpc(MetricsRpc::Metrics)]), [MetricsRpc::Metrics]);
    }
}
