//! The real `cnpg-i-hello-world` binary: flags, environment variables, exit
//! codes, serving over mutual TLS and a Unix socket, and SIGTERM.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    net::TcpListener,
    path::Path,
    process::{Command, Output, Stdio},
    time::Duration,
};

use cnpgi_pluginhelper::{
    proto::identity::v1::{GetPluginMetadataRequest, identity_client::IdentityClient},
    testing::{ChildGuard, TestCertificates, TestError, connect_tls, connect_unix, eventually},
};
use common::PLUGIN;
use tonic::transport::Channel;

const BIN: &str = env!("CARGO_BIN_EXE_cnpg-i-hello-world");

fn run(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("SERVER_ADDRESS")
        .env_remove("PLUGIN_PATH")
        .output()
        .unwrap()
}

#[test]
fn misuse_is_a_usage_error_with_exit_code_2() {
    for (args, expected) in [
        (&[][..], "Usage"),
        (&["plugin", "--server-address=:9090"][..], "--server-cert"),
        (
            &["plugin", "--server-address=:9090", "--server-cert=a", "--server-key=b"][..],
            "--client-cert",
        ),
        (
            &["plugin", "--plugin-path=/tmp", "--server-cert=a"][..],
            "cannot be used with",
        ),
        (&["plugin", "--log-format=xml"][..], "invalid value 'xml'"),
        (&["serve"][..], "unrecognized subcommand"),
    ] {
        let output = run(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: expected {expected:?} in {stderr}");
    }
}

/// `--version` prints the plugin's version and `--help` its description,
/// from its metadata (there was no `--version`, and the help said only
/// "A CNPG-I plugin").
#[test]
fn version_and_help_describe_the_plugin() {
    let output = run(&["--version"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("cnpg-i-hello-world {}\n", env!("CARGO_PKG_VERSION"))
    );
    let output = run(&["--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(
        help.contains(
            "Hello World (Rust) (cnpg-i-hello-world.cloudnative-pg.io): Adds labels, annotations and a sidecar \
             to the instance Pods of a Cluster"
        ) && help.contains("`cnpg-i-hello-world plugin` serves it over gRPC"),
        "{help}"
    );
}

#[test]
fn help_lists_flags_and_their_environment_variables() {
    let output = run(&["plugin", "--help"]);
    assert!(output.status.success());
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--server-address",
        "--server-cert",
        "--server-key",
        "--client-cert",
        "--plugin-path",
        "--log-format",
    ] {
        assert!(help.contains(flag), "{flag} missing from help");
    }
    for env in [
        "SERVER_ADDRESS",
        "SERVER_CERT",
        "SERVER_KEY",
        "CLIENT_CERT",
        "PLUGIN_PATH",
    ] {
        assert!(help.contains(env), "{env} missing from help");
    }
}

#[test]
fn unusable_certificate_fails_at_start_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let bogus = dir.path().join("tls.crt");
    std::fs::write(&bogus, "not a certificate").unwrap();
    let bogus = bogus.to_str().unwrap();
    let output = run(&[
        "plugin",
        "--server-address=127.0.0.1:0",
        &format!("--server-cert={bogus}"),
        &format!("--server-key={bogus}"),
        &format!("--client-cert={bogus}"),
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("server certificate") && stderr.contains(bogus),
        "{stderr}"
    );
}

#[test]
fn missing_socket_directory_fails_clearly() {
    let output = run(&["plugin", "--plugin-path=/nonexistent/plugins"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("/nonexistent/plugins") && stderr.contains("does not exist"),
        "{stderr}"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The name the plugin gives in `GetPluginMetadata`, over a fresh channel.
async fn plugin_name(channel: Result<Channel, TestError>) -> Result<String, String> {
    IdentityClient::new(channel.map_err(|e| e.to_string())?)
        .get_plugin_metadata(GetPluginMetadataRequest {})
        .await
        .map(|r| r.into_inner().name)
        .map_err(|e| e.to_string())
}

async fn serves_over_mtls(configure: impl FnOnce(&mut Command, &TestCertificates, u16)) {
    let certs = TestCertificates::generate("cnpg-i-hello-world").unwrap();
    let port = free_port();
    let mut command = Command::new(BIN);
    command.arg("plugin").stdout(Stdio::null()).stderr(Stdio::null());
    configure(&mut command, &certs, port);
    let mut child = ChildGuard::spawn(&mut command).unwrap();
    let address = format!("127.0.0.1:{port}").parse().unwrap();
    let name = eventually("the plugin answers over mTLS", Duration::from_secs(20), async || {
        plugin_name(connect_tls(address, certs.client_config().unwrap(), "cnpg-i-hello-world").await).await
    })
    .await;
    assert_eq!(name, PLUGIN);
    let status = child.terminate(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}

#[tokio::test]
async fn serves_over_mtls_with_flags() {
    serves_over_mtls(|command, certs, port| {
        command.args([
            format!("--server-address=127.0.0.1:{port}"),
            format!("--server-cert={}", certs.server.cert_path.display()),
            format!("--server-key={}", certs.server.key_path.display()),
            format!("--client-cert={}", certs.client.cert_path.display()),
            "--log-format=json".into(),
        ]);
    })
    .await;
}

#[tokio::test]
async fn serves_over_mtls_with_environment_variables() {
    serves_over_mtls(|command, certs, port| {
        command
            .env("SERVER_ADDRESS", format!("127.0.0.1:{port}"))
            .env("SERVER_CERT", &certs.server.cert_path)
            .env("SERVER_KEY", &certs.server.key_path)
            .env("CLIENT_CERT", &certs.client.cert_path);
    })
    .await;
}

#[tokio::test]
async fn serves_on_a_unix_socket_and_removes_it_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(PLUGIN);
    let mut child = ChildGuard::spawn(
        Command::new(BIN)
            .arg("plugin")
            .arg(format!("--plugin-path={}", dir.path().display()))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap();
    let name = eventually(
        "the plugin answers on its socket",
        Duration::from_secs(20),
        async || plugin_name(connect_unix(Path::new(&socket)).await).await,
    )
    .await;
    assert_eq!(name, PLUGIN);
    let status = child.terminate(Duration::from_secs(10)).await.unwrap();
    assert!(status.success(), "{status:?}");
    assert!(!socket.exists(), "socket file left behind");
}
