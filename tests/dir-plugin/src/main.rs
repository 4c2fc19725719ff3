//! `cnpgi-dir-plugin`: a CNPG-I plugin that keeps WAL files and base
//! backups in a local directory, for the tests of the instance commands
//! (`cnpgi-operator wal-archive`, `wal-restore`, `backup`, `restore`,
//! `metrics`), of `check-plugin` and of the Go client. Built on the SDK's
//! helpers like any plugin, served with `cnpgi-dir-plugin plugin
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
//! * `backupDelaySeconds`: how long a backup waits before it starts;
//! * `restoreCommand`: the `restore_command` of the restore configuration
//!   (default `cnpgi-operator wal-restore %f %p`);
//! * `badMetrics`: `undefined` collects a value it did not define.

mod config;
mod files;
mod services;

use cnpgi_pluginhelper::{
    create_main_cmd,
    proto::{
        backup::v1::backup_server::BackupServer,
        identity::v1::postgres_server::PostgresServer,
        metrics::v1::metrics_server::MetricsServer,
        wal::v1::{restore_job_hooks_server::RestoreJobHooksServer, wal_server::WalServer},
    },
};

fn main() -> std::process::ExitCode {
    create_main_cmd(services::Identity, |routes| {
        routes
            .add_service(WalServer::new(services::Dir))
            .add_service(BackupServer::new(services::Dir))
            .add_service(RestoreJobHooksServer::new(services::Dir))
            .add_service(PostgresServer::new(services::Dir))
            .add_service(MetricsServer::new(services::Dir));
    })
    .execute()
}
