//! The registry of known plugins, and how a plugin becomes routable.
//!
//! A plugin's path, all in this file:
//!
//! 1. **Discovered.** A discovery source calls [`Registry::add`] with a
//!    [`PluginClient`] named after what it found (Service label, socket file
//!    name, static entry). A name already added by *another* source is
//!    refused ([`RegistryError::Duplicate`]); the same source adding it again
//!    replaces it (its Secret rotated, its Service changed).
//! 2. **Probed.** A background task per plugin runs the probing sequence
//!    ([`cnpgi_client::probe::probe`]): metadata (name checked against the
//!    discovered one), capabilities. The answer is cached and only asked
//!    again when the client had to open a new connection (the plugin may have
//!    been restarted or upgraded).
//! 3. **Ready.** The same task asks `Probe` every
//!    [`RegistryOptions::probe_interval`]. Only a probed plugin whose last
//!    `Probe` said `ready: true` is **routable**. An error, a refusal or
//!    `ready: false` takes it out of routing until it is ready again; lookups
//!    of a plugin that is not routable fail at once with
//!    [`LookupError::NotReady`] and the reason.
//! 4. **Forgotten.** [`Registry::remove`] (its Service was deleted, its
//!    socket disappeared) stops the task and drops the channel.
//!    [`Registry::forget`] does the same and remembers why (a registered
//!    plugin stopped heart-beating): until the plugin is added again, lookups
//!    fail with [`LookupError::Forgotten`] and that reason.
//!
//! # Arriving plugins: a call waits instead of failing
//!
//! A plugin is often discovered a moment before it answers: its Service is
//! there before its Pod is Ready, or its Pod is Ready before the Service's
//! endpoints reach the node. A resource applied in that second (a user who
//! installs a plugin and applies a Cluster at once) must not be refused for a
//! plugin that is there. So a plugin that was discovered less than
//! [`ARRIVAL_WINDOW`] ago and never answered yet is *arriving* (a new name
//! is registered before its first probe, so it is arriving from the start):
//! [`Registry::get_waiting`] probes it at once and again every
//! [`ARRIVAL_RETRY`] until it is routable or the caller's patience runs out
//! (the admission webhook gives it a few seconds, below the API server's
//! webhook timeout). A plugin that answered before and stopped, or that never
//! answered for longer than the window, fails at once as before: a broken
//! plugin does not make every call wait. A name nobody registered is
//! refused after [`UNKNOWN_GRACE`] (one second: a Service created a moment
//! before the call is still being registered), naming what to check.
//!
//! Many readers look plugins up while discovery adds and removes them: the
//! map and each plugin's state sit behind short, never-awaited locks.
//!
//! # Ready: the first discovery pass is done
//!
//! A host should not route before discovery had a look: a resource applied
//! while the registry is still empty would be refused for a plugin that is
//! merely not found yet. Each discovery source started with
//! [`crate::discovery::spawn`] is *expected* ([`Registry::expect_first_pass`])
//! and says when its first pass is done ([`Registry::first_pass_done`]):
//! every plugin it found then was added, hence probed once.
//! [`Registry::ready`] resolves when no expected source is still on its first
//! pass ([`Registry::is_ready`] tells without waiting). Plugins found in the
//! first pass may still be unreachable: readiness of each plugin is still
//! per plugin, as above.
//!
//! # Changes: when routing would answer differently
//!
//! [`Registry::changes`] sees a new value whenever a plugin is added or
//! forgotten, becomes routable or stops being so, or advertises something
//! else after a reconnection (restarted, upgraded). An operator reconciles
//! every resource on it (kube-rs: `Controller::reconcile_all_on`), so a
//! plugin that dies or comes back shows in the resources' status without
//! waiting for their next periodic reconcile.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, PoisonError, RwLock, Weak},
    time::{Duration, Instant},
};

use cnpgi_proto::{
    operator::v1::operator_capability::rpc::Type as RpcType,
    operator_lifecycle::v1::operator_operation_type::Type as Operation,
};
use tokio::{sync::watch, task::JoinHandle};

use cnpgi_client::{
    client::PluginClient,
    probe::{PluginInfo, is_ready, probe},
};

use crate::metrics::Metrics;

/// Tunables of the registry.
#[derive(Debug, Clone)]
pub struct RegistryOptions {
    /// How often each plugin's `Probe` is asked. Default 10 s. A plugin
    /// that is not routable is asked again sooner: after 1 s, doubling up to
    /// this interval.
    pub probe_interval: Duration,
    /// Where plugin readiness is published.
    pub metrics: Metrics,
}

impl Default for RegistryOptions {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_secs(10),
            metrics: Metrics::default(),
        }
    }
}

/// A change the registry refused.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// Two discovery sources found a plugin with the same name.
    #[error(
        "plugin {name} found by {new_source} is already registered by {existing_source}; plugin names must be unique, the second one is ignored"
    )]
    Duplicate {
        /// The plugin name.
        name: String,
        /// The source that registered it first.
        existing_source: String,
        /// The source that was refused.
        new_source: String,
    },
}

/// Why a plugin cannot be called now.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No discovery source knows a plugin by that name.
    #[error(
        "plugin {name} is not registered: no discovery source has found it (check the name, and that its Service carries the label cnpg.io/pluginName={name} in the operator's namespace, or that its socket is in the plugin directory)"
    )]
    Unknown {
        /// The plugin name.
        name: String,
    },
    /// A discovery source forgot the plugin and said why
    /// ([`Registry::forget`]): a self-registered plugin whose heartbeats
    /// stopped, for instance. Until it is found again, lookups say so
    /// instead of "not registered".
    #[error("plugin {name} was forgotten: {reason}")]
    Forgotten {
        /// The plugin name.
        name: String,
        /// Why, where it was and when it was last heard of.
        reason: String,
    },
    /// The plugin is known but not routable.
    #[error("plugin {name} is not ready: {reason}")]
    NotReady {
        /// The plugin name.
        name: String,
        /// Why: the last probing error, or the plugin saying it is not ready.
        reason: String,
    },
}

/// What is known of a plugin right now.
#[derive(Debug, Clone, Default)]
pub struct PluginState {
    /// The probing sequence's answer, once it succeeded on the current connection.
    pub info: Option<Arc<PluginInfo>>,
    /// Whether the last `Probe` said ready (and nothing failed since).
    pub ready: bool,
    /// The last error, or why the plugin is not ready.
    pub last_error: Option<String>,
    /// The client's connection count when `info` was obtained.
    probed_connection: u64,
    /// Whether the plugin was ever routable since it was registered.
    ever_routable: bool,
}

impl PluginState {
    /// Probed and ready.
    pub fn is_routable(&self) -> bool {
        self.ready && self.info.is_some()
    }
}

/// A registered plugin: its client, where it was found, and its state.
#[derive(Debug)]
pub struct Plugin {
    client: PluginClient,
    source: String,
    metrics: Metrics,
    changes: Arc<watch::Sender<u64>>,
    state: RwLock<PluginState>,
    watcher: RwLock<Option<JoinHandle<()>>>,
    /// When it was registered (for [`Plugin::is_arriving`]).
    registered: Instant,
    /// One refresh at a time: the watcher and waiting callers take turns, and
    /// a caller that waited for another's refresh reads its outcome.
    refreshing: tokio::sync::Mutex<()>,
}

/// A plugin that may be called now: its client and what it advertised.
#[derive(Debug, Clone)]
pub struct Routable {
    /// The shared client.
    pub client: PluginClient,
    /// What probing learnt (shared: lookups do not copy it).
    pub info: Arc<PluginInfo>,
}

impl Plugin {
    /// The plugin name.
    pub fn name(&self) -> &str {
        self.client.name()
    }

    /// The discovery source that registered it.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The shared client.
    pub fn client(&self) -> &PluginClient {
        &self.client
    }

    /// A copy of the current state.
    pub fn state(&self) -> PluginState {
        self.state.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Registered less than [`ARRIVAL_WINDOW`] ago and never routable yet:
    /// a call waits for it (see [`Registry::get_waiting`]).
    pub fn is_arriving(&self) -> bool {
        !self.state.read().unwrap_or_else(PoisonError::into_inner).ever_routable
            && self.registered.elapsed() < ARRIVAL_WINDOW
    }

    fn routable(&self) -> Result<Routable, LookupError> {
        let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
        match (&state.info, state.ready) {
            (Some(info), true) => Ok(Routable {
                client: self.client.clone(),
                info: info.clone(),
            }),
            _ => Err(LookupError::NotReady {
                name: self.name().to_owned(),
                reason: state.last_error.clone().unwrap_or_else(|| "not probed yet".to_owned()),
            }),
        }
    }

    fn update(&self, change: impl FnOnce(&mut PluginState)) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        let was_routable = state.is_routable();
        change(&mut state);
        let routable = state.is_routable();
        state.ever_routable |= routable;
        self.metrics.set_ready(self.name(), routable);
        if was_routable != routable {
            notify(&self.changes);
            if routable {
                tracing::info!(
                    plugin = self.name(),
                    address = self.client.address(),
                    "plugin is routable"
                );
            } else {
                tracing::warn!(plugin = self.name(), reason = ?state.last_error, "plugin taken out of routing");
            }
        }
    }

    /// One round of the plugin's life: probe when the connection is new (or
    /// was never probed), then ask `Probe`. Rounds do not overlap: a round
    /// asked while another runs starts after it.
    pub async fn refresh(&self) {
        let _turn = self.refreshing.lock().await;
        self.refresh_round().await;
    }

    /// A round unless the plugin is routable, possibly because a round that
    /// ran while this one waited for its turn made it so.
    async fn refresh_unless_routable(&self) {
        let _turn = self.refreshing.lock().await;
        if !self.state().is_routable() {
            self.refresh_round().await;
        }
    }

    async fn refresh_round(&self) {
        let (probed, probed_connection) = {
            let state = self.state.read().unwrap_or_else(PoisonError::into_inner);
            (state.info.is_some(), state.probed_connection)
        };
        if !probed || probed_connection != self.client.connections() {
            match probe(&self.client).await {
                Ok(info) => {
                    let connection = self.client.connections();
                    self.update(|state| {
                        if state.info.as_deref() != Some(&info) {
                            notify(&self.changes);
                            tracing::info!(
                                plugin = self.name(),
                                version = %info.metadata.version,
                                capabilities = ?info.service_names(),
                                "plugin probed"
                            );
                        }
                        state.info = Some(Arc::new(info));
                        state.probed_connection = connection;
                    });
                }
                Err(error) => {
                    self.update(|state| {
                        state.info = None;
                        state.ready = false;
                        state.last_error = Some(error.to_string());
                    });
                    return;
                }
            }
        }
        let readiness = is_ready(&self.client).await;
        self.update(|state| match readiness {
            Ok(true) => {
                state.ready = true;
                state.last_error = None;
            }
            Ok(false) => {
                state.ready = false;
                state.last_error = Some("the plugin's Probe answered ready: false".to_owned());
            }
            Err(error) => {
                state.ready = false;
                state.last_error = Some(error.to_string());
            }
        });
    }

    fn stop(&self) {
        if let Some(task) = self.watcher.write().unwrap_or_else(PoisonError::into_inner).take() {
            task.abort();
        }
    }
}

/// The plugins known to the operator, by name.
#[derive(Debug)]
pub struct Registry {
    plugins: RwLock<HashMap<String, Arc<Plugin>>>,
    options: RegistryOptions,
    /// The discovery sources whose first pass is not done yet.
    first_passes: watch::Sender<BTreeSet<String>>,
    /// Counts the changes (see [`Registry::changes`]).
    changes: Arc<watch::Sender<u64>>,
    /// Why plugins that a source forgot ([`Registry::forget`]) are gone,
    /// by name, until they are added again.
    forgotten: RwLock<HashMap<String, String>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new(RegistryOptions::default())
    }
}

impl Registry {
    /// An empty registry.
    pub fn new(options: RegistryOptions) -> Self {
        Self {
            plugins: RwLock::default(),
            options,
            first_passes: watch::Sender::new(BTreeSet::new()),
            changes: Arc::new(watch::Sender::new(0)),
            forgotten: RwLock::default(),
        }
    }

    /// Declares that the discovery source `source` (its
    /// [`crate::discovery::DiscoverySource::name`]) is starting: until it
    /// calls [`Registry::first_pass_done`], the registry is not ready.
    pub fn expect_first_pass(&self, source: &str) {
        self.first_passes.send_modify(|pending| {
            pending.insert(source.to_owned());
        });
    }

    /// `source` finished its first pass: every plugin it found then was
    /// added (and probed once). Idempotent; a source that was not expected
    /// changes nothing.
    pub fn first_pass_done(&self, source: &str) {
        let done = self.first_passes.send_if_modified(|pending| pending.remove(source));
        if done {
            tracing::debug!(source, "discovery source: first pass done");
        }
    }

    /// Whether every expected discovery source finished its first pass.
    pub fn is_ready(&self) -> bool {
        self.first_passes.borrow().is_empty()
    }

    /// The expected discovery sources still on their first pass, sorted.
    pub fn pending_sources(&self) -> Vec<String> {
        self.first_passes.borrow().iter().cloned().collect()
    }

    /// Resolves when every expected discovery source finished its first
    /// pass (at once if none is pending). Routing after it sees every plugin
    /// discovery could find at start; a host awaits it before serving
    /// webhooks or reconciling, instead of sleeping.
    pub async fn ready(&self) {
        let mut pending = self.first_passes.subscribe();
        // The sender lives in `self`, borrowed for this call: it cannot be
        // dropped, so waiting cannot fail.
        let _ = pending.wait_for(BTreeSet::is_empty).await;
    }

    /// A receiver that sees a new value each time routing may answer
    /// differently: a plugin added or forgotten, becoming routable or not,
    /// advertising something else after a reconnection. Values only count;
    /// wait with `changed()`. Bursts coalesce: a receiver that was busy sees
    /// the latest value once.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let registry = cnpgi_host::registry::Registry::default();
    /// let changes = registry.changes();
    /// assert!(!changes.has_changed().unwrap());
    /// assert!(!registry.remove("absent.example.com", "static"), "nothing to forget, nothing changed");
    /// assert!(!changes.has_changed().unwrap());
    /// # }
    /// ```
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Registers a plugin found by `source` (e.g. `service/cnpg-system/hello`)
    /// and starts probing it; returns once its first round is done.
    ///
    /// A new name is published at once, arriving: a call made during the
    /// first round waits for it ([`Registry::get_waiting`]) instead of finding
    /// no such plugin. A plugin that replaces the same source's (its Secret
    /// rotated, its Service changed) is probed first, so calls keep going to
    /// the old connection until the new one was tried.
    pub async fn add(&self, source: &str, client: PluginClient) -> Result<Arc<Plugin>, RegistryError> {
        let plugin = Arc::new(Plugin {
            client,
            source: source.to_owned(),
            metrics: self.options.metrics.clone(),
            changes: self.changes.clone(),
            state: RwLock::default(),
            watcher: RwLock::default(),
            registered: Instant::now(),
            refreshing: tokio::sync::Mutex::new(()),
        });
        let published_first = {
            let mut plugins = self.plugins.write().unwrap_or_else(PoisonError::into_inner);
            if plugins
                .get(plugin.name())
                .is_none_or(|existing| existing.source == source)
            {
                // Found again: whatever it was forgotten for is over.
                self.forgotten
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(plugin.name());
            }
            match plugins.get(plugin.name()) {
                Some(existing) if existing.source != source => {
                    return Err(duplicate(plugin.name(), &existing.source, source));
                }
                Some(_) => false,
                None => {
                    plugins.insert(plugin.name().to_owned(), plugin.clone());
                    true
                }
            }
        };
        if published_first {
            notify(&self.changes);
        }
        plugin.refresh().await;
        let replaced = {
            let mut plugins = self.plugins.write().unwrap_or_else(PoisonError::into_inner);
            match plugins.get(plugin.name()) {
                // Published first and still there: nothing to replace.
                Some(existing) if Arc::ptr_eq(existing, &plugin) => None,
                // Published first, then forgotten (or replaced) while it was
                // probed: its source no longer wants it.
                _ if published_first => return Ok(plugin),
                // Another source won the race while this one was probing.
                Some(existing) if existing.source != source => {
                    return Err(duplicate(plugin.name(), &existing.source, source));
                }
                _ => plugins.insert(plugin.name().to_owned(), plugin.clone()),
            }
        };
        if !published_first {
            notify(&self.changes);
        }
        if let Some(old) = replaced {
            old.stop();
            tracing::info!(plugin = plugin.name(), source, "plugin connection rebuilt");
        } else {
            tracing::info!(
                plugin = plugin.name(),
                source,
                address = plugin.client.address(),
                "plugin discovered"
            );
        }
        let task = tokio::spawn(watch(Arc::downgrade(&plugin), self.options.probe_interval));
        *plugin.watcher.write().unwrap_or_else(PoisonError::into_inner) = Some(task);
        Ok(plugin)
    }

    /// The options the registry was created with.
    pub fn options(&self) -> &RegistryOptions {
        &self.options
    }

    /// Forgets the plugin `name` if `source` registered it; returns whether it did.
    pub fn remove(&self, name: &str, source: &str) -> bool {
        let mut plugins = self.plugins.write().unwrap_or_else(PoisonError::into_inner);
        match plugins.get(name) {
            Some(plugin) if plugin.source == source => {
                plugin.stop();
                plugins.remove(name);
                self.options.metrics.forget(name);
                notify(&self.changes);
                tracing::info!(plugin = name, source, "plugin forgotten");
                true
            }
            _ => false,
        }
    }

    /// Forgets the plugin `name` like [`Registry::remove`], and remembers
    /// `reason` until the plugin is added again: lookups of it fail with
    /// [`LookupError::Forgotten`] and that reason (where it was, when it was
    /// last heard of) instead of "not registered". Returns whether it forgot it.
    ///
    /// ```
    /// let registry = cnpgi_host::registry::Registry::default();
    /// // Nothing registered by that source: nothing forgotten, nothing remembered.
    /// assert!(!registry.forget("p.example.com", "registration", "stopped heart-beating"));
    /// assert!(matches!(registry.get("p.example.com"), Err(cnpgi_host::registry::LookupError::Unknown { .. })));
    /// ```
    pub fn forget(&self, name: &str, source: &str, reason: impl Into<String>) -> bool {
        // The reason is in place before the plugin goes, so that no lookup
        // in between says "not registered".
        let reason = reason.into();
        let mut forgotten = self.forgotten.write().unwrap_or_else(PoisonError::into_inner);
        let previous = forgotten.insert(name.to_owned(), reason);
        drop(forgotten);
        let removed = self.remove(name, source);
        if !removed {
            let mut forgotten = self.forgotten.write().unwrap_or_else(PoisonError::into_inner);
            match previous {
                Some(previous) => forgotten.insert(name.to_owned(), previous),
                None => forgotten.remove(name),
            };
        }
        removed
    }

    /// The error for a name no source has registered now: why it was
    /// forgotten, if a source said so, else unknown.
    fn absent(&self, name: &str) -> LookupError {
        match self.forgotten.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            Some(reason) => LookupError::Forgotten {
                name: name.to_owned(),
                reason: reason.clone(),
            },
            None => LookupError::Unknown { name: name.to_owned() },
        }
    }

    /// The registered plugin `name`, routable or not.
    pub fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        self.plugins
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    /// Every registered plugin, sorted by name.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        let mut plugins: Vec<_> = self
            .plugins
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        plugins.sort_by(|a, b| a.name().cmp(b.name()));
        plugins
    }

    /// The plugin `name`, if it may be called now.
    pub fn get(&self, name: &str) -> Result<Routable, LookupError> {
        self.plugin(name).ok_or_else(|| self.absent(name))?.routable()
    }

    /// The plugin `name`, if it may be called now or becomes routable within
    /// `patience` while it is arriving ([`Plugin::is_arriving`]): it is probed
    /// at once, then every [`ARRIVAL_RETRY`]. Any other plugin is looked up
    /// as with [`Registry::get`], without waiting. A plugin replaced meanwhile
    /// (its Secret rotated) is followed under its name.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use std::time::Duration;
    /// use cnpgi_host::registry::{LookupError, Registry};
    ///
    /// let registry = Registry::default();
    /// // Nobody has heard of it: refused after UNKNOWN_GRACE, whatever the patience.
    /// let error = registry.get_waiting("absent.example.com", Duration::from_secs(5)).await.unwrap_err();
    /// assert!(matches!(error, LookupError::Unknown { .. }));
    /// # }
    /// ```
    pub async fn get_waiting(&self, name: &str, patience: Duration) -> Result<Routable, LookupError> {
        let deadline = Instant::now() + patience;
        loop {
            let plugin = match self.plugin(name) {
                Some(plugin) => plugin,
                None => {
                    self.wait_registered(name, deadline.min(Instant::now() + UNKNOWN_GRACE))
                        .await?
                }
            };
            let error = match plugin.routable() {
                Ok(routable) => return Ok(routable),
                Err(error) => error,
            };
            if !plugin.is_arriving() {
                return Err(error);
            }
            if Instant::now() >= deadline {
                return Err(waited(error, patience, plugin.registered.elapsed()));
            }
            let _ = tokio::time::timeout_at(deadline.into(), plugin.refresh_unless_routable()).await;
            if let Ok(routable) = plugin.routable() {
                return Ok(routable);
            }
            tokio::time::sleep_until(deadline.min(Instant::now() + ARRIVAL_RETRY).into()).await;
        }
    }

    /// The plugin `name` once a discovery source registered it, or
    /// [`LookupError::Unknown`] at `deadline`.
    async fn wait_registered(&self, name: &str, deadline: Instant) -> Result<Arc<Plugin>, LookupError> {
        let mut changes = self.changes.subscribe();
        loop {
            if let Some(plugin) = self.plugin(name) {
                return Ok(plugin);
            }
            // The sender lives in `self`: `changed` cannot fail.
            if tokio::time::timeout_at(deadline.into(), changes.changed())
                .await
                .is_err()
            {
                return self.plugin(name).ok_or_else(|| self.absent(name));
            }
        }
    }

    /// Routable plugins advertising the Operator RPC `rpc`, sorted by name.
    pub fn with_operator_rpc(&self, rpc: RpcType) -> Vec<Routable> {
        self.routable_where(|info| info.has_operator_rpc(rpc))
    }

    /// Routable plugins with a lifecycle hook for `group`/`kind`/`operation`, sorted by name.
    pub fn matching_lifecycle(&self, group: &str, kind: &str, operation: Operation) -> Vec<Routable> {
        self.routable_where(|info| info.matches_lifecycle(group, kind, operation))
    }

    fn routable_where(&self, keep: impl Fn(&PluginInfo) -> bool) -> Vec<Routable> {
        self.plugins()
            .iter()
            .filter_map(|plugin| plugin.routable().ok())
            .filter(|routable| keep(&routable.info))
            .collect()
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for plugin in self.plugins.read().unwrap_or_else(PoisonError::into_inner).values() {
            plugin.stop();
        }
    }
}

/// Counts one change for [`Registry::changes`].
fn notify(changes: &watch::Sender<u64>) {
    changes.send_modify(|count| *count = count.wrapping_add(1));
}

/// The lookup error of an arriving plugin that did not answer in time: the
/// reason says how long the call waited and how new the plugin is.
fn waited(error: LookupError, patience: Duration, age: Duration) -> LookupError {
    match error {
        LookupError::NotReady { name, reason } => LookupError::NotReady {
            name,
            reason: format!(
                "{reason} (discovered {} s ago; the call waited {} ms for it to answer)",
                age.as_secs(),
                patience.as_millis()
            ),
        },
        other => other,
    }
}

fn duplicate(name: &str, existing_source: &str, new_source: &str) -> RegistryError {
    RegistryError::Duplicate {
        name: name.to_owned(),
        existing_source: existing_source.to_owned(),
        new_source: new_source.to_owned(),
    }
}

/// How long after its registration a plugin that never answered counts as
/// arriving: long enough for a Deployment's rollout (image pull, start,
/// readiness) after its Service, short enough that a plugin that never comes
/// up stops holding calls.
pub const ARRIVAL_WINDOW: Duration = Duration::from_secs(300);

/// How long a call waits for a plugin nobody registered, in case a discovery
/// source is registering it now (its Service was created a moment before the
/// call): long enough for a watch event to arrive, short enough that a
/// misspelt name is refused without a noticeable wait.
pub const UNKNOWN_GRACE: Duration = Duration::from_secs(1);

/// How often a call waiting for an arriving plugin probes it again.
pub const ARRIVAL_RETRY: Duration = Duration::from_millis(250);

/// The first retry of a plugin that is not routable; retries double up to the
/// probe interval.
const NOT_ROUTABLE_RETRY: Duration = Duration::from_secs(1);

/// Refreshes the plugin every `interval` until it is removed. A plugin that
/// is not routable is refreshed sooner (after 1 s, doubling up to
/// `interval`): one discovered before it can be reached (its Pod just Ready,
/// the Service's endpoints or kube-proxy's rules not there yet) becomes
/// routable about a second after it can be reached, not up to `interval`
/// later, so a Cluster applied right after the plugin's rollout is not
/// refused for that long.
async fn watch(plugin: Weak<Plugin>, interval: Duration) {
    let mut retry = NOT_ROUTABLE_RETRY.min(interval);
    loop {
        let routable = match plugin.upgrade() {
            Some(plugin) => plugin.state().is_routable(),
            None => return,
        };
        let wait = if routable {
            retry = NOT_ROUTABLE_RETRY.min(interval);
            interval
        } else {
            let wait = retry;
            retry = (retry * 2).min(interval);
            wait
        };
        tokio::time::sleep(wait).await;
        let Some(plugin) = plugin.upgrade() else { return };
        plugin.refresh().await;
    }
}
