//! The DatabaseTable's layout and CRDs, without a cluster.

#![allow(clippy::unwrap_used)]

use cnpgi_example_database_table::{
    ColumnType, DatabaseTable, DatabaseTableSpec, DeletionPolicy, ImplementationLayout, MariaDbDatabaseTable,
    PostgreSqlDatabaseTable, StorageEngine,
};
use cnpgi_host::routing::{PluginLayout, PluginStatusUpdate, RoutedResource};
use kube::CustomResourceExt;
use serde_json::{Value, json};

/// The seed's table, as users write it.
fn users() -> Value {
    json!({
        "apiVersion": "example.cnpgi.io/v1",
        "kind": "DatabaseTable",
        "metadata": {"name": "users", "namespace": "tables"},
        "spec": {
            "name": "users",
            "serverName": "app-db",
            "preferredImplementation": "mariadb.tables.example.cnpgi.io",
            "policies": ["naming.tables.example.cnpgi.io"],
            "columns": [{"name": "id", "type": "uint64"}, {"name": "email", "type": "string", "nullable": true}],
            "references": [
                {"apiVersion": "example.cnpgi.io/v1", "kind": "MariaDbDatabaseTable", "name": "users"},
                {"apiVersion": "example.cnpgi.io/v1", "kind": "PostgreSqlDatabaseTable", "name": "users"},
            ],
        },
    })
}

#[test]
fn the_seeds_table_decodes_with_its_defaults() {
    let table: DatabaseTable = serde_json::from_value(users()).unwrap();
    let spec: &DatabaseTableSpec = &table.spec;
    assert_eq!(spec.columns[0].column_type, ColumnType::Uint64);
    assert!(!spec.columns[0].nullable && spec.columns[1].nullable);
    assert_eq!(spec.deletion_policy, DeletionPolicy::Keep);
    assert!(!spec.drop_extra_columns);
    assert_eq!(spec.references[1].kind, "PostgreSqlDatabaseTable");
    // Round trip: what the operator writes back is what was read.
    let again: DatabaseTable = serde_json::from_value(serde_json::to_value(&table).unwrap()).unwrap();
    assert_eq!(
        (again.spec, again.metadata),
        (table.spec.clone(), table.metadata.clone())
    );

    // Every agnostic type, by its name; no other.
    for name in [
        "int32",
        "int64",
        "uint64",
        "string",
        "text",
        "bool",
        "timestamp",
        "float64",
    ] {
        let column_type: ColumnType = serde_json::from_value(json!(name)).unwrap();
        assert_eq!(column_type.as_str(), name);
        assert_eq!(ColumnType::from_name(name), Some(column_type));
    }
    assert!(serde_json::from_value::<ColumnType>(json!("bigint")).is_err());

    let mut delete = users();
    delete["spec"]["deletionPolicy"] = json!("Delete");
    let delete: DatabaseTable = serde_json::from_value(delete).unwrap();
    assert_eq!(delete.spec.deletion_policy, DeletionPolicy::Delete);
}

#[test]
fn the_preferred_implementation_and_the_policies_are_the_plugins() {
    let table = users();
    let enabled: Vec<(usize, String)> = ImplementationLayout
        .enabled_plugins(&table)
        .into_iter()
        .map(|p| (p.index, p.name))
        .collect();
    assert_eq!(
        enabled,
        [
            (0, "mariadb.tables.example.cnpgi.io".to_owned()),
            (1, "naming.tables.example.cnpgi.io".to_owned()),
        ]
    );
    // De-duplicated by name (first wins), empty names skipped, sorted by name.
    let mut repeated = users();
    repeated["spec"]["policies"] = json!([
        "naming.tables.example.cnpgi.io",
        "mariadb.tables.example.cnpgi.io",
        "",
        "audit.example.com"
    ]);
    let names: Vec<(usize, String)> = ImplementationLayout
        .enabled_plugins(&repeated)
        .into_iter()
        .map(|p| (p.index, p.name))
        .collect();
    assert_eq!(names[0], (4, "audit.example.com".to_owned()));
    assert_eq!(names.len(), 3);
    assert!(
        ImplementationLayout
            .enabled_plugins(&json!({"spec": {"preferredImplementation": ""}}))
            .is_empty()
    );
}

#[test]
fn the_preferred_implementation_is_one_among_several() {
    let choice = ImplementationLayout.implementation_choice().unwrap();
    assert_eq!(choice.kind, "tables.example.cnpgi.io");
    assert_eq!(choice.status_field, "implementationChoice");
    assert_eq!(choice.preferred(&users()), Some("mariadb.tables.example.cnpgi.io"));
    // The preferred plugin is among the enabled ones, as the host requires.
    let routed = RoutedResource::with_layout(users(), &ImplementationLayout);
    assert!(
        routed
            .enabled()
            .iter()
            .any(|p| p.name == "mariadb.tables.example.cnpgi.io")
    );
}

#[test]
fn references_are_read_from_spec_references_with_their_field() {
    let references = ImplementationLayout.references(&users());
    let read: Vec<(&str, &str, &str, &str)> = references
        .iter()
        .map(|r| {
            (
                r.api_version.as_str(),
                r.kind.as_str(),
                r.name.as_str(),
                r.field.as_str(),
            )
        })
        .collect();
    assert_eq!(
        read,
        [
            (
                "example.cnpgi.io/v1",
                "MariaDbDatabaseTable",
                "users",
                "spec.references[0]"
            ),
            (
                "example.cnpgi.io/v1",
                "PostgreSqlDatabaseTable",
                "users",
                "spec.references[1]"
            ),
        ]
    );
    // An incomplete entry is no reference (the schema refuses it anyway); the index stays the list's.
    let mut incomplete = users();
    incomplete["spec"]["references"][0]["name"] = json!("");
    let references = ImplementationLayout.references(&incomplete);
    assert_eq!(references.len(), 1);
    assert_eq!(references[0].field, "spec.references[1]");
    assert!(ImplementationLayout.references(&json!({"spec": {}})).is_empty());
}

#[test]
fn entries_go_in_status_plugins_and_the_rest_of_the_status_stays() {
    let mut table = json!({"spec": {}, "status": {"phase": "Ready"}});
    let entry = PluginStatusUpdate {
        name: "postgres.tables.example.cnpgi.io".into(),
        version: "0.1.0".into(),
        status: Some(r#"{"columns":2}"#.into()),
        ..Default::default()
    };
    ImplementationLayout.write_plugin_status(&mut table, &[entry]);
    assert_eq!(table["status"]["phase"], "Ready");
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
fn field_errors_read_as_written() {
    let path = |components: &[&str]| {
        let components: Vec<String> = components.iter().map(|c| (*c).to_owned()).collect();
        ImplementationLayout.field_path(&components, 3)
    };
    assert_eq!(path(&["spec", "columns", "1", "type"]), "spec.columns[1].type");
    assert_eq!(path(&["spec", "name"]), "spec.name");
    assert_eq!(path(&[]), "spec");
}

/// The schema of `crd`'s one version.
fn schema(crd: &impl serde::Serialize) -> Value {
    let crd = serde_json::to_value(crd).unwrap();
    assert_eq!(crd["spec"]["group"], "example.cnpgi.io");
    let version = &crd["spec"]["versions"][0];
    assert!(version["subresources"]["status"].is_object(), "no status subresource");
    version["schema"]["openAPIV3Schema"].clone()
}

fn required(object: &Value) -> Vec<&str> {
    let mut names: Vec<&str> = object["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    names.sort_unstable();
    names
}

#[test]
fn the_database_table_crd_has_the_seeds_fields() {
    let schema = schema(&DatabaseTable::crd());
    let spec = &schema["properties"]["spec"];
    assert_eq!(
        required(spec),
        ["columns", "name", "preferredImplementation", "serverName"]
    );
    let column = &spec["properties"]["columns"]["items"];
    assert_eq!(required(column), ["name", "type"]);
    assert_eq!(
        column["properties"]["type"]["enum"],
        json!([
            "int32",
            "int64",
            "uint64",
            "string",
            "text",
            "bool",
            "timestamp",
            "float64"
        ])
    );
    let policy = &spec["properties"]["deletionPolicy"];
    assert_eq!(
        (&policy["enum"], &policy["default"]),
        (&json!(["Keep", "Delete"]), &json!("Keep"))
    );
    let reference = &spec["properties"]["references"]["items"];
    assert_eq!(required(reference), ["apiVersion", "kind", "name"]);
    // What the host writes into the status is in the schema (else the API server prunes it).
    let status = &schema["properties"]["status"]["properties"];
    for field in [
        "implementationChoice",
        "conditions",
        "plugins",
        "phase",
        "message",
        "observedGeneration",
    ] {
        assert!(status[field].is_object(), "status.{field} missing");
    }
    for field in ["kind", "preferred", "chosen", "reason", "message", "reselect"] {
        assert!(
            status["implementationChoice"]["properties"][field].is_object(),
            "implementationChoice.{field}"
        );
    }
    for field in ["type", "status", "reason", "message", "lastTransitionTime"] {
        assert!(
            status["conditions"]["items"]["properties"][field].is_object(),
            "conditions[].{field}"
        );
    }
}

#[test]
fn the_reference_crds_keep_the_plugins_reports() {
    let pg = schema(&PostgreSqlDatabaseTable::crd());
    let partition = &pg["properties"]["spec"]["properties"]["partitionBy"];
    assert_eq!(
        partition["properties"]["type"]["enum"],
        json!(["none", "hash", "range"])
    );
    let partitions = &partition["properties"]["partitions"];
    assert_eq!(
        (partitions["minimum"].as_f64(), partitions["maximum"].as_f64()),
        (Some(2.0), Some(64.0))
    );
    let maria = schema(&MariaDbDatabaseTable::crd());
    let engine = &maria["properties"]["spec"]["properties"]["storageEngine"];
    assert_eq!(engine["enum"], json!(["InnoDB", "Aria", "MyISAM", "MEMORY"]));
    assert_eq!(engine["default"], "InnoDB");
    assert_eq!(
        serde_json::from_value::<MariaDbDatabaseTable>(json!({
            "apiVersion": "example.cnpgi.io/v1", "kind": "MariaDbDatabaseTable", "metadata": {"name": "u"}, "spec": {}}))
        .unwrap()
        .spec
        .storage_engine,
        StorageEngine::InnoDB
    );
    for schema in [pg, maria] {
        let reports = &schema["properties"]["status"]["properties"]["cnpgiReports"];
        assert_eq!(reports["x-kubernetes-preserve-unknown-fields"], true, "{reports}");
    }
}

#[test]
fn the_shipped_crds_are_the_ones_the_types_make() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/crd.yaml");
    let text = std::fs::read_to_string(path).unwrap();
    let shipped: Vec<Value> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|document| serde::Deserialize::deserialize(document).unwrap())
        .filter(|document: &Value| !document.is_null())
        .collect();
    let made = [
        serde_json::to_value(DatabaseTable::crd()).unwrap(),
        serde_json::to_value(PostgreSqlDatabaseTable::crd()).unwrap(),
        serde_json::to_value(MariaDbDatabaseTable::crd()).unwrap(),
    ];
    assert_eq!(
        shipped, made,
        "manifests/crd.yaml is stale: run `database-table-operator --print-crd > examples/database-table/manifests/crd.yaml`"
    );
}

/// The API server prunes what a structural schema does not declare: every
/// field the host writes into `status.implementationChoice` must be in the
/// CRD, or the status silently loses it (as `unavailable` once was).
#[test]
fn the_crd_keeps_every_field_of_the_hosts_implementation_choice() {
    let decision = cnpgi_host::choice::ImplementationDecision {
        kind: "k".into(),
        preferred: "a".into(),
        chosen: Some("b".into()),
        reason: cnpgi_host::choice::ChoiceReason::PreferredUnavailable,
        message: "m".into(),
        reselect: Some("1".into()),
        unavailable: Some("gone".into()),
    };
    let written = serde_json::to_value(&decision).unwrap();
    let schema = schema(&DatabaseTable::crd());
    let declared = &schema["properties"]["status"]["properties"]["implementationChoice"]["properties"];
    for field in written.as_object().unwrap().keys() {
        assert!(
            declared.get(field).is_some(),
            "status.implementationChoice.{field} is written by the host and not in the CRD: {declared}"
        );
    }
}
