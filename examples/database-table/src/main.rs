//! The DatabaseTable operator: a kube-rs `Controller` whose work is done by
//! CNPG-I plugins, through the `cnpgi-host` library, in one file.
//!
//! For each `DatabaseTable` it:
//!
//! 1. holds the finalizer `cnpgi.io/plugins` ([`PluginFinalizer`]); a deleted
//!    table's plugins are asked to clean up (ReconcilerHooks `Pre` with
//!    `metadata.deletionTimestamp` set) until they answer `CONTINUE` or
//!    `--cleanup-deadline` passes;
//! 2. routes it to its plugins with the objects it references
//!    ([`Host::routed_with_references`]), the implementation chosen among
//!    the ready ones when the preferred one is not (an Event says which and
//!    why, once per new choice);
//! 3. runs the implementation's reconciler hooks (it makes the table match);
//! 4. writes the status (phase, the choice, `ReferencesResolved`, the
//!    plugins' entries) and each plugin's report on a referenced object into
//!    that object's `status.cnpgiReports.<plugin>`.
//!
//! Plugins are found as labelled Services in `--namespace`, as Unix sockets
//! in `--plugin-dir`, and, with `--registration-address`, when they
//! register themselves over mutual TLS. A change of a referenced
//! `PostgreSqlDatabaseTable` or `MariaDbDatabaseTable` reconciles the tables
//! referencing it. `--print-crd` prints the three CRDs (as in `manifests/crd.yaml`).

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use clap::Parser;
use cnpgi_example_database_table::{
    DatabaseTable, ImplementationLayout, MariaDbDatabaseTable, PostgreSqlDatabaseTable,
};
use cnpgi_host::{
    Host, HostError, HostOptions,
    choice::{self, ImplementationDecision},
    deletion::{FinalizerError, PluginFinalizer},
    discovery::{
        kubernetes::KubernetesServices,
        registration::{PluginTlsFiles, Registration, RegistrationOptions, ServerTlsFiles},
        socket_dir::SocketDirectory,
    },
    references::{self, ReferenceResolver},
    routing::{HookOutcome, HookPhase, PluginLayout, RoutedResource},
    webhook::{self, AdmissionPaths},
};
use futures_util::StreamExt;
use kube::{
    Api, Client, CustomResourceExt, Resource, ResourceExt,
    api::{ApiResource, DynamicObject, Patch, PatchParams},
    runtime::{
        Controller,
        controller::Action,
        events::{Recorder, Reporter},
        watcher,
    },
};
use serde_json::{Value, json};

/// The name the operator's Events, finalizer patches and Service discovery go by.
const OPERATOR: &str = "database-table-operator";

/// How long the API server has to take a status patch.
const API_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser)]
#[command(version, about = "The DatabaseTable operator: tables implemented by CNPG-I plugins")]
struct Args {
    /// Print the CRDs (DatabaseTable, PostgreSqlDatabaseTable, MariaDbDatabaseTable; YAML, for `kubectl apply -f -`) and exit.
    #[arg(long)]
    print_crd: bool,
    /// The operator's namespace, where plugin Services are discovered.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    namespace: String,
    /// Also discover plugins as Unix sockets in this directory (repeatable).
    #[arg(long, value_name = "DIR")]
    plugin_dir: Vec<PathBuf>,
    /// Serve the admission webhooks over HTTPS with `tls.crt` and `tls.key` from this directory.
    #[arg(long, value_name = "DIR")]
    webhook_cert_dir: Option<PathBuf>,
    /// Where the webhooks listen.
    #[arg(long, default_value = "0.0.0.0:9443")]
    webhook_address: SocketAddr,
    /// Serve plugin registration (`cnpgi.registration.v1`, mutual TLS) on this address, e.g. `0.0.0.0:9090`.
    #[arg(long, value_name = "ADDRESS", requires_all = ["registration_cert_dir", "plugin_ca", "plugin_client_cert_dir"])]
    registration_address: Option<SocketAddr>,
    /// The registration service's `tls.crt` and `tls.key`, and `ca.crt`: the CA plugin client certificates must chain to.
    #[arg(long, value_name = "DIR", requires = "registration_address")]
    registration_cert_dir: Option<PathBuf>,
    /// The CA registered plugins' serving certificates must chain to.
    #[arg(long, value_name = "FILE", requires = "registration_address")]
    plugin_ca: Option<PathBuf>,
    /// The client certificate the operator presents to registered plugins: `tls.crt` and `tls.key` in this directory.
    #[arg(long, value_name = "DIR", requires = "registration_address")]
    plugin_client_cert_dir: Option<PathBuf>,
    /// How long a registered plugin stays without a heartbeat before it is forgotten (`30s`, `2m`).
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration)]
    registration_ttl: Duration,
    /// How long a deleted table waits for its plugins' cleanup before its finalizer goes anyway (`2m`, `90s`).
    #[arg(long, value_name = "DURATION", default_value = "2m", value_parser = duration)]
    cleanup_deadline: Duration,
}

/// A duration flag: `30s`, `2m`, `1h30m` (jiff's friendly format), more than 0.
fn duration(text: &str) -> Result<Duration, String> {
    // jiff's friendly format (k8s-openapi's time crate): 30s, 2m, 1h30m...
    let parsed: k8s_openapi::jiff::SignedDuration = text
        .parse()
        .map_err(|e| format!("{text:?} is not a duration (30s, 2m, 1h): {e}"))?;
    match Duration::try_from(parsed) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(format!("{text:?}: must be more than 0")),
    }
}

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("cannot write the status of DatabaseTable {object}: {why}")]
    Status { object: String, why: String },
}

/// What every reconcile shares.
struct Context {
    client: Client,
    host: Host<DatabaseTable>,
    resolver: ReferenceResolver,
    finalizer: PluginFinalizer<DatabaseTable>,
    recorder: Recorder,
}

/// The finalizer first: a live table gets it, then [`apply`]; a deleted one
/// gets its plugins' cleanup.
async fn reconcile(table: Arc<DatabaseTable>, ctx: Arc<Context>) -> Result<Action, FinalizerError<Error>> {
    let api: Api<DatabaseTable> = Api::namespaced(ctx.client.clone(), &table.namespace().unwrap_or_default());
    let finalizer = ctx.finalizer.clone();
    finalizer.reconcile(&api, table, |table| apply(table, ctx)).await
}

/// Makes a live table match: its implementation's reconciler hooks, then
/// the status, and the plugins' reports on the objects it references.
async fn apply(table: Arc<DatabaseTable>, ctx: Arc<Context>) -> Result<Action, Error> {
    let resource = ctx.host.routed_with_references(&table, &ctx.resolver).await?;
    // The implementation serving the table is gone: it stays chosen (the
    // table does not move to another server by itself), and the status says
    // why until it is back.
    if let Some(why) = resource
        .implementation_choice()
        .and_then(|decision| decision.unavailable.clone())
    {
        let status = status_without_plugins(&resource, true);
        write_status(&ctx, &table, status, "Failed", why).await?;
        return Ok(Action::requeue(Duration::from_secs(10)));
    }
    announce_choice(&table, &resource, &ctx).await;
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
    let namespace = table.namespace().unwrap_or_default();
    let status = match ctx.host.plugin_status_and_reports(&resource).await {
        Ok((status, reports)) => {
            for (plugin, reports) in reports {
                for failure in ctx.resolver.write_reports(&namespace, &plugin, &reports).await {
                    tracing::warn!(table = %table.name_any(), %failure, "reference report not written");
                }
            }
            status
        }
        // A plugin missing: its entry cannot be asked for; the choice and
        // the references are still said, and the message says why.
        Err(error) => {
            tracing::warn!(table = %table.name_any(), %error, "plugin status not available");
            status_without_plugins(&resource, true)
        }
    };
    write_status(&ctx, &table, status, phase, message).await?;
    Ok(action)
}

/// Patches `table`'s status with `status`, `phase`, `message` and the generation, within [`API_TIMEOUT`].
async fn write_status(
    ctx: &Context,
    table: &DatabaseTable,
    mut status: Value,
    phase: &str,
    message: String,
) -> Result<(), Error> {
    status["phase"] = json!(phase);
    status["message"] = json!(message);
    status["observedGeneration"] = json!(table.metadata.generation);
    let namespace = table.namespace().unwrap_or_default();
    let api: Api<DatabaseTable> = Api::namespaced(ctx.client.clone(), &namespace);
    let patch = Patch::Merge(json!({ "status": status }));
    let object = format!("{namespace}/{}", table.name_any());
    let written = tokio::time::timeout(
        API_TIMEOUT,
        api.patch_status(&table.name_any(), &PatchParams::default(), &patch),
    )
    .await;
    match written {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(Error::Status {
            object,
            why: error.to_string(),
        }),
        Err(_) => Err(Error::Status {
            object,
            why: format!("no answer from the API server within {} s", API_TIMEOUT.as_secs()),
        }),
    }
}

/// The status when the plugins' entries cannot be had: the entries as they
/// were, the implementation choice (when `record_choice`) and the
/// `ReferencesResolved` condition.
fn status_without_plugins(resource: &RoutedResource, record_choice: bool) -> Value {
    let mut status = resource.value().get("status").cloned().unwrap_or_else(|| json!({}));
    if !status.is_object() {
        status = json!({});
    }
    if let (true, Some(choice), Some(decision)) = (
        record_choice,
        ImplementationLayout.implementation_choice(),
        resource.implementation_choice(),
    ) {
        status[choice.status_field] = json!(decision);
    }
    if let Some(resolved) = resource.references() {
        references::set_condition(&mut status, references::references_condition(resolved));
    }
    status
}

/// Publishes an Event when the implementation chosen for `table` is a new
/// one (not what its status recorded): which, and why.
async fn announce_choice(table: &DatabaseTable, resource: &RoutedResource, ctx: &Context) {
    let (Some(choice), Some(decision)) = (
        ImplementationLayout.implementation_choice(),
        resource.implementation_choice(),
    ) else {
        return;
    };
    let previous = ImplementationDecision::recorded(&choice, resource.value());
    let reference = table.object_ref(&());
    match choice::publish_event(&ctx.recorder, &reference, previous.as_ref(), decision).await {
        Ok(true) => tracing::info!(table = %table.name_any(), chosen = ?decision.chosen, reason = ?decision.reason,
            "implementation chosen"),
        Ok(false) => {}
        Err(error) => {
            tracing::warn!(table = %table.name_any(), %error, "the implementation choice's Event not published")
        }
    }
}

fn error_policy(table: Arc<DatabaseTable>, error: &FinalizerError<Error>, _: Arc<Context>) -> Action {
    tracing::warn!(table = %table.name_any(), %error, "reconcile failed; retrying in 10 s");
    Action::requeue(Duration::from_secs(10))
}

/// Starts the discovery sources the flags ask for, and waits (bounded) for
/// their first pass.
async fn discover(host: &Host<DatabaseTable>, client: &Client, args: &Args) -> anyhow::Result<()> {
    let options = host.client_options();
    host.discover(KubernetesServices::new(
        client.clone(),
        &args.namespace,
        OPERATOR,
        options.clone(),
    ));
    for dir in &args.plugin_dir {
        host.discover(SocketDirectory {
            options: options.clone(),
            ..SocketDirectory::new(dir)
        });
    }
    if let (Some(address), Some(cert_dir), Some(plugin_ca), Some(client_dir)) = (
        args.registration_address,
        &args.registration_cert_dir,
        &args.plugin_ca,
        &args.plugin_client_cert_dir,
    ) {
        let server_tls = ServerTlsFiles {
            cert: cert_dir.join("tls.crt"),
            key: cert_dir.join("tls.key"),
            client_ca: Some(cert_dir.join("ca.crt")),
        };
        let plugin_tls = PluginTlsFiles {
            client_cert: client_dir.join("tls.crt"),
            client_key: client_dir.join("tls.key"),
            server_ca: plugin_ca.clone(),
        };
        let options = RegistrationOptions {
            ttl: args.registration_ttl,
            client: options,
            ..RegistrationOptions::new(address, server_tls, plugin_tls)
        };
        let registration = Registration::bind(options).await?;
        tracing::info!(address = %registration.local_addr(), ttl = ?args.registration_ttl, "serving plugin registration");
        host.discover(registration);
    }
    // Serve and reconcile once discovery had its look; bounded, as an
    // unreachable API server keeps the Services' first pass pending.
    if tokio::time::timeout(Duration::from_secs(30), host.ready())
        .await
        .is_ok()
    {
        let plugins: Vec<String> = host.plugins().iter().map(|p| p.name().to_owned()).collect();
        tracing::info!(?plugins, "plugin discovery done");
    } else {
        let pending = host.pending_sources();
        tracing::warn!(?pending, "plugin discovery not done after 30 s; going on");
    }
    Ok(())
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
    let host = Host::<DatabaseTable>::new(HostOptions {
        cleanup_deadline: args.cleanup_deadline,
        ..HostOptions::default()
    });
    discover(&host, &client, &args).await?;

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

    let reporter = Reporter {
        controller: OPERATOR.to_owned(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let recorder = Recorder::new(client.clone(), reporter);
    let context = Arc::new(Context {
        client: client.clone(),
        resolver: ReferenceResolver::new(client.clone()),
        finalizer: PluginFinalizer::new(host.clone(), recorder.clone()),
        recorder,
        host,
    });
    let plugin_changes = context.host.plugin_changes();
    let mut controller = Controller::new(Api::<DatabaseTable>::all(client.clone()), watcher::Config::default());
    // A change of a referenced object reconciles the tables referencing it.
    let tables = controller.store();
    for kind in [
        ApiResource::erase::<PostgreSqlDatabaseTable>(&()),
        ApiResource::erase::<MariaDbDatabaseTable>(&()),
    ] {
        let tables = tables.clone();
        controller = controller.watches_with(
            Api::<DynamicObject>::all_with(client.clone(), &kind),
            kind,
            watcher::Config::default(),
            move |object| references::referencing(&tables, &ImplementationLayout, &object),
        );
    }
    controller
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_written() {
        assert_eq!(duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(duration("1m30s"), Ok(Duration::from_secs(90)));
        for bad in ["", "s", "0s", "-1s", "soon"] {
            assert!(duration(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_registration_flags_go_together() {
        let parse = |args: &[&str]| Args::try_parse_from(std::iter::once(OPERATOR).chain(args.iter().copied()));
        let all = parse(&[
            "--registration-address=0.0.0.0:9090",
            "--registration-cert-dir=/r",
            "--plugin-ca=/ca.crt",
            "--plugin-client-cert-dir=/c",
            "--registration-ttl=20s",
        ])
        .map_err(|e| e.to_string());
        let all = all.as_ref().map(|a| (a.registration_address, a.registration_ttl));
        assert_eq!(
            all,
            Ok((
                Some("0.0.0.0:9090".parse().unwrap_or(SocketAddr::from(([0; 4], 0)))),
                Duration::from_secs(20)
            ))
        );
        assert!(parse(&["--registration-address=0.0.0.0:9090"]).is_err());
        assert!(parse(&["--plugin-ca=/ca.crt"]).is_err());
        let defaults = parse(&[])
            .map(|a| (a.registration_ttl, a.cleanup_deadline))
            .map_err(|e| e.to_string());
        assert_eq!(defaults, Ok((Duration::from_secs(30), Duration::from_secs(120))));
    }
}
