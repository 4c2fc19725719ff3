//! Admission webhooks for a resource, routed to its plugins, as axum routes
//! an operator mounts on its own server.
//!
//! * the mutating path ([`AdmissionPaths::mutate`]): chained `MutateCluster`
//!   through the resource's plugins; the combined change goes back as a
//!   base64-encoded JSON Patch (kube's `AdmissionResponse::with_patch` would
//!   send an array of numbers, which the API server rejects, so the response
//!   is written here).
//! * the validating path ([`AdmissionPaths::validate`]):
//!   `ValidateClusterCreate` on CREATE, `ValidateClusterChange` on UPDATE;
//!   every plugin's errors are returned as one denial, one kubectl-style
//!   line per field.
//!
//! A plugin that is missing, not ready, failing or too slow denies the
//! request (fail closed, unless fail-open for that plugin), and every answer
//! comes within the configured deadline. A body that is not an
//! `AdmissionReview` gets `400 Bad Request` with the reason.

use std::{future::Future, io, net::SocketAddr, pin::Pin, sync::Arc, time::Duration};

use axum::{
    Router as HttpRouter,
    body::Bytes,
    extract::{DefaultBodyLimit, Request, State},
    http::StatusCode,
    middleware::Next,
    response::IntoResponse,
    routing::post,
};
use base64::Engine;
/// The TLS configuration [`serve_https`] takes, following its certificate
/// files (re-exported from `cnpgi-tls`, so that a host needs no other crate).
pub use cnpgi_tls::server::{ReloadingServerConfig, ServerTlsFiles};
use kube::core::{
    DynamicObject,
    admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as AdmissionOperation},
};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{
    metrics::Metrics,
    routing::{FieldError, Router},
    serving::{self, LimitedAcceptor, ServerLimits},
};

/// Where the webhooks of one resource kind are served, and how denials name it.
///
/// ```
/// let paths = cnpgi_host::webhook::AdmissionPaths::new("DatabaseTable", "/mutate-table", "/validate-table");
/// assert_eq!(paths.kind, "DatabaseTable");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdmissionPaths {
    /// The kind, as denials name it (`<kind> is invalid: ...`).
    pub kind: String,
    /// The mutating webhook's path, e.g. `/mutate-cluster`.
    pub mutate: String,
    /// The validating webhook's path, e.g. `/validate-cluster`.
    pub validate: String,
}

impl AdmissionPaths {
    /// The webhooks of `kind` at `mutate` and `validate`.
    pub fn new(kind: impl Into<String>, mutate: impl Into<String>, validate: impl Into<String>) -> Self {
        Self {
            kind: kind.into(),
            mutate: mutate.into(),
            validate: validate.into(),
        }
    }
}

#[derive(Clone)]
struct WebhookState {
    router: Router,
    deadline: Duration,
    kind: Arc<str>,
}

/// The largest request body accepted, 7 MiB as controller-runtime's webhook
/// server: an UPDATE review carries the object and its old version, each up
/// to the API server's 3 MiB. A larger body gets `413 Payload Too Large`.
/// (axum's default, 2 MiB, would refuse legitimate updates.)
pub const MAX_BODY_BYTES: usize = 7 * 1024 * 1024;

/// The webhooks' HTTP routes for the resources `router` routes, at
/// `paths`, answering within `deadline` (keep it below the
/// `timeoutSeconds` of the webhook configuration), accepting bodies of up
/// to [`MAX_BODY_BYTES`]. Merge them into the operator's own axum router.
///
/// A plugin that is arriving (discovered, not answering yet) is waited for
/// during at most three quarters of `deadline`
/// ([`RoutingPolicy::arrival_wait`](crate::routing::RoutingPolicy::arrival_wait),
/// lowered if needed), so that a plugin still not there is refused with its
/// reason, not with a timeout.
pub fn admission_routes(router: Router, paths: &AdmissionPaths, deadline: Duration) -> HttpRouter {
    let wait = router.policy().arrival_wait.min(deadline.mul_f64(0.75));
    let router = router.with_arrival_wait(wait);
    HttpRouter::new()
        .route(&paths.mutate, post(mutate))
        .route(&paths.validate, post(validate))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(WebhookState {
            router,
            deadline,
            kind: Arc::from(paths.kind.as_str()),
        })
}

/// `app` (the webhook routes) with each admission request to one of
/// `webhooks` (paths) measured in `metrics`, as controller-runtime does:
/// `controller_runtime_webhook_requests_total{webhook,code}`,
/// `controller_runtime_webhook_latency_seconds{webhook}` and
/// `controller_runtime_webhook_requests_in_flight{webhook}`, `webhook`
/// being the path. Requests to other paths are not webhooks: not counted.
pub fn observed_paths(app: HttpRouter, metrics: Metrics, webhooks: &[&str]) -> HttpRouter {
    let webhooks: Arc<[String]> = webhooks.iter().map(|path| (*path).to_owned()).collect();
    app.layer(axum::middleware::from_fn(move |request: Request, next: Next| {
        let metrics = metrics.clone();
        let webhooks = webhooks.clone();
        async move {
            let path = request.uri().path();
            let Some(webhook) = webhooks.iter().find(|known| *known == path) else {
                return next.run(request).await;
            };
            let timer = metrics.webhook_started(webhook);
            let response = next.run(request).await;
            timer.answered(response.status().as_u16());
            response
        }
    }))
}

type BadRequest = (StatusCode, String);

fn parse(body: &[u8]) -> Result<AdmissionRequest<DynamicObject>, BadRequest> {
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(body).map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the body is not an AdmissionReview: {e}"),
        )
    })?;
    review.try_into().map_err(|e| {
        (
            StatusCode::BAD_REQUEST,
            format!("the AdmissionReview has no request: {e}"),
        )
    })
}

/// Serialises the review, with `patch` as base64 JSON Patch when non-empty.
fn answer(response: AdmissionResponse, patch: Option<&json_patch::Patch>) -> axum::response::Response {
    let mut review = match serde_json::to_value(response.into_review()) {
        Ok(review) => review,
        Err(e) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("cannot encode the answer: {e}"),
            )
                .into_response();
        }
    };
    if let Some(patch) = patch.filter(|p| !p.0.is_empty()) {
        match serde_json::to_vec(patch) {
            Ok(bytes) => {
                review["response"]["patchType"] = Value::from("JSONPatch");
                review["response"]["patch"] = Value::from(base64::engine::general_purpose::STANDARD.encode(bytes));
            }
            Err(e) => {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("cannot encode the patch: {e}"),
                )
                    .into_response();
            }
        }
    }
    axum::Json(review).into_response()
}

fn object_json(object: Option<&DynamicObject>) -> Result<Option<Value>, serde_json::Error> {
    object.map(serde_json::to_value).transpose()
}

async fn within<T>(deadline: Duration, work: impl Future<Output = T>) -> Result<T, String> {
    tokio::time::timeout(deadline, work)
        .await
        .map_err(|_| format!("the plugins did not answer within {} ms", deadline.as_millis()))
}

/// Whether the object under review is being deleted
/// (`metadata.deletionTimestamp` set). It is then admitted as it is, without
/// asking the plugins: the updates that follow a deletion are its finalizers
/// going (the host's own, [`crate::deletion`], once the plugins cleaned up or
/// its deadline passed), and a plugin that is down, or that refuses the
/// object, must not keep it from going.
fn being_deleted(object: Option<&DynamicObject>) -> bool {
    object.is_some_and(|object| object.metadata.deletion_timestamp.is_some())
}

async fn mutate(State(state): State<WebhookState>, body: Bytes) -> axum::response::Response {
    let request = match parse(&body) {
        Ok(request) => request,
        Err(bad) => return bad.into_response(),
    };
    let response = AdmissionResponse::from(&request);
    if being_deleted(request.object.as_ref()) {
        return answer(response, None);
    }
    let resource = match object_json(request.object.as_ref()) {
        Ok(Some(resource)) => resource,
        Ok(None) => return answer(response, None),
        Err(e) => return answer(response.deny(format!("cannot read the {}: {e}", state.kind)), None),
    };
    match within(state.deadline, state.router.mutate(state.router.routed(resource))).await {
        Ok(Ok(patched)) => {
            // The plugins' patches, in order, applied to the object under
            // review: what the API server applies gives what they built,
            // with no diff to compute.
            let patch = json_patch::Patch(patched.patches.into_iter().flat_map(|p| p.patch.0).collect());
            answer(response, Some(&patch))
        }
        Ok(Err(error)) => {
            tracing::warn!(kind = &*state.kind, %error, "mutation denied");
            answer(response.deny(error.to_string()), None)
        }
        Err(timeout) => answer(response.deny(timeout), None),
    }
}

async fn validate(State(state): State<WebhookState>, body: Bytes) -> axum::response::Response {
    let request = match parse(&body) {
        Ok(request) => request,
        Err(bad) => return bad.into_response(),
    };
    let response = AdmissionResponse::from(&request);
    if being_deleted(request.object.as_ref()) {
        return answer(response, None);
    }
    let (new, old) = match (
        object_json(request.object.as_ref()),
        object_json(request.old_object.as_ref()),
    ) {
        (Ok(new), Ok(old)) => (
            new.map(|new| state.router.routed(new)),
            old.map(|old| state.router.routed(old)),
        ),
        (Err(e), _) | (_, Err(e)) => {
            return answer(response.deny(format!("cannot read the {}: {e}", state.kind)), None);
        }
    };
    let errors = match (&request.operation, new, old) {
        (AdmissionOperation::Create, Some(new), _) => within(state.deadline, state.router.validate_create(&new)).await,
        (AdmissionOperation::Update, Some(new), Some(old)) => {
            within(state.deadline, state.router.validate_change(&old, &new)).await
        }
        _ => return answer(response, None),
    };
    match errors {
        Ok(Ok(errors)) if errors.is_empty() => answer(response, None),
        Ok(Ok(errors)) => answer(response.deny(denial(&state.kind, &errors)), None),
        Ok(Err(error)) => {
            tracing::warn!(kind = &*state.kind, %error, "validation could not complete");
            answer(response.deny(error.to_string()), None)
        }
        Err(timeout) => answer(response.deny(timeout), None),
    }
}

/// One line per field error, as kubectl prints validation failures.
fn denial(kind: &str, errors: &[FieldError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    format!("{kind} is invalid: {}", lines.join("; "))
}

/// An `axum_server` acceptor doing TLS with a configuration that follows
/// its certificate files.
#[derive(Clone)]
pub struct ReloadingTlsAcceptor {
    config: Arc<ReloadingServerConfig>,
    handshake_timeout: Duration,
}

impl ReloadingTlsAcceptor {
    /// An acceptor using `config`, giving clients 10 s for the handshake.
    pub fn new(config: Arc<ReloadingServerConfig>) -> Self {
        Self {
            config,
            handshake_timeout: Duration::from_secs(10),
        }
    }
}

impl<I, S> axum_server::accept::Accept<I, S> for ReloadingTlsAcceptor
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Send + 'static,
{
    type Stream = tokio_rustls::server::TlsStream<I>;
    type Service = S;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Self::Stream, S)>> + Send>>;

    fn accept(&self, stream: I, service: S) -> Self::Future {
        let acceptor = self.config.acceptor();
        let timeout = self.handshake_timeout;
        Box::pin(async move {
            let tls = tokio::time::timeout(timeout, acceptor.accept(stream))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out"))??;
            Ok((tls, service))
        })
    }
}

/// Serves `app` over HTTPS on `listener` until `handle` is told to shut
/// down, with the default [`ServerLimits`].
pub async fn serve_https(
    listener: std::net::TcpListener,
    tls: Arc<ReloadingServerConfig>,
    app: HttpRouter,
    handle: axum_server::Handle<SocketAddr>,
) -> io::Result<()> {
    serve_https_with(listener, tls, app, handle, &ServerLimits::default()).await
}

/// Serves `app` over HTTPS on `listener` with `limits` (header, idle,
/// request and handshake timeouts, header size, connection cap) until
/// `handle` is told to shut down.
pub async fn serve_https_with(
    listener: std::net::TcpListener,
    tls: Arc<ReloadingServerConfig>,
    app: HttpRouter,
    handle: axum_server::Handle<SocketAddr>,
    limits: &ServerLimits,
) -> io::Result<()> {
    let tls = ReloadingTlsAcceptor {
        config: tls,
        handshake_timeout: limits.handshake_timeout,
    };
    serving::server(listener, limits)?
        .acceptor(LimitedAcceptor::new(tls, limits))
        .handle(handle)
        .serve(serving::with_request_timeout(app, limits.request_timeout).into_make_service())
        .await
}
