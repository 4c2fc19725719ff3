//! The plugin's services.

use std::{
    collections::BTreeMap,
    path::Path,
    time::{SystemTime, UNIX_EPOCH},
};

use cnpgi_pluginhelper::{
    capabilities::{ServiceType, backup_rpc, restore_job_hook, service},
    metrics::MetricSet,
    postgres,
    proto::{
        backup::v1::{
            BackupCapabilitiesRequest, BackupCapabilitiesResult, BackupRequest, BackupResult, backup_capability,
            backup_server,
        },
        identity::v1::{
            EnrichConfigurationRequest, EnrichConfigurationResult, GetPluginCapabilitiesRequest,
            GetPluginCapabilitiesResponse, GetPluginMetadataRequest, GetPluginMetadataResponse,
            PostgresCapabilitiesRequest, PostgresCapabilitiesResult, ProbeRequest, ProbeResponse, identity_server,
            postgres_server,
        },
        metrics::v1::{
            CollectMetric, CollectMetricsRequest, CollectMetricsResult, DefineMetricsRequest, DefineMetricsResult,
            MetricsCapabilitiesRequest, MetricsCapabilitiesResult, metrics_server,
        },
        wal::v1::{
            RestoreJobHooksCapabilitiesRequest, RestoreJobHooksCapabilitiesResult, RestoreRequest, RestoreResponse,
            WalArchiveRequest, WalArchiveResult, WalCapabilitiesRequest, WalCapabilitiesResult, WalRestoreRequest,
            WalRestoreResult, restore_job_hooks_capability, restore_job_hooks_server, wal_capability, wal_server,
        },
    },
    wal::{self, ArchiveDecision, WalFileKind, WalFileName, decide_archive},
};
use serde_json::Value;
use tonic::{Request, Response, Status};

use crate::{
    config::{Config, NAME},
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

/// The Identity service.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Identity;

#[tonic::async_trait]
impl identity_server::Identity for Identity {
    async fn get_plugin_metadata(
        &self,
        _: Request<GetPluginMetadataRequest>,
    ) -> Result<Response<GetPluginMetadataResponse>, Status> {
        Ok(Response::new(GetPluginMetadataResponse {
            name: NAME.to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            display_name: "Directory archive (test plugin)".to_owned(),
            description: "Keeps WAL files and base backups in a local directory".to_owned(),
            ..Default::default()
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: Request<GetPluginCapabilitiesRequest>,
    ) -> Result<Response<GetPluginCapabilitiesResponse>, Status> {
        Ok(Response::new(GetPluginCapabilitiesResponse {
            capabilities: [
                ServiceType::WalService,
                ServiceType::BackupService,
                ServiceType::RestoreJob,
                ServiceType::Postgres,
                ServiceType::Metrics,
            ]
            .into_iter()
            .map(service)
            .collect(),
        }))
    }

    async fn probe(&self, _: Request<ProbeRequest>) -> Result<Response<ProbeResponse>, Status> {
        Ok(Response::new(ProbeResponse { ready: true }))
    }
}

/// Every other service, on the directory the Cluster names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Dir;

#[tonic::async_trait]
impl wal_server::Wal for Dir {
    async fn get_capabilities(
        &self,
        _: Request<WalCapabilitiesRequest>,
    ) -> Result<Response<WalCapabilitiesResult>, Status> {
        Ok(Response::new(wal::capabilities([
            wal_capability::rpc::Type::ArchiveWal,
            wal_capability::rpc::Type::RestoreWal,
        ])))
    }

    /// Stores the file under its name, unless the archive has it already:
    /// with the same content that is a success, with another an error.
    async fn archive(&self, request: Request<WalArchiveRequest>) -> Result<Response<WalArchiveResult>, Status> {
        let request = request.into_inner();
        let config = Config::from_cluster(&request.cluster_definition)?;
        let name = WalFileName::from_path(&request.source_file_name)?;
        let source = Path::new(&request.source_file_name);
        if !source.is_absolute() {
            return Err(Status::invalid_argument(format!(
                "source_file_name {} is not an absolute path",
                request.source_file_name
            )));
        }
        let contents = std::fs::read(source).map_err(|e| io_error("read", source, &e))?;
        let archive = config.archive()?;
        if request.check_empty_wal_archive == Some(true) {
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
        if decide_archive(&name, existing.as_deref(), &contents[..])? == ArchiveDecision::Store {
            write_atomically(&target, &contents).map_err(|e| io_error("write", &target, &e))?;
        }
        Ok(Response::new(WalArchiveResult {}))
    }

    /// Copies the file into place whole, or answers `NOT_FOUND`.
    async fn restore(&self, request: Request<WalRestoreRequest>) -> Result<Response<WalRestoreResult>, Status> {
        let request = request.into_inner();
        let config = Config::from_cluster(&request.cluster_definition)?;
        let name = WalFileName::parse(&request.source_wal_name)?;
        let source = config.archive()?.join(name.as_str());
        let contents = match std::fs::read(&source) {
            Ok(contents) => contents,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(wal::not_in_archive(&name)),
            Err(e) => return Err(io_error("read", &source, &e)),
        };
        let destination = Path::new(&request.destination_file_name);
        write_atomically(destination, &contents).map_err(|e| io_error("write", destination, &e))?;
        Ok(Response::new(WalRestoreResult {}))
    }
}

#[tonic::async_trait]
impl backup_server::Backup for Dir {
    async fn get_capabilities(
        &self,
        _: Request<BackupCapabilitiesRequest>,
    ) -> Result<Response<BackupCapabilitiesResult>, Status> {
        Ok(Response::new(BackupCapabilitiesResult {
            capabilities: vec![backup_rpc(backup_capability::rpc::Type::Backup)],
        }))
    }

    /// Copies PGDATA (without `pg_wal` and `postmaster.pid`) into
    /// `base/<backup name>/`.
    async fn backup(&self, request: Request<BackupRequest>) -> Result<Response<BackupResult>, Status> {
        let request = request.into_inner();
        let config = Config::from_cluster(&request.cluster_definition)?;
        let backup: Value = serde_json::from_slice(&request.backup_definition)
            .map_err(|e| Status::invalid_argument(format!("the Backup is not JSON: {e}")))?;
        let name = backup
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty() && !n.contains('/') && !n.starts_with('.'))
            .ok_or_else(|| Status::invalid_argument("the Backup has no usable metadata.name"))?
            .to_owned();
        if backup.pointer("/status/phase").and_then(Value::as_str) != Some("started") {
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
            ("parameters".to_owned(), request.parameters.len().to_string()),
        ]);
        Ok(Response::new(BackupResult {
            backup_id: name.clone(),
            backup_name: name,
            started_at,
            stopped_at: unix_now(),
            online: false,
            metadata: metadata.into_iter().collect(),
            ..Default::default()
        }))
    }
}

#[tonic::async_trait]
impl restore_job_hooks_server::RestoreJobHooks for Dir {
    async fn get_capabilities(
        &self,
        _: Request<RestoreJobHooksCapabilitiesRequest>,
    ) -> Result<Response<RestoreJobHooksCapabilitiesResult>, Status> {
        Ok(Response::new(RestoreJobHooksCapabilitiesResult {
            capabilities: vec![restore_job_hook(restore_job_hooks_capability::Kind::Restore)],
        }))
    }

    /// Copies the latest base backup (by name) into PGDATA.
    async fn restore(&self, request: Request<RestoreRequest>) -> Result<Response<RestoreResponse>, Status> {
        let config = Config::from_cluster(&request.get_ref().cluster_definition)?;
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
        let check_empty = match request.get_ref().check_empty_wal_archive {
            Some(check) => check.to_string(),
            None => "unset".to_owned(),
        };
        Ok(Response::new(RestoreResponse {
            restore_config: format!(
                "recovery_target_action = promote\nrestore_command = '{}'\n",
                config.restore_command.replace('\'', "''")
            ),
            envs: vec![
                format!("CNPGI_DIR_PLUGIN_BACKUP={latest}"),
                format!("CNPGI_DIR_PLUGIN_CHECK_EMPTY_WAL_ARCHIVE={check_empty}"),
            ],
        }))
    }
}

#[tonic::async_trait]
impl postgres_server::Postgres for Dir {
    async fn get_capabilities(
        &self,
        _: Request<PostgresCapabilitiesRequest>,
    ) -> Result<Response<PostgresCapabilitiesResult>, Status> {
        Ok(Response::new(postgres::capabilities()))
    }

    async fn enrich_configuration(
        &self,
        request: Request<EnrichConfigurationRequest>,
    ) -> Result<Response<EnrichConfigurationResult>, Status> {
        let request = request.into_inner();
        let config = Config::from_cluster(&request.cluster_definition)?;
        Ok(Response::new(postgres::enrich(&request.configs, |map| {
            map.extend(config.enrich);
        })))
    }
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

#[tonic::async_trait]
impl metrics_server::Metrics for Dir {
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
        let config = Config::from_cluster(&request.get_ref().cluster_definition)?;
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
