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

    let review = json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "1",
            "kind": {"group": "example.com", "version": "v1", "kind": "Table"},
            "resource": {"group": "example.com", "version": "v1", "resource": "tables"},
            "operation": "CREATE",
            "userInfo": {},
            "object": serde_json::to_value(table(json!({"labels": "{ oops"}))).unwrap(),
        }
    });
    let request = http::Request::post("/validate-table")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(&review).unwrap()))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
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
