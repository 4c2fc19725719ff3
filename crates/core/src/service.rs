//! The one description of each CNPG-I service: its capability, names and
//! RPCs, and for each RPC where a plugin finds its parameters and how the
//! conformance suite exercises it.
//!
//! Probing (`cnpgi-client`'s `probe`), the conformance suite
//! (`check-plugin`), the SDK's dispatch (`cnpgi-pluginhelper`'s `Plugin`)
//! and the operator's routing all read [`SERVICES`]: the order in which a
//! plugin advertises its services and is probed and checked, the names in
//! messages and errors (`WAL/Archive`), which calls may be made for a
//! Cluster that names the plugin only as a recovery source.
//!
//! Adding a service is its `.proto` (in `cnpgi-proto`), an entry here and its
//! capability helpers in [`capabilities`](crate::capabilities); then, because
//! each side calls or serves it through its generated, typed stub, one arm in
//! each dispatch (`cnpgi-client`: the `PluginClient` stub, `probe`'s
//! `PluginInfo` field, `check-plugin`'s `checks_of`; `cnpgi-pluginhelper`: the
//! `Plugin`'s `Handlers`) besides its own files (its checks, its handlers).
//!
//! Identity is not in the table: every plugin serves it, and it has no
//! capability of its own.
//!
//! ```
//! use cnpgi_core::{capabilities::ServiceType, service};
//!
//! let wal = service::of(ServiceType::WalService).expect("a CNPG-I service");
//! assert_eq!(wal.grpc_name, Some("cnpgi.wal.v1.WAL"));
//! assert_eq!(wal.get_capabilities, Some("WAL/GetCapabilities"));
//! assert_eq!(service::wal::ARCHIVE.method, "WAL/Archive");
//! assert!(wal.rpcs.contains(&service::wal::ARCHIVE));
//! ```

use crate::capabilities::ServiceType;

/// The fully qualified gRPC name of the Identity service, which every plugin serves.
pub const IDENTITY_NAME: &str = "cnpgi.identity.v1.Identity";

/// One CNPG-I service, as every side of the protocol sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// What `Identity/GetPluginCapabilities` advertises it as.
    pub capability: ServiceType,
    /// Its name in messages, check names and errors: `WAL`, `RestoreJobHooks`.
    pub label: &'static str,
    /// The fully qualified gRPC service, e.g. `cnpgi.wal.v1.WAL`; `None` for
    /// a service that is only advertised (the sidecar injections: the host
    /// injects the plugin's container, and calls nothing for it).
    pub grpc_name: Option<&'static str>,
    /// `GetCapabilities` as named in messages (`WAL/GetCapabilities`), when
    /// the service has RPCs: probing asks it of every advertised service.
    pub get_capabilities: Option<&'static str>,
    /// The RPCs besides `GetCapabilities`, in the order of the `.proto`.
    pub rpcs: &'static [Rpc],
}

/// One RPC of a [`Service`], besides `GetCapabilities`. Every one of them
/// carries the Cluster it is called for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rpc {
    /// As in the `.proto`: `Archive`.
    pub name: &'static str,
    /// `Service/RPC` as named in messages, errors and metrics: `WAL/Archive`.
    pub method: &'static str,
    /// Where the called plugin finds its parameters in the Cluster sent.
    pub parameters: ParametersFrom,
    /// How the conformance suite exercises it.
    pub conformance: Exercise,
}

/// Where a plugin finds its parameters in the Cluster an RPC is called for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParametersFrom {
    /// Its `spec.plugins[]` entry (no parameters when absent).
    Entry,
    /// Its `spec.plugins[]` entry, else the `plugin` of the
    /// `spec.externalClusters[]` entry naming it, else the parameters sent in
    /// the request: the calls about an archive, which a Cluster may name only
    /// as a recovery source (a Cluster recovering from another one's
    /// archive calls a plugin it does not enable).
    EntryOrRecoverySource,
}

/// How the conformance suite (`check-plugin`) exercises an advertised RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exercise {
    /// Called with the sample Cluster, and its answer checked: the RPC
    /// transforms values, so calling it changes nothing on the plugin's side.
    Called,
    /// Sent a garbage Cluster instead of one: the RPC acts on the plugin's
    /// side (archives, backs up, restores, reconciles), so it is sent nothing
    /// it could act on. It must refuse; `INVALID_ARGUMENT` is recommended.
    RefusesGarbage,
    /// Asked for a WAL file no archive can have: it must refuse; `NOT_FOUND`
    /// is recommended (PostgreSQL's restore_command treats it as the end of
    /// the archive).
    RefusesMissingFile,
    /// Not called: what it does is only on the plugin's side, and calling it
    /// would change that (`Deregister` makes the plugin forget a Cluster).
    NotCalled,
}

impl Exercise {
    /// What is sent instead of a usable request, and the code recommended
    /// for refusing it, for the exercises that expect a refusal.
    ///
    /// ```
    /// use cnpgi_core::service::Exercise;
    ///
    /// assert_eq!(
    ///     Exercise::RefusesGarbage.refusal(),
    ///     Some(("garbage Cluster", tonic::Code::InvalidArgument))
    /// );
    /// assert_eq!(Exercise::Called.refusal(), None);
    /// ```
    pub fn refusal(self) -> Option<(&'static str, tonic::Code)> {
        match self {
            Self::RefusesGarbage => Some(("garbage Cluster", tonic::Code::InvalidArgument)),
            Self::RefusesMissingFile => Some(("a file the archive lacks", tonic::Code::NotFound)),
            Self::Called | Self::NotCalled => None,
        }
    }
}

/// An [`Rpc`] of service `$service` (its label).
macro_rules! rpc {
    ($service:literal / $name:literal, $parameters:ident, $exercise:ident) => {
        Rpc {
            name: $name,
            method: concat!($service, "/", $name),
            parameters: ParametersFrom::$parameters,
            conformance: Exercise::$exercise,
        }
    };
}

/// A [`Service`] with RPCs.
macro_rules! service {
    ($capability:ident, $label:literal, $grpc:literal, $rpcs:expr) => {
        Service {
            capability: ServiceType::$capability,
            label: $label,
            grpc_name: Some($grpc),
            get_capabilities: Some(concat!($label, "/GetCapabilities")),
            rpcs: $rpcs,
        }
    };
}

/// The RPCs of the OperatorLifecycle service.
pub mod lifecycle {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `OperatorLifecycle/LifecycleHook`.
    pub const LIFECYCLE_HOOK: Rpc = rpc!("OperatorLifecycle" / "LifecycleHook", Entry, Called);
}

/// The RPCs of the Operator service.
pub mod operator {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `Operator/ValidateClusterCreate`.
    pub const VALIDATE_CLUSTER_CREATE: Rpc = rpc!("Operator" / "ValidateClusterCreate", Entry, Called);
    /// `Operator/ValidateClusterChange`.
    pub const VALIDATE_CLUSTER_CHANGE: Rpc = rpc!("Operator" / "ValidateClusterChange", Entry, Called);
    /// `Operator/MutateCluster`.
    pub const MUTATE_CLUSTER: Rpc = rpc!("Operator" / "MutateCluster", Entry, Called);
    /// `Operator/SetStatusInCluster`.
    pub const SET_STATUS_IN_CLUSTER: Rpc = rpc!("Operator" / "SetStatusInCluster", Entry, Called);
    /// `Operator/Deregister`.
    pub const DEREGISTER: Rpc = rpc!("Operator" / "Deregister", Entry, NotCalled);
}

/// The RPCs of the ReconcilerHooks service.
pub mod reconciler {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `ReconcilerHooks/Pre`.
    pub const PRE: Rpc = rpc!("ReconcilerHooks" / "Pre", Entry, RefusesGarbage);
    /// `ReconcilerHooks/Post`.
    pub const POST: Rpc = rpc!("ReconcilerHooks" / "Post", Entry, RefusesGarbage);
}

/// The RPCs of the WAL service.
pub mod wal {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `WAL/Archive`.
    pub const ARCHIVE: Rpc = rpc!("WAL" / "Archive", EntryOrRecoverySource, RefusesGarbage);
    /// `WAL/Restore`.
    pub const RESTORE: Rpc = rpc!("WAL" / "Restore", EntryOrRecoverySource, RefusesMissingFile);
    /// `WAL/Status`.
    pub const STATUS: Rpc = rpc!("WAL" / "Status", Entry, RefusesGarbage);
    /// `WAL/SetFirstRequired`.
    pub const SET_FIRST_REQUIRED: Rpc = rpc!("WAL" / "SetFirstRequired", Entry, RefusesGarbage);
}

/// The RPCs of the Backup service.
pub mod backup {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `Backup/Backup`.
    pub const BACKUP: Rpc = rpc!("Backup" / "Backup", Entry, RefusesGarbage);
}

/// The RPCs of the RestoreJobHooks service.
pub mod restore_job {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `RestoreJobHooks/Restore`.
    pub const RESTORE: Rpc = rpc!("RestoreJobHooks" / "Restore", EntryOrRecoverySource, RefusesGarbage);
}

/// The RPCs of the Metrics service.
pub mod metrics {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `Metrics/Define`.
    pub const DEFINE: Rpc = rpc!("Metrics" / "Define", Entry, Called);
    /// `Metrics/Collect`.
    pub const COLLECT: Rpc = rpc!("Metrics" / "Collect", Entry, Called);
}

/// The RPCs of the Postgres service.
pub mod postgres {
    use super::{Exercise, ParametersFrom, Rpc};

    /// `Postgres/EnrichConfiguration`.
    pub const ENRICH_CONFIGURATION: Rpc = rpc!("Postgres" / "EnrichConfiguration", Entry, Called);
}

/// The OperatorLifecycle service: patches of the objects the operator writes.
pub const OPERATOR_LIFECYCLE: Service = service!(
    LifecycleService,
    "OperatorLifecycle",
    "cnpgi.operator_lifecycle.v1.OperatorLifecycle",
    &[lifecycle::LIFECYCLE_HOOK]
);
/// The Operator service: the Cluster's validation, defaults and status.
pub const OPERATOR: Service = service!(
    OperatorService,
    "Operator",
    "cnpgi.operator.v1.Operator",
    &[
        operator::VALIDATE_CLUSTER_CREATE,
        operator::VALIDATE_CLUSTER_CHANGE,
        operator::MUTATE_CLUSTER,
        operator::SET_STATUS_IN_CLUSTER,
        operator::DEREGISTER,
    ]
);
/// The ReconcilerHooks service: calls before and after a reconciliation.
pub const RECONCILER_HOOKS: Service = service!(
    ReconcilerHooks,
    "ReconcilerHooks",
    "cnpgi.reconciler.v1.ReconcilerHooks",
    &[reconciler::PRE, reconciler::POST]
);
/// The WAL service: archiving and restoring WAL files.
pub const WAL: Service = service!(
    WalService,
    "WAL",
    "cnpgi.wal.v1.WAL",
    &[wal::ARCHIVE, wal::RESTORE, wal::STATUS, wal::SET_FIRST_REQUIRED]
);
/// The Backup service: base backups.
pub const BACKUP: Service = service!(BackupService, "Backup", "cnpgi.backup.v1.Backup", &[backup::BACKUP]);
/// The RestoreJobHooks service: PGDATA filled in the recovery Job.
pub const RESTORE_JOB_HOOKS: Service = service!(
    RestoreJob,
    "RestoreJobHooks",
    "cnpgi.wal.v1.RestoreJobHooks",
    &[restore_job::RESTORE]
);
/// The Metrics service: Prometheus metrics of the instance.
pub const METRICS: Service = service!(
    Metrics,
    "Metrics",
    "cnpgi.metrics.v1.Metrics",
    &[metrics::DEFINE, metrics::COLLECT]
);
/// The Postgres service: PostgreSQL configuration of the instances.
pub const POSTGRES: Service = service!(
    Postgres,
    "Postgres",
    "cnpgi.identity.v1.Postgres",
    &[postgres::ENRICH_CONFIGURATION]
);
/// The plugin's sidecar is injected into instance Pods: advertised only.
pub const INSTANCE_SIDECAR_INJECTION: Service = Service {
    capability: ServiceType::InstanceSidecarInjection,
    label: "InstanceSidecarInjection",
    grpc_name: None,
    get_capabilities: None,
    rpcs: &[],
};
/// The plugin's sidecar is injected into the instances' Jobs: advertised only.
pub const INSTANCE_JOB_SIDECAR_INJECTION: Service = Service {
    capability: ServiceType::InstanceJobSidecarInjection,
    label: "InstanceJobSidecarInjection",
    grpc_name: None,
    get_capabilities: None,
    rpcs: &[],
};

/// Every service, in the order a plugin built with the SDK advertises them
/// (the order hosts write in `status.pluginStatus[].capabilities`), which is
/// also the order they are probed and checked in.
pub const SERVICES: &[Service] = &[
    OPERATOR_LIFECYCLE,
    OPERATOR,
    RECONCILER_HOOKS,
    WAL,
    BACKUP,
    RESTORE_JOB_HOOKS,
    METRICS,
    POSTGRES,
    INSTANCE_SIDECAR_INJECTION,
    INSTANCE_JOB_SIDECAR_INJECTION,
];

/// The description of the service advertised as `capability`; `None` for
/// `TYPE_UNSPECIFIED`.
///
/// ```
/// use cnpgi_core::{capabilities::ServiceType, service};
///
/// assert_eq!(service::of(ServiceType::RestoreJob).map(|s| s.label), Some("RestoreJobHooks"));
/// assert_eq!(service::of(ServiceType::Unspecified), None);
/// ```
pub fn of(capability: ServiceType) -> Option<&'static Service> {
    SERVICES.iter().find(|service| service.capability == capability)
}

/// The services with RPCs (and so a `GetCapabilities` to probe), in order.
pub fn with_rpcs() -> impl Iterator<Item = &'static Service> {
    SERVICES.iter().filter(|service| service.get_capabilities.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use cnpgi_proto as proto;

    #[test]
    fn every_advertisable_service_is_described_once() {
        for value in 1..64 {
            let Ok(capability) = ServiceType::try_from(value) else {
                continue;
            };
            let described = SERVICES.iter().filter(|s| s.capability == capability).count();
            assert_eq!(described, 1, "{capability:?}");
        }
        assert!(of(ServiceType::Unspecified).is_none());
    }

    #[test]
    fn grpc_names_are_the_generated_ones() {
        let generated = [
            (
                ServiceType::LifecycleService,
                proto::operator_lifecycle::v1::operator_lifecycle_server::SERVICE_NAME,
            ),
            (
                ServiceType::OperatorService,
                proto::operator::v1::operator_server::SERVICE_NAME,
            ),
            (
                ServiceType::ReconcilerHooks,
                proto::reconciler::v1::reconciler_hooks_server::SERVICE_NAME,
            ),
            (ServiceType::WalService, proto::wal::v1::wal_server::SERVICE_NAME),
            (
                ServiceType::BackupService,
                proto::backup::v1::backup_server::SERVICE_NAME,
            ),
            (
                ServiceType::RestoreJob,
                proto::wal::v1::restore_job_hooks_server::SERVICE_NAME,
            ),
            (ServiceType::Metrics, proto::metrics::v1::metrics_server::SERVICE_NAME),
            (
                ServiceType::Postgres,
                proto::identity::v1::postgres_server::SERVICE_NAME,
            ),
        ];
        for (capability, name) in generated {
            assert_eq!(of(capability).and_then(|s| s.grpc_name), Some(name), "{capability:?}");
        }
        assert_eq!(with_rpcs().count(), generated.len());
        assert_eq!(IDENTITY_NAME, proto::identity::v1::identity_server::SERVICE_NAME);
    }

    /// The RPCs listed are the `.proto`'s, read from the descriptor set the
    /// generated code is built from.
    #[test]
    fn rpcs_are_the_protos_and_named_after_their_service() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(proto::FILE_DESCRIPTOR_SET).expect("descriptor set");
        for service in with_rpcs() {
            let grpc_name = service.grpc_name.expect("a service with RPCs has a gRPC name");
            let (package, name) = grpc_name.rsplit_once('.').expect("qualified");
            let declared = set
                .file
                .iter()
                .filter(|file| file.package() == package)
                .flat_map(|file| &file.service)
                .find(|s| s.name() == name)
                .unwrap_or_else(|| panic!("{grpc_name} in the descriptor set"));
            let mut methods: Vec<&str> = declared.method.iter().map(|m| m.name()).collect();
            assert_eq!(methods.remove(0), "GetCapabilities", "{grpc_name}");
            let described: Vec<&str> = service.rpcs.iter().map(|rpc| rpc.name).collect();
            assert_eq!(described, methods, "{grpc_name}");
            for rpc in service.rpcs {
                assert_eq!(rpc.method, format!("{}/{}", service.label, rpc.name));
            }
        }
    }

    #[test]
    fn refusals_name_what_is_sent_and_the_code() {
        assert_eq!(
            wal::RESTORE.conformance.refusal(),
            Some(("a file the archive lacks", tonic::Code::NotFound))
        );
        assert_eq!(operator::DEREGISTER.conformance.refusal(), None);
    }
}
