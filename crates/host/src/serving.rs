//! The operator's HTTP servers (admission webhooks; health probes;
//! metrics): one hyper configuration with the limits of controller-runtime's
//! webhook server and Go's `net/http`, so that a slow, idle or hostile
//! client cannot hold a connection, lock other clients out, or hold the
//! process.
//!
//! * a connection must deliver its first request's headers within
//!   [`ServerLimits::header_read_timeout`] (32 s, as `ReadHeaderTimeout`
//!   there) counted from accept, TLS handshake included, whether or not it
//!   sent anything. hyper-util's HTTP/1-or-2 detection waits for the first
//!   bytes without a timer, and hyper's own header timer only starts after
//!   it, so the deadlines are enforced on the socket ([`ConnectionIo`]);
//! * a kept-alive connection has [`ServerLimits::idle_timeout`] (90 s)
//!   from the end of its last request to deliver the next one's headers;
//!   while a request is served, the same time without traffic closes it;
//! * request headers are at most [`ServerLimits::max_header_bytes`] (1 MiB);
//! * a request (its body included) must complete within
//!   [`ServerLimits::request_timeout`], else `408`;
//! * at most [`ServerLimits::max_connections`] connections are held at once
//!   (each costs memory: TLS and HTTP buffers). A new connection is never
//!   refused: at the cap it closes the oldest connection that has not sent a
//!   request yet, else the one idle the longest, else the oldest. A flood of
//!   silent connections thus only ever replaces itself, and a client, which
//!   sends its request right after its handshake, is served
//!   (`tests/flood.rs`: 1,024 and 10,000 idle TLS connections);
//! * on shutdown the caller gives a bounded grace through
//!   [`axum_server::Handle::graceful_shutdown`].

use std::{
    collections::BTreeMap,
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use axum::{Router as HttpRouter, extract::Request, http::StatusCode, middleware::Next, response::IntoResponse};
use cnpgi_core::ratelimit::RateLimited;
use futures_util::task::AtomicWaker;
use hyper_util::rt::TokioTimer;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    time::{Instant, Sleep},
};

/// Limits of an HTTP server; [`Default`] gives the production values.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Time a new connection has to deliver its first request's headers,
    /// counted from accept (TLS handshake included). Default 32 s.
    pub header_read_timeout: Duration,
    /// Time a kept-alive connection has to deliver its next request's
    /// headers, counted from the end of the last request; also the time
    /// without traffic that closes a connection while it serves a request.
    /// Default 90 s.
    pub idle_timeout: Duration,
    /// Largest request head (HTTP/1.1) or header list (HTTP/2). Default 1 MiB.
    pub max_header_bytes: usize,
    /// Time a request has to complete, body and answer included; then `408`.
    /// Default 60 s.
    pub request_timeout: Duration,
    /// Connections held at once. At the cap a new connection closes the
    /// oldest one that has sent no request (else the one idle the longest,
    /// else the oldest): it is never refused. Default 1024.
    pub max_connections: usize,
    /// Time a client has for the TLS handshake. Default 10 s.
    pub handshake_timeout: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(32),
            idle_timeout: Duration::from_secs(90),
            max_header_bytes: 1024 * 1024,
            request_timeout: Duration::from_secs(60),
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

/// An `axum_server` server on `listener` with `limits` applied to hyper's
/// HTTP/1.1 and HTTP/2 connection builders (with a timer, without which
/// hyper enforces no timeout).
pub fn server(listener: std::net::TcpListener, limits: &ServerLimits) -> io::Result<axum_server::Server<SocketAddr>> {
    listener.set_nonblocking(true)?;
    let mut server = axum_server::from_tcp(listener)?;
    let builder = server.http_builder();
    builder
        .http1()
        .timer(TokioTimer::new())
        // hyper's header timer starts as soon as it waits for a request
        // head, which would close a kept-alive connection after the header
        // timeout instead of the idle timeout. `ConnectionIo` enforces both
        // as Go does: the first request's headers within the header
        // timeout from accept, the next request within the idle timeout.
        .header_read_timeout(None)
        // hyper refuses a buffer under 8 KiB; a head that does not fit gets 431.
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(250);
    Ok(server)
}

/// `app` with every request bounded by `timeout` (body read included):
/// `408 Request Timeout` past it.
pub fn with_request_timeout(app: HttpRouter, timeout: Duration) -> HttpRouter {
    app.layer(axum::middleware::from_fn(
        move |request: Request, next: Next| async move {
            match tokio::time::timeout(timeout, next.run(request)).await {
                Ok(response) => response,
                Err(_) => (
                    StatusCode::REQUEST_TIMEOUT,
                    format!("the request did not complete within {} ms", timeout.as_millis()),
                )
                    .into_response(),
            }
        },
    ))
}

/// Serves `app` over plain HTTP on `listener` with `limits`, until `handle`
/// is told to shut down.
pub async fn serve_plain(
    listener: std::net::TcpListener,
    app: HttpRouter,
    handle: axum_server::Handle<SocketAddr>,
    limits: &ServerLimits,
) -> io::Result<()> {
    server(listener, limits)?
        .acceptor(LimitedAcceptor::new(axum_server::accept::DefaultAcceptor, limits))
        .handle(handle)
        .serve(with_request_timeout(app, limits.request_timeout).into_make_service())
        .await
}

/// An `axum_server` acceptor enforcing the deadlines and the connection cap
/// of [`ServerLimits`] before handing the connection to `inner` (TLS, or
/// nothing): it wraps the raw socket in a [`ConnectionIo`] and the
/// connection's service in a [`Tracked`] service, which tells the
/// `ConnectionIo` when requests start and end.
#[derive(Clone)]
pub struct LimitedAcceptor<A> {
    inner: A,
    connections: Arc<Connections>,
    header_read_timeout: Duration,
    idle_timeout: Duration,
}

impl<A> LimitedAcceptor<A> {
    /// Wraps `inner` with the deadlines and cap of `limits`.
    pub fn new(inner: A, limits: &ServerLimits) -> Self {
        Self {
            inner,
            connections: Arc::new(Connections::new(limits.max_connections)),
            header_read_timeout: limits.header_read_timeout,
            idle_timeout: limits.idle_timeout,
        }
    }

    /// Connections held at the moment (for tests and diagnostics).
    pub fn open_connections(&self) -> usize {
        self.connections.len()
    }
}

impl<A, I, S> axum_server::accept::Accept<I, S> for LimitedAcceptor<A>
where
    A: axum_server::accept::Accept<ConnectionIo<I>, Tracked<S>> + Clone + Send + 'static,
    A::Future: Send,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Send + 'static,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let accepted = Instant::now();
        let (slot, evicted) = self.connections.admit(accepted);
        if evicted {
            let log = &self.connections.evictions_log;
            if let Some(count) = log.hit(accepted.into_std()) {
                tracing::warn!(
                    cap = self.connections.cap,
                    closed = count,
                    "connection cap reached: closed {count} connection(s) without a request in flight in the last {} s to make room for new ones",
                    log.interval().as_secs()
                );
            }
        }
        let connection = slot.connection.clone();
        let io = ConnectionIo::new(stream, slot, self.header_read_timeout, self.idle_timeout);
        let service = Tracked {
            inner: service,
            connection,
        };
        let inner = self.inner.clone();
        Box::pin(async move { inner.accept(io, service).await })
    }
}

/// The connections of one server, in accept order, for the cap.
struct Connections {
    cap: usize,
    open: Mutex<OpenConnections>,
    /// Evictions are logged at most once every 5 s, with their count: a
    /// flood makes one per connection.
    evictions_log: RateLimited,
}

struct OpenConnections {
    next_id: u64,
    by_id: BTreeMap<u64, Arc<Connection>>,
}

impl Connections {
    fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            open: Mutex::new(OpenConnections {
                next_id: 0,
                by_id: BTreeMap::new(),
            }),
            evictions_log: RateLimited::new(Duration::from_secs(5)),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OpenConnections> {
        // Nothing panics while holding the lock; if something did, the map
        // is still consistent.
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn len(&self) -> usize {
        self.lock().by_id.len()
    }

    /// Registers a connection accepted at `now`. At the cap, first closes
    /// the least valuable one (see [`Connections::victim`]): a new
    /// connection is never refused, so a flood cannot lock clients out.
    /// Also says whether one was closed.
    fn admit(self: &Arc<Self>, now: Instant) -> (Slot, bool) {
        let mut open = self.lock();
        let mut evicted = false;
        if open.by_id.len() >= self.cap
            && let Some(id) = Self::victim(&open.by_id)
            && let Some(victim) = open.by_id.remove(&id)
        {
            victim.evict();
            evicted = true;
        }
        let id = open.next_id;
        open.next_id += 1;
        let connection = Arc::new(Connection::new(now));
        open.by_id.insert(id, connection.clone());
        (
            Slot {
                id,
                connection,
                connections: self.clone(),
            },
            evicted,
        )
    }

    /// The connection to close for a new one: the oldest that has not sent
    /// a request yet (a client sends one right after its handshake; a
    /// flood never does), else the one idle (between requests) the
    /// longest, else the oldest (every connection has a request in flight,
    /// each bounded by the request timeout).
    fn victim(open: &BTreeMap<u64, Arc<Connection>>) -> Option<u64> {
        let mut idle_longest: Option<(Instant, u64)> = None;
        for (&id, connection) in open {
            let (in_flight, requests) = connection.activity();
            if in_flight == 0 && requests == 0 {
                return Some(id);
            }
            if in_flight == 0 {
                let since = connection.idle_since();
                if idle_longest.is_none_or(|(longest, _)| since < longest) {
                    idle_longest = Some((since, id));
                }
            }
        }
        idle_longest.map(|(_, id)| id).or_else(|| open.keys().next().copied())
    }
}

/// A connection's place among the open ones, given up when dropped (when
/// hyper is done with the connection).
struct Slot {
    id: u64,
    connection: Arc<Connection>,
    connections: Arc<Connections>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connections.lock().by_id.remove(&self.id);
    }
}

/// What the server knows about one connection, shared by its I/O (which
/// enforces the deadlines) and its service (which sees requests).
struct Connection {
    accepted: Instant,
    /// Requests started and not answered yet.
    in_flight: AtomicUsize,
    /// Requests started so far.
    requests: AtomicU64,
    /// When the last request ended (accept, before the first).
    idle_since: Mutex<Instant>,
    /// Closed to make room for a new connection.
    evicted: AtomicBool,
    /// The connection's task, woken when it is evicted.
    waker: AtomicWaker,
}

impl Connection {
    fn new(accepted: Instant) -> Self {
        Self {
            accepted,
            in_flight: AtomicUsize::new(0),
            requests: AtomicU64::new(0),
            idle_since: Mutex::new(accepted),
            evicted: AtomicBool::new(false),
            waker: AtomicWaker::new(),
        }
    }

    fn activity(&self) -> (usize, u64) {
        (
            self.in_flight.load(Ordering::Acquire),
            self.requests.load(Ordering::Acquire),
        )
    }

    fn idle_since(&self) -> Instant {
        *self.idle_since.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn evict(&self) {
        self.evicted.store(true, Ordering::Release);
        self.waker.wake();
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        self.requests.fetch_add(1, Ordering::AcqRel);
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self.clone())
    }
}

/// A request being served; the connection is idle again once every such
/// guard is dropped (answered, or abandoned by hyper).
struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // `idle_since` first: a connection seen with nothing in flight
        // must not look idle since before this request.
        *self.0.idle_since.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A connection's service, telling the connection when its requests start
/// and end (its deadlines depend on it).
#[derive(Clone)]
pub struct Tracked<S> {
    inner: S,
    connection: Arc<Connection>,
}

impl<S, R> tower_service::Service<R> for Tracked<S>
where
    S: tower_service::Service<R>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let in_flight = self.connection.request_started();
        let answer = self.inner.call(request);
        Box::pin(async move {
            let answer = answer.await;
            drop(in_flight);
            answer
        })
    }
}

/// A server connection with deadlines, Go `net/http`'s:
///
/// * until its first request's headers are complete: the header read
///   timeout, counted from accept (the TLS handshake included), whether or
///   not the client sent anything;
/// * between requests: the idle timeout, counted from the end of the last
///   one, for the next request's headers to be complete (traffic such as
///   HTTP/2 pings or a trickle of header bytes does not extend it);
/// * while a request is served: the idle timeout, counted from the last
///   byte read or written (a client that stops reading its answer).
///
/// Past a deadline, or once evicted to make room, reads and writes fail
/// (`TimedOut`, `ConnectionAborted`) and hyper closes the connection.
pub struct ConnectionIo<I> {
    inner: I,
    slot: Slot,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    last_traffic: Instant,
    /// Never later than the current deadline: when it fires, the deadline
    /// is computed again and the timer reset if it moved.
    timer: Pin<Box<Sleep>>,
}

impl<I> ConnectionIo<I> {
    fn new(inner: I, slot: Slot, header_read_timeout: Duration, idle_timeout: Duration) -> Self {
        let accepted = slot.connection.accepted;
        Self {
            inner,
            header_read_timeout,
            idle_timeout,
            last_traffic: accepted,
            timer: Box::pin(tokio::time::sleep_until(
                accepted + header_read_timeout.min(idle_timeout),
            )),
            slot,
        }
    }

    /// The current deadline, and what it is.
    fn deadline(&self) -> (Instant, &'static str) {
        let connection = &self.slot.connection;
        let (in_flight, requests) = connection.activity();
        if in_flight > 0 {
            (
                self.last_traffic + self.idle_timeout,
                "no traffic while serving a request",
            )
        } else if requests == 0 {
            let header = connection.accepted + self.header_read_timeout;
            let idle = connection.accepted + self.idle_timeout;
            (header.min(idle), "no complete request headers since accept")
        } else {
            (connection.idle_since() + self.idle_timeout, "no new request")
        }
    }

    /// The inner stream is `Pending`: an error once evicted or past the
    /// deadline, else `Pending` with the timer and the eviction armed.
    fn check<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        // Registered before the flag is read: an eviction in between wakes us.
        self.slot.connection.waker.register(cx.waker());
        if self.slot.connection.evicted.load(Ordering::Acquire) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for a new connection (connection cap reached)",
            )));
        }
        while self.timer.as_mut().poll(cx).is_ready() {
            let (deadline, what) = self.deadline();
            if Instant::now() >= deadline {
                let elapsed = self.slot.connection.accepted.elapsed();
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{what} in time; closed {} ms after accept", elapsed.as_millis()),
                )));
            }
            self.timer.as_mut().reset(deadline);
        }
        Poll::Pending
    }

    fn progressed<T>(&mut self, result: Poll<io::Result<T>>, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match result {
            Poll::Ready(result) => {
                self.last_traffic = Instant::now();
                Poll::Ready(result)
            }
            Poll::Pending => self.check(cx),
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for ConnectionIo<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.progressed(result, cx)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for ConnectionIo<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_write(cx, data);
        this.progressed(result, cx)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.progressed(result, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.progressed(result, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
