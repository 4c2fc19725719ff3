//! The `Cluster` custom resource served by `cnpgi-operator`.
//!
//! Its own API group (`cnpgi.io`), not CloudNativePG's, but `spec.plugins[]`
//! and `status.pluginStatus[]` are CloudNativePG's: their entries are
//! `cnpgi-core`'s [`PluginConfiguration`] and [`PluginStatus`], the types
//! plugins decode, with the same `enabled` rule (absent means enabled).

pub use cnpgi_core::{
    cluster::{PluginConfiguration, PluginStatus},
    pod::DEFAULT_IMAGE,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

fn default_instances() -> i32 {
    1
}

fn default_image() -> String {
    DEFAULT_IMAGE.to_owned()
}

/// A PostgreSQL cluster: instance Pods `<name>-<n>`, patched by its plugins.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "cnpgi.io",
    version = "v1",
    kind = "Cluster",
    namespaced,
    status = "ClusterStatus",
    shortname = "cnpgicluster",
    doc = "A PostgreSQL cluster managed by cnpgi-operator: instance Pods <name>-1 to <name>-N, each passed through the lifecycle hooks of the CNPG-I plugins listed in spec.plugins (CloudNativePG's shape), which also validate and default the Cluster through the operator's admission webhooks.",
    printcolumn = r#"{"name":"Instances","type":"integer","jsonPath":".spec.instances"}"#,
    printcolumn = r#"{"name":"Ready","type":"integer","jsonPath":".status.readyInstances"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// Number of instances (Pods). Default 1.
    #[serde(default = "default_instances")]
    #[schemars(range(min = 0))]
    pub instances: i32,
    /// PostgreSQL container image.
    #[serde(default = "default_image")]
    pub image_name: String,
    /// The CNPG-I plugins this Cluster uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugins: Vec<PluginConfiguration>,
    /// PostgreSQL's configuration (CloudNativePG's shape).
    #[serde(default, skip_serializing_if = "PostgresConfiguration::is_empty")]
    pub postgresql: PostgresConfiguration,
}

/// `spec.postgresql`: the PostgreSQL configuration of the instances.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PostgresConfiguration {
    /// PostgreSQL configuration parameters. Plugins advertising the Postgres
    /// service may change them (`EnrichConfiguration`); the result is the
    /// instance Pods' `cnpgi.io/postgresqlConfiguration` annotation.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub parameters: std::collections::BTreeMap<String, String>,
}

impl PostgresConfiguration {
    /// Whether nothing is configured (the field is then not serialised).
    pub fn is_empty(&self) -> bool {
        self.parameters.is_empty()
    }
}

/// What the operator observed.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// Short state: `Healthy`, `Creating instances`, `Plugin error`, ...
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why the Cluster is in this phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase_reason: Option<String>,
    /// Standard conditions (`Ready`, `PluginsReady`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Instance Pods that are ready.
    #[serde(default)]
    pub ready_instances: i32,
    /// One entry per enabled plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub plugin_status: Vec<PluginStatus>,
}

/// The Cluster is a plugin resource of the host library with CloudNativePG's
/// layout (the default): `spec.plugins[]`, `status.pluginStatus[]`.
impl cnpgi_host::PluginResource for Cluster {}

/// The CRD as YAML, as `cnpgi-operator crd` prints it.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    use kube::CustomResourceExt;
    serde_yaml_ng::to_string(&Cluster::crd())
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;

    /// Hosted through the typed facade, a Cluster routes as the reconciler
    /// routes it, as JSON (its bytes and enabled plugins are the same).
    #[test]
    fn a_hosted_cluster_routes_as_the_operator_routes_it() {
        let cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "cnpgi.io/v1", "kind": "Cluster", "metadata": {"name": "pg"},
            "spec": {"instances": 1, "plugins": [{"name": "b.example.com"}, {"name": "a.example.com"},
                                                 {"name": "c.example.com", "enabled": false}]}
        }))
        .unwrap();
        let host = cnpgi_host::Host::<Cluster>::new(cnpgi_host::HostOptions::default());
        let hosted = host.routed(&cluster).unwrap();
        let routed = host.routed_json(serde_json::to_value(&cluster).unwrap());
        assert_eq!(hosted.definition(), routed.definition());
        let names =
            |r: &cnpgi_host::routing::RoutedResource| r.enabled().iter().map(|p| p.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&hosted), ["a.example.com", "b.example.com"]);
        assert_eq!(names(&hosted), names(&routed));
    }

    #[test]
    fn crd_has_its_own_group_and_cloudnative_pg_plugin_shape() {
        let crd = Cluster::crd();
        assert_eq!(crd.spec.group, "cnpgi.io");
        assert_eq!(crd.spec.names.kind, "Cluster");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).unwrap();
        let plugin = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["plugins"]["items"]["properties"];
        for field in ["name", "enabled", "isWALArchiver", "parameters"] {
            assert!(plugin.get(field).is_some(), "{field} missing: {plugin}");
        }
        assert!(crd.spec.versions[0].subresources.as_ref().unwrap().status.is_some());
    }

    #[test]
    fn postgresql_parameters_have_cloudnative_pgs_shape() {
        let spec: ClusterSpec = serde_json::from_value(serde_json::json!({
            "postgresql": {"parameters": {"shared_buffers": "256MB"}}
        }))
        .unwrap();
        assert_eq!(spec.postgresql.parameters["shared_buffers"], "256MB");
        let schema = serde_json::to_value(&Cluster::crd().spec.versions[0].schema).unwrap();
        let parameters =
            &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["postgresql"]["properties"]["parameters"];
        assert_eq!(parameters["additionalProperties"]["type"], "string", "{parameters}");
        // Absent stays absent: Clusters written before the field serialise as they did.
        let bare: ClusterSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(serde_json::to_value(&bare).unwrap().get("postgresql").is_none());
    }

    #[test]
    fn spec_defaults() {
        let spec: ClusterSpec = serde_json::from_value(serde_json::json!({"plugins": [{"name": "p"}]})).unwrap();
        assert_eq!(spec.instances, 1);
        assert_eq!(spec.image_name, DEFAULT_IMAGE);
        assert!(spec.plugins[0].is_enabled());
        assert_eq!(
            spec.plugins[0].enabled, None,
            "absent stays absent: one rule, in cnpgi-core"
        );
    }

    #[test]
    fn the_crd_describes_itself() {
        let crd = Cluster::crd();
        let schema = crd.spec.versions[0].schema.as_ref().unwrap();
        let description = schema.open_api_v3_schema.as_ref().unwrap().description.clone().unwrap();
        assert!(!description.contains("Auto-generated"), "{description}");
        assert!(description.contains("spec.plugins"), "{description}");
    }

    #[test]
    fn yaml_output_parses_back_into_the_same_crd() {
        let yaml = crd_yaml().unwrap();
        let parsed: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
            serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(parsed, Cluster::crd());
    }
}
