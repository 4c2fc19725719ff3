//! `backup` and `restore`: a base backup through a plugin, and a PGDATA
//! restored by one (CloudNativePG's `instance restore`).

use std::{
    collections::BTreeMap,
    os::unix::fs::DirBuilderExt as _,
    path::{Path, PathBuf},
    process::ExitCode,
    time::SystemTime,
};

use clap::Args;
use cnpgi_client::instance::backup::{
    backup, backup_object, backup_result_json, default_backup_name, restore, write_recovery_configuration,
};
use cnpgi_core::postgres::recovery_source_plugin;
use serde_json::Value;

use super::{InstanceFlags, deadline};

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
    #[arg(long, value_name = "NAME")]
    pub(crate) plugin: String,

    /// A parameter for the plugin (repeatable; `pluginConfiguration.parameters`).
    #[arg(long = "parameter", value_name = "KEY=VALUE", value_parser = parameter)]
    pub(crate) parameters: Vec<(String, String)>,

    /// The Backup's name (default: `<cluster>-<YYYYMMDDhhmmss>`, UTC).
    #[arg(long, value_name = "NAME")]
    pub(crate) backup_name: Option<String>,

    /// Deadline of the backup, in seconds (default: none, as CloudNativePG
    /// over a Unix socket: a backup lasts as long as it takes).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<u64>,
}

/// Prints the plugin's `BackupResult` as JSON; exit 1 when the backup
/// failed, 2 on bad input.
pub(crate) async fn run_backup(args: BackupArgs) -> ExitCode {
    let cluster = match args.instance.read_cluster() {
        Ok(cluster) => cluster,
        Err(error) => {
            eprintln!("backup: {error:#}");
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
    let options = args.instance.options(args.timeout.and_then(deadline));
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
            eprintln!("backup {name}: {error}");
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
    #[arg(long, value_name = "NAME")]
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

    /// Deadline of the restore, in seconds (default: none, as CloudNativePG).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) timeout: Option<u64>,
}

/// Refuses a PGDATA that has files; creates a missing one (mode 0700).
fn prepare_pgdata(pgdata: &Path) -> anyhow::Result<()> {
    match std::fs::read_dir(pgdata) {
        Ok(mut entries) => {
            anyhow::ensure!(
                entries.next().is_none(),
                "refusing to restore into {}: it is not empty",
                pgdata.display()
            );
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(pgdata)
            .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", pgdata.display())),
        Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", pgdata.display())),
    }
}

/// Has the plugin fill PGDATA, writes the recovery configuration, prints
/// the plugin's `envs` (one `NAME=VALUE` a line); exit 1 when the restore
/// failed, 2 on bad input.
pub(crate) async fn run_restore(args: RestoreArgs) -> ExitCode {
    let input = (|| {
        let cluster = args.instance.read_cluster()?;
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
        prepare_pgdata(&args.pgdata)?;
        anyhow::Ok((cluster, plugin))
    })();
    let (cluster, plugin) = match input {
        Ok(input) => input,
        Err(error) => {
            eprintln!("restore: {error:#}");
            return ExitCode::from(2);
        }
    };
    let options = args.instance.options(args.timeout.and_then(deadline));
    let answer = match restore(&cluster, &plugin, &options).await {
        Ok(answer) => answer,
        Err(error) => {
            eprintln!("restore: {error}");
            return ExitCode::FAILURE;
        }
    };
    if !args.pgdata.join("PG_VERSION").is_file() {
        eprintln!(
            "restore: plugin {plugin} answered, but {} has no PG_VERSION: the plugin did not fill this PGDATA",
            args.pgdata.display()
        );
        return ExitCode::FAILURE;
    }
    match write_recovery_configuration(&args.pgdata, &args.config_file, &answer.restore_config, &cluster) {
        Ok(files) => {
            eprintln!(
                "restore: {} restored by plugin {plugin}; recovery configuration appended to {}; {} created",
                args.pgdata.display(),
                files.config.display(),
                files.signal.display()
            );
            for env in &answer.envs {
                println!("{env}");
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("restore: {error}");
            ExitCode::FAILURE
        }
    }
}
