//! The tower layer wrapped around every gRPC call a plugin serves: a tracing
//! span and a log line per call, and panics turned into `INTERNAL` statuses.

use std::{
    any::Any,
    future::Future,
    panic::AssertUnwindSafe,
    pin::Pin,
    task::{Context, Poll},
    time::Instant,
};

use futures_util::FutureExt;
use tonic::body::Body;
use tower_layer::Layer;
use tower_service::Service;
use tracing::Instrument;

/// Adds [`CallService`] around a service.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallLayer;

impl<S> Layer<S> for CallLayer {
    type Service = CallService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CallService { inner }
    }
}

/// See the module documentation.
#[derive(Debug, Clone)]
pub(crate) struct CallService<S> {
    inner: S,
}

/// Calls that happen every few seconds and would drown the log at `info`.
fn is_routine(path: &str) -> bool {
    path.ends_with("/Probe") || path.starts_with("/grpc.health.") || path.starts_with("/grpc.reflection.")
}

fn panic_message(panic: &(dyn Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

impl<S, B> Service<http::Request<B>> for CallService<S>
where
    S: Service<http::Request<B>, Response = http::Response<Body>> + Send,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = request.uri().path().to_owned();
        let span = tracing::info_span!("grpc", method = %method);
        // The generated handlers do their work inside the returned future,
        // but a panic while creating it is caught too.
        let future = {
            let _entered = span.enter();
            std::panic::catch_unwind(AssertUnwindSafe(|| self.inner.call(request)))
        };
        Box::pin(
            async move {
                let started = Instant::now();
                let outcome = match future {
                    Ok(future) => AssertUnwindSafe(future).catch_unwind().await,
                    Err(panic) => Err(panic),
                };
                let elapsed_ms = started.elapsed().as_secs_f64() * 1000.0;
                match outcome {
                    Ok(Ok(mut response)) => {
                        oversized_is_resource_exhausted(&mut response);
                        log_response(&method, &response, elapsed_ms);
                        Ok(response)
                    }
                    Ok(Err(error)) => {
                        tracing::error!(elapsed_ms, "call failed in the transport");
                        Err(error)
                    }
                    Err(panic) => {
                        let message = cnpgi_core::echo::bounded(panic_message(panic.as_ref()));
                        tracing::error!(elapsed_ms, panic = %message, "handler panicked; answering INTERNAL");
                        Ok(
                            tonic::Status::internal(format!("plugin handler for {method} panicked: {message}"))
                                .into_http(),
                        )
                    }
                }
            }
            .instrument(span),
        )
    }
}

/// tonic refuses a request larger than the server decodes with
/// `OUT_OF_RANGE`; gRPC's specification and grpc-go use `RESOURCE_EXHAUSTED`
/// for that, which is what clients expect. Only that refusal is rewritten:
/// an `OUT_OF_RANGE` a handler answers itself is left alone.
fn oversized_is_resource_exhausted(response: &mut http::Response<Body>) {
    let headers = response.headers_mut();
    let out_of_range = headers
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() == (tonic::Code::OutOfRange as i32).to_string().as_bytes());
    let oversized = || {
        headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .map(percent_decode)
            .is_some_and(|m| m.starts_with("Error, decoded message length too large"))
    };
    if out_of_range && oversized() {
        headers.insert(
            "grpc-status",
            http::HeaderValue::from(tonic::Code::ResourceExhausted as i32),
        );
    }
}

/// tonic puts the status of a failed unary call in the response headers
/// (trailers-only response); a successful one carries no `grpc-status` header.
fn log_response(method: &str, response: &http::Response<Body>, elapsed_ms: f64) {
    let headers = response.headers();
    let code = headers
        .get("grpc-status")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<i32>().ok())
        .map(tonic::Code::from_i32)
        .unwrap_or(tonic::Code::Ok);
    if code == tonic::Code::Ok {
        if is_routine(method) {
            tracing::debug!(elapsed_ms, "call succeeded");
        } else {
            tracing::info!(elapsed_ms, "call succeeded");
        }
        return;
    }
    let message = logged_message(headers);
    match code {
        tonic::Code::Internal | tonic::Code::Unknown | tonic::Code::DataLoss => {
            tracing::error!(elapsed_ms, code = ?code, message, "call failed")
        }
        _ => tracing::warn!(elapsed_ms, code = ?code, message, "call failed"),
    }
}

/// The status message of a response, as logged: at most 1 KiB of it.
fn logged_message(headers: &http::HeaderMap) -> String {
    headers
        .get("grpc-message")
        .and_then(|v| v.to_str().ok())
        .map(percent_decode)
        .map(cnpgi_core::echo::bounded_string)
        .unwrap_or_default()
}

/// `grpc-message` is percent-encoded on the wire (gRPC HTTP/2 spec).
fn percent_decode(value: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2]))
        {
            out.push(high << 4 | low);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_grpc_messages() {
        assert_eq!(percent_decode("bad%20JSON%3A%20x"), "bad JSON: x");
        assert_eq!(percent_decode("trailing%2"), "trailing%2");
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("é%zz"), "é%zz");
    }

    #[test]
    fn probes_and_health_checks_are_routine() {
        assert!(is_routine("/cnpgi.identity.v1.Identity/Probe"));
        assert!(is_routine("/grpc.health.v1.Health/Check"));
        assert!(!is_routine("/cnpgi.operator.v1.Operator/MutateCluster"));
    }

    /// Issue 13, point 5: the logged status message is bounded.
    #[test]
    fn logged_messages_are_bounded() {
        let huge = "x".repeat(3 * 1024 * 1024);
        let response = tonic::Status::invalid_argument(huge).into_http::<Body>();
        let message = logged_message(response.headers());
        assert!(message.len() <= 1024, "{}", message.len());
        assert!(message.starts_with("xxx"));
    }
}
