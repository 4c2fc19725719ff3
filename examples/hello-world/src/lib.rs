//! The CNPG-I hello-world plugin, written with `cnpgi-pluginhelper`.
//!
//! It does what upstream's Go hello-world does: it reads two parameters,
//! `labels` and `annotations` (JSON objects of strings), validates them,
//! writes their defaults back into the Cluster, forbids changing the labels,
//! and adds the labels, the annotations and a `pauser` sidecar to every
//! instance Pod. Read the modules in this order: [`metadata`], [`identity`],
//! [`config`], [`operator`], [`lifecycle`].

#![forbid(unsafe_code)]

pub mod config;
pub mod identity;
pub mod lifecycle;
pub mod metadata;
pub mod operator;

use cnpgi_pluginhelper::{
    PluginCommand, create_main_cmd,
    proto::{
        operator::v1::operator_server::OperatorServer,
        operator_lifecycle::v1::operator_lifecycle_server::OperatorLifecycleServer,
    },
    server::PluginServer,
};

/// The `plugin` command of the binary.
pub fn command() -> PluginCommand<identity::Identity> {
    create_main_cmd(identity::Identity, register)
}

/// The plugin as a server, for in-process tests.
pub fn server() -> PluginServer<identity::Identity> {
    PluginServer::new(identity::Identity).register(register)
}

/// Registers the services this plugin implements besides Identity.
fn register(routes: &mut cnpgi_pluginhelper::tonic::service::RoutesBuilder) {
    routes
        .add_service(OperatorServer::new(operator::Operator))
        .add_service(OperatorLifecycleServer::new(lifecycle::Lifecycle));
}
