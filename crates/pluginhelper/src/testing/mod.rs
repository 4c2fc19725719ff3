//! Run a plugin in-process for tests (cargo feature `testing`).
//!
//! [`TestPlugin`] serves a [`PluginServer`] on a loopback port with freshly
//! generated mutual-TLS certificates, or on a Unix socket in a temporary
//! directory, exactly as `create_main_cmd` would serve it, and hands back
//! clients connected to it. Certificates are made the way cert-manager's
//! `selfSigned` issuer makes them: two self-signed leaves, the server's pinned
//! by the client and the client's pinned by the server.
//!
//! [`eventually`] waits for what tests wait for (a plugin becoming
//! routable, a process answering), and [`ChildGuard`] kills the processes
//! they start.
//!
//! ```no_run
//! # async fn example<I: cnpgi_pluginhelper::proto::identity::v1::identity_server::Identity>(identity: I) {
//! use cnpgi_pluginhelper::{proto::identity::v1::GetPluginMetadataRequest, testing::TestPlugin, transport::PluginServer};
//!
//! let plugin = TestPlugin::start_tls(PluginServer::new(identity)).await.unwrap();
//! let metadata = plugin.identity().get_plugin_metadata(GetPluginMetadataRequest {}).await.unwrap();
//! println!("{}", metadata.into_inner().name);
//! # }
//! ```

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use cnpgi_proto::{
    identity::v1::{
        GetPluginCapabilitiesRequest, GetPluginCapabilitiesResponse, GetPluginMetadataRequest,
        GetPluginMetadataResponse, ProbeRequest, ProbeResponse, identity_client::IdentityClient,
        identity_server::Identity, plugin_capability,
    },
    operator::v1::operator_client::OperatorClient,
    operator_lifecycle::v1::operator_lifecycle_client::OperatorLifecycleClient,
};
/// The project's one maker of test certificates (any names, usages, validity, a CA).
pub use cnpgi_tls::testing::{ExtendedKeyUsagePurpose, TestCa, TestCert, TestCertBuilder};
use cnpgi_tls::{
    client::{TlsConnectorService, client_config, server_name},
    pem,
    server::ServerTlsFiles,
    verify::PinnedServerVerifier,
};
use tokio::{sync::oneshot, task::JoinHandle};
use tonic::transport::{Channel, Endpoint};

use crate::transport::{PluginListener, PluginServer, ServeError};

mod captured_log;
mod eventually;
mod process;
pub use captured_log::CapturedLog;
pub use eventually::{Outcome, eventually};
pub use process::ChildGuard;

/// Why a test plugin could not be started or reached.
#[derive(Debug, thiserror::Error)]
pub enum TestError {
    /// Writing files to the temporary directory failed.
    #[error("cannot write test files: {0}")]
    Io(#[from] std::io::Error),
    /// TLS set-up failed.
    #[error(transparent)]
    Tls(#[from] cnpgi_tls::TlsError),
    /// The plugin could not be served.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// The client could not connect.
    #[error("cannot connect to the test plugin: {0}")]
    Connect(#[from] tonic::transport::Error),
    /// The conformance client could not be created.
    #[error("cannot run the conformance suite: {0}")]
    Conformance(String),
}

/// An Identity for test plugins: a name, advertised services, and a
/// readiness the test flips at will.
///
/// ```
/// use cnpgi_pluginhelper::testing::TestIdentity;
///
/// let identity = TestIdentity::new("test.example.com").ready(false);
/// let ready = identity.readiness();
/// ready.store(true, std::sync::atomic::Ordering::SeqCst); // Probe now answers ready
/// ```
#[derive(Debug, Clone)]
pub struct TestIdentity {
    name: String,
    services: Vec<plugin_capability::service::Type>,
    ready: Arc<AtomicBool>,
    manifest: std::collections::HashMap<String, String>,
}

impl TestIdentity {
    /// A ready plugin called `name`, advertising no service.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            services: Vec::new(),
            ready: Arc::new(AtomicBool::new(true)),
            manifest: std::collections::HashMap::new(),
        }
    }

    /// Answers `key: value` in its metadata manifest (e.g. what it
    /// implements, `cnpgi.io/implements`).
    pub fn with_manifest(mut self, key: &str, value: &str) -> Self {
        self.manifest.insert(key.to_owned(), value.to_owned());
        self
    }

    /// Sets the initial readiness.
    pub fn ready(self, ready: bool) -> Self {
        self.ready.store(ready, Ordering::SeqCst);
        self
    }

    /// Advertises one more service.
    pub fn with_service(mut self, service: plugin_capability::service::Type) -> Self {
        self.services.push(service);
        self
    }

    /// The flag `Probe` answers with.
    pub fn readiness(&self) -> Arc<AtomicBool> {
        self.ready.clone()
    }
}

#[tonic::async_trait]
impl Identity for TestIdentity {
    async fn get_plugin_metadata(
        &self,
        _: tonic::Request<GetPluginMetadataRequest>,
    ) -> Result<tonic::Response<GetPluginMetadataResponse>, tonic::Status> {
        Ok(tonic::Response::new(GetPluginMetadataResponse {
            name: self.name.clone(),
            version: "0.0.0-test".into(),
            manifest: self.manifest.clone(),
            ..GetPluginMetadataResponse::default()
        }))
    }

    async fn get_plugin_capabilities(
        &self,
        _: tonic::Request<GetPluginCapabilitiesRequest>,
    ) -> Result<tonic::Response<GetPluginCapabilitiesResponse>, tonic::Status> {
        let capabilities = self
            .services
            .iter()
            .map(|service| cnpgi_core::capabilities::service(*service))
            .collect();
        Ok(tonic::Response::new(GetPluginCapabilitiesResponse { capabilities }))
    }

    async fn probe(&self, _: tonic::Request<ProbeRequest>) -> Result<tonic::Response<ProbeResponse>, tonic::Status> {
        Ok(tonic::Response::new(ProbeResponse {
            ready: self.ready.load(Ordering::SeqCst),
        }))
    }
}

/// A self-signed key pair written to disk as PEM.
#[derive(Debug, Clone)]
pub struct TestKeyPair {
    /// Certificate, PEM.
    pub cert_pem: String,
    /// Private key, PEM.
    pub key_pem: String,
    /// Path of the certificate file.
    pub cert_path: PathBuf,
    /// Path of the key file.
    pub key_path: PathBuf,
}

/// Server and client certificates for one test plugin, in a temporary directory.
#[derive(Debug)]
pub struct TestCertificates {
    dir: tempfile::TempDir,
    /// The DNS name in the server certificate.
    pub server_name: String,
    /// The plugin's serving certificate (SANs: the server name, `localhost`, `127.0.0.1`).
    pub server: TestKeyPair,
    /// The certificate the operator presents.
    pub client: TestKeyPair,
}

impl TestCertificates {
    /// Generates self-signed server and client leaves, like cert-manager's
    /// `selfSigned` issuer with `usages: [server auth]` / `[client auth]`.
    pub fn generate(server_name: &str) -> Result<Self, TestError> {
        let dir = tempfile::tempdir()?;
        let server = Self::self_signed(
            &dir,
            "server",
            vec![server_name.to_owned(), "localhost".to_owned(), "127.0.0.1".to_owned()],
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let client = Self::self_signed(
            &dir,
            "client",
            vec!["cnpgi-operator".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        Ok(Self {
            dir,
            server_name: server_name.to_owned(),
            server,
            client,
        })
    }

    /// Generates a self-signed key pair and writes it as `<stem>.crt`/`<stem>.key` in `dir`.
    pub fn self_signed(
        dir: &tempfile::TempDir,
        stem: &str,
        names: Vec<String>,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<TestKeyPair, TestError> {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let cert = TestCert::builder(&names).usages(&[usage]).self_signed();
        let pair = TestKeyPair {
            cert_pem: cert.cert_pem(),
            key_pem: cert.key_pem(),
            cert_path: dir.path().join(format!("{stem}.crt")),
            key_path: dir.path().join(format!("{stem}.key")),
        };
        std::fs::write(&pair.cert_path, &pair.cert_pem)?;
        std::fs::write(&pair.key_path, &pair.key_pem)?;
        Ok(pair)
    }

    /// The temporary directory holding the files.
    pub fn dir(&self) -> &tempfile::TempDir {
        &self.dir
    }

    /// The files the plugin serves with (`--server-cert`, `--server-key`, `--client-cert`).
    pub fn server_files(&self) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: self.server.cert_path.clone(),
            key: self.server.key_path.clone(),
            client_ca: Some(self.client.cert_path.clone()),
        }
    }

    /// A client configuration presenting the client certificate and pinning
    /// the server certificate, as the operator would.
    pub fn client_config(&self) -> Result<rustls::ClientConfig, TestError> {
        let pinned = pem::read_certificates(&self.server.cert_path, "server certificate")?;
        let certs = pem::read_certificates(&self.client.cert_path, "client certificate")?;
        let key = pem::read_private_key(&self.client.key_path, "client key")?;
        Ok(client_config(certs, key, PinnedServerVerifier::new(pinned)?)?)
    }
}

/// Opens a gRPC channel over mutual TLS to `address`, verifying the server as `name`.
pub async fn connect_tls(address: SocketAddr, config: rustls::ClientConfig, name: &str) -> Result<Channel, TestError> {
    let connector = TlsConnectorService::new(Arc::new(config), server_name(name)?);
    // The connector does TLS, so the URI scheme tonic sees is plain http.
    Ok(Endpoint::from_shared(format!("http://{address}"))?
        .connect_with_connector(connector)
        .await?)
}

/// Opens a gRPC channel to a Unix socket.
pub async fn connect_unix(path: &std::path::Path) -> Result<Channel, TestError> {
    Ok(Endpoint::from_shared(format!("unix://{}", path.display()))?
        .connect()
        .await?)
}

/// A plugin served in-process for the duration of a test; stopped when dropped.
#[derive(Debug)]
pub struct TestPlugin {
    channel: Channel,
    address: String,
    tcp_address: Option<SocketAddr>,
    certificates: Option<TestCertificates>,
    _socket_dir: Option<tempfile::TempDir>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Result<(), ServeError>>,
}

impl TestPlugin {
    /// Serves on `127.0.0.1:<free port>` with new mutual-TLS certificates.
    pub async fn start_tls<I: Identity>(server: PluginServer<I>) -> Result<Self, TestError> {
        let name = server.metadata().await?.name;
        Self::start_tls_with(server, TestCertificates::generate(&name)?).await
    }

    /// Serves on `127.0.0.1:<free port>` with the given certificates.
    pub async fn start_tls_with<I: Identity>(
        server: PluginServer<I>,
        certificates: TestCertificates,
    ) -> Result<Self, TestError> {
        let listener = PluginListener::bind_tcp("127.0.0.1:0", certificates.server_files()).await?;
        let PluginListener::Tcp { address, .. } = &listener else {
            unreachable!("bind_tcp returns a TCP listener")
        };
        let address = *address;
        let (stop, task) = spawn(server, listener);
        let channel = connect_tls(address, certificates.client_config()?, &certificates.server_name).await?;
        Ok(Self {
            channel,
            address: address.to_string(),
            tcp_address: Some(address),
            certificates: Some(certificates),
            _socket_dir: None,
            stop: Some(stop),
            task,
        })
    }

    /// Serves on a Unix socket named after the plugin in a temporary directory.
    pub async fn start_unix<I: Identity>(server: PluginServer<I>) -> Result<Self, TestError> {
        let dir = tempfile::tempdir()?;
        let mut plugin = Self::start_unix_in(server, dir.path()).await?;
        plugin._socket_dir = Some(dir);
        Ok(plugin)
    }

    /// Serves on the socket `dir/<plugin name>`: for a directory a test
    /// watches, or to bring a stopped plugin back on the same path.
    pub async fn start_unix_in<I: Identity>(server: PluginServer<I>, dir: &std::path::Path) -> Result<Self, TestError> {
        let name = server.metadata().await?.name;
        let listener = PluginListener::bind_unix(dir, &name)?;
        let path = dir.join(&name);
        let (stop, task) = spawn(server, listener);
        let channel = connect_unix(&path).await?;
        Ok(Self {
            channel,
            address: format!("unix://{}", path.display()),
            tcp_address: None,
            certificates: None,
            _socket_dir: None,
            stop: Some(stop),
            task,
        })
    }

    /// The connected channel (cheap to clone).
    pub fn channel(&self) -> Channel {
        self.channel.clone()
    }

    /// An Identity client on the channel.
    pub fn identity(&self) -> IdentityClient<Channel> {
        IdentityClient::new(self.channel())
    }

    /// An Operator client on the channel.
    pub fn operator(&self) -> OperatorClient<Channel> {
        OperatorClient::new(self.channel())
    }

    /// An OperatorLifecycle client on the channel.
    pub fn lifecycle(&self) -> OperatorLifecycleClient<Channel> {
        OperatorLifecycleClient::new(self.channel())
    }

    /// `127.0.0.1:port` or `unix:///path`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The TCP address, for a TLS plugin.
    pub fn tcp_address(&self) -> Option<SocketAddr> {
        self.tcp_address
    }

    /// The certificates, for a TLS plugin (to build other clients, or rotate them).
    pub fn certificates(&self) -> Option<&TestCertificates> {
        self.certificates.as_ref()
    }

    /// Runs the CNPG-I conformance suite (what `cnpgi-operator check-plugin`
    /// runs) on this plugin, over a client of the operator's own kind.
    ///
    /// ```no_run
    /// # async fn example(plugin: cnpgi_pluginhelper::testing::TestPlugin) {
    /// let report = plugin.check_conformance("my-plugin.example.com").await.unwrap();
    /// assert!(report.passed(), "{report}");
    /// # }
    /// ```
    #[cfg(feature = "conformance")]
    pub async fn check_conformance(&self, expected_name: &str) -> Result<cnpgi_client::conformance::Report, TestError> {
        use cnpgi_client::client::{ClientOptions, PluginClient, TlsTransport, Transport};
        let transport = match (&self.certificates, self.tcp_address) {
            (Some(certs), Some(address)) => Transport::Tls(TlsTransport {
                address: address.to_string(),
                server_name: certs.server_name.clone(),
                client_cert: pem::read_certificates(&certs.client.cert_path, "client certificate")?,
                client_key: pem::read_private_key(&certs.client.key_path, "client key")?,
                server_cert: pem::read_certificates(&certs.server.cert_path, "server certificate")?,
            }),
            _ => Transport::Unix {
                path: self.address.trim_start_matches("unix://").into(),
            },
        };
        let client = PluginClient::new(expected_name, transport, &ClientOptions::default())
            .map_err(|e| TestError::Conformance(e.to_string()))?;
        Ok(cnpgi_client::conformance::check_plugin(&client, expected_name, &Default::default()).await)
    }

    /// Stops the server gracefully and returns how serving ended.
    pub async fn stop(mut self) -> Result<(), ServeError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match (&mut self.task).await {
            Ok(result) => result,
            Err(join) => std::panic::resume_unwind(join.into_panic()),
        }
    }
}

impl Drop for TestPlugin {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn spawn<I: Identity>(
    server: PluginServer<I>,
    listener: PluginListener,
) -> (oneshot::Sender<()>, JoinHandle<Result<(), ServeError>>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(listener, async {
        let _ = stopped.await;
    }));
    (stop, task)
}
