//! Routing through real plugins: chained patches in name order, collected
//! validation errors, status, and failing closed (or open, when asked).

#![allow(clippy::unwrap_used)]

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{
    registry::{LookupError, Registry, RegistryOptions},
    routing::{RouteError, RoutedResource, Router, RoutingPolicy},
};
use cnpgi_pluginhelper::{
    proto::{
        identity::v1::plugin_capability::service::Type as ServiceType,
        operator_lifecycle::v1::{
            OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse, OperatorLifecycleRequest,
            OperatorLifecycleResponse,
            operator_lifecycle_server::{OperatorLifecycle, OperatorLifecycleServer},
            operator_operation_type::Type as Operation,
        },
    },
    testing::{TestIdentity, TestPlugin},
    transport::PluginServer,
};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";
const LABELER: &str = "labeler.example.com";
const BROKEN: &str = "broken.example.com";

/// Adds `saw-hello: "true"` when the Pod already carries hello-world's
/// label (proving it runs second, on the patched Pod), or `saw-hello: "false"`.
/// With `broken`, answers a patch that cannot apply.
struct TestLifecycle {
    broken: bool,
}

#[tonic::async_trait]
impl OperatorLifecycle for TestLifecycle {
    async fn get_capabilities(
        &self,
        _: Request<OperatorLifecycleCapabilitiesRequest>,
    ) -> Result<Response<OperatorLifecycleCapabilitiesResponse>, Status> {
        Ok(Response::new(OperatorLifecycleCapabilitiesResponse {
            lifecycle_capabilities: vec![cnpgi_core::capabilities::lifecycle("", "Pod", [Operation::Create])],
        }))
    }

    async fn lifecycle_hook(
        &self,
        request: Request<OperatorLifecycleRequest>,
    ) -> Result<Response<OperatorLifecycleResponse>, Status> {
        if self.broken {
            return Ok(Response::new(OperatorLifecycleResponse {
                json_patch: br#"[{"op":"remove","path":"/metadata/nonexistent"}]"#.to_vec(),
            }));
        }
        let pod: Value = serde_json::from_slice(&request.into_inner().object_definition).unwrap();
        let saw = pod.pointer("/metadata/labels/plugin-metadata").is_some();
        let patch = json!([{ "op": "add", "path": "/metadata/labels/saw-hello", "value": saw.to_string() }]);
        Ok(Response::new(OperatorLifecycleResponse {
            json_patch: serde_json::to_vec(&patch).unwrap(),
        }))
    }
}

fn test_plugin(name: &str, broken: bool) -> PluginServer<TestIdentity> {
    PluginServer::new(TestIdentity::new(name).with_service(ServiceType::LifecycleService))
        .add_service(OperatorLifecycleServer::new(TestLifecycle { broken }))
}

struct Setup {
    _dir: tempfile::TempDir,
    _plugins: Vec<TestPlugin>,
    registry: Arc<Registry>,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let plugins = vec![
        TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
            .await
            .unwrap(),
        TestPlugin::start_unix_in(test_plugin(LABELER, false), dir.path())
            .await
            .unwrap(),
        TestPlugin::start_unix_in(test_plugin(BROKEN, true), dir.path())
            .await
            .unwrap(),
    ];
    let registry = Arc::new(Registry::new(RegistryOptions {
        probe_interval: Duration::from_secs(60),
        ..RegistryOptions::default()
    }));
    for name in [HELLO, LABELER, BROKEN] {
        let client = PluginClient::new(
            name,
            Transport::Unix {
                path: dir.path().join(name),
            },
            &ClientOptions::default(),
        )
        .unwrap();
        registry.add("static", client).await.unwrap();
        assert!(registry.get(name).is_ok(), "{name} not routable");
    }
    Setup {
        _dir: dir,
        _plugins: plugins,
        registry,
    }
}

fn cluster(plugins: Value) -> Value {
    json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"instances": 1, "plugins": plugins}
    })
}

fn pod() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "c-1", "labels": {"cnpgi.io/cluster": "c"}},
        "spec": {"containers": [{"name": "postgres", "image": "postgres:17"}]}
    })
}

#[tokio::test]
async fn lifecycle_patches_chain_in_plugin_name_order() {
    let setup = setup().await;
    let router = Router::new(setup.registry.clone(), RoutingPolicy::default());
    // Listed out of order, and hello-world twice: the order is by name, once each.
    let cluster = cluster(json!([{"name": LABELER}, {"name": HELLO}, {"name": HELLO}]));
    let patched = router
        .lifecycle_hook(&RoutedResource::new(cluster.clone()), pod(), Operation::Create)
        .await
        .unwrap();
    let order: Vec<_> = patched.patches.iter().map(|p| p.plugin.as_str()).collect();
    assert_eq!(order, [HELLO, LABELER]);
    let labels = &patched.object["metadata"]["labels"];
    assert_eq!(labels["plugin-metadata"], "default");
    assert_eq!(
        labels["saw-hello"], "true",
        "the second plugin saw the first one's patch"
    );
    assert_eq!(labels["cnpgi.io/cluster"], "c");
    assert!(patched.object["spec"]["initContainers"][0]["name"] == "pauser");

    // EVALUATE only reaches plugins that declared it.
    let evaluated = router
        .lifecycle_hook(&RoutedResource::new(cluster.clone()), pod(), Operation::Evaluate)
        .await
        .unwrap();
    let order: Vec<_> = evaluated.patches.iter().map(|p| p.plugin.as_str()).collect();
    assert_eq!(order, [HELLO]);
    // Other kinds reach nobody.
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}});
    assert!(
        router
            .lifecycle_hook(
                &RoutedResource::new(cluster.clone()),
                service.clone(),
                Operation::Create
            )
            .await
            .unwrap()
            .patches
            .is_empty()
    );
}

#[tokio::test]
async fn a_patch_that_does_not_apply_fails_closed_or_is_skipped_when_fail_open() {
    let setup = setup().await;
    let cluster = cluster(json!([{"name": HELLO}, {"name": BROKEN}]));
    let closed = Router::new(setup.registry.clone(), RoutingPolicy::default());
    let err = closed
        .lifecycle_hook(&RoutedResource::new(cluster.clone()), pod(), Operation::Create)
        .await
        .unwrap_err();
    assert_eq!(err.plugin(), Some(BROKEN));
    assert!(err.to_string().contains("does not apply"), "{err}");

    let open = Router::new(
        setup.registry.clone(),
        RoutingPolicy {
            fail_open: BTreeSet::from([BROKEN.to_owned()]),
            ..RoutingPolicy::default()
        },
    );
    let patched = open
        .lifecycle_hook(&RoutedResource::new(cluster.clone()), pod(), Operation::Create)
        .await
        .unwrap();
    assert_eq!(patched.patches.len(), 1);
    assert_eq!(patched.object["metadata"]["labels"]["plugin-metadata"], "default");
}

#[tokio::test]
async fn an_enabled_plugin_that_is_not_registered_fails_closed_and_a_disabled_one_is_ignored() {
    let setup = setup().await;
    let router = Router::new(setup.registry.clone(), RoutingPolicy::default());
    let missing = cluster(json!([{"name": HELLO}, {"name": "missing.example.com"}]));
    let err = router.mutate(RoutedResource::new(missing.clone())).await.unwrap_err();
    assert!(
        matches!(&err, RouteError::Unavailable(LookupError::Unknown { name }) if name == "missing.example.com"),
        "{err}"
    );
    let disabled = cluster(json!([{"name": HELLO}, {"name": "missing.example.com", "enabled": false}]));
    assert!(router.mutate(RoutedResource::new(disabled.clone())).await.is_ok());
}

#[tokio::test]
async fn mutation_validation_and_status_through_hello_world() {
    let setup = setup().await;
    let router = Router::new(setup.registry.clone(), RoutingPolicy::default());

    let plain = cluster(json!([{"name": HELLO}]));
    let mutated = router.mutate(RoutedResource::new(plain.clone())).await.unwrap();
    assert_eq!(mutated.patches.len(), 1);
    assert_eq!(
        mutated.object["spec"]["plugins"][0]["parameters"]["labels"],
        r#"{"plugin-metadata":"default"}"#
    );
    assert!(
        router
            .validate_create(&RoutedResource::new(mutated.object.clone()))
            .await
            .unwrap()
            .is_empty()
    );

    let mistake = cluster(json!([{"name": HELLO, "parameters": {"annotations": "{ this is a mistake"}}]));
    let errors = router
        .validate_create(&RoutedResource::new(mistake.clone()))
        .await
        .unwrap();
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].plugin, HELLO);
    assert_eq!(errors[0].field, "spec.plugins[0].parameters.annotations");
    assert!(
        errors[0]
            .to_string()
            .starts_with("spec.plugins[0].parameters.annotations: Invalid value:")
    );

    let old = cluster(json!([{"name": HELLO, "parameters": {"labels": "{\"a\":\"b\"}"}}]));
    let new = cluster(json!([{"name": HELLO, "parameters": {"labels": "{\"a\":\"c\"}"}}]));
    let errors = router
        .validate_change(&RoutedResource::new(old.clone()), &RoutedResource::new(new.clone()))
        .await
        .unwrap();
    assert_eq!(errors[0].field, "spec.plugins[0].parameters.labels");
    assert_eq!(errors[0].message, "Labels cannot be changed");

    let statuses = router.set_status(&RoutedResource::new(plain.clone())).await.unwrap();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].name, HELLO);
    assert_eq!(statuses[0].status.as_deref(), Some(r#"{"enabled":true}"#));
    assert_eq!(
        statuses[0].capabilities,
        ["TYPE_LIFECYCLE_SERVICE", "TYPE_OPERATOR_SERVICE"]
    );
    assert!(
        statuses[0]
            .operator_capabilities
            .contains(&"TYPE_MUTATE_CLUSTER".to_owned())
    );

    // hello-world, like upstream's, needs its status entry: the router wrote
    // it into the Cluster it sent. With the previous status kept and an entry
    // of a plugin no longer enabled, the entries are rewritten as CloudNativePG
    // does: the stale one goes, the previous status is what the plugin sees
    // (so it answers "no change", and the previous status stays).
    let mut with_status = plain.clone();
    with_status["status"] = json!({"phase": "Healthy", "pluginStatus": [
        {"name": "gone.example.com", "version": "1", "status": "{}"},
        {"name": HELLO, "version": "0.0.1", "status": "{\"enabled\":true}"},
    ]});
    let statuses = router
        .set_status(&RoutedResource::new(with_status.clone()))
        .await
        .unwrap();
    assert_eq!(statuses.len(), 1);
    assert_eq!(statuses[0].status.as_deref(), Some(r#"{"enabled":true}"#));
    let mut written = with_status.clone();
    cnpgi_core::status::write_plugin_status(&mut written, &statuses);
    assert_eq!(written["status"]["phase"], "Healthy");
    assert_eq!(written["status"]["pluginStatus"].as_array().unwrap().len(), 1);
    assert_eq!(written["status"]["pluginStatus"][0]["name"], HELLO);
    assert!(
        written["status"]["pluginStatus"][0]["operatorCapabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("TYPE_SET_STATUS_IN_CLUSTER"))
    );

    // hello-world does not implement Deregister: nothing is sent, nothing fails.
    router
        .deregister(HELLO, &RoutedResource::new(plain.clone()))
        .await
        .unwrap();
}
