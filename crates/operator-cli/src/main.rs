//! `cnpgi-operator`: hosts CNPG-I plugins for `cnpgi.io/v1` Clusters.
//!
//! * `cnpgi-operator run`: discovers plugins, serves the admission webhooks,
//!   reconciles Clusters, and exposes `/healthz`, `/readyz` and `/metrics`;
//! * `cnpgi-operator crd`: prints the Cluster CRD;
//! * `cnpgi-operator render`: runs a Cluster file through the plugins locally;
//! * `cnpgi-operator check-plugin`: the conformance suite for any plugin.

#![forbid(unsafe_code)]

mod check;
mod logging;
mod plugins;
mod render;
mod run;
mod signals;

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
            Ok(runtime) => runtime.block_on(signals::until_signal(work)),
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
