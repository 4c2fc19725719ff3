//! The DatabaseTable operator: a kube-rs `Controller` whose work is done by
//! CNPG-I plugins, through the `cnpgi-host` library (`--print-crd`: the CRD,
//! as in `manifests/crd.yaml`).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::Parser;
use cnpgi_example_database_table::{DatabaseTable, MariaDbDatabaseTable, PostgreSqlDatabaseTable};
use cnpgi_host::{
    Host, HostError, HostOptions,
    discovery::{kubernetes::KubernetesServices, socket_dir::SocketDirectory},
    routing::{HookOutcome, HookPhase},
    webhook::{self, AdmissionPaths},
};
use futures_util::StreamExt;
use kube::{
    Api, Client, CustomResourceExt, ResourceExt,
    api::{Patch, PatchParams},
    runtime::{Controller, controller::Action, watcher},
};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Print the DatabaseTable CRD (YAML, for `kubectl apply -f -`) and exit.
    #[arg(long)]
    print_crd: bool,
    /// The operator's namespace, where plugin Services are discovered.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// Also discover plugins as Unix sockets in this directory.
    #[arg(long)]
    plugin_dir: Vec<PathBuf>,
    /// Serve the admission webhooks over HTTPS with `tls.crt` and `tls.key` from this directory.
    #[arg(long)]
    webhook_cert_dir: Option<PathBuf>,
    /// Where the webhooks listen.
    #[arg(long, default_value = "0.0.0.0:9443")]
    webhook_address: SocketAddr,
}

#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("cannot update the status: {0}")]
    Kube(#[from] kube::Error),
}

struct Context {
    client: Client,
    host: Host<DatabaseTable>,
}

/// Runs the implementing plugin's reconciler hooks (it makes the table
/// match), then writes the outcome and the plugin entries in the status.
async fn reconcile(table: Arc<DatabaseTable>, ctx: Arc<Context>) -> Result<Action, Error> {
    let resource = ctx.host.routed(&table)?;
    let outcome = match ctx.host.reconciler_hooks(HookPhase::Pre, &resource).await {
        Ok(HookOutcome::Continue) => ctx.host.reconciler_hooks(HookPhase::Post, &resource).await,
        other => other,
    };
    let (phase, message, action) = match outcome {
        Ok(HookOutcome::Continue) => ("Ready", "in sync".to_owned(), Action::requeue(Duration::from_secs(300))),
        Ok(HookOutcome::Requeue { plugin, after }) => (
            "Progressing",
            format!("{plugin} asked to come back"),
            Action::requeue(after.max(Duration::from_secs(1))),
        ),
        Ok(HookOutcome::Terminate { plugin }) => (
            "Failed",
            format!("{plugin} stopped the reconciliation"),
            Action::await_change(),
        ),
        Err(error) => ("Failed", error.to_string(), Action::requeue(Duration::from_secs(10))),
    };
    // The plugin entries (missing plugins have none; the message says why).
    let mut status = match ctx.host.plugin_status(&resource).await {
        Ok(status) => status,
        Err(error) => {
            tracing::warn!(table = %table.name_any(), %error, "plugin status not available");
            json!({})
        }
    };
    status["phase"] = json!(phase);
    status["message"] = json!(message);
    status["observedGeneration"] = json!(table.metadata.generation);
    let api: Api<DatabaseTable> = Api::namespaced(ctx.client.clone(), &table.namespace().unwrap_or_default());
    let patch = Patch::Merge(json!({ "status": status }));
    api.patch_status(&table.name_any(), &PatchParams::default(), &patch)
        .await?;
    Ok(action)
}

fn error_policy(_: Arc<DatabaseTable>, error: &Error, _: Arc<Context>) -> Action {
    tracing::warn!(%error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(10))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.print_crd {
        for crd in [
            DatabaseTable::crd(),
            PostgreSqlDatabaseTable::crd(),
            MariaDbDatabaseTable::crd(),
        ] {
            print!("---\n{}", serde_yaml_ng::to_string(&crd)?);
        }
        return Ok(());
    }
    cnpgi_process::logging::init(cnpgi_process::logging::LogFormat::Text, "info");
    let client = Client::try_default().await?;
    let host = Host::<DatabaseTable>::new(HostOptions::default());
    let options = host.client_options();
    host.discover(KubernetesServices::new(
        client.clone(),
        &args.namespace,
        "database-table-operator",
        options.clone(),
    ));
    for dir in &args.plugin_dir {
        host.discover(SocketDirectory {
            options: options.clone(),
            ..SocketDirectory::new(dir)
        });
    }
    // Serve and reconcile once discovery had its look; bounded, as an
    // unreachable API server keeps the Services' first pass pending.
    if tokio::time::timeout(Duration::from_secs(30), host.ready())
        .await
        .is_ok()
    {
        let plugins: Vec<String> = host.registry().plugins().iter().map(|p| p.name().to_owned()).collect();
        tracing::info!(?plugins, "plugin discovery done");
    } else {
        let pending = host.registry().pending_sources();
        tracing::warn!(?pending, "plugin discovery not done after 30 s; going on");
    }

    if let Some(dir) = &args.webhook_cert_dir {
        let files = webhook::ServerTlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: None,
        };
        let tls = webhook::ReloadingServerConfig::with_alpn(files, &[b"h2", b"http/1.1"])?;
        let listener = std::net::TcpListener::bind(args.webhook_address)?;
        listener.set_nonblocking(true)?;
        let paths = AdmissionPaths::new("DatabaseTable", "/mutate-databasetable", "/validate-databasetable");
        let app = host.admission_routes(&paths, Duration::from_secs(10));
        tokio::spawn(webhook::serve_https(listener, tls, app, axum_server::Handle::new()));
    }

    let tables: Api<DatabaseTable> = Api::all(client.clone());
    let context = Arc::new(Context { client, host });
    let plugin_changes = context.host.plugin_changes();
    Controller::new(tables, watcher::Config::default())
        // A plugin gone or back shows in every table's status at once.
        .reconcile_all_on(plugin_changes)
        .shutdown_on_signal()
        .run(reconcile, error_policy, context)
        .for_each(|result| async move {
            if let Err(error) = result {
                tracing::warn!(%error, "reconcile error");
            }
        })
        .await;
    Ok(())
}
