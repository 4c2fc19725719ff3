//! hello-world without a server: its handler called as a plain function, and
//! the plugin through the SDK's dispatch (`Plugin::local`).

#![allow(clippy::unwrap_used)]

mod common;

use cnpg_i_hello_world::{
    config::{Config, StringMap},
    lifecycle::{PAUSER_IMAGE, patch_pod},
    plugin,
};
use cnpgi_pluginhelper::{
    capabilities::{Operation, OperatorRpc, ServiceType},
    parameters::Parameters,
};
use common::*;
use serde_json::json;

#[test]
fn the_pod_hook_is_a_plain_function() {
    let config = Config {
        labels: StringMap::from([("team".into(), "db".into())]),
        annotations: StringMap::new(),
    };
    let mut patched = pod();
    patch_pod(&config, &mut patched).unwrap();
    assert_eq!(patched["metadata"]["labels"]["team"], "db");
    assert_eq!(patched["spec"]["initContainers"][1]["image"], PAUSER_IMAGE);
    let mut not_a_pod = json!({"metadata": {"labels": "x"}});
    assert!(patch_pod(&config, &mut not_a_pod).is_err());
}

#[test]
fn parameters_parse_with_defaults() {
    let params = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let config = Config::parse(0, &params(&[("labels", "{}"), ("annotations", r#"{"a":"b"}"#)])).unwrap();
    assert_eq!(config.labels["plugin-metadata"], "default");
    assert_eq!(config.annotations["a"], "b");
    let errors = Config::parse(2, &params(&[("labels", "[]")])).unwrap_err();
    assert_eq!(errors[0].path_components, ["spec", "plugins", "2", "labels"]);
}

#[tokio::test]
async fn the_plugin_through_the_sdk_dispatch() {
    let local = plugin().local();
    assert_eq!(
        local.services().await,
        [ServiceType::LifecycleService, ServiceType::OperatorService]
    );
    assert_eq!(local.operator_rpcs().await.len(), 4);
    assert!(!local.operator_rpcs().await.contains(&OperatorRpc::Deregister));
    let errors = local.validate_create(&cluster_with_mistake()).await.unwrap();
    assert_eq!(errors[0].path_components, ["spec", "plugins", "0", "annotations"]);
    let mutated = local.mutate(&cluster(None)).await.unwrap();
    assert_eq!(
        mutated["spec"]["plugins"][0]["parameters"]["labels"],
        r#"{"plugin-metadata":"default"}"#
    );
    let patched = local.lifecycle(Operation::Evaluate, &mutated, &pod()).await.unwrap();
    assert_eq!(patched["metadata"]["annotations"]["plugin-metadata"], "default");
    let mut with_entry = mutated.clone();
    with_entry["status"] = json!({"pluginStatus": [{"name": PLUGIN}]});
    assert_eq!(
        local.set_status(&with_entry).await.unwrap(),
        Some(json!({"enabled": true}))
    );
}
