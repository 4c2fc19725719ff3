//! The real `cnpgi-operator` binary: `crd`, usage errors, and bad flags of
//! `run`. `run` itself is exercised by the end-to-end suite (tests/e2e),
//! against a real API server under the shipped RBAC and webhooks.

#![allow(clippy::unwrap_used)]

use std::process::Command;

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
        "--metrics-address",
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
