//! `cnpgi-bench`: how close routing through plugins comes to a bare gRPC
//! call, what the admission webhook adds, and what a plugin costs.
//!
//! ```sh
//! cargo build --release -p cnpgi-bench -p cnpg-i-hello-world
//! ./target/release/cnpgi-bench            # prints the BENCHMARKS.md tables
//! ./target/debug/cnpgi-bench --smoke      # seconds; proves the harness works (CI)
//! ```
//!
//! Every number is measured in the same run as its baseline, so ratios hold
//! on a noisy machine even when absolute numbers move.

#![forbid(unsafe_code)]

mod fixtures;
mod scenarios;
mod setup;
mod stats;

use std::{path::PathBuf, process::ExitCode};

use clap::Parser;
use scenarios::Effort;
use stats::fmt;

/// Benchmarks of cnpgi-rs (see BENCHMARKS.md).
#[derive(Debug, Parser)]
#[command(name = "cnpgi-bench")]
struct Args {
    /// A few iterations of everything, to check the harness (not to measure).
    #[arg(long)]
    smoke: bool,
    /// Measured calls per latency scenario.
    #[arg(long, default_value_t = 5000)]
    calls: usize,
    /// Seconds of each webhook load phase.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Offered webhook load, requests per second.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// The hello-world binary to measure (default: next to this one).
    #[arg(long)]
    plugin_binary: Option<PathBuf>,
    /// Only print where a one-plugin lifecycle call spends its CPU time.
    #[arg(long)]
    breakdown: bool,
    /// A Go hello-world on cnpg-i-machinery (tests/interop's `gohello`,
    /// built with `go build`): adds its one-plugin row to scenario 2.
    #[arg(long)]
    go_plugin: Option<PathBuf>,
}

fn verdict(ok: bool) -> &'static str {
    if ok { "yes" } else { "**no**" }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    let profile = if cfg!(debug_assertions) {
        "debug build (numbers not representative)"
    } else {
        "release build"
    };
    format!("{cores} cores, {cpu}; {profile}")
}

async fn run(args: Args) -> anyhow::Result<()> {
    let effort = if args.smoke {
        Effort {
            warmup: 5,
            calls: 30,
            load_seconds: 0.3,
        }
    } else {
        Effort {
            warmup: 500,
            calls: args.calls,
            load_seconds: args.seconds,
        }
    };
    let binary = match args.plugin_binary {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("cnpg-i-hello-world"),
    };
    anyhow::ensure!(
        binary.exists(),
        "{} not found: build cnpg-i-hello-world with the same profile",
        binary.display()
    );

    println!("Machine: {}\n", machine());
    if args.breakdown {
        let (handler, router) = scenarios::breakdown(effort).await?;
        println!("| part of a one-plugin lifecycle call | p50 | p99 |\n|---|---|---|");
        println!(
            "| hello-world's LifecycleHook handler (no network) | {} | {} |",
            fmt(handler.p50()),
            fmt(handler.p99())
        );
        println!(
            "| router JSON work (encode Cluster and Pod, decode and apply the patch) | {} | {} |",
            fmt(router.p50()),
            fmt(router.p99())
        );
        for (step, median) in scenarios::handler_steps(effort)? {
            println!("| hello-world step: {step} | {} | |", fmt(median));
        }
        let floor = scenarios::floor(effort).await?;
        let (framework, operator) = scenarios::transport_breakdown(effort).await?;
        println!(
            "| floor call: bare server, bare client | {} | {} |",
            fmt(floor.p50()),
            fmt(floor.p99())
        );
        println!(
            "| floor call: plugin framework server, bare client | {} | {} |",
            fmt(framework.p50()),
            fmt(framework.p99())
        );
        println!(
            "| floor call: bare server, operator client | {} | {} |",
            fmt(operator.p50()),
            fmt(operator.p99())
        );
        let direct = scenarios::direct_hello(effort).await?;
        println!(
            "| hello-world hook over mTLS, operator client, no router | {} | {} |",
            fmt(direct.p50()),
            fmt(direct.p99())
        );
        let routed = scenarios::lifecycle_chain(1, effort).await?;
        println!(
            "| the same through Router::lifecycle_hook | {} | {} |",
            fmt(routed.p50()),
            fmt(routed.p99())
        );
        return Ok(());
    }

    let floor = scenarios::floor(effort).await?;
    let floor_p50 = floor.p50();
    println!("### 1. Floor: bare tonic unary call, persistent mTLS channel, Cluster ~2 KB + Pod ~4 KB\n");
    println!("| measurement | p50 | p99 | calls/s |\n|---|---|---|---|");
    println!(
        "| bare LifecycleHook-shaped call | {} | {} | {:.0} |\n",
        fmt(floor_p50),
        fmt(floor.p99()),
        floor.rate()
    );

    println!("### 2. Lifecycle routing: the operator's Pod patch chain (Router::lifecycle_hook), patches applied\n");
    println!(
        "| plugins | p50 | p99 | calls/s | p50 / (N × floor p50) | target ≤ 1.3 | met |\n|---|---|---|---|---|---|---|"
    );
    for n in [1, 2, 4, 8] {
        let samples = scenarios::lifecycle_chain(n, effort).await?;
        let ratio = samples.p50().as_secs_f64() / (n as f64 * floor_p50.as_secs_f64());
        println!(
            "| {n} | {} | {} | {:.0} | {ratio:.2} | 1.3 | {} |",
            fmt(samples.p50()),
            fmt(samples.p99()),
            samples.rate(),
            verdict(ratio <= 1.3)
        );
    }
    if let Some(go_plugin) = &args.go_plugin {
        let samples = scenarios::go_plugin_chain(go_plugin, effort).await?;
        let ratio = samples.p50().as_secs_f64() / floor_p50.as_secs_f64();
        println!(
            "| 1, Go hello-world on cnpg-i-machinery (same client and router) | {} | {} | {:.0} | {ratio:.2} | 1.3 | {} |",
            fmt(samples.p50()),
            fmt(samples.p99()),
            samples.rate(),
            verdict(ratio <= 1.3)
        );
    }

    let webhook = scenarios::webhook(effort, args.rate).await?;
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

    let cost = scenarios::plugin_cost(&binary, effort).await?;
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

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
