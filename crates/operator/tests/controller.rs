//! The reconciler: the Pod-building chain against real plugins, and the
//! Kubernetes side against a fake API server at the HTTP level.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{Host, HostOptions, testing::FakeApiServer};
use cnpgi_operator::{
    controller::{self, Context, ReconcileError},
    crd::Cluster,
    pods::{self, CLUSTER_LABEL, PLUGINS_HASH_ANNOTATION},
};
use cnpgi_pluginhelper::{testing::TestPlugin, transport::PluginListener};
use serde_json::{Value, json};

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";
const PODS: &str = "/api/v1/namespaces/default/pods";
const CLUSTERS: &str = "/apis/cnpgi.io/v1/namespaces/default/clusters";

struct Plugins {
    _dir: tempfile::TempDir,
    _served: TestPlugin,
    host: Host<Cluster>,
}

async fn plugins() -> Plugins {
    plugins_observed(ClientOptions::default()).await
}

async fn plugins_observed(options: ClientOptions) -> Plugins {
    let dir = tempfile::tempdir().unwrap();
    let served = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let host = Host::new(HostOptions::default());
    let path = dir.path().join(HELLO);
    host.add_plugin(
        "static",
        PluginClient::new(HELLO, Transport::Unix { path }, &options).unwrap(),
    )
    .await
    .unwrap();
    Plugins {
        _dir: dir,
        _served: served,
        host,
    }
}

fn cluster_json(instances: i32, plugins: Value) -> Value {
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "cluster-example", "namespace": "default", "uid": "0b9f6b3a-8d2e-4c5a-9d61-3f0e2a7c1b11", "generation": 1},
        "spec": {"instances": instances, "plugins": plugins}
    })
}

#[tokio::test]
async fn pods_are_built_through_the_lifecycle_chain() {
    let plugins = plugins().await;
    let cluster = cluster_json(
        1,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"db\"}"}}]),
    );
    let pod = pods::build_pod(
        &plugins.host,
        &plugins.host.routed_json(cluster.clone()),
        &Default::default(),
        1,
    )
    .await
    .unwrap();
    assert_eq!(pod["metadata"]["name"], "cluster-example-1");
    assert_eq!(pod["metadata"]["labels"][CLUSTER_LABEL], "cluster-example");
    assert_eq!(pod["metadata"]["labels"]["team"], "db");
    assert_eq!(pod["metadata"]["annotations"]["plugin-metadata"], "default");
    assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Cluster");
    assert_eq!(pod["spec"]["containers"][0]["name"], "postgres");
    assert_eq!(pod["spec"]["initContainers"][0]["name"], "pauser");
    assert_eq!(pod["spec"]["initContainers"][0]["restartPolicy"], "Always");
    let hash = pod["metadata"]["annotations"][PLUGINS_HASH_ANNOTATION]
        .as_str()
        .unwrap()
        .to_owned();

    assert_eq!(
        pods::wanted_hash(
            &plugins.host,
            &plugins.host.routed_json(cluster.clone()),
            &Default::default(),
            1
        )
        .await
        .unwrap(),
        hash,
        "stable"
    );
    let changed = cluster_json(
        1,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"ops\"}"}}]),
    );
    assert_ne!(
        pods::wanted_hash(
            &plugins.host,
            &plugins.host.routed_json(changed.clone()),
            &Default::default(),
            1
        )
        .await
        .unwrap(),
        hash,
        "a parameter change shows"
    );
}

async fn context(plugins: &Plugins, api: &FakeApiServer, cluster: &Value) -> Arc<Context> {
    context_with(plugins, api, cluster, |_| {}).await
}

/// As [`context`], with `configure` applied to the context first.
async fn context_with(
    plugins: &Plugins,
    api: &FakeApiServer,
    cluster: &Value,
    configure: impl FnOnce(&mut Context),
) -> Arc<Context> {
    api.collection(PODS);
    api.seed(CLUSTERS, cluster.clone());
    let url = api.clone().start().await;
    let mut ctx = Context::new(
        FakeApiServer::client(&url, "default"),
        plugins.host.clone(),
        "cnpgi-operator",
    );
    ctx.resync = Duration::from_secs(60);
    configure(&mut ctx);
    Arc::new(ctx)
}

/// The (only) Cluster as the fake API server has it now, status included.
fn stored_cluster(api: &FakeApiServer) -> Arc<Cluster> {
    Arc::new(serde_json::from_value(api.stored(CLUSTERS)[0].clone()).unwrap())
}

const SET_STATUS: &str = "Operator/SetStatusInCluster";

fn pod_names(api: &FakeApiServer) -> Vec<String> {
    let mut names: Vec<String> = api
        .stored(PODS)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap().to_owned())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn reconcile_creates_patched_pods_rolls_on_parameter_change_and_scales_down() {
    let plugins = plugins().await;
    let api = FakeApiServer::new();
    let two = cluster_json(
        2,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"db\"}"}}]),
    );
    let ctx = context(&plugins, &api, &two).await;

    controller::reconcile(Arc::new(serde_json::from_value(two.clone()).unwrap()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(pod_names(&api), ["cluster-example-1", "cluster-example-2"]);
    for pod in api.stored(PODS) {
        assert_eq!(pod["metadata"]["labels"]["team"], "db");
        assert_eq!(pod["spec"]["initContainers"][0]["name"], "pauser");
    }
    let status = api
        .recorded("PATCH", &format!("{CLUSTERS}/cluster-example/status"))
        .last()
        .unwrap()
        .body["status"]
        .clone();
    assert_eq!(status["pluginStatus"][0]["name"], HELLO);
    assert_eq!(status["pluginStatus"][0]["status"], r#"{"enabled":true}"#);
    assert_eq!(
        status["pluginStatus"][0]["capabilities"],
        json!(["TYPE_LIFECYCLE_SERVICE", "TYPE_OPERATOR_SERVICE"])
    );
    assert_eq!(status["phase"], "Creating instances");

    // A parameter change: one Pod is rolled per reconcile, then recreated.
    let changed = cluster_json(
        2,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"ops\"}"}}]),
    );
    let changed_cluster: Arc<Cluster> = Arc::new(serde_json::from_value(changed.clone()).unwrap());
    controller::reconcile(changed_cluster.clone(), ctx.clone())
        .await
        .unwrap();
    assert_eq!(api.recorded("DELETE", PODS).len(), 1, "one Pod at a time");
    assert_eq!(pod_names(&api).len(), 1);
    controller::reconcile(changed_cluster.clone(), ctx.clone())
        .await
        .unwrap();
    assert_eq!(pod_names(&api).len(), 2);
    let teams: Vec<Value> = api
        .stored(PODS)
        .iter()
        .map(|p| p["metadata"]["labels"]["team"].clone())
        .collect();
    assert!(
        teams.contains(&json!("ops")) && teams.contains(&json!("db")),
        "{teams:?}"
    );
    controller::reconcile(changed_cluster.clone(), ctx.clone())
        .await
        .unwrap();
    controller::reconcile(changed_cluster, ctx.clone()).await.unwrap();
    for pod in api.stored(PODS) {
        assert_eq!(pod["metadata"]["labels"]["team"], "ops");
    }
    // Nothing left to roll: a further reconcile deletes nothing.
    let deletes = api.recorded("DELETE", PODS).len();
    let one = cluster_json(
        1,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"ops\"}"}}]),
    );
    controller::reconcile(Arc::new(serde_json::from_value(one).unwrap()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        api.recorded("DELETE", PODS).len(),
        deletes + 1,
        "scale down deletes exactly one Pod"
    );
    assert_eq!(pod_names(&api), ["cluster-example-1"]);
}

#[tokio::test]
async fn a_missing_plugin_creates_nothing_and_says_why() {
    let plugins = plugins().await;
    let api = FakeApiServer::new();
    let broken = cluster_json(2, json!([{"name": HELLO}, {"name": "missing.example.com"}]));
    let ctx = context(&plugins, &api, &broken).await;
    let err = controller::reconcile(Arc::new(serde_json::from_value(broken).unwrap()), ctx.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, ReconcileError::Plugin(_)), "{err}");
    assert!(api.stored(PODS).is_empty(), "nothing half-created");
    let status = api
        .recorded("PATCH", &format!("{CLUSTERS}/cluster-example/status"))
        .last()
        .unwrap()
        .body["status"]
        .clone();
    assert_eq!(status["phase"], "Plugin error");
    assert!(status["phaseReason"].as_str().unwrap().contains("missing.example.com"));
    let events = api.recorded("POST", "/apis/events.k8s.io/");
    assert!(events.iter().any(|e| e.body["reason"] == "PluginFailed"), "{events:?}");
    assert_eq!(
        controller::error_policy(
            Arc::new(serde_json::from_value(cluster_json(1, json!([]))).unwrap()),
            &err,
            ctx
        ),
        kube::runtime::controller::Action::requeue(Duration::from_secs(10))
    );
}

/// Counts `Deregister` calls.
#[derive(Clone, Default)]
struct Deregistering(Arc<std::sync::atomic::AtomicUsize>);

#[tonic::async_trait]
impl cnpgi_pluginhelper::proto::operator::v1::operator_server::Operator for Deregistering {
    async fn get_capabilities(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::operator::v1::OperatorCapabilitiesRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::operator::v1::OperatorCapabilitiesResult>, tonic::Status>
    {
        use cnpgi_core::capabilities::{OperatorRpc, operator_rpc};
        use cnpgi_pluginhelper::proto::operator::v1::OperatorCapabilitiesResult;
        Ok(tonic::Response::new(OperatorCapabilitiesResult {
            capabilities: vec![operator_rpc(OperatorRpc::Deregister)],
        }))
    }
    async fn deregister(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::operator::v1::DeregisterRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::operator::v1::DeregisterResponse>, tonic::Status> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Ok(tonic::Response::new(Default::default()))
    }
}

#[tokio::test]
async fn removed_plugins_are_deregistered_once_and_empty_status_answers_keep_the_entry() {
    use cnpgi_pluginhelper::{
        proto::{
            identity::v1::plugin_capability::service::Type as ServiceType,
            operator::v1::operator_server::OperatorServer,
        },
        testing::TestIdentity,
        transport::PluginServer,
    };
    const GONE: &str = "gone.example.com";
    let plugins = plugins().await;
    let calls = Deregistering::default();
    let listener = PluginListener::bind_unix(plugins._dir.path(), GONE).unwrap();
    let server = PluginServer::new(TestIdentity::new(GONE).with_service(ServiceType::OperatorService))
        .add_service(OperatorServer::new(calls.clone()));
    tokio::spawn(server.serve(listener, std::future::pending()));
    let path = plugins._dir.path().join(GONE);
    plugins
        .host
        .add_plugin(
            "static",
            PluginClient::new(GONE, Transport::Unix { path }, &ClientOptions::default()).unwrap(),
        )
        .await
        .unwrap();

    // hello-world already reported itself enabled (it answers empty now);
    // gone.example.com was removed from spec.plugins.
    let mut with_status = cluster_json(1, json!([{"name": HELLO}]));
    with_status["status"] = json!({"pluginStatus": [
        {"name": HELLO, "version": "0.1.0", "status": "{\"enabled\":true}"},
        {"name": GONE, "version": "0.0.0-test"}
    ]});
    let api = FakeApiServer::new();
    let ctx = context(&plugins, &api, &with_status).await;
    let cluster: Arc<Cluster> = Arc::new(serde_json::from_value(with_status).unwrap());
    controller::reconcile(cluster, ctx.clone()).await.unwrap();
    assert_eq!(calls.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    let status = api
        .recorded("PATCH", &format!("{CLUSTERS}/cluster-example/status"))
        .last()
        .unwrap()
        .body["status"]
        .clone();
    let entries = status["pluginStatus"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["name"], HELLO);
    assert_eq!(
        entries[0]["status"], r#"{"enabled":true}"#,
        "kept when the plugin answers empty"
    );

    // The next round (status without the removed plugin) sends nothing more.
    let mut next = cluster_json(1, json!([{"name": HELLO}]));
    next["status"] = status;
    controller::reconcile(Arc::new(serde_json::from_value(next).unwrap()), ctx)
        .await
        .unwrap();
    assert_eq!(calls.0.load(std::sync::atomic::Ordering::SeqCst), 1, "sent once");
}

#[tokio::test]
async fn an_api_failure_is_surfaced_on_the_cluster_and_retried_with_backoff() {
    let plugins = plugins().await;
    let api = FakeApiServer::new();
    // No Pod collection: listing the Cluster's Pods answers 404.
    let cluster = cluster_json(1, json!([{"name": HELLO}]));
    api.seed(CLUSTERS, cluster.clone());
    let url = api.clone().start().await;
    let ctx = Arc::new(Context::new(
        FakeApiServer::client(&url, "default"),
        plugins.host.clone(),
        "cnpgi-operator",
    ));
    let parsed: Arc<Cluster> = Arc::new(serde_json::from_value(cluster).unwrap());
    let err = controller::reconcile(parsed.clone(), ctx.clone()).await.unwrap_err();
    assert!(matches!(err, ReconcileError::Kube { .. }), "{err}");
    assert_eq!(err.reason(), "ListPodsFailed");
    assert!(
        err.to_string()
            .starts_with("cannot list the Pods of Cluster cluster-example: not found (NotFound, HTTP 404)"),
        "{err}"
    );

    let patches = api.recorded("PATCH", &format!("{CLUSTERS}/cluster-example/status"));
    let last = patches.last().unwrap();
    assert!(last.query.contains("fieldManager=cnpgi-operator"), "{}", last.query);
    let status = &last.body["status"];
    assert_eq!(status["phase"], "Reconcile error");
    assert_eq!(status["phaseReason"], err.to_string());
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(
        (&ready["status"], &ready["reason"]),
        (&json!("False"), &json!("ListPodsFailed"))
    );
    let events = api.recorded("POST", "/apis/events.k8s.io/");
    assert!(
        events
            .iter()
            .any(|e| e.body["reason"] == "ListPodsFailed" && e.body["type"] == "Warning"),
        "{events:?}"
    );

    // Exponential backoff per Cluster: 1 s, 2 s, 4 s, ...
    let delays: Vec<_> = (0..4)
        .map(|_| controller::error_policy(parsed.clone(), &err, ctx.clone()))
        .collect();
    let secs = |n| kube::runtime::controller::Action::requeue(Duration::from_secs(n));
    assert_eq!(delays, [secs(1), secs(2), secs(4), secs(8)]);
    let mut capped = delays[3].clone();
    for _ in 0..20 {
        capped = controller::error_policy(parsed.clone(), &err, ctx.clone());
    }
    assert_eq!(
        capped,
        kube::runtime::controller::Action::requeue(controller::API_ERROR_BACKOFF_MAX)
    );

    // A successful reconcile starts the backoff over.
    api.collection(PODS);
    controller::reconcile(parsed.clone(), ctx.clone()).await.unwrap();
    assert_eq!(
        controller::error_policy(parsed, &err, ctx),
        kube::runtime::controller::Action::requeue(Duration::from_secs(1))
    );
    let pod = &api.stored(PODS)[0];
    assert_eq!(pod["metadata"]["name"], "cluster-example-1");
    let creates = api.recorded("POST", PODS);
    assert!(
        creates[0].query.contains("fieldManager=cnpgi-operator"),
        "{}",
        creates[0].query
    );
}

/// Counts the calls of each method.
#[derive(Debug, Default)]
struct Calls(std::sync::Mutex<std::collections::BTreeMap<String, usize>>);

impl cnpgi_client::client::CallObserver for Calls {
    fn call_ended(&self, _: &str, method: &str, _: Duration, _: Option<tonic::Code>) {
        *self.0.lock().unwrap().entry(method.to_owned()).or_default() += 1;
    }
}

impl Calls {
    fn take(&self, method: &str) -> usize {
        self.0.lock().unwrap().remove(method).unwrap_or(0)
    }
}

/// Issue 14, point 3: one lifecycle chain per new Pod, and none for an
/// unchanged Cluster; a change the Pods may depend on is evaluated once.
#[tokio::test]
async fn lifecycle_calls_only_when_the_inputs_changed() {
    const HOOK: &str = "OperatorLifecycle/LifecycleHook";
    let calls = Arc::new(Calls::default());
    let plugins = plugins_observed(ClientOptions {
        observer: calls.clone(),
        ..ClientOptions::default()
    })
    .await;
    let api = FakeApiServer::new();
    let three = cluster_json(
        3,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"db\"}"}}]),
    );
    let ctx = context(&plugins, &api, &three).await;
    let reconcile = |value: &Value| {
        let cluster: Arc<Cluster> = Arc::new(serde_json::from_value(value.clone()).unwrap());
        let ctx = ctx.clone();
        async move { controller::reconcile(cluster, ctx).await.unwrap() }
    };

    reconcile(&three).await;
    assert_eq!(pod_names(&api).len(), 3);
    assert_eq!(calls.take(HOOK), 3, "one CREATE chain per new Pod, no EVALUATE");

    reconcile(&three).await;
    reconcile(&three).await;
    assert_eq!(calls.take(HOOK), 0, "an unchanged Cluster makes no lifecycle call");

    // A label on the Cluster: the plugins might read it, so each Pod is
    // evaluated once; hello-world's answer is the same, so nothing rolls.
    let mut labelled = three.clone();
    labelled["metadata"]["labels"] = json!({"tier": "gold"});
    reconcile(&labelled).await;
    assert_eq!(calls.take(HOOK), 3, "one EVALUATE per Pod");
    assert!(api.recorded("DELETE", PODS).is_empty(), "no Pod rolled");
    reconcile(&labelled).await;
    assert_eq!(calls.take(HOOK), 0, "evaluated once per change");

    // A parameter change: evaluated, and the first Pod rolled.
    let changed = cluster_json(
        3,
        json!([{"name": HELLO, "parameters": {"labels": "{\"team\":\"ops\"}"}}]),
    );
    reconcile(&changed).await;
    assert_eq!(calls.take(HOOK), 1, "the first Pod differs: rolled at once");
    assert_eq!(api.recorded("DELETE", PODS).len(), 1);
}

/// Issue 24, point 2: reconciles show in controller-runtime's metrics
/// (totals by result, errors, time, workers, queue), beside the process
/// metrics, in the registry `/metrics` serves.
#[tokio::test]
async fn reconciles_are_measured_with_controller_runtime_names() {
    let plugins = plugins().await;
    let api = FakeApiServer::new();
    let good = cluster_json(1, json!([{"name": HELLO}]));
    let ctx = context(&plugins, &api, &good).await;
    // The host's metrics: those `cnpgi-operator run` serves.
    let mut registry = prometheus_client::registry::Registry::default();
    ctx.host.metrics().register(&mut registry);

    controller::reconcile(Arc::new(serde_json::from_value(good).unwrap()), ctx.clone())
        .await
        .unwrap();
    let broken = cluster_json(1, json!([{"name": "missing.example.com"}]));
    let broken: Arc<Cluster> = Arc::new(serde_json::from_value(broken).unwrap());
    let error = controller::reconcile(broken.clone(), ctx.clone()).await.unwrap_err();
    controller::error_policy(broken, &error, ctx.clone());

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        // Its Pod is not Ready yet (no kubelet here): back in 5 s.
        r#"controller_runtime_reconcile_total{controller="cluster",result="requeue_after"} 1"#,
        r#"controller_runtime_reconcile_total{controller="cluster",result="error"} 1"#,
        r#"controller_runtime_reconcile_errors_total{controller="cluster"} 1"#,
        r#"controller_runtime_reconcile_time_seconds_count{controller="cluster"} 2"#,
        r#"controller_runtime_active_workers{controller="cluster"} 0"#,
        // Both are scheduled (in 5 s, the retry in 10 s); neither is due.
        r#"workqueue_depth{name="cluster"} 0"#,
        "# TYPE process_cpu_seconds counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE process_open_fds gauge",
        "# TYPE process_start_time_seconds gauge",
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {name}"))
            .parse()
            .unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1024.0 * 1024.0);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_cpu_seconds_total") > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let started = value("process_start_time_seconds");
    assert!(started <= now + 1.0 && started > now - 3600.0, "{started} vs {now}");
}

/// Issue 35: a reconcile that changes nothing writes nothing and asks the
/// plugins for no status; a new generation of the Cluster does both again.
#[tokio::test]
async fn a_reconcile_that_changes_nothing_writes_no_status_and_asks_no_plugin_status() {
    let calls = Arc::new(Calls::default());
    let plugins = plugins_observed(ClientOptions {
        observer: calls.clone(),
        ..ClientOptions::default()
    })
    .await;
    let api = FakeApiServer::new();
    let one = cluster_json(1, json!([{"name": HELLO}]));
    let ctx = context(&plugins, &api, &one).await;
    let status_path = format!("{CLUSTERS}/cluster-example/status");
    let stored = || stored_cluster(&api);

    controller::reconcile(stored(), ctx.clone()).await.unwrap();
    assert_eq!(pod_names(&api), ["cluster-example-1"]);
    assert_eq!(api.recorded("PATCH", &status_path).len(), 1);
    assert_eq!(
        calls.take(SET_STATUS),
        1,
        "the first reconcile asks for the plugins' status"
    );

    for _ in 0..3 {
        controller::reconcile(stored(), ctx.clone()).await.unwrap();
    }
    assert_eq!(
        api.recorded("PATCH", &status_path).len(),
        1,
        "an unchanged status is not written again"
    );
    assert_eq!(calls.take(SET_STATUS), 0, "nothing changed: no SetStatusInCluster");
    assert_eq!(pod_names(&api), ["cluster-example-1"]);

    // A stale copy (the status not yet seen) is written, as a change.
    controller::reconcile(Arc::new(serde_json::from_value(one.clone()).unwrap()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(api.recorded("PATCH", &status_path).len(), 2);
    assert_eq!(calls.take(SET_STATUS), 1);

    // A new generation: the plugins are asked again.
    let mut next = api.stored(CLUSTERS)[0].clone();
    next["metadata"]["generation"] = json!(2);
    controller::reconcile(Arc::new(serde_json::from_value(next).unwrap()), ctx.clone())
        .await
        .unwrap();
    assert_eq!(calls.take(SET_STATUS), 1, "a new generation asks for the status again");
}

/// Issue 35: with no round within `plugin_status_refresh`, an unchanged
/// Cluster's plugins are asked again, so `pluginStatus` never goes stale.
#[tokio::test]
async fn plugin_status_is_refreshed_when_the_last_round_is_old() {
    let calls = Arc::new(Calls::default());
    let plugins = plugins_observed(ClientOptions {
        observer: calls.clone(),
        ..ClientOptions::default()
    })
    .await;
    let api = FakeApiServer::new();
    let one = cluster_json(1, json!([{"name": HELLO}]));
    let ctx = context_with(&plugins, &api, &one, |ctx| ctx.plugin_status_refresh = Duration::ZERO).await;
    let stored = || stored_cluster(&api);

    controller::reconcile(stored(), ctx.clone()).await.unwrap();
    controller::reconcile(stored(), ctx.clone()).await.unwrap();
    assert_eq!(calls.take(SET_STATUS), 2, "every round is due with a zero refresh");
}
