//! The admission webhooks over real HTTPS, wired to real plugins: requests
//! carry `AdmissionReview` JSON as the API server sends it.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use base64::Engine;
use bytes::Bytes;
use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_operator::{
    registry::{Registry, RegistryOptions},
    routing::{Router, RoutingPolicy},
    serving::ServerLimits,
    webhook::{self, MUTATE_PATH, VALIDATE_PATH},
};
use cnpgi_pluginhelper::{
    proto::{
        identity::v1::plugin_capability::service::Type as ServiceType,
        operator::v1::{
            OperatorCapabilitiesRequest, OperatorCapabilitiesResult, OperatorMutateClusterRequest,
            OperatorMutateClusterResult,
            operator_server::{Operator, OperatorServer},
        },
    },
    server::PluginServer,
    testing::{TestCertificates, TestIdentity, TestPlugin},
};
use cnpgi_tls::{pem, server::ReloadingServerConfig, server::ServerTlsFiles, verify::PinnedServerVerifier};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";
const HUNG: &str = "hung.example.com";

/// An Operator whose MutateCluster never answers.
struct Hung;

#[tonic::async_trait]
impl Operator for Hung {
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        Ok(Response::new(OperatorCapabilitiesResult {
            capabilities: vec![cnpgi_core::capabilities::operator_rpc(
                cnpgi_core::capabilities::OperatorRpc::MutateCluster,
            )],
        }))
    }
    async fn mutate_cluster(
        &self,
        _: Request<OperatorMutateClusterRequest>,
    ) -> Result<Response<OperatorMutateClusterResult>, Status> {
        std::future::pending().await
    }
}

struct Webhook {
    address: std::net::SocketAddr,
    certs: TestCertificates,
    _dir: tempfile::TempDir,
    _plugins: Vec<TestPlugin>,
    handle: axum_server::Handle<std::net::SocketAddr>,
}

async fn start() -> Webhook {
    start_with(&ServerLimits::default()).await
}

async fn start_with(limits: &ServerLimits) -> Webhook {
    let dir = tempfile::tempdir().unwrap();
    let plugins = vec![
        TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
            .await
            .unwrap(),
        TestPlugin::start_unix_in(
            PluginServer::new(TestIdentity::new(HUNG).with_service(ServiceType::OperatorService))
                .add_service(OperatorServer::new(Hung)),
            dir.path(),
        )
        .await
        .unwrap(),
    ];
    let registry = Arc::new(Registry::new(RegistryOptions::default()));
    for name in [HELLO, HUNG] {
        let path = dir.path().join(name);
        registry
            .add(
                "static",
                PluginClient::new(name, Transport::Unix { path }, &ClientOptions::default()).unwrap(),
            )
            .await
            .unwrap();
    }
    let routes = webhook::routes(
        Router::new(registry, RoutingPolicy::default()),
        Duration::from_millis(700),
    );

    let certs = TestCertificates::generate("cnpgi-webhook.cnpgi-system.svc").unwrap();
    let tls = ReloadingServerConfig::with_alpn(
        ServerTlsFiles {
            cert: certs.server.cert_path.clone(),
            key: certs.server.key_path.clone(),
            client_ca: None,
        },
        &[b"h2", b"http/1.1"],
    )
    .unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let address = listener.local_addr().unwrap();
    let handle = axum_server::Handle::new();
    let limits = limits.clone();
    let serving = handle.clone();
    tokio::spawn(async move { webhook::serve_https_with(listener, tls, routes, serving, &limits).await });
    Webhook {
        address,
        certs,
        _dir: dir,
        _plugins: plugins,
        handle,
    }
}

impl Webhook {
    /// POSTs `body` over HTTPS (HTTP/1.1, as a plain client), verifying the
    /// webhook's certificate; returns the status and the body.
    async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        self.try_post(path, body).await.unwrap()
    }

    /// [`Self::post`], with the client's failure (reset connection…) as an error.
    async fn try_post(&self, path: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>), hyper::Error> {
        let tls = self.connect().await;
        self.post_on(tls, path, body).await
    }

    /// A TLS connection to the webhook (ALPN http/1.1), its certificate verified.
    async fn connect(&self) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let verifier =
            PinnedServerVerifier::new(pem::read_certificates(&self.certs.server.cert_path, "server").unwrap()).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(cnpgi_tls::crypto_provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let tcp = tokio::net::TcpStream::connect(self.address).await.unwrap();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(
                cnpgi_tls::client::server_name("cnpgi-webhook.cnpgi-system.svc").unwrap(),
                tcp,
            )
            .await
            .unwrap()
    }

    async fn post_on(
        &self,
        tls: tokio_rustls::client::TlsStream<tokio::net::TcpStream>,
        path: &str,
        body: Vec<u8>,
    ) -> Result<(u16, Vec<u8>), hyper::Error> {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
            .await
            .unwrap();
        tokio::spawn(connection);
        let request = hyper::Request::post(path)
            .header("host", "cnpgi-webhook.cnpgi-system.svc")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        Ok((status, response.into_body().collect().await?.to_bytes().to_vec()))
    }

    async fn review(&self, path: &str, operation: &str, object: Value, old: Option<Value>) -> Value {
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "cnpgi.io", "version": "v1", "kind": "Cluster"},
                "resource": {"group": "cnpgi.io", "version": "v1", "resource": "clusters"},
                "requestKind": {"group": "cnpgi.io", "version": "v1", "kind": "Cluster"},
                "requestResource": {"group": "cnpgi.io", "version": "v1", "resource": "clusters"},
                "name": "cluster-example",
                "namespace": "default",
                "operation": operation,
                "userInfo": {"username": "admin", "groups": ["system:authenticated"]},
                "object": object,
                "oldObject": old,
                "dryRun": false,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
            }
        });
        let (status, body) = self.post(path, serde_json::to_vec(&review).unwrap()).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        answer["response"].clone()
    }
}

fn cluster(plugins: Value) -> Value {
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "cluster-example", "namespace": "default"},
        "spec": {"instances": 3, "plugins": plugins}
    })
}

#[tokio::test]
async fn mutate_fills_in_defaults_with_a_base64_json_patch() {
    let webhook = start().await;
    let original = cluster(json!([{"name": HELLO}]));
    let response = webhook.review(MUTATE_PATH, "CREATE", original.clone(), None).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("patch is a base64 string"))
        .unwrap();
    let mut patched = original;
    cnpgi_core::patch::apply_patch_bytes(&mut patched, &patch).unwrap();
    assert_eq!(
        patched["spec"]["plugins"][0]["parameters"]["labels"],
        r#"{"plugin-metadata":"default"}"#
    );

    // Already defaulted: allowed without a patch.
    let response = webhook.review(MUTATE_PATH, "UPDATE", patched, None).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    webhook.handle.shutdown();
}

#[tokio::test]
async fn validate_denies_the_upstream_mistake_and_a_labels_change() {
    let webhook = start().await;
    let mistake = cluster(json!([{"name": HELLO, "parameters": {
        "labels": "{\"first-label\": \"first-label-value\"}",
        "annotations": "{\n  \"first-annotation\": \"first-annotation-value\",\n  this is a mistake\n}\n"
    }}]));
    let response = webhook.review(VALIDATE_PATH, "CREATE", mistake, None).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.plugins[0].parameters.annotations: Invalid value:"),
        "{message}"
    );

    let old = cluster(json!([{"name": HELLO, "parameters": {"labels": "{\"a\":\"b\"}"}}]));
    let new = cluster(json!([{"name": HELLO, "parameters": {"labels": "{\"a\":\"c\"}"}}]));
    let response = webhook.review(VALIDATE_PATH, "UPDATE", new.clone(), Some(old)).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.plugins[0].parameters.labels") && message.contains("Labels cannot be changed"));

    let response = webhook.review(VALIDATE_PATH, "CREATE", new, None).await;
    assert_eq!(response["allowed"], true, "{response}");
    webhook.handle.shutdown();
}

#[tokio::test]
async fn a_missing_plugin_is_denied_by_name_and_a_hung_one_within_the_deadline() {
    let webhook = start().await;
    let response = webhook
        .review(
            VALIDATE_PATH,
            "CREATE",
            cluster(json!([{"name": "missing.example.com"}])),
            None,
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("missing.example.com"),
        "{response}"
    );

    let started = std::time::Instant::now();
    let response = webhook
        .review(
            MUTATE_PATH,
            "CREATE",
            cluster(json!([{"name": HELLO}, {"name": HUNG}])),
            None,
        )
        .await;
    let elapsed = started.elapsed();
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("within 700 ms"),
        "{response}"
    );
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    webhook.handle.shutdown();
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_reason() {
    let webhook = start().await;
    for (body, reason) in [
        (&b"not json"[..], "not an AdmissionReview"),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            "no request",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#,
            "not an AdmissionReview",
        ),
    ] {
        for path in [MUTATE_PATH, VALIDATE_PATH] {
            let (status, text) = webhook.post(path, body.to_vec()).await;
            let text = String::from_utf8_lossy(&text);
            assert_eq!(status, 400, "{path}: {text}");
            assert!(text.contains(reason), "{path}: {text}");
        }
    }
    // Still serving.
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    webhook.handle.shutdown();
}

/// An UPDATE carries the object and its old version: the API server allows
/// objects of up to 3 MiB, so a review can be over 6 MiB. The webhook
/// accepts up to 7 MiB, as controller-runtime's webhook server does, and
/// refuses larger bodies with 413.
#[tokio::test]
async fn a_6_mib_update_review_is_served_and_a_10_mib_body_gets_413() {
    let webhook = start().await;
    let big = |size: usize| {
        let mut object = cluster(json!([]));
        object["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(size)});
        object
    };
    let review = |size: usize| {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "cnpgi.io", "version": "v1", "kind": "Cluster"},
                "resource": {"group": "cnpgi.io", "version": "v1", "resource": "clusters"},
                "name": "cluster-example",
                "namespace": "default",
                "operation": "UPDATE",
                "userInfo": {"username": "admin"},
                "object": big(size),
                "oldObject": big(size),
            }
        })
    };
    let six = serde_json::to_vec(&review(3 * 1024 * 1024)).unwrap();
    assert!(six.len() > 6 * 1024 * 1024, "{}", six.len());
    for path in [VALIDATE_PATH, MUTATE_PATH] {
        let (status, body) = webhook.post(path, six.clone()).await;
        assert_eq!(
            status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], true, "{path}");
    }

    let ten = serde_json::to_vec(&review(5 * 1024 * 1024)).unwrap();
    assert!(ten.len() > 10 * 1024 * 1024, "{}", ten.len());
    for path in [VALIDATE_PATH, MUTATE_PATH] {
        let (status, body) = webhook.try_post(path, ten.clone()).await.unwrap();
        assert_eq!(status, 413, "{path}: {}", String::from_utf8_lossy(&body));
    }
    // Still serving.
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    webhook.handle.shutdown();
}

/// A client sending its headers byte by byte and never finishing them is
/// cut off after the header read timeout, while others are served; an idle
/// TLS connection is closed after the idle timeout; connections beyond the
/// cap are closed on accept.
#[tokio::test]
async fn slow_idle_and_excess_connections_are_closed_while_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(2),
        max_connections: 3,
        ..ServerLimits::default()
    };
    let webhook = start_with(&limits).await;

    let mut slow = webhook.connect().await;
    slow.write_all(b"POST /validate-cluster HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let closed_after = loop {
        if slow.write_all(b"a").await.is_err() {
            break started.elapsed();
        }
        let mut buf = [0u8; 512];
        // Data, EOF or an error: the server is done with this connection.
        if tokio::time::timeout(Duration::from_millis(200), slow.read(&mut buf))
            .await
            .is_ok()
        {
            break started.elapsed();
        }
        let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
        assert_eq!(response["allowed"], true);
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the slow client is still connected"
        );
    };
    eprintln!("slowloris TLS connection closed after {closed_after:?}");
    assert!(closed_after >= Duration::from_millis(900), "{closed_after:?}");
    drop(slow);

    // Idle after the handshake, no request at all: closed by the header
    // timer or the idle timer, whichever first.
    let mut idle = webhook.connect().await;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(15), idle.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    eprintln!("idle TLS connection closed after {:?}", started.elapsed());
    drop(idle);

    // The cap: three connections held, the fourth is closed on accept.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(webhook.address).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut excess = tokio::net::TcpStream::connect(webhook.address).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(5), excess.read(&mut buf)).await;
    assert!(
        matches!(read, Ok(Ok(0) | Err(_))),
        "the fourth connection is closed: {read:?}"
    );
    drop(held);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    webhook.handle.shutdown();
}
