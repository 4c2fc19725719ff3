//! `cnpgi-dir-plugin`: a CNPG-I plugin that keeps WAL files and base
//! backups in a local directory, for the tests of the instance commands
//! (`cnpgi-operator wal-archive`, `wal-restore`, `backup`, `restore`,
//! `metrics`), of `check-plugin` and of the Go client. Built on the SDK's
//! declarative API like any plugin, served with `cnpgi-dir-plugin plugin
//! --plugin-path DIR`.
//!
//! Its services: WAL (archive, restore), Backup, RestoreJobHooks, Postgres
//! (EnrichConfiguration) and Metrics. It reads its parameters from its
//! `spec.plugins[]` entry in the Cluster (or, for a restore, from the
//! `spec.externalClusters[].plugin` entry naming it):
//!
//! * `archive` (required): the directory; WAL files at its top, base backups
//!   in `base/<backup name>/`;
//! * `pgdata`: PGDATA, for backups and restores (default: `$PGDATA`);
//! * `enrich`: `name=value[,name=value...]` added by `EnrichConfiguration`
//!   (absent: no change);
//! * `archiveDelaySeconds`: how long an archive waits between reading the
//!   file and storing it (a slow store);
//! * `backupDelaySeconds`: how long a backup waits before it starts;
//! * `restoreCommand`: the `restore_command` of the restore configuration
//!   (default `cnpgi-operator wal-restore %f %p`);
//! * `badMetrics`: `undefined` collects a value it did not define.

mod config;
mod files;
mod handlers;

use cnpgi_pluginhelper::{
    capabilities::ServiceType, plugin::Plugin, proto::identity::v1::GetPluginMetadataResponse,
    proto::metrics::v1::metrics_server::MetricsServer,
};

/// The plugin: each handler registered is a capability advertised. Its
/// parameters are read by the handlers ([`config::Config`]), which take
/// them from the external cluster naming the plugin too.
fn plugin() -> Plugin<()> {
    Plugin::<()>::new(GetPluginMetadataResponse {
        name: config::NAME.to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        display_name: "Directory archive (test plugin)".to_owned(),
        description: "Keeps WAL files and base backups in a local directory".to_owned(),
        ..Default::default()
    })
    .wal_archive(handlers::archive)
    .wal_restore(handlers::restore)
    .backup(handlers::backup)
    .restore_job(handlers::restore_job)
    .enrich_configuration(handlers::enrich_configuration)
    .add_service(ServiceType::Metrics, MetricsServer::new(handlers::Metrics))
}

fn main() -> std::process::ExitCode {
    plugin().command().execute()
}
