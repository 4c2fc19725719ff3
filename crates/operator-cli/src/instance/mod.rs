//! The instance commands: what CloudNativePG's instance manager does with
//! the plugins beside PostgreSQL, for a PostgreSQL without Kubernetes
//! (`wal-archive`, `wal-restore`, `backup`, `restore`, `metrics`). The
//! calls themselves are `cnpgi_client::instance`'s.

pub(crate) mod backup;
pub(crate) mod metrics;
pub(crate) mod wal;

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use anyhow::Context as _;
use clap::Args;
use cnpgi_client::{
    client::{ClientOptions, NO_DEADLINE},
    instance::InstanceOptions,
};
use serde_json::Value;

use cnpgi_process::logging::{self, LogFormat};

/// The fields every instance command needs in the Cluster file: the JSON
/// pointer, its name as a user writes it, and why.
pub(crate) const REQUIRED_FIELDS: [(&str, &str, &str); 5] = [
    ("/apiVersion", "apiVersion", "plugins decode the Cluster by its type"),
    ("/kind", "kind", "plugins decode the Cluster by its type"),
    (
        "/metadata/name",
        "metadata.name",
        "plugins name their archive and backups after it",
    ),
    (
        "/metadata/namespace",
        "metadata.namespace",
        "plugins look their configuration up in it",
    ),
    (
        "/metadata/uid",
        "metadata.uid",
        "plugins tell one Cluster from another of the same name by it (outside Kubernetes, any unique id, e.g. from uuidgen)",
    ),
];

/// What `wal-archive` and `backup` also need.
pub(crate) const PRIMARY_FIELD: (&str, &str, &str) = (
    "/status/currentPrimary",
    "status.currentPrimary",
    "archiving and backups run on the current primary, which plugins check (the name of this instance)",
);

/// Where the Cluster and the plugins are.
#[derive(Debug, Clone, Args)]
pub(crate) struct InstanceFlags {
    /// The Cluster (YAML or JSON) whose `spec.plugins` the instance uses.
    #[arg(long, env = "CNPGI_CLUSTER", value_name = "FILE")]
    pub(crate) cluster: PathBuf,

    /// Directory of the plugins' Unix sockets (each named after its plugin).
    #[arg(long, env = "CNPGI_PLUGIN_DIR", value_name = "DIR", default_value = "/plugins")]
    pub(crate) plugin_dir: PathBuf,

    /// Format of the messages on stderr: text lines, or one JSON object per
    /// line (as `run` logs, and as CloudNativePG and its plugins log).
    #[arg(long, env = "CNPGI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
}

/// How grave what a message reports is (its level in JSON).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Severity {
    /// The command failed.
    Error,
    /// Something went wrong that the command got past (a retry, a file it could not remove).
    Warning,
    /// What the command did.
    Info,
}

impl InstanceFlags {
    /// Writes one of the command's messages on stderr: the line as it is, or
    /// with `--log-format json` an object through the same JSON log
    /// subscriber as `run` (`timestamp`, `level`, `fields.message`, `target`).
    pub(crate) fn report(&self, severity: Severity, line: &str) {
        match self.log_format {
            LogFormat::Text => eprintln!("{line}"),
            LogFormat::Json => {
                // Installs the subscriber on the first message (unless
                // `metrics` installed its own); a no-op after.
                logging::init_messages(LogFormat::Json);
                match severity {
                    Severity::Error => tracing::error!("{line}"),
                    Severity::Warning => tracing::warn!("{line}"),
                    Severity::Info => tracing::info!("{line}"),
                }
            }
        }
    }

    /// The Cluster file, as JSON, with the fields plugins read from what
    /// CloudNativePG's instance manager sends them (an API object, where
    /// they are always set): [`REQUIRED_FIELDS`], plus `status.currentPrimary`
    /// when `primary` (archiving and backups run on the primary, and plugins
    /// such as plugin-barman-cloud check it).
    pub(crate) fn read_cluster(&self, primary: bool) -> anyhow::Result<Value> {
        // A Pod or a Backup handed by mistake must not reach the plugins as
        // if it were the Cluster they archive for.
        let cluster = crate::render::read_cluster(&self.cluster)
            .with_context(|| format!("cannot use the Cluster file {}", self.cluster.display()))?;
        let required = REQUIRED_FIELDS.iter().chain(primary.then_some(&PRIMARY_FIELD));
        for (pointer, shown, why) in required {
            let present = cluster
                .pointer(pointer)
                .and_then(Value::as_str)
                .is_some_and(|text| !text.is_empty());
            anyhow::ensure!(
                present,
                "the Cluster file {} has no {shown}: {why} (CloudNativePG always passes it; see the book's \
                 guide \"Instance mode\", book/src/guides/instance-mode.md)",
                self.cluster.display()
            );
        }
        Ok(cluster)
    }

    /// The options of the calls, with `timeout` as the deadline of each
    /// (`None`: no deadline).
    pub(crate) fn options(&self, timeout: Option<Duration>) -> InstanceOptions {
        InstanceOptions {
            socket_dir: self.plugin_dir.clone(),
            client: ClientOptions {
                call_timeout: timeout.unwrap_or(NO_DEADLINE),
                connect_timeout: Duration::from_secs(5),
                ..ClientOptions::default()
            },
        }
    }
}

/// `path` made absolute against the working directory (PGDATA, when
/// PostgreSQL runs the command), without resolving links.
pub(crate) fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    if path.is_absolute() {
        return Ok(path.to_owned());
    }
    let cwd = std::env::current_dir().context("cannot read the working directory")?;
    Ok(cwd.join(path))
}

/// A deadline flag: `0` means none.
pub(crate) fn deadline(seconds: u64) -> Option<Duration> {
    (seconds > 0).then(|| Duration::from_secs(seconds))
}

/// Runs an instance command on a single-threaded runtime: these commands
/// run once per WAL segment, so start-up is kept small. No signal handler:
/// they start no process, and PostgreSQL tells a `restore_command` killed by
/// a signal from one that failed.
pub(crate) fn run(work: impl std::future::Future<Output = ExitCode>) -> ExitCode {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime.block_on(work),
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            ExitCode::from(2)
        }
    }
}
