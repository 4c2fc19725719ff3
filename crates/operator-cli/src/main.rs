//! `cnpgi-operator`: hosts CNPG-I plugins for `cnpgi.io/v1` Clusters.
//!
//! * `cnpgi-operator run`: discovers plugins, serves the admission webhooks,
//!   reconciles Clusters, and exposes `/healthz`, `/readyz` and `/metrics`;
//! * `cnpgi-operator crd`: prints the Cluster CRD;
//! * `cnpgi-operator render`: runs a Cluster file through the plugins locally;
//! * `cnpgi-operator check-plugin`: the conformance suite for any plugin.

#![forbid(unsafe_code)]

mod check;
mod plugins;
mod render;
mod run;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Hosts CNPG-I plugins for `cnpgi.io/v1` Clusters.
#[derive(Debug, Parser)]
#[command(name = "cnpgi-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the operator (in a Kubernetes cluster, or with a kubeconfig).
    Run(Box<run::RunArgs>),
    /// Print the Cluster CustomResourceDefinition as YAML.
    Crd,
    /// Run a Cluster file through the plugin pipeline locally and print the result.
    Render(Box<render::RenderArgs>),
    /// Check that plugins conform to CNPG-I (prints a table; exit 1 on failure).
    CheckPlugin(Box<check::CheckArgs>),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let local = |work: std::pin::Pin<Box<dyn std::future::Future<Output = ExitCode>>>| {
        match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
            Ok(runtime) => runtime.block_on(until_signal(work)),
            Err(error) => {
                eprintln!("error: cannot start the async runtime: {error}");
                ExitCode::from(2)
            }
        }
    };
    let result = match cli.command {
        Command::Render(args) => return local(Box::pin(render::render(*args))),
        Command::CheckPlugin(args) => return local(Box::pin(check::check(*args))),
        Command::Crd => cnpgi_operator::crd::crd_yaml()
            .map(|yaml| print!("{yaml}"))
            .map_err(anyhow::Error::from),
        Command::Run(args) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|runtime| runtime.block_on(run::run(*args))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a local command (`render`, `check-plugin`) until it finishes or the
/// process receives SIGTERM or SIGINT. On a signal the command's future is
/// dropped, which kills the plugin processes it started and removes their
/// temporary directories; the exit code is then 128 + the signal number
/// (143 for SIGTERM, 130 for SIGINT), as a shell reports it.
async fn until_signal(work: std::pin::Pin<Box<dyn std::future::Future<Output = ExitCode>>>) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};

    // Installed before the command starts any plugin.
    let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("error: cannot handle SIGTERM and SIGINT: {error}");
            return ExitCode::from(2);
        }
    };
    let (name, code) = tokio::select! {
        code = work => return code,
        _ = term.recv() => ("SIGTERM", 143),
        _ = int.recv() => ("SIGINT", 130),
    };
    eprintln!("error: interrupted by {name}; stopped the plugins and removed their temporary directories");
    ExitCode::from(code)
}
