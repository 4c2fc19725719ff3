//! A CNPG-I plugin host for any Kubernetes operator.
//!
//! CNPG-I is CloudNativePG's plugin interface: plugins, in any language,
//! serve gRPC services that validate and default a resource, patch the
//! objects an operator writes for it, hook its reconciliation and report
//! status. This crate is the operator's side of that protocol, for **any**
//! custom resource: the `cnpgi-operator` Cluster operator is one user of it.
//!
//! # Design
//!
//! * **JSON inside, typed outside.** CNPG-I sends the resource as JSON bytes
//!   in every call, so routing works on JSON encoded once per reconcile or
//!   admission request ([`routing::RoutedResource`]): a fan-out to three
//!   plugins encodes the resource once, whatever its Rust type. The typed
//!   facade, [`Host<K>`], is generic over `K:`[`PluginResource`] (a
//!   `kube::Resource` with serde) and converts at its edges; its calls on
//!   JSON ([`Host::routed_json`], [`Host::lifecycle_hook_json`], ...) serve
//!   an operator that keeps the resource or its children as JSON.
//!   `Host` is the one door an operator needs (`cnpgi-operator` runs on a
//!   `Host<Cluster>`); [`Host::router`] and [`Host::registry`] are hard
//!   mode, for what its calls do not cover.
//! * **Where a resource lists its plugins** is a small trait,
//!   [`routing::PluginLayout`]: which plugins are enabled (in CNPG-I's
//!   routing order), how a plugin's validation error path reads as a field
//!   of the resource, and how the status carries one entry per plugin.
//!   CloudNativePG's shape, `spec.plugins[]` and `status.pluginStatus[]`, is
//!   the default ([`routing::CnpgLayout`]), not a requirement:
//!   [`PluginResource::layout`] picks another.
//! * **Discovery** ([`discovery`]): plugin Services with CloudNativePG's
//!   labels and annotations (and their mTLS Secrets), sidecar socket
//!   directories, static lists, and plugins that register themselves over
//!   mutual TLS and send heartbeats ([`discovery::registration`]: forgotten,
//!   with the reason in routing errors, when the heartbeats stop), behind
//!   one trait. Each source feeds the
//!   **registry** ([`registry`]), which probes each plugin (metadata,
//!   capabilities), re-probes on reconnection, asks `Probe` periodically and
//!   routes only to plugins that are ready.
//! * **One implementation among several** ([`choice`]): a layout may say
//!   that the plugin a resource names is its *preferred* implementation of a
//!   kind; when it is not ready, the first ready plugin by name declaring
//!   that kind (metadata manifest `cnpgi.io/implements`) is routed to. The
//!   choice and its reason go into the status ([`Host::plugin_status`]) and
//!   stick: the preferred plugin coming back does not move the resource
//!   unless its annotation `cnpgi.io/reselect-implementation` changes.
//!   [`choice::publish_event`] announces each new choice.
//! * **References** ([`references`]): a layout may list objects a resource
//!   references (same namespace); [`Host::routed_with_references`] reads
//!   them and sends them with the resource in every call, under the key
//!   `cnpgi.io/references` of its JSON; a missing one is the condition
//!   `ReferencesResolved=False` in the status; [`references::referencing`]
//!   reconciles referencing resources when an object changes; plugins'
//!   reports on an object go into its status.
//! * **Deletion** ([`deletion`]): a finalizer (`cnpgi.io/plugins`, held
//!   with kube-runtime's helper by [`deletion::PluginFinalizer`]) keeps a
//!   deleted resource until [`Host::cleanup`] saw each plugin it enables
//!   answer its `ReconcilerHooks` `Pre` call, the resource being sent with
//!   `metadata.deletionTimestamp` set (that is how a plugin is told), or
//!   until [`HostOptions::cleanup_deadline`] after that timestamp, never
//!   forever: the Event `PluginCleanupAbandoned` then names the plugins
//!   that did not answer and why.
//! * **Ready signal.** Sources started with [`discovery::spawn`] (or
//!   [`Host::discover`]) report their first pass; [`registry::Registry::ready`]
//!   (and [`Host::ready`]) resolve when all did, so a host routes after
//!   discovery had its look instead of sleeping.
//! * **Routing** ([`routing::Router`]) applies CloudNativePG's fan-out rules:
//!   validate create/change (all errors collected, with field paths), mutate
//!   and lifecycle hooks on any child object (Pods, Jobs, Services, ...:
//!   chained JSON patches), reconciler hooks (pre/post, requeue/terminate),
//!   status entries (`SetStatusInCluster`), `Deregister`, and Postgres'
//!   `EnrichConfiguration`; fail-closed by default, fail-open per plugin.
//! * **Admission webhooks** ([`webhook`]) are axum routes the operator
//!   merges into its own server, at paths it chooses
//!   ([`webhook::AdmissionPaths`]); [`webhook::serve_https`] and
//!   [`serving`] offer an HTTPS server with hardened limits if it has none.
//! * **Metrics** ([`metrics`]): Prometheus metrics of plugin calls,
//!   readiness, discovery, webhooks and reconciles, in controller-runtime's
//!   names. **Leader election** ([`leader`]) on a Lease, as client-go does.
//!
//! What stays in an operator (for `cnpgi-operator`: the Cluster CRD, the
//! instance Pod template and the Cluster reconciler): its resource type, the
//! objects it writes and when, and which webhook paths it registers. The
//! protocol's names (`MutateCluster`, `cluster_definition`) remain the
//! wire's: for a host, "cluster" is the resource that enables the plugins.
//!
//! # Example
//!
//! A host for a `Table` resource that lists its plugins the CloudNativePG
//! way. Nothing enables the plugin it names, so validation fails closed:
//!
//! ```
//! use std::time::Duration;
//!
//! use cnpgi_host::{
//!     Host, HostOptions, PluginResource, discovery::socket_dir::SocketDirectory, routing::RouteError,
//!     webhook::AdmissionPaths,
//! };
//! use kube::CustomResource;
//! use schemars::JsonSchema;
//! use serde::{Deserialize, Serialize};
//!
//! /// A table: its columns, and the plugins that implement it.
//! #[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
//! #[kube(group = "example.com", version = "v1", kind = "Table", namespaced)]
//! pub struct TableSpec {
//!     /// Column names.
//!     pub columns: Vec<String>,
//!     /// CloudNativePG's shape: `[{"name": ..., "parameters": {...}}]`.
//!     #[serde(default)]
//!     pub plugins: Vec<serde_json::Value>,
//! }
//!
//! // The default layout: `spec.plugins[]`, `status.pluginStatus[]`.
//! impl PluginResource for Table {}
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let host = Host::<Table>::new(HostOptions::default());
//! let plugins = tempfile::tempdir()?;
//! host.discover(SocketDirectory::new(plugins.path()));
//! host.ready().await; // the socket directory was looked at
//!
//! let table = Table::new("users", TableSpec {
//!     columns: vec!["id".into()],
//!     plugins: vec![serde_json::json!({"name": "postgres.example.com"})],
//! });
//! let refused = host.validate_create(&table).await.unwrap_err();
//! assert!(matches!(refused.route(), Some(RouteError::Unavailable(_))), "{refused}");
//!
//! // The admission webhooks, to merge into the operator's own axum server.
//! let paths = AdmissionPaths::new("Table", "/mutate-table", "/validate-table");
//! let _app: axum::Router = host.admission_routes(&paths, Duration::from_secs(10));
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

use std::{collections::BTreeMap, fmt, marker::PhantomData, sync::Arc, time::Duration};

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::task::JoinHandle;

pub mod choice;
pub mod deletion;
pub mod discovery;
pub mod leader;
pub mod metrics;
pub mod observe;
pub mod references;
pub mod registry;
pub mod routing;
pub mod serving;
#[cfg(feature = "testing")]
pub mod testing;
pub mod webhook;

pub use cnpgi_client::{
    client::{ClientOptions, PluginClient, Transport},
    probe::PluginInfo,
};
/// When a PostgreSQL configuration is written (init, restore, reconcile,
/// upgrade), for [`Host::enrich_configuration`], re-exported from the protocol.
pub use cnpgi_proto::identity::v1::operation_type::Type as ConfigurationOperation;
/// The Operator service's RPCs a plugin may advertise.
pub use cnpgi_proto::operator::v1::operator_capability::rpc::Type as OperatorRpc;
/// The kind of operation a lifecycle hook is called for (create, patch,
/// update, delete, evaluate), re-exported from the protocol.
pub use cnpgi_proto::operator_lifecycle::v1::operator_operation_type::Type as Operation;
/// The kinds a reconciler hook may be registered for: `Cluster` is the
/// resource that enables the plugins (whatever its kind), `Backup` CloudNativePG's Backups.
pub use cnpgi_proto::reconciler::v1::reconciler_hooks_capability::Kind as HookKind;

use cnpgi_client::client::CallObserver;

use crate::{
    discovery::DiscoverySource,
    metrics::Metrics,
    registry::{LookupError, Plugin, Registry, RegistryError, RegistryOptions, Routable},
    routing::{
        CnpgLayout, FieldError, HookOutcome, HookPhase, Patched, PluginLayout, PluginStatusUpdate, RouteError,
        RoutedResource, Router, RoutingPolicy,
    },
    webhook::AdmissionPaths,
};

/// A resource whose plugins a [`Host`] routes to: a Kubernetes resource
/// with serde, and where it lists its plugins.
pub trait PluginResource:
    kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + fmt::Debug + Send + Sync + 'static
{
    /// Where the resource lists its plugins and how its status carries
    /// their entries. Default: CloudNativePG's `spec.plugins[]` and
    /// `status.pluginStatus[]` ([`CnpgLayout`]).
    fn layout() -> Arc<dyn PluginLayout> {
        Arc::new(CnpgLayout)
    }
}

/// How a [`Host`] is built.
///
/// ```
/// use std::{collections::BTreeSet, time::Duration};
///
/// use cnpgi_host::{ClientOptions, HostOptions, metrics::Metrics, registry::RegistryOptions, routing::RoutingPolicy};
///
/// // The metrics to serve, shared by the registry, every plugin client and the webhooks.
/// let metrics = Metrics::default();
/// let options = HostOptions {
///     registry: RegistryOptions { probe_interval: Duration::from_secs(30), metrics: metrics.clone() },
///     policy: RoutingPolicy {
///         fail_open: BTreeSet::from(["optional.example.com".to_owned()]),
///         ..RoutingPolicy::default()
///     },
///     client: ClientOptions { call_timeout: Duration::from_secs(10), ..ClientOptions::default() },
///     // A deleted resource waits at most 2 minutes for its plugins' cleanup.
///     cleanup_deadline: Duration::from_secs(120),
/// };
/// # let _ = options;
/// ```
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// The registry's tunables: how often plugins are probed, and the
    /// metrics everything the host does is recorded in ([`Host::metrics`]).
    pub registry: RegistryOptions,
    /// Which plugins may fail without failing an operation
    /// ([`RoutingPolicy::fail_open`]), and how long an operation waits for
    /// a plugin that is arriving.
    pub policy: RoutingPolicy,
    /// The plugin clients' tunables (call deadline, connection timeout,
    /// keepalive), as [`Host::client_options`] hands them to discovery
    /// sources. Its `observer` is told about every call besides the host's
    /// metrics.
    pub client: ClientOptions,
    /// How long a deleted resource waits for its plugins' cleanup, from its
    /// `metadata.deletionTimestamp` ([`Host::cleanup`], [`deletion`]): past
    /// it, the cleanup is abandoned and the resource goes. Default
    /// [`deletion::DEFAULT_CLEANUP_DEADLINE`] (5 minutes).
    pub cleanup_deadline: Duration,
}

impl Default for HostOptions {
    fn default() -> Self {
        Self {
            registry: RegistryOptions::default(),
            policy: RoutingPolicy::default(),
            client: ClientOptions::default(),
            cleanup_deadline: deletion::DEFAULT_CLEANUP_DEADLINE,
        }
    }
}

/// Why a [`Host`] operation failed.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// Routing through the plugins failed (fail-closed).
    #[error(transparent)]
    Route(#[from] RouteError),
    /// The plugins' result is not a valid object of its type.
    #[error("the plugins' {what} does not decode: {source}")]
    Decode {
        /// What was decoded.
        what: &'static str,
        /// Why it does not.
        source: serde_json::Error,
    },
}

impl HostError {
    /// The routing error, when that is what failed.
    pub fn route(&self) -> Option<&RouteError> {
        match self {
            Self::Route(error) => Some(error),
            Self::Decode { .. } => None,
        }
    }
}

/// A plugin host for resources of type `K`: the registry, its discovery,
/// and routing with `K`'s layout, behind typed calls. Cloning is cheap (the
/// clones share the registry).
///
/// Its typed calls take and give `K`; the calls on JSON (`*_json`, and
/// those taking a [`RoutedResource`]) serve an operator that keeps the
/// resource or the objects it writes as JSON, for instance to hash exactly
/// what the plugins answered, or to route a resource read from a file that
/// `K` would not round-trip.
pub struct Host<K> {
    registry: Arc<Registry>,
    router: Router,
    client: ClientOptions,
    cleanup_deadline: Duration,
    resource: PhantomData<fn() -> K>,
}

impl<K> Clone for Host<K> {
    fn clone(&self) -> Self {
        Self {
            registry: self.registry.clone(),
            router: self.router.clone(),
            client: self.client.clone(),
            cleanup_deadline: self.cleanup_deadline,
            resource: PhantomData,
        }
    }
}

/// Tells two observers about every call: the host's metrics and the one
/// given in [`HostOptions::client`].
#[derive(Debug)]
struct BothObservers {
    metrics: Metrics,
    other: Arc<dyn CallObserver>,
}

impl CallObserver for BothObservers {
    fn call_ended(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
        self.metrics.call_ended(plugin, method, elapsed, code);
        self.other.call_ended(plugin, method, elapsed, code);
    }
}

impl<K> fmt::Debug for Host<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Host")
            .field("resource", &std::any::type_name::<K>())
            .field("router", &self.router)
            .finish()
    }
}

impl<K: PluginResource> Host<K> {
    /// A host with an empty registry; add discovery sources with [`Host::discover`].
    pub fn new(options: HostOptions) -> Self {
        let registry = Arc::new(Registry::new(options.registry));
        let router = Router::with_layout(registry.clone(), options.policy, K::layout());
        Self {
            registry,
            router,
            client: options.client,
            cleanup_deadline: options.cleanup_deadline,
            resource: PhantomData,
        }
    }

    /// The registry itself: hard mode, as kube-rs' `applier` is to its
    /// `Controller`. The host's own calls ([`Host::discover`],
    /// [`Host::add_plugin`], [`Host::routable`], [`Host::plugins`],
    /// [`Host::pending_sources`]) cover what an operator needs; this is for
    /// what they do not, such as forgetting a plugin ([`Registry::remove`])
    /// or a discovery source of one's own run by hand.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// The router itself: hard mode, as kube-rs' `applier` is to its
    /// `Controller`. The host's calls route every operation an operator of
    /// `K` makes; this is for what they do not, such as the reconciler
    /// hooks of another kind than the resource ([`HookKind::Backup`], with
    /// [`Router::reconciler_hooks`]) or a router with another policy
    /// ([`Router::with_arrival_wait`]).
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The metrics plugin calls, readiness and webhooks are recorded in.
    pub fn metrics(&self) -> &Metrics {
        &self.registry.options().metrics
    }

    /// The client options of [`HostOptions::client`], recording every
    /// plugin call in [`Host::metrics`] as well: what discovery sources
    /// (and [`Host::add_plugin`]'s clients) should be built with.
    pub fn client_options(&self) -> ClientOptions {
        ClientOptions {
            observer: Arc::new(BothObservers {
                metrics: self.metrics().clone(),
                other: self.client.observer.clone(),
            }),
            ..self.client.clone()
        }
    }

    /// Starts `source` (see [`discovery::spawn`]); [`Host::ready`] waits for its first pass.
    pub fn discover(&self, source: impl DiscoverySource) -> JoinHandle<()> {
        discovery::spawn(Box::new(source), self.registry.clone())
    }

    /// Resolves when every discovery source finished its first pass. A
    /// source that cannot look (the Kubernetes API unreachable) keeps it
    /// pending: bound the wait with `tokio::time::timeout` if the host
    /// should start anyway.
    pub async fn ready(&self) {
        self.registry.ready().await;
    }

    /// Registers `client`, a plugin found by `source` outside any
    /// discovery source (a command starting its plugins itself, a test),
    /// and probes it once ([`Registry::add`]): it is routable on return if
    /// it answered.
    pub async fn add_plugin(&self, source: &str, client: PluginClient) -> Result<Arc<Plugin>, RegistryError> {
        self.registry.add(source, client).await
    }

    /// Every registered plugin, routable or not, sorted by name.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        self.registry.plugins()
    }

    /// The plugin `name` if it can be called now (its client, and what it
    /// advertised), else why not.
    pub fn routable(&self, name: &str) -> Result<Routable, LookupError> {
        self.registry.get(name)
    }

    /// The discovery sources still on their first pass, sorted: what
    /// [`Host::ready`] still waits for (to say so when it takes too long).
    pub fn pending_sources(&self) -> Vec<String> {
        self.registry.pending_sources()
    }

    /// A stream that yields each time routing may answer differently (a
    /// plugin added, forgotten, becoming routable or not, restarted with
    /// other capabilities; see [`Registry::changes`]): give it to kube-rs'
    /// `Controller::reconcile_all_on`, so that the resources' status follows
    /// their plugins. Bursts coalesce into one item.
    pub fn plugin_changes(&self) -> impl futures_util::Stream<Item = ()> + Send + 'static {
        futures_util::stream::unfold(self.registry.changes(), |mut changes| async move {
            changes.changed().await.ok()?;
            Some(((), changes))
        })
    }

    /// `resource` as routed to its plugins (encoded once).
    pub fn routed(&self, resource: &K) -> Result<RoutedResource, HostError> {
        let value = serde_json::to_value(resource).map_err(RouteError::Encode)?;
        Ok(self.router.routed(value))
    }

    /// `value`, a resource given as JSON, as routed to its plugins (encoded
    /// once, its plugins read with `K`'s layout): for the calls on JSON.
    pub fn routed_json(&self, value: Value) -> RoutedResource {
        self.router.routed(value)
    }

    /// `ValidateClusterCreate` through the resource's plugins: every field error.
    pub async fn validate_create(&self, resource: &K) -> Result<Vec<FieldError>, HostError> {
        Ok(self.router.validate_create(&self.routed(resource)?).await?)
    }

    /// `ValidateClusterChange` through the new resource's plugins: every field error.
    pub async fn validate_change(&self, old: &K, new: &K) -> Result<Vec<FieldError>, HostError> {
        Ok(self
            .router
            .validate_change(&self.routed(old)?, &self.routed(new)?)
            .await?)
    }

    /// `MutateCluster` chained through the resource's plugins: the resource
    /// as they defaulted it, and each plugin's patch.
    pub async fn mutate(&self, resource: &K) -> Result<(K, Patched), HostError> {
        let patched = self.router.mutate(self.routed(resource)?).await?;
        let typed = serde_json::from_value(patched.object.clone()).map_err(|source| HostError::Decode {
            what: "mutated resource",
            source,
        })?;
        Ok((typed, patched))
    }

    /// [`Host::mutate`] on JSON: the resource as the plugins defaulted it,
    /// and each plugin's patch.
    pub async fn mutate_json(&self, resource: RoutedResource) -> Result<Patched, HostError> {
        Ok(self.router.mutate(resource).await?)
    }

    /// [`Host::validate_create`] on JSON: every field error.
    pub async fn validate_create_json(&self, resource: &RoutedResource) -> Result<Vec<FieldError>, HostError> {
        Ok(self.router.validate_create(resource).await?)
    }

    /// [`Host::validate_change`] on JSON: every field error.
    pub async fn validate_change_json(
        &self,
        old: &RoutedResource,
        new: &RoutedResource,
    ) -> Result<Vec<FieldError>, HostError> {
        Ok(self.router.validate_change(old, new).await?)
    }

    /// `LifecycleHook` for `operation` on `object`, a child object the
    /// operator writes for `resource` (a Pod, a Job, a Service...), chained
    /// through the plugins whose lifecycle capabilities match its group and
    /// kind: the object as they patched it.
    pub async fn lifecycle_hook<C>(
        &self,
        resource: &RoutedResource,
        object: &C,
        operation: Operation,
    ) -> Result<C, HostError>
    where
        C: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned,
    {
        let mut value = serde_json::to_value(object).map_err(RouteError::Encode)?;
        // `apiVersion` and `kind` say which hooks match: typed objects may
        // not serialise them.
        if let Some(fields) = value.as_object_mut() {
            fields.insert("apiVersion".into(), Value::from(C::api_version(&()).as_ref()));
            fields.insert("kind".into(), Value::from(C::kind(&()).as_ref()));
        }
        let patched = self.router.lifecycle_hook(resource, value, operation).await?;
        serde_json::from_value(patched.object).map_err(|source| HostError::Decode {
            what: "patched object",
            source,
        })
    }

    /// [`Host::lifecycle_hook`] on JSON: `object` (which carries its
    /// `apiVersion` and `kind`) as the plugins patched it, and each plugin's
    /// patch, without a round trip through a Rust type.
    pub async fn lifecycle_hook_json(
        &self,
        resource: &RoutedResource,
        object: Value,
        operation: Operation,
    ) -> Result<Patched, HostError> {
        Ok(self.router.lifecycle_hook(resource, object, operation).await?)
    }

    /// `Postgres.EnrichConfiguration` through the resource's plugins
    /// ([`Router::enrich_configuration`]): `configs` as the last plugin
    /// answering a non-empty map replaced it (each is sent the original).
    pub async fn enrich_configuration(
        &self,
        resource: &RoutedResource,
        configs: &BTreeMap<String, String>,
        operation: ConfigurationOperation,
    ) -> Result<BTreeMap<String, String>, HostError> {
        Ok(self.router.enrich_configuration(resource, configs, operation).await?)
    }

    /// `ReconcilerHooks` `Pre` or `Post` on the resource itself, through
    /// the plugins hooking [`HookKind::Cluster`].
    pub async fn reconciler_hooks(
        &self,
        phase: HookPhase,
        resource: &RoutedResource,
    ) -> Result<HookOutcome, HostError> {
        Ok(self
            .router
            .reconciler_hooks(phase, HookKind::Cluster, resource, resource.definition())
            .await?)
    }

    /// The resource's plugin entries as they are now (`SetStatusInCluster`
    /// asked, see [`Router::set_status`]), in routing order: for an operator
    /// that writes them into a typed status itself ([`Host::plugin_status`]
    /// writes them with the layout).
    pub async fn status_entries(&self, resource: &RoutedResource) -> Result<Vec<PluginStatusUpdate>, HostError> {
        Ok(self.router.set_status(resource).await?)
    }

    /// `Deregister`: tells `plugin`, no longer enabled by `resource`, that
    /// the resource stopped using it (a plugin without the RPC is not called).
    pub async fn deregister(&self, plugin: &str, resource: &RoutedResource) -> Result<(), HostError> {
        Ok(self.router.deregister(plugin, resource).await?)
    }

    /// The resource's status with its plugin entries as they are now
    /// (`SetStatusInCluster` asked, see [`Router::set_status`]), written with
    /// its layout, and the implementation chosen when the layout names one
    /// among several ([`choice`]: `status.<status_field>`): the value of
    /// `status` to patch.
    pub async fn plugin_status(&self, resource: &RoutedResource) -> Result<Value, HostError> {
        Ok(self.plugin_status_and_reports(resource).await?.0)
    }

    /// [`Host::plugin_status`], and what each plugin reported about the
    /// resource's referenced objects ([`references`]), taken out of its
    /// entry: for [`references::ReferenceResolver::write_reports`]. When the
    /// resource was routed with its references, the status also carries the
    /// condition `ReferencesResolved` (`False`, naming each missing object).
    pub async fn plugin_status_and_reports(
        &self,
        resource: &RoutedResource,
    ) -> Result<(Value, Vec<(String, Vec<references::ReferenceReport>)>), HostError> {
        let mut entries = self.router.set_status(resource).await?;
        let mut reports = Vec::new();
        for entry in &mut entries {
            let Some(status) = entry
                .status
                .as_deref()
                .and_then(|s| serde_json::from_str::<Value>(s).ok())
            else {
                continue;
            };
            if status.get(references::REFERENCES_KEY).is_none() {
                continue;
            }
            let (own, reported) = references::split_reports(&status);
            entry.status = Some(own.to_string());
            reports.push((entry.name.clone(), reported));
        }
        let mut with_entries =
            serde_json::json!({"status": resource.value().get("status").cloned().unwrap_or_default()});
        self.router.layout().write_plugin_status(&mut with_entries, &entries);
        // One implementation among several: the choice, recorded so that it
        // sticks ([`choice`]).
        if let (Some(choice), Some(decision)) = (
            self.router.layout().implementation_choice(),
            resource.implementation_choice(),
        ) && let Some(status) = with_entries["status"].as_object_mut()
        {
            status.insert(
                choice.status_field,
                serde_json::to_value(decision).map_err(RouteError::Encode)?,
            );
        }
        if let Some(resolved) = resource.references() {
            references::set_condition(&mut with_entries["status"], references::references_condition(resolved));
        }
        Ok((with_entries["status"].take(), reports))
    }

    /// [`Host::routed`] with the objects `resource` references
    /// ([`PluginLayout::references`]) read by `resolver` and sent with it
    /// in every call ([`references`]). A missing object does not fail: it
    /// travels with its error, and [`Host::plugin_status`] says so.
    pub async fn routed_with_references(
        &self,
        resource: &K,
        resolver: &references::ReferenceResolver,
    ) -> Result<RoutedResource, HostError> {
        let routed = self.routed(resource)?;
        let wanted = self.router.layout().references(routed.value());
        if wanted.is_empty() {
            return Ok(routed);
        }
        let namespace = kube::ResourceExt::namespace(resource).unwrap_or_default();
        let resolved = resolver.resolve(&namespace, &wanted).await;
        Ok(routed.with_references(resolved))
    }

    /// The admission webhooks for `K` at `paths`, answering within
    /// `deadline`, measured in [`Host::metrics`]: merge them into the
    /// operator's own axum router.
    pub fn admission_routes(&self, paths: &AdmissionPaths, deadline: Duration) -> axum::Router {
        let app = webhook::admission_routes(self.router.clone(), paths, deadline);
        webhook::observed_paths(app, self.metrics().clone(), &[&paths.mutate, &paths.validate])
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    impl PluginResource for ConfigMap {}

    #[derive(Debug, Default)]
    struct Calls(AtomicU32);

    impl CallObserver for Calls {
        fn call_ended(&self, _: &str, _: &str, _: Duration, _: Option<tonic::Code>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn client_options_keep_the_given_ones_and_tell_both_observers() {
        let calls = Arc::new(Calls::default());
        let host = Host::<ConfigMap>::new(HostOptions {
            client: ClientOptions {
                call_timeout: Duration::from_secs(3),
                observer: calls.clone(),
                ..ClientOptions::default()
            },
            ..HostOptions::default()
        });
        let options = host.client_options();
        assert_eq!(options.call_timeout, Duration::from_secs(3));
        options
            .observer
            .call_ended("p.example.com", "Identity/Probe", Duration::from_millis(1), None);
        assert_eq!(calls.0.load(Ordering::SeqCst), 1);
        assert_eq!(host.metrics().calls("p.example.com", "Identity/Probe"), 1);
    }
}
