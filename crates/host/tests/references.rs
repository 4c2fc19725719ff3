//! References with a real plugin (over a Unix socket) and kube's real
//! client against the fake API server: the host reads the referenced
//! objects, the plugin sees them in the resource JSON of its calls (a missing
//! one with its error), the status says which is missing, the plugin's report
//! goes into the referenced object's status, and a changed object maps back
//! to the resources referencing it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{collections::BTreeMap, sync::Arc};

use cnpgi_host::{
    ClientOptions, Host, HostOptions, PluginClient, PluginResource, Transport,
    references::{ObjectReference, REFERENCES_KEY, ReferenceResolver, references_of, referencing},
    routing::{EnabledPlugin, PluginLayout, PluginStatusUpdate},
    testing::FakeApiServer,
};
use cnpgi_pluginhelper::{
    proto::{
        identity::v1::plugin_capability::service::Type as ServiceType,
        operator::v1::{
            OperatorCapabilitiesRequest, OperatorCapabilitiesResult, OperatorCapability, OperatorMutateClusterRequest,
            OperatorMutateClusterResult, OperatorValidateClusterCreateRequest, OperatorValidateClusterCreateResult,
            SetStatusInClusterRequest, SetStatusInClusterResponse, ValidationError, operator_capability,
            operator_server::{Operator, OperatorServer},
        },
    },
    testing::{TestIdentity, TestPlugin},
    transport::PluginServer,
};
use kube::{
    CustomResource,
    api::DynamicObject,
    runtime::{reflector, watcher},
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tonic::{Request, Response, Status};

const PLUGIN: &str = "refs.example.com";

/// A table implemented by `spec.implementation`, referencing `spec.refs`.
#[derive(CustomResource, Clone, Debug, Serialize, Deserialize, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Table", namespaced)]
pub struct TableSpec {
    /// The plugin.
    pub implementation: String,
    /// `[{"apiVersion", "kind", "name"}]`.
    #[serde(default)]
    pub refs: Vec<Value>,
    /// More plugins.
    #[serde(default)]
    pub also: Vec<String>,
}

/// `spec.implementation`; references in `spec.refs[]`; entries in `status.plugins`.
#[derive(Debug)]
struct WithRefs;

impl PluginLayout for WithRefs {
    fn enabled_plugins(&self, resource: &Value) -> Vec<EnabledPlugin> {
        let name = resource.pointer("/spec/implementation").and_then(Value::as_str);
        let also = resource.pointer("/spec/also").and_then(Value::as_array);
        let mut enabled: Vec<EnabledPlugin> = name
            .into_iter()
            .chain(also.into_iter().flatten().filter_map(Value::as_str))
            .enumerate()
            .map(|(index, name)| EnabledPlugin {
                index,
                name: name.to_owned(),
            })
            .collect();
        enabled.sort_by(|a, b| a.name.cmp(&b.name));
        enabled
    }
    fn previous_statuses(&self, _: &Value) -> BTreeMap<String, String> {
        BTreeMap::new()
    }
    fn write_plugin_status(&self, resource: &mut Value, entries: &[PluginStatusUpdate]) {
        let entries: Vec<Value> = entries
            .iter()
            .map(|e| json!({"name": e.name, "status": e.status}))
            .collect();
        resource["status"]["plugins"] = json!(entries);
    }
    fn references(&self, resource: &Value) -> Vec<ObjectReference> {
        let refs = resource.pointer("/spec/refs").and_then(Value::as_array);
        refs.into_iter()
            .flatten()
            .enumerate()
            .map(|(i, r)| ObjectReference {
                api_version: r["apiVersion"].as_str().unwrap_or_default().to_owned(),
                kind: r["kind"].as_str().unwrap_or_default().to_owned(),
                name: r["name"].as_str().unwrap_or_default().to_owned(),
                field: format!("spec.refs[{i}]"),
            })
            .collect()
    }
}

impl PluginResource for Table {
    fn layout() -> Arc<dyn PluginLayout> {
        Arc::new(WithRefs)
    }
}

/// Tells what it sees: one validation "error" per reference, and a report
/// on every Widget it is sent.
struct Seeing;

#[tonic::async_trait]
impl Operator for Seeing {
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        use operator_capability::{Rpc, Type, rpc::Type as RpcType};
        let rpc = |t: RpcType| OperatorCapability {
            r#type: Some(Type::Rpc(Rpc { r#type: t.into() })),
        };
        Ok(Response::new(OperatorCapabilitiesResult {
            capabilities: vec![rpc(RpcType::ValidateClusterCreate), rpc(RpcType::SetStatusInCluster)],
        }))
    }

    async fn validate_cluster_create(
        &self,
        request: Request<OperatorValidateClusterCreateRequest>,
    ) -> Result<Response<OperatorValidateClusterCreateResult>, Status> {
        let definition: Value = serde_json::from_slice(&request.into_inner().definition).unwrap();
        let validation_errors = references_of(&definition)
            .into_iter()
            .map(|r| ValidationError {
                path_components: vec![r.field.clone()],
                value: r.name.clone(),
                message: match (&r.object, &r.error) {
                    (Some(object), _) => format!("seen, data {}", object["data"]),
                    (None, Some(error)) => format!("missing: {error}"),
                    (None, None) => "neither".into(),
                },
            })
            .collect();
        Ok(Response::new(OperatorValidateClusterCreateResult { validation_errors }))
    }

    async fn set_status_in_cluster(
        &self,
        request: Request<SetStatusInClusterRequest>,
    ) -> Result<Response<SetStatusInClusterResponse>, Status> {
        let cluster: Value = serde_json::from_slice(&request.into_inner().cluster).unwrap();
        let reports: Vec<Value> = references_of(&cluster)
            .iter()
            .filter(|r| r.kind == "Widget" && r.object.is_some())
            .map(|r| {
                json!({"apiVersion": r.api_version, "kind": r.kind, "name": r.name,
                            "status": {"usedBy": cluster["metadata"]["name"]}})
            })
            .collect();
        let status = json!({"references": references_of(&cluster).len(), REFERENCES_KEY: reports});
        Ok(Response::new(SetStatusInClusterResponse {
            json_status: status.to_string().into_bytes(),
        }))
    }
}

fn table(name: &str, refs: Value) -> Table {
    let mut table = Table::new(
        name,
        TableSpec {
            implementation: PLUGIN.into(),
            refs: serde_json::from_value(refs).unwrap(),
            also: Vec::new(),
        },
    );
    table.metadata.namespace = Some("default".into());
    table
}

#[tokio::test]
async fn referenced_objects_travel_with_the_resource_are_reported_on_and_map_back() {
    let api = FakeApiServer::new();
    api.seed(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"},
               "data": {"color": "blue"}}),
    );
    let widgets = "/apis/example.com/v1/namespaces/default/widgets";
    api.seed(
        widgets,
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "default"}}),
    );
    let url = api.clone().start().await;
    let resolver = ReferenceResolver::new(FakeApiServer::client(&url, "default"));

    let dir = tempfile::tempdir().unwrap();
    let server = PluginServer::new(TestIdentity::new(PLUGIN).with_service(ServiceType::OperatorService))
        .add_service(OperatorServer::new(Seeing));
    let _plugin = TestPlugin::start_unix_in(server, dir.path()).await.unwrap();
    let host = Host::<Table>::new(HostOptions::default());
    let client = PluginClient::new(
        PLUGIN,
        Transport::Unix {
            path: dir.path().join(PLUGIN),
        },
        &ClientOptions::default(),
    )
    .unwrap();
    host.add_plugin("test", client).await.unwrap();

    let users = table(
        "users",
        json!([
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "absent"},
            {"apiVersion": "example.com/v1", "kind": "Widget", "name": "w1"},
        ]),
    );
    let routed = host.routed_with_references(&users, &resolver).await.unwrap();
    assert!(
        routed.value().get(REFERENCES_KEY).is_none(),
        "the resource itself stays clean"
    );

    // The plugin sees each reference in the definition of its call: the
    // object, or why it is missing.
    let seen = host.validate_create_json(&routed).await.unwrap();
    let messages: Vec<(&str, &str)> = seen.iter().map(|e| (e.value.as_str(), e.message.as_str())).collect();
    assert_eq!(messages[0], ("settings", r#"seen, data {"color":"blue"}"#));
    assert_eq!(messages[1].0, "absent");
    assert!(
        messages[1]
            .1
            .starts_with("missing: ConfigMap default/absent (v1) not found"),
        "{}",
        messages[1].1
    );

    // The status: the plugin's entry without its reports, and the missing reference as a condition.
    let (status, reports) = host.plugin_status_and_reports(&routed).await.unwrap();
    let entry: Value = serde_json::from_str(status["plugins"][0]["status"].as_str().unwrap()).unwrap();
    assert_eq!(entry, json!({"references": 3}));
    let condition = &status["conditions"][0];
    assert_eq!(
        (&condition["type"], &condition["status"], &condition["reason"]),
        (
            &json!("ReferencesResolved"),
            &json!("False"),
            &json!("ReferenceNotFound")
        )
    );
    assert!(
        condition["message"]
            .as_str()
            .unwrap()
            .contains("spec.refs[1]: ConfigMap default/absent (v1) not found"),
        "{condition}"
    );

    // The report goes into the Widget's status.
    assert_eq!(reports.len(), 1);
    let (plugin, reported) = &reports[0];
    assert!(resolver.write_reports("default", plugin, reported).await.is_empty());
    let widget = &api.stored(widgets)[0];
    assert_eq!(widget["status"]["cnpgiReports"][PLUGIN]["usedBy"], "users");

    // A report on an object that is not there fails, naming it.
    let mut gone = reported.clone();
    gone[0].name = "w2".into();
    let failures = resolver.write_reports("default", plugin, &gone).await;
    assert!(failures[0].contains("Widget default/w2"), "{failures:?}");

    // A changed ConfigMap maps back to the tables referencing it.
    let (store, mut writer) = reflector::store::<Table>();
    writer.apply_watcher_event(&watcher::Event::Apply(users.clone()));
    writer.apply_watcher_event(&watcher::Event::Apply(table("orders", json!([]))));
    let settings: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}),
    )
    .unwrap();
    let mapped = referencing(&store, &WithRefs, &settings);
    assert_eq!(mapped.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), ["users"]);
    let elsewhere: DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "other"}}),
    )
    .unwrap();
    assert!(referencing(&store, &WithRefs, &elsewhere).is_empty());
}

/// Labels the resource with how many references it was sent.
struct Counting(&'static str);

#[tonic::async_trait]
impl Operator for Counting {
    async fn get_capabilities(
        &self,
        _: Request<OperatorCapabilitiesRequest>,
    ) -> Result<Response<OperatorCapabilitiesResult>, Status> {
        use operator_capability::{Rpc, Type, rpc::Type as RpcType};
        Ok(Response::new(OperatorCapabilitiesResult {
            capabilities: vec![OperatorCapability {
                r#type: Some(Type::Rpc(Rpc {
                    r#type: RpcType::MutateCluster.into(),
                })),
            }],
        }))
    }

    async fn mutate_cluster(
        &self,
        request: Request<OperatorMutateClusterRequest>,
    ) -> Result<Response<OperatorMutateClusterResult>, Status> {
        let definition: Value = serde_json::from_slice(&request.into_inner().definition).unwrap();
        let patch = json!([{"op": "add", "path": format!("/metadata/labels/{}", self.0),
                            "value": references_of(&definition).len().to_string()}]);
        Ok(Response::new(OperatorMutateClusterResult {
            json_patch: patch.to_string().into_bytes(),
        }))
    }
}

/// Each step of a mutation chain is sent the references, not only the first.
#[tokio::test]
async fn every_step_of_a_mutation_chain_is_sent_the_references() {
    let api = FakeApiServer::new();
    api.seed(
        "/api/v1/namespaces/default/configmaps",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "settings", "namespace": "default"}}),
    );
    let url = api.clone().start().await;
    let resolver = ReferenceResolver::new(FakeApiServer::client(&url, "default"));
    let dir = tempfile::tempdir().unwrap();
    let host = Host::<Table>::new(HostOptions::default());
    let mut plugins = Vec::new();
    for (name, label) in [("a.example.com", "first"), ("b.example.com", "second")] {
        let server = PluginServer::new(TestIdentity::new(name).with_service(ServiceType::OperatorService))
            .add_service(OperatorServer::new(Counting(label)));
        plugins.push(TestPlugin::start_unix_in(server, dir.path()).await.unwrap());
        let transport = Transport::Unix {
            path: dir.path().join(name),
        };
        let client = PluginClient::new(name, transport, &ClientOptions::default()).unwrap();
        host.add_plugin("test", client).await.unwrap();
    }
    let mut users = table(
        "users",
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "settings"}]),
    );
    users.spec.implementation = "a.example.com".into();
    users.spec.also = vec!["b.example.com".into()];
    users.metadata.labels = Some(BTreeMap::new());
    let routed = host.routed_with_references(&users, &resolver).await.unwrap();
    let patched = host.mutate_json(routed).await.unwrap();
    let labels = &patched.object["metadata"]["labels"];
    assert_eq!(
        (&labels["first"], &labels["second"]),
        (&json!("1"), &json!("1")),
        "{labels}"
    );
    assert!(
        patched.object.get(REFERENCES_KEY).is_none(),
        "the references are not patched into the resource"
    );
}
