//! `cnpgi-operator run`: discovery, webhooks, reconciler, health and metrics.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::SocketAddr,
    ops::ControlFlow,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use anyhow::Context as _;
use axum::{Router as HttpRouter, extract::State, http::StatusCode, routing::get};
use clap::{ArgAction, Args};
use cnpgi_client::client::{ClientOptions, NO_DEADLINE};
use cnpgi_host::{
    Host, HostOptions,
    discovery::{
        DiscoverySource,
        kubernetes::KubernetesServices,
        socket_dir::SocketDirectory,
        static_list::{StaticList, StaticPlugin},
    },
    leader::{LeaderElector, LeaseOptions},
    registry::RegistryOptions,
    routing::RoutingPolicy,
    serving::{self, ServerLimits},
    webhook::serve_https_with,
};
use cnpgi_operator::{
    controller::{self, Context},
    crd::Cluster,
    webhook,
};
use cnpgi_tls::server::{ReloadingServerConfig, ServerTlsFiles};

use cnpgi_process::{
    logging::{self, LogFormat},
    signals::shutdown_signal,
};

use crate::plugins::PluginFlags;
use tokio::sync::watch;

/// A listen address as controller-runtime's `--metrics-bind-address` and
/// `--health-probe-bind-address` take it: `HOST:PORT`, Go's `:PORT` (every
/// interface), or `0`: not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BindAddress(pub(crate) Option<SocketAddr>);

/// Why a bind address flag is not usable.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a listen address: expected HOST:PORT with an IP address, :PORT, or 0 (not served)")]
pub(crate) struct BadBindAddress(String);

impl std::str::FromStr for BindAddress {
    type Err = BadBindAddress;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "0" {
            return Ok(Self(None));
        }
        let address = match text.strip_prefix(':') {
            Some(port) => port
                .parse::<u16>()
                .map(|port| SocketAddr::from(([0, 0, 0, 0], port)))
                .ok(),
            None => text.parse::<SocketAddr>().ok(),
        };
        address
            .map(|a| Self(Some(a)))
            .ok_or_else(|| BadBindAddress(text.to_owned()))
    }
}

/// Flags of `cnpgi-operator run`; each can also come from the environment.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Namespace of the operator, where plugin Services are looked for.
    /// (`--namespace`, its spelling of 0.1, is still read.)
    #[arg(
        long = "operator-namespace",
        alias = "namespace",
        env = "CNPGI_OPERATOR_NAMESPACE",
        default_value = "cnpgi-system"
    )]
    pub(crate) namespace: String,

    /// Reconcile Clusters of this namespace only (default: every namespace).
    #[arg(long, env = "CNPGI_WATCH_NAMESPACE")]
    pub(crate) watch_namespace: Option<String>,

    /// Address of the HTTPS admission webhook server.
    #[arg(long, env = "CNPGI_WEBHOOK_ADDRESS", default_value = "0.0.0.0:9443")]
    pub(crate) webhook_address: SocketAddr,

    /// Directory with the webhook's `tls.crt` and `tls.key` (re-read when they change).
    #[arg(long, env = "CNPGI_WEBHOOK_CERT_DIR", default_value = "/run/secrets/cnpgi-webhook")]
    pub(crate) webhook_cert_dir: PathBuf,

    /// Deadline of a webhook answer, in seconds (keep it below the webhook
    /// configuration's timeoutSeconds).
    #[arg(
        long,
        alias = "webhook-deadline-seconds",
        env = "CNPGI_WEBHOOK_TIMEOUT_SECONDS",
        default_value_t = 8
    )]
    pub(crate) webhook_timeout_seconds: u64,

    /// Do not serve the admission webhooks.
    #[arg(long, env = "CNPGI_DISABLE_WEBHOOKS")]
    pub(crate) disable_webhooks: bool,

    /// Do not reconcile Clusters.
    #[arg(long, env = "CNPGI_DISABLE_CONTROLLER")]
    pub(crate) disable_controller: bool,

    /// Clusters reconciled at once (0: no limit). Each reconcile may call
    /// every plugin of its Cluster, so this also bounds the calls in flight.
    #[arg(
        long,
        env = "CNPGI_MAX_CONCURRENT_RECONCILES",
        default_value_t = controller::DEFAULT_MAX_CONCURRENT_RECONCILES
    )]
    pub(crate) max_concurrent_reconciles: u16,

    /// Address of the plain HTTP server for /metrics: HOST:PORT, :PORT
    /// (every interface) or 0 (not served). Loopback by default: the
    /// metrics are served without authentication, so exposing them beyond
    /// the Pod is an explicit choice (e.g. `:8080` behind a NetworkPolicy).
    #[arg(
        long,
        alias = "metrics-address",
        env = "CNPGI_METRICS_BIND_ADDRESS",
        default_value = "127.0.0.1:8080",
        value_name = "ADDRESS"
    )]
    pub(crate) metrics_bind_address: BindAddress,

    /// Address of the plain HTTP server for the kubelet's probes, /healthz
    /// and /readyz: HOST:PORT, :PORT (every interface) or 0 (not served).
    #[arg(
        long,
        env = "CNPGI_HEALTH_PROBE_BIND_ADDRESS",
        default_value = ":8081",
        value_name = "ADDRESS"
    )]
    pub(crate) health_probe_bind_address: BindAddress,

    /// Discover plugins from labelled Services in the operator's namespace.
    #[arg(long, env = "CNPGI_KUBERNETES_PLUGINS", default_value_t = true, action = ArgAction::Set, value_name = "BOOL")]
    pub(crate) kubernetes_plugins: bool,

    /// Dial HOST:PORT instead of NAME, the `<service>.<namespace>.svc:<port>`
    /// address of a plugin Service (repeatable; the environment variable takes
    /// a comma-separated list). For an operator running outside the cluster,
    /// e.g. through `kubectl port-forward`; the server name verified in the
    /// plugin's certificate does not change.
    #[arg(
        long = "dial-override",
        env = "CNPGI_DIAL_OVERRIDES",
        value_name = "NAME=HOST:PORT",
        value_delimiter = ','
    )]
    pub(crate) dial_overrides: Vec<String>,

    #[command(flatten)]
    pub(crate) plugins: PluginFlags,

    /// A plugin whose failures are skipped instead of failing the operation (repeatable).
    #[arg(
        long = "fail-open",
        env = "CNPGI_FAIL_OPEN",
        value_name = "PLUGIN",
        value_delimiter = ','
    )]
    pub(crate) fail_open: Vec<String>,

    /// How often each plugin's Probe is asked, in seconds.
    #[arg(long, env = "CNPGI_PROBE_INTERVAL_SECONDS", default_value_t = 10)]
    pub(crate) probe_interval_seconds: u64,

    /// Deadline of each plugin call, in seconds (0: none).
    #[arg(
        long,
        env = "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = 30
    )]
    pub(crate) plugin_timeout_seconds: u64,

    /// Time an HTTP client has to send a request's headers (webhook and
    /// metrics servers), in seconds.
    #[arg(long, env = "CNPGI_HTTP_HEADER_READ_TIMEOUT_SECONDS", default_value_t = 32)]
    pub(crate) http_header_read_timeout_seconds: u64,

    /// An HTTP connection without traffic for this long is closed, in seconds.
    #[arg(long, env = "CNPGI_HTTP_IDLE_TIMEOUT_SECONDS", default_value_t = 90)]
    pub(crate) http_idle_timeout_seconds: u64,

    /// Time an HTTP request has to complete, body included, in seconds.
    #[arg(long, env = "CNPGI_HTTP_REQUEST_TIMEOUT_SECONDS", default_value_t = 60)]
    pub(crate) http_request_timeout_seconds: u64,

    /// Connections each HTTP server serves at once; more are closed.
    #[arg(long, env = "CNPGI_HTTP_MAX_CONNECTIONS", default_value_t = 1024)]
    pub(crate) http_max_connections: usize,

    /// After SIGTERM, time given to open HTTP connections to finish, in seconds.
    #[arg(long, env = "CNPGI_SHUTDOWN_GRACE_SECONDS", default_value_t = 10)]
    pub(crate) shutdown_grace_seconds: u64,

    /// Reconcile only while holding the leader Lease (webhooks are served
    /// by every replica).
    #[arg(long, env = "CNPGI_LEADER_ELECT", default_value_t = true, action = ArgAction::Set, value_name = "BOOL")]
    pub(crate) leader_elect: bool,

    /// Name of the leader Lease, in the operator's namespace.
    #[arg(long, env = "CNPGI_LEADER_ELECTION_ID", default_value = "cnpgi-operator-leader")]
    pub(crate) leader_election_id: String,

    /// A Lease not renewed for this long may be taken by another replica, in seconds.
    #[arg(long, env = "CNPGI_LEADER_ELECTION_LEASE_SECONDS", default_value_t = 15)]
    pub(crate) leader_election_lease_seconds: u64,

    /// The leader stops reconciling (and exits) when it could not renew
    /// the Lease for this long, in seconds.
    #[arg(long, env = "CNPGI_LEADER_ELECTION_RENEW_DEADLINE_SECONDS", default_value_t = 10)]
    pub(crate) leader_election_renew_deadline_seconds: u64,

    /// Time between attempts to acquire or renew the Lease, in seconds.
    #[arg(long, env = "CNPGI_LEADER_ELECTION_RETRY_SECONDS", default_value_t = 2)]
    pub(crate) leader_election_retry_seconds: u64,

    /// Log line format.
    #[arg(long, env = "CNPGI_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,

    /// Log filter (RUST_LOG wins when set).
    #[arg(long, env = "CNPGI_LOG_LEVEL", default_value = "info")]
    pub(crate) log_level: String,
}

#[derive(Clone)]
struct Health {
    ready: Arc<AtomicBool>,
    /// `None` while the Kubernetes API answers (or is not used), else why not.
    api: Arc<std::sync::Mutex<Option<String>>>,
}

/// How often the Kubernetes API is checked for `/readyz`, and the deadline of a check.
const API_CHECK_INTERVAL: Duration = Duration::from_secs(5);
const API_CHECK_DEADLINE: Duration = Duration::from_secs(3);

/// Asks the API server its version every [`API_CHECK_INTERVAL`] (a cheap
/// call every ServiceAccount may make), recording in `api` whether it
/// answered within [`API_CHECK_DEADLINE`].
async fn check_api(client: kube::Client, api: Arc<std::sync::Mutex<Option<String>>>) {
    let mut ticks = tokio::time::interval(API_CHECK_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let problem = match tokio::time::timeout(API_CHECK_DEADLINE, client.apiserver_version()).await {
            Ok(Ok(_)) => None,
            Ok(Err(error)) => Some(format!("Kubernetes API unreachable: {error}")),
            Err(_) => Some(format!(
                "Kubernetes API unreachable: no answer to GET /version within {} s",
                API_CHECK_DEADLINE.as_secs()
            )),
        };
        let mut current = api.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if *current != problem {
            match &problem {
                Some(problem) => tracing::warn!(%problem, "not ready"),
                None => tracing::info!("the Kubernetes API answers"),
            }
        }
        *current = problem;
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(health): State<Health>) -> (StatusCode, String) {
    // The API server's problem first: it says why discovery is not done either.
    let api = health.api.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match api.as_ref() {
        Some(problem) => (StatusCode::SERVICE_UNAVAILABLE, problem.clone()),
        None if !health.ready.load(Ordering::SeqCst) => (
            StatusCode::SERVICE_UNAVAILABLE,
            "starting (plugin discovery's first pass) or stopping".to_owned(),
        ),
        None => (StatusCode::OK, "ok".to_owned()),
    }
}

async fn metrics_text(
    State(registry): State<Arc<prometheus_client::registry::Registry>>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let mut text = String::new();
    match prometheus_client::encoding::text::encode(&mut text, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                "content-type",
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            text,
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "text/plain")],
            e.to_string(),
        ),
    }
}

/// This replica's name in the leader election: `POD_NAME` (set from the
/// Pod's name by the Deployment), else the host name, with the process id.
fn leader_identity() -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .filter(|name| !name.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
        })
        .unwrap_or_else(|| "cnpgi-operator".to_owned());
    format!("{host}_{}", std::process::id())
}

/// Parses `--dial-override` values: `NAME=HOST:PORT`, NAME being the
/// `<service>.<namespace>.svc:<port>` address discovery would dial.
fn parse_dial_overrides(values: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut overrides = BTreeMap::new();
    for value in values {
        let (name, address) = value
            .split_once('=')
            .with_context(|| format!("--dial-override {value:?}: expected NAME=HOST:PORT"))?;
        let valid_port = |a: &str| {
            a.rsplit_once(':')
                .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p != 0))
        };
        anyhow::ensure!(
            valid_port(name),
            "--dial-override {value:?}: NAME must be the address discovery dials, <service>.<namespace>.svc:<port>"
        );
        anyhow::ensure!(
            valid_port(address),
            "--dial-override {value:?}: the address to dial must be HOST:PORT"
        );
        if let Some(previous) = overrides.insert(name.to_owned(), address.to_owned()) {
            anyhow::bail!("--dial-override: {name} is given twice ({previous} and {address})");
        }
    }
    Ok(overrides)
}

pub(crate) async fn run(args: RunArgs) -> anyhow::Result<()> {
    logging::init(args.log_format, &args.log_level);
    // Old environment variable names in use, through the subscriber just set up.
    crate::env_names::log_deprecated();
    // SIGTERM/SIGINT are listened for from the start: every wait below is
    // raced against them.
    let mut signal = tokio::spawn(shutdown_signal());
    let static_plugins = args.plugins.static_plugins()?;
    let dial_overrides = parse_dial_overrides(&args.dial_overrides)?;

    let (host, prometheus) = plugin_host(&args);
    let ControlFlow::Continue(client) = kubernetes_client(&args, &mut signal).await? else {
        tracing::info!("stopped while starting");
        return Ok(());
    };

    let discovery = start_discovery(&args, client.as_ref(), &host, dial_overrides, static_plugins);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (discovered_tx, discovered_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    let limits = server_limits(&args);
    let (probes, api_check) = start_probe_server(&args, client.as_ref(), ready.clone(), &limits)?;
    let metrics_server = start_metrics_server(&args, prometheus, &limits)?;
    let webhook = start_webhook_server(&args, &host, &limits)?;
    let mut controller_task = client
        .as_ref()
        .filter(|_| !args.disable_controller)
        .map(|client| start_reconciler(&args, client, &host, discovered_rx, stop_rx));
    // Ready (so the webhook Service routes here), and reconciling, once
    // discovery had its look: waited for once, here.
    let readiness = tokio::spawn({
        let (host, ready) = (host.clone(), ready.clone());
        async move {
            wait_for_discovery(&host).await;
            ready.store(true, Ordering::SeqCst);
            let _ = discovered_tx.send(true);
        }
    });
    tracing::info!("cnpgi-operator started");

    let outcome = wait_for_stop(
        async {
            let _ = signal.await;
        },
        &mut controller_task,
    )
    .await;
    match &outcome {
        Ok(()) => tracing::info!("shutting down"),
        Err(reason) => tracing::error!(%reason, "shutting down: the reconciler is gone"),
    }
    readiness.abort();
    ready.store(false, Ordering::SeqCst);
    let _ = stop_tx.send(true);
    let grace = Duration::from_secs(args.shutdown_grace_seconds);
    stop_within_grace(grace, webhook, controller_task, probes, metrics_server).await?;
    for task in discovery.into_iter().chain(api_check) {
        task.abort();
    }
    outcome.map_err(anyhow::Error::msg)?;
    tracing::info!("cnpgi-operator stopped");
    Ok(())
}

/// The operator's plugin host, and the Prometheus registry `/metrics`
/// serves its metrics from (every plugin call, plugin readiness, discovery,
/// webhooks, reconciles, leader election): plugins probed every
/// `--probe-interval-seconds`, called with a deadline of
/// `--plugin-timeout-seconds`, and those named by `--fail-open` skipped
/// when they fail.
fn plugin_host(args: &RunArgs) -> (Host<Cluster>, prometheus_client::registry::Registry) {
    let host = Host::new(HostOptions {
        registry: RegistryOptions {
            probe_interval: Duration::from_secs(args.probe_interval_seconds),
            ..RegistryOptions::default()
        },
        policy: RoutingPolicy {
            fail_open: args.fail_open.iter().cloned().collect::<BTreeSet<_>>(),
            ..RoutingPolicy::default()
        },
        client: ClientOptions {
            call_timeout: crate::instance::deadline(args.plugin_timeout_seconds).unwrap_or(NO_DEADLINE),
            ..ClientOptions::default()
        },
        ..HostOptions::default()
    });
    let mut prometheus = prometheus_client::registry::Registry::default();
    host.metrics().register(&mut prometheus);
    (host, prometheus)
}

/// The Kubernetes client, when discovery or the controller needs one;
/// `Break` when a signal came first.
async fn kubernetes_client(
    args: &RunArgs,
    signal: &mut tokio::task::JoinHandle<()>,
) -> anyhow::Result<ControlFlow<(), Option<kube::Client>>> {
    if !args.kubernetes_plugins && args.disable_controller {
        return Ok(ControlFlow::Continue(None));
    }
    let client = tokio::select! {
        client = kube::Client::try_default() => client,
        _ = signal => return Ok(ControlFlow::Break(())),
    };
    let client = client.context("cannot reach the Kubernetes API (in-cluster config or kubeconfig)")?;
    Ok(ControlFlow::Continue(Some(client)))
}

/// The HTTP servers' limits, from the flags.
fn server_limits(args: &RunArgs) -> ServerLimits {
    ServerLimits {
        header_read_timeout: Duration::from_secs(args.http_header_read_timeout_seconds),
        idle_timeout: Duration::from_secs(args.http_idle_timeout_seconds),
        request_timeout: Duration::from_secs(args.http_request_timeout_seconds),
        max_connections: args.http_max_connections,
        ..ServerLimits::default()
    }
}

/// A server task and the handle that stops it.
type Server = (
    tokio::task::JoinHandle<std::io::Result<()>>,
    axum_server::Handle<SocketAddr>,
);

/// Starts every discovery source on `host`: labelled Services (with the
/// dial overrides), socket directories and the static list.
fn start_discovery(
    args: &RunArgs,
    client: Option<&kube::Client>,
    host: &Host<Cluster>,
    dial_overrides: BTreeMap<String, String>,
    static_plugins: Vec<StaticPlugin>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let client_options = host.client_options();
    let mut sources = Vec::new();
    if let (true, Some(client)) = (args.kubernetes_plugins, client) {
        for (name, address) in &dial_overrides {
            tracing::info!(service = %name, %address, "dialing a plugin Service at an overridden address");
        }
        let mut services = KubernetesServices::new(
            client.clone(),
            &args.namespace,
            "cnpgi-operator",
            client_options.clone(),
        );
        services.dial_overrides = dial_overrides;
        sources.push(discover(host, services));
    }
    for dir in &args.plugins.plugin_dirs {
        let directory = SocketDirectory {
            options: client_options.clone(),
            ..SocketDirectory::new(dir)
        };
        sources.push(discover(host, directory));
    }
    if !static_plugins.is_empty() {
        let list = StaticList {
            options: client_options,
            ..StaticList::new(static_plugins)
        };
        sources.push(discover(host, list));
    }
    sources
}

/// Starts `source` on `host`, saying so.
fn discover(host: &Host<Cluster>, source: impl DiscoverySource) -> tokio::task::JoinHandle<()> {
    tracing::info!(source = %source.name(), "starting plugin discovery");
    host.discover(source)
}

/// Serves `/healthz` and `/readyz` (unless disabled); with a Kubernetes
/// client, also starts the API check `/readyz` reflects.
fn start_probe_server(
    args: &RunArgs,
    client: Option<&kube::Client>,
    ready: Arc<AtomicBool>,
    limits: &ServerLimits,
) -> anyhow::Result<(Option<Server>, Option<tokio::task::JoinHandle<()>>)> {
    let Some(address) = args.health_probe_bind_address.0 else {
        tracing::info!("health probes not served (--health-probe-bind-address=0)");
        return Ok((None, None));
    };
    let api = Arc::new(std::sync::Mutex::new(
        client.map(|_| "Kubernetes API not checked yet".to_owned()),
    ));
    let api_check = client.map(|client| tokio::spawn(check_api(client.clone(), api.clone())));
    let app = HttpRouter::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(Health { ready, api });
    let server = serve_plain(address, app, limits, "/healthz and /readyz")?;
    Ok((Some(server), api_check))
}

/// Serves `/metrics` (unless disabled).
fn start_metrics_server(
    args: &RunArgs,
    prometheus: prometheus_client::registry::Registry,
    limits: &ServerLimits,
) -> anyhow::Result<Option<Server>> {
    let Some(address) = args.metrics_bind_address.0 else {
        tracing::info!("metrics not served (--metrics-bind-address=0)");
        return Ok(None);
    };
    let app = HttpRouter::new()
        .route("/metrics", get(metrics_text))
        .with_state(Arc::new(prometheus));
    serve_plain(address, app, limits, "/metrics").map(Some)
}

/// Serves `app` over plain HTTP on `address`, with its own connection cap.
fn serve_plain(address: SocketAddr, app: HttpRouter, limits: &ServerLimits, what: &str) -> anyhow::Result<Server> {
    let listener =
        std::net::TcpListener::bind(address).with_context(|| format!("cannot listen on {address} for {what}"))?;
    tracing::info!(%address, "serving {what}");
    let handle = axum_server::Handle::new();
    let task = {
        let (handle, limits) = (handle.clone(), limits.clone());
        tokio::spawn(async move { serving::serve_plain(listener, app, handle, &limits).await })
    };
    Ok((task, handle))
}

/// Serves the admission webhooks through `host` over HTTPS, unless disabled.
fn start_webhook_server(args: &RunArgs, host: &Host<Cluster>, limits: &ServerLimits) -> anyhow::Result<Option<Server>> {
    if args.disable_webhooks {
        return Ok(None);
    }
    let tls = ReloadingServerConfig::with_alpn(
        ServerTlsFiles {
            cert: args.webhook_cert_dir.join("tls.crt"),
            key: args.webhook_cert_dir.join("tls.key"),
            client_ca: None,
        },
        &[b"h2", b"http/1.1"],
    )?;
    let listener = std::net::TcpListener::bind(args.webhook_address)
        .with_context(|| format!("cannot listen on {}", args.webhook_address))?;
    let routes = webhook::routes(host, Duration::from_secs(args.webhook_timeout_seconds));
    tracing::info!(address = %args.webhook_address, "serving admission webhooks");
    let handle = axum_server::Handle::new();
    let task = {
        let (handle, limits) = (handle.clone(), limits.clone());
        tokio::spawn(async move { serve_https_with(listener, tls, routes, handle, &limits).await })
    };
    Ok(Some((task, handle)))
}

/// How long the operator waits for discovery's first pass before going on
/// without it (a source that cannot look, such as an unreachable API
/// server, would keep it pending).
const DISCOVERY_FIRST_PASS_WAIT: Duration = Duration::from_secs(30);

/// Resolves once every discovery source had its first look (every plugin
/// then found probed), or after [`DISCOVERY_FIRST_PASS_WAIT`] with a warning
/// naming the sources still looking: routing before that would refuse
/// Clusters for plugins merely not found yet.
async fn wait_for_discovery(host: &Host<Cluster>) {
    match tokio::time::timeout(DISCOVERY_FIRST_PASS_WAIT, host.ready()).await {
        Ok(()) => {
            let plugins: Vec<String> = host.plugins().iter().map(|p| p.name().to_owned()).collect();
            tracing::info!(?plugins, "plugin discovery: first pass done");
        }
        Err(_) => tracing::warn!(
            pending = ?host.pending_sources(),
            "plugin discovery: first pass not done after {DISCOVERY_FIRST_PASS_WAIT:?}; going on without it"
        ),
    }
}

/// Runs the reconciler until `stop` turns true, once `discovered` turns
/// true (discovery had its first look): at once, or while holding the
/// leader Lease (returning when leadership is lost).
fn start_reconciler(
    args: &RunArgs,
    client: &kube::Client,
    host: &Host<Cluster>,
    mut discovered: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let stopped = move || {
        let mut stop = stop.clone();
        async move {
            let _ = stop.wait_for(|stop| *stop).await;
        }
    };
    let mut ctx = Context::new(client.clone(), host.clone(), "cnpgi-operator");
    ctx.max_concurrent_reconciles = args.max_concurrent_reconciles;
    let ctx = Arc::new(ctx);
    let metrics = host.metrics().clone();
    let lease = args.leader_election_id.clone();
    let namespace = args.watch_namespace.clone();
    let elector = args.leader_elect.then(|| {
        let mut options = LeaseOptions::new(&args.namespace, &args.leader_election_id, leader_identity());
        options.lease_duration = Duration::from_secs(args.leader_election_lease_seconds);
        options.renew_deadline = Duration::from_secs(args.leader_election_renew_deadline_seconds);
        options.retry_period = Duration::from_secs(args.leader_election_retry_seconds);
        LeaderElector::new(client.clone(), options)
    });
    tokio::spawn(async move {
        tokio::select! {
            Ok(_) = discovered.wait_for(|discovered| *discovered) => {}
            () = stopped() => return,
        }
        let Some(mut elector) = elector else {
            controller::run(ctx, namespace.as_deref(), stopped()).await;
            return;
        };
        // A candidate reports 0, as client-go's elector does.
        metrics.set_leader(&lease, false);
        tokio::select! {
            () = elector.acquire() => {}
            () = stopped() => return,
        }
        metrics.set_leader(&lease, true);
        tracing::info!("leading: reconciling Clusters");
        tokio::select! {
            () = controller::run(ctx, namespace.as_deref(), stopped()) => elector.release().await,
            reason = elector.hold() => tracing::error!(%reason, "leadership lost: stopping"),
        }
        metrics.set_leader(&lease, false);
    })
}

/// Stops everything within the grace (and a second): the servers through
/// their handles; the reconciler, which may be stuck retrying an
/// unreachable API server, is abandoned past it.
async fn stop_within_grace(
    grace: Duration,
    webhook: Option<Server>,
    controller: Option<tokio::task::JoinHandle<()>>,
    probes: Option<Server>,
    metrics: Option<Server>,
) -> anyhow::Result<()> {
    for (_, handle) in [&webhook, &probes, &metrics].into_iter().flatten() {
        handle.graceful_shutdown(Some(grace));
    }
    let deadline = tokio::time::Instant::now() + grace + Duration::from_secs(1);
    if let Some((task, _)) = webhook {
        tokio::time::timeout_at(deadline, task)
            .await
            .context("the webhook server did not stop within the grace period")???;
    }
    if let Some(mut controller) = controller {
        match tokio::time::timeout_at(deadline, &mut controller).await {
            Ok(result) => result?,
            Err(_) => {
                tracing::warn!("the reconciler did not stop within the grace period; abandoned");
                controller.abort();
            }
        }
    }
    for (what, server) in [("health probe", probes), ("metrics", metrics)] {
        if let Some((task, _)) = server {
            tokio::time::timeout_at(deadline, task)
                .await
                .with_context(|| format!("the {what} server did not stop within the grace period"))???;
        }
    }
    Ok(())
}

/// Waits for `signal` (SIGTERM/SIGINT). The reconciler must outlive it: if
/// its task ends or panics first, the reason is returned, `controller` is
/// emptied and the caller stops the process with an error, so that
/// Kubernetes restarts it instead of keeping a live process that no longer
/// reconciles.
async fn wait_for_stop(
    signal: impl std::future::Future<Output = ()>,
    controller: &mut Option<tokio::task::JoinHandle<()>>,
) -> Result<(), String> {
    let Some(task) = controller.as_mut() else {
        signal.await;
        return Ok(());
    };
    let ended = tokio::select! {
        () = signal => return Ok(()),
        ended = task => ended,
    };
    *controller = None;
    Err(match ended {
        Ok(()) => "the reconciler ended on its own".to_owned(),
        Err(error) if error.is_panic() => {
            let panic = error.into_panic();
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".to_owned());
            format!("the reconciler panicked: {message}")
        }
        Err(error) => format!("the reconciler was cancelled: {error}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicked_or_ended_reconciler_stops_the_process() {
        let mut panicked = Some(tokio::spawn(async { panic!("boom in reconcile") }));
        let never = std::future::pending::<()>();
        let reason = wait_for_stop(never, &mut panicked).await.unwrap_err();
        assert_eq!(reason, "the reconciler panicked: boom in reconcile");
        assert!(panicked.is_none());

        let mut ended = Some(tokio::spawn(async {}));
        let reason = wait_for_stop(std::future::pending::<()>(), &mut ended)
            .await
            .unwrap_err();
        assert!(reason.contains("ended on its own"), "{reason}");

        // The signal first: a clean stop, the reconciler is left to finish.
        let mut running = Some(tokio::spawn(std::future::pending::<()>()));
        assert_eq!(wait_for_stop(async {}, &mut running).await, Ok(()));
        assert!(running.is_some());
        // No reconciler: only the signal counts.
        assert_eq!(wait_for_stop(async {}, &mut None).await, Ok(()));
    }

    #[test]
    fn bind_addresses_are_host_port_go_port_or_0() {
        let parse = |text: &str| text.parse::<BindAddress>().map(|a| a.0);
        assert_eq!(parse(":8081").unwrap(), Some("0.0.0.0:8081".parse().unwrap()));
        assert_eq!(
            parse("127.0.0.1:8080").unwrap(),
            Some("127.0.0.1:8080".parse().unwrap())
        );
        assert_eq!(parse("[::1]:8080").unwrap(), Some("[::1]:8080".parse().unwrap()));
        assert_eq!(parse("0").unwrap(), None);
        for bad in ["localhost:8080", ":http", "8080", ":99999", ""] {
            let error = parse(bad).unwrap_err().to_string();
            assert!(error.contains(&format!("{bad:?}")), "{bad}: {error}");
        }
    }

    #[test]
    fn dial_overrides_are_service_addresses_mapped_to_host_ports() {
        let parsed = parse_dial_overrides(&[
            "hello.cnpgi-system.svc:9090=127.0.0.1:40001".to_owned(),
            "other.cnpgi-system.svc:9443=localhost:9443".to_owned(),
        ])
        .unwrap();
        assert_eq!(parsed["hello.cnpgi-system.svc:9090"], "127.0.0.1:40001");
        assert_eq!(parsed["other.cnpgi-system.svc:9443"], "localhost:9443");
        for (bad, says) in [
            ("hello.cnpgi-system.svc:9090", "expected NAME=HOST:PORT"),
            ("hello=127.0.0.1:1", "NAME must be the address"),
            ("hello.ns.svc:9090=127.0.0.1", "HOST:PORT"),
            ("hello.ns.svc:9090=127.0.0.1:0", "HOST:PORT"),
        ] {
            let error = parse_dial_overrides(&[bad.to_owned()]).unwrap_err().to_string();
            assert!(error.contains(says) && error.contains(bad), "{bad}: {error}");
        }
        let twice = parse_dial_overrides(&["a.b.svc:1=h:1".to_owned(), "a.b.svc:1=h:2".to_owned()]);
        assert!(twice.unwrap_err().to_string().contains("given twice"));
    }
}
