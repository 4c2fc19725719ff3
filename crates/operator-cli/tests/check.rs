//! `cnpgi-operator check-plugin` with real plugin binaries: hello-world
//! passes; deliberately broken plugins fail with the right reason.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Command, Output};

use common::{BIN, workspace_binary};

fn check(plugin: &str, mode: Option<&str>) -> Output {
    check_with(plugin, mode, &[])
}

fn check_with(plugin: &str, mode: Option<&str>, flags: &[&str]) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(["check-plugin", "--plugin-timeout-seconds=2"])
        .args(flags)
        .arg(format!("--plugin-exec={}", workspace_binary(plugin).display()));
    if let Some(mode) = mode {
        command.env("CNPGI_BROKEN_MODE", mode);
    }
    command.output().unwrap()
}

fn failures(output: &Output) -> Vec<String> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("FAIL"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn hello_world_passes_every_check() {
    let output = check("cnpg-i-hello-world", None);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(table.contains("0 failed"), "{table}");
    for check in [
        "metadata name equals the discovered name",
        "MutateCluster: idempotent",
        "LifecycleHook Pod CREATE: idempotent",
        "garbage object is refused",
        "garbage Cluster is refused",
        "every call answered within the deadline",
    ] {
        assert!(
            table.lines().any(|l| l.contains("PASS") && l.contains(check)),
            "{check}: {table}"
        );
    }
}

#[test]
fn the_summary_ends_with_a_newline() {
    let output = check("cnpg-i-hello-world", None);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(table.ends_with("28 passed, 0 failed\n"), "{table:?}");
}

#[test]
fn garbage_refused_with_another_code_is_advice_unless_strict() {
    let output = check("cnpgi-broken-plugin", Some("unknown-on-garbage"));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(
        table.lines().any(|l| l.contains("NOTE")
            && l.contains("garbage object is refused")
            && l.contains("Unknown")
            && l.contains("INVALID_ARGUMENT is recommended")),
        "{table}"
    );
    assert!(table.contains("0 failed (1 with a recommendation, NOTE)\n"), "{table}");

    let output = check_with("cnpgi-broken-plugin", Some("unknown-on-garbage"), &["--strict"]);
    assert_eq!(output.status.code(), Some(1));
    let failures = failures(&output);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("garbage object is refused"), "{failures:?}");
}

#[test]
fn a_patch_that_does_not_apply_fails() {
    let output = check("cnpgi-broken-plugin", Some("bad-patch"));
    assert_eq!(output.status.code(), Some(1));
    let failures = failures(&output);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].contains("LifecycleHook Pod CREATE: patch is valid and applies"));
    assert!(failures[0].contains("does not apply"));
}

#[test]
fn a_bad_name_fails() {
    let output = check("cnpgi-broken-plugin", Some("bad-name"));
    assert_eq!(output.status.code(), Some(1));
    let failures = failures(&output);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("metadata name is a valid plugin name") && f.contains("'_'")),
        "{failures:?}"
    );
    assert!(
        failures.iter().any(|f| f.contains("calls itself \"Broken_Plugin\"")),
        "{failures:?}"
    );
}

#[test]
fn a_hanging_plugin_fails_on_the_deadline() {
    let output = check("cnpgi-broken-plugin", Some("hang"));
    assert_eq!(output.status.code(), Some(1));
    let failures = failures(&output);
    assert!(
        failures
            .iter()
            .any(|f| f.contains("LifecycleHook Pod CREATE") && f.contains("no answer within 2000 ms")),
        "{failures:?}"
    );
    assert!(
        failures
            .iter()
            .any(|f| f.contains("every call answered within the deadline")),
        "{failures:?}"
    );
}

#[test]
fn no_plugin_or_a_plugin_that_cannot_start_exits_2() {
    let output = Command::new(BIN).arg("check-plugin").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    // A program that is no plugin and prints nothing: the error says what
    // was expected of it, not a dangling "before serving:".
    for program in ["/bin/false", "/bin/true"] {
        let output = Command::new(BIN)
            .args(["check-plugin", &format!("--plugin-exec={program}")])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(&format!("plugin {program} exited"))
                && stderr.contains("before serving, printing nothing: is it a CNPG-I plugin?")
                && stderr.contains(&format!("`{program} plugin --plugin-path DIR`")),
            "{stderr}"
        );
    }
}

/// `--cluster` nested 100,000 levels deep is refused at once, naming the file
/// (issue 13, point 12).
#[test]
fn deeply_nested_cluster_file_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("deep.yaml");
    std::fs::write(&path, format!("spec: {}{}\n", "[".repeat(100_000), "]".repeat(100_000))).unwrap();
    let output = check_with("cnpg-i-hello-world", None, &["--cluster", path.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(path.to_str().unwrap()) && stderr.contains("nested more than 256 levels deep"),
        "{stderr}"
    );
}

/// A plugin serving WAL, Backup, RestoreJobHooks, Postgres and Metrics,
/// given the Cluster with its parameters: every service checked, all pass.
#[test]
fn every_advertised_service_is_checked() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(
        &cluster,
        format!(
            "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: pg\nspec:\n  plugins:\n  - name: cnpgi-dir-plugin.example.com\n    parameters:\n      archive: {}\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let output = check_with("cnpgi-dir-plugin", None, &["--cluster", cluster.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(table.contains(" 0 failed\n"), "{table}");
    for (check, detail) in [
        (
            "advertised WAL service answers GetCapabilities",
            "TYPE_ARCHIVE_WAL, TYPE_RESTORE_WAL",
        ),
        ("WAL/Archive: garbage Cluster is refused", "INVALID_ARGUMENT"),
        ("WAL/Restore: a file the archive lacks is refused", "NOT_FOUND"),
        ("Backup/Backup: garbage Cluster is refused", "INVALID_ARGUMENT"),
        (
            "RestoreJobHooks/Restore: garbage Cluster is refused",
            "INVALID_ARGUMENT",
        ),
        (
            "EnrichConfiguration: answers nothing or the complete map",
            "empty (no change)",
        ),
        ("Metrics/Define: definitions are usable", "2 metric(s)"),
        (
            "Metrics/Collect: values fit their definitions",
            "5 value(s), each as defined",
        ),
        ("unadvertised Operator service is absent", "UNIMPLEMENTED"),
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.contains("PASS") && l.contains(check) && l.ends_with(detail)),
            "{check}: {detail}\n{table}"
        );
    }
    // Nothing was archived, backed up or restored by checking it.
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "only the Cluster file"
    );

    // Without its parameters, collecting fails, as it would under CloudNativePG.
    let output = check("cnpgi-dir-plugin", None);
    let failures = failures(&output);
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(
        failures[0].contains("Metrics/Collect") && failures[0].contains("the parameter archive is not set"),
        "{failures:?}"
    );
}

#[test]
fn advertised_but_unserved_or_unusable_services_fail() {
    for (mode, name, reason) in [
        (
            "unserved-wal",
            "advertised WAL service answers GetCapabilities",
            "the service is not served",
        ),
        (
            "unserved-archive",
            "WAL/Archive: garbage Cluster is refused",
            "advertised, but answers UNIMPLEMENTED",
        ),
        (
            "bad-metrics",
            "Metrics/Define: definitions are usable",
            "metric broken_metric has no value_type",
        ),
        (
            "partial-enrich",
            "EnrichConfiguration: answers nothing or the complete map",
            "has none of the 3 parameters sent, only wal_level",
        ),
    ] {
        let output = check("cnpgi-broken-plugin", Some(mode));
        assert_eq!(output.status.code(), Some(1), "{mode}");
        let failures = failures(&output);
        assert_eq!(failures.len(), 1, "{mode}: {failures:?}");
        assert!(
            failures[0].contains(name) && failures[0].contains(reason),
            "{mode}: {failures:?}"
        );
    }
}

/// `--cluster` holding what is not a Cluster, nothing, or a Cluster naming a
/// plugin not given is refused before any check, naming the file and field,
/// as `render` refuses them (issue 30).
#[test]
fn a_cluster_file_that_is_not_one_or_names_another_plugin_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text, expected) in [
        (
            "deployment.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n",
            "holds a Deployment of apiVersion apps/v1, not a Cluster",
        ),
        ("empty.yaml", "", "is empty: expected a Cluster"),
        (
            "misspelt.yaml",
            "apiVersion: cnpgi.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  plugins:\n  - name: cnpg-i-helo-world.cloudnative-pg.io\n",
            "spec.plugins[0].name is cnpg-i-helo-world.cloudnative-pg.io, which is none of the plugins given",
        ),
    ] {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let output = check_with("cnpg-i-hello-world", None, &["--cluster", path.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{file}: {stderr}");
        assert!(
            stderr.contains(&format!("--cluster: {}", path.display())) && stderr.contains(expected),
            "{file}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{file}: no check ran");
    }
}

/// A Cluster whose parameters the plugin refuses: its hooks refusing it with
/// INVALID_ARGUMENT is right, not a failure; the refusal is a NOTE naming
/// the field (issue 30).
#[test]
fn a_plugin_refusing_a_cluster_its_validation_refuses_passes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(
        &path,
        "apiVersion: cnpgi.io/v1\nkind: Cluster\nmetadata: {name: c}\nspec:\n  plugins:\n  - name: cnpg-i-hello-world.cloudnative-pg.io\n    parameters:\n      labels: not json\n",
    )
    .unwrap();
    let output = check_with("cnpg-i-hello-world", None, &["--cluster", path.to_str().unwrap()]);
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{table}");
    assert!(
        table.lines().any(|l| l.contains("NOTE")
            && l.contains("the Cluster sent passes the plugin's validation")
            && l.contains("spec.plugins[0].labels: invalid JSON value")),
        "{table}"
    );
    assert!(
        table.lines().any(|l| l.contains("PASS")
            && l.contains("LifecycleHook Pod CREATE: patch is valid and applies")
            && l.contains("refuses the Cluster its validation refuses")),
        "{table}"
    );
}
