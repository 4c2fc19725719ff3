//! The plugin's handlers, on the directory the Cluster names.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use cnpgi_pluginhelper::{
    cluster::{Cluster, decode_cluster},
    lowlevel::{ArchiveDecision, MetricSet, WalFileKind, WalFileName, decide_archive, not_in_archive},
    plugin::{BackupCall, PostgresOperation, RestoreJobCall, WalArchiveCall, WalRestoreCall},
    proto::{
        backup::v1::BackupResult,
        metrics::v1::{
            CollectMetric, CollectMetricsRequest, CollectMetricsResult, DefineMetricsRequest, DefineMetricsResult,
            MetricsCapabilitiesRequest, MetricsCapabilitiesResult, metrics_server,
        },
        wal::v1::RestoreResponse,
    },
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use crate::{
    config::Config,
    files::{copy_tree, write_atomically},
};

fn io_error(what: &str, path: &Path, error: &std::io::Error) -> Status {
    Status::internal(format!("cannot {what} {}: {error}", path.display()))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// Stores the file under its name, unless the archive has it already: with
/// the same content that is a success, with another an error.
pub(crate) async fn archive(call: WalArchiveCall<()>) -> Result<(), Status> {
    let config = Config::from_cluster(&call.cluster)?;
    let name = &call.file;
    let source = Path::new(&call.source_path);
    if !source.is_absolute() {
        return Err(Status::invalid_argument(format!(
            "source_file_name {} is not an absolute path",
            call.source_path
        )));
    }
    let contents = std::fs::read(source).map_err(|e| io_error("read", source, &e))?;
    // A slow store: the file read, not yet stored (a client killed now has
    // no answer, and the store may still get the file).
    tokio::time::sleep(config.archive_delay).await;
    let archive = config.archive()?;
    if call.check_empty_wal_archive == Some(true) {
        // As CloudNativePG's plugins: a new instance must not archive
        // into another cluster's WAL (only this very file may be there).
        let others = std::fs::read_dir(archive)
            .map_err(|e| io_error("read", archive, &e))?
            .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
            .any(|file| file != name.as_str() && file != "base");
        if others {
            return Err(Status::failed_precondition(format!(
                "the archive {} is not empty",
                archive.display()
            )));
        }
    }
    let target = archive.join(name.as_str());
    let existing = match std::fs::read(&target) {
        Ok(existing) => Some(existing),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error("read", &target, &e)),
    };
    if decide_archive(name, existing.as_deref(), &contents[..])? == ArchiveDecision::Store {
        write_atomically(&target, &contents).map_err(|e| io_error("write", &target, &e))?;
    }
    Ok(())
}

/// Copies the file into place whole, or answers `NOT_FOUND`.
pub(crate) async fn restore(call: WalRestoreCall<()>) -> Result<(), Status> {
    let config = Config::from_cluster(&call.cluster)?;
    let source = config.archive()?.join(call.file.as_str());
    let contents = match std::fs::read(&source) {
        Ok(contents) => contents,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(not_in_archive(&call.file)),
        Err(e) => return Err(io_error("read", &source, &e)),
    };
    let destination = Path::new(&call.destination_path);
    write_atomically(destination, &contents).map_err(|e| io_error("write", destination, &e))
}

/// Copies PGDATA (without `pg_wal` and `postmaster.pid`) into
/// `base/<backup name>/`.
pub(crate) async fn backup(call: BackupCall<()>) -> Result<BackupResult, Status> {
    let config = Config::from_cluster(&call.cluster)?;
    let name = call
        .backup
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.'))
        .ok_or_else(|| Status::invalid_argument("the Backup has no usable metadata.name"))?
        .to_owned();
    if call.backup.pointer("/status/phase").and_then(Value::as_str) != Some("started") {
        return Err(Status::invalid_argument("the Backup is not in phase started"));
    }
    let target = config.archive()?.join("base").join(&name);
    let pgdata = config.pgdata()?.clone();
    if target.exists() {
        return Err(Status::already_exists(format!("backup {name} exists")));
    }
    tokio::time::sleep(config.backup_delay).await;
    let started_at = unix_now();
    let files = copy_tree(&pgdata, &target, &|relative| {
        relative.starts_with("pg_wal") && relative != Path::new("pg_wal") || relative == Path::new("postmaster.pid")
    })
    .map_err(|e| io_error("copy PGDATA into", &target, &e))?;
    let metadata = BTreeMap::from([
        ("files".to_owned(), files.to_string()),
        ("parameters".to_owned(), call.backup_parameters.len().to_string()),
    ]);
    Ok(BackupResult {
        backup_id: name.clone(),
        backup_name: name,
        started_at,
        stopped_at: unix_now(),
        online: false,
        metadata: metadata.into_iter().collect(),
        ..Default::default()
    })
}

/// Copies the latest base backup (by name) into PGDATA.
pub(crate) async fn restore_job(call: RestoreJobCall<()>) -> Result<RestoreResponse, Status> {
    let config = Config::from_cluster(&call.cluster)?;
    let base = config.archive()?.join("base");
    let latest = std::fs::read_dir(&base)
        .map_err(|e| io_error("read", &base, &e))?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .max()
        .ok_or_else(|| Status::not_found(format!("no base backup in {}", base.display())))?;
    let pgdata = config.pgdata()?;
    copy_tree(&base.join(&latest), pgdata, &|_| false).map_err(|e| io_error("restore into", pgdata, &e))?;
    std::fs::create_dir_all(pgdata.join("pg_wal")).map_err(|e| io_error("create", pgdata, &e))?;
    // A slow verification after the copy (`restoreDelaySeconds`): a
    // deadline or a kill then leaves PGDATA filled, as a real restore
    // that fails late would.
    tokio::time::sleep(config.restore_delay).await;
    let check_empty = match call.check_empty_wal_archive {
        Some(check) => check.to_string(),
        None => "unset".to_owned(),
    };
    Ok(RestoreResponse {
        restore_config: format!(
            "recovery_target_action = promote\nrestore_command = '{}'\n",
            config.restore_command.replace('\'', "''")
        ),
        envs: vec![
            format!("CNPGI_DIR_PLUGIN_BACKUP={latest}"),
            format!("CNPGI_DIR_PLUGIN_CHECK_EMPTY_WAL_ARCHIVE={check_empty}"),
        ],
    })
}

/// Adds the `enrich` parameter's settings to the configuration.
pub(crate) fn enrich_configuration(
    cluster: &Cluster,
    _: &(),
    _: PostgresOperation,
    configs: &mut std::collections::HashMap<String, String>,
) -> Result<(), Status> {
    configs.extend(Config::from_cluster(cluster)?.enrich);
    Ok(())
}

fn metric_set() -> MetricSet {
    MetricSet::new()
        .gauge(
            "cnpgi_dir_plugin_archive_files",
            "WAL files in the archive directory, by kind",
            &["kind"],
        )
        .gauge(
            "cnpgi_dir_plugin_base_backups",
            "Base backups in the archive directory",
            &[],
        )
}

/// The Metrics service, written by hand: with `badMetrics: undefined` it
/// answers a value it did not define, past the checks the declarative
/// `Plugin::metrics` makes, to test what the instance manager does with a
/// faulty plugin.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Metrics;

#[tonic::async_trait]
impl metrics_server::Metrics for Metrics {
    async fn get_capabilities(
        &self,
        _: Request<MetricsCapabilitiesRequest>,
    ) -> Result<Response<MetricsCapabilitiesResult>, Status> {
        Ok(Response::new(metric_set().capabilities()))
    }

    async fn define(&self, _: Request<DefineMetricsRequest>) -> Result<Response<DefineMetricsResult>, Status> {
        Ok(Response::new(metric_set().define()))
    }

    async fn collect(&self, request: Request<CollectMetricsRequest>) -> Result<Response<CollectMetricsResult>, Status> {
        let config = Config::from_cluster(&decode_cluster(&request.get_ref().cluster_definition)?)?;
        let archive = config.archive()?;
        let mut counts = BTreeMap::from([("segment", 0.0), ("partial", 0.0), ("history", 0.0), ("backup", 0.0)]);
        for entry in std::fs::read_dir(archive)
            .map_err(|e| io_error("read", archive, &e))?
            .flatten()
        {
            if let Some(name) = entry.file_name().to_str()
                && let Ok(wal) = WalFileName::parse(name)
            {
                let kind = match wal.kind() {
                    WalFileKind::Segment => "segment",
                    WalFileKind::Partial => "partial",
                    WalFileKind::History => "history",
                    WalFileKind::Backup => "backup",
                };
                *counts.entry(kind).or_default() += 1.0;
            }
        }
        let backups = std::fs::read_dir(archive.join("base")).map_or(0, Iterator::count);
        let mut samples: Vec<(&str, f64, Vec<String>)> = counts
            .into_iter()
            .map(|(kind, count)| ("cnpgi_dir_plugin_archive_files", count, vec![kind.to_owned()]))
            .collect();
        samples.push(("cnpgi_dir_plugin_base_backups", backups as f64, Vec::new()));
        let mut answer = metric_set().collect(samples)?;
        if config.bad_metrics {
            // Past the SDK's check on purpose: what a faulty plugin sends.
            answer.metrics.push(CollectMetric {
                value: 1.0,
                fq_name: "cnpgi_dir_plugin_undefined".to_owned(),
                variable_labels: Vec::new(),
            });
        }
        Ok(Response::new(answer))
    }
}
