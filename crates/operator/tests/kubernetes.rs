//! Kubernetes discovery against a fake API server at the HTTP level (lists,
//! streaming watches, Event creation) and a real hello-world plugin over
//! mutual TLS: a Service is connected, broken (an Event is recorded),
//! repaired, its server Secret rotated, and deleted.

#![allow(clippy::unwrap_used)]

use std::{collections::BTreeMap, sync::Arc, sync::atomic::Ordering, time::Duration};

use cnpgi_client::client::ClientOptions;
use cnpgi_host::testing::FakeApiServer;
use cnpgi_host::{
    discovery::{DiscoverySource, kubernetes::KubernetesServices},
    registry::{LookupError, Registry, RegistryOptions},
};
use cnpgi_pluginhelper::testing::{TestCertificates, TestPlugin, eventually};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Secret, Service},
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use serde_json::{Value, json};

const NAMESPACE: &str = "cnpgi-system";
const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";
const SERVICES: &str = "/api/v1/namespaces/cnpgi-system/services";
const SECRETS: &str = "/api/v1/namespaces/cnpgi-system/secrets";
const ENDPOINT_SLICES: &str = "/apis/discovery.k8s.io/v1/namespaces/cnpgi-system/endpointslices";

/// An EndpointSlice of the Service `hello-world` with one endpoint.
fn endpoint_slice(ready: bool) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "hello-world-abcde",
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/service-name": "hello-world"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.7"], "conditions": {"ready": ready}}],
        "ports": [{"port": 9090, "protocol": "TCP"}],
    })
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

/// A fake API server holding the plugin Service `hello-world` (on `port`),
/// its client and server Secrets, and no EndpointSlice yet.
fn plugin_api(port: &str, certs: &TestCertificates) -> FakeApiServer {
    let api = FakeApiServer::new();
    api.collection(ENDPOINT_SLICES);
    api.seed(SERVICES, service(port));
    api.seed(
        SECRETS,
        secret(
            "hello-world-client-tls",
            &[("tls.crt", &certs.client.cert_pem), ("tls.key", &certs.client.key_pem)],
        ),
    );
    api.seed(
        SECRETS,
        secret("hello-world-server-tls", &[("tls.crt", &certs.server.cert_pem)]),
    );
    api
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

    let api = plugin_api(&port, certs);
    let url = api.clone().start().await;
    let client = FakeApiServer::client(&url, NAMESPACE);
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

    eventually("the plugin Service is connected", Duration::from_secs(10), async || {
        registry.get(HELLO).is_ok()
    })
    .await;
    // Nothing was wrong at start-up (a Secret listed after its Service is not "missing").
    assert!(api.recorded("POST", "/apis/events.k8s.io/").is_empty());
    let first = registry.plugin(HELLO).unwrap();
    assert_eq!(first.source(), format!("kubernetes-services:{NAMESPACE}/hello-world"));
    eventually("the three watches are open", Duration::from_secs(10), async || {
        api.watches.load(Ordering::SeqCst) >= 3
    })
    .await;

    // A broken port annotation: the plugin is forgotten and an Event says why.
    api.push(SERVICES, "MODIFIED", service("http"));
    eventually("the broken Service is forgotten", Duration::from_secs(10), async || {
        matches!(registry.get(HELLO), Err(LookupError::Unknown { .. }))
    })
    .await;
    eventually(
        "an Event is recorded on the Service",
        Duration::from_secs(10),
        async || {
            api.recorded("POST", "/apis/events.k8s.io/")
                .iter()
                .map(|r| &r.body)
                .any(|event| {
                    event["reason"] == "PluginPortInvalid"
                        && event["regarding"]["name"] == "hello-world"
                        && event["note"].as_str().unwrap_or_default().contains("not a port number")
                })
        },
    )
    .await;

    // Repaired.
    api.push(SERVICES, "MODIFIED", service(&port));
    eventually(
        "the repaired Service is connected",
        Duration::from_secs(10),
        async || registry.get(HELLO).is_ok(),
    )
    .await;
    let repaired = registry.plugin(HELLO).unwrap();

    // cert-manager renews the server certificate: the plugin's files and the
    // server Secret change together, and the connection is rebuilt.
    let renewed = TestCertificates::generate("hello-world").unwrap();
    std::fs::rename(&renewed.server.cert_path, &certs.server.cert_path).unwrap();
    std::fs::rename(&renewed.server.key_path, &certs.server.key_path).unwrap();
    api.push(
        SECRETS,
        "MODIFIED",
        secret("hello-world-server-tls", &[("tls.crt", &renewed.server.cert_pem)]),
    );
    eventually(
        "the connection is rebuilt with the new pinned certificate",
        Duration::from_secs(10),
        async || {
            registry
                .plugin(HELLO)
                .is_some_and(|p| !Arc::ptr_eq(&p, &repaired) && p.state().is_routable())
        },
    )
    .await;
    assert!(!Arc::ptr_eq(&first, &repaired));

    api.push(SERVICES, "DELETED", service(&port));
    eventually(
        "the deleted Service is forgotten",
        Duration::from_secs(10),
        async || matches!(registry.get(HELLO), Err(LookupError::Unknown { .. })),
    )
    .await;
    discovery.abort();
}

/// A plugin whose Pods are still starting when its Service appears is probed
/// again as soon as the Service gets a ready endpoint, not at the registry's
/// next retry of an unreachable plugin (after 1, 3, 7, 15 s... from its
/// registration, up to the probe interval): installed with the resources
/// that use it, it is routable as soon as it can answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_is_probed_when_its_service_gets_a_ready_endpoint() {
    let plugin = TestPlugin::start_tls_with(
        cnpg_i_hello_world::server(),
        TestCertificates::generate("hello-world").unwrap(),
    )
    .await
    .unwrap();
    let certs = plugin.certificates().unwrap();
    let plugin_address = plugin.tcp_address().unwrap();
    // The Service's address refuses connections (the Pods are starting) until
    // a forwarder to the plugin listens there.
    let front = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let front_port = front.local_addr().unwrap().port();
    drop(front);

    let api = plugin_api(&front_port.to_string(), certs);
    let url = api.clone().start().await;
    let mut source = KubernetesServices::new(
        FakeApiServer::client(&url, NAMESPACE),
        NAMESPACE,
        "cnpgi-operator",
        ClientOptions::default(),
    );
    source.dial_overrides.insert(
        format!("hello-world.{NAMESPACE}.svc:{front_port}"),
        format!("127.0.0.1:{front_port}"),
    );
    let registry = Arc::new(Registry::new(RegistryOptions {
        probe_interval: Duration::from_secs(3600),
        ..RegistryOptions::default()
    }));
    let discovery = tokio::spawn(Box::new(source).run(registry.clone()));
    eventually(
        "the plugin is registered, not routable (nothing listens yet)",
        Duration::from_secs(10),
        async || registry.plugin(HELLO).is_some_and(|p| !p.state().is_routable()),
    )
    .await;
    let registered = tokio::time::Instant::now();
    eventually("the three watches are open", Duration::from_secs(10), async || {
        api.watches.load(Ordering::SeqCst) >= 3
    })
    .await;
    // Past the registry's retries at 1, 3 and 7 s; the next is at 15 s.
    tokio::time::sleep_until(registered + Duration::from_secs(8)).await;

    // The plugin's Pod starts listening.
    let forwarder = tokio::net::TcpListener::bind(("127.0.0.1", front_port)).await.unwrap();
    let probes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = probes.clone();
    let forwarding = tokio::spawn(async move {
        while let Ok((mut inbound, _)) = forwarder.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(plugin_address).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    // An endpoint that is not ready yet: nothing probes the plugin.
    api.push(ENDPOINT_SLICES, "ADDED", endpoint_slice(false));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        probes.load(Ordering::SeqCst),
        0,
        "the plugin was probed before its Service had a ready endpoint"
    );

    // The endpoint turns ready (10 s after the registration): probed at
    // once, well before the registry's own retry at 15 s.
    api.push(ENDPOINT_SLICES, "MODIFIED", endpoint_slice(true));
    eventually(
        "the plugin is routable right after its endpoint turned ready",
        Duration::from_secs(3),
        async || registry.get(HELLO).is_ok(),
    )
    .await;
    assert!(
        registered.elapsed() < Duration::from_secs(15),
        "routable only {:?} after its registration: the registry's own retry may have done it",
        registered.elapsed()
    );
    discovery.abort();
    forwarding.abort();
}
