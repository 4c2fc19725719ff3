//! `cnpgi-operator render` with the real hello-world binary: the README's
//! command, the mistake, a labels change, `--diff`, plugin sources, and
//! plugins that fail.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    sync::OnceLock,
    time::{Duration, Instant},
};

use common::{BIN, workspace_binary};

use cnpgi_pluginhelper::testing::{ChildGuard, TestCertificates};
use serde_json::Value;

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

/// The hello-world binary, built once if needed (it belongs to another package).
fn hello_world() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| workspace_binary("cnpg-i-hello-world"))
}

fn example(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hello-world/clusters")
        .join(name)
}

fn render(args: &[&str]) -> Output {
    Command::new(BIN).arg("render").args(args).output().unwrap()
}

fn documents(stdout: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(stdout);
    text.split("---\n")
        .filter(|doc| !doc.trim().is_empty())
        .map(|doc| serde_yaml_ng::from_str(doc).unwrap())
        .collect()
}

fn exec_flag() -> String {
    format!("--plugin-exec={}", hello_world().display())
}

#[test]
fn renders_the_plain_example_with_defaults_labels_and_the_sidecar() {
    let output = render(&[example("cluster-example.yaml").to_str().unwrap(), &exec_flag()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("starting plugin"), "progress line on stderr: {stderr}");
    let docs = documents(&output.stdout);
    assert_eq!(docs.len(), 4, "the Cluster and three Pods");
    let cluster = &docs[0];
    assert_eq!(cluster["kind"], "Cluster");
    assert_eq!(
        cluster["spec"]["plugins"][0]["parameters"]["labels"],
        r#"{"plugin-metadata":"default"}"#
    );
    assert_eq!(cluster["status"]["pluginStatus"][0]["status"], r#"{"enabled":true}"#);
    for (i, pod) in docs[1..].iter().enumerate() {
        assert_eq!(pod["kind"], "Pod");
        assert_eq!(pod["metadata"]["name"], format!("cluster-example-{}", i + 1));
        assert_eq!(pod["metadata"]["labels"]["plugin-metadata"], "default");
        assert_eq!(pod["metadata"]["annotations"]["plugin-metadata"], "default");
        let pauser = &pod["spec"]["initContainers"][0];
        assert_eq!(
            (pauser["name"].as_str(), pauser["restartPolicy"].as_str()),
            (Some("pauser"), Some("Always"))
        );
    }
}

#[test]
fn the_mistake_exits_1_naming_the_field() {
    let output = render(&[
        example("cluster-example-with-mistake.yaml").to_str().unwrap(),
        &exec_flag(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("spec.plugins[0].parameters.annotations: Invalid value:"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());
}

#[test]
fn a_labels_change_is_refused_with_old() {
    let output = render(&[
        example("cluster-example-labels-changed.yaml").to_str().unwrap(),
        "--old",
        example("cluster-example-with-parameters.yaml").to_str().unwrap(),
        &exec_flag(),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("spec.plugins[0].parameters.labels") && stderr.contains("Labels cannot be changed"));
    // The same file as a creation is fine.
    let output = render(&[
        example("cluster-example-labels-changed.yaml").to_str().unwrap(),
        &exec_flag(),
    ]);
    assert!(output.status.success());
}

#[test]
fn diff_shows_each_plugin_patch_and_a_coloured_diff() {
    let output = render(&[
        example("cluster-example-with-parameters.yaml").to_str().unwrap(),
        &exec_flag(),
        "--diff",
        "--color=always",
    ]);
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains(&format!("# LifecycleHook CREATE on Pod cluster-example-1 by {HELLO}")),
        "{text}"
    );
    assert!(text.contains("\"path\": \"/metadata/labels/first-label\""), "{text}");
    assert!(text.contains("\x1b[32m+"), "green additions: {text}");
    assert!(text.contains("pause:3.10"), "{text}");
    let plain = render(&[
        example("cluster-example.yaml").to_str().unwrap(),
        &exec_flag(),
        "--diff",
    ]);
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(!text.contains('\x1b'), "no colour when not a terminal");
    assert!(
        text.contains(&format!("# MutateCluster on the Cluster by {HELLO}")),
        "{text}"
    );
    assert!(
        text.contains("+      labels: '{\"plugin-metadata\":\"default\"}'"),
        "{text}"
    );
}

#[test]
fn plugins_that_fail_or_are_missing_exit_2_with_their_name() {
    let output = render(&[
        example("cluster-example.yaml").to_str().unwrap(),
        "--plugin-exec=/bin/false",
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/bin/false"));

    let output = render(&[example("cluster-example.yaml").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(HELLO) && stderr.contains("no plugin was given"),
        "{stderr}"
    );

    let output = render(&["/nonexistent.yaml", &exec_flag()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("/nonexistent.yaml"));
}

/// Starts hello-world with `args` and waits until `ready` holds.
fn start_hello_world(args: &[String], ready: impl Fn() -> bool) -> ChildGuard {
    let child = ChildGuard::spawn(
        Command::new(hello_world())
            .arg("plugin")
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !ready() {
        assert!(Instant::now() < deadline, "hello-world did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

#[test]
fn plugins_from_a_socket_directory_a_unix_url_and_an_https_url() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join(HELLO);
    let sidecar = start_hello_world(&[format!("--plugin-path={}", dir.path().display())], || socket.exists());
    let cluster = example("cluster-example.yaml");
    let output = render(&[
        cluster.to_str().unwrap(),
        &format!("--plugin-dir={}", dir.path().display()),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let output = render(&[
        cluster.to_str().unwrap(),
        &format!("--plugin={HELLO}=unix://{}", socket.display()),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    drop(sidecar);

    let certs = TestCertificates::generate("hello-world.cnpg-system.svc").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let remote = start_hello_world(
        &[
            format!("--server-address=127.0.0.1:{port}"),
            format!("--server-cert={}", certs.server.cert_path.display()),
            format!("--server-key={}", certs.server.key_path.display()),
            format!("--client-cert={}", certs.client.cert_path.display()),
        ],
        || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    );
    let output = render(&[
        cluster.to_str().unwrap(),
        &format!("--plugin={HELLO}=https://127.0.0.1:{port}"),
        &format!("--client-cert={}", certs.client.cert_path.display()),
        &format!("--client-key={}", certs.client.key_path.display()),
        &format!("--server-ca={}", certs.server.cert_path.display()),
        "--server-name=hello-world.cnpg-system.svc",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(documents(&output.stdout).len(), 4);
    drop(remote);
}

/// A Cluster file of 100 MB (it took 15 s and 517 MB to parse): refused
/// before it is read, with exit 2 (issue 24, point 4).
#[test]
fn an_oversized_cluster_file_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.yaml");
    let mut text = String::from("kind: Cluster\nmetadata:\n  annotations:\n");
    let line = format!("    a: {}\n", "x".repeat(1000));
    while text.len() <= 17 << 20 {
        text.push_str(&line);
    }
    std::fs::write(&path, text).unwrap();
    let output = render(&[path.to_str().unwrap(), &exec_flag()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("huge.yaml is larger than 16 MiB; refusing to read it"),
        "{stderr}"
    );
}

/// A YAML file nested 100,000 levels deep: parsing it is quadratic in the
/// depth (20–60 s); render refuses it at once, naming the file (issue 13, point 12).
#[test]
fn deeply_nested_yaml_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let deep = 100_000;
    for (name, open, close) in [("flow-sequence.yaml", "[", "]"), ("flow-mapping.yaml", "{a: ", "}")] {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("kind: Cluster\nspec: {}1{}\n", open.repeat(deep), close.repeat(deep)),
        )
        .unwrap();
        let output = render(&[path.to_str().unwrap(), &exec_flag()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains(path.to_str().unwrap()) && stderr.contains("nested more than 256 levels deep"),
            "{name}: {stderr}"
        );
        // The same for the old Cluster of a change.
        let output = render(&[
            example("cluster-example.yaml").to_str().unwrap(),
            "--old",
            path.to_str().unwrap(),
            &exec_flag(),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("nested more than 256 levels deep"),
            "{name} as --old: {stderr}"
        );
    }
}

/// `spec.postgresql.parameters` through the plugins' EnrichConfiguration,
/// on every Pod, with hello-world's lifecycle hooks applied as well.
#[test]
fn the_enriched_postgresql_configuration_is_on_the_pods() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    std::fs::write(
        &cluster,
        format!(
            "apiVersion: cnpgi.io/v1\nkind: Cluster\nmetadata:\n  name: pg\nspec:\n  instances: 2\n  postgresql:\n    parameters:\n      max_connections: \"200\"\n  plugins:\n  - name: {HELLO}\n  - name: cnpgi-dir-plugin.example.com\n    parameters:\n      enrich: wal_level=logical,archive_timeout=60s\n"
        ),
    )
    .unwrap();
    let output = render(&[
        cluster.to_str().unwrap(),
        &exec_flag(),
        &format!("--plugin-exec={}", workspace_binary("cnpgi-dir-plugin").display()),
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let documents = documents(&output.stdout);
    assert_eq!(documents.len(), 3, "the Cluster and two Pods");
    for pod in &documents[1..] {
        assert_eq!(
            pod["metadata"]["annotations"]["cnpgi.io/postgresqlConfiguration"],
            r#"{"archive_timeout":"60s","max_connections":"200","wal_level":"logical"}"#,
            "{pod}"
        );
        assert!(pod["metadata"]["annotations"]["cnpgi.io/pluginsHash"].is_string());
        assert_eq!(
            pod["spec"]["initContainers"][0]["name"], "pauser",
            "hello-world's hooks still ran"
        );
    }
    // Its status entry lists every capability, as CloudNativePG writes it.
    let entry = documents[0]["status"]["pluginStatus"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "cnpgi-dir-plugin.example.com")
        .unwrap()
        .clone();
    assert_eq!(
        entry["walCapabilities"],
        serde_json::json!(["TYPE_ARCHIVE_WAL", "TYPE_RESTORE_WAL"])
    );
    assert_eq!(entry["backupCapabilities"], serde_json::json!(["TYPE_BACKUP"]));
    assert_eq!(entry["restoreJobHookCapabilities"], serde_json::json!(["KIND_RESTORE"]));
    // The template shown by --diff carries it: the lifecycle hooks see it.
    let diff = render(&[
        cluster.to_str().unwrap(),
        &exec_flag(),
        &format!("--plugin-exec={}", workspace_binary("cnpgi-dir-plugin").display()),
        "--diff",
    ]);
    let text = String::from_utf8_lossy(&diff.stdout);
    assert!(text.contains("cnpgi.io/postgresqlConfiguration"), "{text}");
}

/// Writes `text` as `name` in a fresh temporary directory.
fn input_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

/// A Pod (or a Cluster of another API group) is not rendered as a Cluster
/// with "instance Pods" of its own: exit 2, naming the file, what it holds
/// and the kinds expected; nothing on standard output. This exited 0 and
/// rendered the Pod before.
#[test]
fn an_object_of_another_kind_is_refused_naming_the_kind_expected() {
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\nspec:\n  containers: [{name: a, image: b}]\n";
    let other_group = "apiVersion: acid.zalan.do/v1\nkind: Cluster\nmetadata:\n  name: c\nspec: {}\n";
    let no_kind = "metadata:\n  name: c\nspec: {}\n";
    for (name, text, holds) in [
        ("pod.yaml", pod, "holds a Pod of apiVersion v1"),
        (
            "zalando.yaml",
            other_group,
            "holds a Cluster of apiVersion acid.zalan.do/v1",
        ),
        ("no-kind.yaml", no_kind, "has no kind"),
    ] {
        let (_dir, path) = input_file(name, text);
        let output = render(&[path.to_str().unwrap(), &exec_flag()]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{} {holds}", path.display()))
                && stderr.contains("a Cluster (apiVersion cnpgi.io/v1 or apiVersion postgresql.cnpg.io/v1)"),
            "{name}: {stderr}"
        );
        assert!(output.stdout.is_empty(), "{name}: nothing rendered");
        // The same for the old Cluster of a change.
        let output = render(&[
            example("cluster-example.yaml").to_str().unwrap(),
            "--old",
            path.to_str().unwrap(),
            &exec_flag(),
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{name} as --old: {stderr}");
        assert!(stderr.contains(holds), "{name} as --old: {stderr}");
    }
}

/// CloudNativePG's own Cluster (`postgresql.cnpg.io/v1`) is still rendered.
#[test]
fn a_cloudnative_pg_cluster_is_rendered() {
    let text = std::fs::read_to_string(example("cluster-example.yaml"))
        .unwrap()
        .replace("apiVersion: cnpgi.io/v1", "apiVersion: postgresql.cnpg.io/v1");
    assert!(text.contains("postgresql.cnpg.io/v1"));
    let (_dir, path) = input_file("cnpg.yaml", &text);
    let output = render(&[path.to_str().unwrap(), &exec_flag()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let docs = documents(&output.stdout);
    assert_eq!(docs[0]["apiVersion"], "postgresql.cnpg.io/v1");
    assert_eq!(docs.len(), 4, "the Cluster and three Pods");
}

/// A plugin the Cluster names but no flag provides: the error names the
/// file and `spec.plugins[N].name`, the plugins that were given, and the
/// flags that give one.
#[test]
fn an_unknown_plugin_names_the_file_the_entry_and_the_flags() {
    let text = format!(
        "apiVersion: cnpgi.io/v1\nkind: Cluster\nmetadata:\n  name: c\nspec:\n  instances: 1\n  plugins:\n  - name: {HELLO}\n  - name: missing.example.com\n"
    );
    let (_dir, path) = input_file("two-plugins.yaml", &text);
    let output = render(&[path.to_str().unwrap(), &exec_flag()]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let expected = format!(
        "{}: spec.plugins[1].name is missing.example.com, which is none of the plugins given (the plugins given are {HELLO}); \
         give it with --plugin-exec PATH (its binary), --plugin-dir DIR (a directory holding its socket) or --plugin missing.example.com=ADDRESS",
        path.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
}

/// `--plugin-timeout-seconds` bounds the wait for a `--plugin-exec`
/// plugin's socket (it was a fixed 30 s): a plugin that never opens one is
/// given up on after 1 s, naming it and the flag.
#[test]
fn the_wait_for_a_plugin_socket_follows_plugin_timeout_seconds() {
    use std::os::unix::fs::PermissionsExt as _;
    let (_dir, plugin) = input_file("silent-plugin", "#!/bin/sh\nexec sleep 60\n");
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let started = Instant::now();
    let output = render(&[
        example("cluster-example.yaml").to_str().unwrap(),
        &format!("--plugin-exec={}", plugin.display()),
        "--plugin-timeout-seconds=1",
    ]);
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "plugin {} did not open its socket within 1 s (--plugin-timeout-seconds)",
            plugin.display()
        )),
        "{stderr}"
    );
    assert!(
        elapsed >= Duration::from_secs(1) && elapsed < Duration::from_secs(10),
        "gave up after {elapsed:?}"
    );
}

/// `--plugin-timeout-seconds=0` means no deadline, as in every command that
/// has the flag (it failed every call at once before).
#[test]
fn plugin_timeout_zero_means_no_deadline() {
    let output = render(&[
        example("cluster-example.yaml").to_str().unwrap(),
        &exec_flag(),
        "--plugin-timeout-seconds=0",
    ]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(documents(&output.stdout).len() > 1, "the Cluster and its Pods");
}
