//! Kubernetes discovery against a fake API server at the HTTP level (lists,
//! streaming watches, Event creation) and a real hello-world plugin over
//! mutual TLS: a Service is connected, broken (an Event is recorded),
//! repaired, its server Secret rotated, and deleted.

#![allow(clippy::unwrap_used)]

use std::{collections::BTreeMap, sync::Arc, sync::atomic::Ordering, time::Duration};

use cnpgi_client::client::ClientOptions;
use cnpgi_operator::testing::FakeApiServer;
use cnpgi_operator::{
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
    api.seed(SERVICES, service(&port));
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
    eventually("both watches are open", Duration::from_secs(10), async || {
        api.watches.load(Ordering::SeqCst) >= 2
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
