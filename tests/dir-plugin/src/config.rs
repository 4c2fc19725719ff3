//! The plugin's parameters, read from the Cluster of each call.

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use cnpgi_pluginhelper::cluster::Cluster;
use serde_json::Value;
use tonic::Status;

/// The plugin's name: its socket, its metadata and `spec.plugins[].name`.
pub(crate) const NAME: &str = "cnpgi-dir-plugin.example.com";

/// What a request's Cluster configures.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    pub(crate) archive: Option<PathBuf>,
    pub(crate) pgdata: Option<PathBuf>,
    pub(crate) enrich: Vec<(String, String)>,
    pub(crate) archive_delay: Duration,
    pub(crate) backup_delay: Duration,
    pub(crate) restore_delay: Duration,
    pub(crate) restore_command: String,
    pub(crate) bad_metrics: bool,
}

impl Config {
    /// The parameters of the plugin's entry in `spec.plugins`, or else of
    /// the external cluster whose plugin it is.
    pub(crate) fn from_cluster(cluster: &Cluster) -> Result<Self, Status> {
        let parameters: BTreeMap<String, String> = match cluster.plugin(NAME) {
            Some(entry) => entry.parameters().clone(),
            None => cluster
                .spec
                .other
                .get("externalClusters")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|external| external.get("plugin"))
                .find(|plugin| plugin.get("name").and_then(Value::as_str) == Some(NAME))
                .and_then(|plugin| plugin.get("parameters"))
                .and_then(|parameters| serde_json::from_value(parameters.clone()).ok())
                .unwrap_or_default(),
        };
        let enrich = match parameters.get("enrich") {
            None => Vec::new(),
            Some(list) => list
                .split(',')
                .map(|pair| {
                    pair.split_once('=')
                        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
                        .ok_or_else(|| Status::invalid_argument(format!("enrich: {pair:?} is not name=value")))
                })
                .collect::<Result<_, _>>()?,
        };
        let delay = |parameter: &str| match parameters.get(parameter) {
            None => Ok(Duration::ZERO),
            Some(seconds) => seconds
                .parse()
                .map(Duration::from_secs)
                .map_err(|_| Status::invalid_argument(format!("{parameter} must be a number of seconds"))),
        };
        let archive_delay = delay("archiveDelaySeconds")?;
        let backup_delay = delay("backupDelaySeconds")?;
        let restore_delay = delay("restoreDelaySeconds")?;
        Ok(Self {
            archive: parameters.get("archive").map(PathBuf::from),
            pgdata: parameters
                .get("pgdata")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("PGDATA").map(PathBuf::from)),
            enrich,
            archive_delay,
            backup_delay,
            restore_delay,
            // What plugins written for CloudNativePG's Pods answer
            // (plugin-barman-cloud's exact string).
            restore_command: parameters.get("restoreCommand").cloned().unwrap_or_else(|| {
                "/controller/manager wal-restore --log-destination /controller/log/postgres.json %f %p".to_owned()
            }),
            bad_metrics: parameters.get("badMetrics").map(String::as_str) == Some("undefined"),
        })
    }

    /// The archive directory, which every storing call needs. A directory
    /// that is not there is a store that is down (an unmounted volume), not
    /// an archive without the file: `UNAVAILABLE`, never `NOT_FOUND`.
    pub(crate) fn archive(&self) -> Result<&PathBuf, Status> {
        let archive = self
            .archive
            .as_ref()
            .ok_or_else(|| Status::failed_precondition(format!("plugin {NAME}: the parameter archive is not set")))?;
        if !archive.is_dir() {
            return Err(Status::unavailable(format!(
                "plugin {NAME}: the archive directory {} is not there (not mounted?)",
                archive.display()
            )));
        }
        Ok(archive)
    }

    /// PGDATA, which backups and restores need.
    pub(crate) fn pgdata(&self) -> Result<&PathBuf, Status> {
        self.pgdata.as_ref().ok_or_else(|| {
            Status::failed_precondition(format!("plugin {NAME}: neither the parameter pgdata nor PGDATA is set"))
        })
    }
}
