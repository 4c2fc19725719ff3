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
//! Every service with RPCs is one row of [`for_each_service!`]
//! (`service/table.rs`): its capability, names, generated stubs,
//! capability entries and RPCs. This module derives from it the constants
//! below and each entry's [`Capability`]; `cnpgi-client` derives the
//! `PluginClient` accessors, probing's `PluginInfo` fields and the
//! conformance suite's dispatch; `cnpgi-pluginhelper` the `Plugin`'s
//! handlers and its registration of servers. Adding a service is then its
//! `.proto` (in `cnpgi-proto`), one row, a handler file and a check file
//! (see CONTRIBUTING.md).
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

use std::borrow::Cow;

use crate::{
    capabilities::{Capability, CapabilityError, ServiceType, known},
    for_each_service,
};

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

mod table;

/// How an entry of a `GetCapabilities` answer is a [`Capability`]: the RPC
/// of its `oneof`, its kind, or the entry whole.
macro_rules! capability {
    (rpc [$($proto:ident)::+] $entry:ident $oneof:ident) => {
        const _: () = {
            use cnpgi_proto::$($proto)::+::{$entry, $oneof as oneof};

            impl Capability for $entry {
                type Value = oneof::rpc::Type;
                fn of(rpc: Self::Value) -> Self {
                    Self {
                        r#type: Some(oneof::Type::Rpc(oneof::Rpc { r#type: rpc.into() })),
                    }
                }
                fn value(&self) -> Result<Self::Value, CapabilityError> {
                    match &self.r#type {
                        Some(oneof::Type::Rpc(rpc)) => known(rpc.r#type, oneof::rpc::Type::Unspecified),
                        None => Err(CapabilityError::Missing),
                    }
                }
                fn name(value: &Self::Value) -> Cow<'static, str> {
                    Cow::Borrowed(value.as_str_name())
                }
            }
        };
    };
    (kind [$($proto:ident)::+] $entry:ident $oneof:ident) => {
        const _: () = {
            use cnpgi_proto::$($proto)::+::{$entry, $oneof::Kind};

            impl Capability for $entry {
                type Value = Kind;
                fn of(kind: Kind) -> Self {
                    Self { kind: kind.into() }
                }
                fn value(&self) -> Result<Kind, CapabilityError> {
                    known(self.kind, Kind::Unspecified)
                }
                fn name(value: &Kind) -> Cow<'static, str> {
                    Cow::Borrowed(value.as_str_name())
                }
            }
        };
    };
    // Hooks on a kind with operations: read as sent, without merging the
    // same hook listed twice.
    (whole [$($proto:ident)::+] $entry:ident) => {
        impl Capability for cnpgi_proto::$($proto)::+::$entry {
            type Value = Self;
            const DISTINCT: bool = false;
            fn of(whole: Self) -> Self {
                whole
            }
            fn value(&self) -> Result<Self, CapabilityError> {
                Ok(self.clone())
            }
            fn name(value: &Self) -> Cow<'static, str> {
                Cow::Owned(format!("{}/{}", value.group, value.kind))
            }
        }
    };
}

/// Describes each row of [`for_each_service!`](crate::for_each_service): the
/// module of its RPCs (`service::wal::ARCHIVE`), its [`Service`] constant, and
/// how its capabilities are read ([`Capability`]).
macro_rules! describe {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, proto: $($proto:ident)::+, client: $($client:ident)::+, server: $($server:ident)::+,
        capabilities: $request:ident -> $answer:ident { $field:ident: [$entry:ident] },
        values: $values:ident $($oneof:ident)?, info: $info:ident, sdk: $sdk:ident, local: $local:ident,
        rpcs: [$( $(#[$rpc_doc:meta])* $rpc:ident = $rpc_name:literal, $parameters:ident, $exercise:ident; )*],
    } )*) => {$(
        capability!($values [$($proto)::+] $entry $($oneof)?);

        #[doc = concat!("The RPCs of the ", $label, " service.")]
        pub mod $key {
            use super::{Exercise, ParametersFrom, Rpc};
            $(
                $(#[$rpc_doc])*
                pub const $rpc: Rpc = Rpc {
                    name: $rpc_name,
                    method: concat!($label, "/", $rpc_name),
                    parameters: ParametersFrom::$parameters,
                    conformance: Exercise::$exercise,
                };
            )*
        }

        $(#[$doc])*
        pub const $konst: Service = Service {
            capability: ServiceType::$cap,
            label: $label,
            grpc_name: Some($grpc),
            get_capabilities: Some(concat!($label, "/GetCapabilities")),
            rpcs: &[$($key::$rpc),*],
        };
    )*};
}

for_each_service!(describe);

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
