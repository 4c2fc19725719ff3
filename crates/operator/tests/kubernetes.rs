//! Kubernetes discovery against a fake API server at the HTTP level (lists,
//! streaming watches, Event creation) and a real hello-world plugin over
//! mutual TLS: a Service is connected, broken (an Event is recorded),
//! repaired, its server Secret rotated, and deleted.

#![allow(clippy::unwrap_used)]

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use cnpgi_operator::{
    client::ClientOptions,
    discovery::{DiscoverySource, kubernetes::KubernetesServices},
    registry::{Registry, RegistryOptions, RoutingError},
};
use cnpgi_pluginhelper::testing::{TestCertificates, TestPlugin};
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::{Request, Response, body::Frame, service::service_fn};
use hyper_util::rt::TokioIo;
use k8s_openapi::{
    ByteString,
    api::core::v1::{Secret, Service},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde_json::{Value, json};
use tokio::sync::broadcast;
use tokio_stream::{StreamExt, wrappers::BroadcastStream};

const NAMESPACE: &str = "cnpgi-system";
const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

type Body = BoxBody<Bytes, Infallible>;

/// Just enough of the Kubernetes API for list, watch and Events.
#[derive(Clone)]
struct FakeApiServer {
    objects: Arc<Mutex<BTreeMap<&'static str, Vec<Value>>>>,
    watch_events: broadcast::Sender<(&'static str, Value)>,
    watches: Arc<AtomicUsize>,
    events: Arc<Mutex<Vec<Value>>>,
    resource_version: Arc<AtomicU64>,
}

impl FakeApiServer {
    fn new() -> Self {
        Self {
            objects: Arc::default(),
            watch_events: broadcast::channel(64).0,
            watches: Arc::default(),
            events: Arc::default(),
            resource_version: Arc::new(AtomicU64::new(1)),
        }
    }

    fn stamp(&self, mut object: Value) -> Value {
        let version = self.resource_version.fetch_add(1, Ordering::SeqCst) + 1;
        object["metadata"]["resourceVersion"] = json!(version.to_string());
        object
    }

    fn seed(&self, resource: &'static str, object: Value) {
        let object = self.stamp(object);
        self.objects.lock().unwrap().entry(resource).or_default().push(object);
    }

    /// Sends a watch event to every open watch of `resource`.
    fn push(&self, resource: &'static str, kind: &str, object: Value) {
        let object = self.stamp(object);
        self.watch_events
            .send((resource, json!({ "type": kind, "object": object })))
            .unwrap();
    }

    async fn start(self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let this = self.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |request| {
                        let this = this.clone();
                        async move { Ok::<_, Infallible>(this.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        format!("http://{address}")
    }

    async fn handle(&self, request: Request<hyper::body::Incoming>) -> Response<Body> {
        let path = request.uri().path().to_owned();
        let query = request.uri().query().unwrap_or_default().to_owned();
        let full = |status: u16, body: Value| {
            Response::builder()
                .status(status)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())).boxed())
                .unwrap()
        };
        if path.starts_with("/apis/events.k8s.io/v1/") {
            let body = request.into_body().collect().await.unwrap().to_bytes();
            let event: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            self.events.lock().unwrap().push(event.clone());
            return full(201, event);
        }
        let resource = match path.as_str() {
            p if p == format!("/api/v1/namespaces/{NAMESPACE}/services") => "services",
            p if p == format!("/api/v1/namespaces/{NAMESPACE}/secrets") => "secrets",
            _ => {
                return full(
                    404,
                    json!({"kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404}),
                );
            }
        };
        if query.split('&').any(|pair| pair == "watch=true" || pair == "watch=1") {
            let events = BroadcastStream::new(self.watch_events.subscribe()).filter_map(move |event| match event {
                Ok((r, event)) if r == resource => Some(Ok(Frame::data(Bytes::from(format!("{event}\n"))))),
                _ => None,
            });
            self.watches.fetch_add(1, Ordering::SeqCst);
            return Response::builder()
                .header("content-type", "application/json")
                .body(StreamBody::new(events).boxed())
                .unwrap();
        }
        let items = self.objects.lock().unwrap().get(resource).cloned().unwrap_or_default();
        let version = self.resource_version.load(Ordering::SeqCst).to_string();
        full(
            200,
            json!({ "apiVersion": "v1", "kind": "List", "metadata": { "resourceVersion": version }, "items": items }),
        )
    }
}

fn service(port: &str) -> Value {
    let service = Service {
        metadata: ObjectMeta {
            name: Some("hello-world".into()),
            namespace: Some(NAMESPACE.into()),
            labels: Some(BTreeMap::from([("cnpg.io/pluginName".into(), HELLO.into())])),
            annotations: Some(BTreeMap::from([
                ("cnpg.io/pluginClientSecret".into(), "hello-world-client-tls".into()),
                ("cnpg.io/pluginServerSecret".into(), "hello-world-server-tls".into()),
                ("cnpg.io/pluginPort".into(), port.into()),
            ])),
            ..ObjectMeta::default()
        },
        ..Service::default()
    };
    json!({ "apiVersion": "v1", "kind": "Service", "metadata": serde_json::to_value(service.metadata).unwrap() })
}

fn secret(name: &str, data: &[(&str, &str)]) -> Value {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Secret::default()
    };
    let mut value = serde_json::to_value(secret).unwrap();
    value["apiVersion"] = json!("v1");
    value["kind"] = json!("Secret");
    value
}

async fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("never happened: {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_are_connected_repaired_rotated_and_forgotten() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter("cnpgi_operator=debug")
        .try_init();
    let plugin = TestPlugin::start_tls_with(
        cnpg_i_hello_world::server(),
        TestCertificates::generate("hello-world").unwrap(),
    )
    .await
    .unwrap();
    let certs = plugin.certificates().unwrap();
    let port = plugin.tcp_address().unwrap().port().to_string();

    let api = FakeApiServer::new();
    api.seed("services", service(&port));
    api.seed(
        "secrets",
        secret(
            "hello-world-client-tls",
            &[("tls.crt", &certs.client.cert_pem), ("tls.key", &certs.client.key_pem)],
        ),
    );
    api.seed(
        "secrets",
        secret("hello-world-server-tls", &[("tls.crt", &certs.server.cert_pem)]),
    );
    let url = api.clone().start().await;

    let mut config = kube::Config::new(url.parse().unwrap());
    config.default_namespace = NAMESPACE.into();
    let client = kube::Client::try_from(config).unwrap();
    let mut source = KubernetesServices::new(client, NAMESPACE, "cnpgi-operator", ClientOptions::default());
    source.retry_interval = Duration::from_millis(200);
    source.dial_overrides.insert(
        format!("hello-world.{NAMESPACE}.svc:{port}"),
        format!("127.0.0.1:{port}"),
    );
    let registry = Arc::new(Registry::new(RegistryOptions {
        probe_interval: Duration::from_millis(50),
        ..RegistryOptions::default()
    }));
    let discovery = tokio::spawn(Box::new(source).run(registry.clone()));

    eventually("the plugin Service is connected", || registry.get(HELLO).is_ok()).await;
    // Nothing was wrong at start-up (a Secret listed after its Service is not "missing").
    assert!(
        api.events.lock().unwrap().is_empty(),
        "{:?}",
        api.events.lock().unwrap()
    );
    let first = registry.plugin(HELLO).unwrap();
    assert_eq!(first.source(), format!("kubernetes-services:{NAMESPACE}/hello-world"));
    eventually("both watches are open", || api.watches.load(Ordering::SeqCst) >= 2).await;

    // A broken port annotation: the plugin is forgotten and an Event says why.
    api.push("services", "MODIFIED", service("http"));
    eventually("the broken Service is forgotten", || {
        matches!(registry.get(HELLO), Err(RoutingError::Unknown { .. }))
    })
    .await;
    eventually("an Event is recorded on the Service", || {
        api.events.lock().unwrap().iter().any(|event| {
            event["reason"] == "PluginPortInvalid"
                && event["regarding"]["name"] == "hello-world"
                && event["note"].as_str().unwrap_or_default().contains("not a port number")
        })
    })
    .await;

    // Repaired.
    api.push("services", "MODIFIED", service(&port));
    eventually("the repaired Service is connected", || registry.get(HELLO).is_ok()).await;
    let repaired = registry.plugin(HELLO).unwrap();

    // cert-manager renews the server certificate: the plugin's files and the
    // server Secret change together, and the connection is rebuilt.
    let renewed = TestCertificates::generate("hello-world").unwrap();
    std::fs::rename(&renewed.server.cert_path, &certs.server.cert_path).unwrap();
    std::fs::rename(&renewed.server.key_path, &certs.server.key_path).unwrap();
    api.push(
        "secrets",
        "MODIFIED",
        secret("hello-world-server-tls", &[("tls.crt", &renewed.server.cert_pem)]),
    );
    eventually("the connection is rebuilt with the new pinned certificate", || {
        registry
            .plugin(HELLO)
            .is_some_and(|p| !Arc::ptr_eq(&p, &repaired) && p.state().is_routable())
    })
    .await;
    assert!(!Arc::ptr_eq(&first, &repaired));

    api.push("services", "DELETED", service(&port));
    eventually("the deleted Service is forgotten", || {
        matches!(registry.get(HELLO), Err(RoutingError::Unknown { .. }))
    })
    .await;
    discovery.abort();
}
