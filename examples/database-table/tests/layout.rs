//! The DatabaseTable's layout and CRD, without a cluster.

#![allow(clippy::unwrap_used)]

use cnpgi_example_database_table::{DatabaseTable, ImplementationLayout};
use cnpgi_host::routing::{PluginLayout, PluginStatusUpdate, RoutedResource};
use kube::CustomResourceExt;
use serde_json::json;

#[test]
fn the_implementation_is_the_one_plugin_and_entries_go_in_status_plugins() {
    let mut table =
        json!({"spec": {"implementation": "postgres.tables.example.cnpgi.io"}, "status": {"phase": "Ready"}});
    let routed = RoutedResource::with_layout(table.clone(), &ImplementationLayout);
    assert_eq!(routed.enabled()[0].name, "postgres.tables.example.cnpgi.io");
    assert!(
        ImplementationLayout
            .enabled_plugins(&json!({"spec": {"implementation": ""}}))
            .is_empty()
    );

    let entry = PluginStatusUpdate {
        name: "postgres.tables.example.cnpgi.io".into(),
        version: "0.1.0".into(),
        status: Some(r#"{"columns":2}"#.into()),
        ..Default::default()
    };
    ImplementationLayout.write_plugin_status(&mut table, &[entry]);
    assert_eq!(table["status"]["phase"], "Ready", "the rest of the status is kept");
    assert_eq!(table["status"]["plugins"][0]["version"], "0.1.0");
    let previous = ImplementationLayout.previous_statuses(&table);
    assert_eq!(previous["postgres.tables.example.cnpgi.io"], r#"{"columns":2}"#);

    // A malformed status is replaced, a non-object resource left alone.
    let mut malformed = json!({"status": 3});
    ImplementationLayout.write_plugin_status(&mut malformed, &[]);
    assert_eq!(malformed, json!({"status": {"plugins": []}}));
    let mut not_an_object = json!([1]);
    ImplementationLayout.write_plugin_status(&mut not_an_object, &[]);
    assert_eq!(not_an_object, json!([1]));
}

#[test]
fn policies_are_plugins_too_in_routing_order() {
    let table = json!({"spec": {
        "implementation": "postgres.tables.example.cnpgi.io",
        "policies": ["naming.tables.example.cnpgi.io", "postgres.tables.example.cnpgi.io", "", "audit.example.com"],
    }});
    let enabled: Vec<(usize, String)> = ImplementationLayout
        .enabled_plugins(&table)
        .into_iter()
        .map(|p| (p.index, p.name))
        .collect();
    assert_eq!(
        enabled,
        [
            (4, "audit.example.com".to_owned()),
            (1, "naming.tables.example.cnpgi.io".to_owned()),
            (0, "postgres.tables.example.cnpgi.io".to_owned()),
        ]
    );
}

#[test]
fn field_errors_of_columns_read_as_written() {
    let components = ["spec", "columns", "1", "type"].map(String::from);
    assert_eq!(ImplementationLayout.field_path(&components, 0), "spec.columns[1].type");
}

#[test]
fn the_crd_has_a_status_subresource_and_the_spec_fields() {
    let crd = serde_json::to_value(DatabaseTable::crd()).unwrap();
    assert_eq!(crd["spec"]["group"], "example.cnpgi.io");
    let version = &crd["spec"]["versions"][0];
    assert!(version["subresources"]["status"].is_object());
    let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let required: Vec<&str> = spec["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(required, ["columns", "implementation", "server", "table"]);
    assert!(spec["properties"]["columns"]["items"]["properties"]["type"].is_object());
}

#[test]
fn the_shipped_crd_is_the_one_the_types_make() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml");
    let shipped: serde_json::Value = serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert_eq!(
        shipped,
        serde_json::to_value(DatabaseTable::crd()).unwrap(),
        "manifests/crd.yaml is stale: run `database-table-operator --print-crd > examples/database-table/manifests/crd.yaml`"
    );
}
