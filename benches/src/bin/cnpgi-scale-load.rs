//! `cnpgi-scale-load`: the load driver of the scale benchmark
//! (`benches/scale/run.sh`, BENCHMARKS.md).
//!
//! It creates N Clusters through the API server, at most `--concurrency` at
//! once, so that whatever admission webhooks are registered run on each
//! create; it times every create. With `--node`, it plays the scheduler:
//! every Pod of the namespace without a node is bound to that node (kwok
//! then plays its kubelet). With `--patched-label`, it watches the instance
//! Pods `<prefix>-<i>-1` and records when each first carries that label
//! (the plugin's patch), until all N do or `--timeout-seconds` passes.
//!
//! It prints one JSON object: the creates' latencies (p50, p99, max), their
//! failures, how busy the machine's cores were while they ran (from
//! `/proc/stat`: on a shared machine, a create waits for CPU at every hop),
//! and when the last instance Pod was seen patched, counted from the first
//! create.
//!
//! ```sh
//! cnpgi-scale-load --group cnpgi.io --namespace scale --clusters 100 \
//!   --spec '{"instances": 1, "plugins": [{"name": "cnpg-i-hello-world.cloudnative-pg.io"}]}' \
//!   --node kwok-node-0 --patched-label first-label=first-label-value
//! ```

#![forbid(unsafe_code)]

use std::{
    collections::{HashMap, HashSet},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use anyhow::Context as _;
use clap::Parser;
use futures_util::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{ApiResource, DynamicObject, GroupVersionKind, PostParams},
    runtime::{WatchStreamExt, watcher},
};
use serde_json::json;

/// The scale benchmark's load driver (see benches/scale/run.sh).
#[derive(Debug, Parser)]
#[command(name = "cnpgi-scale-load")]
struct Args {
    /// The Cluster's API group: `cnpgi.io` (cnpgi-operator) or
    /// `postgresql.cnpg.io` (CloudNativePG).
    #[arg(long)]
    group: String,
    /// The Cluster's API version.
    #[arg(long, default_value = "v1")]
    version: String,
    /// The namespace to create the Clusters in (it must exist).
    #[arg(long)]
    namespace: String,
    /// How many Clusters to create.
    #[arg(long)]
    clusters: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Each Cluster's spec, as JSON.
    #[arg(long)]
    spec: String,
    /// The Clusters are named `<prefix>-<i>`, i from 1.
    #[arg(long, default_value = "c")]
    prefix: String,
    /// Bind every Pod of the namespace without a node to this node.
    #[arg(long)]
    node: Option<String>,
    /// `key=value`: wait until every instance Pod `<prefix>-<i>-1` carries
    /// this label.
    #[arg(long)]
    patched_label: Option<String>,
    /// Give up waiting for the patched Pods after this long.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
}

/// The machine's CPU time so far, in clock ticks of all its cores: (busy,
/// all), busy being all but idle and iowait. `None` where `/proc/stat`
/// cannot be read (not Linux).
fn machine_cpu_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    // "cpu  user nice system idle iowait irq softirq steal ..."
    let ticks: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let all: u64 = ticks.iter().sum();
    Some((all - ticks.get(3)? - ticks.get(4)?, all))
}

/// The share of the machine's CPU time that was busy between two
/// [`machine_cpu_ticks`] readings.
fn busy_share(before: Option<(u64, u64)>, after: Option<(u64, u64)>) -> Option<f64> {
    let ((busy0, all0), (busy1, all1)) = (before?, after?);
    let all = all1.checked_sub(all0).filter(|all| *all > 0)?;
    Some(busy1.saturating_sub(busy0) as f64 / all as f64)
}

/// Nearest-rank percentile of sorted values.
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Binds every unscheduled Pod of the namespace to `node`, as a scheduler
/// would (there is none: kwok fakes only the node's kubelet), and counts in
/// `bound` the instance Pods (`is_instance`) it bound.
async fn bind_pods(
    pods: Api<Pod>,
    node: String,
    is_instance: Arc<dyn Fn(&str) -> bool + Send + Sync>,
    bound: Arc<Mutex<HashSet<String>>>,
) -> anyhow::Result<()> {
    let unscheduled = watcher::Config::default().fields("spec.nodeName=");
    watcher(pods.clone(), unscheduled)
        .default_backoff()
        .applied_objects()
        .map_err(anyhow::Error::from)
        .try_for_each_concurrent(8, |pod| {
            let pods = pods.clone();
            let node = node.clone();
            let is_instance = is_instance.clone();
            let bound = bound.clone();
            async move {
                let name = pod.metadata.name.unwrap_or_default();
                let binding = json!({
                    "apiVersion": "v1", "kind": "Binding",
                    "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                });
                let outcome = pods
                    .create_subresource::<_, serde_json::Value>("binding", &name, &PostParams::default(), &binding)
                    .await;
                match outcome {
                    // Bound, or already bound (a repeated watch event).
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    // Gone.
                    Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
                    Err(e) => return Err(anyhow::Error::from(e).context(format!("bind Pod {name} to node {node}"))),
                }
                if is_instance(&name) {
                    bound.lock().unwrap_or_else(|e| e.into_inner()).insert(name);
                }
                Ok(())
            }
        })
        .await
}

/// Whether `name` is an instance Pod `<prefix>-<i>-1`.
fn is_instance_pod(prefix: &str, name: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
        .and_then(|rest| rest.strip_suffix("-1"))
        .is_some_and(|i| i.parse::<usize>().is_ok())
}

/// Records when each instance Pod `<prefix>-<i>-1` is first seen with
/// `key=value`; returns when all `wanted` are.
async fn watch_patched(
    pods: Api<Pod>,
    label: String,
    prefix: String,
    wanted: usize,
    start: Instant,
    seen: Arc<Mutex<HashMap<String, Duration>>>,
) -> anyhow::Result<()> {
    let mut events = watcher(pods, watcher::Config::default().labels(&label))
        .default_backoff()
        .applied_objects()
        .boxed();
    while let Some(pod) = events.try_next().await? {
        let name = pod.metadata.name.unwrap_or_default();
        if !is_instance_pod(&prefix, &name) {
            continue;
        }
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.entry(name).or_insert_with(|| start.elapsed());
        if seen.len() >= wanted {
            return Ok(());
        }
    }
    anyhow::bail!("the watch of Pods labelled {label} ended")
}

async fn run(args: Args) -> anyhow::Result<serde_json::Value> {
    let spec: serde_json::Value = serde_json::from_str(&args.spec).context("--spec is not JSON")?;
    let client = Client::try_default()
        .await
        .context("cannot build a Kubernetes client (KUBECONFIG)")?;
    let gvk = GroupVersionKind::gvk(&args.group, &args.version, "Cluster");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "clusters");
    let clusters: Api<DynamicObject> = Api::namespaced_with(client.clone(), &args.namespace, &resource);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &args.namespace);

    let bound = Arc::new(Mutex::new(HashSet::new()));
    let binder = args.node.clone().map(|node| {
        let prefix = args.prefix.clone();
        let is_instance: Arc<dyn Fn(&str) -> bool + Send + Sync> = Arc::new(move |name| is_instance_pod(&prefix, name));
        tokio::spawn(bind_pods(pods.clone(), node, is_instance, bound.clone()))
    });
    let start = Instant::now();
    let cpu_at_start = machine_cpu_ticks();
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let watch = args.patched_label.clone().map(|label| {
        tokio::spawn(watch_patched(
            pods.clone(),
            label,
            args.prefix.clone(),
            args.clusters,
            start,
            seen.clone(),
        ))
    });

    let results: Vec<Result<f64, String>> = stream::iter(1..=args.clusters)
        .map(|i| {
            let clusters = clusters.clone();
            let mut object = DynamicObject::new(&format!("{}-{i}", args.prefix), &resource).within(&args.namespace);
            object.data = json!({ "spec": spec });
            async move {
                let sent = Instant::now();
                match clusters.create(&PostParams::default(), &object).await {
                    Ok(_) => Ok(sent.elapsed().as_secs_f64() * 1000.0),
                    Err(e) => Err(format!(
                        "create Cluster {}: {e}",
                        object.metadata.name.unwrap_or_default()
                    )),
                }
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let create_wall = start.elapsed();
    let busy_creating = busy_share(cpu_at_start, machine_cpu_ticks());
    let mut latencies: Vec<f64> = results.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    latencies.sort_by(f64::total_cmp);
    let errors: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(args.timeout_seconds);
    let mut patched = serde_json::Value::Null;
    if let Some(watch) = watch {
        let finished = tokio::time::timeout_at(deadline, watch).await;
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        let mut times: Vec<f64> = seen.values().map(Duration::as_secs_f64).collect();
        times.sort_by(f64::total_cmp);
        let outcome = match finished {
            Ok(Ok(Ok(()))) => "all".to_owned(),
            Ok(Ok(Err(e))) => format!("error: {e:#}"),
            Ok(Err(e)) => format!("error: {e}"),
            Err(_) => format!("timed out after {} s", args.timeout_seconds),
        };
        patched = json!({
            "count": times.len(),
            "outcome": outcome,
            "p50_s": percentile(&times, 50.0),
            "last_s": times.last().copied(),
        });
    }
    if let Some(binder) = binder {
        // Every instance Pod bound before leaving (a Pod patched at its
        // create may not be yet): else it would stay Pending.
        let all_bound = || bound.lock().unwrap_or_else(|e| e.into_inner()).len() >= args.clusters;
        while !all_bound() && !binder.is_finished() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The binder runs until stopped; if it stopped on its own, it failed.
        if binder.is_finished() {
            binder.await.context("the Pod binder panicked")??;
        } else {
            binder.abort();
        }
    }
    Ok(json!({
        "clusters": args.clusters,
        "concurrency": args.concurrency,
        "created": latencies.len(),
        "failed": errors.len(),
        "first_error": errors.first(),
        "create_wall_s": create_wall.as_secs_f64(),
        "machine_busy_creating": busy_creating,
        "create_ms": {
            "p50": percentile(&latencies, 50.0),
            "p99": percentile(&latencies, 99.0),
            "max": latencies.last().copied(),
        },
        "patched": patched,
        "instance_pods_bound": bound.lock().unwrap_or_else(|e| e.into_inner()).len(),
    }))
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let args = Args::parse();
    match run(args).await {
        Ok(report) => {
            println!("{report}");
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cnpgi-scale-load: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{busy_share, is_instance_pod, machine_cpu_ticks, percentile};

    #[test]
    fn busy_share_is_busy_ticks_over_all_ticks_between_readings() {
        assert_eq!(busy_share(Some((100, 400)), Some((250, 600))), Some(0.75));
        // No time passed, or a reading is missing: no share.
        assert_eq!(busy_share(Some((100, 400)), Some((100, 400))), None);
        assert_eq!(busy_share(None, Some((100, 400))), None);
        if cfg!(target_os = "linux") {
            let (busy, all) = machine_cpu_ticks().expect("/proc/stat reads on Linux");
            assert!(busy <= all && all > 0, "busy {busy} of {all}");
        }
    }

    #[test]
    fn instance_pods_are_the_first_of_each_cluster() {
        assert!(is_instance_pod("c", "c-12-1"));
        assert!(!is_instance_pod("c", "c-12-2"));
        assert!(!is_instance_pod("c", "c-12-1-initdb-x7k2q"));
        assert!(!is_instance_pod("c", "warm-up-1-1"));
        assert!(!is_instance_pod("c", "cx-1-1"));
    }

    #[test]
    fn nearest_rank_percentiles() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 50.0), 50.0);
        assert_eq!(percentile(&values, 99.0), 99.0);
        assert_eq!(percentile(&values, 100.0), 100.0);
        assert_eq!(percentile(&[7.0], 99.0), 7.0);
        assert!(percentile(&[], 50.0).is_nan());
    }
}
