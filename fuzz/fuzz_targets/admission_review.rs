//! AdmissionReview bodies, as the API server (or anyone reaching the
//! webhook's port) sends them, through the host's mutating and validating
//! handlers: any body gets an answer (a review or 400/413), never a panic.
//! No plugin is registered and none is waited for, so that each input runs
//! the decoding and the Cluster view, not a timer.
#![no_main]

use std::{sync::OnceLock, time::Duration};

use axum::{body::Body, http::Request};
use cnpgi_host::{
    registry::Registry,
    routing::{Router, RoutingPolicy},
    webhook::{AdmissionPaths, admission_routes},
};
use libfuzzer_sys::fuzz_target;
use tower::ServiceExt as _;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    app: axum::Router,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        let router = Router::new(std::sync::Arc::new(Registry::default()), RoutingPolicy::default())
            .with_arrival_wait(Duration::ZERO);
        let paths = AdmissionPaths::new("Cluster", "/mutate", "/validate");
        let app = runtime.block_on(async { admission_routes(router, &paths, Duration::from_secs(1)) });
        Fixture { runtime, app }
    })
}

fuzz_target!(|data: &[u8]| {
    let fixture = fixture();
    // The first byte picks the handler, the rest is the body.
    let Some((which, body)) = data.split_first() else {
        return;
    };
    let path = if which % 2 == 0 { "/mutate" } else { "/validate" };
    let request = Request::post(path)
        .header("content-type", "application/json")
        .body(Body::from(body.to_vec()))
        .unwrap();
    let response = fixture.runtime.block_on(fixture.app.clone().oneshot(request)).unwrap();
    let status = response.status().as_u16();
    assert!(
        matches!(status, 200 | 400 | 413 | 415 | 422),
        "unexpected status {status}"
    );
});
