//! Serving a plugin: gRPC services, listeners, readiness and shutdown.
//!
//! [`PluginServer`] holds the plugin's Identity implementation and the other
//! services it registers; [`PluginListener`] is where it listens (TCP with
//! mutual TLS, or a Unix socket); [`PluginServer::serve`] runs until a
//! shutdown signal, then stops accepting, lets in-flight calls finish
//! (bounded by a grace period) and removes the socket file.

use std::{
    net::SocketAddr,
    panic::AssertUnwindSafe,
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use cnpgi_core::{
    ratelimit::{RateLimited, RateLimitedByKind},
    service::IDENTITY_NAME,
};
use cnpgi_proto::{
    FILE_DESCRIPTOR_SET,
    identity::v1::{GetPluginMetadataRequest, GetPluginMetadataResponse, ProbeRequest, identity_server},
};
use cnpgi_tls::server::{ReloadingServerConfig, ServerTlsFiles};
use futures_util::{FutureExt, TryStreamExt};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream, UnixListener, UnixStream},
    sync::{mpsc, watch},
};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{
    Request,
    server::NamedService,
    service::{Routes, RoutesBuilder},
    transport::{Server, server::Connected},
};
use tonic_health::{ServingStatus, server::HealthReporter};

use super::{authority::AuthorityRewrite, batched_writes::BatchedWrites};
use crate::middleware::CallLayer;

/// Why a plugin could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The plugin's own `GetPluginMetadata` failed.
    #[error("the plugin's Identity.GetPluginMetadata failed: {0}")]
    Metadata(tonic::Status),
    /// The plugin's metadata name breaks the CNPG-I naming rules.
    #[error("invalid plugin metadata: {0}")]
    InvalidName(String),
    /// The listen address could not be parsed or resolved.
    #[error("invalid server address {address:?}: {reason}")]
    Address {
        /// The address as given.
        address: String,
        /// Why it is not usable.
        reason: String,
    },
    /// Binding the TCP port or Unix socket failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// Where it tried to listen.
        address: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The TLS certificate files are not usable.
    #[error(transparent)]
    Tls(#[from] cnpgi_tls::TlsError),
    /// The reflection service could not be built.
    #[error("cannot build the gRPC reflection service: {0}")]
    Reflection(String),
    /// The gRPC server stopped with an error.
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    /// Registering with the operator (`--register-with`) cannot work.
    #[error(transparent)]
    Registration(#[from] crate::registration::RegistrationError),
}

/// Tunables of a [`PluginServer`]; the defaults suit production.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How often `Probe` is asked, to drive the gRPC health service. Default 10 s.
    pub probe_interval: Duration,
    /// How long in-flight calls may run after a shutdown signal. Default 25 s, inside
    /// the 30 s Kubernetes gives a Pod between SIGTERM and SIGKILL.
    pub shutdown_grace: Duration,
    /// How long a client has to complete the TLS handshake. Default 10 s.
    pub handshake_timeout: Duration,
    /// How long a client that completed the TLS handshake has to send the
    /// HTTP/2 connection preface; a connection that stays silent is closed.
    /// Default 10 s.
    pub preface_timeout: Duration,
    /// Concurrent calls (HTTP/2 streams) per connection, announced in
    /// `SETTINGS_MAX_CONCURRENT_STREAMS`; streams beyond are refused.
    /// Default 256.
    pub max_concurrent_streams: u32,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            probe_interval: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(25),
            handshake_timeout: Duration::from_secs(10),
            preface_timeout: Duration::from_secs(10),
            max_concurrent_streams: 256,
        }
    }
}

/// A tonic service a plugin serves: what tonic generates as `*Server<T>`
/// (a tower service of HTTP requests that never fails, named after its
/// gRPC service), for [`PluginServer::add_service`] and
/// [`crate::plugin::Plugin::add_service`].
pub trait GrpcService:
    tower_service::Service<
        http::Request<tonic::body::Body>,
        Response = http::Response<tonic::body::Body>,
        Error = std::convert::Infallible,
        Future: Send + 'static,
    > + NamedService
    + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> GrpcService for S where
    S: tower_service::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
            Future: Send + 'static,
        > + NamedService
        + Clone
        + Send
        + Sync
        + 'static
{
}

/// A CNPG-I plugin ready to be served: its Identity implementation plus the
/// services it registers (Operator, OperatorLifecycle, …).
///
/// The server also registers the standard gRPC health service (`SERVING`
/// once the plugin's `Probe` answers ready) and gRPC reflection for the
/// CNPG-I packages.
///
/// ```no_run
/// # use cnpgi_pluginhelper::transport::{PluginListener, PluginServer};
/// # async fn example<I: cnpgi_pluginhelper::proto::identity::v1::identity_server::Identity>(identity: I) -> Result<(), cnpgi_pluginhelper::transport::ServeError> {
/// let server = PluginServer::new(identity);
/// let name = server.metadata().await?.name;
/// let listener = PluginListener::bind_unix("/plugins".as_ref(), &name)?;
/// server.serve(listener, async { let _ = tokio::signal::ctrl_c().await; }).await
/// # }
/// ```
pub struct PluginServer<I> {
    identity: Arc<I>,
    routes: RoutesBuilder,
    options: ServeOptions,
}

impl<I> std::fmt::Debug for PluginServer<I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginServer")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<I: identity_server::Identity> PluginServer<I> {
    /// A server for the plugin with this Identity implementation.
    pub fn new(identity: I) -> Self {
        Self {
            identity: Arc::new(identity),
            routes: RoutesBuilder::default(),
            options: ServeOptions::default(),
        }
    }

    /// Registers more services; `register` receives tonic's route builder.
    pub fn register(mut self, register: impl FnOnce(&mut RoutesBuilder)) -> Self {
        register(&mut self.routes);
        self
    }

    /// Registers one more service.
    pub fn add_service<S: GrpcService>(mut self, service: S) -> Self {
        self.routes.add_service(service);
        self
    }

    /// Replaces the tunables.
    pub fn with_options(mut self, options: ServeOptions) -> Self {
        self.options = options;
        self
    }

    /// Asks the plugin's own Identity for its metadata and checks its name.
    pub async fn metadata(&self) -> Result<GetPluginMetadataResponse, ServeError> {
        let metadata = self
            .identity
            .get_plugin_metadata(Request::new(GetPluginMetadataRequest {}))
            .await
            .map_err(ServeError::Metadata)?
            .into_inner();
        cnpgi_core::names::validate_plugin_name(&metadata.name).map_err(ServeError::InvalidName)?;
        Ok(metadata)
    }

    /// Serves on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: PluginListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServeError> {
        let (health_reporter, health_service) = tonic_health::server::health_reporter();
        let mut routes = self.routes;
        routes
            .add_service(identity_server::IdentityServer::from_arc(self.identity.clone()))
            .add_service(health_service);
        add_reflection(&mut routes)?;
        let routes: Routes = routes.routes();

        let readiness = tokio::spawn(report_readiness(
            self.identity.clone(),
            health_reporter,
            self.options.probe_interval,
        ));
        let grace = self.options.shutdown_grace;
        let (signal, grace_elapsed) = graceful_shutdown(shutdown, grace);

        let mut server = Server::builder()
            .http2_keepalive_interval(Some(Duration::from_secs(30)))
            .http2_keepalive_timeout(Some(Duration::from_secs(10)))
            .max_concurrent_streams(Some(self.options.max_concurrent_streams))
            .layer(CallLayer);

        let result = match listener {
            PluginListener::Tcp { listener, tls, .. } => {
                let incoming = tls_incoming(
                    listener,
                    tls,
                    self.options.handshake_timeout,
                    self.options.preface_timeout,
                );
                tokio::select! {
                    result = server.add_routes(routes).serve_with_incoming_shutdown(incoming, signal) => result,
                    () = grace_elapsed => {
                        tracing::warn!(?grace, "calls still running after the shutdown grace period; stopping anyway");
                        Ok(())
                    }
                }
            }
            PluginListener::Unix { listener, socket } => {
                // Every client, whatever `:authority` it sends over the socket.
                let incoming = unix_incoming(listener, self.options.preface_timeout).map_ok(AuthorityRewrite::new);
                let result = tokio::select! {
                    result = server.add_routes(routes).serve_with_incoming_shutdown(incoming, signal) => result,
                    () = grace_elapsed => {
                        tracing::warn!(?grace, "calls still running after the shutdown grace period; stopping anyway");
                        Ok(())
                    }
                };
                drop(socket);
                result
            }
        };
        readiness.abort();
        result?;
        tracing::info!("plugin stopped");
        Ok(())
    }
}

/// Adds gRPC reflection (v1 and v1alpha) over the CNPG-I descriptors, for
/// `grpcurl` and the like.
fn add_reflection(routes: &mut RoutesBuilder) -> Result<(), ServeError> {
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .build_v1alpha()
        .map_err(|e| ServeError::Reflection(e.to_string()))?;
    routes.add_service(reflection_v1).add_service(reflection_v1alpha);
    Ok(())
}

/// The server's shutdown signal (`shutdown`, logged), and what completes
/// `grace` after it: in-flight calls are waited for that long, no longer.
fn graceful_shutdown(
    shutdown: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> (impl Future<Output = ()> + Send + 'static, impl Future<Output = ()>) {
    let (fired_tx, mut fired_rx) = watch::channel(false);
    let signal = async move {
        shutdown.await;
        tracing::info!("shutting down: refusing new connections, finishing in-flight calls");
        let _ = fired_tx.send(true);
    };
    let grace_elapsed = async move {
        if fired_rx.wait_for(|fired| *fired).await.is_ok() {
            tokio::time::sleep(grace).await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    (signal, grace_elapsed)
}

/// Where a plugin listens.
#[derive(Debug)]
pub enum PluginListener {
    /// TCP with mutual TLS (remote plugins, behind a Kubernetes Service).
    Tcp {
        /// The bound listener.
        listener: TcpListener,
        /// The TLS configuration, re-read when its files change.
        tls: Arc<ReloadingServerConfig>,
        /// The bound address.
        address: SocketAddr,
    },
    /// A Unix socket, without TLS (sidecar plugins).
    Unix {
        /// The bound listener.
        listener: UnixListener,
        /// Removes the socket file when dropped.
        socket: SocketFile,
    },
}

impl PluginListener {
    /// Binds `address` (`host:port`, `:port` or `0:port` for every interface)
    /// and loads the TLS files, failing early if they are not usable.
    pub async fn bind_tcp(address: &str, tls: ServerTlsFiles) -> Result<Self, ServeError> {
        let tls = ReloadingServerConfig::new(tls)?;
        let addr = resolve_address(address).await?;
        let listener = TcpListener::bind(addr).await.map_err(|source| ServeError::Bind {
            address: addr.to_string(),
            source,
        })?;
        let address = listener.local_addr().map_err(|source| ServeError::Bind {
            address: addr.to_string(),
            source,
        })?;
        Ok(Self::Tcp { listener, tls, address })
    }

    /// Binds the socket `dir/<plugin name>`, replacing a stale socket file
    /// left by a previous run. `dir` must exist.
    pub fn bind_unix(dir: &Path, plugin_name: &str) -> Result<Self, ServeError> {
        let path = dir.join(plugin_name);
        let bind_error = |source| ServeError::Bind {
            address: format!("unix://{}", path.display()),
            source,
        };
        if !dir.is_dir() {
            return Err(bind_error(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("plugin directory {} does not exist", dir.display()),
            )));
        }
        remove_stale_socket(&path).map_err(bind_error)?;
        let listener = UnixListener::bind(&path).map_err(bind_error)?;
        Ok(Self::Unix {
            listener,
            socket: SocketFile(path),
        })
    }

    /// Where this listener accepts connections, as a URL-like string.
    pub fn address(&self) -> String {
        match self {
            Self::Tcp { address, .. } => address.to_string(),
            Self::Unix { socket, .. } => format!("unix://{}", socket.0.display()),
        }
    }
}

/// A Unix socket path, removed from disk when dropped.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl SocketFile {
    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_file(&self.0)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %self.0.display(), %error, "cannot remove the plugin socket");
        }
    }
}

fn remove_stale_socket(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    "another process is serving on this socket",
                ));
            }
            tracing::info!(path = %path.display(), "removing stale plugin socket");
            std::fs::remove_file(path)
        }
        Ok(_) => Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            "a file that is not a socket is in the way",
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Go-style listen addresses: an empty host or `0` means every interface.
async fn resolve_address(address: &str) -> Result<SocketAddr, ServeError> {
    let invalid = |reason: String| ServeError::Address {
        address: address.to_owned(),
        reason,
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| invalid("expected host:port or :port".into()))?;
    let port: u16 = port
        .parse()
        .map_err(|_| invalid(format!("port {port:?} is not a number from 0 to 65535")))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || host == "0" {
        return Ok(SocketAddr::from(([0, 0, 0, 0], port)));
    }
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| invalid(e.to_string()))?
        .next()
        .ok_or_else(|| invalid(format!("{host} resolves to no address")))
}

/// Refused connections are logged at most once per `LOG_INTERVAL` and kind,
/// with their count: a flood (a port scanner, a client with the wrong
/// certificate retrying in a loop) would otherwise write one line each.
const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// How many distinct handshake errors get their own [`LOG_INTERVAL`]; the
/// rest share one.
const REFUSAL_KINDS: usize = 32;

/// The rate limits of one listener's warnings about refused connections.
struct RefusalLog {
    /// Limited per error message: a flood of one kind (dials cancelled
    /// mid-handshake) must not hide the first refusal of another (a client
    /// certificate from an unknown issuer).
    handshake_refused: RateLimitedByKind,
    handshake_timed_out: RateLimited,
    no_preface: RateLimited,
}

impl RefusalLog {
    fn new() -> Arc<Self> {
        Arc::new(Self {
            handshake_refused: RateLimitedByKind::new(LOG_INTERVAL, REFUSAL_KINDS),
            handshake_timed_out: RateLimited::new(LOG_INTERVAL),
            no_preface: RateLimited::new(LOG_INTERVAL),
        })
    }
}

/// The client connection preface every HTTP/2 connection starts with (RFC 9113, 3.4).
const HTTP2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Accepts TCP connections and runs each TLS handshake, then the read of the
/// HTTP/2 preface, in its own task, so a slow or hostile client cannot hold
/// up the others, nor keep a connection it does not use. Ends when the
/// server drops the stream.
fn tls_incoming(
    listener: TcpListener,
    tls: Arc<ReloadingServerConfig>,
    handshake_timeout: Duration,
    preface_timeout: Duration,
) -> ReceiverStream<Result<Prefaced<BatchedWrites<TlsStream<TcpStream>>>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let log = RefusalLog::new();
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = tx.closed() => break,
            };
            let _ = tcp.set_nodelay(true);
            let acceptor = tls.acceptor();
            let tx = tx.clone();
            let log = log.clone();
            tokio::spawn(async move {
                let stream = match tokio::time::timeout(handshake_timeout, acceptor.accept(tcp)).await {
                    Ok(Ok(stream)) => stream,
                    Ok(Err(error)) => {
                        if let Some(count) = log.handshake_refused.hit(&error.to_string(), std::time::Instant::now()) {
                            tracing::warn!(%peer, %error, count, "TLS handshake refused ({count} like it in the last {LOG_INTERVAL:?}; this one shown)");
                        }
                        return;
                    }
                    Err(_) => {
                        if let Some(count) = log.handshake_timed_out.hit(std::time::Instant::now()) {
                            tracing::warn!(%peer, ?handshake_timeout, count, "TLS handshake timed out ({count} in the last {LOG_INTERVAL:?}; this one shown)");
                        }
                        return;
                    }
                };
                if let Some(stream) = read_preface(stream, preface_timeout, &peer, &log).await {
                    let _ = tx.send(Ok(stream)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Accepts Unix socket connections and reads each one's HTTP/2 preface in
/// its own task, closing connections that stay silent for `preface_timeout`.
/// Ends when the server drops the stream.
fn unix_incoming(
    listener: UnixListener,
    preface_timeout: Duration,
) -> ReceiverStream<Result<Prefaced<BatchedWrites<UnixStream>>, std::io::Error>> {
    let (tx, rx) = mpsc::channel(64);
    let log = RefusalLog::new();
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => stream,
                    Err(error) => {
                        tracing::warn!(%error, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
                () = tx.closed() => break,
            };
            let tx = tx.clone();
            let log = log.clone();
            tokio::spawn(async move {
                if let Some(stream) = read_preface(stream, preface_timeout, &"unix socket client", &log).await {
                    let _ = tx.send(Ok(stream)).await;
                }
            });
        }
    });
    ReceiverStream::new(rx)
}

/// Reads the HTTP/2 connection preface within `timeout`. A connection that
/// stays silent, breaks or sends something else is closed (`None`) and
/// logged (rate-limited by `log`).
async fn read_preface<S: AsyncRead + Unpin>(
    mut stream: S,
    timeout: Duration,
    peer: &(dyn std::fmt::Display + Sync),
    log: &RefusalLog,
) -> Option<Prefaced<BatchedWrites<S>>> {
    let mut preface = [0u8; HTTP2_PREFACE.len()];
    let outcome = tokio::time::timeout(timeout, stream.read_exact(&mut preface)).await;
    if matches!(outcome, Ok(Ok(_))) && &preface == HTTP2_PREFACE {
        return Some(Prefaced::new(preface, BatchedWrites::new(stream)));
    }
    // Closed either way; logged only when a line is due (counted otherwise).
    let count = log.no_preface.hit(std::time::Instant::now())?;
    match outcome {
        Ok(Ok(_)) => tracing::warn!(
            %peer,
            count,
            "not an HTTP/2 client (no connection preface); closing ({count} connections closed without a preface in the last {LOG_INTERVAL:?}; this one shown)"
        ),
        Ok(Err(error)) => tracing::warn!(
            %peer,
            %error,
            count,
            "connection lost before the HTTP/2 preface ({count} connections closed without a preface in the last {LOG_INTERVAL:?}; this one shown)"
        ),
        Err(_) => tracing::warn!(
            %peer,
            preface_timeout = ?timeout,
            count,
            "no HTTP/2 preface in time; closing the idle connection ({count} connections closed without a preface in the last {LOG_INTERVAL:?}; this one shown)"
        ),
    }
    None
}

/// A connection whose first bytes (the HTTP/2 preface) were already read:
/// they are handed out again before the rest.
#[derive(Debug)]
pub(crate) struct Prefaced<S> {
    preface: [u8; HTTP2_PREFACE.len()],
    consumed: usize,
    inner: S,
}

impl<S> Prefaced<S> {
    fn new(preface: [u8; HTTP2_PREFACE.len()], inner: S) -> Self {
        Self {
            preface,
            consumed: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefaced<S> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.consumed < this.preface.len() {
            let left = &this.preface[this.consumed..];
            let n = left.len().min(buf.remaining());
            buf.put_slice(&left[..n]);
            this.consumed += n;
            return std::task::Poll::Ready(Ok(()));
        }
        std::pin::Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefaced<S> {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The peer's address and certificates, as for the TLS stream itself.
impl<S: Connected> Connected for Prefaced<S> {
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Mirrors the plugin's `Probe` into the gRPC health service.
async fn report_readiness<I: identity_server::Identity>(
    identity: Arc<I>,
    reporter: HealthReporter,
    interval: Duration,
) {
    let mut last: Option<bool> = None;
    loop {
        let probe = AssertUnwindSafe(identity.probe(Request::new(ProbeRequest {}))).catch_unwind();
        let ready = match tokio::time::timeout(interval.max(Duration::from_secs(1)), probe).await {
            Ok(Ok(Ok(response))) => response.into_inner().ready,
            Ok(Ok(Err(status))) => {
                tracing::warn!(code = ?status.code(), message = status.message(), "Probe failed");
                false
            }
            Ok(Err(_panic)) => {
                tracing::error!("Probe panicked");
                false
            }
            Err(_) => {
                tracing::warn!("Probe timed out");
                false
            }
        };
        if last != Some(ready) {
            tracing::info!(ready, "plugin readiness changed");
            let status = if ready {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            for service in ["", IDENTITY_NAME] {
                reporter.set_service_status(service, status).await;
            }
            last = Some(ready);
        }
        tokio::time::sleep(interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn go_style_addresses() {
        assert_eq!(resolve_address(":9090").await.unwrap(), "0.0.0.0:9090".parse().unwrap());
        assert_eq!(
            resolve_address("0:9090").await.unwrap(),
            "0.0.0.0:9090".parse().unwrap()
        );
        assert_eq!(
            resolve_address("127.0.0.1:1").await.unwrap(),
            "127.0.0.1:1".parse().unwrap()
        );
        assert_eq!(resolve_address("[::1]:7").await.unwrap(), "[::1]:7".parse().unwrap());
        let err = resolve_address("9090").await.unwrap_err().to_string();
        assert!(err.contains("expected host:port"), "{err}");
        let err = resolve_address(":http").await.unwrap_err().to_string();
        assert!(err.contains("is not a number"), "{err}");
    }

    #[test]
    fn stale_socket_is_replaced_but_live_socket_and_regular_file_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plugin");
        let live = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let err = remove_stale_socket(&path).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
        drop(live);
        remove_stale_socket(&path).unwrap();
        assert!(!path.exists());
        std::fs::write(&path, b"data").unwrap();
        assert_eq!(
            remove_stale_socket(&path).unwrap_err().kind(),
            std::io::ErrorKind::AlreadyExists
        );
    }
}
