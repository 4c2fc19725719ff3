//! The operator's webhook and lifecycle code paths against a Go plugin built
//! with upstream cnpg-i-machinery. Run by `tests/interop/run.sh`, which builds
//! the plugin and sets `CNPGI_GO_PLUGIN` to its path; without it (no Go
//! toolchain) the test says so and does nothing.

#![allow(clippy::unwrap_used)]

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine;
use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{
    Host, HostOptions,
    routing::{HookOutcome, HookPhase},
};
use cnpgi_operator::{
    crd::Cluster,
    pods,
    webhook::{self, MUTATE_PATH, VALIDATE_PATH},
};
use cnpgi_pluginhelper::testing::ChildGuard;
use serde_json::{Value, json};
use tower::ServiceExt;

const GO_PLUGIN: &str = "cnpgi-go-plugin.example.com";

fn cluster(color: Option<&str>) -> Value {
    let mut plugin = json!({ "name": GO_PLUGIN });
    if let Some(color) = color {
        plugin["parameters"] = json!({ "color": color });
    }
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "go-example", "namespace": "default", "uid": "4f1e2d3c-0000-4000-8000-000000000009"},
        "spec": {"instances": 1, "plugins": [plugin]}
    })
}

async fn review(routes: &axum::Router, path: &str, operation: &str, object: Value) -> Value {
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "go-interop", "operation": operation,
            "kind": {"group": "cnpgi.io", "version": "v1", "kind": "Cluster"},
            "resource": {"group": "cnpgi.io", "version": "v1", "resource": "clusters"},
            "name": "go-example", "namespace": "default",
            "userInfo": {"username": "admin"}, "object": object, "dryRun": false
        }
    });
    let request = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(body.to_string()))
        .unwrap();
    let response = routes.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20).await.unwrap();
    serde_json::from_slice::<Value>(&bytes).unwrap()["response"].clone()
}

#[tokio::test]
async fn webhook_and_lifecycle_paths_through_a_go_plugin() {
    let Ok(binary) = std::env::var("CNPGI_GO_PLUGIN") else {
        eprintln!("CNPGI_GO_PLUGIN is not set: run tests/interop/run.sh (needs Go) to exercise this test");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let _plugin = ChildGuard::spawn(
        Command::new(&binary)
            .args(["plugin", &format!("--plugin-path={}", dir.path().display())])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap();
    let socket = dir.path().join(GO_PLUGIN);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !socket.exists() {
        assert!(Instant::now() < deadline, "the Go plugin did not open its socket");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let host = Host::<Cluster>::new(HostOptions::default());
    let client = PluginClient::new(GO_PLUGIN, Transport::Unix { path: socket }, &ClientOptions::default()).unwrap();
    host.add_plugin("go", client).await.unwrap();
    let routes = webhook::routes(&host, Duration::from_secs(5));

    // Mutating webhook: the Go plugin's default comes back as a base64 JSON Patch.
    let original = cluster(None);
    let response = review(&routes, MUTATE_PATH, "CREATE", original.clone()).await;
    assert_eq!(response["allowed"], true, "{response}");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().unwrap())
        .unwrap();
    let mut mutated = original;
    cnpgi_core::patch::apply_patch_bytes(&mut mutated, &patch).unwrap();
    assert_eq!(mutated["spec"]["plugins"][0]["parameters"]["color"], "blue");

    // Validating webhook: the Go plugin's ValidationError lands on the field.
    let response = review(&routes, VALIDATE_PATH, "CREATE", cluster(Some("green"))).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"spec.plugins[0].parameters.color: Invalid value: "green": must be red or blue"#),
        "{message}"
    );
    assert_eq!(
        review(&routes, VALIDATE_PATH, "CREATE", cluster(Some("red"))).await["allowed"],
        true
    );

    // Lifecycle: the reconciler's Pod carries the Go plugin's label, and a
    // parameter change shows as drift.
    let red = cluster(Some("red"));
    let pod = pods::build_pod(&host, &host.routed_json(red.clone()), &Default::default(), 1)
        .await
        .unwrap();
    assert_eq!(pod["metadata"]["labels"]["go-plugin"], "red");
    assert_eq!(pod["spec"]["containers"][0]["name"], "postgres");
    let hash = pods::wanted_hash(&host, &host.routed_json(red.clone()), &Default::default(), 1)
        .await
        .unwrap();
    assert_eq!(
        pod["metadata"]["annotations"][pods::PLUGINS_HASH_ANNOTATION],
        hash.as_str()
    );
    assert_ne!(
        pods::wanted_hash(&host, &host.routed_json(cluster(Some("blue"))), &Default::default(), 1)
            .await
            .unwrap(),
        hash
    );

    // ReconcilerHooks, answered by upstream's Go stubs: continue, requeue
    // after the plugin's delay, terminate.
    let annotated = |annotation: &str| {
        let mut cluster = cluster(Some("red"));
        cluster["metadata"]["annotations"] = json!({ annotation: "yes" });
        cluster
    };
    let hooks = |cluster: Value| {
        let host = host.clone();
        async move {
            host.reconciler_hooks(HookPhase::Pre, &host.routed_json(cluster))
                .await
                .unwrap()
        }
    };
    assert_eq!(hooks(red.clone()).await, HookOutcome::Continue);
    assert_eq!(
        hooks(annotated("go-plugin/requeue")).await,
        HookOutcome::Requeue {
            plugin: GO_PLUGIN.into(),
            after: Duration::from_secs(7)
        }
    );
    assert_eq!(
        hooks(annotated("go-plugin/terminate")).await,
        HookOutcome::Terminate {
            plugin: GO_PLUGIN.into()
        }
    );
}
