//! Prometheus metrics: plugin calls, readiness and discovery (under the
//! `cnpgi_plugin_` prefix), and beside them the operator's own under the
//! names controller-runtime gives them, so that an SRE's dashboards and
//! alerts for Go operators work unchanged:
//!
//! | metric | type | what |
//! |---|---|---|
//! | `controller_runtime_reconcile_total{controller,result}` | counter | reconciles by outcome: `success` (nothing more to do but the periodic resync), `requeue_after` (asked to come back sooner), `error` |
//! | `controller_runtime_reconcile_errors_total{controller}` | counter | reconciles that failed |
//! | `controller_runtime_reconcile_time_seconds{controller}` | histogram | time per reconcile |
//! | `controller_runtime_active_workers{controller}` | gauge | reconciles running now |
//! | `workqueue_depth{name}` | gauge | objects whose requested retry or requeue is due and whose reconcile has not started (see below) |
//! | `controller_runtime_webhook_requests_total{webhook,code}` | counter | admission requests by path and HTTP status |
//! | `controller_runtime_webhook_latency_seconds{webhook}` | histogram | time to answer one |
//! | `controller_runtime_webhook_requests_in_flight{webhook}` | gauge | being answered now |
//! | `leader_election_master_status{name}` | gauge | 1 while this replica holds the Lease `name`, else 0 |
//! | `cnpgi_plugin_cleanups_abandoned_total{plugin}` | counter | deletions let go without the plugin's cleanup, its deadline passed ([`crate::deletion`]) |
//! | `process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`, `process_start_time_seconds` | | read from `/proc/self` on each scrape, as Go's process collector does (Linux only) |
//!
//! `workqueue_depth` is what can be measured honestly: kube-runtime's
//! scheduler is private, so the gauge counts the objects whose reconcile
//! (or error policy) asked to run again after a delay, once that delay has
//! passed and until their reconcile starts: the backlog of due work, like
//! controller-runtime's depth, which also leaves out items still waiting
//! for their delay. A reconcile triggered by a watch event goes through the
//! scheduler unseen; it is counted only in the reconcile metrics.
//!
//! One [`Metrics`] value is shared (cheaply cloned) by every client (as their
//! [`CallObserver`]), the registry, the discovery sources, the reconciler
//! and the webhooks; [`Metrics::register`] exposes it in a
//! `prometheus_client` registry.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use cnpgi_client::client::CallObserver;

use prometheus_client::{
    collector::Collector,
    encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric},
    metrics::{
        MetricType,
        counter::{ConstCounter, Counter},
        family::Family,
        gauge::{ConstGauge, Gauge},
        histogram::{Histogram, exponential_buckets},
    },
    registry::{Metric, Registry, Unit},
};

/// Labels of a call: which plugin, which RPC (`Service/Method`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Plugin name.
    pub plugin: String,
    /// RPC, e.g. `OperatorLifecycle/LifecycleHook`.
    pub method: String,
}

/// Labels of a failed call: plugin, RPC and gRPC code name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Plugin name.
    pub plugin: String,
    /// RPC.
    pub method: String,
    /// gRPC status code, e.g. `Unavailable`.
    pub code: String,
}

/// Labels naming one plugin.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    /// Plugin name.
    pub plugin: String,
}

/// Labels naming one discovery source.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SourceLabels {
    /// Source name, e.g. `kubernetes-services:cnpg-system`.
    pub source: String,
}

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// Controller name, e.g. `cluster`.
    pub controller: String,
}

/// Labels of a reconcile's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    /// Controller name.
    pub controller: String,
    /// `success`, `requeue_after` or `error`.
    pub result: String,
}

/// Labels naming a webhook (its path).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookLabels {
    /// The webhook's path, e.g. `/validate-cluster`.
    pub webhook: String,
}

/// Labels of a webhook answer.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WebhookCodeLabels {
    /// The webhook's path.
    pub webhook: String,
    /// HTTP status code, e.g. `200`.
    pub code: String,
}

/// Labels naming a leader election Lease.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaseLabels {
    /// The Lease's name.
    pub name: String,
}

/// How a reconcile ended, for `controller_runtime_reconcile_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Done; at most the periodic resync comes next.
    Success,
    /// Asked to run again after a delay of its own.
    RequeueAfter,
    /// Failed.
    Error,
}

impl ReconcileResult {
    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::RequeueAfter => "requeue_after",
            Self::Error => "error",
        }
    }
}

/// controller-runtime's buckets for `controller_runtime_reconcile_time_seconds`
/// (5 ms to 60 s), so that its dashboards' quantiles read the same.
fn reconcile_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25, 1.5,
        1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0, 60.0,
    ])
}

/// Prometheus' default buckets (5 ms to 10 s), controller-runtime's for
/// `controller_runtime_webhook_latency_seconds`.
fn webhook_histogram() -> Histogram {
    Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0])
}

fn latency_histogram() -> Histogram {
    // 0.1 ms to about 3.3 s.
    Histogram::new(exponential_buckets(0.0001, 2.0, 16))
}

/// controller-runtime's names and help texts for the metrics of an
/// activity it measures: a counter, the time each took (a histogram, in
/// seconds), and how many run now (a gauge).
struct ActivityNames {
    count: &'static str,
    count_help: &'static str,
    time: &'static str,
    time_help: &'static str,
    running: &'static str,
    running_help: &'static str,
}

/// Reconciles: the errors counted (the total, by result, is registered apart).
const RECONCILES: ActivityNames = ActivityNames {
    count: "controller_runtime_reconcile_errors",
    count_help: "Total number of reconciliation errors per controller",
    time: "controller_runtime_reconcile_time",
    time_help: "Length of time per reconciliation per controller",
    running: "controller_runtime_active_workers",
    running_help: "Number of currently used workers per controller",
};

/// Admission requests.
const WEBHOOKS: ActivityNames = ActivityNames {
    count: "controller_runtime_webhook_requests",
    count_help: "Total number of admission requests by HTTP status code",
    time: "controller_runtime_webhook_latency",
    time_help: "Histogram of the latency of processing admission requests",
    running: "controller_runtime_webhook_requests_in_flight",
    running_help: "Current number of admission requests being served",
};

/// Adds an activity's counter, histogram and gauge to `registry` under `names`.
fn register_activity<C: Metric + Clone, T: Metric + Clone, R: Metric + Clone>(
    registry: &mut Registry,
    names: &ActivityNames,
    (count, time, running): (&C, &T, &R),
) {
    registry.register(names.count, names.count_help, count.clone());
    registry.register_with_unit(names.time, names.time_help, Unit::Seconds, time.clone());
    registry.register(names.running, names.running_help, running.clone());
}

/// The operator's metrics: plugins, reconciler, webhooks, leader election.
#[derive(Clone, Debug)]
pub struct Metrics {
    calls: Family<CallLabels, Counter>,
    errors: Family<ErrorLabels, Counter>,
    latency: Family<CallLabels, Histogram, fn() -> Histogram>,
    ready: Family<PluginLabels, Gauge>,
    discovery_errors: Family<SourceLabels, Counter>,
    reconciles: Family<ReconcileLabels, Counter>,
    reconcile_errors: Family<ControllerLabels, Counter>,
    reconcile_time: Family<ControllerLabels, Histogram, fn() -> Histogram>,
    active_workers: Family<ControllerLabels, Gauge>,
    queue: Arc<WorkQueue>,
    webhook_requests: Family<WebhookCodeLabels, Counter>,
    webhook_latency: Family<WebhookLabels, Histogram, fn() -> Histogram>,
    webhook_in_flight: Family<WebhookLabels, Gauge>,
    leader: Family<LeaseLabels, Gauge>,
    cleanups_abandoned: Family<PluginLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            calls: Family::default(),
            errors: Family::default(),
            latency: Family::new_with_constructor(latency_histogram),
            ready: Family::default(),
            discovery_errors: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            reconcile_time: Family::new_with_constructor(reconcile_histogram),
            active_workers: Family::default(),
            queue: Arc::default(),
            webhook_requests: Family::default(),
            webhook_latency: Family::new_with_constructor(webhook_histogram),
            webhook_in_flight: Family::default(),
            leader: Family::default(),
            cleanups_abandoned: Family::default(),
        }
    }
}

impl Metrics {
    /// Adds every metric to `registry`.
    ///
    /// ```
    /// let metrics = cnpgi_host::metrics::Metrics::default();
    /// let mut registry = prometheus_client::registry::Registry::default();
    /// metrics.register(&mut registry);
    /// metrics.record_call("p.example.com", "Identity/Probe", std::time::Duration::from_millis(2), None);
    /// let mut text = String::new();
    /// prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    /// assert!(text.contains(r#"cnpgi_plugin_calls_total{plugin="p.example.com",method="Identity/Probe"} 1"#));
    /// ```
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "controller_runtime_reconcile",
            "Total number of reconciliations per controller",
            self.reconciles.clone(),
        );
        let reconciles = (&self.reconcile_errors, &self.reconcile_time, &self.active_workers);
        register_activity(registry, &RECONCILES, reconciles);
        registry.register_collector(Box::new(self.queue.clone()));
        let webhooks = (&self.webhook_requests, &self.webhook_latency, &self.webhook_in_flight);
        register_activity(registry, &WEBHOOKS, webhooks);
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease.",
            self.leader.clone(),
        );
        registry.register_collector(Box::new(ProcessCollector));

        let registry = registry.sub_registry_with_prefix("cnpgi_plugin");
        registry.register("calls", "Calls made to plugins", self.calls.clone());
        registry.register(
            "call_errors",
            "Plugin calls that failed, by gRPC code",
            self.errors.clone(),
        );
        registry.register_with_unit(
            "call_duration",
            "Duration of plugin calls",
            prometheus_client::registry::Unit::Seconds,
            self.latency.clone(),
        );
        registry.register(
            "ready",
            "1 when the plugin is routable, 0 otherwise",
            self.ready.clone(),
        );
        registry.register(
            "discovery_errors",
            "Plugins a discovery source could not register",
            self.discovery_errors.clone(),
        );
        registry.register(
            "cleanups_abandoned",
            "Deleted resources let go without the plugin's cleanup: its deadline passed",
            self.cleanups_abandoned.clone(),
        );
    }

    /// Records one call; `code` is `None` for success.
    pub fn record_call(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
        let labels = CallLabels {
            plugin: plugin.to_owned(),
            method: method.to_owned(),
        };
        self.calls.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(elapsed.as_secs_f64());
        if let Some(code) = code {
            self.errors
                .get_or_create(&ErrorLabels {
                    plugin: labels.plugin,
                    method: labels.method,
                    code: format!("{code:?}"),
                })
                .inc();
        }
    }

    /// Sets the readiness gauge of `plugin`.
    pub fn set_ready(&self, plugin: &str, ready: bool) {
        self.ready
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .set(i64::from(ready));
    }

    /// Forgets the readiness gauge of a removed plugin.
    pub fn forget(&self, plugin: &str) {
        self.ready.remove(&PluginLabels {
            plugin: plugin.to_owned(),
        });
    }

    /// Counts a discovery error of `source`.
    pub fn discovery_error(&self, source: &str) {
        self.discovery_errors
            .get_or_create(&SourceLabels {
                source: source.to_owned(),
            })
            .inc();
    }

    /// A reconcile of `object` (its `namespace/name`) by `controller`
    /// starts: it leaves the work queue and occupies a worker until the
    /// returned guard is given to [`Metrics::reconcile_ended`] (or dropped,
    /// if the reconcile was abandoned).
    pub fn reconcile_started(&self, controller: &str, object: &str) -> ReconcileTimer {
        self.queue.started(controller, object);
        let labels = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.active_workers.get_or_create(&labels).inc();
        ReconcileTimer {
            metrics: self.clone(),
            labels,
            started: Instant::now(),
        }
    }

    /// The reconcile of `timer` ended with `result`.
    pub fn reconcile_ended(&self, timer: ReconcileTimer, result: ReconcileResult) {
        let elapsed = timer.started.elapsed();
        self.reconcile_time
            .get_or_create(&timer.labels)
            .observe(elapsed.as_secs_f64());
        self.reconciles
            .get_or_create(&ReconcileLabels {
                controller: timer.labels.controller.clone(),
                result: result.label().to_owned(),
            })
            .inc();
        if result == ReconcileResult::Error {
            self.reconcile_errors.get_or_create(&timer.labels).inc();
        }
        // The guard's drop frees the worker.
    }

    /// `object`'s reconcile asked to run again after `delay`: it is part of
    /// `workqueue_depth{name="<controller>"}` once the delay has passed.
    pub fn requeued(&self, controller: &str, object: &str, delay: Duration) {
        self.queue.scheduled(controller, object, Instant::now() + delay);
    }

    /// `object` is gone: nothing of it stays in the work queue.
    pub fn forget_object(&self, object: &str) {
        self.queue.forget(object);
    }

    /// An admission request to `webhook` starts being served; the guard
    /// records its answer with [`WebhookTimer::answered`].
    pub fn webhook_started(&self, webhook: &str) -> WebhookTimer {
        let labels = WebhookLabels {
            webhook: webhook.to_owned(),
        };
        self.webhook_in_flight.get_or_create(&labels).inc();
        WebhookTimer {
            metrics: self.clone(),
            labels,
            started: Instant::now(),
        }
    }

    /// Whether this replica holds the Lease `name` (1) or not (0).
    pub fn set_leader(&self, name: &str, leading: bool) {
        self.leader
            .get_or_create(&LeaseLabels { name: name.to_owned() })
            .set(i64::from(leading));
    }

    /// A deleted resource was let go without `plugin`'s cleanup: the
    /// cleanup deadline passed ([`crate::deletion`]).
    pub fn cleanup_abandoned(&self, plugin: &str) {
        self.cleanups_abandoned
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    /// Cleanups of `plugin` abandoned so far ([`Metrics::cleanup_abandoned`]).
    pub fn cleanups_abandoned(&self, plugin: &str) -> u64 {
        self.cleanups_abandoned
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .get()
    }

    /// Calls recorded for `plugin`/`method` so far (for tests and diagnostics).
    pub fn calls(&self, plugin: &str, method: &str) -> u64 {
        self.calls
            .get_or_create(&CallLabels {
                plugin: plugin.to_owned(),
                method: method.to_owned(),
            })
            .get()
    }

    /// Failures of `plugin`/`method` with `code` so far.
    pub fn errors(&self, plugin: &str, method: &str, code: tonic::Code) -> u64 {
        self.errors
            .get_or_create(&ErrorLabels {
                plugin: plugin.to_owned(),
                method: method.to_owned(),
                code: format!("{code:?}"),
            })
            .get()
    }
}

/// A reconcile being measured (from [`Metrics::reconcile_started`]); it
/// occupies a worker of `controller_runtime_active_workers` until dropped.
#[derive(Debug)]
pub struct ReconcileTimer {
    metrics: Metrics,
    labels: ControllerLabels,
    started: Instant,
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        self.metrics.active_workers.get_or_create(&self.labels).dec();
    }
}

/// An admission request being answered (from [`Metrics::webhook_started`]);
/// in flight until dropped.
#[derive(Debug)]
pub struct WebhookTimer {
    metrics: Metrics,
    labels: WebhookLabels,
    started: Instant,
}

impl WebhookTimer {
    /// The request was answered with HTTP status `code`.
    pub fn answered(self, code: u16) {
        self.metrics
            .webhook_latency
            .get_or_create(&self.labels)
            .observe(self.started.elapsed().as_secs_f64());
        self.metrics
            .webhook_requests
            .get_or_create(&WebhookCodeLabels {
                webhook: self.labels.webhook.clone(),
                code: code.to_string(),
            })
            .inc();
    }
}

impl Drop for WebhookTimer {
    fn drop(&mut self) {
        self.metrics.webhook_in_flight.get_or_create(&self.labels).dec();
    }
}

/// Objects scheduled to be reconciled again, by `namespace/name`: their
/// controller and when they are due. Encoded on each scrape as
/// `workqueue_depth{name}`, the objects already due, for every controller
/// seen so far (0 included).
#[derive(Debug, Default)]
struct WorkQueue {
    state: Mutex<QueueState>,
}

#[derive(Debug, Default)]
struct QueueState {
    due: HashMap<String, (String, Instant)>,
    controllers: std::collections::BTreeSet<String>,
}

impl WorkQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        // Plain inserts and removals: a panic elsewhere leaves it consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn scheduled(&self, controller: &str, object: &str, at: Instant) {
        let mut state = self.lock();
        if !state.controllers.contains(controller) {
            state.controllers.insert(controller.to_owned());
        }
        state.due.insert(object.to_owned(), (controller.to_owned(), at));
    }

    fn started(&self, controller: &str, object: &str) {
        let mut state = self.lock();
        if !state.controllers.contains(controller) {
            state.controllers.insert(controller.to_owned());
        }
        state.due.remove(object);
    }

    fn forget(&self, object: &str) {
        self.lock().due.remove(object);
    }

    /// Due objects per controller, at `now`.
    fn depth(&self, now: Instant) -> std::collections::BTreeMap<String, i64> {
        let state = self.lock();
        let mut depth: std::collections::BTreeMap<String, i64> =
            state.controllers.iter().map(|c| (c.clone(), 0)).collect();
        for (controller, at) in state.due.values() {
            if *at <= now {
                *depth.entry(controller.clone()).or_default() += 1;
            }
        }
        depth
    }
}

impl Collector for WorkQueue {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let depth = self.depth(Instant::now());
        if depth.is_empty() {
            return Ok(());
        }
        let mut metric = encoder.encode_descriptor(
            "workqueue_depth",
            "Current depth of workqueue: objects whose requested requeue is due and whose reconcile has not started",
            None,
            MetricType::Gauge,
        )?;
        for (name, count) in depth {
            let labels = [("name", name)];
            ConstGauge::new(count).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// The process metrics Go's client library exports, read from `/proc/self`
/// on each scrape. Clock ticks are taken as 100 a second, as Go's procfs
/// does (`USER_HZ` is 100 on every Linux architecture Kubernetes runs on).
/// A file that cannot be read (not Linux) leaves its metrics out.
#[derive(Debug)]
pub struct ProcessCollector;

const USER_HZ: f64 = 100.0;

/// The fields of `/proc/self/stat` after the command name (which may hold
/// spaces and parentheses, hence the split at the last `)`), from field 3
/// (`state`) on.
fn stat_fields(stat: &str) -> Option<Vec<&str>> {
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().collect())
}

/// `(cpu seconds, start time in seconds since boot)` from `/proc/self/stat`.
fn cpu_and_start(stat: &str) -> Option<(f64, f64)> {
    let fields = stat_fields(stat)?;
    // utime, stime and starttime are fields 14, 15 and 22 (1-based); the
    // slice starts at field 3.
    let ticks = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(((ticks(14)? + ticks(15)?) / USER_HZ, ticks(22)? / USER_HZ))
}

/// A `Name:   123 kB` line of `/proc/self/status`, in bytes.
fn status_bytes(status: &str, name: &str) -> Option<f64> {
    let line = status.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))?;
    let kib: f64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024.0)
}

/// The soft `Max open files` of `/proc/self/limits`.
fn max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// `btime` of `/proc/stat`: boot time, in seconds since the epoch.
fn boot_time(stat: &str) -> Option<f64> {
    stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

/// Writes `metric`, read on this scrape, as `name`.
fn encode_read(
    encoder: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    metric: impl EncodeMetric,
) -> Result<(), std::fmt::Error> {
    let descriptor = encoder.encode_descriptor(name, help, None, metric.metric_type())?;
    metric.encode(descriptor)
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let read = |path: &str| std::fs::read_to_string(path).ok();
        let stat = read("/proc/self/stat");
        if let Some((cpu, start)) = stat.as_deref().and_then(cpu_and_start) {
            let help = "Total user and system CPU time spent in seconds.";
            encode_read(&mut encoder, "process_cpu_seconds", help, ConstCounter::new(cpu))?;
            if let Some(boot) = read("/proc/stat").as_deref().and_then(boot_time) {
                let help = "Start time of the process since unix epoch in seconds.";
                encode_read(
                    &mut encoder,
                    "process_start_time_seconds",
                    help,
                    ConstGauge::new(boot + start),
                )?;
            }
        }
        if let Some(status) = read("/proc/self/status") {
            for (name, field, help) in [
                (
                    "process_resident_memory_bytes",
                    "VmRSS",
                    "Resident memory size in bytes.",
                ),
                (
                    "process_virtual_memory_bytes",
                    "VmSize",
                    "Virtual memory size in bytes.",
                ),
            ] {
                if let Some(bytes) = status_bytes(&status, field) {
                    encode_read(&mut encoder, name, help, ConstGauge::new(bytes))?;
                }
            }
        }
        if let Ok(entries) = std::fs::read_dir("/proc/self/fd") {
            // The directory handle being read is one of them, as in Go's count.
            let open = entries.count() as f64;
            let help = "Number of open file descriptors.";
            encode_read(&mut encoder, "process_open_fds", help, ConstGauge::new(open))?;
        }
        if let Some(max) = read("/proc/self/limits").as_deref().and_then(max_fds) {
            let help = "Maximum number of open file descriptors.";
            encode_read(&mut encoder, "process_max_fds", help, ConstGauge::new(max))?;
        }
        Ok(())
    }
}

/// Plugin clients report their calls here (`ClientOptions::observer`).
impl CallObserver for Metrics {
    fn call_ended(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
        self.record_call(plugin, method, elapsed, code);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn the_queue_depth_counts_requeues_once_due_until_their_reconcile_starts() {
        let queue = WorkQueue::default();
        let now = Instant::now();
        queue.scheduled("cluster", "ns/a", now);
        queue.scheduled("cluster", "ns/b", now + Duration::from_secs(5));
        assert_eq!(queue.depth(now)["cluster"], 1);
        assert_eq!(queue.depth(now + Duration::from_secs(5))["cluster"], 2);
        // Rescheduled: one entry per object, as in kube-runtime's scheduler.
        queue.scheduled("cluster", "ns/a", now + Duration::from_secs(60));
        assert_eq!(queue.depth(now + Duration::from_secs(5))["cluster"], 1);
        queue.started("cluster", "ns/b");
        assert_eq!(queue.depth(now + Duration::from_secs(5))["cluster"], 0);

        let metrics = Metrics::default();
        assert!(!text(&metrics).contains("workqueue_depth"), "no controller, no queue");
        metrics.requeued("cluster", "ns/due", Duration::ZERO);
        assert!(text(&metrics).contains(r#"workqueue_depth{name="cluster"} 1"#));
        let timer = metrics.reconcile_started("cluster", "ns/due");
        let during = text(&metrics);
        assert!(during.contains(r#"workqueue_depth{name="cluster"} 0"#), "{during}");
        assert!(
            during.contains(r#"controller_runtime_active_workers{controller="cluster"} 1"#),
            "{during}"
        );
        metrics.reconcile_ended(timer, ReconcileResult::Success);
        assert!(text(&metrics).contains(r#"controller_runtime_active_workers{controller="cluster"} 0"#));
    }

    #[test]
    fn leader_status_follows_the_lease() {
        let metrics = Metrics::default();
        metrics.set_leader("cnpgi-operator-leader", false);
        assert!(text(&metrics).contains(r#"leader_election_master_status{name="cnpgi-operator-leader"} 0"#));
        metrics.set_leader("cnpgi-operator-leader", true);
        assert!(text(&metrics).contains(r#"leader_election_master_status{name="cnpgi-operator-leader"} 1"#));
    }

    #[test]
    fn proc_files_are_read_as_go_reads_them() {
        // A command name with spaces and parentheses; utime 250, stime 50,
        // starttime 12345 ticks.
        let stat =
            "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 12345 1000 200 18446744073709551615";
        assert_eq!(cpu_and_start(stat), Some((3.0, 123.45)));
        assert_eq!(cpu_and_start("garbage"), None);
        let status = "Name:\tx\nVmSize:\t  2048 kB\nVmRSS:\t  1024 kB\n";
        assert_eq!(status_bytes(status, "VmRSS"), Some(1024.0 * 1024.0));
        assert_eq!(status_bytes(status, "VmSize"), Some(2048.0 * 1024.0));
        assert_eq!(status_bytes(status, "VmSwap"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                20000                files\n";
        assert_eq!(max_fds(limits), Some(20000.0));
        assert_eq!(boot_time("cpu  1 2 3\nbtime 1700000000\n"), Some(1_700_000_000.0));
    }

    #[test]
    fn calls_observed_by_a_client_are_counted() {
        let metrics = Metrics::default();
        let observer: std::sync::Arc<dyn CallObserver> = std::sync::Arc::new(metrics.clone());
        observer.call_ended("p", "Identity/Probe", Duration::from_millis(1), None);
        observer.call_ended(
            "p",
            "Identity/Probe",
            Duration::from_millis(1),
            Some(tonic::Code::Unavailable),
        );
        assert_eq!(metrics.calls("p", "Identity/Probe"), 2);
        assert_eq!(metrics.errors("p", "Identity/Probe", tonic::Code::Unavailable), 1);
    }
}
