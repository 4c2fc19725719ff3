//! `cnpgi-operator check-plugin`: the conformance suite, as a table.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::Args;
use cnpgi_client::conformance::{ConformanceOptions, check_plugin};

use crate::plugins::{LocalPluginFlags, LocalPlugins};

/// Flags of `cnpgi-operator check-plugin`. Its `--plugin-timeout-seconds`
/// (default 5) is what every call must answer within to pass.
#[derive(Debug, Args)]
#[command(mut_arg("plugin_timeout_seconds", |arg| arg.default_value("5").alias("call-timeout-seconds").alias("deadline-seconds")))]
pub(crate) struct CheckArgs {
    /// A Cluster to send the plugin instead of the built-in sample (e.g. one
    /// with the parameters the plugin requires).
    #[arg(long, value_name = "CLUSTER.yaml")]
    pub(crate) cluster: Option<PathBuf>,

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
    // The suite's deadline judges each call (and names the check that
    // missed it); the client's own deadline is a second later, so that the
    // two do not race to report the same miss.
    let mut flags = args.plugins.clone();
    if flags.plugin_timeout_seconds > 0 {
        flags.plugin_timeout_seconds = flags.plugin_timeout_seconds.saturating_add(1);
    }
    let plugins = match LocalPlugins::connect(&flags).await {
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
        deadline: crate::instance::deadline(args.plugins.plugin_timeout_seconds).unwrap_or(Duration::MAX),
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
