//! The `admission_review` target: the host's admission webhook handlers.

use std::{
    sync::{Arc, OnceLock},
    time::Duration,
};

use axum::{body::Body, http::Request};
use cnpgi_host::{
    registry::Registry,
    routing::{Router, RoutingPolicy},
    webhook::{AdmissionPaths, admission_routes},
};
use tower::ServiceExt as _;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
}

// Built once: each input then runs the handlers, not a runtime's start-up.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime builds");
        let router =
            Router::new(Arc::new(Registry::default()), RoutingPolicy::default()).with_arrival_wait(Duration::ZERO);
        let paths = AdmissionPaths::new("Cluster", "/mutate", "/validate");
        let app = runtime.block_on(async { admission_routes(router, &paths, Duration::from_secs(1)) });
        Fixture { runtime, app }
    })
}

/// AdmissionReview bodies, as the API server (or anyone reaching the
/// webhook's port) sends them, through the host's mutating and validating
/// handlers: any body gets an answer (a review or 400/413), never a panic.
/// No plugin is registered and none is waited for, so that each input runs
/// the decoding and the Cluster view, not a timer.
///
/// The first byte picks the handler (even: mutate, odd: validate), the rest
/// is the body.
pub fn admission_review(data: &[u8]) {
    let fixture = fixture();
    let Some((which, body)) = data.split_first() else {
        return;
    };
    let path = if which % 2 == 0 { "/mutate" } else { "/validate" };
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .expect("a POST with a static path and header is a valid request");
    let response = fixture
        .runtime
        .block_on(fixture.app.clone().oneshot(request))
        .expect("an axum router's service is infallible");
    let status = response.status().as_u16();
    assert!(
        matches!(status, 200 | 400 | 413 | 415 | 422),
        "unexpected status {status}"
    );
}
