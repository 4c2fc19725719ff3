//! The results: one function per section of BENCHMARKS.md, each measuring
//! through [`scenarios`] and printing its table beside baselines and targets.

use std::{path::Path, time::Duration};

use crate::{
    scenarios::{self, Effort},
    stats::{Samples, fmt},
};

fn verdict(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

/// `--breakdown`: where a one-plugin lifecycle call spends its CPU time.
pub(crate) async fn breakdown(effort: Effort) -> anyhow::Result<()> {
    let (handler, router) = scenarios::breakdown(effort).await?;
    println!("| part of a one-plugin lifecycle call | p50 | p99 |\n|---|---|---|");
    println!(
        "| hello-world's LifecycleHook handler (no network) | {} | {} |",
        fmt(handler.p50()),
        fmt(handler.p99())
    );
    println!(
        "| router JSON work (encode the Pod, decode and apply the patch) | {} | {} |",
        fmt(router.p50()),
        fmt(router.p99())
    );
    for (step, median) in scenarios::handler_steps(effort)? {
        println!("| hello-world step: {step} | {} | |", fmt(median));
    }
    println!("\nEach call below is measured in blocks alternating with the floor call (bare server, bare client):\n");
    println!("| call | p50 | p99 | floor p50 beside it | p50 / floor p50 |\n|---|---|---|---|---|");
    let mut floor = scenarios::Floor::start().await?;
    let [framework, operator, answering, framework_answering] =
        scenarios::transport_breakdown(&mut floor, effort).await?;
    let direct = scenarios::direct_hello(&mut floor, effort).await?;
    let routed = scenarios::lifecycle_chain(1, &mut floor, effort).await?;
    for (call, (samples, floors)) in [
        ("floor call: plugin framework server, bare client", framework),
        ("floor call: bare server, operator client", operator),
        (
            "floor call answering hello-world's patch (bare server, bare client)",
            answering,
        ),
        (
            "the same answer from the plugin framework's server (one write per answer), bare client",
            framework_answering,
        ),
        ("hello-world hook over mTLS, operator client, no router", direct),
        ("the same through Router::lifecycle_hook", routed),
    ] {
        println!(
            "| {call} | {} | {} | {} | {:.2} |",
            fmt(samples.p50()),
            fmt(samples.p99()),
            fmt(floors.p50()),
            samples.p50().as_secs_f64() / floors.p50().as_secs_f64()
        );
    }
    Ok(())
}

/// 1. The floor alone.
pub(crate) async fn floor(effort: Effort) -> anyhow::Result<()> {
    let floor = scenarios::floor(effort).await?;
    println!("### 1. Floor: bare tonic unary call, persistent mTLS channel, Cluster ~2 KB + Pod ~4 KB\n");
    println!("| measurement | p50 | p99 | calls/s |\n|---|---|---|---|");
    println!(
        "| bare LifecycleHook-shaped call | {} | {} | {:.0} |\n",
        fmt(floor.p50()),
        fmt(floor.p99()),
        floor.rate()
    );
    Ok(())
}

/// Section 2: routing through N = 1 to 8 plugins (and a Go plugin), each
/// measured in blocks alternating with floor calls.
pub(crate) async fn routing(effort: Effort, go_plugin: Option<&Path>) -> anyhow::Result<()> {
    println!("### 2. Lifecycle routing: the operator's Pod patch chain (Router::lifecycle_hook), patches applied\n");
    println!(
        "| plugins | p50 | p99 | calls/s | floor p50 beside it | p50 / (N × floor p50) | target ≤ 1.3 | SDK v2 target, 1 plugin ≤ 1.8 |\n|---|---|---|---|---|---|---|---|"
    );
    let mut floor = scenarios::Floor::start().await?;
    for n in [1, 2, 4, 8] {
        let (samples, floors) = scenarios::lifecycle_chain(n, &mut floor, effort).await?;
        routing_row(&n.to_string(), n, &samples, &floors);
    }
    if let Some(go_plugin) = go_plugin {
        let (samples, floors) = scenarios::go_plugin_chain(go_plugin, &mut floor, effort).await?;
        routing_row(
            "1, Go hello-world on cnpg-i-machinery (same client and router)",
            1,
            &samples,
            &floors,
        );
    }
    Ok(())
}

fn routing_row(label: &str, n: usize, samples: &Samples, floors: &Samples) {
    let ratio = samples.p50().as_secs_f64() / (n as f64 * floors.p50().as_secs_f64());
    let sdk_v2 = if n == 1 { verdict(ratio <= 1.8) } else { "" };
    println!(
        "| {label} | {} | {} | {:.0} | {} | {ratio:.2} | {} | {sdk_v2} |",
        fmt(samples.p50()),
        fmt(samples.p99()),
        samples.rate(),
        fmt(floors.p50()),
        verdict(ratio <= 1.3),
    );
}

/// 3. The admission webhook, at an offered `rate` and at its sustained maximum.
pub(crate) async fn webhook(effort: Effort, rate: f64) -> anyhow::Result<()> {
    let webhook = scenarios::webhook(effort, rate).await?;
    println!(
        "\n### 3. Admission webhook end to end: HTTPS AdmissionReview → MutateCluster through 3 plugins → response\n"
    );
    println!("| measurement | value | target | met |\n|---|---|---|---|");
    println!(
        "| p50 at {:.0} req/s offered ({} requests, {} errors) | {} | | |",
        webhook.offered_rate,
        webhook.offered.count(),
        webhook.offered.errors,
        fmt(webhook.offered.p50())
    );
    let p99 = webhook.offered.p99();
    println!(
        "| p99 at {:.0} req/s offered | {} | < 5 ms | {} |",
        webhook.offered_rate,
        fmt(p99),
        verdict(p99.as_secs_f64() < 0.005 && webhook.offered.errors == 0)
    );
    println!(
        "| max sustained rate (4 connections, closed loop; p99 {}) | {:.0} req/s | | |",
        fmt(webhook.sustained.p99()),
        webhook.sustained.rate()
    );
    Ok(())
}

/// 4. What the hello-world process at `binary` costs.
pub(crate) async fn plugin_cost(binary: &Path, effort: Effort) -> anyhow::Result<()> {
    let cost = scenarios::plugin_cost(binary, effort).await?;
    println!("\n### 4. Plugin cost: the hello-world process\n");
    println!("| measurement | value | target | met |\n|---|---|---|---|");
    println!(
        "| start-up to first successful Probe (median of 5) | {} | ≤ 100 ms | {} |",
        fmt(cost.startup),
        verdict(cost.startup.as_millis() <= 100)
    );
    println!(
        "| idle RSS | {:.1} MiB | ≤ 10 MiB | {} |",
        cost.idle_rss_kib as f64 / 1024.0,
        verdict(cost.idle_rss_kib <= 10 * 1024)
    );
    println!(
        "| peak RSS under load (16 concurrent callers) | {:.1} MiB | | |",
        cost.loaded_rss_kib as f64 / 1024.0
    );
    println!(
        "| binary size | {:.1} MiB | | |",
        cost.binary_bytes as f64 / (1024.0 * 1024.0)
    );
    Ok(())
}

/// 5. Channels reused: no handshake after warm-up, concurrent callers share.
pub(crate) async fn connections(effort: Effort) -> anyhow::Result<()> {
    let connections = scenarios::connections(effort).await?;
    println!("\n### 5. Connections\n");
    println!("| measurement | value | target | met |\n|---|---|---|---|");
    println!(
        "| TLS handshakes per 10,000 routed calls after warm-up | {} | 0 | {} |",
        connections.handshakes_per_10k,
        verdict(connections.handshakes_per_10k == 0)
    );
    println!(
        "| {} concurrent callers: errors / new handshakes / p99 | {} / {} / {} | 0 / 0 | {} |",
        connections.concurrent.count() + connections.concurrent.errors,
        connections.concurrent.errors,
        connections.concurrent_handshakes,
        fmt(connections.concurrent.p99()),
        verdict(connections.concurrent.errors == 0 && connections.concurrent_handshakes == 0)
    );
    Ok(())
}

/// 6. Routing and lookups with 3 plugins registered, then many.
pub(crate) async fn scale(effort: Effort) -> anyhow::Result<()> {
    let scale = scenarios::scale(effort).await?;
    let growth = scale.chain_large.p50().as_secs_f64() / scale.chain_small.p50().as_secs_f64();
    println!("\n### 6. Scale: 3 plugins enabled on the Cluster, 3 vs many registered\n");
    println!("| measurement | 3 registered | many registered | ratio | target | met |\n|---|---|---|---|---|---|");
    println!(
        "| routing p50 (chain through the 3) | {} | {} | {growth:.2} | no growth (≤ 1.10) | {} |",
        fmt(scale.chain_small.p50()),
        fmt(scale.chain_large.p50()),
        verdict(growth <= 1.10)
    );
    println!(
        "| registry lookup | {:.0} ns | {:.0} ns | {:.2} | no growth | |",
        scale.lookup_small_ns,
        scale.lookup_large_ns,
        scale.lookup_large_ns / scale.lookup_small_ns
    );
    Ok(())
}

/// 7. CloudNativePG's steady status traffic into one plugin process.
pub(crate) async fn status_traffic(binary: &Path, effort: Effort, rate: f64, clusters: usize) -> anyhow::Result<()> {
    let traffic = scenarios::status_traffic(binary, effort, rate, clusters).await?;
    let core = traffic.cpu_seconds / traffic.samples.elapsed.as_secs_f64() * 100.0;
    println!("\n### 7. Steady status traffic: SetStatusInCluster into the hello-world process\n");
    println!(
        "{} calls/s offered over {} Clusters for {:.0} s, one channel on the plugin's Unix socket\n",
        traffic.rate,
        traffic.clusters,
        traffic.samples.elapsed.as_secs_f64()
    );
    println!("| measurement | value | target | met |\n|---|---|---|---|");
    println!(
        "| answered / errors | {} / {} | 0 errors | {} |",
        traffic.samples.count(),
        traffic.samples.errors,
        verdict(traffic.samples.errors == 0)
    );
    println!("| p50 | {} | | |", fmt(traffic.samples.p50()));
    println!(
        "| p99 | {} | < 5 ms | {} |",
        fmt(traffic.samples.p99()),
        verdict(traffic.samples.p99() < Duration::from_millis(5))
    );
    println!(
        "| plugin CPU | {core:.1}% of a core | < 10% | {} |",
        verdict(core < 10.0)
    );
    println!(
        "| plugin peak RSS | {:.1} MiB | | |",
        traffic.peak_rss_kib as f64 / 1024.0
    );
    Ok(())
}
