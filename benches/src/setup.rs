//! Plugins, the bare gRPC floor server and clients for the scenarios.

use std::{net::SocketAddr, sync::Arc};

use cnpgi_client::client::{ClientOptions, PluginClient, TlsTransport, Transport};
use cnpgi_host::{Host, HostOptions, registry::Registry};
use cnpgi_operator::crd::Cluster;
use cnpgi_pluginhelper::{
    proto::operator_lifecycle::v1::{
        OperatorLifecycleCapabilitiesRequest, OperatorLifecycleCapabilitiesResponse, OperatorLifecycleRequest,
        OperatorLifecycleResponse,
        operator_lifecycle_server::{OperatorLifecycle, OperatorLifecycleServer},
    },
    testing::{TestCertificates, TestPlugin},
};
use cnpgi_tls::{pem, server::ReloadingServerConfig};
use tonic::{Request, Response, Status};

/// The real hello-world plugin's name.
pub(crate) const HELLO: &str = cnpg_i_hello_world::metadata::PLUGIN_NAME;

/// The hello-world plugin under another name (so that several can be chained); `HELLO` is the real one.
pub(crate) async fn start_plugin(name: &str) -> anyhow::Result<TestPlugin> {
    Ok(TestPlugin::start_tls(cnpg_i_hello_world::plugin().renamed(name).server()).await?)
}

/// The operator's client for a test plugin, over mTLS.
pub(crate) fn client_for(plugin: &TestPlugin, name: &str) -> anyhow::Result<PluginClient> {
    let certs = plugin
        .certificates()
        .ok_or_else(|| anyhow::anyhow!("not a TLS plugin"))?;
    tls_client(name, plugin.address(), certs)
}

/// The operator's client for plugin `name` at `address`, over mTLS with `certs`.
pub(crate) fn tls_client(name: &str, address: &str, certs: &TestCertificates) -> anyhow::Result<PluginClient> {
    let transport = Transport::Tls(TlsTransport {
        address: address.to_owned(),
        server_name: certs.server_name.clone(),
        client_cert: pem::read_certificates(&certs.client.cert_path, "client certificate")?,
        client_key: pem::read_private_key(&certs.client.key_path, "client key")?,
        server_cert: pem::read_certificates(&certs.server.cert_path, "server certificate")?,
    });
    Ok(PluginClient::new(name, transport, &ClientOptions::default())?)
}

/// Starts plugins named `names` and registers them in a host of Clusters
/// (as `cnpgi-operator run` has); returns both.
pub(crate) async fn host_with(names: &[String]) -> anyhow::Result<(Vec<TestPlugin>, Host<Cluster>)> {
    let host = Host::new(HostOptions::default());
    let mut plugins = Vec::new();
    for name in names {
        let plugin = start_plugin(name).await?;
        host.add_plugin("bench", client_for(&plugin, name)?).await?;
        anyhow::ensure!(host.routable(name).is_ok(), "plugin {name} is not routable");
        plugins.push(plugin);
    }
    Ok((plugins, host))
}

/// Starts plugins named `names` and registers them; returns both, the
/// registry to route through directly.
pub(crate) async fn registry_with(names: &[String]) -> anyhow::Result<(Vec<TestPlugin>, Arc<Registry>)> {
    let (plugins, host) = host_with(names).await?;
    Ok((plugins, host.registry().clone()))
}

/// Answers every hook with `answer` (empty: "no change") and does nothing
/// else: the transport floor.
#[derive(Default)]
pub(crate) struct Echo {
    pub(crate) answer: Vec<u8>,
}

#[tonic::async_trait]
impl OperatorLifecycle for Echo {
    async fn get_capabilities(
        &self,
        _: Request<OperatorLifecycleCapabilitiesRequest>,
    ) -> Result<Response<OperatorLifecycleCapabilitiesResponse>, Status> {
        Ok(Response::new(OperatorLifecycleCapabilitiesResponse::default()))
    }

    async fn lifecycle_hook(
        &self,
        _: Request<OperatorLifecycleRequest>,
    ) -> Result<Response<OperatorLifecycleResponse>, Status> {
        Ok(Response::new(OperatorLifecycleResponse {
            json_patch: self.answer.clone(),
        }))
    }
}

/// A bare tonic server (no plugin framework) for the floor, over the same
/// mutual TLS; returns its address.
pub(crate) async fn start_floor(certs: &TestCertificates) -> anyhow::Result<SocketAddr> {
    start_echo(certs, Echo::default()).await
}

/// A bare tonic server answering as `echo` does, over mutual TLS; returns its address.
pub(crate) async fn start_echo(certs: &TestCertificates, echo: Echo) -> anyhow::Result<SocketAddr> {
    let tls = ReloadingServerConfig::new(certs.server_files())?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                if let Ok(stream) = acceptor.accept(tcp).await {
                    let _ = tx.send(Ok::<_, std::io::Error>(stream)).await;
                }
            });
        }
    });
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(OperatorLifecycleServer::new(echo))
            .serve_with_incoming(tokio_stream::wrappers::ReceiverStream::new(rx)),
    );
    Ok(address)
}
