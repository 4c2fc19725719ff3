//! The table of the CNPG-I services with RPCs: one row each, the one place
//! a service is described. Every side derives its per-service code from it
//! by passing [`for_each_service!`](crate::for_each_service) a macro of its
//! own, called once with every row.

/// Calls `$callback! { rows }` with one row per CNPG-I service with RPCs, in
/// the order of [`SERVICES`](crate::service::SERVICES) (the order a plugin
/// built with the SDK advertises them, and the order they are probed and
/// checked in).
///
/// A row, column by column:
///
/// ```text
/// /// Its description.
/// Wal = WAL (WalService, "WAL", "cnpgi.wal.v1.WAL") {
///     key: wal,                            // its module on every side
///     proto: wal::v1,                      // its cnpgi-proto package
///     client: wal_client::WalClient,       // its generated client and server
///     server: wal_server::WalServer,
///     capabilities: WalCapabilitiesRequest -> WalCapabilitiesResult { capabilities: [WalCapability] },
///     values: rpc wal_capability,          // an entry is an RPC (`rpc`), a kind (`kind`) or read whole
///     info: wal_rpcs,                      // its field of the client's PluginInfo
///     sdk: WalService, local: wal_service, // the SDK's service, LocalPlugin's accessor
///     rpcs: [ /// doc
///             ARCHIVE = "Archive", EntryOrRecoverySource, RefusesGarbage; ... ],
/// }
/// ```
///
/// `Wal` names the service on the client side (`cnpgi_client::capabilities::Wal`),
/// `WAL` its [`Service`](crate::service::Service) constant; the capability
/// is its [`ServiceType`](crate::capabilities::ServiceType) variant, then
/// its label and its gRPC name. Each RPC is its constant in
/// `service::<key>`, its name in the `.proto`, where the plugin finds its
/// parameters ([`ParametersFrom`](crate::service::ParametersFrom)) and how the
/// conformance suite exercises it ([`Exercise`](crate::service::Exercise)).
///
/// The `key` is the name of the service's module on each side: the client's
/// accessor (`PluginClient::wal`), the conformance suite's check file
/// (`conformance/wal.rs`) and the SDK's handler file (`plugin/wal.rs`).
///
/// ```
/// macro_rules! labels {
///     ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) { $($row:tt)* } )*) => {
///         [$($label),*]
///     };
/// }
///
/// let labels = cnpgi_core::for_each_service!(labels);
/// assert_eq!(labels[3], "WAL");
/// assert_eq!(labels.len(), cnpgi_core::service::with_rpcs().count());
/// ```
#[macro_export]
macro_rules! for_each_service {
    ($callback:ident) => {
        $callback! {
            /// The OperatorLifecycle service: patches of the objects the operator writes.
            Lifecycle = OPERATOR_LIFECYCLE (LifecycleService, "OperatorLifecycle", "cnpgi.operator_lifecycle.v1.OperatorLifecycle") {
                key: lifecycle,
                proto: operator_lifecycle::v1,
                client: operator_lifecycle_client::OperatorLifecycleClient,
                server: operator_lifecycle_server::OperatorLifecycleServer,
                capabilities: OperatorLifecycleCapabilitiesRequest -> OperatorLifecycleCapabilitiesResponse {
                    lifecycle_capabilities: [OperatorLifecycleCapabilities]
                },
                values: whole,
                info: lifecycle,
                sdk: LifecycleService, local: lifecycle_service,
                rpcs: [
                    /// `OperatorLifecycle/LifecycleHook`.
                    LIFECYCLE_HOOK = "LifecycleHook", Entry, Called;
                ],
            }
            /// The Operator service: the Cluster's validation, defaults and status.
            Operator = OPERATOR (OperatorService, "Operator", "cnpgi.operator.v1.Operator") {
                key: operator,
                proto: operator::v1,
                client: operator_client::OperatorClient,
                server: operator_server::OperatorServer,
                capabilities: OperatorCapabilitiesRequest -> OperatorCapabilitiesResult { capabilities: [OperatorCapability] },
                values: rpc operator_capability,
                info: operator_rpcs,
                sdk: OperatorService, local: operator_service,
                rpcs: [
                    /// `Operator/ValidateClusterCreate`.
                    VALIDATE_CLUSTER_CREATE = "ValidateClusterCreate", Entry, Called;
                    /// `Operator/ValidateClusterChange`.
                    VALIDATE_CLUSTER_CHANGE = "ValidateClusterChange", Entry, Called;
                    /// `Operator/MutateCluster`.
                    MUTATE_CLUSTER = "MutateCluster", Entry, Called;
                    /// `Operator/SetStatusInCluster`.
                    SET_STATUS_IN_CLUSTER = "SetStatusInCluster", Entry, Called;
                    /// `Operator/Deregister`.
                    DEREGISTER = "Deregister", Entry, NotCalled;
                ],
            }
            /// The ReconcilerHooks service: calls before and after a reconciliation.
            Reconciler = RECONCILER_HOOKS (ReconcilerHooks, "ReconcilerHooks", "cnpgi.reconciler.v1.ReconcilerHooks") {
                key: reconciler,
                proto: reconciler::v1,
                client: reconciler_hooks_client::ReconcilerHooksClient,
                server: reconciler_hooks_server::ReconcilerHooksServer,
                capabilities: ReconcilerHooksCapabilitiesRequest -> ReconcilerHooksCapabilitiesResult {
                    reconciler_capabilities: [ReconcilerHooksCapability]
                },
                values: kind reconciler_hooks_capability,
                info: reconciler_kinds,
                sdk: ReconcilerService, local: reconciler_service,
                rpcs: [
                    /// `ReconcilerHooks/Pre`.
                    PRE = "Pre", Entry, RefusesGarbage;
                    /// `ReconcilerHooks/Post`.
                    POST = "Post", Entry, RefusesGarbage;
                ],
            }
            /// The WAL service: archiving and restoring WAL files.
            Wal = WAL (WalService, "WAL", "cnpgi.wal.v1.WAL") {
                key: wal,
                proto: wal::v1,
                client: wal_client::WalClient,
                server: wal_server::WalServer,
                capabilities: WalCapabilitiesRequest -> WalCapabilitiesResult { capabilities: [WalCapability] },
                values: rpc wal_capability,
                info: wal_rpcs,
                sdk: WalService, local: wal_service,
                rpcs: [
                    /// `WAL/Archive`.
                    ARCHIVE = "Archive", EntryOrRecoverySource, RefusesGarbage;
                    /// `WAL/Restore`.
                    RESTORE = "Restore", EntryOrRecoverySource, RefusesMissingFile;
                    /// `WAL/Status`.
                    STATUS = "Status", Entry, RefusesGarbage;
                    /// `WAL/SetFirstRequired`.
                    SET_FIRST_REQUIRED = "SetFirstRequired", Entry, RefusesGarbage;
                ],
            }
            /// The Backup service: base backups.
            Backup = BACKUP (BackupService, "Backup", "cnpgi.backup.v1.Backup") {
                key: backup,
                proto: backup::v1,
                client: backup_client::BackupClient,
                server: backup_server::BackupServer,
                capabilities: BackupCapabilitiesRequest -> BackupCapabilitiesResult { capabilities: [BackupCapability] },
                values: rpc backup_capability,
                info: backup_rpcs,
                sdk: BackupService, local: backup_service,
                rpcs: [
                    /// `Backup/Backup`.
                    BACKUP = "Backup", Entry, RefusesGarbage;
                ],
            }
            /// The RestoreJobHooks service: PGDATA filled in the recovery Job.
            RestoreJob = RESTORE_JOB_HOOKS (RestoreJob, "RestoreJobHooks", "cnpgi.wal.v1.RestoreJobHooks") {
                key: restore_job,
                proto: wal::v1,
                client: restore_job_hooks_client::RestoreJobHooksClient,
                server: restore_job_hooks_server::RestoreJobHooksServer,
                capabilities: RestoreJobHooksCapabilitiesRequest -> RestoreJobHooksCapabilitiesResult {
                    capabilities: [RestoreJobHooksCapability]
                },
                values: kind restore_job_hooks_capability,
                info: restore_job_kinds,
                sdk: RestoreJobService, local: restore_job_service,
                rpcs: [
                    /// `RestoreJobHooks/Restore`.
                    RESTORE = "Restore", EntryOrRecoverySource, RefusesGarbage;
                ],
            }
            /// The Metrics service: Prometheus metrics of the instance.
            Metrics = METRICS (Metrics, "Metrics", "cnpgi.metrics.v1.Metrics") {
                key: metrics,
                proto: metrics::v1,
                client: metrics_client::MetricsClient,
                server: metrics_server::MetricsServer,
                capabilities: MetricsCapabilitiesRequest -> MetricsCapabilitiesResult { capabilities: [MetricsCapability] },
                values: rpc metrics_capability,
                info: metrics_rpcs,
                sdk: MetricsService, local: metrics_service,
                rpcs: [
                    /// `Metrics/Define`.
                    DEFINE = "Define", Entry, Called;
                    /// `Metrics/Collect`.
                    COLLECT = "Collect", Entry, Called;
                ],
            }
            /// The Postgres service: PostgreSQL configuration of the instances
            /// (its messages are in upstream's identity package).
            Postgres = POSTGRES (Postgres, "Postgres", "cnpgi.identity.v1.Postgres") {
                key: postgres,
                proto: identity::v1,
                client: postgres_client::PostgresClient,
                server: postgres_server::PostgresServer,
                capabilities: PostgresCapabilitiesRequest -> PostgresCapabilitiesResult { capabilities: [PostgresCapability] },
                values: rpc postgres_capability,
                info: postgres_rpcs,
                sdk: PostgresService, local: postgres_service,
                rpcs: [
                    /// `Postgres/EnrichConfiguration`.
                    ENRICH_CONFIGURATION = "EnrichConfiguration", Entry, Called;
                ],
            }
        }
    };
}
