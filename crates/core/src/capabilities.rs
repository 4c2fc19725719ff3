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
//! use cnpgi_core::capabilities::{self, OperatorRpc, ServiceType};
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
//! assert_eq!(capabilities::operator_rpc_type(&rpc), Ok(OperatorRpc::MutateCluster));
//! ```

use cnpgi_proto::{
    backup::v1::{BackupCapability, backup_capability},
    identity::v1::{PluginCapability, PostgresCapability, plugin_capability, postgres_capability},
    metrics::v1::{MetricsCapability, metrics_capability},
    operator::v1::{OperatorCapability, operator_capability},
    operator_lifecycle::v1::{OperatorLifecycleCapabilities, OperatorOperationType},
    reconciler::v1::ReconcilerHooksCapability,
    wal::v1::{RestoreJobHooksCapability, WalCapability, wal_capability},
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

/// `OperatorCapability` advertising `rpc`, for `Operator/GetCapabilities`.
///
/// ```
/// use cnpgi_core::capabilities::{operator_rpc, operator_rpc_type, OperatorRpc};
///
/// let capability = operator_rpc(OperatorRpc::SetStatusInCluster);
/// assert_eq!(operator_rpc_type(&capability), Ok(OperatorRpc::SetStatusInCluster));
/// ```
pub fn operator_rpc(rpc: OperatorRpc) -> OperatorCapability {
    OperatorCapability {
        r#type: Some(operator_capability::Type::Rpc(operator_capability::Rpc {
            r#type: rpc.into(),
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

/// `ReconcilerHooksCapability` for objects of `kind`.
///
/// ```
/// use cnpgi_core::capabilities::{reconciler_hook, reconciler_kind, ReconcilerKind};
///
/// assert_eq!(reconciler_kind(&reconciler_hook(ReconcilerKind::Cluster)), Ok(ReconcilerKind::Cluster));
/// ```
pub fn reconciler_hook(kind: ReconcilerKind) -> ReconcilerHooksCapability {
    ReconcilerHooksCapability { kind: kind.into() }
}

/// `WalCapability` advertising `rpc`.
///
/// ```
/// use cnpgi_proto::wal::v1::wal_capability::rpc::Type;
///
/// assert!(cnpgi_core::capabilities::wal_rpc(Type::ArchiveWal).r#type.is_some());
/// ```
pub fn wal_rpc(rpc: wal_capability::rpc::Type) -> WalCapability {
    WalCapability {
        r#type: Some(wal_capability::Type::Rpc(wal_capability::Rpc { r#type: rpc.into() })),
    }
}

/// `RestoreJobHooksCapability` for `kind`.
pub fn restore_job_hook(kind: cnpgi_proto::wal::v1::restore_job_hooks_capability::Kind) -> RestoreJobHooksCapability {
    RestoreJobHooksCapability { kind: kind.into() }
}

/// `PostgresCapability` advertising `rpc`.
pub fn postgres_rpc(rpc: postgres_capability::rpc::Type) -> PostgresCapability {
    PostgresCapability {
        r#type: Some(postgres_capability::Type::Rpc(postgres_capability::Rpc {
            r#type: rpc.into(),
        })),
    }
}

/// `MetricsCapability` advertising `rpc`.
pub fn metrics_rpc(rpc: metrics_capability::rpc::Type) -> MetricsCapability {
    MetricsCapability {
        r#type: Some(metrics_capability::Type::Rpc(metrics_capability::Rpc {
            r#type: rpc.into(),
        })),
    }
}

/// `BackupCapability` advertising `rpc`.
pub fn backup_rpc(rpc: backup_capability::rpc::Type) -> BackupCapability {
    BackupCapability {
        r#type: Some(backup_capability::Type::Rpc(backup_capability::Rpc {
            r#type: rpc.into(),
        })),
    }
}

/// A known, specified enum value, or why not.
fn known<T: TryFrom<i32> + PartialEq>(value: i32, unspecified: T) -> Result<T, CapabilityError> {
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

/// The Operator RPC an `OperatorCapability` advertises.
///
/// # Errors
///
/// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
pub fn operator_rpc_type(capability: &OperatorCapability) -> Result<OperatorRpc, CapabilityError> {
    match &capability.r#type {
        Some(operator_capability::Type::Rpc(rpc)) => known(rpc.r#type, OperatorRpc::Unspecified),
        None => Err(CapabilityError::Missing),
    }
}

/// The kind a `ReconcilerHooksCapability` hooks into.
///
/// # Errors
///
/// [`CapabilityError::Unknown`] for an unspecified or unknown kind.
pub fn reconciler_kind(capability: &ReconcilerHooksCapability) -> Result<ReconcilerKind, CapabilityError> {
    known(capability.kind, ReconcilerKind::Unspecified)
}

/// The WAL RPC a `WALCapability` advertises.
///
/// # Errors
///
/// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
///
/// ```
/// use cnpgi_core::capabilities::{wal_rpc, wal_rpc_type, WalRpc};
///
/// assert_eq!(wal_rpc_type(&wal_rpc(WalRpc::RestoreWal)), Ok(WalRpc::RestoreWal));
/// ```
pub fn wal_rpc_type(capability: &WalCapability) -> Result<WalRpc, CapabilityError> {
    match &capability.r#type {
        Some(wal_capability::Type::Rpc(rpc)) => known(rpc.r#type, WalRpc::Unspecified),
        None => Err(CapabilityError::Missing),
    }
}

/// The Backup RPC a `BackupCapability` advertises.
///
/// # Errors
///
/// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
pub fn backup_rpc_type(capability: &BackupCapability) -> Result<BackupRpc, CapabilityError> {
    match &capability.r#type {
        Some(backup_capability::Type::Rpc(rpc)) => known(rpc.r#type, BackupRpc::Unspecified),
        None => Err(CapabilityError::Missing),
    }
}

/// The kind a `RestoreJobHooksCapability` handles.
///
/// # Errors
///
/// [`CapabilityError::Unknown`] for an unspecified or unknown kind.
pub fn restore_job_kind(capability: &RestoreJobHooksCapability) -> Result<RestoreJobKind, CapabilityError> {
    known(capability.kind, RestoreJobKind::Unspecified)
}

/// The Postgres RPC a `PostgresCapability` advertises.
///
/// # Errors
///
/// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
pub fn postgres_rpc_type(capability: &PostgresCapability) -> Result<PostgresRpc, CapabilityError> {
    match &capability.r#type {
        Some(postgres_capability::Type::Rpc(rpc)) => known(rpc.r#type, PostgresRpc::Unspecified),
        None => Err(CapabilityError::Missing),
    }
}

/// The Metrics RPC a `MetricsCapability` advertises.
///
/// # Errors
///
/// [`CapabilityError`] when it has no type, or an unspecified or unknown one.
pub fn metrics_rpc_type(capability: &MetricsCapability) -> Result<MetricsRpc, CapabilityError> {
    match &capability.r#type {
        Some(metrics_capability::Type::Rpc(rpc)) => known(rpc.r#type, MetricsRpc::Unspecified),
        None => Err(CapabilityError::Missing),
    }
}

/// The WAL RPCs advertised, in order; unknown entries left out.
pub fn wal_rpcs_of(capabilities: &[WalCapability]) -> Vec<WalRpc> {
    capabilities.iter().filter_map(|c| wal_rpc_type(c).ok()).collect()
}

/// The Backup RPCs advertised, in order; unknown entries left out.
pub fn backup_rpcs_of(capabilities: &[BackupCapability]) -> Vec<BackupRpc> {
    capabilities.iter().filter_map(|c| backup_rpc_type(c).ok()).collect()
}

/// The restore-job kinds handled, in order; unknown entries left out.
pub fn restore_job_kinds_of(capabilities: &[RestoreJobHooksCapability]) -> Vec<RestoreJobKind> {
    capabilities.iter().filter_map(|c| restore_job_kind(c).ok()).collect()
}

/// The Postgres RPCs advertised, in order; unknown entries left out.
pub fn postgres_rpcs_of(capabilities: &[PostgresCapability]) -> Vec<PostgresRpc> {
    capabilities.iter().filter_map(|c| postgres_rpc_type(c).ok()).collect()
}

/// The Metrics RPCs advertised, in order; unknown entries left out.
pub fn metrics_rpcs_of(capabilities: &[MetricsCapability]) -> Vec<MetricsRpc> {
    capabilities.iter().filter_map(|c| metrics_rpc_type(c).ok()).collect()
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

/// The Operator RPCs advertised, in order; entries that do not name a known
/// RPC are left out.
pub fn operator_rpcs_of(capabilities: &[OperatorCapability]) -> Vec<OperatorRpc> {
    capabilities.iter().filter_map(|c| operator_rpc_type(c).ok()).collect()
}

/// The kinds hooked, in order; unspecified and unknown ones left out.
pub fn reconciler_kinds_of(capabilities: &[ReconcilerHooksCapability]) -> Vec<ReconcilerKind> {
    capabilities.iter().filter_map(|c| reconciler_kind(c).ok()).collect()
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

        assert_eq!(
            operator_rpc_type(&OperatorCapability::default()),
            Err(CapabilityError::Missing)
        );
        assert_eq!(
            reconciler_kind(&ReconcilerHooksCapability { kind: 0 }),
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
            operator_rpcs_of(&rpcs),
            [OperatorRpc::ValidateClusterCreate, OperatorRpc::MutateCluster]
        );
        assert_eq!(
            operator_rpc_names(&operator_rpcs_of(&rpcs)),
            ["TYPE_VALIDATE_CLUSTER_CREATE", "TYPE_MUTATE_CLUSTER"]
        );
        assert_eq!(
            reconciler_kinds_of(&[
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
            wal_rpcs_of(&[
                wal_rpc(WalRpc::RestoreWal),
                WalCapability::default(),
                wal_rpc(WalRpc::ArchiveWal)
            ]),
            [WalRpc::RestoreWal, WalRpc::ArchiveWal]
        );
        assert_eq!(wal_rpc_type(&WalCapability::default()), Err(CapabilityError::Missing));
        assert_eq!(
            backup_rpcs_of(&[backup_rpc(BackupRpc::Backup), backup_rpc(BackupRpc::Unspecified)]),
            [BackupRpc::Backup]
        );
        assert_eq!(
            restore_job_kinds_of(&[
                RestoreJobHooksCapability { kind: 7 },
                restore_job_hook(RestoreJobKind::Restore)
            ]),
            [RestoreJobKind::Restore]
        );
        assert_eq!(
            postgres_rpcs_of(&[postgres_rpc(PostgresRpc::EnrichConfiguration)]),
            [PostgresRpc::EnrichConfiguration]
        );
        assert_eq!(
            metrics_rpc_type(&metrics_rpc(MetricsRpc::Unspecified)),
            Err(CapabilityError::Unknown(0))
        );
        assert_eq!(
            metrics_rpcs_of(&[metrics_rpc(MetricsRpc::Metrics)]),
            [MetricsRpc::Metrics]
        );
    }
}
