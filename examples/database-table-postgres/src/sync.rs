//! Making the table in PostgreSQL match the spec, in one transaction.
//!
//! What the spec asks is compared with what the database has in
//! PostgreSQL's own words: the wanted columns are created in a temporary
//! table first, so `varchar(20)` and `character varying(20)` compare equal
//! and a type PostgreSQL does not know fails before anything changes. Then
//! the table is created, or altered column by column: missing columns
//! added, types changed (`USING column::type`), `NOT NULL` set or dropped,
//! columns the spec does not list dropped only when `dropExtraColumns` is
//! true. Any failure rolls everything back.

use std::time::Duration;

use cnpgi_example_database_table::{Column, DatabaseTable, DatabaseTableSpec};
use cnpgi_pluginhelper::{prelude::Status, validation};
use serde::Serialize;
use tokio_postgres::{Client, NoTls, Transaction};

use crate::{columns, credentials};

/// The deadline of a whole sync: connecting, reading, altering.
const DEADLINE: Duration = Duration::from_secs(30);

/// What a sync found and did, reported in the table's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// The generation of the spec it applied.
    pub generation: i64,
    /// The table, as `database.schema.table`.
    pub table: String,
    /// Its columns afterwards, as `name type [NOT NULL]`.
    pub columns: Vec<String>,
    /// The statements run (empty: it already matched).
    pub applied: Vec<String>,
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The spec did not pass the admission checks (the webhook was bypassed).
    #[error("the spec is invalid: {0}")]
    Invalid(String),
    /// The credentials could not be read.
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialsError),
    /// PostgreSQL refused or failed.
    #[error("PostgreSQL at {server}: {source}")]
    Postgres {
        /// `host:port/database`.
        server: String,
        /// What it said.
        source: tokio_postgres::Error,
    },
    /// The deadline passed.
    #[error("PostgreSQL at {0} did not answer within {DEADLINE:?}")]
    Deadline(String),
}

impl From<SyncError> for Status {
    fn from(error: SyncError) -> Self {
        match &error {
            SyncError::Invalid(_) => Status::invalid_argument(error.to_string()),
            SyncError::Credentials(_) => Status::failed_precondition(error.to_string()),
            SyncError::Postgres { .. } | SyncError::Deadline(_) => Status::unavailable(error.to_string()),
        }
    }
}

/// Makes `table` exist in its database as its spec says.
pub async fn sync(table: &DatabaseTable) -> Result<Report, SyncError> {
    let spec = &table.spec;
    let errors = columns::validate(spec);
    if !errors.is_empty() {
        return Err(SyncError::Invalid(validation::describe(&errors)));
    }
    let server = format!(
        "{}:{}/{}",
        spec.server.host,
        spec.server.port.unwrap_or(5432),
        spec.server.database
    );
    let namespace = table.metadata.namespace.as_deref().unwrap_or("default");
    let work = async {
        let credentials = credentials::read(namespace, &spec.server.credentials_secret).await?;
        let in_postgres = |source| SyncError::Postgres {
            server: server.clone(),
            source,
        };
        let mut client = connect(spec, &credentials).await.map_err(in_postgres)?;
        let mut report = apply(&mut client, spec).await.map_err(in_postgres)?;
        report.generation = table.metadata.generation.unwrap_or_default();
        Ok::<_, SyncError>(report)
    };
    let report = tokio::time::timeout(DEADLINE, work)
        .await
        .map_err(|_| SyncError::Deadline(server.clone()))??;
    if !report.applied.is_empty() {
        tracing::info!(table = %report.table, applied = ?report.applied, "table altered");
    }
    Ok(report)
}

async fn connect(
    spec: &DatabaseTableSpec,
    credentials: &credentials::Credentials,
) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(&spec.server.host)
        .port(spec.server.port.unwrap_or(5432))
        .dbname(&spec.server.database)
        .user(&credentials.username)
        .password(&credentials.password)
        .application_name("cnpgi-database-table")
        .connect_timeout(Duration::from_secs(10));
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "PostgreSQL connection ended");
        }
    });
    Ok(client)
}

/// A column as PostgreSQL describes it.
#[derive(Debug, Clone, PartialEq)]
struct Existing {
    name: String,
    column_type: String,
    not_null: bool,
}

async fn apply(client: &mut Client, spec: &DatabaseTableSpec) -> Result<Report, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    let table = quote(&spec.table);
    // In PostgreSQL's words: what the spec asks, then what there is.
    let definitions: Vec<String> = spec.columns.iter().map(definition).collect();
    tx.batch_execute(&format!(
        "CREATE TEMPORARY TABLE cnpgi_wanted ({}) ON COMMIT DROP",
        definitions.join(", ")
    ))
    .await?;
    let wanted = describe(&tx, "pg_temp.cnpgi_wanted").await?;
    let existing = describe(&tx, &format!("public.{table}")).await?;

    let applied = if existing.is_empty() {
        vec![format!("CREATE TABLE {table} ({})", definitions.join(", "))]
    } else {
        alterations(&table, &wanted, &existing, spec.drop_extra_columns)
    };
    for statement in &applied {
        tx.batch_execute(statement).await?;
    }
    let columns = describe(&tx, &format!("public.{table}")).await?;
    let database: String = tx.query_one("SELECT current_database()", &[]).await?.get(0);
    tx.commit().await?;
    Ok(Report {
        generation: 0,
        table: format!("{database}.public.{}", spec.table),
        columns: columns.iter().map(Existing::to_string).collect(),
        applied,
    })
}

/// The statements that turn `existing` into `wanted`.
fn alterations(table: &str, wanted: &[Existing], existing: &[Existing], drop_extra: bool) -> Vec<String> {
    let mut statements = Vec::new();
    for column in wanted {
        let name = quote(&column.name);
        let Some(current) = existing.iter().find(|e| e.name == column.name) else {
            statements.push(format!("ALTER TABLE {table} ADD COLUMN {column}"));
            continue;
        };
        if current.column_type != column.column_type {
            let new_type = &column.column_type;
            statements.push(format!(
                "ALTER TABLE {table} ALTER COLUMN {name} TYPE {new_type} USING {name}::{new_type}"
            ));
        }
        if current.not_null != column.not_null {
            let change = if column.not_null { "SET" } else { "DROP" };
            statements.push(format!("ALTER TABLE {table} ALTER COLUMN {name} {change} NOT NULL"));
        }
    }
    if drop_extra {
        for extra in existing.iter().filter(|e| !wanted.iter().any(|w| w.name == e.name)) {
            statements.push(format!("ALTER TABLE {table} DROP COLUMN {}", quote(&extra.name)));
        }
    }
    statements
}

/// The columns of `relation` (none when it does not exist).
async fn describe(tx: &Transaction<'_>, relation: &str) -> Result<Vec<Existing>, tokio_postgres::Error> {
    let rows = tx
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), a.attnotnull \
             FROM pg_attribute a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&relation],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| Existing {
            name: row.get(0),
            column_type: row.get(1),
            not_null: row.get(2),
        })
        .collect())
}

/// `"name" type [NOT NULL]`, as in CREATE TABLE.
fn definition(column: &Column) -> String {
    let not_null = if column.nullable { "" } else { " NOT NULL" };
    format!("{} {}{not_null}", quote(&column.name), column.column_type)
}

impl std::fmt::Display for Existing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let not_null = if self.not_null { " NOT NULL" } else { "" };
        write!(f, "{} {}{not_null}", quote(&self.name), self.column_type)
    }
}

/// An identifier, quoted (admission allows only `[a-z_][a-z0-9_]*`; quoting
/// keeps reserved words usable and makes the statements unambiguous).
fn quote(identifier: &str) -> String {
    format!("\"{}\"", identifier.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn column(name: &str, column_type: &str, not_null: bool) -> Existing {
        Existing {
            name: name.into(),
            column_type: column_type.into(),
            not_null,
        }
    }

    #[test]
    fn only_what_differs_is_altered_and_extras_dropped_only_when_asked() {
        let wanted = [
            column("id", "bigint", true),
            column("email", "character varying(320)", false),
            column("created_at", "timestamp with time zone", false),
        ];
        let existing = [
            column("id", "bigint", true),
            column("email", "text", true),
            column("legacy", "text", false),
        ];
        let kept = alterations("\"users\"", &wanted, &existing, false);
        assert_eq!(
            kept,
            [
                "ALTER TABLE \"users\" ALTER COLUMN \"email\" TYPE character varying(320) USING \"email\"::character varying(320)",
                "ALTER TABLE \"users\" ALTER COLUMN \"email\" DROP NOT NULL",
                "ALTER TABLE \"users\" ADD COLUMN \"created_at\" timestamp with time zone",
            ]
        );
        let dropped = alterations("\"users\"", &wanted, &existing, true);
        assert_eq!(dropped.last().unwrap(), "ALTER TABLE \"users\" DROP COLUMN \"legacy\"");
        assert!(alterations("\"users\"", &existing, &existing, true).is_empty());
    }
}
