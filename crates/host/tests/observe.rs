//! A route observer ([`cnpgi_host::observe`]) told about the calls a host
//! makes to the real hello-world plugin: each call in order, with summaries
//! that match what the plugin answered.

#![allow(clippy::unwrap_used)]

mod common;

use common::{HELLO, Table};
use std::{sync::Arc, time::Duration};

use cnpgi_host::{
    Host, HostOptions, Operation,
    discovery::socket_dir::SocketDirectory,
    observe::{CallOutcome, CallRecorder, RoutedCall},
    routing::RoutingPolicy,
};
use cnpgi_pluginhelper::testing::TestPlugin;
use serde_json::json;

fn answered(call: &RoutedCall) -> &str {
    match &call.outcome {
        CallOutcome::Answered(summary) => summary,
        CallOutcome::Failed { code, message } => panic!("{} failed: {code:?}: {message}", call.rpc),
    }
}

#[tokio::test]
async fn every_routed_call_is_observed_in_order_with_what_the_plugin_answered() {
    let dir = tempfile::tempdir().unwrap();
    let _plugin = TestPlugin::start_unix_in(cnpg_i_hello_world::server(), dir.path())
        .await
        .unwrap();
    let recorder = Arc::new(CallRecorder::default());
    let host = Host::<Table>::new(HostOptions {
        policy: RoutingPolicy {
            observer: Some(recorder.clone()),
            ..RoutingPolicy::default()
        },
        ..HostOptions::default()
    });
    host.discover(SocketDirectory::new(dir.path()));
    tokio::time::timeout(Duration::from_secs(20), host.ready())
        .await
        .unwrap();
    assert!(recorder.calls().is_empty(), "registering a plugin is not routing");

    let cluster = json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster",
        "metadata": {"namespace": "db", "name": "pg"},
        "spec": {"plugins": [{"name": HELLO}]},
    });
    let mutated = host.mutate_json(host.routed_json(cluster)).await.unwrap();
    let routed = host.routed_json(mutated.object);
    let errors = host.validate_create_json(&routed).await.unwrap();
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": "db", "name": "pg-1"},
                     "spec": {"containers": [{"name": "postgres", "image": "postgres"}]}});
    let patched = host.lifecycle_hook_json(&routed, pod, Operation::Create).await.unwrap();
    host.status_entries(&routed).await.unwrap();

    let calls = recorder.take();
    let rpcs: Vec<(&str, &str)> = calls.iter().map(|c| (c.plugin.as_str(), c.rpc)).collect();
    assert_eq!(
        rpcs,
        [
            (HELLO, "Operator/MutateCluster"),
            (HELLO, "Operator/ValidateClusterCreate"),
            (HELLO, "OperatorLifecycle/LifecycleHook"),
            (HELLO, "Operator/SetStatusInCluster"),
        ]
    );
    // Each summary is what the plugin answered: its patch's size and first
    // path, the validation's verdict, the status's keys.
    let ops = |patch: &json_patch::Patch| {
        let n = patch.0.len();
        format!("{n} op{}: ", if n == 1 { "" } else { "s" })
    };
    assert_eq!(calls[0].request, "Cluster db/pg");
    let mutation = &mutated.patches[0].patch;
    assert!(
        answered(&calls[0]).starts_with(&ops(mutation))
            && answered(&calls[0]).contains(&mutation.0[0].path().to_string()),
        "{calls:?}"
    );
    assert!(errors.is_empty());
    assert_eq!(answered(&calls[1]), "valid");
    assert_eq!(calls[2].request, "CREATE Pod db/pg-1");
    let hooked = &patched.patches[0].patch;
    assert!(answered(&calls[2]).starts_with(&ops(hooked)), "{calls:?}");
    assert_eq!(calls[3].request, "Cluster db/pg with its plugin entries");
    assert_eq!(answered(&calls[3]), "status with enabled");
    assert!(calls.iter().all(|c| c.elapsed > Duration::ZERO));

    // A refusal names the field in error, as the operator reports it.
    let mistake = host.routed_json(json!({
        "apiVersion": "cnpgi.io/v1", "kind": "Cluster", "metadata": {"name": "pg"},
        "spec": {"plugins": [{"name": HELLO, "parameters": {"annotations": "{ not json"}}]},
    }));
    let errors = host.validate_create_json(&mistake).await.unwrap();
    assert_eq!(errors.len(), 1);
    let calls = recorder.take();
    assert_eq!(answered(&calls[0]), format!("1 error: {}", errors[0].field));
    assert_eq!(calls[0].request, "Cluster pg");
}
