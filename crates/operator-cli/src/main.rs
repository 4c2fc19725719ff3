//! `cnpgi-operator`: hosts CNPG-I plugins for `cnpgi.io/v1` Clusters.
//!
//! * `cnpgi-operator run`: discovers plugins, serves the admission webhooks,
//!   reconciles Clusters, and exposes `/healthz` and `/readyz` (probe port) and `/metrics`;
//! * `cnpgi-operator crd`: prints the Cluster CRD;
//! * `cnpgi-operator render`: runs a Cluster file through the plugins locally;
//! * `cnpgi-operator check-plugin`: the conformance suite for any plugin;
//! * `cnpgi-operator doctor`: why an operator cannot use a plugin Service,
//!   field by field (also `kubectl cnpgi doctor`: the binary installed as
//!   `kubectl-cnpgi` behaves the same);
//! * `cnpgi-operator wal-archive`, `wal-restore`, `backup`, `restore`,
//!   `metrics`: the instance side, beside a PostgreSQL, through the plugins
//!   of a socket directory (no Kubernetes).

#![forbid(unsafe_code)]

mod check;
mod doctor;
mod env_names;
mod instance;
mod plugins;
mod render;
mod run;
mod signals;
mod trace;
mod usage_errors;
mod yaml;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use cnpgi_process::logging;

// Routing decodes, encodes and patches JSON on every call, which is
// allocation-bound: mimalloc makes it markedly faster than glibc's malloc
// (BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Check plugin Services as CloudNativePG and cnpgi-operator use them
    /// (exit 1 on an error or a warning).
    ///
    /// The label and annotations, the ready endpoints, the Secrets and their
    /// certificates as both sides use them, a dial with the operator's TLS
    /// configuration and the probe, and what the Clusters that use each
    /// plugin need of it. One line per finding: the object and field at
    /// fault, what is wrong and what to change.
    Doctor(Box<doctor::DoctorArgs>),
    /// Archive a WAL file through the plugins (PostgreSQL's archive_command).
    ///
    /// Calls WAL.Archive on every plugin the Cluster enables that has a socket
    /// and advertises TYPE_ARCHIVE_WAL, in name order; the first error fails.
    /// Exit 0 only when archived. With --max-parallel N, the next ready
    /// segments are archived at the same time, and PostgreSQL's requests for
    /// them answered from a spool of markers (each written only once every
    /// plugin has the segment, and used only while the file is unchanged).
    /// Example: archive_command = 'cnpgi-operator wal-archive %p', with
    /// CNPGI_CLUSTER and CNPGI_PLUGIN_DIR in PostgreSQL's environment.
    WalArchive(Box<instance::wal::ArchiveArgs>),
    /// Restore a WAL file through the plugins (PostgreSQL's restore_command).
    ///
    /// Asks WAL.Restore of the enabled plugins (and those of
    /// spec.externalClusters[].plugin) that advertise TYPE_RESTORE_WAL, in name
    /// order, until one has it. Exit 1 when none has it: PostgreSQL carries on.
    /// Example: restore_command = 'cnpgi-operator wal-restore %f %p'.
    WalRestore(Box<instance::wal::RestoreArgs>),
    /// Take a base backup through a plugin (Backup.Backup); prints the result as JSON.
    Backup(Box<instance::backup::BackupArgs>),
    /// Restore PGDATA through a plugin (RestoreJobHooks.Restore) and write the
    /// recovery configuration; prints the plugin's environment variables.
    Restore(Box<instance::backup::RestoreArgs>),
    /// Serve the plugins' metrics (Metrics.Define and Collect) on /metrics.
    Metrics(Box<instance::metrics::MetricsArgs>),
}

fn main() -> ExitCode {
    let (command, deprecated) =
        env_names::fall_back_on_deprecated(Cli::command(), &|name| std::env::var_os(name).is_some());
    env_names::remember(deprecated);
    // Not clap's `get_matches`: a usage error of `wal-restore` during a
    // recovery must not exit 2 (see usage_errors).
    let args = kubectl_plugin_args(std::env::args_os().collect());
    let cli: Cli = match usage_errors::parse(command, &args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };
    // `run` and `metrics` warn through their log set-up; the others now.
    match &cli.command {
        Command::Run(_) | Command::Metrics(_) => {}
        Command::WalArchive(args) => deprecation_warnings(args.instance.log_format),
        Command::WalRestore(args) => deprecation_warnings(args.instance.log_format),
        Command::Backup(args) => deprecation_warnings(args.instance.log_format),
        Command::Restore(args) => deprecation_warnings(args.instance.log_format),
        Command::Render(_) | Command::CheckPlugin(_) | Command::Doctor(_) | Command::Crd => env_names::log_deprecated(),
    }
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
        Command::Doctor(args) => return local(Box::pin(doctor::doctor(*args))),
        Command::WalArchive(args) => return instance::run(instance::wal::archive(*args)),
        Command::WalRestore(args) => return instance::run(instance::wal::restore(*args)),
        Command::Backup(args) => return instance::run(instance::backup::run_backup(*args)),
        Command::Restore(args) => return instance::run(instance::backup::run_restore(*args)),
        Command::Metrics(args) => return instance::run(instance::metrics::run_metrics(*args)),
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

/// The name kubectl runs a plugin by: `kubectl cnpgi doctor` runs
/// `kubectl-cnpgi doctor`.
const KUBECTL_PLUGIN: &str = "kubectl-cnpgi";

/// The arguments as `cnpgi-operator` reads them: invoked as `kubectl-cnpgi`
/// (a symlink or a copy of this binary, on `PATH`), the program name is
/// `cnpgi-operator` and everything else is unchanged, so that
/// `kubectl cnpgi doctor ...` is `cnpgi-operator doctor ...`.
fn kubectl_plugin_args(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let invoked_as = args
        .first()
        .and_then(|arg0| std::path::Path::new(arg0).file_stem())
        .and_then(|stem| stem.to_str());
    if invoked_as == Some(KUBECTL_PLUGIN)
        && let Some(arg0) = args.first_mut()
    {
        *arg0 = "cnpgi-operator".into();
    }
    args
}

/// The instance commands' deprecation warnings, in their message format.
fn deprecation_warnings(format: logging::LogFormat) {
    if format == logging::LogFormat::Json {
        logging::init_messages(format);
    }
    env_names::log_deprecated();
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{Cli, Command};

    /// The book's reference page is what these definitions generate
    /// (`CNPGI_UPDATE_REFERENCE=1` rewrites it).
    #[test]
    fn the_reference_page_is_generated_from_these_definitions() {
        use clap::CommandFactory as _;
        let page = cnpgi_process::cli_reference::markdown(&Cli::command(), "cnpgi-operator");
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../book/src/reference/cnpgi-operator.md");
        if let Err(error) = cnpgi_process::cli_reference::check_or_update(&page, &path) {
            panic!("{error}");
        }
    }

    /// The spellings of 0.1 still parse, to the same fields.
    #[test]
    fn old_flag_spellings_still_work() {
        let cli = Cli::try_parse_from(["cnpgi-operator", "run", "--webhook-deadline-seconds=3"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.webhook_timeout_seconds, 3);

        let cli = Cli::try_parse_from([
            "cnpgi-operator",
            "wal-restore",
            "--cluster=c.yaml",
            "--timeout",
            "7",
            "NAME",
            "DEST",
        ])
        .unwrap();
        let Command::WalRestore(restore) = cli.command else {
            panic!("not wal-restore")
        };
        assert_eq!(restore.timeout, 7);

        let cli = Cli::try_parse_from(["cnpgi-operator", "check-plugin", "--deadline-seconds=9"]).unwrap();
        let Command::CheckPlugin(check) = cli.command else {
            panic!("not check-plugin")
        };
        assert_eq!(check.plugins.plugin_timeout_seconds, 9);
        let cli = Cli::try_parse_from(["cnpgi-operator", "check-plugin", "--call-timeout-seconds=8"]).unwrap();
        let Command::CheckPlugin(check) = cli.command else {
            panic!("not check-plugin")
        };
        assert_eq!(check.plugins.plugin_timeout_seconds, 8);
        let cli = Cli::try_parse_from(["cnpgi-operator", "check-plugin"]).unwrap();
        let Command::CheckPlugin(check) = cli.command else {
            panic!("not check-plugin")
        };
        assert_eq!(check.plugins.plugin_timeout_seconds, 5, "check-plugin's own default");

        for command in [
            &["backup", "--cluster=c.yaml", "--plugin", "p.example.com"][..],
            &[
                "restore",
                "--cluster=c.yaml",
                "--pgdata=/p",
                "--plugin",
                "p.example.com",
            ],
        ] {
            let parsed = Cli::try_parse_from(std::iter::once("cnpgi-operator").chain(command.iter().copied()));
            assert!(parsed.is_ok(), "{command:?}: {parsed:?}");
        }
        let cli = Cli::try_parse_from(["cnpgi-operator", "run", "--namespace=ops"]).unwrap();
        let Command::Run(run) = cli.command else {
            panic!("not run")
        };
        assert_eq!(run.namespace, "ops");
    }
}
