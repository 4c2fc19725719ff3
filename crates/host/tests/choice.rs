//! One implementation among several, with real plugins (on Unix sockets):
//! the preferred one when it is ready, else the first ready implementation
//! by name, recorded in the status; sticky when the preferred one comes
//! back, chosen again when the resource asks or the chosen one goes; an
//! Event for each new choice.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use cnpgi_host::{
    ClientOptions, Host, HostOptions, PluginClient, PluginResource, Transport,
    choice::{
        ChoiceReason, IMPLEMENTS_MANIFEST_KEY, ImplementationChoice, ImplementationDecision, RESELECT_ANNOTATION,
        publish_event,
    },
    registry::RegistryOptions,
    routing::{EnabledPlugin, PluginLayout, PluginStatusUpdate, RoutedResource},
    testing::FakeApiServer,
};
use cnpgi_pluginhelper::{
    testing::{TestIdentity, TestPlugin, eventually},
    transport::PluginServer,
};
use kube::{
    CustomResource,
    runtime::events::{Recorder, Reporter},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

const KIND: &str = "tables.example.com";
const A: &str = "a.tables.example.com";
const B: &str = "b.tables.example.com";
const C: &str = "c.tables.example.com";

/// A table implemented by the plugin in `spec.implementation`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Table", namespaced)]
pub struct TableSpec {
    /// The preferred implementation.
    pub implementation: String,
}

/// `spec.implementation`, one among the implementations of [`KIND`];
/// entries in `status.plugins`.
#[derive(Debug)]
struct Implementation;

impl PluginLayout for Implementation {
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
        let name = resource.pointer("/spec/implementation").and_then(Value::as_str);
        name.map(|name| EnabledPlugin {
            index: 0,
            name: name.to_owned(),
        })
        .into_iter()
        .collect()
    }
    fn previous_statuses(&self, _: &Value) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]) {
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        resource["status"]["plugins"] = json!(names);
    }
    fn implementation_choice(&self) -> Option<ImplementationChoice> {
        Some(ImplementationChoice::new(KIND, "/spec/implementation"))
    }
}

impl PluginResource for Table {
    fn layout() -> Arc<dyn PluginLayout> {
        Arc::new(Implementation)
    }
}

/// Serves a plugin implementing [`KIND`] in `dir` and registers it.
async fn implementation(host: &Host<Table>, dir: &std::path::Path, name: &str) -> (TestPlugin, TestIdentity) {
    let identity = TestIdentity::new(name).with_manifest(IMPLEMENTS_MANIFEST_KEY, &format!("other.example.com,{KIND}"));
    let plugin = TestPlugin::start_unix_in(PluginServer::new(identity.clone()), dir)
        .await
        .unwrap();
    let client = PluginClient::new(
        name,
        Transport::Unix { path: dir.join(name) },
        &ClientOptions::default(),
    )
    .unwrap();
    host.add_plugin("test", client).await.unwrap();
    eventually("the plugin is routable", Duration::from_secs(10), async || {
        host.routable(name)
    })
    .await;
    (plugin, identity)
}

/// The table as the operator would write it back: its status from `plugin_status`.
async fn reconciled(host: &Host<Table>, table: &Value) -> (RoutedResource, Value) {
    let routed = host.routed_json(table.clone());
    let status = host.plugin_status(&routed).await.unwrap();
    let mut written = table.clone();
    written["status"] = status;
    (routed, written)
}

fn names(routed: &RoutedResource) -> Vec<&str> {
    routed.enabled().iter().map(|p| p.name.as_str()).collect()
}

#[tokio::test]
async fn the_preferred_implementation_or_the_first_ready_one_sticky_until_asked_again() {
    let host = Host::<Table>::new(HostOptions {
        registry: RegistryOptions {
            probe_interval: Duration::from_millis(200),
            ..RegistryOptions::default()
        },
        ..HostOptions::default()
    });
    let dir = tempfile::tempdir().unwrap();
    // A plugin that does not implement the kind is never a fallback, whatever its name.
    let unrelated = TestPlugin::start_unix_in(PluginServer::new(TestIdentity::new("0.example.com")), dir.path())
        .await
        .unwrap();
    host.add_plugin(
        "test",
        PluginClient::new(
            "0.example.com",
            Transport::Unix {
                path: dir.path().join("0.example.com"),
            },
            &ClientOptions::default(),
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let (_c, _) = implementation(&host, dir.path(), C).await;
    let (_b, b_identity) = implementation(&host, dir.path(), B).await;

    // A is preferred and not there: B, the first ready implementation by name.
    let table = json!({"apiVersion": "example.com/v1", "kind": "Table",
        "metadata": {"name": "users", "namespace": "default"}, "spec": {"implementation": A}});
    let (routed, table) = reconciled(&host, &table).await;
    assert_eq!(names(&routed), [B]);
    let decision = routed.implementation_choice().unwrap().clone();
    assert_eq!(
        (decision.chosen.as_deref(), decision.reason),
        (Some(B), ChoiceReason::PreferredUnavailable)
    );
    assert!(
        decision
            .message
            .contains(&format!("the preferred implementation {A} is not available"))
            && decision.message.contains(&format!("({B}, {C})")),
        "{}",
        decision.message
    );
    // Recorded in the status, and B's entry is there: routing went to B.
    assert_eq!(table["status"]["implementationChoice"]["chosen"], B);
    assert_eq!(table["status"]["plugins"], json!([B]));

    // A appears: the choice sticks (no flapping).
    let (_a, _) = implementation(&host, dir.path(), A).await;
    let (routed, table) = reconciled(&host, &table).await;
    assert_eq!(names(&routed), [B]);
    assert_eq!(routed.implementation_choice(), Some(&decision));

    // The resource asks again: A, its preferred one.
    let mut asking = table.clone();
    asking["metadata"]["annotations"] = json!({RESELECT_ANNOTATION: "1"});
    let (routed, table) = reconciled(&host, &asking).await;
    assert_eq!(names(&routed), [A]);
    let back = routed.implementation_choice().unwrap();
    assert_eq!(
        (back.chosen.as_deref(), back.reason, back.reselect.as_deref()),
        (Some(A), ChoiceReason::PreferredReady, Some("1"))
    );
    assert_eq!(table["status"]["implementationChoice"]["chosen"], A);

    // The same with B chosen, then B stops being ready: B stays chosen (the
    // resource does not move to A by itself), routing to it fails, and the
    // decision says why.
    let mut on_b = table.clone();
    on_b["status"]["implementationChoice"] = serde_json::to_value(&decision).unwrap();
    on_b["metadata"]["annotations"] = json!({});
    b_identity.readiness().store(false, std::sync::atomic::Ordering::SeqCst);
    eventually("B is taken out of routing", Duration::from_secs(10), async || {
        host.routable(B).is_err()
    })
    .await;
    // (No plugin status to ask of B: routed only.)
    let routed = host.routed_json(on_b.clone());
    assert_eq!(names(&routed), [B]);
    let kept = routed.implementation_choice().unwrap();
    assert_eq!(
        (kept.chosen.as_deref(), kept.reason),
        (Some(B), ChoiceReason::PreferredUnavailable)
    );
    let unavailable = kept.unavailable.as_deref().unwrap_or_default();
    assert!(
        unavailable.contains(&format!(
            "{B}, the implementation serving this resource, is not available"
        )) && unavailable.contains(RESELECT_ANNOTATION),
        "{unavailable}"
    );
    assert!(
        host.reconciler_hooks(cnpgi_host::routing::HookPhase::Pre, &routed)
            .await
            .is_err(),
        "routed to B, which is not ready: an error, not a call to A"
    );
    assert!(
        host.plugin_status(&routed).await.is_err(),
        "B's entry cannot be asked for"
    );

    // B is back: served again, and the decision no longer says it is unavailable.
    b_identity.readiness().store(true, std::sync::atomic::Ordering::SeqCst);
    eventually("B is routable again", Duration::from_secs(10), async || {
        host.routable(B).is_ok()
    })
    .await;
    let (routed, _) = reconciled(&host, &on_b).await;
    assert_eq!(names(&routed), [B]);
    assert_eq!(routed.implementation_choice(), Some(&decision));
    drop(unrelated);
}

#[tokio::test]
async fn a_new_choice_is_published_as_an_event_and_the_same_one_is_not() {
    let api = FakeApiServer::new();
    let url = api.clone().start().await;
    let recorder = Recorder::new(
        FakeApiServer::client(&url, "default"),
        Reporter {
            controller: "table-operator".into(),
            instance: None,
        },
    );
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("example.com/v1".into()),
        kind: Some("Table".into()),
        name: Some("users".into()),
        namespace: Some("default".into()),
        ..Default::default()
    };
    let decision = ImplementationDecision {
        kind: KIND.into(),
        preferred: A.into(),
        chosen: Some(B.into()),
        reason: ChoiceReason::PreferredUnavailable,
        message: format!("the preferred implementation {A} is not available"),
        reselect: None,
        unavailable: None,
    };
    assert!(publish_event(&recorder, &reference, None, &decision).await.unwrap());
    assert!(
        !publish_event(&recorder, &reference, Some(&decision), &decision)
            .await
            .unwrap()
    );
    let posted = api.recorded("POST", "/apis/events.k8s.io/v1/namespaces/default/events");
    assert_eq!(posted.len(), 1, "{posted:?}");
    let event = &posted[0].body;
    assert_eq!(
        (&event["type"], &event["reason"], &event["action"]),
        (
            &json!("Warning"),
            &json!("PreferredUnavailable"),
            &json!("ChooseImplementation")
        )
    );
    assert!(event["note"].as_str().unwrap().contains(A), "{event}");
    assert_eq!(event["regarding"]["name"], "users");
}
