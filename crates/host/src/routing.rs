//! Routing a resource, and the objects written for it, through its plugins.
//!
//! The rules are CloudNativePG's: the plugins a resource enables (where it
//! lists them is its [`PluginLayout`]; by default [`CnpgLayout`],
//! CloudNativePG's `spec.plugins[]`, `enabled` defaulting to true) are
//! de-duplicated and sorted by name, and every fan-out goes in that order.
//! Mutations and lifecycle patches are chained: each plugin receives the JSON
//! the plugins before it already patched, and answers an RFC 6902 patch
//! (empty: no change). A plugin without the capability a step needs is
//! skipped.
//!
//! Failures close: an enabled plugin that is not registered or not ready,
//! that fails, or whose patch does not apply stops the operation with a
//! [`RouteError`] naming it, and nothing half-patched comes out, unless the
//! plugin is listed in [`RoutingPolicy::fail_open`], in which case it is
//! skipped with a warning.
//!
//! The resource travels as JSON encoded once ([`RoutedResource`]): CNPG-I
//! sends it as bytes in every call, and a reconcile or an admission request
//! makes several calls.

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt,
    sync::Arc,
    time::Duration,
};

pub use cnpgi_core::cluster::EnabledPlugin;
pub use cnpgi_core::layout::{CnpgLayout, PluginLayout};
pub use cnpgi_core::status::PluginStatusUpdate;
use cnpgi_core::{
    cluster::encode_object,
    echo::bounded_string,
    patch::{apply_unchecked, parse_patch},
    references::{ResolvedReference, with_references},
    service,
    status::parse_json_status,
};
use cnpgi_proto::{
    operator::v1::{
        DeregisterRequest, OperatorMutateClusterRequest, OperatorValidateClusterChangeRequest,
        OperatorValidateClusterCreateRequest, SetStatusInClusterRequest, ValidationError,
        operator_capability::rpc::Type as RpcType,
    },
    operator_lifecycle::v1::{
        OperatorLifecycleRequest, OperatorOperationType, operator_operation_type::Type as Operation,
    },
};
use serde_json::Value;

use crate::{
    choice::ImplementationDecision,
    observe::{RouteObserver, observed, summary},
    registry::{LookupError, Registry, Routable},
};

/// Which plugins may fail without failing the operation, how long an
/// operation waits for a plugin that is arriving, and who watches the calls.
#[derive(Debug, Clone)]
pub struct RoutingPolicy {
    /// Plugins skipped (with a warning) when unavailable or failing.
    pub fail_open: BTreeSet<String>,
    /// How long an operation waits for an enabled plugin that was just
    /// discovered and has not answered yet ([`Registry::get_waiting`]), before
    /// failing as if it were not ready. Default 5 s: a resource applied right
    /// after its plugin's rollout is not refused, and an admission webhook
    /// still answers within the API server's 10 s.
    pub arrival_wait: Duration,
    /// Told about every plugin call routing makes (plugin, RPC, request
    /// and answer summaries, time): see [`crate::observe`]. Default none,
    /// and then no summary is computed.
    pub observer: Option<Arc<dyn RouteObserver>>,
}

impl Default for RoutingPolicy {
    fn default() -> Self {
        Self {
            fail_open: BTreeSet::new(),
            arrival_wait: Duration::from_secs(5),
            observer: None,
        }
    }
}

/// Why an operation routed through plugins failed.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    /// The plugin is not registered or not ready.
    #[error(transparent)]
    Unavailable(#[from] LookupError),
    /// The plugin answered with an error (or did not answer in time).
    #[error("plugin {plugin}: {rpc} failed: {code:?}: {message}")]
    Call {
        /// The plugin.
        plugin: String,
        /// The RPC.
        rpc: &'static str,
        /// The gRPC code.
        code: tonic::Code,
        /// The status message.
        message: String,
    },
    /// The plugin's answer is not usable (bad JSON Patch, patch that does not
    /// apply, status that is not a JSON object).
    #[error("plugin {plugin}: {rpc} returned an unusable answer: {reason}")]
    BadAnswer {
        /// The plugin.
        plugin: String,
        /// The RPC.
        rpc: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The object could not be serialised for the plugins.
    #[error("cannot encode the object for the plugins: {0}")]
    Encode(#[from] serde_json::Error),
}

impl RouteError {
    /// The plugin the error is about, if any.
    pub fn plugin(&self) -> Option<&str> {
        match self {
            Self::Unavailable(
                LookupError::Unknown { name }
                | LookupError::NotReady { name, .. }
                | LookupError::Forgotten { name, .. },
            ) => Some(name),
            Self::Call { plugin, .. } | Self::BadAnswer { plugin, .. } => Some(plugin),
            Self::Encode(_) => None,
        }
    }
}

/// One plugin's patch, as applied.
#[derive(Debug, Clone)]
pub struct PluginPatch {
    /// The plugin.
    pub plugin: String,
    /// Its RFC 6902 patch (empty when it changed nothing).
    pub patch: json_patch::Patch,
}

/// An object after a chain of plugin patches.
#[derive(Debug, Clone)]
pub struct Patched {
    /// The object with every patch applied.
    pub object: Value,
    /// Each plugin's patch, in the order applied.
    pub patches: Vec<PluginPatch>,
}

/// A validation error from a plugin, located on a field of the resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The plugin that reported it.
    pub plugin: String,
    /// The field, e.g. `spec.plugins[0].parameters.annotations`.
    pub field: String,
    /// The offending value.
    pub value: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    fn from_plugin(layout: &dyn PluginLayout, plugin: &EnabledPlugin, error: ValidationError) -> Self {
        // A plugin's answer is quoted in webhook denials, errors and logs: bounded.
        Self {
            plugin: plugin.name.clone(),
            field: bounded_string(layout.field_path(&error.path_components, plugin.index)),
            value: bounded_string(error.value),
            message: bounded_string(error.message),
        }
    }
}

impl fmt::Display for FieldError {
    /// kubectl style: `spec.x: Invalid value: "v": message`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: Invalid value: {:?}: {}", self.field, self.value, self.message)
    }
}

/// A resource as routed to plugins: its JSON, that JSON serialised once (so
/// that every call of a reconcile or an admission request sends the same
/// bytes without encoding the resource again), and the plugins it enables.
///
/// ```
/// use cnpgi_host::routing::RoutedResource;
///
/// let resource = RoutedResource::new(serde_json::json!({"kind": "Table", "spec": {}}));
/// assert_eq!(resource.definition(), br#"{"kind":"Table","spec":{}}"#);
/// assert_eq!(resource.value()["kind"], "Table");
/// ```
#[derive(Debug, Clone)]
pub struct RoutedResource {
    value: Value,
    definition: Vec<u8>,
    enabled: Vec<EnabledPlugin>,
    choice: Option<ImplementationDecision>,
    references: Option<Arc<Vec<ResolvedReference>>>,
}

/// What a chain of patches starts from.
struct ChainStart {
    /// The object patched.
    object: Value,
    /// It as bytes, when the caller has them.
    encoded: Option<Vec<u8>>,
    /// References sent with it, when it is the resource.
    references: Option<Arc<Vec<ResolvedReference>>>,
}

impl RoutedResource {
    /// Encodes `value` once and reads the plugins it enables with
    /// CloudNativePG's layout ([`CnpgLayout`]).
    pub fn new(value: Value) -> Self {
        Self::with_layout(value, &CnpgLayout)
    }

    /// Encodes `value` once and reads the plugins it enables with `layout`.
    pub fn with_layout(value: Value, layout: &dyn PluginLayout) -> Self {
        Self {
            definition: encode_object(&value),
            enabled: layout.enabled_plugins(&value),
            value,
            choice: None,
            references: None,
        }
    }

    /// This resource sending `references` with it in every call, under
    /// [`REFERENCES_KEY`](cnpgi_core::references::REFERENCES_KEY) of its
    /// JSON ([`crate::references`]); [`RoutedResource::value`] stays the
    /// resource itself.
    pub fn with_references(mut self, references: Vec<ResolvedReference>) -> Self {
        self.definition = encode_object(&with_references(&self.value, &references));
        self.references = Some(Arc::new(references));
        self
    }

    /// The references sent with the resource, if any were resolved.
    pub fn references(&self) -> Option<&[ResolvedReference]> {
        self.references.as_deref().map(Vec::as_slice)
    }

    /// `value` (this resource, changed) encoded with this resource's references.
    fn encode_with_references(&self, value: &Value) -> Vec<u8> {
        match &self.references {
            Some(references) => encode_object(&with_references(value, references)),
            None => encode_object(value),
        }
    }

    /// The implementation chosen for this resource, when its layout names
    /// one among several ([`crate::choice`]; set by [`Router::routed`]).
    pub fn implementation_choice(&self) -> Option<&ImplementationDecision> {
        self.choice.as_ref()
    }

    /// Routes to `decision`'s chosen plugin in place of the preferred one
    /// (the same index, so field paths point at the field naming it).
    fn choose(&mut self, decision: ImplementationDecision) {
        if let Some(chosen) = &decision.chosen
            && *chosen != decision.preferred
        {
            for plugin in &mut self.enabled {
                if plugin.name == decision.preferred {
                    plugin.name.clone_from(chosen);
                }
            }
            // CNPG-I's routing order: by name, once each.
            self.enabled.sort_by(|a, b| a.name.cmp(&b.name));
            self.enabled.dedup_by(|a, b| a.name == b.name);
        }
        self.choice = Some(decision);
    }

    /// The resource as JSON.
    pub fn value(&self) -> &Value {
        &self.value
    }

    /// The resource as the bytes sent to plugins.
    pub fn definition(&self) -> &[u8] {
        &self.definition
    }

    /// The plugins it enables, in routing order.
    pub fn enabled(&self) -> &[EnabledPlugin] {
        &self.enabled
    }

    /// The resource as JSON, without copying it.
    pub fn into_value(self) -> Value {
        self.value
    }
}

impl From<Value> for RoutedResource {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

/// Routes operations through the registry's plugins.
#[derive(Debug, Clone)]
pub struct Router {
    registry: Arc<Registry>,
    policy: RoutingPolicy,
    layout: Arc<dyn PluginLayout>,
}

impl Router {
    /// A router over `registry`, for resources in CloudNativePG's layout ([`CnpgLayout`]).
    pub fn new(registry: Arc<Registry>, policy: RoutingPolicy) -> Self {
        Self::with_layout(registry, policy, Arc::new(CnpgLayout))
    }

    /// A router over `registry`, for resources whose plugins `layout` reads.
    pub fn with_layout(registry: Arc<Registry>, policy: RoutingPolicy, layout: Arc<dyn PluginLayout>) -> Self {
        Self {
            registry,
            policy,
            layout,
        }
    }

    /// The policy routed with.
    pub fn policy(&self) -> &RoutingPolicy {
        &self.policy
    }

    /// This router, waiting at most `wait` for an arriving plugin
    /// ([`RoutingPolicy::arrival_wait`]).
    pub fn with_arrival_wait(mut self, wait: Duration) -> Self {
        self.policy.arrival_wait = wait;
        self
    }

    /// This router, telling `observer` about every plugin call it makes
    /// ([`RoutingPolicy::observer`]).
    pub fn with_observer(mut self, observer: Arc<dyn RouteObserver>) -> Self {
        self.policy.observer = Some(observer);
        self
    }

    /// The observer told about every plugin call, if any.
    fn observer(&self) -> Option<&dyn RouteObserver> {
        self.policy.observer.as_deref()
    }

    /// Where the routed resources list their plugins.
    pub fn layout(&self) -> &dyn PluginLayout {
        &*self.layout
    }

    /// `value` as routed by this router (its plugins read with [`Router::layout`]).
    /// When the layout names one implementation among several, the
    /// implementation is chosen here ([`crate::choice`]).
    pub fn routed(&self, value: Value) -> RoutedResource {
        let mut routed = RoutedResource::with_layout(value, &*self.layout);
        if let Some(choice) = self.layout.implementation_choice()
            && let Some(decision) = crate::choice::decide(&self.registry, &choice, &routed.value)
        {
            routed.choose(decision);
        }
        routed
    }

    /// `resource` routed for its cleanup ([`crate::deletion`]): when its
    /// layout names one implementation among several, to the implementation
    /// its status records as chosen (the one that did the work), whether it
    /// is available or not, in place of a choice made now, which could pick
    /// another plugin that never served it. A record choosing none drops the
    /// implementation: none served the resource. Without a record, as routed.
    pub(crate) fn routed_for_cleanup(&self, resource: &RoutedResource) -> RoutedResource {
        let mut routed = resource.clone();
        let Some(choice) = self.layout.implementation_choice() else {
            return routed;
        };
        let Some(recorded) = ImplementationDecision::recorded(&choice, &routed.value) else {
            return routed;
        };
        routed.enabled = self.layout.enabled_plugins(&routed.value);
        let preferred = choice.preferred(&routed.value).map(str::to_owned);
        match &recorded.chosen {
            Some(chosen) => {
                for plugin in &mut routed.enabled {
                    if Some(&plugin.name) == preferred.as_ref() {
                        plugin.name.clone_from(chosen);
                    }
                }
            }
            None => routed.enabled.retain(|plugin| Some(&plugin.name) != preferred.as_ref()),
        }
        routed.enabled.sort_by(|a, b| a.name.cmp(&b.name));
        routed.enabled.dedup_by(|a, b| a.name == b.name);
        routed.choice = Some(recorded);
        routed
    }

    /// The registry routed to.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Applies the fail-open policy to a plugin's failure: `Ok(None)` skips it.
    fn tolerate<T>(&self, plugin: &str, result: Result<T, RouteError>) -> Result<Option<T>, RouteError> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(error) if self.policy.fail_open.contains(plugin) => {
                tracing::warn!(plugin, %error, "plugin failed; skipped (fail-open)");
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// The enabled plugins of `resource` that can be called and have what
    /// `wants` checks, in routing order. Arriving plugins are waited for,
    /// [`RoutingPolicy::arrival_wait`] in all (not each).
    async fn targets(
        &self,
        resource: &RoutedResource,
        wants: impl Fn(&Routable) -> bool,
    ) -> Result<Vec<(EnabledPlugin, Routable)>, RouteError> {
        let mut targets = Vec::new();
        let mut patience = self.policy.arrival_wait;
        for plugin in resource.enabled().iter().cloned() {
            let started = std::time::Instant::now();
            let routable = self
                .registry
                .get_waiting(&plugin.name, patience)
                .await
                .map_err(RouteError::from);
            patience = patience.saturating_sub(started.elapsed());
            if let Some(routable) = self.tolerate(&plugin.name, routable)?
                && wants(&routable)
            {
                targets.push((plugin, routable));
            }
        }
        Ok(targets)
    }

    /// Chains `MutateCluster` through every enabled plugin that implements
    /// it; the resource is the chain's working copy, and its encoding is what
    /// the first plugin is sent.
    pub async fn mutate(&self, resource: RoutedResource) -> Result<Patched, RouteError> {
        let targets = self
            .targets(&resource, |r| r.info.has_operator_rpc(RpcType::MutateCluster))
            .await?;
        let RoutedResource {
            value,
            definition,
            references,
            ..
        } = resource;
        self.chain(
            targets,
            ChainStart {
                object: value,
                encoded: Some(definition),
                references,
            },
            service::operator::MUTATE_CLUSTER.method,
            summary::object,
            |routable, definition| async move {
                let request = routable.client.request(OperatorMutateClusterRequest { definition });
                let answer = routable.client.operator().mutate_cluster(request).await?;
                Ok(answer.into_inner().json_patch)
            },
        )
        .await
    }

    /// Sends each target, in order, the object as patched by the targets
    /// before it (through `call`), and applies its answer to the object, the
    /// chain's one working copy. `start.encoded` is the object as bytes when
    /// the caller has them already; `start.references` travel with it
    /// ([`crate::references`]) but are not part of the working copy. A
    /// failed step fails the chain, so the copy needs no undo, except for a
    /// fail-open plugin, whose step works on a copy of its own. `describe`
    /// summarises the object sent, for the observer.
    async fn chain<F, Fut>(
        &self,
        targets: Vec<(EnabledPlugin, Routable)>,
        start: ChainStart,
        rpc: &'static str,
        describe: impl Fn(&Value) -> String,
        call: F,
    ) -> Result<Patched, RouteError>
    where
        F: Fn(Routable, Vec<u8>) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<u8>, tonic::Status>>,
    {
        let ChainStart {
            object: start,
            mut encoded,
            references,
        } = start;
        let mut patched = Patched {
            object: start,
            patches: Vec::new(),
        };
        for (plugin, routable) in targets {
            let fail_open = self.policy.fail_open.contains(&plugin.name);
            let before = fail_open.then(|| patched.object.clone());
            let definition = encoded.take().unwrap_or_else(|| match &references {
                Some(references) => encode_object(&with_references(&patched.object, references)),
                None => encode_object(&patched.object),
            });
            let step = async {
                let answer = observed(
                    self.observer(),
                    &plugin.name,
                    rpc,
                    || describe(&patched.object),
                    call(routable, definition),
                    |answer| summary::patch(answer),
                )
                .await
                .map_err(|s| call_error(&plugin.name, rpc, s))?;
                apply_in_place(&plugin.name, rpc, &mut patched.object, &answer)
            };
            let outcome = step.await;
            if outcome.is_err()
                && let Some(before) = before
            {
                patched.object = before;
            }
            if let Some(patch) = self.tolerate(&plugin.name, outcome)? {
                patched.patches.push(PluginPatch {
                    plugin: plugin.name,
                    patch,
                });
            }
        }
        Ok(patched)
    }

    /// Collects the validation errors `call` gets from each target;
    /// `describe` summarises the request, for the observer.
    async fn collect_errors<F, Fut>(
        &self,
        targets: Vec<(EnabledPlugin, Routable)>,
        rpc: &'static str,
        describe: impl Fn() -> String,
        call: F,
    ) -> Result<Vec<FieldError>, RouteError>
    where
        F: Fn(Routable) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<ValidationError>, tonic::Status>>,
    {
        let mut errors = Vec::new();
        for (plugin, routable) in targets {
            let fields = |errors: &Vec<ValidationError>| {
                let fields: Vec<String> = errors
                    .iter()
                    .map(|e| FieldError::from_plugin(&*self.layout, &plugin, e.clone()).field)
                    .collect();
                summary::validation(&fields)
            };
            let answer = observed(self.observer(), &plugin.name, rpc, &describe, call(routable), fields)
                .await
                .map_err(|s| call_error(&plugin.name, rpc, s));
            if let Some(found) = self.tolerate(&plugin.name, answer)? {
                errors.extend(
                    found
                        .into_iter()
                        .map(|e| FieldError::from_plugin(&*self.layout, &plugin, e)),
                );
            }
        }
        Ok(errors)
    }

    /// Asks every enabled plugin implementing `ValidateClusterCreate`; all
    /// the errors are returned together.
    pub async fn validate_create(&self, resource: &RoutedResource) -> Result<Vec<FieldError>, RouteError> {
        let targets = self
            .targets(resource, |r| r.info.has_operator_rpc(RpcType::ValidateClusterCreate))
            .await?;
        let describe = || summary::object(resource.value());
        self.collect_errors(
            targets,
            service::operator::VALIDATE_CLUSTER_CREATE.method,
            describe,
            |routable| {
                let request = routable.client.request(OperatorValidateClusterCreateRequest {
                    definition: resource.definition().to_vec(),
                });
                async move {
                    let answer = routable.client.operator().validate_cluster_create(request).await?;
                    Ok(answer.into_inner().validation_errors)
                }
            },
        )
        .await
    }

    /// Asks every plugin enabled by the new resource implementing
    /// `ValidateClusterChange`; all the errors are returned together.
    pub async fn validate_change(
        &self,
        old: &RoutedResource,
        new: &RoutedResource,
    ) -> Result<Vec<FieldError>, RouteError> {
        let targets = self
            .targets(new, |r| r.info.has_operator_rpc(RpcType::ValidateClusterChange))
            .await?;
        let describe = || format!("{}, and its old version", summary::object(new.value()));
        self.collect_errors(
            targets,
            service::operator::VALIDATE_CLUSTER_CHANGE.method,
            describe,
            |routable| {
                let request = routable.client.request(OperatorValidateClusterChangeRequest {
                    old_cluster: old.definition().to_vec(),
                    new_cluster: new.definition().to_vec(),
                });
                async move {
                    let answer = routable.client.operator().validate_cluster_change(request).await?;
                    Ok(answer.into_inner().validation_errors)
                }
            },
        )
        .await
    }

    /// Chains `LifecycleHook` for `operation` on `object` (which must carry
    /// `apiVersion` and `kind`) through every enabled plugin whose lifecycle
    /// capabilities match the object's group, kind and the operation. The
    /// object is the chain's working copy, returned patched.
    pub async fn lifecycle_hook(
        &self,
        resource: &RoutedResource,
        object: Value,
        operation: Operation,
    ) -> Result<Patched, RouteError> {
        let (group, kind) = group_kind(&object);
        let targets = self
            .targets(resource, |r| r.info.matches_lifecycle(&group, &kind, operation))
            .await?;
        self.chain(
            targets,
            ChainStart {
                object,
                encoded: None,
                references: None,
            },
            service::lifecycle::LIFECYCLE_HOOK.method,
            |object| {
                format!(
                    "{} {}",
                    summary::enum_name(operation.as_str_name()),
                    summary::object(object)
                )
            },
            |routable, object_definition| {
                let request = routable.client.request(OperatorLifecycleRequest {
                    operation_type: Some(OperatorOperationType {
                        r#type: operation.into(),
                    }),
                    cluster_definition: resource.definition().to_vec(),
                    object_definition,
                });
                async move {
                    let answer = routable.client.lifecycle().lifecycle_hook(request).await?;
                    Ok(answer.into_inner().json_patch)
                }
            },
        )
        .await
    }

    /// Computes the plugin entries of the status (`status.pluginStatus[]`
    /// in CloudNativePG's layout) the way CloudNativePG does: first an entry
    /// for every enabled, routable plugin (name, version, capabilities,
    /// operator capabilities, and its previous `status` if the resource had
    /// one; entries of plugins no longer enabled are dropped) is written
    /// into the resource (with [`PluginLayout::write_plugin_status`]), then
    /// every plugin implementing `SetStatusInCluster` is asked, in routing
    /// order, for its status with that resource. Upstream plugins answer an error when their entry is
    /// missing, so the entries must be there before the call.
    ///
    /// Returns the entries in routing order; `status` is the plugin's answer,
    /// or the previous status when it answered empty or was skipped.
    pub async fn set_status(&self, resource: &RoutedResource) -> Result<Vec<PluginStatusUpdate>, RouteError> {
        let targets = self.targets(resource, |_| true).await?;
        let previous = self.layout.previous_statuses(resource.value());
        let mut updates: Vec<PluginStatusUpdate> = targets
            .iter()
            .map(|(plugin, routable)| PluginStatusUpdate {
                name: plugin.name.clone(),
                ..routable.info.status_update(previous.get(plugin.name.as_str()).cloned())
            })
            .collect();
        let mut with_entries = resource.value().clone();
        self.layout.write_plugin_status(&mut with_entries, &updates);
        let definition = resource.encode_with_references(&with_entries);
        for ((plugin, routable), update) in targets.into_iter().zip(&mut updates) {
            if !routable.info.has_operator_rpc(RpcType::SetStatusInCluster) {
                continue;
            }
            let rpc = service::operator::SET_STATUS_IN_CLUSTER.method;
            let mut client = routable.client.operator();
            let call = client.set_status_in_cluster(routable.client.request(SetStatusInClusterRequest {
                cluster: definition.clone(),
            }));
            let describe = || format!("{} with its plugin entries", summary::object(&with_entries));
            let answer = observed(self.observer(), &plugin.name, rpc, describe, call, |answer| {
                summary::status(&answer.get_ref().json_status)
            })
            .await
            .map_err(|s| call_error(&plugin.name, rpc, s))
            .and_then(|answer| status_object(&plugin.name, &answer.into_inner().json_status));
            if let Some(Some(status)) = self.tolerate(&plugin.name, answer)? {
                update.status = Some(status);
            }
        }
        Ok(updates)
    }

    /// Tells `plugin` that `resource` no longer uses it, when it implements
    /// `Deregister`.
    pub async fn deregister(&self, plugin: &str, resource: &RoutedResource) -> Result<(), RouteError> {
        let routable = self.registry.get(plugin)?;
        if !routable.info.has_operator_rpc(RpcType::Deregister) {
            return Ok(());
        }
        let rpc = service::operator::DEREGISTER.method;
        let mut client = routable.client.operator();
        let call = client.deregister(routable.client.request(DeregisterRequest {
            definition: resource.definition().to_vec(),
        }));
        let describe = || summary::object(resource.value());
        observed(self.observer(), plugin, rpc, describe, call, |_| "done".to_owned())
            .await
            .map_err(|s| call_error(plugin, rpc, s))?;
        Ok(())
    }
}

impl Router {
    /// `Postgres.EnrichConfiguration` with CloudNativePG's rule: every enabled
    /// plugin advertising `TYPE_POSTGRES` and `TYPE_ENRICH_CONFIGURATION` is
    /// asked in routing order, **each with the original** `configs`; an
    /// empty answer changes nothing, a non-empty one replaces the whole map,
    /// so the last non-empty answer wins.
    pub async fn enrich_configuration(
        &self,
        resource: &RoutedResource,
        configs: &BTreeMap<String, String>,
        operation: cnpgi_proto::identity::v1::operation_type::Type,
    ) -> Result<BTreeMap<String, String>, RouteError> {
        use cnpgi_core::capabilities::{PostgresRpc, ServiceType};
        use cnpgi_proto::identity::v1::{EnrichConfigurationRequest, OperationType};
        let targets = self
            .targets(resource, |r| {
                r.info.has_service(ServiceType::Postgres)
                    && r.info.postgres_rpcs.contains(&PostgresRpc::EnrichConfiguration)
            })
            .await?;
        let mut result = configs.clone();
        if targets.is_empty() {
            return Ok(result);
        }
        let original: std::collections::HashMap<String, String> =
            configs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        for (plugin, routable) in targets {
            let request = routable.client.request(EnrichConfigurationRequest {
                configs: original.clone(),
                cluster_definition: resource.definition().to_vec(),
                operation_type: Some(OperationType {
                    r#type: operation.into(),
                }),
            });
            let rpc = service::postgres::ENRICH_CONFIGURATION.method;
            let describe = || {
                summary::configuration_request(configs, summary::enum_name(operation.as_str_name()), resource.value())
            };
            let mut client = routable.client.postgres();
            let call = client.enrich_configuration(request);
            let answer = observed(self.observer(), &plugin.name, rpc, describe, call, |answer| {
                summary::configuration(&original, &answer.get_ref().configs)
            })
            .await
            .map(|answer| answer.into_inner().configs)
            .map_err(|s| call_error(&plugin.name, rpc, s));
            if let Some(answer) = self.tolerate(&plugin.name, answer)?
                && !answer.is_empty()
            {
                result = answer.into_iter().collect();
            }
        }
        Ok(result)
    }
}

/// Which `ReconcilerHooks` RPC: before or after the operator reconciles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookPhase {
    /// `Pre`, before the reconciliation.
    Pre,
    /// `Post`, after it.
    Post,
}

/// What the chain of reconciler hooks asks the operator to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Every plugin answered `CONTINUE` (or nothing hooks this kind).
    Continue,
    /// A plugin asked to reconcile again after this long (zero: the
    /// operator's own backoff).
    Requeue {
        /// The plugin that asked.
        plugin: String,
        /// How long to wait.
        after: std::time::Duration,
    },
    /// A plugin stopped the chain (after `Pre`: end this reconciliation).
    Terminate {
        /// The plugin that asked.
        plugin: String,
    },
}

impl Router {
    /// Runs `ReconcilerHooks` `Pre` or `Post` through every plugin enabled
    /// by `cluster` (the resource enabling the plugins) that hooks objects
    /// of `kind`, `resource` being the object reconciled (the same resource
    /// for `Kind::Cluster`), in routing order, with CloudNativePG's
    /// semantics: `CONTINUE` (or unspecified) goes on to the next plugin,
    /// `REQUEUE` and `TERMINATE` stop the chain and are returned, an error
    /// fails the operation (unless the plugin is fail-open).
    pub async fn reconciler_hooks(
        &self,
        phase: HookPhase,
        kind: cnpgi_proto::reconciler::v1::reconciler_hooks_capability::Kind,
        cluster: &RoutedResource,
        resource: &[u8],
    ) -> Result<HookOutcome, RouteError> {
        use cnpgi_proto::reconciler::v1::reconciler_hooks_result::Behavior;
        let targets = self
            .targets(cluster, |r| r.info.reconciler_kinds.contains(&kind))
            .await?;
        if targets.is_empty() {
            return Ok(HookOutcome::Continue);
        }
        for (plugin, routable) in targets {
            let answer = self
                .reconciler_hook(phase, &plugin.name, &routable, cluster, resource)
                .await;
            let Some(answer) = self.tolerate(&plugin.name, answer)? else {
                continue;
            };
            match Behavior::try_from(answer.behavior) {
                Ok(Behavior::Requeue) => {
                    let seconds = u64::try_from(answer.requeue_after).unwrap_or(0);
                    return Ok(HookOutcome::Requeue {
                        plugin: plugin.name,
                        after: std::time::Duration::from_secs(seconds),
                    });
                }
                Ok(Behavior::Terminate) => return Ok(HookOutcome::Terminate { plugin: plugin.name }),
                Ok(Behavior::Continue | Behavior::Unspecified) | Err(_) => {}
            }
        }
        Ok(HookOutcome::Continue)
    }

    /// One plugin's answer to `ReconcilerHooks` `Pre` or `Post` (for the
    /// chain above, and for [`crate::deletion`], which asks every plugin
    /// whatever the others answered), observed like every routed call.
    pub(crate) async fn reconciler_hook(
        &self,
        phase: HookPhase,
        plugin: &str,
        routable: &Routable,
        cluster: &RoutedResource,
        resource: &[u8],
    ) -> Result<cnpgi_proto::reconciler::v1::ReconcilerHooksResult, RouteError> {
        use cnpgi_proto::reconciler::v1::{ReconcilerHooksRequest, reconciler_hooks_result::Behavior};
        let rpc = match phase {
            HookPhase::Pre => service::reconciler::PRE.method,
            HookPhase::Post => service::reconciler::POST.method,
        };
        let request = routable.client.request(ReconcilerHooksRequest {
            cluster_definition: cluster.definition().to_vec(),
            resource_definition: resource.to_vec(),
        });
        let mut client = routable.client.reconciler();
        let call = async {
            match phase {
                HookPhase::Pre => client.pre(request).await,
                HookPhase::Post => client.post(request).await,
            }
        };
        let describe = || summary::object_bytes(resource);
        observed(self.observer(), plugin, rpc, describe, call, |answer| {
            let answer = answer.get_ref();
            match Behavior::try_from(answer.behavior) {
                Ok(Behavior::Requeue) => format!("REQUEUE after {} s", answer.requeue_after),
                Ok(behavior) => summary::enum_name(behavior.as_str_name()).to_owned(),
                Err(_) => format!("behavior {} (unknown: CONTINUE)", answer.behavior),
            }
        })
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| call_error(plugin, rpc, s))
    }
}

impl RouteError {
    /// The RPC that failed, when a plugin was called.
    pub fn rpc(&self) -> Option<&'static str> {
        match self {
            Self::Call { rpc, .. } | Self::BadAnswer { rpc, .. } => Some(rpc),
            Self::Unavailable(_) | Self::Encode(_) => None,
        }
    }
}

fn call_error(plugin: &str, rpc: &'static str, status: tonic::Status) -> RouteError {
    RouteError::Call {
        plugin: plugin.to_owned(),
        rpc,
        code: status.code(),
        message: bounded_string(status.message()),
    }
}

/// Decodes a plugin's patch and applies it to `object` in place
/// ([`cnpgi_core::patch`]: never panics; on error `object` may be partly
/// patched, so a caller that goes on after an error keeps a copy).
pub fn apply_in_place(
    plugin: &str,
    rpc: &'static str,
    object: &mut Value,
    patch: &[u8],
) -> Result<json_patch::Patch, RouteError> {
    let bad = |error: cnpgi_core::patch::PatchError| RouteError::BadAnswer {
        plugin: plugin.to_owned(),
        rpc,
        reason: bounded_string(error.to_string()),
    };
    let patch = parse_patch(patch).map_err(bad)?;
    apply_unchecked(object, &patch).map_err(bad)?;
    Ok(patch)
}

/// `None` for an empty answer (keep the current status), else the JSON object as text.
fn status_object(plugin: &str, json_status: &[u8]) -> Result<Option<String>, RouteError> {
    parse_json_status(json_status)
        .map(|status| status.map(|object| object.to_string()))
        .map_err(|error| RouteError::BadAnswer {
            plugin: plugin.to_owned(),
            rpc: service::operator::SET_STATUS_IN_CLUSTER.method,
            reason: bounded_string(error.to_string()),
        })
}

/// The API group ("" for core) and kind of an object.
pub fn group_kind(object: &Value) -> (String, String) {
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let group = api_version.rsplit_once('/').map(|(group, _)| group).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    (group.to_owned(), kind.to_owned())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn groups_and_kinds() {
        assert_eq!(
            group_kind(&json!({"apiVersion": "v1", "kind": "Pod"})),
            ("".into(), "Pod".into())
        );
        assert_eq!(
            group_kind(&json!({"apiVersion": "apps/v1", "kind": "Deployment"})),
            ("apps".into(), "Deployment".into())
        );
        assert_eq!(group_kind(&json!({})), ("".into(), "".into()));
    }

    #[test]
    fn field_errors_read_like_kubectl() {
        let plugin = EnabledPlugin {
            index: 1,
            name: "p".into(),
        };
        let error = |path: &[&str]| {
            FieldError::from_plugin(
                &CnpgLayout,
                &plugin,
                ValidationError {
                    path_components: path.iter().map(|c| (*c).to_owned()).collect(),
                    value: "{ oops".into(),
                    message: "invalid JSON".into(),
                },
            )
            .to_string()
        };
        let expected = r#"spec.plugins[1].parameters.annotations: Invalid value: "{ oops": invalid JSON"#;
        // cnpg-i-machinery's form, with and without the index, and the older short form.
        assert_eq!(error(&["spec", "plugins", "1", "annotations"]), expected);
        assert_eq!(error(&["spec", "plugins", "annotations"]), expected);
        assert_eq!(error(&["1", "annotations"]), expected);
        assert_eq!(
            error(&["spec", "foo", "2", "bar"]),
            r#"spec.foo[2].bar: Invalid value: "{ oops": invalid JSON"#
        );
        let empty = FieldError::from_plugin(&CnpgLayout, &plugin, ValidationError::default());
        assert_eq!(empty.field, "spec");
    }

    #[test]
    fn patches_are_checked_and_applied() {
        let apply = |patch: &[u8]| {
            let mut object = json!({"a": 1});
            apply_in_place("p", "R", &mut object, patch).map(|_| object)
        };
        assert_eq!(
            apply(br#"[{"op":"add","path":"/b","value":2}]"#).unwrap(),
            json!({"a": 1, "b": 2})
        );
        let err = apply(br#"[{"op":"remove","path":"/zz"}]"#).unwrap_err();
        assert!(err.to_string().contains("does not apply"), "{err}");
        let err = apply(b"{").unwrap_err();
        assert!(err.to_string().contains("not an RFC 6902 JSON Patch"), "{err}");
        assert_eq!(apply(b"").unwrap(), json!({"a": 1}));
    }

    #[test]
    fn status_must_be_an_object() {
        assert_eq!(status_object("p", b"").unwrap(), None);
        assert_eq!(
            status_object("p", br#"{"a":1}"#).unwrap().as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert!(status_object("p", b"[1]").is_err());
    }

    /// Issue 13, point 5: a plugin's huge answer is quoted bounded.
    #[test]
    fn huge_plugin_answers_are_quoted_bounded() {
        let plugin = EnabledPlugin {
            index: 0,
            name: "p".into(),
        };
        let huge = "x".repeat(3 * 1024 * 1024);
        let error = FieldError::from_plugin(
            &CnpgLayout,
            &plugin,
            ValidationError {
                path_components: vec!["spec".into(), huge.clone()],
                value: huge.clone(),
                message: huge.clone(),
            },
        );
        assert!(error.to_string().len() < 4 * 1024, "{}", error.to_string().len());
        let call = call_error("p", "Operator/MutateCluster", tonic::Status::internal(huge.clone()));
        assert!(call.to_string().len() < 2 * 1024, "{}", call.to_string().len());
        let bad = apply_in_place("p", "R", &mut json!({}), format!("[{{\"op\": \"{huge}\"}}]").as_bytes()).unwrap_err();
        assert!(bad.to_string().len() < 2 * 1024, "{}", bad.to_string().len());
    }
}

#[cfg(test)]
mod cleanup_tests {
    use serde_json::json;

    use super::*;

    /// The implementation in `spec.implementation`, and policies in `spec.policies`.
    #[derive(Debug)]
    struct Implementation;

    impl PluginLayout for Implementation {
        fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
            let implementation = resource.pointer("/spec/implementation").and_then(Value::as_str);
            let policies = resource.pointer("/spec/policies").and_then(Value::as_array);
            let mut names: Vec<&str> = implementation.into_iter().collect();
            names.extend(policies.into_iter().flatten().filter_map(Value::as_str));
            names
                .into_iter()
                .enumerate()
                .map(|(index, name)| EnabledPlugin {
                    index,
                    name: name.to_owned(),
                })
                .collect()
        }
        fn previous_statuses(&self, _: &Value) -> BTreeMap<String, String> {
            BTreeMap::new()
        }
        fn write_plugin_status(&self, _: &mut Value, _: &[PluginStatusUpdate]) {}
        fn implementation_choice(&self) -> Option<cnpgi_core::layout::ImplementationChoice> {
            Some(cnpgi_core::layout::ImplementationChoice::new(
                "tables.example.com",
                "/spec/implementation",
            ))
        }
    }

    fn names(routed: &RoutedResource) -> Vec<&str> {
        routed.enabled().iter().map(|plugin| plugin.name.as_str()).collect()
    }

    #[test]
    fn a_cleanup_goes_to_the_recorded_implementation_whether_or_not_it_is_ready() {
        // Nothing is registered: a choice made now would find no implementation.
        let router = Router::with_layout(
            Arc::new(Registry::default()),
            RoutingPolicy::default(),
            Arc::new(Implementation),
        );
        let resource = |chosen: Value| {
            let mut resource = json!({"spec": {"implementation": "a.example.com", "policies": ["z.example.com"]}});
            if !chosen.is_null() {
                resource["status"]["implementationChoice"] = json!({
                    "kind": "tables.example.com", "preferred": "a.example.com", "chosen": chosen,
                    "reason": "PreferredUnavailable", "message": "m"});
            }
            router.routed(resource)
        };
        // b served it: b is asked to clean up (with the policies).
        let recorded = router.routed_for_cleanup(&resource(json!("b.example.com")));
        assert_eq!(names(&recorded), ["b.example.com", "z.example.com"]);
        assert_eq!(
            recorded.implementation_choice().and_then(|c| c.chosen.as_deref()),
            Some("b.example.com")
        );
        // The record says none served it: no implementation is asked.
        let none = json!({"spec": {"implementation": "a.example.com", "policies": ["z.example.com"]},
            "status": {"implementationChoice": {"kind": "tables.example.com", "preferred": "a.example.com",
                "reason": "NoImplementationReady", "message": "m"}}});
        assert_eq!(
            names(&router.routed_for_cleanup(&router.routed(none))),
            ["z.example.com"]
        );
        // No record: as routed now.
        let unrecorded = resource(Value::Null);
        assert_eq!(names(&router.routed_for_cleanup(&unrecorded)), names(&unrecorded));
    }
}
