//! One long-lived gRPC channel per plugin.
//!
//! A [`PluginClient`] owns a tonic [`Channel`]: a single HTTP/2 connection,
//! multiplexing every concurrent call, re-established on demand after a
//! failure. Cloning the client clones a handle to the same connection, so
//! no caller ever waits for an exclusive lease or pays for a handshake. Every
//! call carries a deadline ([`ClientOptions::call_timeout`], 30 s by
//! default, as upstream), and connections are kept alive with HTTP/2 pings.
//!
//! The client counts the connections it opens ([`PluginClient::connections`]):
//! a new connection means the plugin may have been restarted or upgraded, so
//! what was learnt by probing it must be refreshed. Every call is reported to
//! a [`CallObserver`] (the operator's Prometheus metrics implement it).
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use cnpgi_client::client::{ClientOptions, PluginClient, Transport};
//! use cnpgi_proto::identity::v1::ProbeRequest;
//!
//! let client = PluginClient::new(
//!     "cnpg-i-hello-world.cloudnative-pg.io",
//!     Transport::Unix { path: "/plugins/cnpg-i-hello-world.cloudnative-pg.io".into() },
//!     &ClientOptions::default(),
//! )?; // nothing dialled yet
//! let ready = client.identity().probe(client.request(ProbeRequest {})).await?.into_inner().ready;
//! # let _ = ready; Ok(()) }
//! ```

use std::{
    fmt,
    future::Future,
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use cnpgi_core::for_each_service;
use cnpgi_proto::identity::v1::identity_client::IdentityClient;
use cnpgi_tls::{
    client::{TlsConnectorService, client_config, server_name},
    verify::PinnedServerVerifier,
};
use hyper_util::rt::TokioIo;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tonic::transport::{Channel, Endpoint};
use tracing::Instrument;

/// Told about every call a [`PluginClient`] makes: the operator counts and
/// times them (its Prometheus metrics implement this trait).
///
/// ```
/// use std::{sync::Arc, time::Duration};
///
/// use cnpgi_client::client::{CallObserver, ClientOptions};
///
/// #[derive(Debug)]
/// struct Log;
///
/// impl CallObserver for Log {
///     fn call_ended(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>) {
///         eprintln!("{plugin} {method} {elapsed:?} {code:?}");
///     }
/// }
///
/// let options = ClientOptions { observer: Arc::new(Log), ..ClientOptions::default() };
/// # let _ = options;
/// ```
pub trait CallObserver: fmt::Debug + Send + Sync + 'static {
    /// A call of `method` (`Service/Method`, e.g. `Operator/MutateCluster`)
    /// to `plugin` ended after `elapsed`; `code` is `None` when it succeeded.
    fn call_ended(&self, plugin: &str, method: &str, elapsed: Duration, code: Option<tonic::Code>);
}

/// Observes nothing: the default of [`ClientOptions::observer`].
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl CallObserver for NoObserver {
    fn call_ended(&self, _: &str, _: &str, _: Duration, _: Option<tonic::Code>) {}
}

/// How to reach a plugin.
#[derive(Debug)]
pub enum Transport {
    /// TCP with mutual TLS, as for a plugin behind a Kubernetes Service.
    Tls(TlsTransport),
    /// A Unix socket, without TLS, as for a sidecar plugin.
    Unix {
        /// Path of the socket, e.g. `/plugins/<plugin name>`.
        path: PathBuf,
    },
}

/// Where and how to reach a plugin over mutual TLS.
#[derive(Debug)]
pub struct TlsTransport {
    /// `host:port` to dial, e.g. `plugin.cnpg-system.svc:9090`.
    pub address: String,
    /// The name the server certificate must carry: `cnpg.io/pluginServerName`,
    /// or else the Service name.
    pub server_name: String,
    /// The certificate the operator presents (`tls.crt` of the client Secret).
    pub client_cert: Vec<CertificateDer<'static>>,
    /// Its key (`tls.key` of the client Secret).
    pub client_key: PrivateKeyDer<'static>,
    /// The pinned server certificate(s) (`tls.crt` of the server Secret).
    pub server_cert: Vec<CertificateDer<'static>>,
}

impl Transport {
    /// `https://host:port` or `unix:///path`, for logs and errors.
    pub fn describe(&self) -> String {
        match self {
            Self::Tls(tls) => format!("https://{}", tls.address),
            Self::Unix { path } => format!("unix://{}", path.display()),
        }
    }
}

/// [`ClientOptions::call_timeout`] for calls without a deadline.
pub const NO_DEADLINE: Duration = Duration::MAX;

/// Tunables of a plugin connection.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Deadline of every call. Default 30 s, as upstream CloudNativePG.
    /// [`NO_DEADLINE`] sets none: CloudNativePG's choice over Unix sockets,
    /// for calls that last as long as their work (a base backup).
    pub call_timeout: Duration,
    /// Deadline to establish a connection (TCP and TLS). Default 10 s.
    pub connect_timeout: Duration,
    /// Interval of HTTP/2 keepalive pings. Default 30 s.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is dropped. Default 10 s.
    pub keepalive_timeout: Duration,
    /// Told about every call (to count and time them). Default: [`NoObserver`].
    pub observer: Arc<dyn CallObserver>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        Self {
            call_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
            observer: Arc::new(NoObserver),
        }
    }
}

/// Why a plugin client could not be created.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The TLS material is not usable.
    #[error("plugin {plugin}: {source}")]
    Tls {
        /// The plugin.
        plugin: String,
        /// What was wrong.
        source: cnpgi_tls::TlsError,
    },
    /// The address cannot form a URI.
    #[error("plugin {plugin}: invalid address {address:?}: {reason}")]
    Address {
        /// The plugin.
        plugin: String,
        /// The address.
        address: String,
        /// Why.
        reason: String,
    },
}

/// A handle to one plugin's shared channel. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PluginClient {
    name: Arc<str>,
    address: Arc<str>,
    channel: InstrumentedChannel,
    call_timeout: Duration,
    connections: Arc<AtomicU64>,
}

/// The client of each service of the table, named by its key
/// (`PluginClient::wal`), on the shared channel.
macro_rules! accessors {
    ($( $(#[$doc:meta])* $name:ident = $konst:ident ($cap:ident, $label:literal, $grpc:literal) {
        key: $key:ident, proto: $($proto:ident)::+, client: $client_mod:ident::$client:ident, server: $($server:ident)::+,
        $($rest:tt)*
    } )*) => {$(
        #[doc = concat!("A client of the ", $label, " service on the shared channel.")]
        pub fn $key(&self) -> cnpgi_proto::$($proto)::+::$client_mod::$client<InstrumentedChannel> {
            cnpgi_proto::$($proto)::+::$client_mod::$client::new(self.channel.clone())
        }
    )*};
}

impl PluginClient {
    /// Creates the client, without dialling: the connection is opened by the
    /// first call, and re-opened by the next call after it breaks.
    ///
    /// # Errors
    ///
    /// [`ClientError`] when the TLS material or the address is not usable.
    pub fn new(name: &str, transport: Transport, options: &ClientOptions) -> Result<Self, ClientError> {
        let address = transport.describe();
        let endpoint_uri = match &transport {
            Transport::Tls(tls) => format!("http://{}", tls.address),
            // The connector dials the socket; the URI only names the authority.
            Transport::Unix { .. } => "http://localhost".to_owned(),
        };
        let mut endpoint = Endpoint::from_shared(endpoint_uri).map_err(|e| ClientError::Address {
            plugin: name.to_owned(),
            address: address.clone(),
            reason: e.to_string(),
        })?;
        if options.call_timeout != NO_DEADLINE {
            endpoint = endpoint.timeout(options.call_timeout);
        }
        let endpoint = endpoint
            .connect_timeout(options.connect_timeout)
            .http2_keep_alive_interval(options.keepalive_interval)
            .keep_alive_timeout(options.keepalive_timeout)
            .keep_alive_while_idle(true)
            .tcp_nodelay(true);
        let connections = Arc::new(AtomicU64::new(0));
        let channel = match transport {
            Transport::Tls(tls) => {
                let tls_error = |source| ClientError::Tls {
                    plugin: name.to_owned(),
                    source,
                };
                let verifier = PinnedServerVerifier::new(tls.server_cert).map_err(tls_error)?;
                let config = client_config(tls.client_cert, tls.client_key, verifier).map_err(tls_error)?;
                let server_name = server_name(&tls.server_name).map_err(tls_error)?;
                let connector =
                    TlsConnectorService::new(Arc::new(config), server_name).with_handshake_counter(connections.clone());
                endpoint.connect_with_connector_lazy(connector)
            }
            Transport::Unix { path } => endpoint.connect_with_connector_lazy(UnixConnector {
                path: Arc::new(path),
                connections: connections.clone(),
            }),
        };
        let name: Arc<str> = name.into();
        Ok(Self {
            channel: InstrumentedChannel {
                inner: channel,
                plugin: name.clone(),
                observer: options.observer.clone(),
                call_timeout: options.call_timeout,
            },
            name,
            address: address.into(),
            call_timeout: options.call_timeout,
            connections,
        })
    }

    /// The plugin name this client was created for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `https://host:port` or `unix:///path`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Connections opened so far (TLS handshakes, for a TLS plugin).
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::Relaxed)
    }

    /// Wraps a message in a request carrying the call deadline (sent to the
    /// plugin as `grpc-timeout`, and enforced here too); none under
    /// [`NO_DEADLINE`].
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if self.call_timeout != NO_DEADLINE {
            request.set_timeout(self.call_timeout);
        }
        request
    }

    /// An Identity client on the shared channel.
    pub fn identity(&self) -> IdentityClient<InstrumentedChannel> {
        IdentityClient::new(self.channel.clone())
    }

    for_each_service!(accessors);
}

/// The shared channel, with a tracing span (carrying the plugin name) and
/// the [`CallObserver`] around every call.
#[derive(Debug, Clone)]
pub struct InstrumentedChannel {
    inner: Channel,
    plugin: Arc<str>,
    observer: Arc<dyn CallObserver>,
    call_timeout: Duration,
}

/// `/cnpgi.operator.v1.Operator/MutateCluster` → `Operator/MutateCluster`.
fn short_method(path: &str) -> &str {
    let path = path.trim_start_matches('/');
    match path.split_once('/') {
        Some((service, _)) => match service.rfind('.') {
            Some(dot) => &path[dot + 1..],
            None => path,
        },
        None => path,
    }
}

impl tower_service::Service<http::Request<tonic::body::Body>> for InstrumentedChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = tonic::transport::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower_service::Service::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let method = short_method(request.uri().path()).to_owned();
        let plugin = self.plugin.clone();
        let observer = self.observer.clone();
        let span = tracing::debug_span!("plugin_call", plugin = %plugin, method = %method);
        let call = tower_service::Service::call(&mut self.inner, request);
        let call_timeout = self.call_timeout;
        Box::pin(
            async move {
                let started = std::time::Instant::now();
                let result = deadline_exceeded(call.await, &plugin, &method, call_timeout)
                    .map(|response| response.map(|body| LimitedBody::wrap(body, &plugin, &method)));
                let code = match &result {
                    // Failed unary calls come back as trailers-only responses,
                    // with the status in the headers.
                    Ok(response) => response
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<i32>().ok())
                        .map(tonic::Code::from_i32)
                        .filter(|code| *code != tonic::Code::Ok),
                    Err(_) => Some(tonic::Code::Unavailable),
                };
                let elapsed = started.elapsed();
                observer.call_ended(&plugin, &method, elapsed, code);
                match code {
                    None => tracing::debug!(elapsed_ms = elapsed.as_secs_f64() * 1000.0, "plugin call succeeded"),
                    Some(code) => tracing::debug!(?code, "plugin call failed"),
                }
                result
            }
            .instrument(span),
        )
    }
}

/// A call that ran out of time is a missed deadline (`DEADLINE_EXCEEDED`,
/// as grpc-go and the gRPC specification report it), where tonic says
/// `CANCELLED` "Timeout expired": both for the deadline enforced here (an
/// error of the channel) and for a tonic plugin that enforced the
/// `grpc-timeout` it was sent (its answer).
fn deadline_exceeded(
    result: Result<http::Response<tonic::body::Body>, tonic::transport::Error>,
    plugin: &str,
    method: &str,
    call_timeout: Duration,
) -> Result<http::Response<tonic::body::Body>, tonic::transport::Error> {
    let missed = || {
        tonic::Status::deadline_exceeded(format!(
            "plugin {plugin} did not answer {method} within the {call_timeout:?} deadline"
        ))
        .into_http()
    };
    match result {
        Err(error) if is_timeout(&error) => Ok(missed()),
        Ok(response)
            if response
                .headers()
                .get("grpc-status")
                .is_some_and(|v| v.as_bytes() == (tonic::Code::Cancelled as i32).to_string().as_bytes())
                && response
                    .headers()
                    .get("grpc-message")
                    .is_some_and(|v| v.as_bytes() == b"Timeout%20expired" || v.as_bytes() == b"Timeout expired") =>
        {
            Ok(missed())
        }
        other => other,
    }
}

/// The largest message a plugin may answer: tonic's default decoding limit
/// for the generated clients (4 MiB).
const MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;

/// A response body that ends with `RESOURCE_EXHAUSTED` (as grpc-go reports
/// it) as soon as a gRPC message announces more than [`MAX_ANSWER_BYTES`];
/// tonic's decoder would say `OUT_OF_RANGE`. It reads only the 5-byte
/// message headers, so it neither buffers nor copies.
struct LimitedBody {
    inner: tonic::body::Body,
    plugin: Arc<str>,
    method: String,
    header: [u8; 5],
    header_len: usize,
    /// Payload bytes of the current message still to come.
    remaining: usize,
    done: bool,
}

impl LimitedBody {
    fn wrap(inner: tonic::body::Body, plugin: &Arc<str>, method: &str) -> tonic::body::Body {
        tonic::body::Body::new(Self {
            inner,
            plugin: plugin.clone(),
            method: method.to_owned(),
            header: [0; 5],
            header_len: 0,
            remaining: 0,
            done: false,
        })
    }

    /// Follows the message framing through `data`; the size of the first
    /// message over the limit, if any.
    fn oversized(&mut self, data: &[u8]) -> Option<usize> {
        let mut i = 0;
        while i < data.len() {
            if self.remaining > 0 {
                let n = self.remaining.min(data.len() - i);
                self.remaining -= n;
                i += n;
                continue;
            }
            self.header[self.header_len] = data[i];
            self.header_len += 1;
            i += 1;
            if self.header_len == self.header.len() {
                self.header_len = 0;
                let len = u32::from_be_bytes([self.header[1], self.header[2], self.header[3], self.header[4]]);
                let len = usize::try_from(len).unwrap_or(usize::MAX);
                if len > MAX_ANSWER_BYTES {
                    return Some(len);
                }
                self.remaining = len;
            }
        }
        None
    }
}

impl http_body::Body for LimitedBody {
    type Data = tonic::codegen::Bytes;
    type Error = tonic::Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        let oversized = match frame.data_ref() {
            Some(data) => {
                let data = data.clone();
                self.oversized(&data)
            }
            None => None,
        };
        let Some(len) = oversized else {
            return Poll::Ready(Some(Ok(frame)));
        };
        self.done = true;
        let status = tonic::Status::resource_exhausted(format!(
            "plugin {} answered {} with a message of {len} bytes, more than the {MAX_ANSWER_BYTES} bytes accepted",
            self.plugin, self.method
        ));
        let mut trailers = http::HeaderMap::new();
        Poll::Ready(Some(match status.add_header(&mut trailers) {
            Ok(()) => Ok(http_body::Frame::trailers(trailers)),
            Err(status) => Err(status),
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.done || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Whether tonic's `TimeoutExpired` is in the error's source chain.
fn is_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn short_method_names() {
        assert_eq!(
            super::short_method("/cnpgi.operator.v1.Operator/MutateCluster"),
            "Operator/MutateCluster"
        );
        assert_eq!(super::short_method("/Svc/M"), "Svc/M");
        assert_eq!(super::short_method("odd"), "odd");
    }
}

/// Dials a Unix socket, whatever the URI, counting connections.
#[derive(Debug, Clone)]
struct UnixConnector {
    path: Arc<PathBuf>,
    connections: Arc<AtomicU64>,
}

impl tower_service::Service<http::Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let stream = tokio::net::UnixStream::connect(this.path.as_path())
                .await
                .map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot connect to {}: {e}", this.path.display()))
                })?;
            this.connections.fetch_add(1, Ordering::Relaxed);
            Ok(TokioIo::new(stream))
        })
    }
}
