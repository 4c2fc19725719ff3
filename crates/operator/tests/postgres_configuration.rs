//! `Postgres.EnrichConfiguration` on the operator side: CloudNativePG's rule
//! (each plugin gets the original map; the last non-empty answer wins), the
//! result on the instance Pods, and a change rolling them.

#![allow(clippy::unwrap_used)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_core::capabilities::ServiceType;
use cnpgi_host::{Host, HostOptions, testing::FakeApiServer};
use cnpgi_operator::{
    controller::{self, Context},
    crd::Cluster,
    pods::{self, CONFIGURATION_ANNOTATION, PLUGINS_HASH_ANNOTATION},
};
use cnpgi_pluginhelper::{
    lowlevel::enrich as postgres,
    proto::identity::v1::{
        EnrichConfigurationRequest, EnrichConfigurationResult, PostgresCapabilitiesRequest, PostgresCapabilitiesResult,
        operation_type, postgres_server,
    },
    testing::{TestIdentity, TestPlugin},
    transport::PluginServer,
};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

/// The maps and operation types a plugin was sent.
type Seen = Arc<Mutex<Vec<(HashMap<String, String>, i32)>>>;

/// Adds `adds` to the map (answering it whole), or answers nothing when
/// `adds` is empty; records every map and operation it was sent.
#[derive(Clone)]
struct Enricher {
    adds: Vec<(&'static str, &'static str)>,
    advertise_rpc: bool,
    seen: Seen,
}

#[tonic::async_trait]
impl postgres_server::Postgres for Enricher {
    async fn get_capabilities(
        &self,
        _: Request<PostgresCapabilitiesRequest>,
    ) -> Result<Response<PostgresCapabilitiesResult>, Status> {
        Ok(Response::new(if self.advertise_rpc {
            postgres::capabilities()
        } else {
            PostgresCapabilitiesResult::default()
        }))
    }

    async fn enrich_configuration(
        &self,
        request: Request<EnrichConfigurationRequest>,
    ) -> Result<Response<EnrichConfigurationResult>, Status> {
        let request = request.into_inner();
        let operation = request.operation_type.map_or(0, |o| o.r#type);
        self.seen.lock().unwrap().push((request.configs.clone(), operation));
        Ok(Response::new(postgres::enrich(&request.configs, |map| {
            for (k, v) in &self.adds {
                map.insert((*k).to_owned(), (*v).to_owned());
            }
        })))
    }
}

struct Plugins {
    _dir: tempfile::TempDir,
    _served: Vec<TestPlugin>,
    host: Host<Cluster>,
    seen: HashMap<&'static str, Seen>,
}

/// `a` adds `from_a`, `b` answers nothing, `c` adds `from_c`, `d` serves
/// the RPC but does not advertise it.
async fn plugins() -> Plugins {
    let dir = tempfile::tempdir().unwrap();
    let host = Host::new(HostOptions::default());
    let mut served = Vec::new();
    let mut seen = HashMap::new();
    for (name, adds, advertise_rpc) in [
        ("a.example.com", vec![("from_a", "1")], true),
        ("b.example.com", vec![], true),
        ("c.example.com", vec![("from_c", "1")], true),
        ("d.example.com", vec![("from_d", "1")], false),
    ] {
        let enricher = Enricher {
            adds,
            advertise_rpc,
            seen: Arc::default(),
        };
        seen.insert(name, enricher.seen.clone());
        let server = PluginServer::new(TestIdentity::new(name).with_service(ServiceType::Postgres))
            .add_service(postgres_server::PostgresServer::new(enricher));
        served.push(TestPlugin::start_unix_in(server, dir.path()).await.unwrap());
        let client = PluginClient::new(
            name,
            Transport::Unix {
                path: dir.path().join(name),
            },
            &ClientOptions::default(),
        )
        .unwrap();
        host.add_plugin("static", client).await.unwrap();
    }
    Plugins {
        _dir: dir,
        _served: served,
        host,
        seen,
    }
}

fn cluster(plugins: &[&str], parameters: Value) -> Value {
    let plugins: Vec<Value> = plugins.iter().map(|name| json!({ "name": name })).collect();
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg", "namespace": "default", "uid": "6a4d3c2b-0000-4000-8000-00000000e1c4", "generation": 1},
        "spec": {"instances": 1, "plugins": plugins, "postgresql": {"parameters": parameters}}
    })
}

#[tokio::test]
async fn each_plugin_gets_the_original_map_and_the_last_non_empty_answer_wins() {
    let plugins = plugins().await;
    let original = json!({"shared_buffers": "256MB"});
    let all = cluster(
        &["c.example.com", "a.example.com", "b.example.com", "d.example.com"],
        original.clone(),
    );
    let configuration = pods::postgresql_configuration(&plugins.host, &plugins.host.routed_json(all.clone()))
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_value(&configuration).unwrap(),
        json!({"shared_buffers": "256MB", "from_c": "1"}),
        "c (last in name order) replaced the whole map: a's answer is gone"
    );
    for name in ["a.example.com", "b.example.com", "c.example.com"] {
        let seen = plugins.seen[name].lock().unwrap().clone();
        assert_eq!(seen.len(), 1, "{name}");
        assert_eq!(
            serde_json::to_value(&seen[0].0).unwrap(),
            original,
            "{name} got the original map"
        );
        assert_eq!(seen[0].1, i32::from(operation_type::Type::Reconcile), "{name}");
    }
    assert!(
        plugins.seen["d.example.com"].lock().unwrap().is_empty(),
        "a plugin without TYPE_ENRICH_CONFIGURATION is not asked"
    );

    // An empty answer changes nothing.
    let only_b = cluster(&["b.example.com"], original.clone());
    let configuration = pods::postgresql_configuration(&plugins.host, &plugins.host.routed_json(only_b.clone()))
        .await
        .unwrap();
    assert_eq!(serde_json::to_value(&configuration).unwrap(), original);
}

#[tokio::test]
async fn the_configuration_is_on_the_pod_and_in_its_hash() {
    let plugins = plugins().await;
    let with_a = cluster(&["a.example.com"], json!({"max_connections": "200"}));
    let pod = build_pod(&plugins.host, &with_a).await;
    let annotation = pod["metadata"]["annotations"][CONFIGURATION_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(
        annotation, r#"{"from_a":"1","max_connections":"200"}"#,
        "JSON, keys sorted"
    );
    let hash = pod["metadata"]["annotations"][PLUGINS_HASH_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(wanted_hash(&plugins.host, &with_a).await, hash);

    let changed = cluster(&["a.example.com"], json!({"max_connections": "300"}));
    assert_ne!(
        wanted_hash(&plugins.host, &changed).await,
        hash,
        "a parameter change shows in the hash"
    );

    // Nothing configured and no plugin answering: no annotation, so Pods
    // made before this feature keep their hash.
    let bare = cluster(&["b.example.com"], json!({}));
    let pod = build_pod(&plugins.host, &bare).await;
    assert!(
        pod["metadata"]["annotations"].get(CONFIGURATION_ANNOTATION).is_none(),
        "{pod}"
    );
}

#[tokio::test]
async fn a_changed_parameter_rolls_the_pods() {
    const PODS: &str = "/api/v1/namespaces/default/pods";
    const CLUSTERS: &str = "/apis/cnpgi.io/v1/namespaces/default/clusters";
    let plugins = plugins().await;
    let first = cluster(&["a.example.com"], json!({"work_mem": "4MB"}));
    let api = FakeApiServer::new();
    api.collection(PODS);
    api.seed(CLUSTERS, first.clone());
    let url = api.clone().start().await;
    let mut ctx = Context::new(
        FakeApiServer::client(&url, "default"),
        plugins.host.clone(),
        "cnpgi-operator",
    );
    ctx.resync = Duration::from_secs(60);
    let ctx = Arc::new(ctx);

    let typed: Arc<Cluster> = Arc::new(serde_json::from_value(first).unwrap());
    controller::reconcile(typed, ctx.clone()).await.unwrap();
    let stored = api.stored(PODS);
    assert_eq!(
        stored[0]["metadata"]["annotations"][CONFIGURATION_ANNOTATION],
        r#"{"from_a":"1","work_mem":"4MB"}"#
    );

    let second: Arc<Cluster> =
        Arc::new(serde_json::from_value(cluster(&["a.example.com"], json!({"work_mem": "8MB"}))).unwrap());
    controller::reconcile(second.clone(), ctx.clone()).await.unwrap();
    assert_eq!(api.recorded("DELETE", PODS).len(), 1, "the Pod is rolled");
    controller::reconcile(second, ctx).await.unwrap();
    let stored = api.stored(PODS);
    assert_eq!(stored.len(), 1);
    assert_eq!(
        stored[0]["metadata"]["annotations"][CONFIGURATION_ANNOTATION],
        r#"{"from_a":"1","work_mem":"8MB"}"#
    );
}

/// Instance 1 of `cluster`, built as the reconciler builds it.
async fn build_pod(host: &Host<Cluster>, cluster: &Value) -> Value {
    let routed = host.routed_json(cluster.clone());
    let configuration = pods::postgresql_configuration(host, &routed).await.unwrap();
    pods::build_pod(host, &routed, &configuration, 1).await.unwrap()
}

/// What the plugins want for instance 1 of `cluster`, as the reconciler evaluates it.
async fn wanted_hash(host: &Host<Cluster>, cluster: &Value) -> String {
    let routed = host.routed_json(cluster.clone());
    let configuration = pods::postgresql_configuration(host, &routed).await.unwrap();
    pods::wanted_hash(host, &routed, &configuration, 1).await.unwrap()
}
