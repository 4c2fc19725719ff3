//! The Cluster reconciler: instance Pods patched by plugins.
//!
//! For each Cluster the reconciler keeps Pods `<cluster>-1` … `<cluster>-N`,
//! each with a `postgres` container. A Pod is built from a template
//! ([`crate::pods::instance_pod`]), passed through the lifecycle hooks of
//! the enabled plugins that declared `("", "Pod", CREATE)`, and created. The Pod is
//! annotated with a hash of what the plugins want (the CREATE chain's
//! result) and with the fingerprint of the inputs it was built from
//! ([`crate::pods::inputs_fingerprint`]: the template, the Cluster's spec,
//! labels and annotations, the enabled plugins' versions). When those inputs
//! change, the plugins are asked again (the `EVALUATE` chain on the
//! template), and a Pod whose hash changed (a plugin parameter changed, a
//! plugin was upgraded) is rolled: deleted and recreated, one at a time. A
//! reconcile of an unchanged Cluster makes no lifecycle call. `SetStatusInCluster`
//! answers fill `status.pluginStatus[]`, a plugin removed from the Cluster
//! is sent `Deregister` once, and a plugin failure sets a clear phase, a
//! condition and an Event, creates nothing, and retries.
//!
//! A Kubernetes API failure (a Pod create refused by admission, RBAC or a
//! name clash; a failed list or delete) is surfaced the same way: phase
//! `Reconcile error` with the API server's message as `phaseReason`, the
//! `Ready` condition `False` with a reason naming the call (`CreatePodFailed`,
//! ...), and a Warning Event; it is retried with exponential backoff (1 s
//! doubling up to 5 min, reset by a successful reconcile). Every write uses
//! the field manager [`FIELD_MANAGER`].
//!
//! At scale (issue 35), a reconcile costs what it changes: the instance Pods
//! come from the watch that triggers reconciles (a cache, not a `LIST` per
//! reconcile), the status is written only when it differs from the
//! Cluster's, `SetStatusInCluster` is asked only by a reconcile that changed
//! something (Pods, phase, conditions, plugins, a new generation) or when
//! the last round is older than [`PLUGIN_STATUS_REFRESH`], and at most
//! [`DEFAULT_MAX_CONCURRENT_RECONCILES`] Clusters reconcile at once
//! ([`Context::max_concurrent_reconciles`]). The cache may be a moment
//! behind: a create of a Pod it has not seen yet finds the Cluster's own Pod
//! and goes on, a delete of a Pod already gone is done.
//!
//! Plugins advertising `ReconcilerHooks` on Clusters are called as
//! CloudNativePG calls them: `Pre` before anything else (a `REQUEUE` answer
//! defers the reconcile by its delay, `TERMINATE` ends it until the Cluster
//! changes), `Post` after the Pods and before `SetStatusInCluster` (a
//! `REQUEUE` answer shortens the next requeue, `TERMINATE` only stops the
//! chain); a hook's error is a plugin failure like any other, retried after
//! 15 s as CloudNativePG does (other plugin failures: 10 s).

use std::{
    collections::{BTreeMap, BTreeSet, HashMap},
    sync::{Arc, Mutex, RwLock},
    time::{Duration, Instant},
};

use futures_util::{FutureExt, StreamExt};
use k8s_openapi::{
    api::core::v1::Pod,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    runtime::{
        WatchStreamExt,
        controller::{Action, Config as ControllerConfig, Controller, Error as ControllerError},
        events::{Event, EventType, Recorder, Reporter},
        reflector::{self, Store},
        watcher,
    },
};
use serde_json::json;

pub use crate::pods::{CLUSTER_LABEL, INSTANCE_LABEL, PLUGINS_HASH_ANNOTATION};
use cnpgi_core::service;
use cnpgi_host::{
    Host, HostError,
    metrics::ReconcileResult,
    routing::{HookOutcome, HookPhase, RoutedResource},
};

use crate::{
    crd::{Cluster, ClusterStatus},
    pods::{PLUGINS_INPUTS_ANNOTATION, build_pod, inputs_fingerprint, postgresql_configuration, wanted_hash},
};

/// Field manager of every write the reconciler makes (Pod creates, status
/// patches), as shown in `metadata.managedFields`.
pub const FIELD_MANAGER: &str = "cnpgi-operator";

/// First delay before retrying a Cluster whose reconcile hit an API error.
pub const API_ERROR_BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// Longest delay between retries of a Cluster that keeps hitting API errors.
pub const API_ERROR_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Delay before retrying a Cluster whose plugin failed.
pub const PLUGIN_ERROR_RETRY: Duration = Duration::from_secs(10);
/// Delay before retrying a Cluster whose `ReconcilerHooks` call failed, as
/// CloudNativePG requeues after an error from a plugin's hooks.
pub const HOOK_ERROR_RETRY: Duration = Duration::from_secs(15);
/// Longest a Cluster's `status.pluginStatus` goes without a
/// `SetStatusInCluster` round while nothing changes.
pub const PLUGIN_STATUS_REFRESH: Duration = Duration::from_secs(60);
/// Reconciles running at once, by default (CloudNativePG's default too).
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: u16 = 10;

/// Why a reconcile failed.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A plugin failed; nothing was written.
    #[error(transparent)]
    Plugin(#[from] HostError),
    /// A Kubernetes API call failed.
    #[error("cannot {action}: {detail}")]
    Kube {
        /// What was attempted, e.g. `create Pod db/pg-1`.
        action: String,
        /// The condition and Event reason, e.g. `CreatePodFailed`.
        reason: &'static str,
        /// The API server's message (or the transport error).
        detail: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The Cluster could not be serialised.
    #[error("cannot encode the Cluster: {0}")]
    Encode(#[from] serde_json::Error),
    /// The Cluster has no namespace.
    #[error("the Cluster has no namespace")]
    NoNamespace,
}

impl ReconcileError {
    /// A failed API call: `reason` names it for conditions and Events,
    /// `action` says what was attempted.
    pub fn kube(reason: &'static str, action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Kube {
            detail: describe_kube_error(&source),
            action,
            reason,
            source,
        }
    }

    /// The reason used in the `Ready` condition and the Warning Event.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Plugin(_) => "PluginFailed",
            Self::Kube { reason, .. } => reason,
            Self::Encode(_) => "EncodeFailed",
            Self::NoNamespace => "NoNamespace",
        }
    }
}

/// The API server's own words for a refused call (`message (Reason, HTTP
/// code)`), or the transport error.
fn describe_kube_error(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({}, HTTP {})", status.message, status.reason, status.code),
        other => other.to_string(),
    }
}

/// What the reconciler needs.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// The plugin host: every plugin call goes through it, and reconciles
    /// are measured in its metrics (`controller_runtime_reconcile_*`,
    /// `workqueue_depth`: [`Host::metrics`]).
    pub host: Host<Cluster>,
    /// Records Events on Clusters.
    pub recorder: Recorder,
    /// Delay before re-checking a healthy Cluster.
    pub resync: Duration,
    /// Longest a Cluster goes without a `SetStatusInCluster` round while
    /// nothing changes ([`PLUGIN_STATUS_REFRESH`]).
    pub plugin_status_refresh: Duration,
    /// Reconciles running at once, across Clusters (0: no limit).
    pub max_concurrent_reconciles: u16,
    /// The instance Pods as [`run`]'s watch has them; until it runs (a
    /// reconcile called on its own, as in tests), Pods are listed.
    pods: RwLock<Option<Store<Pod>>>,
    /// By Cluster `namespace/name`, the last `SetStatusInCluster` round.
    status_rounds: Mutex<HashMap<String, StatusRound>>,
    /// Consecutive API-error reconciles, by `namespace/name`.
    failures: Mutex<HashMap<String, u32>>,
    /// By Cluster `namespace/name`, the inputs fingerprint under which each
    /// live Pod (by uid) was last found up to date by an `EVALUATE`.
    evaluated: Mutex<HashMap<String, HashMap<String, String>>>,
}

impl Context {
    /// A context routing through `host`, reporting Events as `controller`.
    pub fn new(client: Client, host: Host<Cluster>, controller: &str) -> Self {
        let reporter = Reporter {
            controller: controller.to_owned(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            host,
            resync: Duration::from_secs(300),
            plugin_status_refresh: PLUGIN_STATUS_REFRESH,
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
            pods: RwLock::new(None),
            status_rounds: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            evaluated: Mutex::new(HashMap::new()),
        }
    }

    fn pod_cache(&self) -> Option<Store<Pod>> {
        self.pods
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Whether this reconcile must ask the plugins for their status: it
    /// changed something (`changed`), the Cluster's generation moved, or
    /// the last round is older than [`Context::plugin_status_refresh`].
    fn status_round_due(&self, key: &str, generation: Option<i64>, changed: bool) -> bool {
        let rounds = self
            .status_rounds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        changed
            || rounds
                .get(key)
                .is_none_or(|last| last.generation != generation || last.at.elapsed() >= self.plugin_status_refresh)
    }

    fn status_round_done(&self, key: &str, generation: Option<i64>) {
        self.status_rounds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                key.to_owned(),
                StatusRound {
                    generation,
                    at: Instant::now(),
                },
            );
    }

    /// The delay before retrying `key` after one more API error: 1 s,
    /// doubling, at most [`API_ERROR_BACKOFF_MAX`].
    fn next_backoff(&self, key: &str) -> Duration {
        let mut failures = self.failures.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let count = failures.entry(key.to_owned()).or_insert(0);
        *count = count.saturating_add(1);
        let exponent = (*count - 1).min(16);
        API_ERROR_BACKOFF_FIRST
            .saturating_mul(1 << exponent)
            .min(API_ERROR_BACKOFF_MAX)
    }

    fn evaluated_pods(&self, key: &str) -> HashMap<String, String> {
        let evaluated = self.evaluated.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        evaluated.get(key).cloned().unwrap_or_default()
    }

    /// Replaces the Cluster's record, so Pods gone since are forgotten.
    fn set_evaluated_pods(&self, key: &str, pods: HashMap<String, String>) {
        let mut evaluated = self.evaluated.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        evaluated.insert(key.to_owned(), pods);
    }

    fn reset_backoff(&self, key: &str) {
        self.failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }

    /// Drops what is kept about a Cluster that no longer exists, so that
    /// the memory kept follows the live Clusters.
    fn forget(&self, key: &str) {
        self.reset_backoff(key);
        self.status_rounds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        self.evaluated
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
    }
}

/// When plugins were last asked for a Cluster's status, and at which generation.
struct StatusRound {
    generation: Option<i64>,
    at: Instant,
}

fn cluster_key(cluster: &Cluster) -> String {
    key(cluster.namespace().as_deref(), &cluster.name_any())
}

/// `namespace/name`: how the reconciler's memory names a Cluster.
fn key(namespace: Option<&str>, name: &str) -> String {
    format!("{}/{name}", namespace.unwrap_or_default())
}

fn instance_number(cluster: &str, pod: &Pod) -> Option<i32> {
    pod.name_any().strip_prefix(&format!("{cluster}-"))?.parse().ok()
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn condition(type_: &str, ok: bool, reason: &str, message: &str, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if ok { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::now()),
    }
}

async fn patch_status(api: &Api<Cluster>, name: &str, status: &ClusterStatus) -> Result<(), ReconcileError> {
    api.patch_status(
        name,
        &PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({ "status": status })),
    )
    .await
    .map_err(ReconcileError::kube(
        "StatusUpdateFailed",
        format!("update the status of Cluster {name}"),
    ))?;
    Ok(())
}

/// Writes `status` unless the Cluster already has it: a reconcile that
/// changes nothing writes nothing (and so triggers no watch event). The
/// Cluster may be a little behind the API server; a write skipped on a
/// stale copy is made by the reconcile its own update triggers.
async fn write_status(cluster: &Cluster, api: &Api<Cluster>, status: &ClusterStatus) -> Result<(), ReconcileError> {
    if cluster.status.as_ref() == Some(status) {
        return Ok(());
    }
    patch_status(api, &cluster.name_any(), status).await
}

/// Records a Warning Event on the Cluster (failures to record are logged).
async fn warn(ctx: &Context, cluster: &Cluster, reason: &str, message: &str) {
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(message.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cluster.object_ref(&())).await {
        tracing::warn!(error = %e, "cannot record an Event on the Cluster");
    }
}

/// The reconciler's name in metrics (`controller="cluster"`).
pub const CONTROLLER_NAME: &str = "cluster";

/// When a Cluster is reconciled next, unless a watch event comes first (a
/// kube-runtime [`Action`] whose delay can be read, for the metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// After this delay.
    After(Duration),
    /// Only on a change.
    Change,
}

impl Next {
    fn action(self) -> Action {
        match self {
            Self::After(delay) => Action::requeue(delay),
            Self::Change => Action::await_change(),
        }
    }
}

/// Reconciles one Cluster, measured in the host's metrics
/// (`controller_runtime_reconcile_*`, and `workqueue_depth` for the
/// requeue it asks for).
pub async fn reconcile(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    let key = cluster_key(&cluster);
    let metrics = ctx.host.metrics();
    let timer = metrics.reconcile_started(CONTROLLER_NAME, &key);
    let result = reconcile_cluster(cluster, ctx.clone()).await;
    let outcome = match result {
        Err(_) => ReconcileResult::Error,
        // The periodic resync is controller-runtime's SyncPeriod, not a
        // requeue the reconcile asked for.
        Ok(Next::Change) => ReconcileResult::Success,
        Ok(Next::After(delay)) if delay == ctx.resync => ReconcileResult::Success,
        Ok(Next::After(_)) => ReconcileResult::RequeueAfter,
    };
    metrics.reconcile_ended(timer, outcome);
    // An error's retry is scheduled by `error_policy`.
    if let Ok(Next::After(delay)) = result {
        metrics.requeued(CONTROLLER_NAME, &key, delay);
    }
    result.map(Next::action)
}

async fn reconcile_cluster(cluster: Arc<Cluster>, ctx: Arc<Context>) -> Result<Next, ReconcileError> {
    let namespace = cluster.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = cluster.name_any();
    let clusters: Api<Cluster> = Api::namespaced(ctx.client.clone(), &namespace);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut status = cluster.status.clone().unwrap_or_default();
    let generation = cluster.metadata.generation;

    match reconcile_pods(&cluster, &ctx, &pods, &mut status).await {
        Ok(action) => {
            let ok = condition(
                "PluginsReady",
                true,
                "PluginsAnswered",
                "every enabled plugin answered",
                generation,
            );
            set_condition(&mut status, ok);
            if let Err(error) = write_status(&cluster, &clusters, &status).await {
                // The status cannot say it: an Event can.
                warn(&ctx, &cluster, error.reason(), &error.to_string()).await;
                return Err(error);
            }
            ctx.reset_backoff(&cluster_key(&cluster));
            Ok(action)
        }
        Err(ReconcileError::Plugin(error)) => {
            let message = error.to_string();
            status.phase = Some("Plugin error".into());
            status.phase_reason = Some(message.clone());
            set_condition(
                &mut status,
                condition("PluginsReady", false, "PluginFailed", &message, generation),
            );
            set_condition(
                &mut status,
                condition("Ready", false, "PluginFailed", &message, generation),
            );
            if let Err(status_error) = write_status(&cluster, &clusters, &status).await {
                tracing::warn!(cluster = %name, error = %status_error, "cannot report the failure in the Cluster status");
            }
            warn(&ctx, &cluster, "PluginFailed", &message).await;
            Err(ReconcileError::Plugin(error))
        }
        Err(error) => {
            // Not the plugins: the API server refused or failed a call. Say
            // so where users look (status, conditions, Events), then retry.
            let message = error.to_string();
            let reason = error.reason();
            status.phase = Some("Reconcile error".into());
            status.phase_reason = Some(message.clone());
            set_condition(&mut status, condition("Ready", false, reason, &message, generation));
            if let Err(status_error) = write_status(&cluster, &clusters, &status).await {
                tracing::warn!(cluster = %name, error = %status_error, "cannot report the failure in the Cluster status");
            }
            warn(&ctx, &cluster, reason, &message).await;
            Err(error)
        }
    }
}

fn set_condition(status: &mut ClusterStatus, new: Condition) {
    match status.conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(existing) if existing.status == new.status && existing.reason == new.reason => {
            existing.message = new.message;
            existing.observed_generation = new.observed_generation;
        }
        Some(existing) => *existing = new,
        None => status.conditions.push(new),
    }
}

async fn reconcile_pods(
    cluster: &Cluster,
    ctx: &Context,
    pods: &Api<Pod>,
    status: &mut ClusterStatus,
) -> Result<Next, ReconcileError> {
    let name = cluster.name_any();
    // Encoded once: every plugin call of this reconcile sends these bytes.
    let routed = ctx.host.routed_json(serde_json::to_value(cluster)?);
    let wanted = cluster.spec.instances.max(0);

    if let Some(action) = pre_hooks(ctx, &name, &routed).await? {
        return Ok(action);
    }
    deregister_removed(ctx, &name, &routed, status).await;
    let by_number = instances(ctx, pods, cluster).await?;
    let scaled_down = scale_down(pods, &name, &by_number, wanted).await?;
    // The enriched PostgreSQL configuration, asked only when a Pod is built
    // or evaluated, once.
    let configuration = Configuration::default();
    // Compute every missing Pod first, so that a plugin failure creates nothing.
    let mut to_create = Vec::new();
    for n in (1..=wanted).filter(|n| !by_number.contains_key(n)) {
        let configuration = configuration.get(ctx, &routed).await?;
        to_create.push(build_pod(&ctx.host, &routed, configuration, n).await?);
    }
    // Drift: roll the first Pod the plugins want different, one at a time.
    let rolled = to_create.is_empty()
        && roll_first_drifted(
            ctx,
            &cluster_key(cluster),
            &routed,
            &configuration,
            pods,
            &by_number,
            wanted,
        )
        .await?;
    let created = !to_create.is_empty();
    create_pods(pods, &name, to_create).await?;
    let post = ctx.host.reconciler_hooks(HookPhase::Post, &routed).await?;
    let healthy = set_phase(cluster, status, &by_number, wanted, rolled);
    // One SetStatusInCluster round per reconcile that changes something
    // (Pods, the phase or conditions, the plugins, the spec), and at least
    // every `plugin_status_refresh`: not on every watch event.
    let changed =
        created || scaled_down || rolled || cluster.status.as_ref() != Some(&*status) || !same_plugins(&routed, status);
    let key = cluster_key(cluster);
    if ctx.status_round_due(&key, cluster.metadata.generation, changed) {
        update_plugin_status(ctx, &routed, status).await?;
        ctx.status_round_done(&key, cluster.metadata.generation);
    }
    Ok(match post {
        HookOutcome::Requeue { plugin, after } => {
            tracing::info!(cluster = %name, %plugin, ?after, "a ReconcilerHooks Post hook asked for a requeue");
            Next::After(requeue_delay(after))
        }
        HookOutcome::Continue | HookOutcome::Terminate { .. } if healthy => Next::After(ctx.resync),
        HookOutcome::Continue | HookOutcome::Terminate { .. } => Next::After(Duration::from_secs(5)),
    })
}

/// The `Pre` reconciler hooks: `Some(action)` when a plugin deferred or
/// ended this reconcile.
async fn pre_hooks(ctx: &Context, name: &str, routed: &RoutedResource) -> Result<Option<Next>, ReconcileError> {
    Ok(match ctx.host.reconciler_hooks(HookPhase::Pre, routed).await? {
        HookOutcome::Continue => None,
        HookOutcome::Requeue { plugin, after } => {
            tracing::info!(cluster = %name, %plugin, ?after, "a ReconcilerHooks Pre hook asked for a requeue");
            Some(Next::After(requeue_delay(after)))
        }
        HookOutcome::Terminate { plugin } => {
            tracing::info!(cluster = %name, %plugin, "a ReconcilerHooks Pre hook ended this reconcile");
            Some(Next::Change)
        }
    })
}

/// Plugins removed from the Cluster are told once (`Deregister`; a failure
/// is logged, not retried), then dropped from the status.
async fn deregister_removed(ctx: &Context, name: &str, routed: &RoutedResource, status: &ClusterStatus) {
    let enabled: BTreeSet<&str> = routed.enabled().iter().map(|p| p.name.as_str()).collect();
    for gone in status
        .plugin_status
        .iter()
        .filter(|s| !enabled.contains(s.name.as_str()))
    {
        match ctx.host.deregister(&gone.name, routed).await {
            Ok(()) => tracing::info!(cluster = %name, plugin = %gone.name, "plugin deregistered"),
            Err(error) => {
                tracing::warn!(cluster = %name, plugin = %gone.name, %error, "Deregister failed; not retried")
            }
        }
    }
}

/// Whether `status.pluginStatus` has an entry for exactly the enabled plugins.
fn same_plugins(routed: &RoutedResource, status: &ClusterStatus) -> bool {
    let enabled: BTreeSet<&str> = routed.enabled().iter().map(|p| p.name.as_str()).collect();
    let reported: BTreeSet<&str> = status.plugin_status.iter().map(|s| s.name.as_str()).collect();
    enabled == reported
}

/// The Cluster's instance Pods, by instance number: from the watch cache
/// [`run`] keeps (no API call) once it has its first full list, else listed.
async fn instances(ctx: &Context, pods: &Api<Pod>, cluster: &Cluster) -> Result<BTreeMap<i32, Pod>, ReconcileError> {
    let name = cluster.name_any();
    // Never wait for the cache: it fills as the controller takes in Pod
    // events, which it does not while every reconcile slot waits.
    if let Some(cache) = ctx.pod_cache()
        && matches!(cache.wait_until_ready().now_or_never(), Some(Ok(())))
    {
        let namespace = cluster.namespace();
        return Ok(cache
            .state_filter(|pod| pod.metadata.namespace == namespace && pod.labels().get(CLUSTER_LABEL) == Some(&name))
            .into_iter()
            .filter_map(|pod| Some((instance_number(&name, &pod)?, Pod::clone(&pod))))
            .collect());
    }
    let existing = pods
        .list(&ListParams::default().labels(&format!("{CLUSTER_LABEL}={name}")))
        .await
        .map_err(ReconcileError::kube(
            "ListPodsFailed",
            format!("list the Pods of Cluster {name}"),
        ))?;
    Ok(existing
        .into_iter()
        .filter_map(|pod| Some((instance_number(&name, &pod)?, pod)))
        .collect())
}

/// Deletes the instances above `wanted`, the highest first; `true` when
/// there were any.
async fn scale_down(
    pods: &Api<Pod>,
    name: &str,
    by_number: &BTreeMap<i32, Pod>,
    wanted: i32,
) -> Result<bool, ReconcileError> {
    let mut deleted = false;
    for (n, pod) in by_number.iter().rev().filter(|(n, _)| **n > wanted) {
        tracing::info!(cluster = %name, instance = n, "scaling down");
        delete_pod(pods, &pod.name_any()).await?;
        deleted = true;
    }
    Ok(deleted)
}

/// Deletes a Pod; one already gone (the watch cache was behind) is fine.
async fn delete_pod(pods: &Api<Pod>, pod: &str) -> Result<(), ReconcileError> {
    match pods.delete(pod, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(ReconcileError::kube("DeletePodFailed", format!("delete Pod {pod}"))(
            error,
        )),
    }
}

/// Creates the Pods built by the plugins, as [`FIELD_MANAGER`].
async fn create_pods(pods: &Api<Pod>, name: &str, to_create: Vec<serde_json::Value>) -> Result<(), ReconcileError> {
    let create = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    for pod in to_create {
        let pod: Pod = serde_json::from_value(pod)?;
        tracing::info!(cluster = %name, pod = %pod.name_any(), "creating instance Pod");
        match pods.create(&create, &pod).await {
            Ok(_) => {}
            // The watch cache had not seen this Cluster's own Pod yet: it is
            // there. Any other Pod of that name is a clash, reported.
            Err(kube::Error::Api(status))
                if status.code == 409 && is_instance_of(pods, &pod.name_any(), name).await =>
            {
                tracing::debug!(cluster = %name, pod = %pod.name_any(), "instance Pod already created");
            }
            Err(error) => {
                return Err(ReconcileError::kube(
                    "CreatePodFailed",
                    format!("create Pod {}", pod.name_any()),
                )(error));
            }
        }
    }
    Ok(())
}

/// How long reading back a Pod whose create answered `409` may take: the
/// client's own read timeout is for watches (minutes).
const READ_BACK_DEADLINE: Duration = Duration::from_secs(10);

/// Whether the Pod `pod` exists and is labelled an instance of Cluster
/// `cluster`. A read that fails or takes over [`READ_BACK_DEADLINE`] is
/// logged and counts as no (the create's `409` is then reported, and the
/// reconcile retried).
async fn is_instance_of(pods: &Api<Pod>, pod: &str, cluster: &str) -> bool {
    match tokio::time::timeout(READ_BACK_DEADLINE, pods.get_opt(pod)).await {
        Ok(Ok(existing)) => {
            existing.is_some_and(|existing| existing.labels().get(CLUSTER_LABEL).map(String::as_str) == Some(cluster))
        }
        Ok(Err(error)) => {
            tracing::warn!(%cluster, %pod, %error, "cannot read back a Pod that already exists");
            false
        }
        Err(_) => {
            tracing::warn!(%cluster, %pod, deadline_seconds = READ_BACK_DEADLINE.as_secs(), "no answer reading back a Pod that already exists");
            false
        }
    }
}

/// `status.pluginStatus` from `SetStatusInCluster`, keeping the previous
/// status text when a plugin answers empty.
async fn update_plugin_status(
    ctx: &Context,
    routed: &RoutedResource,
    status: &mut ClusterStatus,
) -> Result<(), ReconcileError> {
    let updates = ctx.host.status_entries(routed).await?;
    let previous: BTreeMap<String, String> = status
        .plugin_status
        .iter()
        .map(|s| (s.name.clone(), s.status.clone()))
        .collect();
    status.plugin_status = updates
        .into_iter()
        .map(|update| {
            let previous = previous.get(&update.name).cloned();
            update.into_status(previous.as_deref())
        })
        .collect();
    Ok(())
}

/// Phase, ready instances and the `Ready` condition; `true` when healthy.
fn set_phase(
    cluster: &Cluster,
    status: &mut ClusterStatus,
    by_number: &BTreeMap<i32, Pod>,
    wanted: i32,
    rolled: bool,
) -> bool {
    let ready = by_number.iter().filter(|(n, p)| **n <= wanted && is_ready(p)).count();
    status.ready_instances = i32::try_from(ready).unwrap_or(i32::MAX);
    let healthy = !rolled && status.ready_instances == wanted;
    status.phase = Some(if healthy { "Healthy" } else { "Creating instances" }.into());
    status.phase_reason = None;
    set_condition(
        status,
        condition(
            "Ready",
            healthy,
            if healthy { "InstancesReady" } else { "InstancesNotReady" },
            &format!("{}/{} instances ready", status.ready_instances, wanted),
            cluster.metadata.generation,
        ),
    );
    healthy
}

/// Deletes the first live Pod whose plugins' answer changed, so that it is
/// recreated; `true` when one was. A Pod is evaluated (the `EVALUATE`
/// chain) only when the inputs it was built from or last evaluated under
/// changed.
async fn roll_first_drifted(
    ctx: &Context,
    key: &str,
    cluster: &RoutedResource,
    configuration: &Configuration,
    pods: &Api<Pod>,
    by_number: &BTreeMap<i32, Pod>,
    wanted: i32,
) -> Result<bool, ReconcileError> {
    let seen = ctx.evaluated_pods(key);
    let mut up_to_date = HashMap::new();
    let mut rolled = false;
    for (n, pod) in by_number.iter().filter(|(n, _)| **n <= wanted) {
        let uid = pod.uid().unwrap_or_else(|| pod.name_any());
        let inputs = inputs_fingerprint(&ctx.host, cluster, *n);
        let annotations = pod.annotations();
        let unchanged = annotations.get(PLUGINS_INPUTS_ANNOTATION) == Some(&inputs) || seen.get(&uid) == Some(&inputs);
        if !unchanged {
            let live = annotations.get(PLUGINS_HASH_ANNOTATION).cloned().unwrap_or_default();
            let configuration = configuration.get(ctx, cluster).await?;
            if live != wanted_hash(&ctx.host, cluster, configuration, *n).await? {
                tracing::info!(cluster = %key, pod = %pod.name_any(), "plugins want a different Pod; rolling it");
                delete_pod(pods, &pod.name_any()).await?;
                rolled = true;
                break;
            }
        }
        up_to_date.insert(uid, inputs);
    }
    ctx.set_evaluated_pods(key, up_to_date);
    Ok(rolled)
}

/// The PostgreSQL configuration of one reconcile, through the plugins'
/// `EnrichConfiguration` on first use.
#[derive(Default)]
struct Configuration(tokio::sync::OnceCell<BTreeMap<String, String>>);

impl Configuration {
    async fn get(&self, ctx: &Context, cluster: &RoutedResource) -> Result<&BTreeMap<String, String>, HostError> {
        self.0
            .get_or_try_init(|| postgresql_configuration(&ctx.host, cluster))
            .await
    }
}

/// A hook's requeue delay; zero means "the operator's own", here 5 s.
fn requeue_delay(after: Duration) -> Duration {
    if after.is_zero() { Duration::from_secs(5) } else { after }
}

/// Retries a failed reconcile: a failed `ReconcilerHooks` call after
/// [`HOOK_ERROR_RETRY`] (CloudNativePG's delay), other plugin errors after
/// [`PLUGIN_ERROR_RETRY`] (a plugin may be starting or being upgraded);
/// other errors with exponential backoff per Cluster (1 s, 2 s, 4 s, ... up
/// to [`API_ERROR_BACKOFF_MAX`]), reset when the Cluster reconciles.
pub fn error_policy(cluster: Arc<Cluster>, error: &ReconcileError, ctx: Arc<Context>) -> Action {
    let key = cluster_key(&cluster);
    let delay = match error {
        ReconcileError::Plugin(error)
            if error
                .route()
                .and_then(|error| error.rpc())
                .is_some_and(|rpc| service::RECONCILER_HOOKS.rpcs.iter().any(|hook| hook.method == rpc)) =>
        {
            HOOK_ERROR_RETRY
        }
        ReconcileError::Plugin(_) => PLUGIN_ERROR_RETRY,
        _ => ctx.next_backoff(&key),
    };
    tracing::warn!(
        cluster = %key,
        reason = error.reason(),
        %error,
        retry_in_seconds = delay.as_secs(),
        "reconcile failed"
    );
    ctx.host.metrics().requeued(CONTROLLER_NAME, &key, delay);
    Action::requeue(delay)
}

/// Runs the controller for Clusters in `namespace` (all when `None`) until
/// `shutdown` completes.
pub async fn run(
    ctx: Arc<Context>,
    namespace: Option<&str>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let (clusters, pods) = match namespace {
        Some(ns) => (
            Api::<Cluster>::namespaced(ctx.client.clone(), ns),
            Api::<Pod>::namespaced(ctx.client.clone(), ns),
        ),
        None => (
            Api::<Cluster>::all(ctx.client.clone()),
            Api::<Pod>::all(ctx.client.clone()),
        ),
    };
    // One watch of the instance Pods both triggers reconciles and feeds the
    // cache reconciles read them from, instead of a list per reconcile. The
    // cache keeps what reconciles read (metadata and status), not specs.
    let (cache, writer) = reflector::store();
    let pod_events = watcher(pods, watcher::Config::default().labels(CLUSTER_LABEL))
        .default_backoff()
        .modify(|pod| {
            pod.spec = None;
            pod.metadata.managed_fields = None;
        })
        .reflect(writer)
        .touched_objects();
    *ctx.pods.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(cache);
    Controller::new(clusters, watcher::Config::default())
        .owns_stream(pod_events)
        .with_config(ControllerConfig::default().concurrency(ctx.max_concurrent_reconciles))
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx.clone())
        .for_each(|result| {
            after_reconcile(&ctx, result);
            std::future::ready(())
        })
        .await;
}

/// What a controller round's outcome leaves behind. A Cluster deleted since
/// its reconcile was queued (its requeue came, or its Pods were collected)
/// is not found: nothing about it is kept any longer.
fn after_reconcile<E: std::error::Error>(
    ctx: &Context,
    result: Result<(kube::runtime::reflector::ObjectRef<Cluster>, Action), ControllerError<ReconcileError, E>>,
) {
    match result {
        Ok(_) => {}
        Err(ControllerError::ObjectNotFound(gone)) => {
            let gone = key(gone.namespace.as_deref(), &gone.name);
            ctx.host.metrics().forget_object(&gone);
            ctx.forget(&gone);
        }
        Err(error) => tracing::debug!(%error, "reconcile round ended with an error"),
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::{client::Body, runtime::reflector::ObjectRef};

    use cnpgi_host::HostOptions;

    use super::*;

    fn context() -> Context {
        let (service, _handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        Context::new(
            Client::new(service, "default"),
            Host::new(HostOptions::default()),
            "test",
        )
    }

    #[tokio::test]
    async fn a_cluster_not_found_is_forgotten() {
        let ctx = context();
        for key in ["ns/gone", "ns/kept"] {
            ctx.next_backoff(key);
            ctx.set_evaluated_pods(key, HashMap::from([("uid".to_owned(), "inputs".to_owned())]));
        }
        let gone = ObjectRef::<Cluster>::new("gone").within("ns").erase();
        after_reconcile::<std::io::Error>(&ctx, Err(ControllerError::ObjectNotFound(Box::new(gone))));

        assert!(ctx.evaluated_pods("ns/gone").is_empty());
        assert_eq!(ctx.evaluated_pods("ns/kept").len(), 1);
        // The backoff of the gone Cluster starts over; the other's goes on.
        assert_eq!(ctx.next_backoff("ns/gone"), API_ERROR_BACKOFF_FIRST);
        assert_eq!(ctx.next_backoff("ns/kept"), API_ERROR_BACKOFF_FIRST * 2);
    }
}
