//! The registry against real plugin servers: routing lookups, duplicates,
//! readiness flipping both ways, a plugin dying and returning, removal.

#![allow(clippy::unwrap_used)]

use std::{sync::atomic::Ordering, time::Duration};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::registry::{LookupError, Registry, RegistryError, RegistryOptions};
use cnpgi_pluginhelper::{
    proto::{
        operator::v1::operator_capability::rpc::Type as RpcType,
        operator_lifecycle::v1::operator_operation_type::Type as Operation,
    },
    testing::{TestIdentity, TestPlugin, eventually},
    transport::PluginServer,
};

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";
const FLIP: &str = "flip.example.com";

fn client(dir: &std::path::Path, name: &str, socket: &str) -> PluginClient {
    let options = ClientOptions {
        call_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        ..ClientOptions::default()
    };
    PluginClient::new(name, Transport::Unix { path: dir.join(socket) }, &options).unwrap()
}

fn registry() -> Registry {
    Registry::new(RegistryOptions {
        probe_interval: Duration::from_millis(30),
        ..RegistryOptions::default()
    })
}

fn exported(metrics: &cnpgi_host::metrics::Metrics) -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    text
}

#[tokio::test]
async fn a_ready_plugin_is_routable_by_name_capability_and_lifecycle() {
    let dir = tempfile::tempdir().unwrap();
    let _hello = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let registry = registry();
    registry.add("static", client(dir.path(), HELLO, HELLO)).await.unwrap();

    let routable = registry.get(HELLO).unwrap();
    assert_eq!(routable.info.metadata.name, HELLO);
    let names = |list: Vec<cnpgi_host::registry::Routable>| {
        list.into_iter()
            .map(|r| r.info.metadata.name.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(registry.with_operator_rpc(RpcType::MutateCluster)), [HELLO]);
    assert!(registry.with_operator_rpc(RpcType::Deregister).is_empty());
    assert_eq!(
        names(registry.matching_lifecycle("", "Pod", Operation::Create)),
        [HELLO]
    );
    assert!(registry.matching_lifecycle("", "Service", Operation::Create).is_empty());
    assert_eq!(
        registry.get("missing.example.com").unwrap_err(),
        LookupError::Unknown {
            name: "missing.example.com".into()
        }
    );
}

#[tokio::test]
async fn a_name_found_by_two_sources_is_refused_not_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let _hello = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let registry = registry();
    registry
        .add("service/cnpg-system/hello", client(dir.path(), HELLO, HELLO))
        .await
        .unwrap();
    let err = registry
        .add("socket-dir/plugins", client(dir.path(), HELLO, HELLO))
        .await
        .unwrap_err();
    let RegistryError::Duplicate { existing_source, .. } = &err;
    assert_eq!(existing_source, "service/cnpg-system/hello");
    assert!(err.to_string().contains("socket-dir/plugins"), "{err}");
    assert_eq!(registry.plugin(HELLO).unwrap().source(), "service/cnpg-system/hello");
    // The same source may re-add it (rotation): the connection is rebuilt.
    registry
        .add("service/cnpg-system/hello", client(dir.path(), HELLO, HELLO))
        .await
        .unwrap();
    assert!(registry.get(HELLO).is_ok());
    // Only its source removes it.
    assert!(!registry.remove(HELLO, "socket-dir/plugins"));
    assert!(registry.remove(HELLO, "service/cnpg-system/hello"));
    assert!(matches!(registry.get(HELLO), Err(LookupError::Unknown { .. })));
}

#[tokio::test]
async fn readiness_takes_a_plugin_out_of_routing_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let identity = TestIdentity::new(FLIP).ready(false);
    let ready = identity.readiness();
    let _flip = TestPlugin::start_unix_in(PluginServer::new(identity), dir.path())
        .await
        .unwrap();
    let registry = registry();
    let registry_metrics = registry.options().metrics.clone();
    registry.add("static", client(dir.path(), FLIP, FLIP)).await.unwrap();

    let err = registry.get(FLIP).unwrap_err();
    assert!(err.to_string().contains("ready: false"), "{err}");
    assert!(exported(&registry_metrics).contains("cnpgi_plugin_ready{plugin=\"flip.example.com\"} 0"));
    ready.store(true, Ordering::SeqCst);
    eventually("plugin becomes routable", Duration::from_secs(2), async || {
        registry.get(FLIP).is_ok()
    })
    .await;
    assert!(exported(&registry_metrics).contains("cnpgi_plugin_ready{plugin=\"flip.example.com\"} 1"));
    ready.store(false, Ordering::SeqCst);
    eventually("plugin leaves routing", Duration::from_secs(2), async || {
        registry.get(FLIP).is_err()
    })
    .await;
}

#[tokio::test]
async fn a_dead_plugin_leaves_routing_and_returns_with_a_fresh_probe() {
    let dir = tempfile::tempdir().unwrap();
    let served = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let registry = registry();
    let plugin = registry.add("static", client(dir.path(), HELLO, HELLO)).await.unwrap();
    assert!(registry.get(HELLO).is_ok());

    served.stop().await.unwrap();
    eventually("dead plugin leaves routing", Duration::from_secs(2), async || {
        registry.get(HELLO).is_err()
    })
    .await;
    let Err(LookupError::NotReady { reason, .. }) = registry.get(HELLO) else {
        panic!("expected NotReady")
    };
    assert!(reason.contains("Unavailable"), "{reason}");

    let _back = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    eventually("plugin routable again", Duration::from_secs(2), async || {
        registry.get(HELLO).is_ok()
    })
    .await;
    assert!(plugin.client().connections() >= 2);
}

#[tokio::test]
async fn a_plugin_with_another_name_is_never_routable() {
    let dir = tempfile::tempdir().unwrap();
    let _hello = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let registry = registry();
    // Found as "impostor.example.com" (e.g. a Service label), serving hello-world.
    registry
        .add("static", client(dir.path(), "impostor.example.com", HELLO))
        .await
        .unwrap();
    let err = registry.get("impostor.example.com").unwrap_err().to_string();
    assert!(err.contains("calls itself") && err.contains(HELLO), "{err}");
}
