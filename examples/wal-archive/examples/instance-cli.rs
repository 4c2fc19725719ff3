//! A stand-in for CloudNativePG's instance manager, for tests: it calls a
//! plugin on a Unix socket the way `/controller/manager wal-archive`,
//! `wal-restore`, `backup` and `instance restore` do, with the interface of
//! `cnpgi-operator`'s instance commands, so the PostgreSQL scenario can
//! switch to those by changing one line:
//!
//! ```text
//! instance-cli wal-archive [--cluster FILE] [--plugin-dir DIR] PATH            (archive_command: %p)
//! instance-cli wal-restore [--cluster FILE] [--plugin-dir DIR] NAME DEST       (restore_command: %f %p)
//! instance-cli backup [--cluster FILE] [--plugin-dir DIR] --plugin NAME [--parameter K=V]... [--backup-name N]
//! instance-cli restore [--cluster FILE] [--plugin-dir DIR] --plugin NAME --pgdata DIR
//! ```
//!
//! `--cluster` defaults to `$CNPGI_CLUSTER` (a Cluster as YAML or JSON),
//! `--plugin-dir` to `$CNPGI_PLUGIN_DIR`. Exit status 0 on success, 1 on a
//! plugin error (printed on stderr), 2 on a usage error.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use cnpgi_pluginhelper::proto::{
    backup::v1::{BackupRequest, backup_client::BackupClient},
    wal::v1::{
        RestoreRequest, WalArchiveRequest, WalRestoreRequest, restore_job_hooks_client::RestoreJobHooksClient,
        wal_client::WalClient,
    },
};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tonic::transport::{Channel, Endpoint, Uri};

#[derive(Parser)]
#[command(about = "Calls a CNPG-I plugin as CloudNativePG's instance manager does (test stand-in)")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Clone)]
struct Common {
    /// The Cluster (YAML or JSON).
    #[arg(long, env = "CNPGI_CLUSTER")]
    cluster: PathBuf,
    /// The directory of the plugins' sockets.
    #[arg(long, env = "CNPGI_PLUGIN_DIR")]
    plugin_dir: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Archive PATH (PostgreSQL's %p, relative to the current directory: PGDATA).
    WalArchive {
        #[command(flatten)]
        common: Common,
        path: PathBuf,
    },
    /// Restore the WAL file NAME (%f) to DEST (%p).
    WalRestore {
        #[command(flatten)]
        common: Common,
        name: String,
        dest: PathBuf,
    },
    /// Take a backup through PLUGIN; prints the BackupResult as JSON.
    Backup {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        plugin: String,
        #[arg(long = "parameter", value_parser = parse_key_value)]
        parameters: Vec<(String, String)>,
        #[arg(long, default_value = "")]
        backup_name: String,
    },
    /// Restore the Cluster's recovery source into PGDATA through PLUGIN, then
    /// configure recovery as CloudNativePG does.
    Restore {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        plugin: String,
        #[arg(long)]
        pgdata: PathBuf,
    },
}

fn parse_key_value(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))
}

async fn connect(socket: &Path) -> anyhow::Result<Channel> {
    let socket = socket.to_owned();
    let shown = socket.display().to_string();
    Endpoint::try_from("http://localhost")?
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(socket).await?)) }
        }))
        .await
        .with_context(|| format!("cannot connect to {shown}"))
}

fn read_cluster(path: &Path) -> anyhow::Result<(Value, Vec<u8>)> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let value: Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("{} is not YAML or JSON", path.display()))?;
    let bytes = serde_json::to_vec(&value)?;
    Ok((value, bytes))
}

/// The plugins of the Cluster that have a socket, in CloudNativePG's order
/// (sorted names): `spec.plugins`, plus external clusters' for restores.
fn plugins(cluster: &Value, plugin_dir: &Path, with_external: bool) -> Vec<String> {
    let mut names: Vec<String> = cluster
        .pointer("/spec/plugins")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|p| p.get("enabled").and_then(Value::as_bool) != Some(false))
        .filter_map(|p| p.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect();
    if with_external {
        names.extend(
            cluster
                .pointer("/spec/externalClusters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|e| e.pointer("/plugin/name").and_then(Value::as_str).map(str::to_owned)),
        );
    }
    names.sort();
    names.dedup();
    names.retain(|name| plugin_dir.join(name).exists());
    names
}

fn absolute(path: &Path) -> anyhow::Result<String> {
    let path = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()?.join(path)
    };
    Ok(path.to_string_lossy().into_owned())
}

async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::WalArchive { common, path } => {
            let (cluster, bytes) = read_cluster(&common.cluster)?;
            let names = plugins(&cluster, &common.plugin_dir, false);
            if names.is_empty() {
                bail!(
                    "no plugin of the Cluster has a socket in {}",
                    common.plugin_dir.display()
                );
            }
            let source = absolute(&path)?;
            for name in names {
                let mut client = WalClient::new(connect(&common.plugin_dir.join(&name)).await?);
                let mut request = tonic::Request::new(WalArchiveRequest {
                    cluster_definition: bytes.clone(),
                    source_file_name: source.clone(),
                    parameters: HashMap::new(),
                    check_empty_wal_archive: None,
                });
                request.set_timeout(Duration::from_secs(300));
                client
                    .archive(request)
                    .await
                    .map_err(|s| anyhow::anyhow!("{name}: {:?}: {}", s.code(), s.message()))?;
            }
            Ok(())
        }
        Command::WalRestore { common, name, dest } => {
            let (cluster, bytes) = read_cluster(&common.cluster)?;
            let destination = absolute(&dest)?;
            let mut errors = Vec::new();
            for plugin in plugins(&cluster, &common.plugin_dir, true) {
                let mut client = WalClient::new(connect(&common.plugin_dir.join(&plugin)).await?);
                let mut request = tonic::Request::new(WalRestoreRequest {
                    cluster_definition: bytes.clone(),
                    source_wal_name: name.clone(),
                    destination_file_name: destination.clone(),
                    parameters: HashMap::new(),
                    mode: 0,
                });
                request.set_timeout(Duration::from_secs(300));
                match client.restore(request).await {
                    Ok(_) => return Ok(()),
                    Err(status) => errors.push(format!("{plugin}: {:?}: {}", status.code(), status.message())),
                }
            }
            bail!("{name} not restored: {}", errors.join("; "))
        }
        Command::Backup {
            common,
            plugin,
            parameters,
            backup_name,
        } => {
            let (cluster, bytes) = read_cluster(&common.cluster)?;
            let backup = json!({
                "apiVersion": "postgresql.cnpg.io/v1", "kind": "Backup",
                "metadata": {"name": backup_name, "namespace": cluster.pointer("/metadata/namespace").cloned().unwrap_or(json!("default"))},
                "spec": {"cluster": {"name": cluster.pointer("/metadata/name").cloned().unwrap_or_default()},
                         "method": "plugin", "pluginConfiguration": {"name": plugin}},
                "status": {"phase": "started"}
            });
            let mut client = BackupClient::new(connect(&common.plugin_dir.join(&plugin)).await?);
            let mut request = tonic::Request::new(BackupRequest {
                cluster_definition: bytes,
                backup_definition: serde_json::to_vec(&backup)?,
                parameters: parameters.into_iter().collect(),
            });
            request.set_timeout(Duration::from_secs(3600));
            let result = client
                .backup(request)
                .await
                .map_err(|s| anyhow::anyhow!("{plugin}: {:?}: {}", s.code(), s.message()))?
                .into_inner();
            let printed = json!({
                "backupId": result.backup_id, "backupName": result.backup_name,
                "startedAt": result.started_at, "stoppedAt": result.stopped_at,
                "beginWal": result.begin_wal, "endWal": result.end_wal,
                "beginLsn": result.begin_lsn, "endLsn": result.end_lsn,
                "backupLabelFile": String::from_utf8_lossy(&result.backup_label_file),
                "instanceId": result.instance_id, "online": result.online, "metadata": result.metadata,
            });
            println!("{}", serde_json::to_string_pretty(&printed)?);
            Ok(())
        }
        Command::Restore { common, plugin, pgdata } => {
            let (_, bytes) = read_cluster(&common.cluster)?;
            let mut client = RestoreJobHooksClient::new(connect(&common.plugin_dir.join(&plugin)).await?);
            let mut request = tonic::Request::new(RestoreRequest {
                cluster_definition: bytes,
                check_empty_wal_archive: None,
            });
            request.set_timeout(Duration::from_secs(3600));
            let answer = client
                .restore(request)
                .await
                .map_err(|s| anyhow::anyhow!("{plugin}: {:?}: {}", s.code(), s.message()))?
                .into_inner();
            // As CloudNativePG: archiving off while recovering, then the
            // plugin's configuration, then recovery.signal.
            let conf = pgdata.join("postgresql.conf");
            let mut text = std::fs::read_to_string(&conf).with_context(|| format!("cannot read {}", conf.display()))?;
            text.push_str("\n# written by the restore\narchive_command = 'false'\n");
            text.push_str(&answer.restore_config);
            std::fs::write(&conf, text).with_context(|| format!("cannot write {}", conf.display()))?;
            std::fs::write(pgdata.join("recovery.signal"), b"")?;
            eprintln!("{}", answer.restore_config);
            Ok(())
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}
