//! `cnpgi-operator render --trace` against what the plugin received: the
//! real hello-world binary logs every call it serves (its SDK's call log,
//! as JSON lines), and the trace must list the same calls in the same
//! order, for a creation, an update and a refused update; the Mermaid
//! diagram has an arrow pair per call; a call that fails is traced with
//! its gRPC error.

#![allow(clippy::unwrap_used)]

mod common;

use std::{
    path::{Path, PathBuf},
    process::{Command, Output, Stdio},
    time::{Duration, Instant},
};

use cnpgi_pluginhelper::testing::ChildGuard;
use common::{BIN, workspace_binary};
use serde_json::Value;

const HELLO: &str = "cnpg-i-hello-world.cloudnative-pg.io";

fn example(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples/hello-world/clusters")
        .join(name)
        .display()
        .to_string()
}

/// hello-world serving in a socket directory, logging each call it serves
/// to a file.
struct LoggingPlugin {
    dir: tempfile::TempDir,
    log: PathBuf,
    _child: ChildGuard,
}

impl LoggingPlugin {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let sockets = dir.path().join("sockets");
        std::fs::create_dir(&sockets).unwrap();
        let log = dir.path().join("plugin.log");
        let child = ChildGuard::spawn(
            Command::new(workspace_binary("cnpg-i-hello-world"))
                .arg("plugin")
                .arg(format!("--plugin-path={}", sockets.display()))
                // The SDK logs each call it served, with its gRPC path:
                // `Probe` at debug, the others at info.
                .env("LOG_FORMAT", "json")
                .env("LOG_LEVEL", "cnpgi_pluginhelper::middleware=debug")
                .env_remove("RUST_LOG")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).unwrap()),
        )
        .unwrap();
        let socket = sockets.join(HELLO);
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "hello-world did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            dir,
            log,
            _child: child,
        }
    }

    fn dir_flag(&self) -> String {
        format!("--plugin-dir={}", self.dir.path().join("sockets").display())
    }

    /// The calls served so far, as `Service/RPC`, in the order they ended.
    fn served(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| entry["target"] == "cnpgi_pluginhelper::middleware")
            .filter_map(|entry| entry["span"]["method"].as_str().map(short_method))
            .collect()
    }
}

/// `/cnpgi.operator.v1.Operator/MutateCluster` as the host names it:
/// `Operator/MutateCluster`.
fn short_method(path: &str) -> String {
    let (service, rpc) = path.trim_start_matches('/').rsplit_once('/').unwrap();
    let service = service.rsplit('.').next().unwrap();
    format!("{service}/{rpc}")
}

/// The calls a render makes to register a plugin (what it is and what it
/// can do), before any call for the Cluster.
fn registers(method: &str) -> bool {
    method.starts_with("Identity/") || method.ends_with("/GetCapabilities")
}

fn render(args: &[&str]) -> Output {
    Command::new(BIN).arg("render").args(args).output().unwrap()
}

/// The (plugin, Service/RPC) of each line of a text trace, after its headline.
fn traced(text: &str) -> Vec<(String, String)> {
    let mut lines = text.lines();
    let headline = lines.next().unwrap();
    assert!(headline.starts_with("# render --trace: "), "{text}");
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert!(fields[0].parse::<usize>().is_ok(), "numbered: {line}");
            assert!(line.ends_with(" ms]"), "timed: {line}");
            let rpc = fields[2].split_once('(').unwrap().0;
            (fields[1].to_owned(), rpc.to_owned())
        })
        .collect()
}

/// Runs `render ARGS --trace-file=...` and checks its trace against the
/// calls the plugin served meanwhile: its registration first, then exactly
/// the traced calls (besides `Probe`, the registry's health check, which
/// may come at any time). Returns the trace's RPCs and render's output.
fn trace_matches_what_the_plugin_served(plugin: &LoggingPlugin, args: &[&str]) -> (Vec<String>, Output) {
    let trace_file = plugin.dir.path().join("trace.txt");
    let before = plugin.served().len();
    let mut all = args.to_vec();
    let (dir_flag, trace_flag) = (plugin.dir_flag(), format!("--trace-file={}", trace_file.display()));
    all.extend([dir_flag.as_str(), trace_flag.as_str()]);
    let output = render(&all);
    let served = plugin.served().split_off(before);
    let trace = std::fs::read_to_string(&trace_file).unwrap();
    let traced = traced(&trace);
    assert!(traced.iter().all(|(name, _)| name == HELLO), "{trace}");
    let traced: Vec<String> = traced.into_iter().map(|(_, rpc)| rpc).collect();

    let registration = served.iter().take_while(|m| registers(m)).count();
    assert!(
        served[..registration].contains(&"Identity/GetPluginMetadata".to_owned()),
        "the plugin was registered first: {served:?}"
    );
    let for_the_cluster: Vec<String> = served[registration..]
        .iter()
        .filter(|m| *m != "Identity/Probe")
        .cloned()
        .collect();
    assert!(!traced.is_empty(), "{trace}");
    assert_eq!(
        traced, for_the_cluster,
        "the trace lists what the plugin served, in order\ntrace:\n{trace}\nserved: {served:?}"
    );
    (traced, output)
}

#[test]
fn the_trace_is_what_the_plugin_received_for_a_create_and_an_update() {
    let plugin = LoggingPlugin::start();

    let (create, output) =
        trace_matches_what_the_plugin_served(&plugin, &[&example("cluster-example.yaml"), "--trace"]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        String::from_utf8_lossy(&output.stdout).starts_with("---\n"),
        "the YAML stays on standard output"
    );
    // Three instances: a lifecycle hook per Pod, between the validation and the status.
    assert_eq!(
        create
            .iter()
            .filter(|rpc| *rpc == "OperatorLifecycle/LifecycleHook")
            .count(),
        3
    );
    assert!(
        create.contains(&"Operator/ValidateClusterCreate".to_owned()),
        "{create:?}"
    );

    let with_parameters = example("cluster-example-with-parameters.yaml");
    let (update, output) =
        trace_matches_what_the_plugin_served(&plugin, &[&with_parameters, "--old", &with_parameters]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(
        update.contains(&"Operator/ValidateClusterChange".to_owned()),
        "{update:?}"
    );
    assert!(
        !update.contains(&"Operator/ValidateClusterCreate".to_owned()),
        "{update:?}"
    );

    // A refused update: the trace stops where the pipeline did.
    let (refused, output) = trace_matches_what_the_plugin_served(
        &plugin,
        &[
            &example("cluster-example-labels-changed.yaml"),
            "--old",
            &with_parameters,
        ],
    );
    assert_eq!(output.status.code(), Some(1));
    assert_eq!(refused.last().unwrap(), "Operator/ValidateClusterChange");
}

/// The Mermaid trace, on standard error beside the YAML on standard output:
/// a `sequenceDiagram` with the operator and the plugin as participants,
/// and for each call the plugin served a request arrow and an answer arrow.
#[test]
fn the_mermaid_trace_has_an_arrow_pair_per_call() {
    let plugin = LoggingPlugin::start();
    let before = plugin.served().len();
    let output = render(&[
        &example("cluster-example-with-parameters.yaml"),
        &plugin.dir_flag(),
        "--trace-format=mermaid",
    ]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("---\n"));
    let served: Vec<String> = plugin.served()[before..]
        .iter()
        .filter(|m| !registers(m))
        .cloned()
        .collect();

    let stderr = String::from_utf8_lossy(&output.stderr);
    let diagram: Vec<&str> = stderr.lines().skip_while(|l| *l != "sequenceDiagram").collect();
    assert!(!diagram.is_empty(), "{stderr}");
    let body: Vec<&str> = diagram[1..]
        .iter()
        .take_while(|l| l.starts_with("    "))
        .copied()
        .collect();
    assert_eq!(
        body.len(),
        diagram.len() - 1,
        "every line of the diagram is indented: {stderr}"
    );
    assert!(body[0].starts_with("    %% render --trace: Cluster default/cluster-example, create"));
    assert_eq!(body[1], "    participant operator");
    assert_eq!(body[2], format!("    participant P1 as {HELLO}"));
    let arrows = &body[3..];
    assert_eq!(arrows.len(), 2 * served.len(), "{stderr}");
    for (pair, rpc) in arrows.chunks(2).zip(&served) {
        assert!(pair[0].starts_with(&format!("    operator->>P1: {rpc}(")), "{pair:?}");
        assert!(
            pair[1].starts_with("    P1-->>operator: ") && pair[1].ends_with(" ms)"),
            "{pair:?}"
        );
    }
    // Mermaid ends a statement at `;` and reads `#` as an entity code.
    assert!(
        diagram.iter().all(|l| !l.contains(';') || l.contains("#59;")),
        "{stderr}"
    );
}

/// A call that fails is traced with its gRPC error (and a `--x` arrow in
/// Mermaid), and the trace is printed before the error that ends render.
#[test]
fn a_failed_call_is_traced_with_its_error() {
    let cluster = "apiVersion: cnpgi.io/v1\nkind: Cluster\nmetadata:\n  name: pg\nspec:\n  instances: 1\n  plugins:\n  - name: broken.example.com\n";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.yaml");
    std::fs::write(&path, cluster).unwrap();
    let output = Command::new(BIN)
        .arg("render")
        .arg(&path)
        .arg(format!(
            "--plugin-exec={}",
            workspace_binary("cnpgi-broken-plugin").display()
        ))
        .args(["--plugin-timeout-seconds=1", "--trace"])
        .env("CNPGI_BROKEN_MODE", "hang")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    let hook = stderr
        .lines()
        .find(|l| l.contains("OperatorLifecycle/LifecycleHook(CREATE Pod "))
        .unwrap_or_else(|| panic!("{stderr}"));
    assert!(hook.contains(" -> error DeadlineExceeded: "), "{hook}");
    let (trace_at, error_at) = (stderr.find(hook).unwrap(), stderr.find("error: plugin").unwrap());
    assert!(trace_at < error_at, "the trace comes before the error: {stderr}");
}
