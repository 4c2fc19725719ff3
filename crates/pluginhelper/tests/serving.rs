//! The plugin server over real sockets: mutual TLS acceptance and refusal,
//! certificate rotation, panics, health, reflection, Unix sockets, shutdown.

#![allow(clippy::unwrap_used)]

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use cnpgi_pluginhelper::{
    proto::{
        identity::v1::{GetPluginMetadataRequest, identity_client::IdentityClient},
        operator::v1::{
            DeregisterRequest, DeregisterResponse, OperatorCapabilitiesRequest, OperatorCapabilitiesResult,
            OperatorMutateClusterRequest, OperatorMutateClusterResult, OperatorValidateClusterChangeRequest,
            OperatorValidateClusterChangeResult, OperatorValidateClusterCreateRequest,
            OperatorValidateClusterCreateResult, SetStatusInClusterRequest, SetStatusInClusterResponse,
            operator_server::{Operator, OperatorServer},
        },
    },
    testing::ExtendedKeyUsagePurpose,
    testing::{CapturedLog, TestCertificates, TestIdentity, TestPlugin, connect_tls, eventually},
    transport::{PluginServer, ServeOptions},
};
use tokio::io::AsyncReadExt;
use tonic::{Code, Request, Response, Status, transport::Endpoint};

const NAME: &str = "test-plugin.example.com";

/// An Operator whose RPCs misbehave on purpose.
struct Misbehaving;

#[tonic::async_trait]
impl Operator for Misbehaving {
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        Ok(Response::new(OperatorCapabilitiesResult::default()))
    }
    async fn validate_cluster_create(
        &self,
        _: Request<OperatorValidateClusterCreateRequest>,
    ) -> Result<Response<OperatorValidateClusterCreateResult>, Status> {
        panic!("deliberate panic in ValidateClusterCreate");
    }
    async fn validate_cluster_change(
        &self,
        _: Request<OperatorValidateClusterChangeRequest>,
    ) -> Result<Response<OperatorValidateClusterChangeResult>, Status> {
        Err(Status::failed_precondition("not today"))
    }
    async fn mutate_cluster(
        &self,
        _: Request<OperatorMutateClusterRequest>,
    ) -> Result<Response<OperatorMutateClusterResult>, Status> {
        // A slow call, to observe graceful shutdown.
        tokio::time::sleep(Duration::from_millis(500)).await;
        Ok(Response::new(OperatorMutateClusterResult {
            json_patch: b"[]".to_vec(),
        }))
    }
    async fn set_status_in_cluster(
        &self,
        _: Request<SetStatusInClusterRequest>,
    ) -> Result<Response<SetStatusInClusterResponse>, Status> {
        Err(Status::unimplemented("no status"))
    }
    async fn deregister(&self, _: Request<DeregisterRequest>) -> Result<Response<DeregisterResponse>, Status> {
        Ok(Response::new(DeregisterResponse {}))
    }
}

fn server(ready: bool) -> (PluginServer<TestIdentity>, Arc<AtomicBool>) {
    let identity = TestIdentity::new(NAME).ready(ready);
    let flag = identity.readiness();
    let server = PluginServer::new(identity)
        .add_service(OperatorServer::new(Misbehaving))
        .with_options(ServeOptions {
            probe_interval: Duration::from_millis(50),
            ..ServeOptions::default()
        });
    (server, flag)
}

async fn metadata_over(channel: tonic::transport::Channel) -> Result<String, Status> {
    IdentityClient::new(channel)
        .get_plugin_metadata(GetPluginMetadataRequest {})
        .await
        .map(|r| r.into_inner().name)
}

/// A client that must be refused: connecting or the first call fails.
async fn assert_refused(
    connect: impl Future<Output = Result<tonic::transport::Channel, cnpgi_pluginhelper::testing::TestError>>,
) {
    match connect.await {
        Err(_) => {}
        Ok(channel) => {
            let result = metadata_over(channel).await;
            assert!(
                result.is_err(),
                "the server answered a client it should refuse: {result:?}"
            );
        }
    }
}

#[tokio::test]
async fn mtls_client_with_the_pinned_certificate_is_served() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}

#[tokio::test]
async fn client_without_a_certificate_is_refused() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let pinned = cnpgi_tls::pem::read_certificates(&certs.server.cert_path, "server").unwrap();
    let mut config = rustls::ClientConfig::builder_with_provider(cnpgi_tls::crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .dangerous()
        .with_custom_certificate_verifier(cnpgi_tls::verify::PinnedServerVerifier::new(pinned).unwrap())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    assert_refused(connect_tls(plugin.tcp_address().unwrap(), config, &certs.server_name)).await;
    // The server keeps serving the right client.
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}

#[tokio::test]
async fn client_with_a_certificate_from_another_issuer_is_refused() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let other = TestCertificates::generate(&certs.server_name).unwrap();
    // Trusts the real server, but presents a client certificate the plugin never pinned.
    let stranger = TestCertificates::self_signed(
        other.dir(),
        "stranger",
        vec!["cnpgi-operator".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
    )
    .unwrap();
    let pinned = cnpgi_tls::pem::read_certificates(&certs.server.cert_path, "server").unwrap();
    let config = cnpgi_tls::client::client_config(
        cnpgi_tls::pem::read_certificates(&stranger.cert_path, "c").unwrap(),
        cnpgi_tls::pem::read_private_key(&stranger.key_path, "k").unwrap(),
        cnpgi_tls::verify::PinnedServerVerifier::new(pinned).unwrap(),
    )
    .unwrap();
    assert_refused(connect_tls(plugin.tcp_address().unwrap(), config, &certs.server_name)).await;
}

#[tokio::test]
async fn client_that_does_not_trust_the_server_certificate_fails() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let other = TestCertificates::generate(&certs.server_name).unwrap();
    // Presents the right client certificate but pins another server certificate.
    let config = cnpgi_tls::client::client_config(
        cnpgi_tls::pem::read_certificates(&certs.client.cert_path, "c").unwrap(),
        cnpgi_tls::pem::read_private_key(&certs.client.key_path, "k").unwrap(),
        cnpgi_tls::verify::PinnedServerVerifier::new(
            cnpgi_tls::pem::read_certificates(&other.server.cert_path, "s").unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    assert_refused(connect_tls(plugin.tcp_address().unwrap(), config, &certs.server_name)).await;
}

#[tokio::test]
async fn plaintext_http2_is_refused() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let endpoint = Endpoint::from_shared(format!("http://{}", plugin.tcp_address().unwrap()))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    match endpoint.connect().await {
        Err(_) => {}
        Ok(channel) => {
            let result = metadata_over(channel).await;
            assert!(result.is_err(), "plaintext client was answered: {result:?}");
        }
    }
}

#[tokio::test]
async fn rotated_server_certificate_is_used_by_new_connections() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let address = plugin.tcp_address().unwrap();
    let old_config = certs.client_config().unwrap();

    // cert-manager renews the certificate: new key pair, same names. Written
    // elsewhere and renamed over the served files, as the kubelet does.
    let staging = TestCertificates::generate(&certs.server_name).unwrap();
    std::fs::rename(&staging.server.cert_path, &certs.server.cert_path).unwrap();
    std::fs::rename(&staging.server.key_path, &certs.server.key_path).unwrap();

    // A client pinning the new certificate connects; one pinning the old one
    // cannot open a new connection any more.
    let new_config = certs.client_config().unwrap();
    let channel = connect_tls(address, new_config, &certs.server_name).await.unwrap();
    assert_eq!(metadata_over(channel).await.unwrap(), NAME);
    assert_refused(connect_tls(address, old_config, &certs.server_name)).await;
    // The connection opened before the rotation keeps working.
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}

#[tokio::test]
async fn rotated_client_certificate_is_required_from_new_connections() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let certs = plugin.certificates().unwrap();
    let address = plugin.tcp_address().unwrap();
    let old_config = certs.client_config().unwrap();

    let staging = TestCertificates::generate(&certs.server_name).unwrap();
    std::fs::rename(&staging.client.cert_path, &certs.client.cert_path).unwrap();
    std::fs::rename(&staging.client.key_path, &certs.client.key_path).unwrap();

    let channel = connect_tls(address, certs.client_config().unwrap(), &certs.server_name)
        .await
        .unwrap();
    assert_eq!(metadata_over(channel).await.unwrap(), NAME);
    assert_refused(connect_tls(address, old_config, &certs.server_name)).await;
}

#[tokio::test]
async fn a_panicking_handler_answers_internal_and_the_server_keeps_serving() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let status = plugin
        .operator()
        .validate_cluster_create(OperatorValidateClusterCreateRequest {
            definition: b"{}".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(
        status.message().contains("deliberate panic in ValidateClusterCreate"),
        "{status:?}"
    );
    assert!(
        status
            .message()
            .contains("/cnpgi.operator.v1.Operator/ValidateClusterCreate"),
        "{status:?}"
    );
    // Errors returned by handlers pass through untouched.
    let status = plugin
        .operator()
        .validate_cluster_change(OperatorValidateClusterChangeRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}

async fn health_status(plugin: &TestPlugin, service: &str) -> i32 {
    use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
    HealthClient::new(plugin.channel())
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await
        .unwrap()
        .into_inner()
        .status
}

#[tokio::test]
async fn health_service_follows_probe() {
    use tonic_health::pb::health_check_response::ServingStatus;
    let (server, ready) = server(false);
    let plugin = TestPlugin::start_tls(server).await.unwrap();
    let wait_for = async |want: ServingStatus| {
        eventually(
            &format!("health becomes {want:?}"),
            Duration::from_secs(2),
            async || health_status(&plugin, "").await == want as i32,
        )
        .await
    };
    wait_for(ServingStatus::NotServing).await;
    ready.store(true, Ordering::SeqCst);
    wait_for(ServingStatus::Serving).await;
    assert_eq!(
        health_status(&plugin, "cnpgi.identity.v1.Identity").await,
        ServingStatus::Serving as i32
    );
    ready.store(false, Ordering::SeqCst);
    wait_for(ServingStatus::NotServing).await;
}

#[tokio::test]
async fn reflection_lists_the_cnpgi_services() {
    use tokio_stream::StreamExt;
    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let plugin = TestPlugin::start_unix(server(true).0).await.unwrap();
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = ServerReflectionClient::new(plugin.channel())
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let Some(MessageResponse::ListServicesResponse(list)) = responses.next().await.unwrap().unwrap().message_response
    else {
        panic!("unexpected reflection answer");
    };
    let names: Vec<_> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        "cnpgi.identity.v1.Identity",
        "cnpgi.operator.v1.Operator",
        "cnpgi.operator_lifecycle.v1.OperatorLifecycle",
    ] {
        assert!(names.iter().any(|n| n == expected), "{expected} missing from {names:?}");
    }
}

#[tokio::test]
async fn unix_socket_is_served_and_removed_on_stop() {
    let plugin = TestPlugin::start_unix(server(true).0).await.unwrap();
    let path = plugin.address().trim_start_matches("unix://").to_owned();
    assert!(path.ends_with(NAME), "{path}");
    assert!(std::path::Path::new(&path).exists());
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
    plugin.stop().await.unwrap();
    assert!(!std::path::Path::new(&path).exists(), "socket file left behind");
}

#[tokio::test]
async fn shutdown_lets_in_flight_calls_finish() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let mut operator = plugin.operator();
    let call = tokio::spawn(async move {
        operator
            .mutate_cluster(OperatorMutateClusterRequest {
                definition: b"{}".to_vec(),
            })
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    plugin.stop().await.unwrap();
    let answer = call.await.unwrap().unwrap();
    assert_eq!(answer.into_inner().json_patch, b"[]");
}

/// A client-authenticated TLS connection to `plugin`, over which nothing is sent yet.
async fn authenticated_tls(plugin: &TestPlugin) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let certs = plugin.certificates().unwrap();
    let config = certs.client_config().unwrap();
    let tcp = tokio::net::TcpStream::connect(plugin.tcp_address().unwrap())
        .await
        .unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(cnpgi_tls::client::server_name(&certs.server_name).unwrap(), tcp)
        .await
        .unwrap()
}

/// Issue 13, point 7: a client that completes the TLS handshake with the
/// pinned certificate and then sends nothing is disconnected after
/// `preface_timeout`, instead of being held for minutes.
#[tokio::test]
async fn an_authenticated_connection_that_never_sends_the_http2_preface_is_closed() {
    let (server, _) = server(true);
    let server = server.with_options(ServeOptions {
        preface_timeout: Duration::from_secs(1),
        ..ServeOptions::default()
    });
    let plugin = TestPlugin::start_tls(server).await.unwrap();
    let mut tls = authenticated_tls(&plugin).await;
    let started = std::time::Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        let mut buffer = [0u8; 256];
        loop {
            match tls.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                // The server may send its own HTTP/2 settings meanwhile.
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a silent authenticated connection is still open after 15 s"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "closed before the preface timeout: {:?}",
        started.elapsed()
    );
    // The server still serves well-behaved clients.
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}

/// Issue 13, point 7: the server announces a cap on concurrent streams per
/// connection (HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`) and enforces it.
#[tokio::test]
async fn concurrent_streams_per_connection_are_capped() {
    let (server, _) = server(true);
    let server = server.with_options(ServeOptions {
        max_concurrent_streams: 8,
        ..ServeOptions::default()
    });
    let plugin = TestPlugin::start_tls(server).await.unwrap();
    let tls = authenticated_tls(&plugin).await;
    let (send, mut connection) = h2::client::handshake(tls).await.unwrap();
    let mut send = send.ready().await.unwrap();
    let health_check = || {
        http::Request::post(format!(
            "https://{}/grpc.health.v1.Health/Check",
            plugin.certificates().unwrap().server_name
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
    };
    let (response, mut stream) = send.send_request(health_check(), false).unwrap();
    // An empty HealthCheckRequest: no compression, length 0.
    stream
        .send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let response = tokio::select! {
        response = response => response.unwrap(),
        result = &mut connection => panic!("connection ended first: {result:?}"),
    };
    assert_eq!(response.status(), 200);
    assert_eq!(
        connection.max_concurrent_send_streams(),
        8,
        "the server's SETTINGS_MAX_CONCURRENT_STREAMS"
    );

    // Eight streams that stay open (requests never finished) fill the cap.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut open = Vec::new();
    for _ in 0..8 {
        send = send.ready().await.unwrap();
        open.push(send.send_request(health_check(), false).unwrap());
    }
    // A complete ninth call is not answered while they are open...
    send = send.ready().await.unwrap();
    let (mut ninth, mut stream) = send.send_request(health_check(), false).unwrap();
    stream
        .send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
        .unwrap();
    let early = tokio::time::timeout(Duration::from_millis(500), &mut ninth).await;
    assert!(early.is_err(), "a ninth concurrent stream was served: {early:?}");
    // ...and is once one of them ends.
    drop(open.pop());
    let response = tokio::time::timeout(Duration::from_secs(5), ninth).await;
    assert_eq!(response.unwrap().unwrap().status(), 200);
    drop(open);
}

/// Issue 13, point 10: a request larger than the server accepts is refused
/// with `RESOURCE_EXHAUSTED`, as gRPC and grpc-go do, not `OUT_OF_RANGE`.
#[tokio::test]
async fn an_oversized_request_is_refused_with_resource_exhausted() {
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let status = plugin
        .operator()
        .mutate_cluster(OperatorMutateClusterRequest {
            definition: vec![b' '; 5 * 1024 * 1024],
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("too large"), "{status:?}");
}

/// Issue 13, point 7: over a Unix socket too, a client that connects and
/// sends nothing is disconnected after `preface_timeout`.
#[tokio::test]
async fn a_unix_socket_connection_that_never_sends_the_http2_preface_is_closed() {
    let (server, _) = server(true);
    let server = server.with_options(ServeOptions {
        preface_timeout: Duration::from_secs(1),
        ..ServeOptions::default()
    });
    let plugin = TestPlugin::start_unix(server).await.unwrap();
    let path = plugin.address().trim_start_matches("unix://").to_owned();
    let mut socket = tokio::net::UnixStream::connect(&path).await.unwrap();
    let closed = tokio::time::timeout(Duration::from_secs(15), async {
        let mut buffer = [0u8; 256];
        loop {
            match socket.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(
        closed.is_ok(),
        "a silent Unix socket connection is still open after 15 s"
    );
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}

/// An Operator whose MutateCluster answers as many bytes as its request's
/// definition says (in decimal), in a pattern that shows misordering.
struct AnswerOfSize;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

#[tonic::async_trait]
impl Operator for AnswerOfSize {
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        Ok(Response::new(OperatorCapabilitiesResult::default()))
    }
    async fn validate_cluster_create(
        &self,
        _: Request<OperatorValidateClusterCreateRequest>,
    ) -> Result<Response<OperatorValidateClusterCreateResult>, Status> {
        Err(Status::unimplemented("not here"))
    }
    async fn validate_cluster_change(
        &self,
        _: Request<OperatorValidateClusterChangeRequest>,
    ) -> Result<Response<OperatorValidateClusterChangeResult>, Status> {
        Err(Status::unimplemented("not here"))
    }
    async fn mutate_cluster(
        &self,
        request: Request<OperatorMutateClusterRequest>,
    ) -> Result<Response<OperatorMutateClusterResult>, Status> {
        let len = std::str::from_utf8(&request.into_inner().definition)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| Status::invalid_argument("not a size"))?;
        Ok(Response::new(OperatorMutateClusterResult {
            json_patch: pattern(len),
        }))
    }
    async fn set_status_in_cluster(
        &self,
        _: Request<SetStatusInClusterRequest>,
    ) -> Result<Response<SetStatusInClusterResponse>, Status> {
        Err(Status::unimplemented("not here"))
    }
    async fn deregister(&self, _: Request<DeregisterRequest>) -> Result<Response<DeregisterResponse>, Status> {
        Ok(Response::new(DeregisterResponse {}))
    }
}

/// The server holds an answer's frames to write them at once: answers of
/// every size (below, at and above h2's 256-byte chaining threshold, a frame,
/// the 64 KiB batch limit, several MiB) must arrive whole and in order, one
/// at a time and many at once on one connection, over both transports.
#[tokio::test]
async fn answers_of_every_size_arrive_whole_one_at_a_time_and_many_at_once() {
    use cnpgi_pluginhelper::proto::operator::v1::operator_client::OperatorClient;

    const SIZES: [usize; 10] = [0, 1, 255, 256, 1100, 16_384, 65_536, 65_537, 1 << 20, 3 << 20];
    let server = || PluginServer::new(TestIdentity::new(NAME)).add_service(OperatorServer::new(AnswerOfSize));
    for plugin in [
        TestPlugin::start_tls(server()).await.unwrap(),
        TestPlugin::start_unix(server()).await.unwrap(),
    ] {
        let client = OperatorClient::new(plugin.channel());
        let ask = |len: usize| {
            let mut client = client.clone();
            async move {
                let answer = client
                    .mutate_cluster(OperatorMutateClusterRequest {
                        definition: len.to_string().into_bytes(),
                    })
                    .await
                    .unwrap_or_else(|status| panic!("asking for {len} bytes: {status}"))
                    .into_inner()
                    .json_patch;
                assert!(
                    answer == pattern(len),
                    "the answer of {len} bytes arrived as {} bytes",
                    answer.len()
                );
            }
        };
        for len in SIZES {
            ask(len).await;
        }
        let at_once: Vec<_> = SIZES
            .iter()
            .chain(SIZES.iter())
            .map(|len| tokio::spawn(ask(*len)))
            .collect();
        for call in at_once {
            call.await.unwrap();
        }
        plugin.stop().await.unwrap();
    }
}

/// Issue 24, point 4: a flood of refused connections (no TLS, or TLS then
/// no HTTP/2 preface) writes one warning line per kind every 5 s, with the
/// count of connections it stands for, not one line each.
#[tokio::test]
async fn refused_connections_are_logged_once_every_few_seconds_with_a_count() {
    use tokio::io::AsyncWriteExt;
    let (log, _guard) = CapturedLog::install();
    let plugin = TestPlugin::start_tls(server(true).0).await.unwrap();
    let address = plugin.tcp_address().unwrap();

    // Plain text where a TLS ClientHello belongs.
    let refuse_one = async || {
        let mut tcp = tokio::net::TcpStream::connect(address).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: plugin\r\n\r\n").await.unwrap();
        let mut buffer = [0u8; 256];
        // Until the server closes it (it may send a TLS alert first).
        while matches!(tcp.read(&mut buffer).await, Ok(n) if n > 0) {}
    };
    for _ in 0..100 {
        refuse_one().await;
    }
    // Authenticated TLS, then HTTP/1.1 instead of the HTTP/2 preface.
    for _ in 0..50 {
        let mut tls = authenticated_tls(&plugin).await;
        tls.write_all(b"GET / HTTP/1.1\r\nHost: plugin\r\n\r\n").await.unwrap();
        let mut buffer = [0u8; 256];
        while matches!(tls.read(&mut buffer).await, Ok(n) if n > 0) {}
    }
    // The server logs a refusal after the connection is gone (the failed
    // handshake drops it), so a client that saw it close may look before
    // the line is written: wait for it, then count.
    let logged = async |text: &str, at_least: usize| {
        eventually(
            &format!("{at_least} lines with {text:?}"),
            Duration::from_secs(10),
            async || {
                let lines = log.lines_with(text);
                if lines.len() < at_least {
                    Err("not yet")
                } else {
                    Ok(lines)
                }
            },
        )
        .await
    };
    let refused = logged("TLS handshake refused", 1).await;
    let no_preface = logged("not an HTTP/2 client", 1).await;
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(no_preface.len(), 1, "{no_preface:#?}");
    assert!(refused[0].contains("count=1"), "{}", refused[0]);

    // A refusal of another kind (a client certificate from an unknown
    // issuer) is not hidden by that flood: logged at once, with its cause.
    // (It was hidden once, and an operator debugging a wrong client Secret
    // saw nothing.)
    let certs = plugin.certificates().unwrap();
    let other = TestCertificates::generate(&certs.server_name).unwrap();
    let pinned = cnpgi_tls::pem::read_certificates(&certs.server.cert_path, "server").unwrap();
    let stranger = cnpgi_tls::client::client_config(
        cnpgi_tls::pem::read_certificates(&other.client.cert_path, "c").unwrap(),
        cnpgi_tls::pem::read_private_key(&other.client.key_path, "k").unwrap(),
        cnpgi_tls::verify::PinnedServerVerifier::new(pinned).unwrap(),
    )
    .unwrap();
    assert_refused(connect_tls(address, stranger, &certs.server_name)).await;
    let unknown_issuer = eventually("the unknown issuer logged", Duration::from_secs(5), async || {
        let lines = log.lines_with_all(&["TLS handshake refused", "UnknownIssuer"]);
        if lines.is_empty() {
            Err("no such line yet")
        } else {
            Ok(lines)
        }
    })
    .await;
    assert!(unknown_issuer[0].contains("count=1"), "{}", unknown_issuer[0]);

    // Once the interval has passed, the next refusal is logged with the
    // count of those not shown.
    tokio::time::sleep(Duration::from_millis(5100)).await;
    refuse_one().await;
    let refused = logged("TLS handshake refused", 3).await;
    assert_eq!(refused.len(), 3, "{refused:#?}");
    assert!(
        refused[2].contains("count=100") && refused[2].contains("100 like it in the last 5s"),
        "{}",
        refused[2]
    );
    // The server still serves well-behaved clients.
    assert_eq!(metadata_over(plugin.channel()).await.unwrap(), NAME);
}
