//! The measurements. Each returns numbers; `main` puts them beside their
//! baselines and targets.

use std::{
    future::Future,
    path::Path,
    process::{Command, Stdio},
    sync::Arc,
    time::{Duration, Instant},
};

use cnpgi_client::{
    client::{ClientOptions, PluginClient, Transport},
    probe,
};
use cnpgi_host::{
    registry::{Registry, RegistryOptions},
    routing::{Patched, RoutedResource, Router, RoutingPolicy},
    webhook::serve_https,
};
use cnpgi_operator::webhook;
use cnpgi_pluginhelper::{
    parameters::Parameters,
    proto::operator_lifecycle::v1::{
        OperatorLifecycleRequest, OperatorOperationType, operator_lifecycle_client::OperatorLifecycleClient,
        operator_operation_type::Type as Operation,
    },
    testing::{ChildGuard, TestCertificates, TestPlugin, connect_tls},
};
use serde_json::json;

use crate::{
    fixtures,
    setup::{self, HELLO},
    stats::Samples,
};

/// Iteration counts: full runs, or a quick smoke run that only proves the
/// harness works.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Effort {
    pub(crate) warmup: usize,
    pub(crate) calls: usize,
    pub(crate) load_seconds: f64,
}

/// Plugin names `bench-0.example.com`…, with the real hello-world first.
pub(crate) fn names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i == 0 {
                HELLO.to_owned()
            } else {
                format!("bench-{i}.example.com")
            }
        })
        .collect()
}

fn hook_request(cluster: &[u8], pod: &[u8]) -> OperatorLifecycleRequest {
    OperatorLifecycleRequest {
        operation_type: Some(OperatorOperationType {
            r#type: Operation::Create.into(),
        }),
        cluster_definition: cluster.to_vec(),
        object_definition: pod.to_vec(),
    }
}

/// Scenario 1, the floor every routed call is compared with: a bare tonic
/// unary call with a Cluster + Pod payload on a persistent mTLS channel.
pub(crate) struct Floor {
    client: OperatorLifecycleClient<tonic::transport::Channel>,
    cluster: Vec<u8>,
    pod: Vec<u8>,
}

impl Floor {
    /// Starts the bare server and connects to it.
    pub(crate) async fn start() -> anyhow::Result<Self> {
        let certs = TestCertificates::generate("floor.example.com")?;
        let address = setup::start_floor(&certs).await?;
        let channel = connect_tls(address, certs.client_config()?, "floor.example.com").await?;
        Ok(Self {
            client: OperatorLifecycleClient::new(channel),
            cluster: serde_json::to_vec(&fixtures::cluster(&names(1)))?,
            pod: serde_json::to_vec(&fixtures::pod())?,
        })
    }

    /// Times `calls` floor calls.
    async fn measure(&mut self, calls: usize) -> anyhow::Result<Samples> {
        let Self { client, cluster, pod } = self;
        measure(
            calls,
            || hook_request(cluster, pod),
            async |request| Ok(client.lifecycle_hook(request).await?),
        )
        .await
    }
}

/// The floor alone.
pub(crate) async fn floor(effort: Effort) -> anyhow::Result<Samples> {
    let mut floor = Floor::start().await?;
    floor.measure(effort.warmup).await?;
    floor.measure(effort.calls).await
}

/// Times `calls` calls of `call`. The clock covers the call only: each
/// input is made by `prepare` before it starts (what the caller holds
/// before it calls: the request of a gRPC call, the Pod a router's chain
/// starts from), and each output is dropped after it stops (what the caller
/// goes on with: the answer, the patched Pod).
async fn measure<I, O>(
    calls: usize,
    mut prepare: impl FnMut() -> I,
    mut call: impl AsyncFnMut(I) -> anyhow::Result<O>,
) -> anyhow::Result<Samples> {
    let mut samples = Samples::with_capacity(calls);
    let started = Instant::now();
    for _ in 0..calls {
        let input = prepare();
        let t = Instant::now();
        let output = call(input).await?;
        samples.push(t.elapsed());
        drop(output);
    }
    samples.elapsed = started.elapsed();
    Ok(samples)
}

/// Blocks of calls of `call` alternate with blocks of floor calls, so that
/// both see the same machine: on a shared machine the floor moves by a
/// third between runs, and a ratio of two runs measures that. Returns the
/// samples of `call` and of the floor.
pub(crate) async fn beside_floor<I, O>(
    floor: &mut Floor,
    effort: Effort,
    mut prepare: impl FnMut() -> I,
    mut call: impl AsyncFnMut(I) -> anyhow::Result<O>,
) -> anyhow::Result<(Samples, Samples)> {
    const BLOCKS: usize = 20;
    measure(effort.warmup, &mut prepare, &mut call).await?;
    floor.measure(effort.warmup).await?;
    let per_block = effort.calls.div_ceil(BLOCKS);
    let (mut measured, mut floors) = (Samples::default(), Samples::default());
    for _ in 0..BLOCKS {
        measured.extend(measure(per_block, &mut prepare, &mut call).await?);
        floors.extend(floor.measure(per_block).await?);
    }
    Ok((measured, floors))
}

/// Scenario 2: the operator's Pod patch chain (Router::lifecycle_hook)
/// through `n` plugins, beside the floor.
pub(crate) async fn lifecycle_chain(n: usize, floor: &mut Floor, effort: Effort) -> anyhow::Result<(Samples, Samples)> {
    let names = names(n);
    let (_plugins, registry) = setup::registry_with(&names).await?;
    chain_beside_floor(&Router::new(registry, RoutingPolicy::default()), &names, floor, effort).await
}

/// Chains through `router` for a Cluster enabling `names`, beside the floor.
async fn chain_beside_floor(
    router: &Router,
    names: &[String],
    floor: &mut Floor,
    effort: Effort,
) -> anyhow::Result<(Samples, Samples)> {
    let cluster = RoutedResource::new(fixtures::cluster(names));
    let pod = fixtures::pod();
    beside_floor(
        floor,
        effort,
        || pod.clone(),
        async |pod| chain_call(router, &cluster, pod).await,
    )
    .await
}

/// One routed chain, checked to have patched the Pod.
async fn chain_call(router: &Router, cluster: &RoutedResource, pod: serde_json::Value) -> anyhow::Result<Patched> {
    let patched = router.lifecycle_hook(cluster, pod, Operation::Create).await?;
    anyhow::ensure!(
        patched.object["spec"]["initContainers"].is_array(),
        "the chain did not add the sidecar"
    );
    Ok(patched)
}

async fn chain(router: &Router, cluster: &RoutedResource, effort: Effort) -> anyhow::Result<Samples> {
    let pod = fixtures::pod();
    let mut call = async |pod| chain_call(router, cluster, pod).await;
    measure(effort.warmup, || pod.clone(), &mut call).await?;
    measure(effort.calls, || pod.clone(), &mut call).await
}

/// What the webhook measurements found.
pub(crate) struct WebhookResult {
    pub(crate) offered: Samples,
    pub(crate) offered_rate: f64,
    pub(crate) sustained: Samples,
}

/// 3. HTTPS AdmissionReview → MutateCluster chain through 3 plugins → response.
pub(crate) async fn webhook(effort: Effort, rate: f64) -> anyhow::Result<WebhookResult> {
    let names = names(3);
    let server = WebhookServer::start(&names).await?;
    let body = admission_review(&fixtures::cluster(&names))?;

    // Warm-up on one connection, kept open through the measurements.
    let mut warm = server.connect().await?;
    for _ in 0..effort.warmup {
        send_review(&mut warm, body.clone()).await?;
    }
    let offered = offered_load(&server, &body, rate, effort.load_seconds).await?;
    let sustained = sustained_load(&server, &body, effort.load_seconds).await?;
    Ok(WebhookResult {
        offered,
        offered_rate: rate,
        sustained,
    })
}

/// The operator's admission webhook over HTTPS, routing to `names`'
/// plugins; shut down on drop.
struct WebhookServer {
    address: std::net::SocketAddr,
    /// The server certificate, pinned by the clients.
    pinned: Vec<rustls::pki_types::CertificateDer<'static>>,
    handle: axum_server::Handle<std::net::SocketAddr>,
    // Alive as long as the server: its plugins and certificate files.
    _plugins: Vec<TestPlugin>,
    _certs: TestCertificates,
}

impl WebhookServer {
    async fn start(names: &[String]) -> anyhow::Result<Self> {
        let (plugins, host) = setup::host_with(names).await?;
        // Measured as `cnpgi-operator run` serves them (controller-runtime's
        // webhook metrics included).
        let routes = webhook::routes(&host, Duration::from_secs(8));
        let certs = TestCertificates::generate("cnpgi-webhook.cnpgi-system.svc")?;
        let tls = cnpgi_tls::server::ReloadingServerConfig::with_alpn(
            cnpgi_tls::server::ServerTlsFiles {
                cert: certs.server.cert_path.clone(),
                key: certs.server.key_path.clone(),
                client_ca: None,
            },
            &[b"http/1.1"],
        )?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let handle = axum_server::Handle::new();
        tokio::spawn(serve_https(listener, tls, routes, handle.clone()));
        let pinned = cnpgi_tls::pem::read_certificates(&certs.server.cert_path, "server certificate")?;
        Ok(Self {
            address,
            pinned,
            handle,
            _plugins: plugins,
            _certs: certs,
        })
    }

    /// A new HTTP/1.1 connection over TLS 1.3, pinning the server certificate.
    fn connect(&self) -> impl Future<Output = anyhow::Result<Sender>> + Send + 'static {
        let (address, pinned) = (self.address, self.pinned.clone());
        async move {
            let mut config = rustls::ClientConfig::builder_with_provider(cnpgi_tls::crypto_provider())
                .with_protocol_versions(&[&rustls::version::TLS13])?
                .dangerous()
                .with_custom_certificate_verifier(cnpgi_tls::verify::PinnedServerVerifier::new(pinned)?)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            let tcp = tokio::net::TcpStream::connect(address).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(cnpgi_tls::client::server_name("cnpgi-webhook.cnpgi-system.svc")?, tcp)
                .await?;
            let (sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls)).await?;
            tokio::spawn(connection);
            anyhow::Ok(sender)
        }
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

/// The AdmissionReview the API server sends on creating `cluster`.
fn admission_review(cluster: &serde_json::Value) -> anyhow::Result<bytes::Bytes> {
    Ok(bytes::Bytes::from(serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "bench", "operation": "CREATE",
            "kind": {"group": "cnpgi.io", "version": "v1", "kind": "Cluster"},
            "resource": {"group": "cnpgi.io", "version": "v1", "resource": "clusters"},
            "name": "cluster-example", "namespace": "default", "userInfo": {"username": "admin"},
            "object": cluster, "dryRun": false
        }
    }))?))
}

/// Offered load: requests scheduled at `rate` for `seconds`, served by 16
/// connections; latency counts from the scheduled time, so queueing is not
/// hidden.
async fn offered_load(server: &WebhookServer, body: &bytes::Bytes, rate: f64, seconds: f64) -> anyhow::Result<Samples> {
    let total = ((rate * seconds).ceil() as usize).max(1);
    let (jobs, receiver) = tokio::sync::mpsc::channel::<Instant>(total);
    let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
    let mut workers = Vec::new();
    for _ in 0..16 {
        let receiver = receiver.clone();
        let mut sender = server.connect().await?;
        let body = body.clone();
        workers.push(tokio::spawn(async move {
            let mut samples = Samples::default();
            loop {
                let Some(scheduled) = receiver.lock().await.recv().await else {
                    break;
                };
                match send_review(&mut sender, body.clone()).await {
                    Ok(()) => samples.push(scheduled.elapsed()),
                    Err(_) => samples.errors += 1,
                }
            }
            samples
        }));
    }
    let started = Instant::now();
    for i in 0..total {
        let scheduled = started + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(scheduled.into()).await;
        jobs.send(scheduled).await?;
    }
    drop(jobs);
    let mut offered = Samples::default();
    for worker in workers {
        offered.extend(worker.await?);
    }
    offered.elapsed = started.elapsed();
    Ok(offered)
}

/// Sustained: a closed loop on 4 connections for `seconds`, as fast as it goes.
async fn sustained_load(server: &WebhookServer, body: &bytes::Bytes, seconds: f64) -> anyhow::Result<Samples> {
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut loops = Vec::new();
    for _ in 0..4 {
        let mut sender = server.connect().await?;
        let body = body.clone();
        loops.push(tokio::spawn(async move {
            let mut samples = Samples::default();
            while Instant::now() < deadline {
                let t = Instant::now();
                match send_review(&mut sender, body.clone()).await {
                    Ok(()) => samples.push(t.elapsed()),
                    Err(_) => samples.errors += 1,
                }
            }
            samples
        }));
    }
    let started = Instant::now();
    let mut sustained = Samples::default();
    for task in loops {
        sustained.extend(task.await?);
    }
    sustained.elapsed = started.elapsed();
    Ok(sustained)
}

type Sender = hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>;

/// POSTs one AdmissionReview and checks the answer carries a patch.
async fn send_review(sender: &mut Sender, body: bytes::Bytes) -> anyhow::Result<()> {
    use http_body_util::BodyExt;
    let request = hyper::Request::post(webhook::MUTATE_PATH)
        .header("host", "cnpgi-webhook.cnpgi-system.svc")
        .header("content-type", "application/json")
        .body(http_body_util::Full::new(body))?;
    // HTTP/1.1: one request at a time per connection.
    sender.ready().await?;
    let response = sender.send_request(request).await?;
    anyhow::ensure!(response.status() == 200, "webhook answered {}", response.status());
    let body = response.into_body().collect().await?.to_bytes();
    anyhow::ensure!(body.windows(9).any(|w| w == b"JSONPatch"), "no patch in the answer");
    Ok(())
}

/// What a hello-world process costs.
pub(crate) struct PluginCost {
    pub(crate) startup: Duration,
    pub(crate) idle_rss_kib: u64,
    pub(crate) loaded_rss_kib: u64,
    pub(crate) binary_bytes: u64,
}

fn status_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| anyhow::anyhow!("{field} not in /proc/{pid}/status"))
}

/// Starts the hello-world process at `binary` on a Unix socket in a
/// directory of its own and waits (up to 20 s) until its Probe answers ready.
/// The directory must outlive the process.
async fn start_hello(binary: &Path) -> anyhow::Result<(tempfile::TempDir, ChildGuard, PluginClient)> {
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let child = ChildGuard::spawn(
        Command::new(binary)
            .args(["plugin", &format!("--plugin-path={}", dir.path().display())])
            .env("LOG_LEVEL", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )?;
    let socket = dir.path().join(HELLO);
    let client = PluginClient::new(HELLO, Transport::Unix { path: socket }, &ClientOptions::default())?;
    while !matches!(probe::is_ready(&client).await, Ok(true)) {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(20),
            "hello-world did not become ready"
        );
        tokio::time::sleep(Duration::from_micros(500)).await;
    }
    Ok((dir, child, client))
}

/// 4. Start-up to first successful Probe, RSS idle and under load, binary size.
pub(crate) async fn plugin_cost(binary: &Path, effort: Effort) -> anyhow::Result<PluginCost> {
    let mut startups = Vec::new();
    let mut result = None;
    for round in 0..5 {
        let started = Instant::now();
        let (_dir, child, client) = start_hello(binary).await?;
        startups.push(started.elapsed());
        if round == 4 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let idle = status_kib(child.id(), "VmRSS:")?;
            // Load: concurrent lifecycle hooks from 16 callers.
            let cluster = serde_json::to_vec(&fixtures::cluster(&names(1)))?;
            let pod = serde_json::to_vec(&fixtures::pod())?;
            let mut tasks = Vec::new();
            for _ in 0..16 {
                let client = client.clone();
                let (cluster, pod) = (cluster.clone(), pod.clone());
                let calls = effort.calls / 16 + 1;
                tasks.push(tokio::spawn(async move {
                    for _ in 0..calls {
                        let _ = client
                            .lifecycle()
                            .lifecycle_hook(client.request(hook_request(&cluster, &pod)))
                            .await;
                    }
                }));
            }
            for task in tasks {
                task.await?;
            }
            let loaded = status_kib(child.id(), "VmHWM:")?;
            result = Some((idle, loaded));
        }
        drop(child);
    }
    startups.sort();
    let (idle_rss_kib, loaded_rss_kib) = result.ok_or_else(|| anyhow::anyhow!("no measurement"))?;
    Ok(PluginCost {
        startup: startups[startups.len() / 2],
        idle_rss_kib,
        loaded_rss_kib,
        binary_bytes: std::fs::metadata(binary)?.len(),
    })
}

/// What the connection measurements found.
pub(crate) struct Connections {
    pub(crate) handshakes_per_10k: u64,
    pub(crate) concurrent: Samples,
    pub(crate) concurrent_handshakes: u64,
}

/// 5. TLS handshakes over 10,000 routed calls after warm-up; 1,000 concurrent callers.
pub(crate) async fn connections(effort: Effort) -> anyhow::Result<Connections> {
    let names = names(1);
    let (_plugins, registry) = setup::registry_with(&names).await?;
    let router = Router::new(registry.clone(), RoutingPolicy::default());
    let cluster = RoutedResource::new(fixtures::cluster(&names));
    let pod = fixtures::pod();
    let client = registry.get(HELLO).map_err(anyhow::Error::from)?.client;
    for _ in 0..effort.warmup {
        router.lifecycle_hook(&cluster, pod.clone(), Operation::Create).await?;
    }
    let before = client.connections();
    let calls = if effort.calls >= 1000 { 10_000 } else { effort.calls };
    for _ in 0..calls {
        router.lifecycle_hook(&cluster, pod.clone(), Operation::Create).await?;
    }
    let handshakes = (client.connections() - before) * 10_000 / calls as u64;

    let before = client.connections();
    let callers = if effort.calls >= 1000 { 1000 } else { 50 };
    let started = Instant::now();
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let router = router.clone();
            let (cluster, pod) = (cluster.clone(), pod.clone());
            tokio::spawn(async move {
                let t = Instant::now();
                router
                    .lifecycle_hook(&cluster, pod, Operation::Create)
                    .await
                    .map(|_| t.elapsed())
            })
        })
        .collect();
    let mut concurrent = Samples::default();
    for task in tasks {
        match task.await? {
            Ok(latency) => concurrent.push(latency),
            Err(_) => concurrent.errors += 1,
        }
    }
    concurrent.elapsed = started.elapsed();
    Ok(Connections {
        handshakes_per_10k: handshakes,
        concurrent,
        concurrent_handshakes: client.connections() - before,
    })
}

/// What the scale measurements found.
pub(crate) struct Scale {
    pub(crate) chain_small: Samples,
    pub(crate) chain_large: Samples,
    pub(crate) lookup_small_ns: f64,
    pub(crate) lookup_large_ns: f64,
}

fn lookup_ns(registry: &Registry, names: &[String], rounds: usize) -> f64 {
    let started = Instant::now();
    for _ in 0..rounds {
        for name in names {
            std::hint::black_box(registry.get(name).is_ok());
        }
    }
    started.elapsed().as_nanos() as f64 / (rounds * names.len()) as f64
}

/// 6. Routing 3 enabled plugins with 3 registered, then with 100 registered.
pub(crate) async fn scale(effort: Effort) -> anyhow::Result<Scale> {
    let enabled = names(3);
    let cluster = RoutedResource::new(fixtures::cluster(&enabled));
    let (mut plugins, registry) = setup::registry_with(&enabled).await?;
    let router = Router::new(registry.clone(), RoutingPolicy::default());
    let chain_small = chain(&router, &cluster, effort).await?;
    let lookup_small_ns = lookup_ns(&registry, &enabled, effort.calls * 10);
    let total = if effort.calls >= 1000 { 100 } else { 10 };
    for i in 3..total {
        let name = format!("bench-{i}.example.com");
        let plugin = setup::start_plugin(&name).await?;
        registry.add("bench", setup::client_for(&plugin, &name)?).await?;
        plugins.push(plugin);
    }
    anyhow::ensure!(registry.plugins().len() == total);
    let chain_large = chain(&router, &cluster, effort).await?;
    let lookup_large_ns = lookup_ns(&registry, &enabled, effort.calls * 10);
    Ok(Scale {
        chain_small,
        chain_large,
        lookup_small_ns,
        lookup_large_ns,
    })
}

/// Where a one-plugin lifecycle call spends its time, without the network:
/// (the plugin's own handler, the router's JSON work).
pub(crate) async fn breakdown(effort: Effort) -> anyhow::Result<(Samples, Samples)> {
    use cnpgi_pluginhelper::proto::operator_lifecycle::v1::operator_lifecycle_server::OperatorLifecycle;
    let cluster = fixtures::cluster(&names(1));
    let pod = fixtures::pod();
    let cluster_bytes = serde_json::to_vec(&cluster)?;
    let pod_bytes = serde_json::to_vec(&pod)?;
    let lifecycle = cnpg_i_hello_world::plugin().local().lifecycle_service();
    let mut handler = Samples::with_capacity(effort.calls);
    let mut patch = Vec::new();
    for _ in 0..effort.calls {
        let t = Instant::now();
        patch = lifecycle
            .lifecycle_hook(tonic::Request::new(hook_request(&cluster_bytes, &pod_bytes)))
            .await?
            .into_inner()
            .json_patch;
        handler.push(t.elapsed());
    }
    let mut router = Samples::with_capacity(effort.calls);
    for _ in 0..effort.calls {
        let t = Instant::now();
        std::hint::black_box(cnpgi_core::cluster::encode_object(&pod));
        let decoded = cnpgi_core::patch::parse_patch(&patch)?;
        std::hint::black_box(cnpgi_core::patch::patched(&pod, &decoded)?);
        router.push(t.elapsed());
    }
    Ok((handler, router))
}

/// The floor call through (a) the plugin framework's server, (b) the
/// operator's client, (c) answering hello-world's patch instead of nothing,
/// and (d) that answer from the plugin framework's server (which writes an
/// answer's frames at once), each alone, to locate transport overhead;
/// each beside the floor (returned as (call, floor) pairs).
pub(crate) async fn transport_breakdown(floor: &mut Floor, effort: Effort) -> anyhow::Result<[(Samples, Samples); 4]> {
    use cnpgi_pluginhelper::proto::operator_lifecycle::v1::operator_lifecycle_server::OperatorLifecycle;
    let cluster = serde_json::to_vec(&fixtures::cluster(&names(1)))?;
    let pod = serde_json::to_vec(&fixtures::pod())?;
    let answer = cnpg_i_hello_world::plugin()
        .local()
        .lifecycle_service()
        .lifecycle_hook(tonic::Request::new(hook_request(&cluster, &pod)))
        .await?
        .into_inner()
        .json_patch;
    let certs = TestCertificates::generate("floor.example.com")?;
    // (a) framework server, bare client.
    let plugin = framework_echo(Vec::new()).await?;
    let framework = bare_beside_floor(plugin.channel(), 0, floor, effort, (&cluster, &pod)).await?;
    // (b) bare server, operator client.
    let address = setup::start_floor(&certs).await?;
    let client = setup::tls_client("floor.example.com", &address.to_string(), &certs)?;
    let operator = client_beside_floor(&client, floor, effort).await?;
    // (c) bare server answering hello-world's patch (as bytes), bare client.
    let address = setup::start_echo(&certs, setup::Echo { answer: answer.clone() }).await?;
    let channel = connect_tls(address, certs.client_config()?, "floor.example.com").await?;
    let answering = bare_beside_floor(channel, answer.len(), floor, effort, (&cluster, &pod)).await?;
    // (d) the plugin framework's server answering the same bytes, bare client.
    let size = answer.len();
    let plugin = framework_echo(answer).await?;
    let framework_answering = bare_beside_floor(plugin.channel(), size, floor, effort, (&cluster, &pod)).await?;
    Ok([framework, operator, answering, framework_answering])
}

/// The plugin framework's server (`PluginServer`) answering every hook with `answer`.
async fn framework_echo(answer: Vec<u8>) -> anyhow::Result<cnpgi_pluginhelper::testing::TestPlugin> {
    use cnpgi_pluginhelper::{
        proto::{
            identity::v1::plugin_capability::service::Type as ServiceType,
            operator_lifecycle::v1::operator_lifecycle_server::OperatorLifecycleServer,
        },
        testing::TestIdentity,
        transport::PluginServer,
    };
    let server = PluginServer::new(TestIdentity::new("echo.example.com").with_service(ServiceType::LifecycleService))
        .add_service(OperatorLifecycleServer::new(setup::Echo { answer }));
    Ok(TestPlugin::start_tls(server).await?)
}

/// Hook calls with the Cluster and Pod `payload` through a bare tonic client
/// on `channel`, each checked to be answered `size` bytes, beside the floor.
async fn bare_beside_floor(
    channel: tonic::transport::Channel,
    size: usize,
    floor: &mut Floor,
    effort: Effort,
    (cluster, pod): (&[u8], &[u8]),
) -> anyhow::Result<(Samples, Samples)> {
    let mut client = OperatorLifecycleClient::new(channel);
    beside_floor(
        floor,
        effort,
        || hook_request(cluster, pod),
        async |request| {
            let answer = client.lifecycle_hook(request).await?.into_inner().json_patch;
            anyhow::ensure!(answer.len() == size, "answered {} bytes, not {size}", answer.len());
            Ok(())
        },
    )
    .await
}

/// A hello-world hook call through the operator's client, without the
/// router, beside the floor.
pub(crate) async fn direct_hello(floor: &mut Floor, effort: Effort) -> anyhow::Result<(Samples, Samples)> {
    let plugin = setup::start_plugin(HELLO).await?;
    client_beside_floor(&setup::client_for(&plugin, HELLO)?, floor, effort).await
}

/// LifecycleHook calls through the operator's `client` (no router), beside the floor.
async fn client_beside_floor(
    client: &PluginClient,
    floor: &mut Floor,
    effort: Effort,
) -> anyhow::Result<(Samples, Samples)> {
    let cluster = serde_json::to_vec(&fixtures::cluster(&names(1)))?;
    let pod = serde_json::to_vec(&fixtures::pod())?;
    beside_floor(
        floor,
        effort,
        || client.request(hook_request(&cluster, &pod)),
        async |request| {
            client.lifecycle().lifecycle_hook(request).await?;
            Ok(())
        },
    )
    .await
}

/// The steps of hello-world's hook, timed one by one (median µs over `calls`).
pub(crate) fn handler_steps(effort: Effort) -> anyhow::Result<Vec<(&'static str, Duration)>> {
    use cnpgi_pluginhelper::{cluster, patch, sidecar};
    let cluster_bytes = serde_json::to_vec(&fixtures::cluster(&names(1)))?;
    let pod_bytes = serde_json::to_vec(&fixtures::pod())?;
    let median = |f: &mut dyn FnMut()| {
        let mut times: Vec<Duration> = (0..effort.calls.max(10))
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed()
            })
            .collect();
        times.sort();
        times[times.len() / 2]
    };
    let decoded = cluster::decode_cluster(&cluster_bytes)?;
    let container = k8s_openapi::api::core::v1::Container {
        name: "pauser".into(),
        image: Some("registry.k8s.io/pause:3.10".into()),
        ..Default::default()
    };
    let mut patched = cluster::decode_object(&pod_bytes, "object")?;
    sidecar::inject_sidecar(&mut patched, &container, sidecar::SidecarOptions::default())?;
    Ok(vec![
        (
            "decode the Cluster (pluginhelper::cluster::decode_cluster)",
            median(&mut || {
                std::hint::black_box(cluster::decode_cluster(&cluster_bytes).ok());
            }),
        ),
        (
            "read the parameters (schema parse)",
            median(&mut || {
                std::hint::black_box(
                    <cnpg_i_hello_world::config::Config as Parameters>::from_cluster(&decoded, HELLO).ok(),
                );
            }),
        ),
        (
            "decode the Pod (decode_object)",
            median(&mut || {
                std::hint::black_box(cluster::decode_object(&pod_bytes, "object").ok());
            }),
        ),
        (
            "decode the Pod and inject the sidecar into it (what the hook is given and does)",
            median(&mut || {
                let Ok(mut p) = cluster::decode_object(&pod_bytes, "object") else {
                    return;
                };
                std::hint::black_box(
                    sidecar::inject_sidecar(&mut p, &container, sidecar::SidecarOptions::default()).ok(),
                );
            }),
        ),
        (
            "the patch from the bytes received to the edited Pod (patch_bytes_from_json)",
            median(&mut || {
                std::hint::black_box(patch::patch_bytes_from_json(&pod_bytes, &patched).ok());
            }),
        ),
    ])
}

/// 2b. The one-plugin chain of scenario 2, through a Go plugin on
/// cnpg-i-machinery (`binary`, e.g. tests/interop's `gohello`) started as a
/// process over mutual TLS, with the same client and router.
pub(crate) async fn go_plugin_chain(
    binary: &Path,
    floor: &mut Floor,
    effort: Effort,
) -> anyhow::Result<(Samples, Samples)> {
    let certs = TestCertificates::generate("go-plugin.example.com")?;
    let address = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let _plugin = ChildGuard::spawn(
        Command::new(binary)
            .arg("plugin")
            .arg(format!("--server-address={address}"))
            .arg(format!("--server-cert={}", certs.server.cert_path.display()))
            .arg(format!("--server-key={}", certs.server.key_path.display()))
            .arg(format!("--client-cert={}", certs.client.cert_path.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .map_err(|e| anyhow::anyhow!("cannot start {}: {e}", binary.display()))?;
    let started = Instant::now();
    while tokio::net::TcpStream::connect(address).await.is_err() {
        anyhow::ensure!(
            started.elapsed() < Duration::from_secs(10),
            "{} does not listen on {address} after 10 s",
            binary.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let registry = Arc::new(Registry::new(RegistryOptions::default()));
    registry
        .add("bench", setup::tls_client(HELLO, &address.to_string(), &certs)?)
        .await?;
    anyhow::ensure!(registry.get(HELLO).is_ok(), "the Go plugin is not routable");
    chain_beside_floor(
        &Router::new(registry, RoutingPolicy::default()),
        &names(1),
        floor,
        effort,
    )
    .await
}

/// What CloudNativePG's steady status traffic costs the hello-world process.
pub(crate) struct StatusTraffic {
    pub(crate) samples: Samples,
    pub(crate) rate: f64,
    pub(crate) clusters: usize,
    /// The plugin process's CPU seconds (user + system) over the load.
    pub(crate) cpu_seconds: f64,
    pub(crate) peak_rss_kib: u64,
}

/// A process's CPU seconds so far, from `/proc/<pid>/stat` (utime + stime,
/// in clock ticks: USER_HZ, 100 on Linux whatever the kernel's own HZ).
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command (field 2) may hold spaces; fields after its `)` are plain.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat: no command field"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        Ok(fields
            .get(i)
            .ok_or_else(|| anyhow::anyhow!("/proc/{pid}/stat: field {} missing", i + 3))?
            .parse::<f64>()?)
    };
    // utime and stime are fields 14 and 15: 11 and 12 after the command.
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// Section 7, CloudNativePG's steady status traffic (issue 35): it asks each plugin
/// of each Cluster for its status on every reconcile. `SetStatusInCluster`
/// at `rate` calls a second, paced (open loop: a late answer does not slow
/// the offered load), over `clusters` distinct Clusters, into the
/// hello-world process on its Unix socket, one shared channel as
/// CloudNativePG keeps. A call's latency counts from its scheduled start.
pub(crate) async fn status_traffic(
    binary: &Path,
    effort: Effort,
    rate: f64,
    clusters: usize,
) -> anyhow::Result<StatusTraffic> {
    use cnpgi_pluginhelper::proto::operator::v1::SetStatusInClusterRequest;

    let (_dir, child, client) = start_hello(binary).await?;
    let template = fixtures::cluster(&names(1));
    let bodies: Vec<Arc<Vec<u8>>> = (0..clusters.max(1))
        .map(|i| {
            let mut cluster = template.clone();
            cluster["metadata"]["name"] = json!(format!("cluster-{i}"));
            cluster["metadata"]["uid"] = json!(format!("00000000-0000-4000-8000-{i:012}"));
            // As CloudNativePG sends it: the plugin's entry is in the status.
            cluster["status"] =
                json!({"pluginStatus": [{"name": HELLO, "version": "0.1.0", "status": "{\"enabled\":true}"}]});
            serde_json::to_vec(&cluster).map(Arc::new)
        })
        .collect::<Result<_, _>>()?;
    let call = |client: PluginClient, body: Arc<Vec<u8>>| async move {
        let request = client.request(SetStatusInClusterRequest {
            cluster: body.as_ref().clone(),
        });
        client.operator().set_status_in_cluster(request).await
    };
    for i in 0..effort.warmup {
        call(client.clone(), bodies[i % bodies.len()].clone()).await?;
    }

    let total = ((rate * effort.load_seconds).ceil() as usize).max(1);
    let cpu_before = cpu_seconds(child.id())?;
    let started = Instant::now();
    let mut calls = Vec::with_capacity(total);
    for i in 0..total {
        let scheduled = started + Duration::from_secs_f64(i as f64 / rate);
        tokio::time::sleep_until(scheduled.into()).await;
        let call = call(client.clone(), bodies[i % bodies.len()].clone());
        calls.push(tokio::spawn(async move { call.await.map(|_| scheduled.elapsed()) }));
    }
    let mut samples = Samples::with_capacity(total);
    for call in calls {
        match call.await? {
            Ok(latency) => samples.push(latency),
            Err(_) => samples.errors += 1,
        }
    }
    samples.elapsed = started.elapsed();
    let cpu_seconds = cpu_seconds(child.id())? - cpu_before;
    Ok(StatusTraffic {
        samples,
        rate,
        clusters: bodies.len(),
        cpu_seconds,
        peak_rss_kib: status_kib(child.id(), "VmHWM:")?,
    })
}
