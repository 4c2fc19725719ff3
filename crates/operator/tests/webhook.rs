//! The admission webhooks over real HTTPS, wired to real plugins: requests
//! carry `AdmissionReview` JSON as the API server sends it.

#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use base64::Engine;
use cnpgi_host::serving::ServerLimits;
use cnpgi_operator::webhook::{MUTATE_PATH, VALIDATE_PATH};
use common::{HELLO, HUNG, cluster, start, start_with};
use serde_json::{Value, json};

#[tokio::test]
async fn mutate_fills_in_defaults_with_a_base64_json_patch() {
    let webhook = start().await;
    let original = cluster(json!([{"name": HELLO}]));
    let response = webhook.review(MUTATE_PATH, "CREATE", original.clone(), None).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert_eq!(response["patchType"], "JSONPatch");
    let patch = base64::engine::general_purpose::STANDARD
        .decode(response["patch"].as_str().expect("patch is a base64 string"))
        .unwrap();
    let mut patched = original;
    cnpgi_core::patch::apply_patch_bytes(&mut patched, &patch).unwrap();
    assert_eq!(
        patched["spec"]["plugins"][0]["parameters"]["labels"],
        r#"{"plugin-metadata":"default"}"#
    );

    // Already defaulted: allowed without a patch.
    let response = webhook.review(MUTATE_PATH, "UPDATE", patched, None).await;
    assert_eq!(response["allowed"], true);
    assert!(response.get("patch").is_none(), "{response}");
    webhook.handle.shutdown();
}

#[tokio::test]
async fn validate_denies_the_upstream_mistake_and_a_labels_change() {
    let webhook = start().await;
    let mistake = cluster(json!([{"name": HELLO, "parameters": {
        "labels": "{\"first-label\": \"first-label-value\"}",
        "annotations": "{\n  \"first-annotation\": \"first-annotation-value\",\n  this is a mistake\n}\n"
    }}]));
    let response = webhook.review(VALIDATE_PATH, "CREATE", mistake, None).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(
        message.contains("spec.plugins[0].parameters.annotations: Invalid value:"),
        "{message}"
    );

    let old = cluster(json!([{"name": HELLO, "parameters": {"labels": "{\"a\":\"b\"}"}}]));
    let new = cluster(json!([{"name": HELLO, "parameters": {"labels": "{\"a\":\"c\"}"}}]));
    let response = webhook.review(VALIDATE_PATH, "UPDATE", new.clone(), Some(old)).await;
    assert_eq!(response["allowed"], false);
    let message = response["status"]["message"].as_str().unwrap();
    assert!(message.contains("spec.plugins[0].parameters.labels") && message.contains("Labels cannot be changed"));

    let response = webhook.review(VALIDATE_PATH, "CREATE", new, None).await;
    assert_eq!(response["allowed"], true, "{response}");
    webhook.handle.shutdown();
}

#[tokio::test]
async fn a_missing_plugin_is_denied_by_name_and_a_hung_one_within_the_deadline() {
    let webhook = start().await;
    let response = webhook
        .review(
            VALIDATE_PATH,
            "CREATE",
            cluster(json!([{"name": "missing.example.com"}])),
            None,
        )
        .await;
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("missing.example.com"),
        "{response}"
    );

    let started = std::time::Instant::now();
    let response = webhook
        .review(
            MUTATE_PATH,
            "CREATE",
            cluster(json!([{"name": HELLO}, {"name": HUNG}])),
            None,
        )
        .await;
    let elapsed = started.elapsed();
    assert_eq!(response["allowed"], false);
    assert!(
        response["status"]["message"]
            .as_str()
            .unwrap()
            .contains("within 700 ms"),
        "{response}"
    );
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    webhook.handle.shutdown();
}

#[tokio::test]
async fn malformed_bodies_get_400_with_a_reason() {
    let webhook = start().await;
    for (body, reason) in [
        (&b"not json"[..], "not an AdmissionReview"),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            "no request",
        ),
        (
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}"#,
            "not an AdmissionReview",
        ),
    ] {
        for path in [MUTATE_PATH, VALIDATE_PATH] {
            let (status, text) = webhook.post(path, body.to_vec()).await;
            let text = String::from_utf8_lossy(&text);
            assert_eq!(status, 400, "{path}: {text}");
            assert!(text.contains(reason), "{path}: {text}");
        }
    }
    // Still serving.
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    webhook.handle.shutdown();
}

/// An UPDATE carries the object and its old version: the API server allows
/// objects of up to 3 MiB, so a review can be over 6 MiB. The webhook
/// accepts up to 7 MiB, as controller-runtime's webhook server does, and
/// refuses larger bodies with 413.
#[tokio::test]
async fn a_6_mib_update_review_is_served_and_a_10_mib_body_gets_413() {
    let webhook = start().await;
    let big = |size: usize| {
        let mut object = cluster(json!([]));
        object["metadata"]["annotations"] = json!({"example.com/blob": "x".repeat(size)});
        object
    };
    let review = |size: usize| common::review_body("UPDATE", big(size), Some(big(size)));
    let six = review(3 * 1024 * 1024);
    assert!(six.len() > 6 * 1024 * 1024, "{}", six.len());
    for path in [VALIDATE_PATH, MUTATE_PATH] {
        let (status, body) = webhook.post(path, six.clone()).await;
        assert_eq!(
            status,
            200,
            "{path}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        let answer: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(answer["response"]["allowed"], true, "{path}");
    }

    let ten = review(5 * 1024 * 1024);
    assert!(ten.len() > 10 * 1024 * 1024, "{}", ten.len());
    for path in [VALIDATE_PATH, MUTATE_PATH] {
        let (status, body) = webhook.try_post(path, ten.clone()).await.unwrap();
        assert_eq!(status, 413, "{path}: {}", String::from_utf8_lossy(&body));
    }
    // Still serving.
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    webhook.handle.shutdown();
}

/// A client sending its headers byte by byte and never finishing them is
/// cut off after the header read timeout, while others are served; a TLS
/// connection that sends nothing is closed after the header read timeout;
/// at the cap, a new connection closes the oldest silent one.
#[tokio::test]
async fn slow_idle_and_excess_connections_are_closed_while_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(2),
        max_connections: 3,
        ..ServerLimits::default()
    };
    let webhook = start_with(&limits).await;

    let mut slow = webhook.connect().await;
    slow.write_all(b"POST /validate-cluster HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let closed_after = loop {
        if slow.write_all(b"a").await.is_err() {
            break started.elapsed();
        }
        let mut buf = [0u8; 512];
        // Data, EOF or an error: the server is done with this connection.
        if tokio::time::timeout(Duration::from_millis(200), slow.read(&mut buf))
            .await
            .is_ok()
        {
            break started.elapsed();
        }
        let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
        assert_eq!(response["allowed"], true);
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the slow client is still connected"
        );
    };
    eprintln!("slowloris TLS connection closed after {closed_after:?}");
    assert!(closed_after >= Duration::from_millis(900), "{closed_after:?}");
    drop(slow);

    // Idle after the handshake, no request at all: closed by the header
    // timer (1 s from accept), not the idle one (2 s).
    let mut idle = webhook.connect().await;
    let started = std::time::Instant::now();
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_secs(15), idle.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "{read:?}");
    let closed_after = started.elapsed();
    eprintln!("idle TLS connection closed after {closed_after:?}");
    assert!(closed_after < Duration::from_millis(1800), "{closed_after:?}");
    drop(idle);

    // Kept alive between requests: the idle timeout (2 s) from the end of
    // the last one, not the header timeout.
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(webhook.connect().await))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    for _ in 0..2 {
        let request = hyper::Request::post(VALIDATE_PATH)
            .header("host", "cnpgi-webhook.cnpgi-system.svc")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(common::review_body(
                "CREATE",
                cluster(json!([])),
                None,
            ))))
            .unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        drop(response);
        // Past the header timeout: still open.
        tokio::time::sleep(Duration::from_millis(1300)).await;
    }
    let last = std::time::Instant::now() - Duration::from_millis(1300);
    let ended = tokio::time::timeout(Duration::from_secs(5), connection).await;
    assert!(ended.is_ok(), "the kept-alive connection was not closed when idle");
    let idle_for = last.elapsed();
    eprintln!("kept-alive connection closed {idle_for:?} after its last request");
    assert!(
        idle_for >= Duration::from_millis(1900) && idle_for < Duration::from_millis(3000),
        "{idle_for:?}"
    );

    // The cap: three silent connections held; a fourth, a client's, is
    // served, and the oldest silent one is closed to make room.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(tokio::net::TcpStream::connect(webhook.address).await.unwrap());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    let read = tokio::time::timeout(Duration::from_millis(500), held[0].read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0) | Err(_))), "the oldest is closed: {read:?}");
    for newer in &mut held[1..] {
        let read = tokio::time::timeout(Duration::from_millis(100), newer.read(&mut buf)).await;
        assert!(read.is_err(), "a newer silent connection is still open: {read:?}");
    }
    drop(held);
    webhook.handle.shutdown();
}

/// Issue 24, point 4: connections closed at the cap are logged once every
/// few seconds with their count, not one line each.
#[tokio::test]
async fn connections_closed_at_the_cap_are_logged_once_with_a_count() {
    use tokio::io::AsyncReadExt;
    let (log, _guard) = cnpgi_pluginhelper::testing::CapturedLog::install();
    let limits = ServerLimits {
        max_connections: 3,
        ..ServerLimits::default()
    };
    let webhook = start_with(&limits).await;
    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(tokio::net::TcpStream::connect(webhook.address).await.unwrap());
    }
    // 47 were closed to make room: wait until the client sees it.
    let mut closed = 0;
    for tcp in &mut held {
        let mut buf = [0u8; 16];
        if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut buf)).await {
            closed += 1;
        }
    }
    assert_eq!(closed, 47);
    let lines = log.lines_with_all(&["WARN", "connection"]);
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(
        lines[0].contains("connection cap reached") && lines[0].contains("closed=1"),
        "{}",
        lines[0]
    );
    // A client is still served.
    let response = webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    assert_eq!(response["allowed"], true);
    webhook.handle.shutdown();
}

/// Issue 24, point 2: admission requests show in controller-runtime's
/// webhook metrics, by path and HTTP status, with their latency.
#[tokio::test]
async fn webhook_requests_are_measured_with_controller_runtime_names() {
    let metrics = cnpgi_host::metrics::Metrics::default();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let webhook = common::start_observed(&ServerLimits::default(), Some(metrics)).await;
    let response = webhook
        .review(VALIDATE_PATH, "CREATE", cluster(json!([{"name": HELLO}])), None)
        .await;
    assert_eq!(response["allowed"], true);
    webhook.review(MUTATE_PATH, "CREATE", cluster(json!([])), None).await;
    let (status, _) = webhook.post(VALIDATE_PATH, b"not JSON".to_vec()).await;
    assert_eq!(status, 400);

    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    for line in [
        r#"controller_runtime_webhook_requests_total{webhook="/validate-cluster",code="200"} 1"#,
        r#"controller_runtime_webhook_requests_total{webhook="/validate-cluster",code="400"} 1"#,
        r#"controller_runtime_webhook_requests_total{webhook="/mutate-cluster",code="200"} 1"#,
        r#"controller_runtime_webhook_latency_seconds_count{webhook="/validate-cluster"} 2"#,
        r#"controller_runtime_webhook_latency_seconds_bucket{le="10.0",webhook="/mutate-cluster"} 1"#,
        r#"controller_runtime_webhook_requests_in_flight{webhook="/validate-cluster"} 0"#,
    ] {
        assert!(text.contains(line), "{line} missing from:\n{text}");
    }
    webhook.handle.shutdown();
}

/// An HTTP/2 client (ALPN `h2`, as the API server's) that sends the
/// connection preface and its SETTINGS, then no request, is closed within
/// the header timeout counted from accept: HTTP/2 framing is not a request.
#[tokio::test]
async fn an_http2_connection_without_a_request_is_closed_within_the_header_timeout() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let limits = ServerLimits {
        header_read_timeout: Duration::from_secs(1),
        idle_timeout: Duration::from_secs(3),
        ..ServerLimits::default()
    };
    let webhook = start_with(&limits).await;
    let started = std::time::Instant::now();
    let mut tls = webhook.try_connect(&webhook.tls_connector(b"h2")).await.unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // The preface, then an empty SETTINGS frame (length 0, type 4, stream 0).
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let mut received = 0;
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 1024];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                // The server's SETTINGS and its acknowledgement of ours.
                Ok(n) => received += n,
            }
        }
    })
    .await;
    let after = started.elapsed();
    eprintln!("silent HTTP/2 connection closed after {after:?} ({received} bytes of framing received)");
    assert!(closed.is_ok(), "still open after 10 s");
    assert!(received > 0, "the server never spoke HTTP/2");
    assert!(
        after >= Duration::from_millis(900) && after < Duration::from_millis(1800),
        "{after:?}"
    );
    webhook.handle.shutdown();
}
