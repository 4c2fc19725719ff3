//! The real `cnpgi-operator` binary: `crd`, usage errors, and bad flags of
//! `run`. `run` itself is exercised by the end-to-end suite (tests/e2e),
//! against a real API server under the shipped RBAC and webhooks.

#![allow(clippy::unwrap_used)]

use std::process::Command;

use cnpgi_pluginhelper::testing::eventually;

const BIN: &str = env!("CARGO_BIN_EXE_cnpgi-operator");

#[test]
fn crd_prints_the_cluster_crd_as_yaml() {
    let output = Command::new(BIN).arg("crd").output().unwrap();
    assert!(output.status.success());
    let crd: serde_json::Value = serde_yaml_ng::from_slice(&output.stdout).unwrap();
    assert_eq!(crd["kind"], "CustomResourceDefinition");
    assert_eq!(crd["metadata"]["name"], "clusters.cnpgi.io");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["run", "--plugin-dir"][..],
        &["run", "--client-key=k"],
        &["frobnicate"],
    ] {
        let output = Command::new(BIN).args(args).output().unwrap();
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let output = Command::new(BIN).args(["run", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--webhook-cert-dir",
        "--plugin-dir",
        "--plugin",
        "--fail-open",
        "--metrics-bind-address",
        "--health-probe-bind-address",
        "--dial-override",
    ] {
        assert!(help.contains(flag), "{flag}");
    }
}

#[test]
fn a_bad_static_plugin_is_a_clear_error() {
    let output = Command::new(BIN)
        .args([
            "run",
            "--plugin",
            "hello=https://plugin:9090",
            "--disable-controller",
            "--kubernetes-plugins=false",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--client-cert"), "{stderr}");
}

#[test]
fn a_bad_dial_override_is_a_clear_error() {
    let output = Command::new(BIN)
        .args([
            "run",
            "--dial-override",
            "hello=127.0.0.1:9090",
            "--disable-controller",
            "--disable-webhooks",
            "--kubernetes-plugins=false",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--dial-override") && stderr.contains("<service>.<namespace>.svc:<port>"),
        "{stderr}"
    );
}

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The ports of `run`'s plain HTTP servers.
#[derive(Clone, Copy)]
struct Ports {
    /// `/healthz` and `/readyz`.
    probes: u16,
    /// `/metrics`.
    metrics: u16,
}

/// `run` with only its health probe and metrics servers (no Kubernetes, no
/// webhooks, no reconciler), plus `extra` flags; waits until `/healthz`
/// answers.
async fn run_servers_only(extra: &[&str]) -> (cnpgi_pluginhelper::testing::ChildGuard, Ports) {
    let ports = Ports {
        probes: free_port(),
        metrics: free_port(),
    };
    let child = cnpgi_pluginhelper::testing::ChildGuard::spawn(
        Command::new(BIN)
            .args([
                "run",
                "--disable-webhooks",
                "--disable-controller",
                "--kubernetes-plugins=false",
                "--health-probe-bind-address",
                &format!("127.0.0.1:{}", ports.probes),
                "--metrics-bind-address",
                &format!("127.0.0.1:{}", ports.metrics),
            ])
            .args(extra),
    )
    .unwrap();
    eventually("run serves /healthz", std::time::Duration::from_secs(60), async || {
        get(ports.probes, "/healthz")
            .await
            .is_ok_and(|answer| answer.starts_with("HTTP/1.1 200"))
    })
    .await;
    (child, ports)
}

/// A plain HTTP/1.1 GET; the whole answer as text.
async fn get(port: u16, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: operator\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(10), stream.read_to_end(&mut answer)).await??;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Opens a connection to `port` and sends the start of a request whose
/// headers never end.
async fn half_open(port: u16) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: operator\r\nX-Slow: ")
        .await
        .unwrap();
    stream
}

/// Issue 24, point 2: 1,100 idle connections on the probe port, and as many
/// on the metrics port, do not make `/healthz` and `/readyz` unreachable
/// (the kubelet's liveness probe would restart the operator): each probe
/// is answered within its 1 s timeout, and `/metrics` too; every idle
/// connection is closed within the header timeout.
#[tokio::test]
async fn probes_answer_during_a_flood_of_idle_connections() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    // 2,200 sockets here, as many in `run` (which inherits the limit).
    let needed = 8192;
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    assert!(
        hard >= needed,
        "this test needs {needed} file descriptors; RLIMIT_NOFILE's hard limit is {hard} (ulimit -Hn)"
    );
    if soft < needed {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard).unwrap();
    }
    let (mut run, ports) = run_servers_only(&["--http-header-read-timeout-seconds", "3"]).await;
    // Each idle connection is watched from its connect on, by a task that
    // says when the server closed it.
    let mut watchers = tokio::task::JoinSet::new();
    for port in [ports.probes, ports.metrics] {
        for _ in 0..1100 {
            let mut tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let since = std::time::Instant::now();
            watchers.spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 16];
                match tokio::time::timeout(std::time::Duration::from_secs(10), tcp.read(&mut buf)).await {
                    Ok(Ok(0) | Err(_)) => Ok(since.elapsed()),
                    other => Err(format!("{other:?} after {:?}", since.elapsed())),
                }
            });
        }
    }
    let mut slowest = std::time::Duration::ZERO;
    for _ in 0..5 {
        for (port, path) in [
            (ports.probes, "/healthz"),
            (ports.probes, "/readyz"),
            (ports.metrics, "/metrics"),
        ] {
            let started = std::time::Instant::now();
            let answer = tokio::time::timeout(std::time::Duration::from_secs(1), get(port, path))
                .await
                .unwrap_or_else(|_| panic!("{path} did not answer within 1 s during the flood"))
                .unwrap_or_else(|e| panic!("{path} failed during the flood: {e}"));
            assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
            slowest = slowest.max(started.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    eprintln!("with 2,200 idle connections, the slowest probe or scrape took {slowest:?}");
    // Each idle connection is closed within the header timeout (3 s),
    // counted from accept, or earlier to make room for newer ones.
    let mut latest = std::time::Duration::ZERO;
    while let Some(closed) = watchers.join_next().await {
        let closed = closed
            .unwrap()
            .unwrap_or_else(|e| panic!("an idle connection was not closed: {e}"));
        latest = latest.max(closed);
    }
    eprintln!("every idle connection closed within {latest:?} of its connect");
    assert!(latest < std::time::Duration::from_millis(4500), "{latest:?}");
    let status = run.terminate(std::time::Duration::from_secs(20)).await.unwrap();
    assert!(status.success(), "{status:?}");
}

/// Probes and metrics are on separate ports, as kubebuilder does; `0`
/// serves neither; a bad address is a usage error naming the flag's value.
#[tokio::test]
async fn probes_and_metrics_have_separate_ports() {
    let (mut run, ports) = run_servers_only(&[]).await;
    assert!(get(ports.probes, "/readyz").await.unwrap().starts_with("HTTP/1.1 200"));
    assert!(get(ports.probes, "/metrics").await.unwrap().starts_with("HTTP/1.1 404"));
    assert!(
        get(ports.metrics, "/metrics")
            .await
            .unwrap()
            .starts_with("HTTP/1.1 200")
    );
    assert!(
        get(ports.metrics, "/healthz")
            .await
            .unwrap()
            .starts_with("HTTP/1.1 404")
    );
    let status = run.terminate(std::time::Duration::from_secs(20)).await.unwrap();
    assert!(status.success(), "{status:?}");

    let output = Command::new(BIN)
        .args(["run", "--metrics-bind-address", "localhost"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("\"localhost\" is not a listen address"), "{stderr}");
}

/// Half-open connections to /metrics (headers that never end) must not keep
/// the process alive after SIGTERM: the servers' grace is bounded (10 s by
/// default; Kubernetes kills the container 30 s after SIGTERM).
#[tokio::test]
async fn half_open_metrics_connections_do_not_delay_exit_after_sigterm() {
    let (mut run, ports) = run_servers_only(&[]).await;
    let mut held = Vec::new();
    for port in [ports.metrics, ports.probes] {
        for _ in 0..5 {
            held.push(half_open(port).await);
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let started = std::time::Instant::now();
    let status = run.terminate(std::time::Duration::from_secs(25)).await.unwrap();
    assert!(status.success(), "{status:?}");
    eprintln!("exited {:?} after SIGTERM", started.elapsed());
    drop(held);
}

/// A slowloris client (headers sent a few bytes at a time, never ending) is
/// cut off after the header read timeout (1 s here), while a legitimate
/// request on another connection is served meanwhile.
#[tokio::test]
async fn a_slowloris_connection_is_closed_while_others_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut run, ports) = run_servers_only(&["--http-header-read-timeout-seconds", "1"]).await;
    let port = ports.probes;
    let mut slow = half_open(port).await;
    let started = std::time::Instant::now();
    let closed_after = loop {
        // One more header byte every 200 ms: a trickle that never ends the head.
        if slow.write_all(b"a").await.is_err() {
            break started.elapsed();
        }
        let mut buf = [0u8; 512];
        // Data, EOF or an error: the server is done with this connection.
        if tokio::time::timeout(std::time::Duration::from_millis(200), slow.read(&mut buf))
            .await
            .is_ok()
        {
            break started.elapsed();
        }
        let answer = get(port, "/healthz").await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "the slow client is still connected"
        );
    };
    eprintln!("slowloris connection closed after {closed_after:?}");
    assert!(
        closed_after >= std::time::Duration::from_millis(900),
        "{closed_after:?}"
    );
    let status = run.terminate(std::time::Duration::from_secs(20)).await.unwrap();
    assert!(status.success(), "{status:?}");
}

/// A kubeconfig for an API server at `127.0.0.1:port`, with a token.
fn kubeconfig(dir: &std::path::Path, port: u16) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:{port}\n    insecure-skip-tls-verify: true\nusers:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n"
        ),
    )
    .unwrap();
    path
}

/// With the Kubernetes API unreachable (a closed loopback port), `/readyz`
/// says so, and SIGTERM still stops `run` within the grace period
/// (Kubernetes kills the container 30 s after SIGTERM).
#[tokio::test]
async fn sigterm_stops_run_while_the_api_is_unreachable() {
    let dir = tempfile::tempdir().unwrap();
    let config = kubeconfig(dir.path(), free_port());
    let port = free_port();
    let address = format!("127.0.0.1:{port}");
    let mut run = cnpgi_pluginhelper::testing::ChildGuard::spawn(
        Command::new(BIN)
            .args(["run", "--disable-webhooks", "--health-probe-bind-address", &address])
            .env("KUBECONFIG", &config),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let readyz = loop {
        if let Ok(answer) = get(port, "/readyz").await {
            break answer;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "run did not serve /readyz"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    // Give the watches time to fail against the closed port.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let readyz_later = get(port, "/readyz").await.unwrap();
    let signalled = std::time::Instant::now();
    let status = run.terminate(std::time::Duration::from_secs(20)).await.unwrap();
    eprintln!("exited {:?} after SIGTERM: {status:?}", signalled.elapsed());
    assert!(readyz.starts_with("HTTP/1.1 503"), "{readyz}");
    assert!(readyz_later.starts_with("HTTP/1.1 503"), "{readyz_later}");
    assert!(readyz_later.contains("Kubernetes API"), "{readyz_later}");
}
