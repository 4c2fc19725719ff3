//! TLS 1.3 client configuration and a connector for tonic channels.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use hyper_util::rt::TokioIo;
use rustls::ClientConfig;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};

use crate::{ALPN_H2, TlsError, crypto_provider, verify::PinnedServerVerifier};

/// Builds a TLS 1.3-only client configuration offering ALPN `h2`, presenting
/// `client_cert`/`client_key` and trusting servers through `verifier`.
pub fn client_config(
    client_cert: Vec<CertificateDer<'static>>,
    client_key: PrivateKeyDer<'static>,
    verifier: Arc<PinnedServerVerifier>,
) -> Result<ClientConfig, TlsError> {
    let mut config = ClientConfig::builder_with_provider(crypto_provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_client_auth_cert(client_cert, client_key)?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    Ok(config)
}

/// Parses a server name to verify (a DNS name or an IP address).
pub fn server_name(name: &str) -> Result<ServerName<'static>, TlsError> {
    ServerName::try_from(name.to_owned()).map_err(|e| TlsError::ServerName {
        name: name.to_owned(),
        reason: e.to_string(),
    })
}

/// A `tower::Service<Uri>` that opens a TCP connection to the URI's authority
/// and runs a TLS handshake verifying `server_name`; give it to
/// `tonic::transport::Endpoint::connect_with_connector`.
///
/// The endpoint URI should use the `http` scheme: this connector, not tonic,
/// does TLS. Every completed handshake is counted, so callers can check that
/// a channel is reused rather than re-established.
#[derive(Clone)]
pub struct TlsConnectorService {
    connector: TlsConnector,
    server_name: ServerName<'static>,
    handshakes: Arc<AtomicU64>,
}

impl std::fmt::Debug for TlsConnectorService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsConnectorService")
            .field("server_name", &self.server_name)
            .field("handshakes", &self.handshakes())
            .finish_non_exhaustive()
    }
}

impl TlsConnectorService {
    /// A connector with `config` that verifies the server as `server_name`.
    pub fn new(config: Arc<ClientConfig>, server_name: ServerName<'static>) -> Self {
        Self {
            connector: TlsConnector::from(config),
            server_name,
            handshakes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Counts handshakes in `counter` instead of a counter of its own.
    pub fn with_handshake_counter(mut self, counter: Arc<AtomicU64>) -> Self {
        self.handshakes = counter;
        self
    }

    /// Completed TLS handshakes so far, over all clones of this connector.
    pub fn handshakes(&self) -> u64 {
        self.handshakes.load(Ordering::Relaxed)
    }

    /// The shared handshake counter, for metrics.
    pub fn handshake_counter(&self) -> Arc<AtomicU64> {
        self.handshakes.clone()
    }
}

/// Why a TLS connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The URI has no host or port to dial.
    #[error("URI {0} has no host and port to connect to")]
    NoAuthority(http::Uri),
    /// The TCP connection failed.
    #[error("cannot connect to {address}: {source}")]
    Tcp {
        /// Where it tried to connect.
        address: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TLS handshake failed (refused certificate, wrong name, protocol).
    #[error("TLS handshake with {address} (expecting server name {server_name}) failed: {source}")]
    Handshake {
        /// Where it connected.
        address: String,
        /// The name it verified.
        server_name: String,
        /// The TLS error.
        source: std::io::Error,
    },
}

impl tower_service::Service<http::Uri> for TlsConnectorService {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let host = uri.host().ok_or_else(|| ConnectError::NoAuthority(uri.clone()))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().ok_or_else(|| ConnectError::NoAuthority(uri.clone()))?;
            let address = format!("{host}:{port}");
            let tcp = TcpStream::connect((host, port))
                .await
                .map_err(|source| ConnectError::Tcp {
                    address: address.clone(),
                    source,
                })?;
            // gRPC messages are small; waiting for Nagle only adds latency.
            let _ = tcp.set_nodelay(true);
            let tls = this
                .connector
                .connect(this.server_name.clone(), tcp)
                .await
                .map_err(|source| ConnectError::Handshake {
                    address,
                    server_name: this.server_name.to_str().into_owned(),
                    source,
                })?;
            this.handshakes.fetch_add(1, Ordering::Relaxed);
            Ok(TokioIo::new(tls))
        })
    }
}
