//! Admission: what a table's spec must say, and what is filled in.
//!
//! Checked without the database (a webhook answers in milliseconds): names
//! are plain lower-case identifiers, so they never need quoting rules
//! beyond `"name"`; types are PostgreSQL's built-in ones, spelled as
//! PostgreSQL accepts them, with an optional modifier and array suffix.
//! PostgreSQL itself has the last word when the table is created.

use std::collections::BTreeSet;

use cnpgi_example_database_table::DatabaseTableSpec;
use cnpgi_pluginhelper::{prelude::ValidationError, validation::error};
use serde_json::Value;

/// The type a column without one gets.
pub const DEFAULT_TYPE: &str = "text";

/// PostgreSQL's longest identifier (NAMEDATALEN - 1).
const MAX_IDENTIFIER: usize = 63;

/// Built-in types a column may have; the ones marked `true` take a modifier
/// (`varchar(20)`, `numeric(10,2)`, `timestamp(3)`).
const TYPES: &[(&str, bool)] = &[
    ("bigint", false),
    ("bigserial", false),
    ("boolean", false),
    ("bool", false),
    ("bytea", false),
    ("char", true),
    ("character", true),
    ("character varying", true),
    ("cidr", false),
    ("date", false),
    ("decimal", true),
    ("double precision", false),
    ("float4", false),
    ("float8", false),
    ("inet", false),
    ("int", false),
    ("int2", false),
    ("int4", false),
    ("int8", false),
    ("integer", false),
    ("interval", false),
    ("json", false),
    ("jsonb", false),
    ("macaddr", false),
    ("money", false),
    ("numeric", true),
    ("real", false),
    ("smallint", false),
    ("text", false),
    ("time", true),
    ("time with time zone", true),
    ("time without time zone", true),
    ("timestamp", true),
    ("timestamp with time zone", true),
    ("timestamp without time zone", true),
    ("timestamptz", true),
    ("timetz", true),
    ("uuid", false),
    ("varchar", true),
];

/// Every error of a new table's spec.
///
/// ```
/// use cnpgi_example_database_table::{Column, DatabaseServer, DatabaseTableSpec};
/// use cnpgi_example_database_table_postgres::columns::validate;
///
/// let column = |name: &str, column_type: &str| Column { name: name.into(), column_type: column_type.into(), nullable: true };
/// let spec = DatabaseTableSpec {
///     table: "users".into(),
///     columns: vec![column("id", "bigint"), column("email", "strng")],
///     server: DatabaseServer { host: "pg".into(), port: None, database: "app".into(), credentials_secret: "pg".into() },
///     implementation: "postgres.tables.example.cnpgi.io".into(),
///     policies: vec![],
///     drop_extra_columns: false,
/// };
/// let errors = validate(&spec);
/// assert_eq!(errors[0].path_components, ["spec", "columns", "1", "type"]);
/// assert!(errors[0].message.starts_with("unknown type"), "{}", errors[0].message);
/// ```
pub fn validate(spec: &DatabaseTableSpec) -> Vec<ValidationError> {
    let mut errors = Vec::new();
    if let Err(why) = identifier(&spec.table) {
        errors.push(error(["spec", "table"], &spec.table, why));
    }
    if spec.columns.is_empty() {
        errors.push(error(["spec", "columns"], "", "a table needs at least one column"));
    }
    let mut names = BTreeSet::new();
    for (index, column) in spec.columns.iter().enumerate() {
        let index = index.to_string();
        if let Err(why) = identifier(&column.name) {
            errors.push(error(["spec", "columns", &index, "name"], &column.name, why));
        } else if !names.insert(column.name.as_str()) {
            errors.push(error(
                ["spec", "columns", &index, "name"],
                &column.name,
                "another column has this name",
            ));
        }
        // Empty: defaulted by MutateCluster before validation.
        if !column.column_type.is_empty()
            && let Err(why) = column_type(&column.column_type)
        {
            errors.push(error(["spec", "columns", &index, "type"], &column.column_type, why));
        }
    }
    if spec.server.database.is_empty() {
        errors.push(error(["spec", "server", "database"], "", "a database name is required"));
    }
    errors
}

/// Every error of a change: the new spec's, and the fields fixed once the
/// table exists (its name and server: changing them would leave the table
/// behind, unmanaged).
pub fn validate_change(old: &DatabaseTableSpec, new: &DatabaseTableSpec) -> Vec<ValidationError> {
    let mut errors = validate(new);
    if old.table != new.table {
        errors.push(error(
            ["spec", "table"],
            &new.table,
            format!("cannot be changed (was {:?}): create another DatabaseTable", old.table),
        ));
    }
    if old.server != new.server {
        errors.push(error(
            ["spec", "server"],
            "",
            "cannot be changed: create another DatabaseTable on the other server",
        ));
    }
    errors
}

/// Gives every column without a type [`DEFAULT_TYPE`], in the resource's JSON.
pub fn default_types(table: &mut Value) {
    let columns = table.pointer_mut("/spec/columns").and_then(Value::as_array_mut);
    for column in columns.into_iter().flatten() {
        let Some(column) = column.as_object_mut() else { continue };
        let untyped = column.get("type").is_none_or(|t| t.is_null() || t.as_str() == Some(""));
        if untyped {
            column.insert("type".into(), DEFAULT_TYPE.into());
        }
    }
}

/// A lower-case SQL identifier: a letter or `_`, then letters, digits or `_`.
fn identifier(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && name.len() <= MAX_IDENTIFIER;
    if valid {
        Ok(())
    } else {
        Err(format!(
            "must be a lower-case identifier: a letter or _, then letters, digits or _, at most {MAX_IDENTIFIER}"
        ))
    }
}

/// A built-in type, optionally with a modifier (`(20)`, `(10,2)`) and `[]`.
fn column_type(spelled: &str) -> Result<(), String> {
    let unknown = || {
        let known: Vec<&str> = TYPES.iter().map(|(name, _)| *name).collect();
        format!("unknown type {spelled:?}: use one of {}", known.join(", "))
    };
    let normalised = spelled.split_whitespace().collect::<Vec<_>>().join(" ").to_lowercase();
    let base = normalised.strip_suffix("[]").unwrap_or(&normalised).trim_end();
    let (name, modifier) = match base.split_once('(') {
        Some((name, rest)) => (name.trim_end(), Some(rest.strip_suffix(')').ok_or_else(unknown)?)),
        None => (base, None),
    };
    let &(_, takes_modifier) = TYPES.iter().find(|(known, _)| *known == name).ok_or_else(unknown)?;
    match modifier {
        None => Ok(()),
        Some(_) if !takes_modifier => Err(format!("type {name:?} takes no modifier")),
        Some(modifier) => {
            let numbers: Vec<&str> = modifier.split(',').map(str::trim).collect();
            let numeric = numbers
                .iter()
                .all(|n| !n.is_empty() && n.len() <= 4 && n.bytes().all(|b| b.is_ascii_digit()));
            if numeric && numbers.len() <= 2 {
                Ok(())
            } else {
                Err(format!(
                    "the modifier of {name:?} must be one or two numbers, as in {name}(20)"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_accept_postgres_spellings_and_refuse_the_rest() {
        for good in [
            "bigint",
            "varchar(320)",
            "numeric(10, 2)",
            "text[]",
            "timestamp with time zone",
            "TIMESTAMPTZ(3)",
            "int4",
        ] {
            assert_eq!(column_type(good), Ok(()), "{good}");
        }
        for bad in [
            "strng",
            "text(3)",
            "varchar(",
            "varchar(a)",
            "varchar(1,2,3)",
            "int; drop table x",
            "varchar(99999)",
            "",
        ] {
            assert!(column_type(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn identifiers_are_plain_lower_case() {
        assert!(identifier("created_at").is_ok());
        assert!(identifier("_x1").is_ok());
        for bad in ["", "1x", "Email", "first name", "a\"b", &"x".repeat(64)] {
            assert!(identifier(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn missing_types_are_defaulted_and_others_kept() {
        let mut table = serde_json::json!({"spec": {"columns": [
            {"name": "id", "type": "bigint"}, {"name": "email"}, {"name": "note", "type": ""}, {"name": "x", "type": null}]}});
        default_types(&mut table);
        let types: Vec<&str> = table["spec"]["columns"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|c| c["type"].as_str())
            .collect();
        assert_eq!(types, ["bigint", "text", "text", "text"]);
    }
}
