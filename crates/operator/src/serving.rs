//! The operator's HTTP servers (admission webhooks; health and metrics):
//! one hyper configuration with the limits of controller-runtime's webhook
//! server and kube-apiserver, so that a slow or idle client cannot hold a
//! connection, or the process, forever.
//!
//! * the request headers must arrive within [`ServerLimits::header_read_timeout`]
//!   (32 s, as Go's `ReadHeaderTimeout` there), else the connection is closed;
//!   hyper only enforces this with a timer, which is set here;
//! * a connection with no byte read or written for
//!   [`ServerLimits::idle_timeout`] (90 s) is closed;
//! * request headers are at most [`ServerLimits::max_header_bytes`] (1 MiB);
//! * a request (its body included) must complete within
//!   [`ServerLimits::request_timeout`], else `408`;
//! * at most [`ServerLimits::max_connections`] connections are served at
//!   once; more are closed on accept;
//! * on shutdown the caller gives a bounded grace through
//!   [`axum_server::Handle::graceful_shutdown`].

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use axum::{Router as HttpRouter, extract::Request, http::StatusCode, middleware::Next, response::IntoResponse};
use hyper_util::rt::TokioTimer;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{Instant, Sleep},
};

/// Limits of an HTTP server; [`Default`] gives the production values.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// Time a client has to send a request's headers (HTTP/1.1; every
    /// request of a kept-alive connection, so it also bounds the wait for
    /// the next one). Default 32 s.
    pub header_read_timeout: Duration,
    /// A connection with no traffic for this long is closed. Default 90 s.
    pub idle_timeout: Duration,
    /// Largest request head (HTTP/1.1) or header list (HTTP/2). Default 1 MiB.
    pub max_header_bytes: usize,
    /// Time a request has to complete, body and answer included; then `408`.
    /// Default 60 s.
    pub request_timeout: Duration,
    /// Connections served at once; more are closed on accept. Default 1024.
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
        .header_read_timeout(limits.header_read_timeout)
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

/// An `axum_server` acceptor enforcing the connection cap and the idle
/// timeout of [`ServerLimits`] before handing the connection to `inner`
/// (TLS, or nothing).
#[derive(Clone)]
pub struct LimitedAcceptor<A> {
    inner: A,
    permits: Arc<Semaphore>,
    idle_timeout: Duration,
}

impl<A> LimitedAcceptor<A> {
    /// Wraps `inner` with the cap and idle timeout of `limits`.
    pub fn new(inner: A, limits: &ServerLimits) -> Self {
        Self {
            inner,
            permits: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            idle_timeout: limits.idle_timeout,
        }
    }
}

impl<A, I, S> axum_server::accept::Accept<I, S> for LimitedAcceptor<A>
where
    A: axum_server::accept::Accept<IdleIo<I>, S> + Clone + Send + 'static,
    A::Future: Send,
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Send + 'static,
{
    type Stream = A::Stream;
    type Service = A::Service;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, Self::Service)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let permit = self.permits.clone().try_acquire_owned();
        let inner = self.inner.clone();
        let idle = self.idle_timeout;
        Box::pin(async move {
            let Ok(permit) = permit else {
                tracing::warn!("connection refused: too many open connections");
                return Err(io::Error::other("too many open connections"));
            };
            inner.accept(IdleIo::new(stream, idle, permit), service).await
        })
    }
}

/// A connection closed (read and write fail with `TimedOut`) after
/// `idle` without traffic; it holds its slot of the connection cap.
pub struct IdleIo<I> {
    inner: I,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
    _permit: OwnedSemaphorePermit,
}

impl<I> IdleIo<I> {
    fn new(inner: I, idle: Duration, permit: OwnedSemaphorePermit) -> Self {
        Self {
            inner,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
            _permit: permit,
        }
    }

    fn active(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// `Pending` from the inner stream: an error once idle for too long.
    fn check_idle<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connection idle for {} s", self.idle.as_secs()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for IdleIo<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.check_idle(cx),
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for IdleIo<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_write(cx, data) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.check_idle(cx),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
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
        match Pin::new(&mut this.inner).poll_write_vectored(cx, bufs) {
            Poll::Ready(result) => {
                this.active();
                Poll::Ready(result)
            }
            Poll::Pending => this.check_idle(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
