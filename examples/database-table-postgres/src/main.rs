//! `database-table-postgres plugin [FLAGS]`: serves the plugin (over a Unix
//! socket with `--plugin-path`, or mutual TLS, registering itself with
//! `--register-with`), as every cnpgi-rs plugin, with its own flags:
//!
//! * `--server-override NAME=HOST:PORT` (repeatable; `DBT_SERVER_OVERRIDES`,
//!   comma-separated): server `NAME` is there, not at its CloudNativePG
//!   Cluster's `NAME-rw.<namespace>.svc:5432`;
//! * `--metrics-address ADDRESS` (`METRICS_ADDRESS`): serve the partitions'
//!   metrics on `http://ADDRESS/metrics`.

use std::{net::SocketAddr, process::ExitCode};

use clap::{Args, FromArgMatches};
use cnpgi_example_database_table_postgres::{Config, metadata, metrics::Metrics, plugin, server};
use cnpgi_pluginhelper::{PluginArgs, cmd::main_command};

/// The plugin's own flags, beside the SDK's.
#[derive(Debug, Args)]
struct Flags {
    /// Server NAME is at HOST:PORT, not at its CloudNativePG Cluster's NAME-rw.NAMESPACE.svc:5432 (repeatable; the variable is comma-separated).
    #[arg(long = "server-override", env = "DBT_SERVER_OVERRIDES", value_name = "NAME=HOST:PORT",
          value_delimiter = ',', value_parser = server::parse_override)]
    server_overrides: Vec<(String, String, u16)>,
    /// Serve the partitions' metrics on http://ADDRESS/metrics, e.g. 0.0.0.0:9187.
    #[arg(long, env = "METRICS_ADDRESS", value_name = "ADDRESS")]
    metrics_address: Option<SocketAddr>,
}

fn main() -> ExitCode {
    let command =
        main_command("database-table-postgres", Some(&metadata())).mut_subcommand("plugin", Flags::augment_args);
    let matches = command.get_matches();
    let Some(("plugin", matches)) = matches.subcommand() else {
        // subcommand_required: clap refuses anything else before this point.
        return ExitCode::from(2);
    };
    let (args, flags) = match (PluginArgs::from_arg_matches(matches), Flags::from_arg_matches(matches)) {
        (Ok(args), Ok(flags)) => (args, flags),
        (Err(error), _) | (_, Err(error)) => error.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let config = Config {
        servers: server::Servers::new(flags.server_overrides),
        metrics: Metrics::default(),
    };
    let served = runtime.block_on(async {
        let serving = plugin(config.clone()).command().run(args);
        let Some(address) = flags.metrics_address else {
            return serving.await.map_err(|error| error.to_string());
        };
        // The metrics server only ends by failing (its address unusable), which stops the plugin too.
        tokio::select! {
            served = serving => served.map_err(|error| error.to_string()),
            metrics = config.metrics.serve(address) => Err(match metrics {
                Ok(()) => format!("the metrics server on {address} stopped"),
                Err(error) => format!("cannot serve metrics on {address}: {error}"),
            }),
        }
    });
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "plugin failed");
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}
