//! The host library with a real plugin (hello-world, over a Unix socket)
//! for a resource that is not a Cluster: the ready signal, typed routing,
//! a custom layout, and the admission routes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use cnpgi_host::{
    Host, HostOptions, Operation, PluginResource,
    discovery::{
        socket_dir::SocketDirectory,
        static_list::{StaticAddress, StaticList, StaticPlugin},
    },
    registry::{LookupError, Registry},
    routing::{EnabledPlugin, PluginLayout, PluginStatusUpdate, RouteError},
    webhook::AdmissionPaths,
};
use cnpgi_pluginhelper::testing::TestPlugin;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Pod;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tower::ServiceExt;

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

/// A resource listing its plugins the CloudNativePG way.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Table", namespaced)]
pub struct TableSpec {
    /// Column names.
    pub columns: Vec<String>,
    /// `[{"name": ..., "parameters": {...}}]`.
    #[serde(default)]
    pub plugins: Vec<Value>,
}

impl PluginResource for Table {}

fn table(parameters: Value) -> Table {
    Table::new(
        "users",
        TableSpec {
            columns: vec!["id".into()],
            plugins: vec![json!({"name": HELLO, "parameters": parameters})],
        },
    )
}

async fn hello(dir: &std::path::Path) -> TestPlugin {
    TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir)
        .await
        .unwrap()
}

#[tokio::test]
async fn ready_resolves_once_every_source_had_its_first_look() {
    let dir = tempfile::tempdir().unwrap();
    let _plugin = hello(dir.path()).await;
    let host = Host::<Table>::new(HostOptions::default());
    assert!(host.registry().is_ready(), "no source expected yet");
    host.discover(SocketDirectory::new(dir.path()));
    assert!(!host.registry().is_ready());
    assert_eq!(
        host.registry().pending_sources(),
        [format!("socket-dir:{}", dir.path().display())]
    );
    tokio::time::timeout(Duration::from_secs(20), host.ready())
        .await
        .unwrap();
    // No sleep: the plugin found in the first pass is probed and routable.
    let routable = host.registry().get(HELLO).unwrap();
    assert_eq!(routable.info.metadata.name, HELLO);
    assert!(host.registry().pending_sources().is_empty());
}

#[tokio::test]
async fn ready_waits_for_every_source_and_a_static_list_counts_failures_as_looked_at() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(Registry::default());
    let missing = StaticList::new(vec![StaticPlugin {
        name: "missing.example.com".into(),
        address: StaticAddress::Unix(dir.path().join("missing.example.com")),
    }]);
    cnpgi_host::discovery::spawn(Box::new(missing), registry.clone());
    registry.expect_first_pass("manual");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(registry.pending_sources(), ["manual"]);
    registry.first_pass_done("manual");
    tokio::time::timeout(Duration::from_secs(5), registry.ready())
        .await
        .unwrap();
    assert!(matches!(
        registry.get("missing.example.com"),
        Err(LookupError::Unknown { .. } | LookupError::NotReady { .. })
    ));
}

#[tokio::test]
async fn a_typed_resource_is_validated_mutated_and_its_children_hooked() {
    let dir = tempfile::tempdir().unwrap();
    let _plugin = hello(dir.path()).await;
    let host = Host::<Table>::new(HostOptions::default());
    host.discover(SocketDirectory::new(dir.path()));
    host.ready().await;

    let errors = host.validate_create(&table(json!({"labels": "{ oops"}))).await.unwrap();
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].field, "spec.plugins[0].parameters.labels");

    let (mutated, patched) = host
        .mutate(&table(json!({"labels": r#"{"app":"demo"}"#})))
        .await
        .unwrap();
    assert_eq!(patched.patches.len(), 1);
    assert_eq!(mutated.spec.columns, ["id"], "the rest of the resource is kept");
    assert_eq!(mutated.spec.plugins[0]["parameters"]["labels"], r#"{"app":"demo"}"#);

    let resource = host.routed(&mutated).unwrap();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "users-1"},
        "spec": {"containers": [{"name": "postgres", "image": "postgres:18"}]}
    }))
    .unwrap();
    let hooked = host.lifecycle_hook(&resource, &pod, Operation::Create).await.unwrap();
    let labels = hooked.metadata.labels.unwrap();
    assert_eq!(labels.get("app").map(String::as_str), Some("demo"));
    // The sidecar, as a native sidecar (an init container).
    let sidecars: Vec<_> = hooked
        .spec
        .unwrap()
        .init_containers
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(sidecars, ["pauser"]);

    let status = host.plugin_status(&resource).await.unwrap();
    assert_eq!(status["pluginStatus"][0]["name"], HELLO);
    assert_eq!(status["pluginStatus"][0]["status"], r#"{"enabled":true}"#);
}

/// Plugins named in `spec.implementation`, status entries in `status.implementations`.
#[derive(Debug)]
struct Implementation;

impl PluginLayout for Implementation {
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
        let name = resource.pointer("/spec/implementation").and_then(Value::as_str);
        name.map(|name| EnabledPlugin {
            index: 0,
            name: name.to_owned(),
        })
        .into_iter()
        .collect()
    }

    fn previous_statuses(&self, resource: &Value) -> BTreeMap<String, String> {
        let mut previous = BTreeMap::new();
        for entry in resource
            .pointer("/status/implementations")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let (Some(name), Some(status)) = (entry["name"].as_str(), entry["status"].as_str()) {
                previous.insert(name.to_owned(), status.to_owned());
            }
        }
        previous
    }

    fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]) {
        let entries: Vec<Value> = entries
            .iter()
            .map(|e| json!({"name": e.name, "version": e.version, "status": e.status}))
            .collect();
        resource["status"] = json!({"implementations": entries});
    }
}

/// A resource naming the one plugin implementing it.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "View", namespaced)]
pub struct ViewSpec {
    /// The plugin implementing the view.
    pub implementation: String,
}

impl PluginResource for View {
    fn layout() -> Arc<dyn PluginLayout> {
        Arc::new(Implementation)
    }
}

#[tokio::test]
async fn a_resource_with_its_own_layout_routes_to_the_plugin_it_names() {
    let dir = tempfile::tempdir().unwrap();
    let _plugin = hello(dir.path()).await;
    let host = Host::<View>::new(HostOptions::default());
    host.discover(SocketDirectory::new(dir.path()));
    host.ready().await;

    let view = View::new(
        "v",
        ViewSpec {
            implementation: HELLO.into(),
        },
    );
    let resource = host.routed(&view).unwrap();
    assert_eq!(
        resource.enabled().iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        [HELLO]
    );
    // The layout chose the plugin, and the entries were written its way;
    // but a plugin built on the SDK looks for its entry in CloudNativePG's
    // `status.pluginStatus[]` and refuses the call, naming what it missed:
    // plugins of a resource with its own layout must read it too.
    let refused = host.plugin_status(&resource).await.unwrap_err();
    match refused.route() {
        Some(RouteError::Call {
            plugin,
            rpc,
            code,
            message,
        }) => {
            assert_eq!(
                (plugin.as_str(), *rpc, *code),
                (HELLO, "Operator/SetStatusInCluster", tonic::Code::FailedPrecondition)
            );
            assert!(message.contains("status.pluginStatus"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    let mut with_entries = json!({});
    Implementation.write_plugin_status(
        &mut with_entries,
        &[PluginStatusUpdate {
            name: HELLO.into(),
            status: Some("{}".into()),
            ..Default::default()
        }],
    );
    assert_eq!(Implementation.previous_statuses(&with_entries)[HELLO], "{}");

    let elsewhere = View::new(
        "w",
        ViewSpec {
            implementation: "absent.example.com".into(),
        },
    );
    let refused = host.validate_create(&elsewhere).await.unwrap_err();
    assert!(
        matches!(refused.route(), Some(RouteError::Unavailable(LookupError::Unknown { name })) if name == "absent.example.com"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_admission_routes_deny_with_the_kind_and_field_path() {
    let dir = tempfile::tempdir().unwrap();
    let _plugin = hello(dir.path()).await;
    let host = Host::<Table>::new(HostOptions::default());
    host.discover(SocketDirectory::new(dir.path()));
    host.ready().await;
    let paths = AdmissionPaths::new("Table", "/mutate-table", "/validate-table");
    let app = host.admission_routes(&paths, Duration::from_secs(5));

    let response = app.oneshot(review("/validate-table", "{ oops")).await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["response"]["allowed"], false);
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("Table is invalid: spec.plugins[0].parameters.labels"),
        "{message}"
    );
    let mut metrics = prometheus_client::registry::Registry::default();
    host.metrics().register(&mut metrics);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &metrics).unwrap();
    assert!(
        text.contains(r#"controller_runtime_webhook_requests_total{webhook="/validate-table",code="200"} 1"#),
        "{text}"
    );
}

#[tokio::test]
async fn plugin_changes_fire_when_a_plugin_comes_dies_and_comes_back() {
    use futures_util::StreamExt;

    let dir = tempfile::tempdir().unwrap();
    let plugin = hello(dir.path()).await;
    let options = HostOptions {
        registry: cnpgi_host::registry::RegistryOptions {
            probe_interval: Duration::from_millis(200),
            ..Default::default()
        },
        ..Default::default()
    };
    let host = Host::<Table>::new(options);
    let changes = host.plugin_changes();
    tokio::pin!(changes);
    host.discover(SocketDirectory::new(dir.path()));
    tokio::time::timeout(Duration::from_secs(20), async {
        while host.registry().get(HELLO).is_err() {
            changes.next().await.unwrap();
        }
    })
    .await
    .expect("the plugin found never became routable, or no change said so");

    plugin.stop().await.unwrap();
    // Drain what the discovery of the plugin itself produced, until it is out of routing.
    tokio::time::timeout(Duration::from_secs(20), async {
        while host.registry().get(HELLO).is_ok() {
            changes.next().await.unwrap();
        }
    })
    .await
    .expect("the plugin was never taken out of routing, or no change said so");

    let _back = hello(dir.path()).await;
    tokio::time::timeout(Duration::from_secs(20), async {
        while host.registry().get(HELLO).is_err() {
            changes.next().await.unwrap();
        }
    })
    .await
    .expect("the restarted plugin never became routable, or no change said so");
}

/// A registry whose own probing is slow (10 s): what a lookup gets comes from
/// its own waiting, not from the background task.
fn slow_registry() -> Registry {
    Registry::new(cnpgi_host::registry::RegistryOptions {
        probe_interval: Duration::from_secs(10),
        ..Default::default()
    })
}

fn socket_client(dir: &std::path::Path, name: &str) -> cnpgi_host::PluginClient {
    let options = cnpgi_host::ClientOptions {
        call_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        ..Default::default()
    };
    cnpgi_host::PluginClient::new(name, cnpgi_host::Transport::Unix { path: dir.join(name) }, &options).unwrap()
}

#[tokio::test]
async fn a_plugin_discovered_before_it_answers_is_waited_for_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let registry = slow_registry();
    // Discovered (its Service is there) while nothing listens yet.
    registry.add("static", socket_client(dir.path(), HELLO)).await.unwrap();
    let refused = registry.get(HELLO).unwrap_err();
    assert!(matches!(refused, LookupError::NotReady { .. }), "{refused}");
    assert!(registry.plugin(HELLO).unwrap().is_arriving());

    // It starts listening 700 ms later: a call made now waits for it.
    let path = dir.path().to_owned();
    let starting = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        hello(&path).await
    });
    let started = std::time::Instant::now();
    let routable = registry.get_waiting(HELLO, Duration::from_secs(8)).await.unwrap();
    let waited = started.elapsed();
    assert_eq!(routable.info.metadata.name, HELLO);
    assert!(
        waited >= Duration::from_millis(600),
        "answered before the plugin listened: {waited:?}"
    );
    let plugin = starting.await.unwrap();
    assert!(
        !registry.plugin(HELLO).unwrap().is_arriving(),
        "it answered once: no longer arriving"
    );

    // Once it answered, a plugin that goes away fails at once: a dead
    // plugin does not hold every call for the whole patience.
    plugin.stop().await.unwrap();
    // The next probe runs on a new connection; make the registry see it.
    registry.plugin(HELLO).unwrap().refresh().await;
    let started = std::time::Instant::now();
    let error = registry.get_waiting(HELLO, Duration::from_secs(8)).await.unwrap_err();
    assert!(matches!(error, LookupError::NotReady { .. }), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "waited {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_arriving_plugin_that_never_answers_is_refused_after_the_patience_saying_so() {
    let dir = tempfile::tempdir().unwrap();
    let registry = slow_registry();
    registry.add("static", socket_client(dir.path(), HELLO)).await.unwrap();
    let started = std::time::Instant::now();
    let error = registry
        .get_waiting(HELLO, Duration::from_millis(800))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(800), "gave up early: {waited:?}");
    assert!(waited < Duration::from_secs(4), "took {waited:?}");
    let message = error.to_string();
    assert!(
        message.contains(HELLO) && message.contains("waited 800 ms"),
        "{message}"
    );

    // Nobody has heard of this one: refused after the short grace a
    // discovery in flight gets, not the whole patience, naming what to check.
    let started = std::time::Instant::now();
    let error = registry
        .get_waiting("absent.example.com", Duration::from_secs(8))
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(waited >= cnpgi_host::registry::UNKNOWN_GRACE, "{waited:?}");
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    assert!(
        error.to_string().contains("cnpg.io/pluginName=absent.example.com"),
        "{error}"
    );
}

#[tokio::test]
async fn a_plugin_registered_a_moment_after_the_call_is_found_not_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _plugin = hello(dir.path()).await;
    let registry = Arc::new(slow_registry());
    // Its Service was created just before the call; discovery registers it
    // 300 ms later.
    let adding = {
        let registry = registry.clone();
        let path = dir.path().to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            registry.add("static", socket_client(&path, HELLO)).await.unwrap();
        })
    };
    let routable = registry.get_waiting(HELLO, Duration::from_secs(5)).await.unwrap();
    assert_eq!(routable.info.metadata.name, HELLO);
    adding.await.unwrap();
}

/// A valid `labels` parameter of hello-world.
const VALID_LABELS: &str = r#"{"a": "b"}"#;

/// An `AdmissionReview` of `operation` on a Table (`old` for an update),
/// posted to `path`.
fn admission_review(path: &str, operation: &str, object: Value, old: Option<Value>) -> http::Request<axum::body::Body> {
    let mut request = json!({
        "uid": "1",
        "kind": {"group": "example.com", "version": "v1", "kind": "Table"},
        "resource": {"group": "example.com", "version": "v1", "resource": "tables"},
        "operation": operation,
        "userInfo": {},
        "object": object,
    });
    if let Some(old) = old {
        request["oldObject"] = old;
    }
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request});
    http::Request::post(path)
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(&review).unwrap()))
        .unwrap()
}

/// The admission review of creating a Table that enables hello-world with
/// `labels`, posted to `path`.
fn review(path: &str, labels: &str) -> http::Request<axum::body::Body> {
    let object = serde_json::to_value(table(json!({"labels": labels}))).unwrap();
    admission_review(path, "CREATE", object, None)
}

/// The admission review of updating a Table being deleted (its finalizer
/// going: the API server sends the old object with it), posted to `path`.
fn deleting_review(path: &str, labels: &str) -> http::Request<axum::body::Body> {
    let mut object = serde_json::to_value(table(json!({"labels": labels}))).unwrap();
    object["metadata"]["deletionTimestamp"] = json!("2026-11-26T10:00:00Z");
    let mut old = object.clone();
    old["metadata"]["finalizers"] = json!(["cnpgi.io/plugins"]);
    admission_review(path, "UPDATE", object, Some(old))
}

/// A host that knows hello-world's address in `dir` (a Service, here a
/// static entry) before anything listens there, once discovery had its look.
async fn host_before_hello_listens(dir: &std::path::Path) -> Host<Table> {
    let host = Host::<Table>::new(HostOptions::default());
    host.discover(StaticList::new(vec![StaticPlugin {
        name: HELLO.into(),
        address: StaticAddress::Unix(dir.join(HELLO)),
    }]));
    host.ready().await;
    host
}

#[tokio::test]
async fn the_webhook_admits_a_resource_applied_while_its_plugin_is_still_starting() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_before_hello_listens(dir.path()).await;
    assert!(
        host.registry().get(HELLO).is_err(),
        "not listening yet, not routable yet"
    );
    let paths = AdmissionPaths::new("Table", "/mutate-table", "/validate-table");
    let app = host.admission_routes(&paths, Duration::from_secs(8));

    let path = dir.path().to_owned();
    let starting = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        hello(&path).await
    });
    let response = app
        .clone()
        .oneshot(review("/mutate-table", VALID_LABELS))
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["response"]["allowed"], true, "{body}");
    let _plugin = starting.await.unwrap();
}

#[tokio::test]
async fn the_webhook_refuses_a_plugin_that_never_starts_within_its_deadline_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_before_hello_listens(dir.path()).await;
    let paths = AdmissionPaths::new("Table", "/mutate-table", "/validate-table");
    // A 2 s deadline: the wait for the plugin is cut to 1.5 s, so the answer
    // is the plugin's reason, not a timeout.
    let app = host.admission_routes(&paths, Duration::from_secs(2));
    let started = std::time::Instant::now();
    let response = app.oneshot(review("/mutate-table", VALID_LABELS)).await.unwrap();
    let waited = started.elapsed();
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["response"]["allowed"], false, "{body}");
    let message = body["response"]["status"]["message"].as_str().unwrap();
    assert!(
        message.contains(HELLO) && message.contains("waited 1500 ms"),
        "{message}"
    );
    assert!(waited < Duration::from_secs(2), "{waited:?}");
}

#[tokio::test]
async fn the_webhooks_let_a_resource_being_deleted_go_without_its_plugins() {
    let dir = tempfile::tempdir().unwrap();
    // hello-world never starts: asked, the webhooks would refuse (the test
    // above), and the finalizer could never be removed.
    let host = host_before_hello_listens(dir.path()).await;
    let paths = AdmissionPaths::new("Table", "/mutate-table", "/validate-table");
    let app = host.admission_routes(&paths, Duration::from_secs(2));
    for path in ["/mutate-table", "/validate-table"] {
        let started = std::time::Instant::now();
        // Wrong parameters too: a resource going away is not validated.
        let response = app.clone().oneshot(deleting_review(path, "not a map")).await.unwrap();
        let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
        assert_eq!(body["response"]["allowed"], true, "{path}: {body}");
        assert!(body["response"]["patch"].is_null(), "{path}: nothing patched: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{path}: answered without waiting for the plugin"
        );
    }
    // The same review of a resource not being deleted is still refused.
    let response = app.oneshot(review("/validate-table", "not a map")).await.unwrap();
    let body: Value = serde_json::from_slice(&response.into_body().collect().await.unwrap().to_bytes()).unwrap();
    assert_eq!(body["response"]["allowed"], false, "{body}");
}
