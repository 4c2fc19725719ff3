//! Plugins that register themselves and send heartbeats.
//!
//! [`Registration`] serves the small gRPC service `cnpgi.registration.v1`
//! (`proto/registration/v1/registration.proto`, this project's own package,
//! not CNPG-I's) over mutual TLS 1.3. A plugin calls `Register` with its name
//! and the `host:port` where the host should dial it, then `Heartbeat`
//! before its lease runs out; the SDK's `plugin` command does both with
//! `--register-with` (`CNPGI_REGISTER_WITH`).
//!
//! * **Who may register.** The client certificate must be trusted by
//!   [`RegistrationOptions::server_tls`]'s `client_ca` (a pinned certificate
//!   or a CA, as everywhere in CNPG-I), and must *name the plugin it
//!   registers*: a DNS subject alternative name equal to the plugin name, or
//!   a URI SAN whose host is the plugin name (`cnpgi://hello.example.com`).
//!   Anything else is refused (`PERMISSION_DENIED`, naming the names found):
//!   a plugin holding a trusted certificate for `a.example.com` cannot
//!   register, or heartbeat for, `b.example.com`.
//! * **How it is dialled.** With the host's usual client TLS
//!   ([`PluginTlsFiles`]: the client certificate the host presents, the
//!   plugin server certificates it trusts), verifying the server name the
//!   plugin registered (the host of its address by default). Then it is a
//!   plugin like any other: probed (metadata name checked), asked `Probe`,
//!   routable only when ready ([`crate::registry`]).
//! * **Expiry.** A lease lasts [`RegistrationOptions::ttl`] (30 s by
//!   default) from the last heartbeat; plugins are asked to beat every third
//!   of it. A plugin silent for the TTL is forgotten
//!   ([`Registry::forget`]): routing to it fails with "plugin X was
//!   forgotten: registered at A, it stopped heart-beating at T", which is
//!   what the status of the resources it served says, until it registers
//!   again.
//! * **Restarts.** Leases live in memory. After the host restarts, a
//!   plugin's next heartbeat answers `NOT_FOUND` and the plugin registers
//!   again; the source's first pass ([`Registry::ready`]) is done one
//!   heartbeat interval after it starts listening, so that plugins that were
//!   registered before are back before the host routes.
//!
//! ```no_run
//! # async fn example() -> Result<(), cnpgi_host::discovery::registration::RegistrationError> {
//! use cnpgi_host::discovery::registration::{PluginTlsFiles, Registration, RegistrationOptions, ServerTlsFiles};
//!
//! let registry = std::sync::Arc::new(cnpgi_host::registry::Registry::default());
//! let source = Registration::bind(RegistrationOptions::new(
//!     "0.0.0.0:9443".parse().expect("an address"),
//!     ServerTlsFiles {
//!         cert: "/certs/registration/tls.crt".into(),
//!         key: "/certs/registration/tls.key".into(),
//!         client_ca: Some("/certs/plugins-ca/ca.crt".into()),
//!     },
//!     PluginTlsFiles {
//!         client_cert: "/certs/client/tls.crt".into(),
//!         client_key: "/certs/client/tls.key".into(),
//!         server_ca: "/certs/plugins-ca/ca.crt".into(),
//!     },
//! ))
//! .await?;
//! cnpgi_host::discovery::spawn(Box::new(source), registry);
//! # Ok(()) }
//! ```

use std::{
    collections::HashMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, Instant},
};

use cnpgi_client::client::{ClientOptions, PluginClient, TlsTransport, Transport};
use cnpgi_proto::registration::v1::{
    HeartbeatRequest, HeartbeatResponse, RegisterRequest, RegisterResponse,
    registration_server::{self, RegistrationServer},
};
/// The registration endpoint's certificate, key and client CA
/// ([`RegistrationOptions::server_tls`]), re-exported from `cnpgi-tls`.
pub use cnpgi_tls::server::ServerTlsFiles;
use cnpgi_tls::{pem, server::ReloadingServerConfig};
use k8s_openapi::jiff::Timestamp;
use rustls::pki_types::CertificateDer;
use tokio::net::{TcpListener, TcpStream};
use tonic::{Request, Response, Status, transport::server::Connected};

use super::{DiscoveryFuture, DiscoverySource};
use crate::registry::Registry;

/// The credentials the host dials registered plugins with: its usual
/// client TLS, as for plugins found through Services.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginTlsFiles {
    /// PEM certificate the host presents to plugins.
    pub client_cert: PathBuf,
    /// Its PEM key.
    pub client_key: PathBuf,
    /// PEM certificate(s) plugin server certificates must be, or chain to.
    pub server_ca: PathBuf,
}

/// How the registration service is served and its leases kept.
#[derive(Debug, Clone)]
pub struct RegistrationOptions {
    /// Where to listen, e.g. `0.0.0.0:9443` (port 0: any free port, see
    /// [`Registration::local_addr`]).
    pub listen: SocketAddr,
    /// The service's certificate and key, and the certificates plugin
    /// client certificates must be or chain to (`client_ca`: required, a
    /// registration without a client certificate is never accepted).
    pub server_tls: ServerTlsFiles,
    /// How registered plugins are dialled.
    pub plugin_tls: PluginTlsFiles,
    /// How long a lease lasts without a heartbeat. Default 30 s; plugins are
    /// asked to beat every third of it, so one lost heartbeat is not fatal.
    pub ttl: Duration,
    /// How long a connecting client has for its TLS handshake. Default 10 s.
    pub handshake_timeout: Duration,
    /// The clients of registered plugins (deadlines, observer): give
    /// [`crate::Host::client_options`].
    pub client: ClientOptions,
}

impl RegistrationOptions {
    /// Options with the default TTL (30 s) and client options.
    pub fn new(listen: SocketAddr, server_tls: ServerTlsFiles, plugin_tls: PluginTlsFiles) -> Self {
        Self {
            listen,
            server_tls,
            plugin_tls,
            ttl: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            client: ClientOptions::default(),
        }
    }

    /// How often plugins are asked to beat: a third of the TTL, at least 1 s.
    pub fn heartbeat_interval(&self) -> Duration {
        (self.ttl / 3).max(Duration::from_secs(1))
    }
}

/// Why the registration service cannot start.
#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    /// Without a client CA anyone could register.
    #[error(
        "the registration service needs a client CA (server_tls.client_ca): only plugins with a trusted client certificate may register"
    )]
    NoClientCa,
    /// A certificate or key file is unusable.
    #[error("registration service TLS: {0}")]
    Tls(#[from] cnpgi_tls::TlsError),
    /// The address cannot be listened on.
    #[error("cannot listen for plugin registrations on {address}: {source}")]
    Listen {
        /// The address.
        address: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
}

/// A discovery source for plugins that register themselves: bind it with
/// [`Registration::bind`], then start it like any source
/// ([`crate::Host::discover`]). See the [module](self) for the rules.
#[derive(Debug)]
pub struct Registration {
    listener: TcpListener,
    tls: Arc<ReloadingServerConfig>,
    options: RegistrationOptions,
}

impl Registration {
    /// Checks the credentials and listens on [`RegistrationOptions::listen`].
    pub async fn bind(options: RegistrationOptions) -> Result<Self, RegistrationError> {
        if options.server_tls.client_ca.is_none() {
            return Err(RegistrationError::NoClientCa);
        }
        let tls = ReloadingServerConfig::new(options.server_tls.clone())?;
        // Read once now so that a wrong path fails at start, not at the first registration.
        read_plugin_tls(&options.plugin_tls)?;
        let listener = TcpListener::bind(options.listen)
            .await
            .map_err(|source| RegistrationError::Listen {
                address: options.listen,
                source,
            })?;
        Ok(Self { listener, tls, options })
    }

    /// The address listened on (the port chosen when 0 was asked).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr().unwrap_or(self.options.listen)
    }
}

/// One plugin's lease.
#[derive(Debug, Clone)]
struct Lease {
    id: String,
    address: String,
    last_heartbeat: Instant,
    last_heartbeat_at: Timestamp,
}

/// What the gRPC service and the expiry loop share.
#[derive(Debug)]
struct Leases {
    source: String,
    registry: Arc<Registry>,
    options: RegistrationOptions,
    leases: Mutex<HashMap<String, Lease>>,
    next_id: std::sync::atomic::AtomicU64,
    /// Tells leases of this run from those of a previous one (a restarted host).
    run: u64,
}

impl DiscoverySource for Registration {
    fn name(&self) -> String {
        format!("registration:{}", self.local_addr())
    }

    fn run(self: Box<Self>, registry: Arc<Registry>) -> DiscoveryFuture {
        Box::pin(async move {
            let source = self.name();
            let interval = self.options.heartbeat_interval();
            let leases = Arc::new(Leases {
                source: source.clone(),
                registry: registry.clone(),
                options: self.options.clone(),
                leases: Mutex::default(),
                next_id: std::sync::atomic::AtomicU64::new(1),
                run: Timestamp::now().as_nanosecond().unsigned_abs() as u64,
            });
            tracing::info!(%source, ttl_s = self.options.ttl.as_secs(), "serving plugin registrations");
            let first_pass = {
                let registry = registry.clone();
                let source = source.clone();
                async move {
                    // Plugins registered with a previous run of the host find
                    // out on their next heartbeat and register again.
                    tokio::time::sleep(interval).await;
                    registry.first_pass_done(&source);
                    std::future::pending::<()>().await;
                }
            };
            let expiry = expire(leases.clone());
            let incoming = tls_incoming(self.listener, self.tls, self.options.handshake_timeout);
            // The server runs in a task of its own, shut down gracefully
            // when this source is stopped (its future dropped, `_stop` with
            // it): dropping a tonic server future would leave its open
            // connections served, and a plugin heart-beating on one would
            // keep a lease that nobody keeps any more.
            let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let serve = tokio::spawn(
                tonic::transport::Server::builder()
                    .timeout(Duration::from_secs(60))
                    .add_service(RegistrationServer::new(Service(leases)))
                    .serve_with_incoming_shutdown(incoming, async {
                        let _ = stopped.await;
                    }),
            );
            tokio::select! {
                result = serve => {
                    let error = match result {
                        Ok(Ok(())) => return,
                        Ok(Err(error)) => error.to_string(),
                        Err(error) => error.to_string(),
                    };
                    tracing::error!(%source, %error, "the registration service stopped");
                    registry.options().metrics.discovery_error(&source);
                }
                () = expiry => {}
                () = first_pass => {}
            }
        })
    }
}

/// Forgets plugins whose lease ran out, checking a few times per TTL.
async fn expire(leases: Arc<Leases>) {
    let ttl = leases.options.ttl;
    let mut tick = tokio::time::interval((ttl / 4).clamp(Duration::from_millis(100), Duration::from_secs(5)));
    loop {
        tick.tick().await;
        let expired: Vec<(String, Lease)> = {
            let mut map = leases.leases.lock().unwrap_or_else(PoisonError::into_inner);
            let names: Vec<String> = map
                .iter()
                .filter(|(_, lease)| lease.last_heartbeat.elapsed() >= ttl)
                .map(|(name, _)| name.clone())
                .collect();
            names
                .into_iter()
                .filter_map(|name| map.remove(&name).map(|lease| (name, lease)))
                .collect()
        };
        for (name, lease) in expired {
            let reason = format!(
                "registered at {} by {}, it stopped heart-beating at {} (no heartbeat for {} s, the lease's TTL); \
                 check that the plugin runs and reaches the operator's registration endpoint, it is routable again \
                 once it registers again",
                lease.address,
                leases.source,
                lease.last_heartbeat_at,
                ttl.as_secs()
            );
            tracing::warn!(plugin = %name, address = %lease.address, last_heartbeat = %lease.last_heartbeat_at, "plugin stopped heart-beating: forgotten");
            leases.registry.forget(&name, &leases.source, reason);
        }
    }
}

/// The gRPC service.
struct Service(Arc<Leases>);

#[tonic::async_trait]
impl registration_server::Registration for Service {
    async fn register(&self, request: Request<RegisterRequest>) -> Result<Response<RegisterResponse>, Status> {
        let leases = &self.0;
        let names = peer_names(&request)?;
        let request = request.into_inner();
        cnpgi_core::names::validate_plugin_name(&request.name)
            .map_err(|reason| Status::invalid_argument(format!("RegisterRequest.name: {reason}")))?;
        authorize(&request.name, &names)?;
        let server_name = dial_name(&request.address, &request.server_name)?;
        let (client_cert, client_key, server_cert) = read_plugin_tls(&leases.options.plugin_tls).map_err(|error| {
            tracing::error!(%error, "cannot read the credentials to dial registered plugins");
            Status::unavailable(format!(
                "the operator cannot read its plugin client credentials: {error}"
            ))
        })?;
        let transport = Transport::Tls(TlsTransport {
            address: request.address.clone(),
            server_name,
            client_cert,
            client_key,
            server_cert,
        });
        let client = PluginClient::new(&request.name, transport, &leases.options.client)
            .map_err(|error| Status::invalid_argument(format!("RegisterRequest.address: {error}")))?;
        // Same name, same address: only the lease is renewed, the registry's
        // connection (and what it probed) stays.
        let unchanged = {
            let map = leases.leases.lock().unwrap_or_else(PoisonError::into_inner);
            map.get(&request.name)
                .is_some_and(|lease| lease.address == request.address)
                && leases
                    .registry
                    .plugin(&request.name)
                    .is_some_and(|plugin| plugin.source() == leases.source)
        };
        if !unchanged {
            leases.registry.add(&leases.source, client).await.map_err(|error| {
                Status::already_exists(format!(
                    "{error}: rename one of the plugins, or remove the other source's"
                ))
            })?;
        }
        let id = format!(
            "{:x}-{}",
            leases.run,
            leases.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        leases.leases.lock().unwrap_or_else(PoisonError::into_inner).insert(
            request.name.clone(),
            Lease {
                id: id.clone(),
                address: request.address.clone(),
                last_heartbeat: Instant::now(),
                last_heartbeat_at: Timestamp::now(),
            },
        );
        tracing::info!(plugin = %request.name, version = %request.version, address = %request.address, "plugin registered");
        Ok(Response::new(RegisterResponse {
            lease_id: id,
            ttl_seconds: seconds(leases.options.ttl),
            heartbeat_interval_seconds: seconds(leases.options.heartbeat_interval()),
        }))
    }

    async fn heartbeat(&self, request: Request<HeartbeatRequest>) -> Result<Response<HeartbeatResponse>, Status> {
        let leases = &self.0;
        let names = peer_names(&request)?;
        let request = request.into_inner();
        authorize(&request.name, &names)?;
        let mut map = leases.leases.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get_mut(&request.name) {
            Some(lease) if lease.id == request.lease_id => {
                lease.last_heartbeat = Instant::now();
                lease.last_heartbeat_at = Timestamp::now();
                Ok(Response::new(HeartbeatResponse {
                    ttl_seconds: seconds(leases.options.ttl),
                }))
            }
            _ => Err(Status::not_found(format!(
                "plugin {} has no lease {:?} here (the operator restarted, the plugin registered again elsewhere, or it was forgotten after {} s without heartbeat): register again",
                request.name,
                request.lease_id,
                leases.options.ttl.as_secs()
            ))),
        }
    }
}

fn seconds(duration: Duration) -> u32 {
    u32::try_from(duration.as_secs()).unwrap_or(u32::MAX)
}

fn read_plugin_tls(
    files: &PluginTlsFiles,
) -> Result<
    (
        Vec<CertificateDer<'static>>,
        rustls::pki_types::PrivateKeyDer<'static>,
        Vec<CertificateDer<'static>>,
    ),
    cnpgi_tls::TlsError,
> {
    Ok((
        pem::read_certificates(&files.client_cert, "plugin client certificate")?,
        pem::read_private_key(&files.client_key, "plugin client key")?,
        pem::read_certificates(&files.server_ca, "plugin server CA")?,
    ))
}

/// The name to verify in the plugin's server certificate: the one given, or
/// the host of `address`.
fn dial_name(address: &str, server_name: &str) -> Result<String, Status> {
    let invalid = |why: &str| {
        Status::invalid_argument(format!(
            "RegisterRequest.address {address:?}: {why}; give the host:port the operator dials (e.g. plugin.ns.svc:9090)"
        ))
    };
    let (host, port) = address.rsplit_once(':').ok_or_else(|| invalid("expected host:port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if port.parse::<u16>().map_or(true, |port| port == 0) {
        return Err(invalid("the port is not a number from 1 to 65535"));
    }
    if host.is_empty() || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_unspecified()) {
        return Err(invalid("the host is missing or unspecified (0.0.0.0)"));
    }
    Ok(if server_name.is_empty() {
        host.to_owned()
    } else {
        server_name.to_owned()
    })
}

/// The DNS and URI names of the client certificate of `request`.
fn peer_names<T>(request: &Request<T>) -> Result<Vec<PeerName>, Status> {
    match request.extensions().get::<PeerInfo>() {
        Some(PeerInfo(Ok(names))) => Ok(names.to_vec()),
        Some(PeerInfo(Err(reason))) => Err(Status::unauthenticated(reason.to_string())),
        None => Err(Status::unauthenticated(
            "no client certificate: register over mutual TLS",
        )),
    }
}

/// The names of a connection's client certificate, read once at the
/// handshake, as tonic hands them to every request of the connection (its
/// own `peer_certs` needs a tonic TLS feature this crate does not enable).
#[derive(Debug, Clone)]
struct PeerInfo(Result<Arc<[PeerName]>, Arc<str>>);

/// A TLS connection with its client certificate's names.
struct PeerStream {
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    peer: PeerInfo,
}

impl PeerStream {
    fn new(tls: tokio_rustls::server::TlsStream<TcpStream>) -> Self {
        let names = match tls.get_ref().1.peer_certificates().and_then(<[_]>::first) {
            Some(leaf) => certificate_names(leaf)
                .map(Arc::from)
                .map_err(|reason| Arc::from(format!("the client certificate cannot be read: {reason}"))),
            None => Err(Arc::from("no client certificate: register over mutual TLS")),
        };
        Self {
            tls,
            peer: PeerInfo(names),
        }
    }
}

impl Connected for PeerStream {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.peer.clone()
    }
}

impl tokio::io::AsyncRead for PeerStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tls).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for PeerStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.tls).poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

/// A subject alternative name that may name a plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PeerName {
    Dns(String),
    Uri(String),
}

impl std::fmt::Display for PeerName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dns(name) => write!(f, "DNS:{name}"),
            Self::Uri(uri) => write!(f, "URI:{uri}"),
        }
    }
}

impl PeerName {
    /// A DNS name equal to the plugin name, or a URI whose host is.
    fn names(&self, plugin: &str) -> bool {
        match self {
            Self::Dns(name) => name.eq_ignore_ascii_case(plugin),
            Self::Uri(uri) => uri
                .parse::<http::Uri>()
                .ok()
                .and_then(|uri| uri.host().map(|host| host.eq_ignore_ascii_case(plugin)))
                .unwrap_or(false),
        }
    }
}

fn certificate_names(cert: &CertificateDer<'_>) -> Result<Vec<PeerName>, String> {
    use x509_parser::{extensions::GeneralName, prelude::FromDer};
    let (_, parsed) = x509_parser::certificate::X509Certificate::from_der(cert).map_err(|e| e.to_string())?;
    let mut names = Vec::new();
    if let Ok(Some(san)) = parsed.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(dns) => names.push(PeerName::Dns((*dns).to_owned())),
                GeneralName::URI(uri) => names.push(PeerName::Uri((*uri).to_owned())),
                _ => {}
            }
        }
    }
    Ok(names)
}

/// Refuses a certificate that does not name `plugin`.
fn authorize(plugin: &str, names: &[PeerName]) -> Result<(), Status> {
    if names.iter().any(|name| name.names(plugin)) {
        return Ok(());
    }
    let found = if names.is_empty() {
        "none".to_owned()
    } else {
        names.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    };
    Err(Status::permission_denied(format!(
        "the client certificate does not name plugin {plugin} (its DNS and URI names: {found}); \
         a plugin registers with a certificate whose DNS name is the plugin name, or whose URI's host is"
    )))
}

/// Accepts TCP connections and runs each TLS handshake in its own task, so
/// that a slow client does not hold up the others.
fn tls_incoming(
    listener: TcpListener,
    tls: Arc<ReloadingServerConfig>,
    handshake_timeout: Duration,
) -> impl futures_util::Stream<Item = Result<PeerStream, std::io::Error>> {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "cannot accept a registration connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = tx.closed() => break,
            };
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => {
                        let _ = tx.send(Ok(PeerStream::new(stream))).await;
                    }
                    Ok(Err(error)) => tracing::warn!(%peer, %error, "registration connection refused (TLS)"),
                    Err(_) => tracing::warn!(%peer, "registration connection: TLS handshake timed out"),
                }
            });
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|item| (item, rx)) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_names_a_plugin_by_dns_name_or_uri_host() {
        let dns = PeerName::Dns("Hello.Example.com".into());
        assert!(dns.names("hello.example.com"));
        assert!(!dns.names("other.example.com"));
        let uri = PeerName::Uri("cnpgi://hello.example.com".into());
        assert!(uri.names("hello.example.com"));
        assert!(!PeerName::Uri("spiffe://cluster.local/ns/x/sa/hello.example.com".into()).names("hello.example.com"));
        let refused = authorize("b.example.com", &[dns]).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(
            refused.message().contains("DNS:Hello.Example.com"),
            "{}",
            refused.message()
        );
        assert!(
            authorize("b.example.com", &[])
                .unwrap_err()
                .message()
                .contains("names: none")
        );
    }

    #[test]
    fn the_dialled_name_is_the_given_one_or_the_address_host() {
        assert_eq!(dial_name("plugin.ns.svc:9090", "").unwrap(), "plugin.ns.svc");
        assert_eq!(dial_name("[::1]:9090", "").unwrap(), "::1");
        assert_eq!(
            dial_name("10.0.0.1:9090", "plugin.example.com").unwrap(),
            "plugin.example.com"
        );
        for bad in ["plugin", "0.0.0.0:9090", ":9090", "plugin:0", "plugin:x"] {
            let error = dial_name(bad, "").unwrap_err();
            assert_eq!(error.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(
                error.message().contains("RegisterRequest.address"),
                "{}",
                error.message()
            );
        }
    }
}
