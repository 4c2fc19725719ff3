//! Deletion against a real kube-apiserver (with etcd, started by the
//! project's `tests/lib/control-plane.sh`; `E2E_KUBECONFIG` names a cluster
//! to use instead) and real plugins built with the SDK, over gRPC on Unix
//! sockets, reconciled by kube-runtime's `Controller` through
//! `deletion::PluginFinalizer`:
//!
//! * a resource gets the finalizer `cnpgi.io/plugins`; deleted, its plugin's
//!   `Pre` hook sees `metadata.deletionTimestamp` (the one the API server
//!   set), answers `CONTINUE`, and the finalizer goes: the object is gone;
//! * a resource whose plugins do not clean up (one answers `REQUEUE`, one is
//!   not there) keeps the finalizer, is asked again, and goes once
//!   `deletionTimestamp` + the cleanup deadline (3 s) passed, not before,
//!   with the Event `PluginCleanupAbandoned` naming both and why.
//!
//! Needs the control plane's binaries (`tests/e2e/build-kube.sh`, cached
//! under `~/.cache/cnpgi-e2e`; built by the script when missing, which
//! needs Go).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[allow(dead_code)] // HELLO: the hello-world plugin is not used here.
mod common;

use std::{
    io::{BufRead, BufReader, Write},
    process::{Child, ChildStdin, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use cnpgi_host::{
    ClientOptions, Host, HostError, HostOptions, PluginClient, Transport,
    deletion::{ABANDONED_REASON, FINALIZER, FinalizerError, PluginFinalizer},
    routing::HookPhase,
};
use cnpgi_pluginhelper::{
    capabilities::ReconcilerKind,
    plugin::{Hook, Plugin, ReconcilerCall},
    proto::identity::v1::GetPluginMetadataResponse,
    testing::{TestPlugin, eventually},
};
use common::{Table, TableSpec};
use futures_util::StreamExt;
use k8s_openapi::{
    api::{core::v1::Namespace, events::v1::Event},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, ListParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    runtime::{
        Controller,
        controller::Action,
        events::{Recorder, Reporter},
        watcher,
    },
};
use serde_json::json;

/// Answers `CONTINUE`, deleted or not.
const TIDY: &str = "tidy.example.com";
/// Answers `REQUEUE` after 1 s when the resource is being deleted.
const STUCK: &str = "stuck.example.com";
/// Enabled, never registered.
const GONE: &str = "gone.example.com";
const DEADLINE: Duration = Duration::from_secs(3);

/// etcd and kube-apiserver (and kube-controller-manager) on loopback,
/// started by `tests/lib/control-plane.sh`, stopped when dropped: the
/// script's shell waits on its standard input, and its exit trap stops
/// everything it started once that closes (even if this process is killed).
struct ControlPlane {
    shell: Child,
    stdin: Option<ChildStdin>,
    kubeconfig: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl ControlPlane {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/lib/control-plane.sh");
        let mut shell = Command::new("bash")
            .args([
                "-c",
                r#"source "$1" || exit 1
                   cp_start "$2" || exit 1
                   printf 'KUBECONFIG=%s\n' "$KUBECONFIG"
                   read -r _ || true"#,
                "control-plane",
                script,
                &dir.path().join("cp").display().to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("cannot run bash for tests/lib/control-plane.sh");
        let stdin = shell.stdin.take();
        let stdout = shell.stdout.take().unwrap();
        let (lines, read) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if lines.send(line).is_err() {
                    break;
                }
            }
        });
        // Cold, the script builds the binaries first (minutes); cached, the
        // API server answers within seconds.
        let within = Duration::from_secs(1800);
        let started = Instant::now();
        let kubeconfig = loop {
            let left = within.saturating_sub(started.elapsed());
            match read.recv_timeout(left) {
                Ok(line) => {
                    if let Some(path) = line.strip_prefix("KUBECONFIG=") {
                        break std::path::PathBuf::from(path);
                    }
                }
                Err(error) => panic!(
                    "tests/lib/control-plane.sh did not start kube-apiserver within {within:?} ({error}); its \
                     messages are above (it needs the binaries of tests/e2e/build-kube.sh, or Go to build them)"
                ),
            }
        };
        Self {
            shell,
            stdin,
            kubeconfig,
            _dir: dir,
        }
    }

    async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).unwrap();
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .unwrap();
        Client::try_from(config).unwrap()
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        // The script gives each process 10 s to stop on SIGTERM.
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if !matches!(self.shell.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("control-plane.sh did not stop within 60 s; killing its shell");
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

/// The `Table` CRD of `tests/common` (its spec kept as it is).
fn table_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "tables.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Table", "plural": "tables", "singular": "table", "listKind": "TableList"},
            "scope": "Namespaced",
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }}},
            }],
        },
    }))
    .unwrap()
}

/// The `deletionTimestamp` each `Pre` call a plugin received carried.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

/// A plugin built with the SDK: its `Pre` hook on the resource records
/// what it was sent, and answers `when_deleting` when the resource is being
/// deleted (`CONTINUE` otherwise).
fn plugin(name: &str, seen: Seen, when_deleting: Hook) -> Plugin<()> {
    Plugin::<()>::new(GetPluginMetadataResponse {
        name: name.into(),
        version: "0.1.0".into(),
        ..GetPluginMetadataResponse::default()
    })
    .reconciler_pre(ReconcilerKind::Cluster, move |call: ReconcilerCall<()>| {
        let seen = seen.clone();
        async move {
            seen.lock().unwrap().push(call.deletion_timestamp().map(str::to_owned));
            Ok(if call.is_being_deleted() {
                when_deleting
            } else {
                Hook::Continue
            })
        }
    })
}

fn deletions(seen: &Seen) -> Vec<String> {
    seen.lock().unwrap().iter().flatten().cloned().collect()
}

/// The operator's own reconcile failed.
#[derive(Debug, thiserror::Error)]
#[error("the reconcile's Pre hooks failed: {0}")]
struct ApplyError(#[from] HostError);

fn table(name: &str, plugins: &[&str]) -> Table {
    Table::new(
        name,
        TableSpec {
            plugins: plugins.iter().map(|name| json!({"name": name})).collect(),
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_resource_goes_when_its_plugins_cleaned_up_or_their_deadline_passed() {
    let control_plane = ControlPlane::start();
    let client = control_plane.client().await;
    let namespace = format!("deletion-{}", std::process::id());
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap(),
        )
        .await
        .unwrap();
    let crds = Api::<CustomResourceDefinition>::all(client.clone());
    if crds.get_opt("tables.example.com").await.unwrap().is_none() {
        crds.create(&PostParams::default(), &table_crd()).await.unwrap();
    }
    let tables = Api::<Table>::namespaced(client.clone(), &namespace);
    eventually("the Table API is served", Duration::from_secs(60), async || {
        tables.list(&ListParams::default()).await.is_ok()
    })
    .await;

    // The plugins, and a host with a 3 s cleanup deadline.
    let host = Host::<Table>::new(HostOptions {
        cleanup_deadline: DEADLINE,
        ..HostOptions::default()
    });
    let sockets = tempfile::tempdir().unwrap();
    let (tidy_seen, stuck_seen) = (Seen::default(), Seen::default());
    let mut plugins = Vec::new();
    for (name, seen, when_deleting) in [
        (TIDY, &tidy_seen, Hook::Continue),
        (STUCK, &stuck_seen, Hook::RequeueAfter(Duration::from_secs(1))),
    ] {
        let server = plugin(name, seen.clone(), when_deleting).server();
        plugins.push(TestPlugin::start_unix_in(server, sockets.path()).await.unwrap());
        let transport = Transport::Unix {
            path: sockets.path().join(name),
        };
        let client = PluginClient::new(name, transport, &ClientOptions::default()).unwrap();
        host.add_plugin("test", client).await.unwrap();
        eventually("the plugin is routable", Duration::from_secs(10), async || {
            host.routable(name)
        })
        .await;
    }

    // The operator: kube-runtime's Controller, its reconcile through the
    // finalizer; a live table gets the plugins' Pre hooks.
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: "table-operator".into(),
            instance: None,
        },
    );
    let finalizer = Arc::new(PluginFinalizer::new(host.clone(), recorder));
    assert_eq!(finalizer.name(), FINALIZER);
    let operator_client = client.clone();
    let controller = tokio::spawn(
        Controller::new(tables.clone(), watcher::Config::default())
            .run(
                move |table, finalizer| {
                    let api = Api::<Table>::namespaced(operator_client.clone(), &table.namespace().unwrap());
                    let host = finalizer.host().clone();
                    let apply = |table: Arc<Table>| async move {
                        let routed = host.routed(&table)?;
                        host.reconciler_hooks(HookPhase::Pre, &routed).await?;
                        Ok::<_, ApplyError>(Action::await_change())
                    };
                    async move { finalizer.reconcile(&api, table, apply).await }
                },
                |_, error: &FinalizerError<ApplyError>, _| {
                    eprintln!("reconcile failed: {error}");
                    Action::requeue(Duration::from_millis(500))
                },
                finalizer,
            )
            .for_each(|_| async {}),
    );

    // 1. The plugin cleans up: the finalizer goes, and the object with it.
    tables
        .create(&PostParams::default(), &table("tidy", &[TIDY]))
        .await
        .unwrap();
    eventually(
        "the table holds the finalizer and its plugin was called",
        Duration::from_secs(30),
        async || {
            let held = tables
                .get("tidy")
                .await
                .unwrap()
                .finalizers()
                .contains(&FINALIZER.to_owned());
            held && !tidy_seen.lock().unwrap().is_empty()
        },
    )
    .await;
    assert!(
        deletions(&tidy_seen).is_empty(),
        "a live table is not being deleted: {:?}",
        tidy_seen.lock().unwrap()
    );
    let deleting = tables
        .delete("tidy", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the finalizer holds the deleted table");
    let deleted_at = serde_json::to_value(deleting.metadata.deletion_timestamp.clone().unwrap()).unwrap();
    eventually("the cleaned-up table is gone", Duration::from_secs(30), async || {
        tables.get_opt("tidy").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        deletions(&tidy_seen),
        [deleted_at.as_str().unwrap()],
        "the plugin was sent the deletionTimestamp the API server set, once"
    );

    // 2. One plugin asks again and again, the other is not there: the
    // finalizer stays until deletionTimestamp + 3 s, then goes, with an Event.
    tables
        .create(&PostParams::default(), &table("kept", &[STUCK, GONE]))
        .await
        .unwrap();
    eventually("the table holds the finalizer", Duration::from_secs(30), async || {
        tables
            .get("kept")
            .await
            .unwrap()
            .finalizers()
            .contains(&FINALIZER.to_owned())
    })
    .await;
    let deleting = tables
        .delete("kept", &DeleteParams::default())
        .await
        .unwrap()
        .left()
        .expect("the finalizer holds the deleted table");
    let deleted_at = SystemTime::from(deleting.metadata.deletion_timestamp.clone().unwrap().0);
    eventually(
        "the stuck plugin is asked to clean up",
        Duration::from_secs(30),
        async || !deletions(&stuck_seen).is_empty(),
    )
    .await;
    let held = tables.get_opt("kept").await.unwrap();
    assert!(
        held.as_ref()
            .is_some_and(|table| table.finalizers().contains(&FINALIZER.to_owned())),
        "the plugin asked to be called again: the finalizer stays ({held:?})"
    );
    eventually(
        "the table is let go once its cleanup deadline passed",
        Duration::from_secs(60),
        async || tables.get_opt("kept").await.unwrap().is_none(),
    )
    .await;
    let gone_at = SystemTime::now();
    assert!(
        gone_at >= deleted_at + DEADLINE,
        "let go {:?} after its deletionTimestamp, before the {DEADLINE:?} deadline",
        gone_at.duration_since(deleted_at)
    );
    assert!(
        deletions(&stuck_seen).len() >= 2,
        "a pending cleanup is asked again: {:?}",
        stuck_seen.lock().unwrap()
    );
    let events = Api::<Event>::namespaced(client.clone(), &namespace);
    let event = eventually(
        "the Event says the cleanup was abandoned",
        Duration::from_secs(30),
        async || {
            let listed = events.list(&ListParams::default()).await.unwrap().items;
            listed
                .into_iter()
                .find(|event| {
                    event.reason.as_deref() == Some(ABANDONED_REASON)
                        && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("kept")
                })
                .ok_or("no Event yet")
        },
    )
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!("{STUCK}: asked to be called again in 1 s (REQUEUE)"))
            && note.contains(&format!("{GONE}: unavailable"))
            && note.contains("3 s"),
        "{note}"
    );
    assert!(host.metrics().cleanups_abandoned(STUCK) >= 1);
    assert!(host.metrics().cleanups_abandoned(GONE) >= 1);
    // The tidy table's cleanup was not abandoned.
    assert_eq!(host.metrics().cleanups_abandoned(TIDY), 0);
    let abandoned_tidy = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .any(|event| {
            event.reason.as_deref() == Some(ABANDONED_REASON)
                && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("tidy")
        });
    assert!(!abandoned_tidy, "the cleaned-up table's cleanup was not abandoned");

    controller.abort();
    drop(plugins);
    drop(control_plane);
}
