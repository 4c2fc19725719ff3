//! Discovery sources against real plugins: a socket directory that changes,
//! and a static list over mutual TLS and Unix sockets.

#![allow(clippy::unwrap_used)]

use std::{sync::Arc, time::Duration};

use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
use cnpgi_host::{
    discovery::{
        DiscoverySource,
        socket_dir::SocketDirectory,
        static_list::{StaticAddress, StaticList, StaticPlugin},
    },
    registry::{LookupError, Registry, RegistryOptions},
};
use cnpgi_pluginhelper::testing::{TestPlugin, eventually};
use tokio::task::JoinHandle;

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

fn registry() -> Arc<Registry> {
    Arc::new(Registry::new(RegistryOptions {
        probe_interval: Duration::from_millis(30),
        ..RegistryOptions::default()
    }))
}

fn spawn(source: impl DiscoverySource, registry: &Arc<Registry>) -> JoinHandle<()> {
    tokio::spawn(Box::new(source).run(registry.clone()))
}

#[tokio::test]
async fn socket_directory_follows_sockets_appearing_and_disappearing() {
    let dir = tempfile::tempdir().unwrap();
    let registry = registry();
    let source = SocketDirectory {
        poll_interval: Duration::from_millis(20),
        ..SocketDirectory::new(dir.path())
    };
    assert_eq!(source.name(), format!("socket-dir:{}", dir.path().display()));
    let discovery = spawn(source, &registry);
    // A regular file is not a plugin.
    std::fs::write(dir.path().join("notes.txt"), "x").unwrap();

    let served = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    eventually("socket plugin becomes routable", Duration::from_secs(3), async || {
        registry.get(HELLO).is_ok()
    })
    .await;
    assert_eq!(registry.plugins().len(), 1);

    served.stop().await.unwrap();
    eventually("removed socket is forgotten", Duration::from_secs(3), async || {
        matches!(registry.get(HELLO), Err(LookupError::Unknown { .. }))
    })
    .await;

    let _again = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    eventually(
        "returning socket is routable again",
        Duration::from_secs(3),
        async || registry.get(HELLO).is_ok(),
    )
    .await;
    discovery.abort();
}

#[tokio::test]
async fn static_list_registers_tls_plugins_and_retries_unreadable_credentials() {
    let plugin = TestPlugin::start_tls(cnpg_i_hello_world::server()).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let missing_key = certs.dir().path().join("not-yet.key");
    let entry = StaticPlugin {
        name: HELLO.into(),
        address: StaticAddress::Tls {
            address: plugin.address().to_owned(),
            server_name: certs.server_name.clone(),
            client_cert: certs.client.cert_path.clone(),
            client_key: missing_key.clone(),
            server_cert: certs.server.cert_path.clone(),
        },
    };
    let err = entry.client(&ClientOptions::default()).unwrap_err().to_string();
    assert!(err.contains(HELLO) && err.contains("not-yet.key"), "{err}");

    let registry = registry();
    let discovery = spawn(
        StaticList {
            retry_interval: Duration::from_millis(20),
            ..StaticList::new(vec![entry])
        },
        &registry,
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(matches!(registry.get(HELLO), Err(LookupError::Unknown { .. })));

    // The key shows up (e.g. a Secret mounted late): the plugin is registered.
    std::fs::copy(&certs.client.key_path, &missing_key).unwrap();
    eventually(
        "static TLS plugin becomes routable",
        Duration::from_secs(3),
        async || registry.get(HELLO).is_ok(),
    )
    .await;
    assert_eq!(registry.plugin(HELLO).unwrap().source(), "static");
    discovery.abort();
}

#[tokio::test]
async fn static_list_registers_unix_plugins() {
    let plugin = TestPlugin::start_unix(cnpg_i_hello_world::server()).await.unwrap();
    let path = plugin.address().trim_start_matches("unix://").into();
    let registry = registry();
    let discovery = spawn(
        StaticList::new(vec![StaticPlugin {
            name: HELLO.into(),
            address: StaticAddress::Unix(path),
        }]),
        &registry,
    );
    eventually(
        "static unix plugin becomes routable",
        Duration::from_secs(3),
        async || registry.get(HELLO).is_ok(),
    )
    .await;
    discovery.abort();
}

/// A plugin registered before it can be reached (on Kubernetes: its Service
/// found before kube-proxy routes it) is asked again within seconds, not
/// after the probe interval: a Cluster applied right after the plugin's
/// rollout is not refused for that long.
#[tokio::test]
async fn a_plugin_registered_before_it_is_reachable_is_routable_seconds_after() {
    let dir = tempfile::tempdir().unwrap();
    let registry = Arc::new(Registry::new(RegistryOptions {
        probe_interval: Duration::from_secs(60),
        ..RegistryOptions::default()
    }));
    let client = PluginClient::new(
        HELLO,
        Transport::Unix {
            path: dir.path().join(HELLO),
        },
        &ClientOptions::default(),
    )
    .unwrap();
    registry.add("static", client).await.unwrap();
    assert!(matches!(registry.get(HELLO), Err(LookupError::NotReady { .. })));

    let _served = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    eventually(
        "routable well before the 60 s probe interval",
        Duration::from_secs(5),
        async || registry.get(HELLO).is_ok(),
    )
    .await;
}
