//! The CNPG-I probing sequence, and what it teaches about a plugin.
//!
//! After connecting, the operator asks, in this order: `GetPluginMetadata`,
//! `GetPluginCapabilities`, then `GetCapabilities` of each advertised service
//! with RPCs, in the order of [`cnpgi_core::service::SERVICES`] (the answers
//! do not depend on it).
//! The answers are kept as a [`PluginInfo`] and only refreshed when the
//! connection is rebuilt. A short-lived caller that needs one service
//! (`wal-archive` runs once per WAL segment) asks only for it with
//! [`probe_only`].

use cnpgi_core::{
    capabilities::{self, Operation, OperatorRpc as RpcType, ServiceType, matches_lifecycle},
    for_each_service,
    service::{self, Service},
};
use cnpgi_proto::identity::v1::{
    GetPluginCapabilitiesRequest, GetPluginMetadataRequest, GetPluginMetadataResponse, ProbeRequest,
};

use crate::{
    capabilities::{self as asked, ServiceCapabilities, ask},
    client::PluginClient,
};

/// [`PluginInfo`], with a field per service of the table, and
/// `ask_capabilities`, which fills the field of one.
macro_rules! probed {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, proto: $($proto:ident)::+, client: $($client:ident)::+, server: $($server:ident)::+,
        capabilities: $request:ident -> $answer:ident { $field:ident: [$entry:ident] },
        values: $values:ident $($oneof:ident)?, info: $info:ident, $($rest:tt)*
    } )*) => {
        /// What a plugin said about itself when probed.
        #[derive(Debug, Clone, Default, PartialEq)]
        pub struct PluginInfo {
            /// `GetPluginMetadata`'s answer.
            pub metadata: GetPluginMetadataResponse,
            /// The services advertised by `GetPluginCapabilities`.
            pub services: Vec<ServiceType>,
            $(
                #[doc = concat!("What the ", $label, " service advertises (empty without it).")]
                pub $info: Vec<<asked::$name as ServiceCapabilities>::Value>,
            )*
        }

        /// Asks `service`'s `GetCapabilities` and keeps the answer in `info`.
        async fn ask_capabilities(client: &PluginClient, service: &Service, info: &mut PluginInfo) -> Result<(), ProbeError> {
            let Some(method) = service.get_capabilities else {
                return Ok(());
            };
            let failed = |status| ProbeError::rpc(client, method, status);
            match service.capability {
                $(ServiceType::$cap => info.$info = ask::<asked::$name>(client).await.map_err(failed)?.0,)*
                // Advertised only: nothing to ask.
                _ => {}
            }
            Ok(())
        }
    };
}

for_each_service!(probed);

impl PluginInfo {
    /// Whether the plugin advertises `service`.
    pub fn has_service(&self, service: ServiceType) -> bool {
        self.services.contains(&service)
    }

    /// Whether the plugin advertises the Operator RPC `rpc`.
    pub fn has_operator_rpc(&self, rpc: RpcType) -> bool {
        self.operator_rpcs.contains(&rpc)
    }

    /// Whether a lifecycle hook of the plugin matches an object of
    /// `group`/`kind` (`""` is the core group) for `operation`.
    pub fn matches_lifecycle(&self, group: &str, kind: &str, operation: Operation) -> bool {
        self.lifecycle
            .iter()
            .any(|capability| matches_lifecycle(capability, group, kind, operation))
    }

    /// The advertised services as the enum names CloudNativePG writes in
    /// `status.pluginStatus[].capabilities`, e.g. `TYPE_LIFECYCLE_SERVICE`.
    pub fn service_names(&self) -> Vec<String> {
        capabilities::service_names(&self.services)
    }

    /// The advertised Operator RPCs as enum names, e.g. `TYPE_MUTATE_CLUSTER`.
    pub fn operator_rpc_names(&self) -> Vec<String> {
        capabilities::operator_rpc_names(&self.operator_rpcs)
    }

    /// The `status.pluginStatus[]` entry CloudNativePG writes for this
    /// plugin (every capability list), with `status` as given.
    pub fn status_update(&self, status: Option<String>) -> cnpgi_core::status::PluginStatusUpdate {
        cnpgi_core::status::PluginStatusUpdate {
            name: self.metadata.name.clone(),
            version: self.metadata.version.clone(),
            capabilities: self.service_names(),
            operator_capabilities: self.operator_rpc_names(),
            wal_capabilities: capabilities::wal_rpc_names(&self.wal_rpcs),
            backup_capabilities: capabilities::backup_rpc_names(&self.backup_rpcs),
            restore_job_hook_capabilities: capabilities::restore_job_kind_names(&self.restore_job_kinds),
            status,
        }
    }
}

/// Why probing a plugin failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// A call of the probing sequence failed.
    #[error("plugin {plugin} at {address}: {rpc} failed: {code:?}: {message}")]
    Rpc {
        /// The plugin.
        plugin: String,
        /// Where it was reached.
        address: String,
        /// The RPC, e.g. `Identity/GetPluginMetadata`.
        rpc: &'static str,
        /// The gRPC status code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The plugin answers to another name than the one it was found under.
    #[error(
        "plugin found as {expected:?} at {address} calls itself {actual:?}: the Service label, socket name and metadata name must be the same"
    )]
    NameMismatch {
        /// The name it was discovered under.
        expected: String,
        /// The name in its metadata.
        actual: String,
        /// Where it was reached.
        address: String,
    },
    /// The plugin's name breaks the naming rules.
    #[error("plugin at {address} has an invalid name: {reason}")]
    InvalidName {
        /// Where it was reached.
        address: String,
        /// Why the name is invalid.
        reason: String,
    },
}

impl ProbeError {
    fn rpc(client: &PluginClient, rpc: &'static str, status: tonic::Status) -> Self {
        Self::Rpc {
            plugin: client.name().to_owned(),
            address: client.address().to_owned(),
            rpc,
            code: status.code(),
            message: status.message().to_owned(),
        }
    }
}

/// Runs the probing sequence on `client`, checking that the plugin's name is
/// valid and is the name the client was created for; the capabilities of
/// every advertised service are asked for, in the order of
/// [`cnpgi_core::service::SERVICES`].
pub async fn probe(client: &PluginClient) -> Result<PluginInfo, ProbeError> {
    probe_services(client, |_| true).await
}

/// [`probe`], asking only for the capabilities of `wanted` services (when
/// advertised); the others' stay empty in the answer.
///
/// ```no_run
/// # async fn example(client: cnpgi_client::client::PluginClient) -> Result<(), cnpgi_client::probe::ProbeError> {
/// use cnpgi_client::probe::probe_only;
/// use cnpgi_core::capabilities::{ServiceType, WalRpc};
///
/// let info = probe_only(&client, &[ServiceType::WalService]).await?;
/// let archives = info.wal_rpcs.contains(&WalRpc::ArchiveWal);
/// # let _ = archives; Ok(()) }
/// ```
pub async fn probe_only(client: &PluginClient, wanted: &[ServiceType]) -> Result<PluginInfo, ProbeError> {
    probe_services(client, |service| wanted.contains(&service)).await
}

/// The probing sequence, asking for the capabilities of the advertised
/// services that are `wanted`.
async fn probe_services(client: &PluginClient, wanted: impl Fn(ServiceType) -> bool) -> Result<PluginInfo, ProbeError> {
    let metadata = metadata(client).await?;
    let services = advertised_services(client).await?;
    // The capabilities of each service stay empty unless asked below.
    let mut info = PluginInfo {
        metadata,
        services,
        ..PluginInfo::default()
    };
    for service in service::with_rpcs() {
        if wanted(service.capability) && info.has_service(service.capability) {
            ask_capabilities(client, service, &mut info).await?;
        }
    }
    Ok(info)
}

/// `GetPluginMetadata`, checked: a valid name, the one `client` was made for.
async fn metadata(client: &PluginClient) -> Result<GetPluginMetadataResponse, ProbeError> {
    let metadata = client
        .identity()
        .get_plugin_metadata(client.request(GetPluginMetadataRequest {}))
        .await
        .map_err(|s| ProbeError::rpc(client, "Identity/GetPluginMetadata", s))?
        .into_inner();
    cnpgi_core::names::validate_plugin_name(&metadata.name).map_err(|reason| ProbeError::InvalidName {
        address: client.address().to_owned(),
        reason,
    })?;
    if metadata.name != client.name() {
        return Err(ProbeError::NameMismatch {
            expected: client.name().to_owned(),
            actual: metadata.name,
            address: client.address().to_owned(),
        });
    }
    Ok(metadata)
}

/// The services `GetPluginCapabilities` advertises.
async fn advertised_services(client: &PluginClient) -> Result<Vec<ServiceType>, ProbeError> {
    let answer = client
        .identity()
        .get_plugin_capabilities(client.request(GetPluginCapabilitiesRequest {}))
        .await
        .map_err(|s| ProbeError::rpc(client, "Identity/GetPluginCapabilities", s))?
        .into_inner();
    Ok(capabilities::services_of(&answer.capabilities))
}

/// Asks `Probe`: `Ok(true)` when the plugin says it is ready.
pub async fn is_ready(client: &PluginClient) -> Result<bool, ProbeError> {
    client
        .identity()
        .probe(client.request(ProbeRequest {}))
        .await
        .map(|r| r.into_inner().ready)
        .map_err(|s| ProbeError::rpc(client, "Identity/Probe", s))
}
