//! A CNPG-I plugin that archives PostgreSQL's WAL and takes base backups
//! into an object store, and restores them.
//!
//! Read the README first. The modules, by job:
//!
//! * [`parameters`] and [`cluster`]: what a Cluster asks for;
//! * [`store`] and [`object`]: where objects go and what they look like;
//! * [`wal`]: `archive_command` and `restore_command` (the WAL service);
//! * [`backup`], [`manifest`], [`lsn`]: base backups (the Backup service) and retention;
//! * [`restore`] and [`pgtime`]: restoring a backup into an empty PGDATA (RestoreJobHooks);
//! * [`lifecycle`]: the sidecar in instance Pods and the recovery Job (OperatorLifecycle);
//! * [`operator`]: parameter validation (Operator);
//! * [`metrics`]: what the instance manager scrapes (Metrics);
//! * [`identity`], [`metadata`], [`state`]: the rest.

#![forbid(unsafe_code)]

pub mod backup;
pub mod cluster;
pub mod identity;
pub mod lifecycle;
pub mod lsn;
pub mod manifest;
pub mod metadata;
pub mod metrics;
pub mod object;
pub mod operator;
pub mod parameters;
pub mod pgtime;
pub mod restore;
pub mod state;
pub mod store;
pub mod wal;

use cnpgi_pluginhelper::{
    PluginCommand, create_main_cmd,
    proto::{
        backup::v1::backup_server::BackupServer,
        metrics::v1::metrics_server::MetricsServer,
        operator::v1::operator_server::OperatorServer,
        operator_lifecycle::v1::operator_lifecycle_server::OperatorLifecycleServer,
        wal::v1::{restore_job_hooks_server::RestoreJobHooksServer, wal_server::WalServer},
    },
    server::PluginServer,
};

/// The `plugin` command of the binary.
pub fn command() -> PluginCommand<identity::Identity> {
    let state = state::State::new();
    create_main_cmd(identity::Identity, move |routes| register(routes, state))
}

/// The plugin as a server, for in-process tests.
pub fn server() -> PluginServer<identity::Identity> {
    let state = state::State::new();
    PluginServer::new(identity::Identity).register(move |routes| register(routes, state))
}

/// Registers the services this plugin implements besides Identity (the
/// configuration of `lifecycle` and `restore` comes from the environment:
/// `SIDECAR_IMAGE`, `PGDATA`, `WAL_ARCHIVE_RESTORE_COMMAND`).
fn register(routes: &mut cnpgi_pluginhelper::tonic::service::RoutesBuilder, state: state::State) {
    routes
        .add_service(OperatorServer::new(operator::Operator))
        .add_service(OperatorLifecycleServer::new(lifecycle::Lifecycle::from_env()))
        .add_service(WalServer::new(wal::Wal::new(state.clone())))
        .add_service(BackupServer::new(backup::Backup::new(state.clone())))
        .add_service(RestoreJobHooksServer::new(restore::Restore::new(state.clone())))
        .add_service(MetricsServer::new(metrics::Metrics::new(state)));
}
