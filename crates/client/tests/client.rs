//! Plugin clients against real hello-world servers: probing over mutual TLS
//! and Unix sockets, both pinned-certificate trust models, refusals, load on
//! one shared connection, and a plugin that dies and comes back.

#![allow(clippy::unwrap_used)]

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};

use cnpgi_client::{
    client::{CallObserver, ClientOptions, PluginClient, TlsTransport, Transport},
    probe::{ProbeError, is_ready, probe},
};
use cnpgi_pluginhelper::{
    proto::{
        identity::v1::plugin_capability::service::Type as ServiceType,
        operator::v1::operator_capability::rpc::Type as RpcType,
        operator_lifecycle::v1::operator_operation_type::Type as Operation,
    },
    testing::{TestCert, TestCertificates, TestPlugin, eventually},
    transport::{PluginListener, ServeError},
};
use cnpgi_tls::{pem, server::ServerTlsFiles};
use tokio::{sync::oneshot, task::JoinHandle};

const PLUGIN: &str = "cnpg-i-hello-world.cloudnative-pg.io";

/// Counts the calls a client reports, by method and by (method, code).
#[derive(Debug, Default)]
struct Recorder {
    calls: Mutex<HashMap<String, u64>>,
    errors: Mutex<HashMap<(String, tonic::Code), u64>>,
}

impl CallObserver for Recorder {
    fn call_ended(&self, plugin: &str, method: &str, _: Duration, code: Option<tonic::Code>) {
        assert_eq!(plugin, PLUGIN);
        *self.calls.lock().unwrap().entry(method.to_owned()).or_default() += 1;
        if let Some(code) = code {
            *self
                .errors
                .lock()
                .unwrap()
                .entry((method.to_owned(), code))
                .or_default() += 1;
        }
    }
}

impl Recorder {
    fn calls(&self, method: &str) -> u64 {
        self.calls.lock().unwrap().get(method).copied().unwrap_or(0)
    }

    fn errors(&self, method: &str, code: tonic::Code) -> u64 {
        self.errors
            .lock()
            .unwrap()
            .get(&(method.to_owned(), code))
            .copied()
            .unwrap_or(0)
    }
}

fn tls_transport(address: String, server_name: &str, certs: &TestCertificates) -> Transport {
    Transport::Tls(TlsTransport {
        address,
        server_name: server_name.to_owned(),
        client_cert: pem::read_certificates(&certs.client.cert_path, "client certificate").unwrap(),
        client_key: pem::read_private_key(&certs.client.key_path, "client key").unwrap(),
        server_cert: pem::read_certificates(&certs.server.cert_path, "server certificate").unwrap(),
    })
}

fn options() -> ClientOptions {
    ClientOptions {
        call_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(2),
        ..ClientOptions::default()
    }
}

#[tokio::test]
async fn probes_hello_world_over_mtls_with_a_self_signed_pinned_certificate() {
    let plugin = TestPlugin::start_tls(cnpg_i_hello_world::server()).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let transport = tls_transport(plugin.address().to_owned(), &certs.server_name, certs);
    let client = PluginClient::new(PLUGIN, transport, &options()).unwrap();
    let info = probe(&client).await.unwrap();
    assert_eq!(info.metadata.name, PLUGIN);
    assert!(info.has_service(ServiceType::OperatorService) && info.has_service(ServiceType::LifecycleService));
    assert!(info.has_operator_rpc(RpcType::MutateCluster));
    assert!(!info.has_operator_rpc(RpcType::Deregister));
    assert!(info.matches_lifecycle("", "Pod", Operation::Create));
    assert!(info.matches_lifecycle("", "Pod", Operation::Evaluate));
    assert!(!info.matches_lifecycle("", "Pod", Operation::Delete));
    assert!(!info.matches_lifecycle("apps", "Pod", Operation::Create));
    assert_eq!(
        info.service_names(),
        ["TYPE_LIFECYCLE_SERVICE", "TYPE_OPERATOR_SERVICE"]
    );
    assert!(is_ready(&client).await.unwrap());
    assert_eq!(client.connections(), 1);
}

#[tokio::test]
async fn probes_hello_world_over_a_unix_socket() {
    let plugin = TestPlugin::start_unix(cnpg_i_hello_world::server()).await.unwrap();
    let path = plugin.address().trim_start_matches("unix://").into();
    let client = PluginClient::new(PLUGIN, Transport::Unix { path }, &options()).unwrap();
    let info = probe(&client).await.unwrap();
    assert!(info.matches_lifecycle("", "Pod", Operation::Create));
}

#[tokio::test]
async fn a_plugin_answering_to_another_name_is_rejected() {
    let plugin = TestPlugin::start_unix(cnpg_i_hello_world::server()).await.unwrap();
    let path = plugin.address().trim_start_matches("unix://").into();
    let client = PluginClient::new("other.example.com", Transport::Unix { path }, &options()).unwrap();
    let err = probe(&client).await.unwrap_err();
    assert!(matches!(err, ProbeError::NameMismatch { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("other.example.com") && text.contains(PLUGIN), "{text}");
}

#[tokio::test]
async fn a_server_certificate_that_is_not_pinned_is_refused() {
    let plugin = TestPlugin::start_tls(cnpg_i_hello_world::server()).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let other = TestCertificates::generate(&certs.server_name).unwrap();
    let Transport::Tls(mut tls) = tls_transport(plugin.address().to_owned(), &certs.server_name, certs) else {
        unreachable!()
    };
    tls.server_cert = pem::read_certificates(&other.server.cert_path, "other").unwrap();
    let client = PluginClient::new(PLUGIN, Transport::Tls(tls), &options()).unwrap();
    let err = probe(&client).await.unwrap_err();
    let ProbeError::Rpc { code, rpc, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(
        (*code, *rpc),
        (tonic::Code::Unavailable, "Identity/GetPluginMetadata"),
        "{err}"
    );
}

#[tokio::test]
async fn the_server_name_must_match_the_certificate() {
    let plugin = TestPlugin::start_tls(cnpg_i_hello_world::server()).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let transport = tls_transport(plugin.address().to_owned(), "another-service", certs);
    let client = PluginClient::new(PLUGIN, transport, &options()).unwrap();
    assert!(probe(&client).await.is_err());
}

/// Serves hello-world with a server certificate issued by a CA that the
/// client does not know: trusted only because the leaf itself is pinned.
#[tokio::test]
async fn a_ca_issued_leaf_pinned_byte_for_byte_is_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let ca = TestCert::builder(&[]).ca().self_signed();
    let server_cert = TestCert::builder(&["hello-world.cnpg-system.svc"])
        .server()
        .signed_by(&ca);
    server_cert.write(dir.path(), "server").unwrap();
    let client_certs = TestCertificates::generate("unused").unwrap();

    let listener = PluginListener::bind_tcp(
        "127.0.0.1:0",
        ServerTlsFiles {
            cert: dir.path().join("server.crt"),
            key: dir.path().join("server.key"),
            client_ca: Some(client_certs.client.cert_path.clone()),
        },
    )
    .await
    .unwrap();
    let address = listener.address();
    let (_stop, _task) = serve(listener);

    let transport = Transport::Tls(TlsTransport {
        address,
        server_name: "hello-world.cnpg-system.svc".into(),
        client_cert: pem::read_certificates(&client_certs.client.cert_path, "c").unwrap(),
        client_key: pem::read_private_key(&client_certs.client.key_path, "k").unwrap(),
        server_cert: vec![server_cert.cert_der()],
    });
    let client = PluginClient::new(PLUGIN, transport, &options()).unwrap();
    assert_eq!(probe(&client).await.unwrap().metadata.name, PLUGIN);
}

fn serve(listener: PluginListener) -> (oneshot::Sender<()>, JoinHandle<Result<(), ServeError>>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(cnpg_i_hello_world::server().serve(listener, async {
        let _ = stopped.await;
    }));
    (stop, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_calls_share_one_connection() {
    let plugin = TestPlugin::start_tls(cnpg_i_hello_world::server()).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let transport = tls_transport(plugin.address().to_owned(), &certs.server_name, certs);
    let metrics = Arc::new(Recorder::default());
    let options = ClientOptions {
        observer: metrics.clone(),
        ..ClientOptions::default()
    };
    let client = Arc::new(PluginClient::new(PLUGIN, transport, &options).unwrap());
    probe(&client).await.unwrap();
    let calls: Vec<_> = (0..1000)
        .map(|_| {
            let client = client.clone();
            tokio::spawn(async move { is_ready(&client).await })
        })
        .collect();
    for call in calls {
        assert!(call.await.unwrap().unwrap());
    }
    assert_eq!(client.connections(), 1, "every call must share the first connection");
    assert_eq!(metrics.calls("Identity/Probe"), 1000);
    assert_eq!(metrics.calls("Identity/GetPluginMetadata"), 1);
}

#[tokio::test]
async fn a_dead_plugin_fails_fast_and_is_reached_again_when_it_returns() {
    let dir = tempfile::tempdir().unwrap();
    let served = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let path = dir.path().join(PLUGIN);
    let metrics = Arc::new(Recorder::default());
    let options = ClientOptions {
        observer: metrics.clone(),
        ..options()
    };
    let client = PluginClient::new(PLUGIN, Transport::Unix { path: path.clone() }, &options).unwrap();
    probe(&client).await.unwrap();

    served.stop().await.unwrap();
    let started = std::time::Instant::now();
    let err = is_ready(&client).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "took {:?}",
        started.elapsed()
    );
    let ProbeError::Rpc { code, .. } = &err else {
        panic!("{err}")
    };
    assert_eq!(*code, tonic::Code::Unavailable, "{err}");
    assert!(err.to_string().contains(PLUGIN), "{err}");
    assert_eq!(metrics.errors("Identity/Probe", tonic::Code::Unavailable), 1);

    let _back = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    eventually(
        &format!("plugin at {} reachable again", path.display()),
        Duration::from_secs(2),
        async || is_ready(&client).await.unwrap_or(false),
    )
    .await;
    assert_eq!(client.connections(), 2, "the channel reconnected");
}

/// A plugin whose `Probe` never answers.
struct Hanging;

#[tonic::async_trait]
impl cnpgi_pluginhelper::proto::identity::v1::identity_server::Identity for Hanging {
    async fn get_plugin_metadata(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataResponse>, tonic::Status>
    {
        Ok(tonic::Response::new(
            cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataResponse {
                name: "hanging.example.com".into(),
                ..Default::default()
            },
        ))
    }
    async fn get_plugin_capabilities(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::identity::v1::GetPluginCapabilitiesRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::identity::v1::GetPluginCapabilitiesResponse>, tonic::Status>
    {
        Ok(tonic::Response::new(Default::default()))
    }
    async fn probe(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::identity::v1::ProbeRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::identity::v1::ProbeResponse>, tonic::Status> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn a_hanging_plugin_hits_the_call_deadline() {
    let plugin = TestPlugin::start_unix(cnpgi_pluginhelper::transport::PluginServer::new(Hanging))
        .await
        .unwrap();
    let path = plugin.address().trim_start_matches("unix://").into();
    let options = ClientOptions {
        call_timeout: Duration::from_millis(300),
        ..ClientOptions::default()
    };
    let client = PluginClient::new("hanging.example.com", Transport::Unix { path }, &options).unwrap();
    probe(&client).await.unwrap();
    let started = std::time::Instant::now();
    let err = is_ready(&client).await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(5),
        "{elapsed:?}"
    );
    let ProbeError::Rpc { code, message, .. } = &err else {
        panic!("{err}")
    };
    // Issue 13, point 10: a silent plugin is a missed deadline (as grpc-go
    // reports it), not a cancelled call (tonic's own code for its timeout).
    assert_eq!(*code, tonic::Code::DeadlineExceeded, "{err}");
    assert!(message.contains("300ms"), "the message names the deadline: {err}");
}

/// Issue 13, point 5: a 3 MB bad parameter is not echoed whole in the
/// plugin's `grpc-message` (grpcio refused such an answer with
/// `RESOURCE_EXHAUSTED: Stream removed`), over a real socket.
#[tokio::test]
async fn a_huge_bad_parameter_is_echoed_bounded_in_the_status() {
    use cnpgi_pluginhelper::proto::operator_lifecycle::v1::{OperatorLifecycleRequest, OperatorOperationType};
    let plugin = TestPlugin::start_unix(cnpg_i_hello_world::server()).await.unwrap();
    let path = plugin.address().trim_start_matches("unix://").into();
    let client = PluginClient::new(PLUGIN, Transport::Unix { path }, &options()).unwrap();
    let cluster = serde_json::json!({
        "apiVersion": "cnpgi.io/v1",
        "kind": "Cluster",
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"instances": 1, "plugins": [{
            "name": PLUGIN,
            "parameters": {"labels": format!("{{\"{}", "x".repeat(3 * 1024 * 1024))}
        }]}
    });
    let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "c-1"}, "spec": {}});
    let status = client
        .lifecycle()
        .lifecycle_hook(client.request(OperatorLifecycleRequest {
            operation_type: Some(OperatorOperationType {
                r#type: Operation::Create.into(),
            }),
            cluster_definition: serde_json::to_vec(&cluster).unwrap(),
            object_definition: serde_json::to_vec(&pod).unwrap(),
        }))
        .await
        .unwrap_err();
    assert_eq!(
        status.code(),
        tonic::Code::InvalidArgument,
        "{}",
        &status.message()[..200.min(status.message().len())]
    );
    assert!(status.message().len() < 8 * 1024, "{} bytes", status.message().len());
    assert!(
        status.message().contains("spec.plugins[0].parameters.labels"),
        "{}",
        status.message()
    );
}

/// A plugin whose metadata is larger than a client accepts (5 MiB).
struct Verbose;

#[tonic::async_trait]
impl cnpgi_pluginhelper::proto::identity::v1::identity_server::Identity for Verbose {
    async fn get_plugin_metadata(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataResponse>, tonic::Status>
    {
        Ok(tonic::Response::new(
            cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataResponse {
                name: "verbose.example.com".into(),
                description: "v".repeat(5 * 1024 * 1024),
                ..Default::default()
            },
        ))
    }
    async fn get_plugin_capabilities(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::identity::v1::GetPluginCapabilitiesRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::identity::v1::GetPluginCapabilitiesResponse>, tonic::Status>
    {
        Ok(tonic::Response::new(Default::default()))
    }
    async fn probe(
        &self,
        _: tonic::Request<cnpgi_pluginhelper::proto::identity::v1::ProbeRequest>,
    ) -> Result<tonic::Response<cnpgi_pluginhelper::proto::identity::v1::ProbeResponse>, tonic::Status> {
        Ok(tonic::Response::new(Default::default()))
    }
}

/// Issue 13, point 10: an answer larger than the operator accepts (4 MiB)
/// is RESOURCE_EXHAUSTED, as grpc-go reports it, not OUT_OF_RANGE.
#[tokio::test]
async fn an_oversized_answer_is_resource_exhausted() {
    let plugin = TestPlugin::start_unix(cnpgi_pluginhelper::transport::PluginServer::new(Verbose))
        .await
        .unwrap();
    let path = plugin.address().trim_start_matches("unix://").into();
    let client = PluginClient::new("verbose.example.com", Transport::Unix { path }, &options()).unwrap();
    let status = client
        .identity()
        .get_plugin_metadata(client.request(cnpgi_pluginhelper::proto::identity::v1::GetPluginMetadataRequest {}))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("verbose.example.com"),
        "names the plugin: {status:?}"
    );
    // The connection is still usable.
    assert!(is_ready(&client).await.is_ok());
}
