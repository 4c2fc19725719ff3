//! A webhook server over real HTTPS, wired to real plugins (hello-world and
//! one that never answers), and an HTTPS client sending `AdmissionReview`s
//! as the API server does; shared by the webhook and flood tests.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{
    Host, HostOptions, metrics::Metrics, registry::RegistryOptions, serving::ServerLimits, webhook::serve_https_with,
};
use cnpgi_operator::{crd::Cluster, webhook};
use cnpgi_pluginhelper::{
    proto::{
        identity::v1::plugin_capability::service::Type as ServiceType,
        operator::v1::{
            OperatorCapabilitiesRequest, OperatorCapabilitiesResult, OperatorMutateClusterRequest,
            OperatorMutateClusterResult,
            operator_server::{Operator, OperatorServer},
        },
    },
    testing::{TestCertificates, TestIdentity, TestPlugin},
    transport::PluginServer,
};
use cnpgi_tls::{pem, server::ReloadingServerConfig, server::ServerTlsFiles, verify::PinnedServerVerifier};
use http_body_util::{BodyExt, Full};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

pub const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";
pub const HUNG: &str = "hung.example.com";

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

pub struct Webhook {
    pub address: std::net::SocketAddr,
    pub certs: TestCertificates,
    _dir: tempfile::TempDir,
    _plugins: Vec<TestPlugin>,
    pub handle: axum_server::Handle<std::net::SocketAddr>,
}

pub async fn start() -> Webhook {
    start_with(&ServerLimits::default()).await
}

pub async fn start_with(limits: &ServerLimits) -> Webhook {
    start_observed(limits, None).await
}

/// [`start_with`], the requests measured in `metrics` when given.
pub async fn start_observed(limits: &ServerLimits, metrics: Option<Metrics>) -> Webhook {
    start_full(limits, metrics, Duration::from_millis(700)).await
}

/// [`start_with`], the plugins given `plugin_deadline` per request instead
/// of 700 ms (the flood test: a busy machine must not turn its latency
/// into a plugin deadline's refusal).
pub async fn start_with_deadline(limits: &ServerLimits, plugin_deadline: Duration) -> Webhook {
    start_full(limits, None, plugin_deadline).await
}

async fn start_full(limits: &ServerLimits, metrics: Option<Metrics>, plugin_deadline: Duration) -> Webhook {
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
    let host = Host::<Cluster>::new(HostOptions {
        registry: RegistryOptions {
            metrics: metrics.unwrap_or_default(),
            ..RegistryOptions::default()
        },
        ..HostOptions::default()
    });
    for name in [HELLO, HUNG] {
        let path = dir.path().join(name);
        host.add_plugin(
            "static",
            PluginClient::new(name, Transport::Unix { path }, &ClientOptions::default()).unwrap(),
        )
        .await
        .unwrap();
    }
    let routes = webhook::routes(&host, plugin_deadline);

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
    tokio::spawn(async move { serve_https_with(listener, tls, routes, serving, &limits).await });
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
    pub async fn post(&self, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        self.try_post(path, body).await.unwrap()
    }

    /// [`Self::post`], with the client's failure (reset connection…) as an error.
    pub async fn try_post(&self, path: &str, body: Vec<u8>) -> Result<(u16, Vec<u8>), hyper::Error> {
        let tls = self.connect().await;
        self.post_on(tls, path, body).await
    }

    /// A TLS client of the webhook offering ALPN `alpn`, verifying the
    /// webhook's (pinned) certificate.
    pub fn tls_connector(&self, alpn: &[u8]) -> tokio_rustls::TlsConnector {
        let verifier =
            PinnedServerVerifier::new(pem::read_certificates(&self.certs.server.cert_path, "server").unwrap()).unwrap();
        let mut config = rustls::ClientConfig::builder_with_provider(cnpgi_tls::crypto_provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// A TLS connection to the webhook (ALPN http/1.1), its certificate verified.
    pub async fn connect(&self) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        self.try_connect(&self.tls_connector(b"http/1.1")).await.unwrap()
    }

    /// A TLS connection through `connector`, its handshake complete; the
    /// error when the server closes it first.
    pub async fn try_connect(
        &self,
        connector: &tokio_rustls::TlsConnector,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(self.address).await?;
        connector
            .connect(
                cnpgi_tls::client::server_name("cnpgi-webhook.cnpgi-system.svc").unwrap(),
                tcp,
            )
            .await
    }

    pub async fn post_on(
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

    pub async fn review(&self, path: &str, operation: &str, object: Value, old: Option<Value>) -> Value {
        let review = review_body(operation, object, old);
        let (status, body) = self.post(path, review).await;
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["kind"], "AdmissionReview");
        assert_eq!(answer["response"]["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
        answer["response"].clone()
    }
}

pub fn cluster(plugins: Value) -> Value {
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "cluster-example", "namespace": "default"},
        "spec": {"instances": 3, "plugins": plugins}
    })
}

/// An `AdmissionReview` of a Cluster, as the API server sends it.
pub fn review_body(operation: &str, object: Value, old: Option<Value>) -> Vec<u8> {
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
    serde_json::to_vec(&review).unwrap()
}
