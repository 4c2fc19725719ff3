//! Dialling a plugin as the operator does: the client Secret's certificate
//! and key, the server Secret's `tls.crt` trusted, the server name of the
//! Service, TLS 1.3 only, ALPN `h2` (`cnpgi_tls`'s client configuration,
//! the host's); then the probing sequence of `cnpgi_client::probe` (Identity,
//! and `GetCapabilities` of every advertised service) on a `PluginClient`,
//! as the host's registry makes it.
//!
//! Outside the cluster, `<service>.<namespace>.svc` does not resolve: each
//! ready Pod behind the Service is then reached through a port-forward of
//! the API server (a local listener whose every connection is a new
//! port-forward stream), and the TLS server name stays the Service's, as
//! `cnpgi-operator run --dial-override` does.

use std::{sync::Arc, time::Duration};

use cnpgi_client::{
    client::{ClientOptions, PluginClient, TlsTransport, Transport},
    probe::{self, PluginInfo, ProbeError},
};
use cnpgi_tls::{
    client::{ConnectError, TlsConnectorService, client_config, server_name},
    verify::PinnedServerVerifier,
};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use rustls::AlertDescription;
use tokio::{
    io::{AsyncReadExt as _, AsyncWriteExt as _},
    net::TcpListener,
    task::JoinHandle,
};

/// A local address forwarding every connection to a Pod's port.
#[derive(Debug)]
pub(crate) struct Forward {
    /// `127.0.0.1:<port>`.
    pub(crate) address: String,
    task: JoinHandle<()>,
}

impl Drop for Forward {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Listens on loopback; each accepted connection becomes a port-forward
/// stream to `pod`'s `port` (kube's WebSocket port-forward), copied both ways.
pub(crate) async fn forward(pods: Api<Pod>, pod: &str, port: u16) -> std::io::Result<Forward> {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
    let address = listener.local_addr()?.to_string();
    let pod = pod.to_owned();
    let task = tokio::spawn(async move {
        while let Ok((mut local, _)) = listener.accept().await {
            let pods = pods.clone();
            let pod = pod.clone();
            tokio::spawn(async move {
                let mut forwarder = match pods.portforward(&pod, &[port]).await {
                    Ok(forwarder) => forwarder,
                    Err(error) => {
                        tracing::debug!(%error, pod, "port-forward failed");
                        return;
                    }
                };
                let Some(mut remote) = forwarder.take_stream(port) else {
                    return;
                };
                let _ = tokio::io::copy_bidirectional(&mut local, &mut remote).await;
                drop(remote);
                let _ = forwarder.join().await;
            });
        }
    });
    Ok(Forward { address, task })
}

/// What dialling one endpoint showed.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Probed: what the plugin said about itself.
    Probed(Box<PluginInfo>),
    /// Failed at a step: what went wrong, and who refused.
    Failed(Failure),
}

/// Why the dial failed, by the side at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Nothing accepted the TCP connection (or the port-forward).
    Connect(String),
    /// The operator's side refused the plugin's certificate.
    ServerCertificate(String),
    /// The plugin refused the operator's certificate (an alert after the handshake).
    ClientCertificate(String),
    /// TLS failed otherwise (protocol version, ALPN).
    Tls(String),
    /// The plugin answers to another name than its Service's label.
    Name {
        /// The name in its metadata.
        actual: String,
    },
    /// A call of the probing sequence failed.
    Probe(String),
    /// `Identity/Probe` answered not ready.
    NotReady,
    /// No answer within the deadline.
    Timeout(&'static str),
}

/// Dials `transport` (its address possibly a port-forward) as the plugin
/// `plugin`, every step within `timeout`.
pub(crate) async fn dial(plugin: &str, transport: TlsTransport, timeout: Duration) -> Outcome {
    if let Err(failure) = handshake(&transport, timeout).await {
        return Outcome::Failed(failure);
    }
    let options = ClientOptions {
        call_timeout: timeout,
        connect_timeout: timeout,
        ..ClientOptions::default()
    };
    let client = match PluginClient::new(plugin, Transport::Tls(transport), &options) {
        Ok(client) => client,
        Err(error) => return Outcome::Failed(Failure::Tls(error.to_string())),
    };
    // Each call has the client's deadline; this bounds the whole sequence.
    let sequence = async {
        let info = probe::probe(&client).await?;
        let ready = probe::is_ready(&client).await?;
        Ok::<_, ProbeError>((info, ready))
    };
    match tokio::time::timeout(timeout.saturating_mul(12), sequence).await {
        Err(_) => Outcome::Failed(Failure::Timeout("the probing sequence")),
        Ok(Err(ProbeError::NameMismatch { actual, .. })) => Outcome::Failed(Failure::Name { actual }),
        Ok(Err(error)) => Outcome::Failed(Failure::Probe(error.to_string())),
        Ok(Ok((_, false))) => Outcome::Failed(Failure::NotReady),
        Ok(Ok((info, true))) => Outcome::Probed(Box::new(info)),
    }
}

/// A TLS handshake as `PluginClient` makes it, then the HTTP/2 preface:
/// in TLS 1.3 the server judges the client's certificate after the client
/// has finished, so its refusal is an alert on the first read.
async fn handshake(transport: &TlsTransport, timeout: Duration) -> Result<(), Failure> {
    use tower_service::Service as _;
    let verifier = PinnedServerVerifier::new(transport.server_cert.clone()).map_err(|e| Failure::Tls(e.to_string()))?;
    let config = client_config(
        transport.client_cert.clone(),
        transport.client_key.clone_key(),
        verifier,
    )
    .map_err(|e| Failure::Tls(e.to_string()))?;
    let name = server_name(&transport.server_name).map_err(|e| Failure::Tls(e.to_string()))?;
    let mut connector = TlsConnectorService::new(Arc::new(config), name);
    let uri: http::Uri = format!("http://{}", transport.address)
        .parse()
        .map_err(|e: http::uri::InvalidUri| Failure::Connect(e.to_string()))?;
    let io = match tokio::time::timeout(timeout, connector.call(uri)).await {
        Err(_) => return Err(Failure::Timeout("the TLS handshake")),
        Ok(Err(ConnectError::Tcp { address, source })) => {
            return Err(Failure::Connect(format!("cannot connect to {address}: {source}")));
        }
        Ok(Err(ConnectError::Handshake { source, .. })) => return Err(classify(&source, false)),
        Ok(Err(other)) => return Err(Failure::Connect(other.to_string())),
        Ok(Ok(io)) => io,
    };
    let mut tls = io.into_inner();
    let (_, session) = tls.get_ref();
    if session.alpn_protocol() != Some(cnpgi_tls::ALPN_H2) {
        return Err(Failure::Tls(format!(
            "the plugin did not agree to ALPN h2 (it chose {:?}): gRPC clients (grpc-go) refuse it",
            session.alpn_protocol().map(String::from_utf8_lossy)
        )));
    }
    // The client preface and an empty SETTINGS frame; the server answers
    // with its SETTINGS, or with an alert refusing our certificate.
    let mut preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    preface.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let exchange = async {
        tls.write_all(&preface).await?;
        tls.flush().await?;
        let mut buffer = [0u8; 9];
        tls.read_exact(&mut buffer).await.map(|_| ())
    };
    match tokio::time::timeout(timeout, exchange).await {
        Err(_) => Err(Failure::Timeout("the plugin's first HTTP/2 frame")),
        Ok(Err(error)) => Err(classify(&error, true)),
        Ok(Ok(())) => Ok(()),
    }
}

/// Who refused what, from a handshake or first-read error.
fn classify(error: &std::io::Error, after_handshake: bool) -> Failure {
    let Some(tls) = error.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()) else {
        return if after_handshake {
            Failure::ClientCertificate(format!(
                "the plugin closed the connection after the handshake ({error}): it did not accept the client certificate"
            ))
        } else {
            Failure::Connect(error.to_string())
        };
    };
    match tls {
        rustls::Error::InvalidCertificate(reason) => {
            Failure::ServerCertificate(format!("the operator refuses the plugin's certificate: {reason:?}"))
        }
        rustls::Error::AlertReceived(
            alert @ (AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateRequired
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::AccessDenied
            | AlertDescription::DecryptError),
        ) => Failure::ClientCertificate(format!(
            "the plugin refused the client certificate (TLS alert {alert:?})"
        )),
        rustls::Error::AlertReceived(alert @ AlertDescription::NoApplicationProtocol) => {
            Failure::Tls(format!("the plugin refused ALPN h2 (TLS alert {alert:?})"))
        }
        rustls::Error::AlertReceived(alert @ AlertDescription::ProtocolVersion) => Failure::Tls(format!(
            "the plugin does not speak TLS 1.3 (TLS alert {alert:?}); both operators offer TLS 1.3 only"
        )),
        other => Failure::Tls(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alerts_are_told_apart() {
        let io = |e: rustls::Error| std::io::Error::new(std::io::ErrorKind::InvalidData, e);
        assert!(matches!(
            classify(&io(rustls::Error::AlertReceived(AlertDescription::UnknownCA)), true),
            Failure::ClientCertificate(_)
        ));
        assert!(matches!(
            classify(
                &io(rustls::Error::InvalidCertificate(
                    rustls::CertificateError::NotValidForName
                )),
                false
            ),
            Failure::ServerCertificate(_)
        ));
        assert!(matches!(
            classify(
                &io(rustls::Error::AlertReceived(AlertDescription::ProtocolVersion)),
                false
            ),
            Failure::Tls(_)
        ));
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(matches!(classify(&reset, false), Failure::Connect(_)));
        assert!(matches!(classify(&reset, true), Failure::ClientCertificate(_)));
    }
}
