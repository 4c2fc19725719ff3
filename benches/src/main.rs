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
mod tables;

use std::{path::PathBuf, process::ExitCode};

use clap::Parser;
use scenarios::Effort;

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
    /// Stop after the routing table (section 2).
    #[arg(long)]
    routing_only: bool,
    /// Only the webhook table (section 3).
    #[arg(long)]
    webhook_only: bool,
    /// Offered `SetStatusInCluster` calls per second (section 7):
    /// CloudNativePG's steady traffic at 5,000 Clusters.
    #[arg(long, default_value_t = 1000.0)]
    status_rate: f64,
    /// Distinct Clusters the status calls cycle through (section 7).
    #[arg(long, default_value_t = 5000)]
    status_clusters: usize,
    /// Only the status traffic table (section 7).
    #[arg(long)]
    status_only: bool,
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

/// Iterations: a few under `--smoke`, else as asked.
fn effort(args: &Args) -> Effort {
    if args.smoke {
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
    }
}

/// The hello-world binary to measure: `--plugin-binary`, else the one
/// beside this binary.
fn plugin_binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let binary = match given {
        Some(path) => path,
        None => std::env::current_exe()?.with_file_name("cnpg-i-hello-world"),
    };
    anyhow::ensure!(
        binary.exists(),
        "{} not found: build cnpg-i-hello-world with the same profile",
        binary.display()
    );
    Ok(binary)
}

async fn run(args: Args) -> anyhow::Result<()> {
    let effort = effort(&args);
    let binary = plugin_binary(args.plugin_binary)?;
    println!("Machine: {}\n", machine());
    if args.breakdown {
        return tables::breakdown(effort).await;
    }
    if args.webhook_only {
        return tables::webhook(effort, args.rate).await;
    }
    if args.status_only {
        return tables::status_traffic(&binary, effort, args.status_rate, args.status_clusters).await;
    }
    tables::floor(effort).await?;
    tables::routing(effort, args.go_plugin.as_deref()).await?;
    if args.routing_only {
        return Ok(());
    }
    tables::webhook(effort, args.rate).await?;
    tables::plugin_cost(&binary, effort).await?;
    tables::connections(effort).await?;
    tables::scale(effort).await?;
    tables::status_traffic(&binary, effort, args.status_rate, args.status_clusters).await
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

/// The allocator `cnpgi-operator` and the example plugins use, so that the
/// router and plugins run in this process as they do in those binaries.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
