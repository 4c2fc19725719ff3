//! Every hello-world RPC, over real mutual TLS (and a Unix socket), checked
//! against upstream's behaviour. Every returned patch is applied to the object
//! it was computed for.

#![allow(clippy::unwrap_used)]

mod common;

use cnpg_i_hello_world::{lifecycle::PAUSER_IMAGE, server};
use cnpgi_pluginhelper::{
    capabilities::{self, OperatorRpc, ServiceType},
    proto::{
        identity::v1::{GetPluginCapabilitiesRequest, GetPluginMetadataRequest, ProbeRequest},
        operator::v1::{
            DeregisterRequest, OperatorCapabilitiesRequest, OperatorMutateClusterRequest,
            OperatorValidateClusterChangeRequest, OperatorValidateClusterCreateRequest, SetStatusInClusterRequest,
        },
        operator_lifecycle::v1::{
            OperatorLifecycleCapabilitiesRequest, OperatorLifecycleRequest, OperatorOperationType,
            operator_operation_type::Type as Operation,
        },
    },
    testing::TestPlugin,
};
use common::*;
use serde_json::{Value, json};
use tonic::Code;

async fn plugin() -> TestPlugin {
    TestPlugin::start_tls(server()).await.unwrap()
}

#[tokio::test]
async fn identity_answers_as_upstream() {
    let plugin = plugin().await;
    let mut identity = plugin.identity();
    let metadata = identity
        .get_plugin_metadata(GetPluginMetadataRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(metadata.name, PLUGIN);
    assert!(!metadata.version.is_empty());
    let capabilities = identity
        .get_plugin_capabilities(GetPluginCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities;
    let services: Vec<_> = capabilities
        .iter()
        .map(|c| capabilities::service_type(c).unwrap())
        .collect();
    assert_eq!(services, [ServiceType::LifecycleService, ServiceType::OperatorService]);
    assert!(identity.probe(ProbeRequest {}).await.unwrap().into_inner().ready);
}

#[tokio::test]
async fn operator_and_lifecycle_capabilities() {
    let plugin = plugin().await;
    let rpcs: Vec<_> = plugin
        .operator()
        .get_capabilities(OperatorCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .capabilities
        .iter()
        .map(|c| capabilities::Capability::value(c).unwrap())
        .collect();
    assert_eq!(
        rpcs,
        [
            OperatorRpc::ValidateClusterCreate,
            OperatorRpc::ValidateClusterChange,
            OperatorRpc::MutateCluster,
            OperatorRpc::SetStatusInCluster
        ]
    );
    let lifecycle = plugin
        .lifecycle()
        .get_capabilities(OperatorLifecycleCapabilitiesRequest {})
        .await
        .unwrap()
        .into_inner()
        .lifecycle_capabilities;
    assert_eq!(lifecycle.len(), 1);
    assert_eq!((lifecycle[0].group.as_str(), lifecycle[0].kind.as_str()), ("", "Pod"));
    let operations: Vec<_> = lifecycle[0].operation_types.iter().map(|o| o.r#type()).collect();
    assert_eq!(operations, [Operation::Create, Operation::Evaluate]);
    // Not advertised, not implemented.
    let status = plugin
        .operator()
        .deregister(DeregisterRequest::default())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented);
}

#[tokio::test]
async fn validate_create_accepts_good_parameters_and_reports_the_mistake() {
    let plugin = plugin().await;
    let mut operator = plugin.operator();
    for good in [cluster(None), cluster_with_labels(json!({"a": "b"}))] {
        let errors = operator
            .validate_cluster_create(OperatorValidateClusterCreateRequest {
                definition: bytes(&good),
            })
            .await
            .unwrap()
            .into_inner()
            .validation_errors;
        assert!(errors.is_empty(), "{errors:?}");
    }
    let errors = operator
        .validate_cluster_create(OperatorValidateClusterCreateRequest {
            definition: bytes(&cluster_with_mistake()),
        })
        .await
        .unwrap()
        .into_inner()
        .validation_errors;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "annotations"]);
    assert!(errors[0].value.contains("this is a mistake"), "{:?}", errors[0]);
    assert!(!errors[0].message.is_empty());

    // Both parameters wrong: both reported at once.
    let both = cluster(Some(json!({ "labels": "{\"a\": 1}", "annotations": "[]" })));
    let errors = operator
        .validate_cluster_create(OperatorValidateClusterCreateRequest {
            definition: bytes(&both),
        })
        .await
        .unwrap()
        .into_inner()
        .validation_errors;
    let paths: Vec<_> = errors.iter().map(|e| e.path_components.join("/")).collect();
    assert_eq!(paths, ["spec/plugins/0/labels", "spec/plugins/0/annotations"]);
}

#[tokio::test]
async fn validate_change_reports_every_error() {
    let plugin = plugin().await;
    let mut operator = plugin.operator();
    let mut change = async |old: Value, new: Value| {
        operator
            .validate_cluster_change(OperatorValidateClusterChangeRequest {
                old_cluster: bytes(&old),
                new_cluster: bytes(&new),
            })
            .await
            .unwrap()
            .into_inner()
            .validation_errors
    };
    let errors = change(
        cluster_with_labels(json!({"a": "b"})),
        cluster_with_labels(json!({"a": "c"})),
    )
    .await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "labels"]);
    assert_eq!(errors[0].message, "Labels cannot be changed");
    // The value is the raw parameter, as the user wrote it.
    assert_eq!(errors[0].value, r#"{"a":"c"}"#);

    // A labels change and a malformed annotation: both reported together.
    let mut new = cluster_with_mistake();
    new["spec"]["plugins"][0]["parameters"]["labels"] = json!("{\"a\":\"c\"}");
    let errors = change(cluster_with_labels(json!({"a": "b"})), new).await;
    let paths: Vec<_> = errors.iter().map(|e| e.path_components.join("/")).collect();
    assert_eq!(
        paths,
        ["spec/plugins/0/annotations", "spec/plugins/0/labels"],
        "{errors:?}"
    );

    // Same labels, other annotations: fine.
    let old = cluster(Some(
        json!({ "labels": "{\"a\":\"b\"}", "annotations": "{\"x\":\"1\"}" }),
    ));
    let new = cluster(Some(
        json!({ "labels": "{\"a\": \"b\"}", "annotations": "{\"x\":\"2\"}" }),
    ));
    assert!(change(old, new).await.is_empty());

    // The defaults written back by MutateCluster are not a change.
    let defaulted = cluster_with_labels(json!({"plugin-metadata": "default"}));
    assert!(change(cluster(None), defaulted).await.is_empty());

    // A malformed new value is reported as such.
    let errors = change(cluster(None), cluster_with_mistake()).await;
    assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "annotations"]);
}

#[tokio::test]
async fn mutate_writes_defaults_back_once() {
    let plugin = plugin().await;
    let mut operator = plugin.operator();
    let original = cluster(None);
    let patch = operator
        .mutate_cluster(OperatorMutateClusterRequest {
            definition: bytes(&original),
        })
        .await
        .unwrap()
        .into_inner()
        .json_patch;
    let mutated = apply(&original, &patch);
    let parameters = &mutated["spec"]["plugins"][0]["parameters"];
    for name in ["labels", "annotations"] {
        let value: Value = serde_json::from_str(parameters[name].as_str().unwrap()).unwrap();
        assert_eq!(value, json!({"plugin-metadata": "default"}), "{name}");
    }
    // Nothing else changed.
    let mut without = mutated.clone();
    without["spec"]["plugins"][0]
        .as_object_mut()
        .unwrap()
        .remove("parameters");
    assert_eq!(without, original);

    // Mutating the mutated Cluster changes nothing.
    let again = operator
        .mutate_cluster(OperatorMutateClusterRequest {
            definition: bytes(&mutated),
        })
        .await
        .unwrap()
        .into_inner()
        .json_patch;
    assert!(again.is_empty(), "{}", String::from_utf8_lossy(&again));

    // Given parameters are kept as written, even malformed ones.
    let mistake = cluster_with_mistake();
    let patch = operator
        .mutate_cluster(OperatorMutateClusterRequest {
            definition: bytes(&mistake),
        })
        .await
        .unwrap()
        .into_inner()
        .json_patch;
    assert_eq!(apply(&mistake, &patch), mistake);

    // A Cluster that does not use the plugin is left alone.
    let mut other = cluster(None);
    other["spec"]["plugins"][0]["name"] = json!("another-plugin.example.com");
    let patch = operator
        .mutate_cluster(OperatorMutateClusterRequest {
            definition: bytes(&other),
        })
        .await
        .unwrap()
        .into_inner()
        .json_patch;
    assert!(patch.is_empty());
}

async fn hook(
    plugin: &TestPlugin,
    operation: Operation,
    cluster: &Value,
    object: &Value,
) -> Result<Vec<u8>, tonic::Status> {
    plugin
        .lifecycle()
        .lifecycle_hook(OperatorLifecycleRequest {
            operation_type: Some(OperatorOperationType {
                r#type: operation.into(),
            }),
            cluster_definition: bytes(cluster),
            object_definition: bytes(object),
        })
        .await
        .map(|r| r.into_inner().json_patch)
}

fn check_patched_pod(patched: &Value, labels: &Value, annotations: &Value) {
    let original = pod();
    for (field, expected) in [("labels", labels), ("annotations", annotations)] {
        let have = patched["metadata"][field].as_object().unwrap();
        for (k, v) in expected.as_object().unwrap() {
            assert_eq!(&have[k], v, "{field}.{k}");
        }
        // Existing entries are kept.
        for (k, v) in original["metadata"][field].as_object().unwrap() {
            assert_eq!(&have[k], v, "{field}.{k} kept");
        }
    }
    let init = patched["spec"]["initContainers"].as_array().unwrap();
    assert_eq!(init[0]["name"], "bootstrap-controller");
    let pauser = init.iter().find(|c| c["name"] == "pauser").expect("pauser sidecar");
    assert_eq!(pauser["image"], PAUSER_IMAGE);
    assert_eq!(pauser["restartPolicy"], "Always");
    let volumes = patched["spec"]["volumes"].as_array().unwrap();
    assert!(
        volumes
            .iter()
            .any(|v| v["name"] == "plugins" && v["emptyDir"].is_object())
    );
    let postgres = &patched["spec"]["containers"][0];
    assert!(
        postgres["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["name"] == "plugins" && m["mountPath"] == "/plugins")
    );
    assert_eq!(postgres["futureField"], json!({"kept": true}), "unknown fields survive");
}

#[tokio::test]
async fn lifecycle_patches_pods_on_create_and_evaluate() {
    let plugin = plugin().await;
    let configured = cluster(Some(json!({
        "labels": "{\"team\":\"db\",\"app.kubernetes.io/part-of\":\"demo\"}",
        "annotations": "{\"first-annotation\":\"first-annotation-value\"}"
    })));
    for operation in [Operation::Create, Operation::Evaluate] {
        let patch = hook(&plugin, operation, &configured, &pod()).await.unwrap();
        let patched = apply(&pod(), &patch);
        check_patched_pod(
            &patched,
            &json!({"team": "db", "app.kubernetes.io/part-of": "demo"}),
            &json!({"first-annotation": "first-annotation-value"}),
        );
        // The hook is idempotent: the patched Pod needs no further change.
        let again = hook(&plugin, operation, &configured, &patched).await.unwrap();
        assert!(again.is_empty(), "{operation:?}: {}", String::from_utf8_lossy(&again));
    }
    // Without parameters, the defaults apply.
    let patch = hook(&plugin, Operation::Create, &cluster(None), &pod()).await.unwrap();
    let default = json!({"plugin-metadata": "default"});
    check_patched_pod(&apply(&pod(), &patch), &default, &default);
}

#[tokio::test]
async fn lifecycle_ignores_other_operations_and_kinds() {
    let plugin = plugin().await;
    for operation in [Operation::Delete, Operation::Patch, Operation::Update] {
        assert!(
            hook(&plugin, operation, &cluster(None), &pod())
                .await
                .unwrap()
                .is_empty()
        );
    }
    let service = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}});
    assert!(
        hook(&plugin, Operation::Create, &cluster(None), &service)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn lifecycle_reports_bad_parameters_and_pods_without_postgres() {
    let plugin = plugin().await;
    let status = hook(&plugin, Operation::Create, &cluster_with_mistake(), &pod())
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("spec.plugins[0].parameters.annotations"),
        "{status:?}"
    );

    let mut no_postgres = pod();
    no_postgres["spec"]["containers"][0]["name"] = json!("other");
    let status = hook(&plugin, Operation::Create, &cluster(None), &no_postgres)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("postgres"), "{status:?}");
}

#[tokio::test]
async fn set_status_reports_enabled_once() {
    let plugin = plugin().await;
    let mut operator = plugin.operator();
    let mut with_status = cluster(None);
    with_status["status"] = json!({ "pluginStatus": [{ "name": PLUGIN, "version": "0.1.0" }] });
    let answer = operator
        .set_status_in_cluster(SetStatusInClusterRequest {
            cluster: bytes(&with_status),
        })
        .await
        .unwrap()
        .into_inner()
        .json_status;
    assert_eq!(
        serde_json::from_slice::<Value>(&answer).unwrap(),
        json!({"enabled": true})
    );

    with_status["status"]["pluginStatus"][0]["status"] = json!("{\"enabled\":true}");
    let answer = operator
        .set_status_in_cluster(SetStatusInClusterRequest {
            cluster: bytes(&with_status),
        })
        .await
        .unwrap()
        .into_inner()
        .json_status;
    assert!(answer.is_empty(), "no-op once enabled");

    // As upstream: without its entry (which the operator writes first), an error.
    let status = operator
        .set_status_in_cluster(SetStatusInClusterRequest {
            cluster: bytes(&cluster(None)),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("plugin entry not found"), "{status:?}");
}

#[tokio::test]
async fn garbage_input_is_invalid_argument_and_the_server_keeps_serving() {
    let plugin = plugin().await;
    let mut operator = plugin.operator();
    for garbage in [&b"\x00\x01garbage"[..], b"", b"[1,2]", b"{\"spec\": {\"plugins\": 7}}"] {
        let status = operator
            .validate_cluster_create(OperatorValidateClusterCreateRequest {
                definition: garbage.to_vec(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{garbage:?}: {status:?}");
        assert!(status.message().contains("Cluster"), "{status:?}");
        let status = operator
            .mutate_cluster(OperatorMutateClusterRequest {
                definition: garbage.to_vec(),
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument);
    }
    let status = hook(&plugin, Operation::Create, &cluster(None), &json!("a string"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    let status = plugin
        .lifecycle()
        .lifecycle_hook(OperatorLifecycleRequest {
            operation_type: Some(OperatorOperationType {
                r#type: Operation::Create.into(),
            }),
            cluster_definition: bytes(&cluster(None)),
            object_definition: b"{not json".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("line 1"), "{status:?}");
    // Still serving.
    assert!(hook(&plugin, Operation::Create, &cluster(None), &pod()).await.is_ok());
}

#[tokio::test]
async fn unix_socket_serves_the_same_answers() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let patch = hook(&plugin, Operation::Create, &cluster(None), &pod()).await.unwrap();
    let default = json!({"plugin-metadata": "default"});
    check_patched_pod(&apply(&pod(), &patch), &default, &default);
}

#[tokio::test]
async fn passes_the_conformance_suite_over_mtls_and_unix_sockets() {
    for plugin in [
        TestPlugin::start_tls(server()).await.unwrap(),
        TestPlugin::start_unix(server()).await.unwrap(),
    ] {
        let report = plugin.check_conformance(PLUGIN).await.unwrap();
        assert!(report.passed(), "{report}");
        assert!(report.checks.len() >= 20, "{report}");
    }
}
