//! The low-level example over real mutual TLS and a Unix socket.

#![allow(clippy::unwrap_used, missing_docs)]

use cnpgi_example_low_level::{LABEL, PLUGIN_NAME, server};
use cnpgi_pluginhelper::{
    capabilities::{self, Operation, ServiceType},
    patch::apply_patch_bytes,
    proto::{
        identity::v1::GetPluginCapabilitiesRequest,
        operator_lifecycle::v1::{OperatorLifecycleRequest, OperatorOperationType},
    },
    testing::TestPlugin,
};
use serde_json::{Value, json};

async fn hook(plugin: &TestPlugin, operation: Operation, object: &Value) -> Result<Value, tonic::Status> {
    let answer = plugin
        .lifecycle()
        .lifecycle_hook(OperatorLifecycleRequest {
            operation_type: Some(OperatorOperationType {
                r#type: operation.into(),
            }),
            cluster_definition: br#"{"kind":"Cluster"}"#.to_vec(),
            object_definition: serde_json::to_vec(object).unwrap(),
        })
        .await?;
    let mut patched = object.clone();
    apply_patch_bytes(&mut patched, &answer.into_inner().json_patch).unwrap();
    Ok(patched)
}

#[tokio::test]
async fn labels_pods_and_leaves_the_rest() {
    let plugin = TestPlugin::start_tls(server()).await.unwrap();
    let advertised = plugin
        .identity()
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    assert_eq!(capabilities::services_of(&advertised), [ServiceType::LifecycleService]);

    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pg-1", "labels": null}});
    for operation in [Operation::Create, Operation::Evaluate] {
        let patched = hook(&plugin, operation, &pod).await.unwrap();
        assert_eq!(patched["metadata"]["labels"], json!({ LABEL: "true" }));
        assert_eq!(hook(&plugin, operation, &patched).await.unwrap(), patched, "idempotent");
    }
    assert_eq!(hook(&plugin, Operation::Delete, &pod).await.unwrap(), pod);
    let service = json!({"apiVersion": "v1", "kind": "Service"});
    assert_eq!(hook(&plugin, Operation::Create, &service).await.unwrap(), service);
    let bad = json!({"kind": "Pod", "metadata": {"labels": "x"}});
    let status = hook(&plugin, Operation::Create, &bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
}

#[tokio::test]
async fn passes_the_conformance_suite() {
    for plugin in [
        TestPlugin::start_tls(server()).await.unwrap(),
        TestPlugin::start_unix(server()).await.unwrap(),
    ] {
        let report = plugin.check_conformance(PLUGIN_NAME).await.unwrap();
        assert!(report.passed(), "{report}");
    }
}
