//! `backup` and `restore`: a base backup through a plugin, and a PGDATA
//! restored by one (CloudNativePG's `instance restore`).

use std::{
    collections::BTreeMap,
    os::unix::fs::DirBuilderExt as _,
    path::{Path, PathBuf},
    process::ExitCode,
    time::SystemTime,
};

use anyhow::Context as _;
use clap::Args;
use cnpgi_client::instance::{
    backup::{backup, backup_object, backup_result_json, default_backup_name, restore, write_recovery_configuration},
    commands::{InstanceCli, map_instance_manager},
};
use cnpgi_core::postgres::recovery_source_plugin;
use serde_json::Value;

use super::{InstanceFlags, Severity, absolute, deadline};

/// `K=V` of `--parameter`.
fn parameter(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// Flags of `cnpgi-operator backup`.
#[derive(Debug, Args)]
pub(crate) struct BackupArgs {
    #[command(flatten)]
    pub(crate) instance: InstanceFlags,

    /// The plugin taking the backup (as a Backup's `pluginConfiguration.name`).
    /// Not `--plugin`, which is `NAME=ADDRESS` in the other commands (still
    /// read here, as the spelling of 0.1).
    #[arg(long = "plugin-name", alias = "plugin", value_name = "NAME")]
    pub(crate) plugin: String,

    /// A parameter for the plugin (repeatable; `pluginConfiguration.parameters`).
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = parameter)]
    pub(crate) parameters: Vec<(String, String)>,

    /// The Backup's name (default: `<cluster>-<YYYYMMDDhhmmss>`, UTC).
    #[arg(long, value_name = "NAME")]
    pub(crate) backup_name: Option<String>,

    /// Deadline of each plugin call, in seconds (0: none, the default, as
    /// CloudNativePG over a Unix socket: a backup lasts as long as it takes).
    #[arg(
        long = "plugin-timeout-seconds",
        aliases = ["timeout-seconds", "timeout"],
        value_name = "SECONDS",
        default_value_t = 0
    )]
    pub(crate) timeout: u64,
}

/// Prints the plugin's `BackupResult` as JSON; exit 1 when the backup
/// failed, 2 on bad input.
pub(crate) async fn run_backup(args: BackupArgs) -> ExitCode {
    let cluster = match args.instance.read_cluster(true) {
        Ok(cluster) => cluster,
        Err(error) => {
            args.instance.report(Severity::Error, &format!("backup: {error:#}"));
            return ExitCode::from(2);
        }
    };
    let name = args.backup_name.clone().unwrap_or_else(|| {
        let cluster_name = cluster
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("cluster");
        default_backup_name(cluster_name, SystemTime::now())
    });
    let parameters: BTreeMap<String, String> = args.parameters.into_iter().collect();
    let object = backup_object(&cluster, &name, &args.plugin, &parameters);
    let options = args.instance.options(deadline(args.timeout));
    match backup(&cluster, &object, &args.plugin, &parameters, &options).await {
        Ok(result) => {
            let json = backup_result_json(&result);
            println!(
                "{}",
                serde_json::to_string_pretty(&json).unwrap_or_else(|_| json.to_string())
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            args.instance
                .report(Severity::Error, &format!("backup {name}: {error}"));
            ExitCode::FAILURE
        }
    }
}

/// Flags of `cnpgi-operator restore`.
#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    #[command(flatten)]
    pub(crate) instance: InstanceFlags,

    /// The plugin restoring PGDATA (default: the plugin of the external
    /// cluster that `spec.bootstrap.recovery.source` names).
    #[arg(long = "plugin-name", alias = "plugin", value_name = "NAME")]
    pub(crate) plugin: Option<String>,

    /// The data directory the plugin fills: absent or empty. The plugin
    /// learns this path from its own configuration (as CloudNativePG's
    /// plugins do, e.g. PGDATA in their environment), not from the call.
    #[arg(long, env = "PGDATA", value_name = "DIR")]
    pub(crate) pgdata: PathBuf,

    /// The file in PGDATA the recovery configuration is appended to
    /// (CloudNativePG: `custom.conf`, included by its `postgresql.conf`).
    #[arg(long, value_name = "NAME", default_value = "postgresql.auto.conf")]
    pub(crate) config_file: String,

    /// Deadline of each plugin call, in seconds (0: none, the default, as
    /// CloudNativePG).
    #[arg(
        long = "plugin-timeout-seconds",
        aliases = ["timeout-seconds", "timeout"],
        value_name = "SECONDS",
        default_value_t = 0
    )]
    pub(crate) timeout: u64,
}

/// Refuses a PGDATA that has files; creates a missing one (mode 0700).
/// Returns whether it was created.
fn prepare_pgdata(pgdata: &Path) -> anyhow::Result<bool> {
    match std::fs::read_dir(pgdata) {
        Ok(mut entries) => {
            anyhow::ensure!(
                entries.next().is_none(),
                "refusing to restore into {}: it is not empty",
                pgdata.display()
            );
            Ok(false)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(pgdata)
            .map(|()| true)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", pgdata.display())),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", pgdata.display())),
    }
}

/// Puts PGDATA back as it was before a failed restore (it was checked
/// empty, or created): a PGDATA half-filled by a restore that failed (a
/// base backup that failed its checksum, a plugin that died) must never be
/// started. Returns what was done, for the message.
fn undo_restore(pgdata: &Path, created: bool) -> String {
    let result = if created {
        std::fs::remove_dir_all(pgdata)
    } else {
        std::fs::read_dir(pgdata).and_then(|entries| {
            entries.into_iter().try_for_each(|entry| {
                let path = entry?.path();
                if path.is_dir() && !path.is_symlink() {
                    std::fs::remove_dir_all(&path)
                } else {
                    std::fs::remove_file(&path)
                }
            })
        })
    };
    match result {
        Ok(()) if created => format!("{} removed again", pgdata.display()),
        Ok(()) => format!("{} emptied again", pgdata.display()),
        Err(error) => format!(
            "{} could NOT be emptied ({error}): remove what the plugin wrote before starting PostgreSQL on it",
            pgdata.display()
        ),
    }
}

/// How the recovering PostgreSQL runs this program's `wal-restore` (and
/// `wal-archive`): this executable, the Cluster file and the plugin
/// directory of this restore, all as absolute paths.
fn instance_cli(flags: &InstanceFlags) -> anyhow::Result<InstanceCli> {
    let text = |path: PathBuf| {
        path.into_os_string()
            .into_string()
            .map_err(|path| anyhow::anyhow!("{} is not UTF-8", PathBuf::from(path).display()))
    };
    Ok(InstanceCli {
        program: text(std::env::current_exe().context("cannot tell where this executable is")?)?,
        cluster: text(absolute(&flags.cluster)?)?,
        plugin_dir: text(absolute(&flags.plugin_dir)?)?,
    })
}

/// Has the plugin fill PGDATA, writes the recovery configuration (with the
/// instance manager's commands mapped to this program's), prints the
/// plugin's `envs` (one `NAME=VALUE` a line); exit 1 when the restore failed
/// (PGDATA is then left as it was: empty), 2 on bad input.
pub(crate) async fn run_restore(args: RestoreArgs) -> ExitCode {
    let input = (|| {
        let cluster = args.instance.read_cluster(false)?;
        let plugin = match &args.plugin {
            Some(plugin) => plugin.clone(),
            None => recovery_source_plugin(&cluster)
                .ok_or_else(|| {
                    anyhow::anyhow!(
                        "no --plugin, and spec.bootstrap.recovery.source names no external cluster with a plugin"
                    )
                })?
                .to_owned(),
        };
        anyhow::ensure!(
            !args.config_file.is_empty() && !args.config_file.contains('/'),
            "--config-file {:?} must be a file name in PGDATA",
            args.config_file
        );
        let cli = instance_cli(&args.instance)?;
        let created = prepare_pgdata(&args.pgdata)?;
        anyhow::Ok((cluster, plugin, cli, created))
    })();
    let (cluster, plugin, cli, created) = match input {
        Ok(input) => input,
        Err(error) => {
            args.instance.report(Severity::Error, &format!("restore: {error:#}"));
            return ExitCode::from(2);
        }
    };
    let options = args.instance.options(deadline(args.timeout));
    let restored = async {
        let answer = restore(&cluster, &plugin, &options).await?;
        anyhow::ensure!(
            args.pgdata.join("PG_VERSION").is_file(),
            "plugin {plugin} answered, but {} has no PG_VERSION: the plugin did not fill this PGDATA",
            args.pgdata.display()
        );
        let mapped = map_instance_manager(&answer.restore_config, &cli)
            .with_context(|| format!("plugin {plugin}'s restore_config cannot be used here"))?;
        let files = write_recovery_configuration(&args.pgdata, &args.config_file, &mapped.config, &cluster)?;
        anyhow::Ok((answer.envs, mapped.settings, files))
    }
    .await;
    match restored {
        Ok((envs, mapped, files)) => {
            let mapped = if mapped.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} mapped from CloudNativePG's instance manager to {}",
                    mapped.join(" and "),
                    cli.program
                )
            };
            args.instance.report(
                Severity::Info,
                &format!(
                    "restore: {} restored by plugin {plugin}; recovery configuration appended to {}{mapped}; {} created",
                    args.pgdata.display(),
                    files.config.display(),
                    files.signal.display()
                ),
            );
            for env in &envs {
                println!("{env}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            let undone = undo_restore(&args.pgdata, created);
            args.instance
                .report(Severity::Error, &format!("restore: {error:#}; {undone}"));
            ExitCode::FAILURE
        }
    }
}
