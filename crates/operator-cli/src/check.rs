//! `cnpgi-operator check-plugin`: the conformance suite, as a table.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Args;
use cnpgi_client::conformance::{ConformanceOptions, check_plugin};

use crate::plugins::{LocalPluginFlags, LocalPlugins};

/// Flags of `cnpgi-operator check-plugin`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// A Cluster to send the plugin instead of the built-in sample (e.g. one
    /// with the parameters the plugin requires).
    #[arg(long, value_name = "CLUSTER.yaml")]
    pub(crate) cluster: Option<PathBuf>,

    /// Every call must answer within this many seconds.
    #[arg(long, alias = "deadline-seconds", default_value_t = 5)]
    pub(crate) call_timeout_seconds: u64,

    /// Fail on recommendations too (NOTE lines, e.g. garbage input refused
    /// with a code other than INVALID_ARGUMENT), not only on what CNPG-I requires.
    #[arg(long)]
    pub(crate) strict: bool,

    #[command(flatten)]
    pub(crate) plugins: LocalPluginFlags,
}

/// Exit 0 when every plugin passes, 1 when a check fails, 2 when a plugin
/// cannot be reached at all.
pub(crate) async fn check(args: CheckArgs) -> ExitCode {
    // The same refusals as `render`: a Deployment, an empty file or a
    // Cluster of another API group would be sent to the plugin as a Cluster.
    let cluster = match args.cluster.as_deref().map(crate::render::read_cluster).transpose() {
        Ok(cluster) => cluster,
        Err(error) => {
            eprintln!("error: --cluster: {error:#}");
            return ExitCode::from(2);
        }
    };
    let plugins = match LocalPlugins::connect(&args.plugins).await {
        Ok(plugins) if plugins.found.is_empty() => {
            eprintln!("error: no plugin given (--plugin-exec, --plugin-dir or --plugin)");
            return ExitCode::from(2);
        }
        Ok(plugins) => plugins,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::from(2);
        }
    };
    if let (Some(path), Some(cluster)) = (&args.cluster, &cluster) {
        let found: Vec<&str> = plugins.found.iter().map(|(name, _, _)| name.as_str()).collect();
        if let Some(name) = crate::render::plugin_names(cluster).find(|name| !found.contains(name)) {
            eprintln!(
                "error: --cluster: {}",
                crate::render::unknown_plugin(name, [(path.as_path(), cluster)], &found)
            );
            return ExitCode::from(2);
        }
    }
    let options = ConformanceOptions {
        deadline: Duration::from_secs(args.call_timeout_seconds),
        cluster,
        strict: args.strict,
    };
    let mut passed = true;
    for (name, _, client) in &plugins.found {
        let report = check_plugin(client, name, &options).await;
        print!("{report}");
        passed &= report.passed();
    }
    if passed { ExitCode::SUCCESS } else { ExitCode::from(1) }
}
