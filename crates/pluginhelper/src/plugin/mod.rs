//! The declarative plugin API: a plugin is its metadata, its [`Parameters`]
//! and the handlers it registers.
//!
//! Registering a handler **is** the capability declaration: the Identity
//! service advertises exactly the services that have handlers, and each
//! service's `GetCapabilities` exactly the RPCs, kinds and operations
//! registered, so capabilities cannot drift from the code. The SDK decodes
//! the requests, finds this plugin's entry in the Cluster, parses its
//! parameters, calls the handler with plain typed values, and turns the
//! result into the answer (JSON patches computed by diffing what the handler
//! changed, statuses, validation errors in machinery's convention, gRPC
//! codes).
//!
//! Declaring [`Parameters`] alone already gives `ValidateClusterCreate` and
//! `ValidateClusterChange` (every parameter error, and changes of
//! `immutable` parameters) and `MutateCluster` (the defaults written back).
//!
//! ```no_run
//! use cnpgi_pluginhelper::{
//!     capabilities::Operation,
//!     parameters::Parameters,
//!     plugin::Plugin,
//!     proto::identity::v1::GetPluginMetadataResponse,
//! };
//!
//! #[derive(Parameters)]
//! struct Config {
//!     /// The label every instance Pod gets.
//!     #[param(default = "blue")]
//!     color: String,
//! }
//!
//! fn plugin() -> Plugin<Config> {
//!     Plugin::<Config>::new(GetPluginMetadataResponse {
//!         name: "color.example.com".into(),
//!         version: "0.1.0".into(),
//!         ..Default::default()
//!     })
//!     .lifecycle_pod([Operation::Create, Operation::Evaluate], |_cluster, config, pod| {
//!         pod["metadata"]["labels"]["color"] = config.color.clone().into();
//!         Ok(())
//!     })
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     plugin().command().execute()
//! }
//! ```
//!
//! Handlers of the Operator, OperatorLifecycle and Postgres services
//! transform values and are plain functions; handlers of the services that
//! do I/O (ReconcilerHooks, WAL, Backup, RestoreJobHooks, Metrics, and
//! Operator's `Deregister`) are `async` and receive their inputs by value.
//! Either can be unit-tested by calling it directly, or through the real
//! dispatch without a server with [`Plugin::local`].
//!
//! # Resources other than a Cluster
//!
//! A plugin finds its entry and parameters in what it is sent with
//! CloudNativePG's layout (`spec.plugins[]`) unless given another with
//! [`Plugin::layout`]: the same [`PluginLayout`] an operator hosting its
//! own resource with `cnpgi-host` routes by. The handlers still receive the
//! resource as a [`Cluster`], the lenient wire view that keeps every field
//! (`spec.other`, `other`), so a plugin for a `DatabaseTable` reads its spec
//! from there or decodes it into its own type. When the resource is being
//! deleted, its host asks the plugins to clean up with a `Pre` reconciler
//! hook on it: [`ReconcilerCall::is_being_deleted`] says so.
//!
//! The building blocks stay available: [`Plugin::add_service`] mixes in a
//! hand-written tonic service, and [`create_main_cmd`](crate::create_main_cmd)
//! with hand-written services (helped by [`lowlevel`](crate::lowlevel))
//! gives full control.

use std::{borrow::Cow, collections::BTreeMap, sync::Arc};

use cnpgi_core::for_each_service;
use cnpgi_proto::identity::v1::{
    GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginMetadataRequest, GetPluginMetadataResponse,
    ProbeRequest, ProbeResponse, identity_server,
};
use tonic::{Request, Response, Status, service::RoutesBuilder};

use crate::{
    capabilities::{self, ServiceType},
    cluster::Cluster,
    cmd::PluginCommand,
    layout::PluginLayout,
    parameters::Parameters,
    service::{self, ParametersFrom, Rpc},
    transport::{GrpcService, PluginServer},
    validation,
};

mod async_handler;
mod backup;
mod decoded;
mod lifecycle;
mod local;
mod metrics;
mod operator;
mod postgres;
mod reconciler;
mod restore_job;
mod wal;

pub use async_handler::AsyncHandler;
use async_handler::{AsyncRpc, BoxedHandler, boxed};
pub use backup::{BackupCall, BackupService};
pub use lifecycle::LifecycleService;
pub use local::LocalPlugin;
pub use metrics::{MetricsCall, MetricsService, Sample};
pub use operator::OperatorService;
pub use postgres::{PostgresOperation, PostgresService};
pub use reconciler::{ReconcilerCall, ReconcilerService};
pub use restore_job::{RestoreJobCall, RestoreJobService};
pub use wal::{SetFirstRequiredCall, WalArchiveCall, WalRestoreCall, WalService, WalStatusCall};

/// What handlers receive and answer, defined with the building blocks of
/// services written by hand ([`lowlevel`](crate::lowlevel)).
pub use crate::lowlevel::{Hook, MetricSet, WalFileKind, WalFileName};

/// A hand-written service, registered as it is.
type Route = Box<dyn FnOnce(&mut RoutesBuilder) + Send>;

/// A CNPG-I plugin described declaratively: metadata, parameters `P`, and
/// handlers. See the [module documentation](self).
pub struct Plugin<P: Parameters = ()> {
    metadata: GetPluginMetadataResponse,
    layout: Option<Arc<dyn PluginLayout>>,
    ready: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
    handlers: Handlers<P>,
    /// Services advertised besides the ones with handlers, in order.
    advertised: Vec<ServiceType>,
    /// Hand-written services, by the type they are advertised as.
    routes: Vec<(ServiceType, Route)>,
}

impl<P: Parameters> std::fmt::Debug for Plugin<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.metadata.name)
            .field("services", &self.services())
            .finish_non_exhaustive()
    }
}

/// The handlers of a service, as its handler file keeps them.
trait Registered {
    /// Whether any is registered: the service is then served and advertised.
    fn registered(&self) -> bool;
}

impl<T> Registered for Option<T> {
    fn registered(&self) -> bool {
        self.is_some()
    }
}

impl<C, T> Registered for AsyncRpc<C, T> {
    fn registered(&self) -> bool {
        self.is_registered()
    }
}

/// `Handlers`, with the handlers of each service of the table (its handler
/// file is named by its key), and the registration of their servers.
macro_rules! handlers {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, proto: $($proto:ident)::+, client: $($client:ident)::+, server: $server_mod:ident::$server:ident,
        capabilities: $request:ident -> $answer:ident { $field:ident: [$entry:ident] },
        values: $values:ident $($oneof:ident)?, info: $info:ident, sdk: $sdk:ident, local: $local:ident,
        $($rest:tt)*
    } )*) => {
        /// Every registered handler.
        struct Handlers<P> {
            $($key: $key::Handlers<P>,)*
        }

        impl<P> Default for Handlers<P> {
            fn default() -> Self {
                Self {
                    $($key: Default::default(),)*
                }
            }
        }

        impl<P: Parameters> Handlers<P> {
            /// Whether a handler of the service advertised as `service` is registered.
            fn registered(&self, service: ServiceType) -> bool {
                match service {
                    $(ServiceType::$cap => self.$key.registered(),)*
                    // Advertised only: no handler.
                    _ => false,
                }
            }
        }

        /// Adds the tonic server of `service`, dispatching to the handlers in `shared`.
        fn add_declarative_service<P: Parameters>(
            builder: &mut RoutesBuilder,
            service: ServiceType,
            shared: &Arc<Shared<P>>,
        ) {
            match service {
                $(ServiceType::$cap => {
                    builder.add_service(cnpgi_proto::$($proto)::+::$server_mod::$server::new($sdk(shared.clone())));
                })*
                // Advertised only: no RPC to serve.
                _ => {}
            }
        }
    };
}

for_each_service!(handlers);

/// What the services share: the plugin name and the layout (to find its
/// entry in a Cluster), the handlers, and the Clusters decoded last.
struct Shared<P> {
    name: String,
    /// Whether its metadata manifest says it implements the kind of the
    /// layout's implementation choice: it then stands in for the preferred
    /// implementation when the host chose it instead
    /// ([`cnpgi_core::layout::enabled_entry`]).
    implements_choice: bool,
    /// `None`: CloudNativePG's, read from the typed view without re-encoding.
    layout: Option<Arc<dyn PluginLayout>>,
    handlers: Handlers<P>,
    decoded: decoded::DecodedClusters<P>,
}

/// This plugin's entry in a Cluster: where it is listed, with its parameters.
struct Entry<'c> {
    /// Its index in the list (field paths of its parameters use it).
    index: usize,
    /// Its parameters.
    parameters: Cow<'c, BTreeMap<String, String>>,
}

impl<P: Parameters> Shared<P> {
    /// This plugin's entry in `cluster`, where the layout says (CloudNativePG's:
    /// the last `spec.plugins[]` entry of its name, as machinery reads it).
    fn entry<'c>(&self, cluster: &'c Cluster) -> Option<Entry<'c>> {
        let Some(layout) = &self.layout else {
            let entry = cluster.plugin(&self.name)?;
            return Some(Entry {
                index: entry.index,
                parameters: Cow::Borrowed(entry.parameters()),
            });
        };
        let resource = cluster.to_json_value().ok()?;
        let enabled =
            cnpgi_core::layout::enabled_entry(layout.as_ref(), &resource, &self.name, self.implements_choice)?;
        Some(Entry {
            index: enabled.index,
            parameters: Cow::Owned(layout.parameters(&resource, &enabled)),
        })
    }

    /// This plugin's parameters in `cluster` (its entry's; none when it is
    /// not listed), or `INVALID_ARGUMENT` listing every error.
    fn parameters(&self, cluster: &Cluster) -> Result<P, Status> {
        let parsed = match self.entry(cluster) {
            Some(entry) => P::parse(entry.index, &entry.parameters),
            None => P::parse(0, &BTreeMap::new()),
        };
        parsed.map_err(|errors| validation::to_status(&errors))
    }

    /// The Cluster `definition` decodes to, with this plugin's parameters:
    /// decoded once for all the calls that send the same bytes.
    fn decoded(&self, definition: &[u8]) -> Result<Arc<decoded::Decoded<P>>, Status> {
        self.decoded.get(definition, |cluster| self.parameters(cluster))
    }

    /// This plugin's parameters for a call of `rpc`, from where the service
    /// table says ([`ParametersFrom`]): for the calls that may be made on
    /// behalf of a Cluster naming this plugin only as a recovery source, its
    /// `spec.plugins` entry, else its `spec.externalClusters[].plugin` entry,
    /// else `fallback` (the map sent in the request).
    fn parameters_for(&self, rpc: &Rpc, cluster: &Cluster, fallback: &BTreeMap<String, String>) -> Result<P, Status> {
        if rpc.parameters == ParametersFrom::Entry {
            return self.parameters(cluster);
        }
        let parsed = if let Some(entry) = self.entry(cluster) {
            P::parse(entry.index, &entry.parameters)
        } else if let Some(params) = external_cluster_parameters(cluster, &self.name) {
            P::parse(0, &params)
        } else {
            P::parse(0, fallback)
        };
        parsed.map_err(|errors| validation::to_status(&errors))
    }
}

/// The parameters of the `plugin` of the external cluster that names this
/// plugin, if any (they are not part of the typed Cluster view).
fn external_cluster_parameters(cluster: &Cluster, name: &str) -> Option<BTreeMap<String, String>> {
    let externals = cluster.spec.other.get("externalClusters")?.as_array()?;
    let plugin = externals
        .iter()
        .filter_map(|external| external.get("plugin"))
        .find(|plugin| plugin.get("name").and_then(serde_json::Value::as_str) == Some(name))?;
    let params = plugin.get("parameters").and_then(serde_json::Value::as_object);
    Some(
        params
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
            .collect(),
    )
}

impl<P: Parameters> Plugin<P> {
    /// A plugin with this metadata (`name` and `version` at least), its
    /// parameters `P` (`()` for none), and no handler yet.
    pub fn new(metadata: GetPluginMetadataResponse) -> Self {
        Self {
            metadata,
            layout: None,
            ready: None,
            handlers: Handlers::default(),
            advertised: Vec::new(),
            routes: Vec::new(),
        }
    }

    /// The metadata `GetPluginMetadata` answers.
    pub fn metadata(&self) -> &GetPluginMetadataResponse {
        &self.metadata
    }

    /// Serves under another name (and reads the entry of that name in
    /// Clusters): for running several copies of a plugin in tests.
    pub fn renamed(mut self, name: impl Into<String>) -> Self {
        self.metadata.name = name.into();
        self
    }

    /// Where this plugin finds its entry and parameters in the resources it
    /// is sent, and its previous status: for a plugin of a resource that is
    /// not a CloudNativePG Cluster, the layout its host routes by (see the
    /// [module documentation](self)). Parameter defaults are then not
    /// written back by `MutateCluster` (the layout says where parameters are
    /// read, not written), and `SetStatusInCluster` does not require an
    /// entry written beforehand.
    pub fn layout(mut self, layout: impl PluginLayout) -> Self {
        self.layout = Some(Arc::new(layout));
        self
    }

    /// What `Probe` answers; ready by default. A plugin that needs to warm up
    /// answers `false` until it can work, and is sent no call meanwhile.
    pub fn ready_when(mut self, ready: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        self.ready = Some(Arc::new(ready));
        self
    }

    /// Advertises a service that has no RPC of its own, such as
    /// [`ServiceType::InstanceSidecarInjection`] (the plugin's sidecar gets
    /// the Postgres and Metrics calls in instance Pods).
    pub fn advertise(mut self, service: ServiceType) -> Self {
        if !self.advertised.contains(&service) {
            self.advertised.push(service);
        }
        self
    }

    /// Registers a hand-written tonic service and advertises it as `service`;
    /// it answers its own `GetCapabilities`, and takes the place of the
    /// handlers registered for that type of service, if any.
    pub fn add_service<S: GrpcService>(mut self, service: ServiceType, server: S) -> Self {
        self = self.advertise(service);
        self.routes.push((
            service,
            Box::new(move |routes: &mut RoutesBuilder| {
                routes.add_service(server);
            }),
        ));
        self
    }

    /// The services advertised by `GetPluginCapabilities`: the ones with
    /// handlers, in the order of [`cnpgi_core::service::SERVICES`]
    /// (OperatorLifecycle, Operator, ReconcilerHooks, WAL, Backup,
    /// RestoreJobHooks, Metrics, Postgres), then the ones added with
    /// [`Plugin::advertise`] or [`Plugin::add_service`], in that order.
    pub fn services(&self) -> Vec<ServiceType> {
        let mut services: Vec<ServiceType> = service::SERVICES
            .iter()
            .map(|service| service.capability)
            .filter(|service| self.handlers.registered(*service))
            .collect();
        for service in &self.advertised {
            if !services.contains(service) {
                services.push(*service);
            }
        }
        services
    }

    /// The plugin as a server, e.g. for `testing::TestPlugin`.
    pub fn server(self) -> PluginServer<PluginIdentity> {
        let (identity, register) = self.into_parts();
        PluginServer::new(identity).register(register)
    }

    /// The `plugin` command of the binary (`<binary> plugin [FLAGS]`).
    pub fn command(self) -> PluginCommand<PluginIdentity> {
        let (identity, register) = self.into_parts();
        crate::create_main_cmd(identity, register)
    }

    /// The plugin without a server: its services called in-process through
    /// the same dispatch code, for unit tests.
    pub fn local(self) -> LocalPlugin<P> {
        let identity = self.identity();
        LocalPlugin::new(identity, self.shared())
    }

    fn identity(&self) -> PluginIdentity {
        PluginIdentity {
            metadata: self.metadata.clone(),
            capabilities: self.services().into_iter().map(capabilities::service).collect(),
            ready: self.ready.clone(),
        }
    }

    fn shared(self) -> Arc<Shared<P>> {
        let implements_choice = self
            .layout
            .as_ref()
            .and_then(|layout| layout.implementation_choice())
            .is_some_and(|choice| cnpgi_core::layout::implements(&self.metadata.manifest, &choice.kind));
        Arc::new(Shared {
            name: self.metadata.name,
            implements_choice,
            layout: self.layout,
            handlers: self.handlers,
            decoded: decoded::DecodedClusters::default(),
        })
    }

    /// The Identity implementation, and what registers the other services.
    fn into_parts(mut self) -> (PluginIdentity, impl FnOnce(&mut RoutesBuilder)) {
        let identity = self.identity();
        let routes = std::mem::take(&mut self.routes);
        let shared = self.shared();
        let register = move |builder: &mut RoutesBuilder| {
            // A service added by hand takes the place of the declarative one.
            let declarative = |service: ServiceType| {
                shared.handlers.registered(service) && !routes.iter().any(|(hand_written, _)| *hand_written == service)
            };
            for service in service::SERVICES.iter().map(|service| service.capability) {
                if declarative(service) {
                    add_declarative_service(builder, service, &shared);
                }
            }
            for (_, route) in routes {
                route(builder);
            }
        };
        (identity, register)
    }
}

/// The Identity service of a declarative [`Plugin`]: its metadata, the
/// services it has handlers for, and its readiness.
#[derive(Clone)]
pub struct PluginIdentity {
    metadata: GetPluginMetadataResponse,
    capabilities: Vec<cnpgi_proto::identity::v1::PluginCapability>,
    ready: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl std::fmt::Debug for PluginIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginIdentity")
            .field("name", &self.metadata.name)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

#[tonic::async_trait]
impl identity_server::Identity for PluginIdentity {
    async fn get_plugin_metadata(
        &self,
        _: Request<GetPluginMetadataRequest>,
    ) -> Result<Response<GetPluginMetadataResponse>, Status> {
        Ok(Response::new(self.metadata.clone()))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: self.capabilities.clone(),
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        let ready = self.ready.as_ref().is_none_or(|ready| ready());
        Ok(Response::new(ProbeResponse { ready }))
    }
}
