//! Admission: what a table's spec must say for PostgreSQL, what is filled
//! in, and how the agnostic column types map to PostgreSQL's.
//!
//! Checked without the database (a webhook answers in milliseconds): names
//! are plain lower-case identifiers, so they never need quoting rules
//! beyond `"name"`; types are the resource's agnostic ones
//! ([`ColumnType`]), each mapped to one PostgreSQL type ([`pg_type`]); the
//! partitioning the table's `PostgreSqlDatabaseTable` asks for names one of
//! its columns. PostgreSQL itself has the last word when the table is
//! created.

use std::collections::BTreeSet;

use cnpgi_example_database_table::{ColumnType, DatabaseTable, DatabaseTableSpec, PartitionType};
use cnpgi_pluginhelper::{prelude::ValidationError, validation::error};
use serde_json::Value;

use crate::partitions::Partitioning;

/// PostgreSQL's longest identifier (NAMEDATALEN - 1).
pub const MAX_IDENTIFIER: usize = 63;

/// The longest table name when it is partitioned: its partitions and the
/// table it is rebuilt into (`<name>__new_default`) must fit in
/// [`MAX_IDENTIFIER`] too.
pub const MAX_PARTITIONED_NAME: usize = MAX_IDENTIFIER - "__new_default".len();

/// The PostgreSQL type an agnostic type maps to.
///
/// ```
/// use cnpgi_example_database_table::ColumnType;
/// use cnpgi_example_database_table_postgres::columns::pg_type;
///
/// assert_eq!(pg_type(ColumnType::Uint64), "numeric(20,0)");
/// assert_eq!(pg_type(ColumnType::Timestamp), "timestamp with time zone");
/// ```
pub fn pg_type(column_type: ColumnType) -> &'static str {
    match column_type {
        ColumnType::Int32 => "integer",
        ColumnType::Int64 => "bigint",
        ColumnType::Uint64 => "numeric(20,0)",
        ColumnType::String => "varchar(255)",
        ColumnType::Text => "text",
        ColumnType::Bool => "boolean",
        ColumnType::Timestamp => "timestamp with time zone",
        ColumnType::Float64 => "double precision",
    }
}

/// The table a plugin was sent, decoded; the types checked on the JSON
/// first, so that an unknown one is an error on its field
/// (`spec.columns[1].type`), not a decoding error of the whole spec.
///
/// ```
/// use cnpgi_example_database_table_postgres::columns::decode;
///
/// let table = serde_json::json!({"apiVersion": "example.cnpgi.io/v1", "kind": "DatabaseTable",
///     "metadata": {"name": "users"},
///     "spec": {"name": "users", "serverName": "db", "preferredImplementation": "p",
///              "columns": [{"name": "id", "type": "uint64"}, {"name": "email", "type": "strng"}]}});
/// let errors = decode(&table).unwrap_err();
/// assert_eq!(errors[0].path_components, ["spec", "columns", "1", "type"]);
/// assert!(errors[0].message.starts_with("unknown type \"strng\""), "{}", errors[0].message);
/// ```
pub fn decode(resource: &Value) -> Result<DatabaseTable, Vec<ValidationError>> {
    let columns = resource.pointer("/spec/columns").and_then(Value::as_array);
    let errors: Vec<ValidationError> = columns
        .into_iter()
        .flatten()
        .enumerate()
        .filter_map(|(index, column)| {
            let path = ["spec", "columns", &index.to_string(), "type"].map(str::to_owned);
            match column.get("type") {
                Some(Value::String(name)) if ColumnType::from_name(name).is_some() => None,
                Some(Value::String(name)) => Some(error(path, name, unknown_type(name))),
                Some(other) => Some(error(path, other.to_string(), unknown_type(&other.to_string()))),
                None => Some(error(path, "", "a column needs a type")),
            }
        })
        .collect();
    if !errors.is_empty() {
        return Err(errors);
    }
    serde_json::from_value(resource.clone()).map_err(|e| vec![error(["spec"], "", format!("not a DatabaseTable: {e}"))])
}

fn unknown_type(name: &str) -> String {
    let known: Vec<&str> = ColumnType::ALL.iter().map(|t| t.as_str()).collect();
    format!("unknown type {name:?}: use one of {}", known.join(", "))
}

/// Every error of a table's spec, with the partitioning its
/// `PostgreSqlDatabaseTable` asks for (`reference_field`: where the table
/// names it, e.g. `spec.references[1]`).
///
/// ```
/// use cnpgi_example_database_table::{Column, ColumnType, DatabaseTableSpec};
/// use cnpgi_example_database_table_postgres::columns::validate;
///
/// let column = |name: &str| Column { name: name.into(), column_type: ColumnType::Text, nullable: true };
/// let spec = DatabaseTableSpec {
///     name: "Users".into(),
///     server_name: "app-db".into(),
///     preferred_implementation: "postgres.tables.example.cnpgi.io".into(),
///     policies: vec![],
///     columns: vec![column("id"), column("id")],
///     references: vec![],
///     deletion_policy: Default::default(),
///     drop_extra_columns: false,
/// };
/// let errors = validate(&spec, None);
/// let paths: Vec<String> = errors.iter().map(|e| e.path_components.join(".")).collect();
/// assert_eq!(paths, ["spec.name", "spec.columns.1.name"]);
/// ```
pub fn validate(spec: &DatabaseTableSpec, partitioning: Option<(&Partitioning, &str)>) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    if let Err(why) = identifier(&spec.name, MAX_IDENTIFIER) {
        errors.push(error(["spec", "name"], &spec.name, why));
    }
    if let Err(why) = dns_label(&spec.server_name) {
        errors.push(error(["spec", "serverName"], &spec.server_name, why));
    }
    if spec.columns.is_empty() {
        errors.push(error(["spec", "columns"], "", "a table needs at least one column"));
    }
    let mut names = BTreeSet::new();
    for (index, column) in spec.columns.iter().enumerate() {
        let index = index.to_string();
        if let Err(why) = identifier(&column.name, MAX_IDENTIFIER) {
            errors.push(error(["spec", "columns", &index, "name"], &column.name, why));
        } else if !names.insert(column.name.as_str()) {
            errors.push(error(
                ["spec", "columns", &index, "name"],
                &column.name,
                "another column has this name",
            ));
        }
    }
    if let Some((partitioning, field)) = partitioning {
        errors.extend(validate_partitioning(spec, partitioning, field));
    }
    errors
}

/// The partitioning's errors, on the field of the table naming its
/// `PostgreSqlDatabaseTable` (where the user looks from the table).
fn validate_partitioning(spec: &DatabaseTableSpec, partitioning: &Partitioning, field: &str) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    let path: Vec<String> = split_field(field);
    let Some(column) = partitioning.column() else {
        return errors;
    };
    if !spec.columns.iter().any(|c| c.name == column) {
        let names: Vec<&str> = spec.columns.iter().map(|c| c.name.as_str()).collect();
        errors.push(error(
            path.clone(),
            column,
            format!(
                "its partitionBy.column {column:?} is not a column of the table ({})",
                names.join(", ")
            ),
        ));
    }
    if spec.name.len() > MAX_PARTITIONED_NAME {
        errors.push(error(
            ["spec", "name"],
            &spec.name,
            format!(
                "at most {MAX_PARTITIONED_NAME} characters for a partitioned table (its partitions are named after it), \
                 and {field} partitions it"
            ),
        ));
    }
    errors
}

/// `spec.references[1]` as path components: `["spec", "references", "1"]`.
fn split_field(field: &str) -> Vec<String> {
    field
        .split(['.', '[', ']'])
        .filter(|part| !part.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The errors of a `PostgreSqlDatabaseTable`'s `partitionBy` on its own
/// (the column and the count), as a [`Partitioning`] or why not.
pub fn partitioning(partition_by: Option<&cnpgi_example_database_table::PartitionBy>) -> Result<Partitioning, String> {
    let Some(partition_by) = partition_by else {
        return Ok(Partitioning::None);
    };
    let column = || {
        partition_by.column.clone().filter(|c| !c.is_empty()).ok_or_else(|| {
            format!(
                "partitionBy.type {} needs partitionBy.column",
                type_name(partition_by.partition_type)
            )
        })
    };
    match partition_by.partition_type {
        PartitionType::None => Ok(Partitioning::None),
        PartitionType::Range => Ok(Partitioning::Range { column: column()? }),
        PartitionType::Hash => {
            let column = column()?;
            let partitions = partition_by
                .partitions
                .ok_or("partitionBy.type hash needs partitionBy.partitions (2 to 64)")?;
            if !(2..=64).contains(&partitions) {
                return Err(format!("partitionBy.partitions must be 2 to 64, not {partitions}"));
            }
            Ok(Partitioning::Hash { column, partitions })
        }
    }
}

fn type_name(partition_type: PartitionType) -> &'static str {
    match partition_type {
        PartitionType::None => "none",
        PartitionType::Hash => "hash",
        PartitionType::Range => "range",
    }
}

/// Every error of a change: the new spec's, and the fields fixed once the
/// table exists (its name and server: changing them would leave the table
/// behind, unmanaged).
pub fn validate_change(
    old: &DatabaseTableSpec,
    new: &DatabaseTableSpec,
    partitioning: Option<(&Partitioning, &str)>,
) -> Vec<ValidationError> {
    let mut errors = validate(new, partitioning);
    if old.name != new.name {
        errors.push(error(
            ["spec", "name"],
            &new.name,
            format!("cannot be changed (was {:?}): create another DatabaseTable", old.name),
        ));
    }
    if old.server_name != new.server_name {
        errors.push(error(
            ["spec", "serverName"],
            &new.server_name,
            format!(
                "cannot be changed (was {:?}): create another DatabaseTable on the other server",
                old.server_name
            ),
        ));
    }
    errors
}

/// Writes the defaults into the resource's JSON: `deletionPolicy: Keep`,
/// and `nullable: false` on each column without it (the CRD's schema
/// defaults them too; a resource that reaches the plugin another way gets
/// the same).
pub fn defaults(table: &mut Value) {
    let Some(spec) = table.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let policy = spec.entry("deletionPolicy").or_insert(Value::Null);
    if policy.is_null() {
        *policy = "Keep".into();
    }
    let columns = spec.get_mut("columns").and_then(Value::as_array_mut);
    for column in columns.into_iter().flatten() {
        let Some(column) = column.as_object_mut() else { continue };
        let nullable = column.entry("nullable").or_insert(Value::Null);
        if nullable.is_null() {
            *nullable = false.into();
        }
    }
}

/// A lower-case SQL identifier: a letter or `_`, then letters, digits or
/// `_`, at most `max` characters.
pub fn identifier(name: &str, max: usize) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && name.len() <= max;
    if valid {
        Ok(())
    } else {
        Err(format!(
            "must be a lower-case identifier: a letter or _, then letters, digits or _, at most {max}"
        ))
    }
}

/// A Kubernetes object name that can prefix a Service's (`<name>-rw`): a
/// DNS label, at most 60 characters.
fn dns_label(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= 60
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if valid {
        Ok(())
    } else {
        Err(
            "must name a CloudNativePG Cluster of the table's namespace: lower-case letters, digits and -, \
             at most 60"
                .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use cnpgi_example_database_table::{Column, PartitionBy};
    use serde_json::json;

    use super::*;

    fn spec(columns: &[&str]) -> DatabaseTableSpec {
        DatabaseTableSpec {
            name: "users".into(),
            server_name: "app-db".into(),
            preferred_implementation: "postgres.tables.example.cnpgi.io".into(),
            policies: vec![],
            columns: columns
                .iter()
                .map(|name| Column {
                    name: (*name).into(),
                    column_type: ColumnType::Int64,
                    nullable: false,
                })
                .collect(),
            references: vec![],
            deletion_policy: Default::default(),
            drop_extra_columns: false,
        }
    }

    fn paths(errors: &[ValidationError]) -> Vec<String> {
        errors.iter().map(|e| e.path_components.join("/")).collect()
    }

    #[test]
    fn every_agnostic_type_maps_to_the_spec_table() {
        let mapped: Vec<(&str, &str)> = ColumnType::ALL.iter().map(|t| (t.as_str(), pg_type(*t))).collect();
        assert_eq!(
            mapped,
            [
                ("int32", "integer"),
                ("int64", "bigint"),
                ("uint64", "numeric(20,0)"),
                ("string", "varchar(255)"),
                ("text", "text"),
                ("bool", "boolean"),
                ("timestamp", "timestamp with time zone"),
                ("float64", "double precision"),
            ]
        );
    }

    #[test]
    fn unknown_or_missing_types_are_errors_on_their_field() {
        let table = |columns: Value| {
            json!({"apiVersion": "example.cnpgi.io/v1", "kind": "DatabaseTable", "metadata": {"name": "t"},
                   "spec": {"name": "t", "serverName": "db", "preferredImplementation": "p", "columns": columns}})
        };
        let errors = decode(&table(
            json!([{"name": "a", "type": "bigint"}, {"name": "b"}, {"name": "c", "type": 3}]),
        ))
        .unwrap_err();
        assert_eq!(
            paths(&errors),
            ["spec/columns/0/type", "spec/columns/1/type", "spec/columns/2/type"]
        );
        assert!(
            errors[0].message.contains("use one of int32, int64, uint64"),
            "{}",
            errors[0].message
        );
        let decoded = decode(&table(json!([{"name": "a", "type": "bool"}]))).unwrap();
        assert_eq!(decoded.spec.columns[0].column_type, ColumnType::Bool);
        // Anything else that does not decode is an error on spec.
        let errors = decode(&json!({"spec": {"columns": []}})).unwrap_err();
        assert_eq!(paths(&errors), ["spec"]);
    }

    #[test]
    fn names_server_and_columns_are_checked_with_their_paths() {
        assert!(validate(&spec(&["id", "email"]), None).is_empty());
        let mut bad = spec(&["id", "Email", "id", "1x"]);
        bad.name = "select me".into();
        bad.server_name = "App_DB".into();
        assert_eq!(
            paths(&validate(&bad, None)),
            [
                "spec/name",
                "spec/serverName",
                "spec/columns/1/name",
                "spec/columns/2/name",
                "spec/columns/3/name"
            ]
        );
        assert_eq!(paths(&validate(&spec(&[]), None)), ["spec/columns"]);
    }

    #[test]
    fn identifiers_are_plain_lower_case() {
        assert!(identifier("created_at", MAX_IDENTIFIER).is_ok());
        assert!(identifier("_x1", MAX_IDENTIFIER).is_ok());
        for bad in ["", "1x", "Email", "first name", "a\"b", &"x".repeat(64)] {
            assert!(identifier(bad, MAX_IDENTIFIER).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn the_partition_column_must_be_a_column_and_the_name_short_enough() {
        let hash = Partitioning::Hash {
            column: "id".into(),
            partitions: 4,
        };
        assert!(validate(&spec(&["id"]), Some((&hash, "spec.references[1]"))).is_empty());
        let errors = validate(&spec(&["email"]), Some((&hash, "spec.references[1]")));
        assert_eq!(paths(&errors), ["spec/references/1"]);
        assert!(
            errors[0]
                .message
                .contains("\"id\" is not a column of the table (email)"),
            "{}",
            errors[0].message
        );
        let mut long = spec(&["id"]);
        long.name = "x".repeat(MAX_PARTITIONED_NAME + 1);
        assert_eq!(
            paths(&validate(&long, Some((&hash, "spec.references[0]")))),
            ["spec/name"]
        );
        long.name = "x".repeat(MAX_PARTITIONED_NAME);
        assert!(validate(&long, Some((&hash, "spec.references[0]"))).is_empty());
        assert!(validate(&long, Some((&Partitioning::None, "spec.references[0]"))).is_empty());
    }

    #[test]
    fn partition_by_is_read_with_its_rules() {
        let by = |partition_type, column: Option<&str>, partitions| PartitionBy {
            partition_type,
            column: column.map(str::to_owned),
            partitions,
        };
        assert_eq!(partitioning(None), Ok(Partitioning::None));
        assert_eq!(
            partitioning(Some(&by(PartitionType::None, None, None))),
            Ok(Partitioning::None)
        );
        assert_eq!(
            partitioning(Some(&by(PartitionType::Hash, Some("id"), Some(4)))),
            Ok(Partitioning::Hash {
                column: "id".into(),
                partitions: 4
            })
        );
        assert_eq!(
            partitioning(Some(&by(PartitionType::Range, Some("at"), None))),
            Ok(Partitioning::Range { column: "at".into() })
        );
        assert!(
            partitioning(Some(&by(PartitionType::Hash, Some("id"), None)))
                .unwrap_err()
                .contains("needs partitionBy.partitions")
        );
        assert!(partitioning(Some(&by(PartitionType::Hash, Some("id"), Some(65)))).is_err());
        assert!(
            partitioning(Some(&by(PartitionType::Range, Some(""), None)))
                .unwrap_err()
                .contains("range needs partitionBy.column")
        );
    }

    #[test]
    fn name_and_server_are_fixed() {
        let old = spec(&["id"]);
        let mut new = spec(&["id"]);
        new.name = "accounts".into();
        new.server_name = "other".into();
        assert_eq!(
            paths(&validate_change(&old, &new, None)),
            ["spec/name", "spec/serverName"]
        );
        assert!(validate_change(&old, &old, None).is_empty());
    }

    #[test]
    fn defaults_are_written_and_values_kept() {
        let mut table = json!({"spec": {"columns": [{"name": "a", "type": "text"}, {"name": "b", "nullable": true}, {"name": "c", "nullable": null}]}});
        defaults(&mut table);
        assert_eq!(table["spec"]["deletionPolicy"], "Keep");
        let nullable: Vec<&Value> = table["spec"]["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| &c["nullable"])
            .collect();
        assert_eq!(nullable, [&json!(false), &json!(true), &json!(false)]);
        let mut delete = json!({"spec": {"deletionPolicy": "Delete"}});
        defaults(&mut delete);
        assert_eq!(delete["spec"]["deletionPolicy"], "Delete");
        let mut no_spec = json!({"metadata": {}});
        defaults(&mut no_spec);
        assert_eq!(no_spec, json!({"metadata": {}}));
    }
}
