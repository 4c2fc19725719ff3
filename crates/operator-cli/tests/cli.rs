//! The real `cnpgi-operator` binary: `crd`, usage errors, and `run` end to
//! end against a fake API server (over HTTP, through a kubeconfig) with a real
//! hello-world plugin on a Unix socket.

#![allow(clippy::unwrap_used)]

use std::{
    io::{Read, Write},
    net::TcpListener,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use cnpgi_operator::testing::FakeApiServer;
use cnpgi_pluginhelper::{
    server::PluginListener,
    testing::{ChildGuard, TestCertificates},
};
use serde_json::json;

const BIN: &str = env!("CARGO_BIN_EXE_cnpgi-operator");
const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

#[test]
fn crd_prints_the_cluster_crd_as_yaml() {
    let output = Command::new(BIN).arg("crd").output().unwrap();
    assert!(output.status.success());
    let crd: serde_json::Value = serde_yaml_ng::from_slice(&output.stdout).unwrap();
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "clusters.cnpgi.io");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["run", "--plugin-dir"][..],
        &["run", "--client-key=k"],
        &["frobnicate"],
    ] {
        let output = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let output = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--webhook-cert-dir",
        "--plugin-dir",
        "--plugin",
        "--fail-open",
        "--metrics-address",
    ] {
        assert!(help.contains(flag), "{flag}");
    }
}

#[test]
fn a_bad_static_plugin_is_a_clear_error() {
    let output = Command::new(BIN)
        .args([
            "run",
            "--plugin",
            "hello=https://plugin:9090",
            "--disable-controller",
            "--kubernetes-plugins=false",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--client-cert"), "{stderr}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// GET over plain HTTP/1.0; `None` while nothing listens.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((status, body))
}

async fn eventually(what: &str, child: &mut Child, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("cnpgi-operator exited ({status}) while waiting for: {what}");
        }
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_reconciles_clusters_with_plugins_and_stops_on_sigterm() {
    // The plugin, as a sidecar would serve it.
    let plugins = tempfile::tempdir().unwrap();
    let listener = PluginListener::bind_unix(plugins.path(), HELLO).unwrap();
    tokio::spawn(cnpg_i_hello_world::server().serve(listener, std::future::pending()));

    // The API server, with one Cluster.
    let api = FakeApiServer::new();
    api.collection("/api/v1/namespaces/default/pods");
    api.collection("/api/v1/namespaces/cnpgi-system/services");
    api.collection("/api/v1/namespaces/cnpgi-system/secrets");
    api.seed(
        "/apis/cnpgi.io/v1/namespaces/default/clusters",
        json!({
            "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
            "metadata": {"name": "cluster-example", "namespace": "default", "uid": "2c1f3e4d-0000-4000-8000-000000000001", "generation": 1},
            "spec": {"instances": 2, "plugins": [{"name": HELLO}]}
        }),
    );
    let url = api.clone().start().await;
    let work = tempfile::tempdir().unwrap();
    let kubeconfig = work.path().join("kubeconfig");
    std::fs::write(&kubeconfig, FakeApiServer::kubeconfig(&url, "default")).unwrap();

    // Webhook serving certificate.
    let certs = TestCertificates::generate("cnpgi-webhook.cnpgi-system.svc").unwrap();
    std::fs::copy(&certs.server.cert_path, work.path().join("tls.crt")).unwrap();
    std::fs::copy(&certs.server.key_path, work.path().join("tls.key")).unwrap();

    let (webhook_port, metrics_port) = (free_port(), free_port());
    let mut child = ChildGuard::spawn(
        Command::new(BIN)
            .args([
                "run",
                "--namespace=cnpgi-system",
                "--watch-namespace=default",
                "--probe-interval-seconds=1",
            ])
            .arg(format!("--plugin-dir={}", plugins.path().display()))
            .arg(format!("--webhook-cert-dir={}", work.path().display()))
            .arg(format!("--webhook-address=127.0.0.1:{webhook_port}"))
            .arg(format!("--metrics-address=127.0.0.1:{metrics_port}"))
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit()),
    )
    .unwrap();

    eventually("/readyz answers 200", &mut child, || {
        get(metrics_port, "/readyz").is_some_and(|(s, _)| s == 200)
    })
    .await;
    assert_eq!(get(metrics_port, "/healthz").unwrap().0, 200);
    eventually("the Cluster's two Pods are created", &mut child, || {
        api.stored("/api/v1/namespaces/default/pods").len() == 2
    })
    .await;
    for pod in api.stored("/api/v1/namespaces/default/pods") {
        assert_eq!(pod["metadata"]["labels"]["plugin-metadata"], "default", "{pod}");
        assert_eq!(pod["spec"]["initContainers"][0]["name"], "pauser");
    }
    let (_, metrics) = get(metrics_port, "/metrics").unwrap();
    assert!(
        metrics.contains(&format!("cnpgi_plugin_ready{{plugin=\"{HELLO}\"}} 1")),
        "{metrics}"
    );
    assert!(metrics.contains("cnpgi_plugin_calls_total"), "{metrics}");
    // Every request the operator made is one the RBAC manifests allow.
    for request in api.requests.lock().unwrap().iter() {
        let (verb, group, resource) =
            cnpgi_operator::rbac::permission_for_request(&request.method, &request.path, &request.query)
                .unwrap_or_else(|| panic!("unexpected request {} {}", request.method, request.path));
        assert!(
            cnpgi_operator::rbac::is_allowed(verb, &group, &resource),
            "{verb} {group}/{resource} ({} {}) is not in cnpgi_operator::rbac::PERMISSIONS",
            request.method,
            request.path
        );
    }
    // The webhook port accepts TLS connections.
    assert!(std::net::TcpStream::connect(("127.0.0.1", webhook_port)).is_ok());

    let status = Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "cnpgi-operator did not stop after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status}");
}
