//! Making the table in PostgreSQL match the spec and its partitioning, in
//! one transaction.
//!
//! What the spec asks is compared with what the database has in
//! PostgreSQL's own words: the wanted columns (the agnostic types mapped by
//! [`columns::pg_type`]) are created in a temporary table first, so that
//! `varchar(255)` and `character varying(255)` compare equal. Then:
//!
//! * no table: it is created, with its partitions ([`partitions::create`]);
//! * another partitioning than the one wanted: the table is rebuilt
//!   ([`partitions::rebuild`]), its rows copied (the columns' types changed
//!   on the way), extra columns kept unless `dropExtraColumns`;
//! * else it is altered column by column: missing columns added, types
//!   changed (`USING column::type`), `NOT NULL` set or dropped, columns the
//!   spec does not list dropped only when `dropExtraColumns` is true.
//!
//! Any failure rolls everything back. Concurrent syncs of one table (two
//! replicas of the plugin) wait for each other (an advisory lock on the
//! table's name). Then the partitions and their rows are counted (an exact
//! `count(*)` each: a small example's numbers, not a large table's).

use std::time::Duration;

use cnpgi_example_database_table::{DatabaseTable, DatabaseTableSpec};
use cnpgi_pluginhelper::prelude::Status;
use serde::Serialize;
use tokio_postgres::{Client, NoTls, Transaction};

use crate::{
    columns,
    partitions::{self, Partitioning},
    server::{self, Servers},
};

/// The deadline of a whole sync (reading the Secret, connecting, altering,
/// counting): under the host's 30 s deadline of a plugin call, so that the
/// plugin says what took too long.
pub const DEADLINE: Duration = Duration::from_secs(25);

/// What a sync found and did, reported in the table's `status.plugins[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    /// The generation of the spec it applied.
    pub generation: i64,
    /// The table, as `database.schema.table`.
    pub table: String,
    /// Its columns afterwards, as `name type [NOT NULL]`.
    pub columns: Vec<String>,
    /// Its partitioning afterwards, in words.
    pub partitioning: String,
    /// The statements run (empty: it already matched).
    pub applied: Vec<String>,
    /// Its partitions afterwards and their rows (none: not partitioned).
    #[serde(skip)]
    pub partitions: Vec<PartitionRows>,
    /// Its rows.
    #[serde(skip)]
    pub rows: i64,
}

impl Report {
    /// What goes into the `PostgreSqlDatabaseTable`'s status
    /// (`status.cnpgiReports.postgres.tables.example.cnpgi.io`).
    pub fn partition_report(&self) -> PartitionReport {
        PartitionReport {
            table: self.table.clone(),
            partition_count: self.partitions.len(),
            partitions: self.partitions.clone(),
        }
    }
}

/// A partition and its rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PartitionRows {
    /// Its name (`users_p0`, `users_default`).
    pub name: String,
    /// Its rows.
    pub rows: i64,
}

/// The partition metrics reported on a `PostgreSqlDatabaseTable`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PartitionReport {
    /// The table, as `database.schema.table`.
    pub table: String,
    /// How many partitions it has.
    pub partition_count: usize,
    /// Each, with its rows.
    pub partitions: Vec<PartitionRows>,
}

/// Why a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The spec did not pass the checks (the webhook was bypassed, or the
    /// reference changed since).
    #[error("the spec is invalid: {0}")]
    Invalid(String),
    /// The `PostgreSqlDatabaseTable` referenced cannot be used.
    #[error("{0}")]
    Reference(String),
    /// The credentials could not be read.
    #[error(transparent)]
    Credentials(#[from] server::CredentialsError),
    /// PostgreSQL refused or failed.
    #[error("PostgreSQL at {server}: {}", describe(source))]
    Postgres {
        /// `host:port/database`.
        server: String,
        /// What it said.
        source: tokio_postgres::Error,
    },
    /// The deadline passed.
    #[error("PostgreSQL at {server}: the sync did not finish within {} s (reading the credentials, connecting, altering)", DEADLINE.as_secs())]
    Deadline {
        /// The server's name (`spec.serverName`).
        server: String,
    },
}

/// A PostgreSQL error with what the server said, when it said something.
fn describe(error: &tokio_postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("{}: {}", db.severity(), db.message()),
        None => error.to_string(),
    }
}

impl From<SyncError> for Status {
    fn from(error: SyncError) -> Self {
        match &error {
            SyncError::Invalid(_) => Status::invalid_argument(error.to_string()),
            SyncError::Reference(_) | SyncError::Credentials(_) => Status::failed_precondition(error.to_string()),
            SyncError::Postgres { .. } | SyncError::Deadline { .. } => Status::unavailable(error.to_string()),
        }
    }
}

/// A connection to the server of a table, and where it is (for messages).
struct Connection {
    client: Client,
    server: String,
}

/// Connects to the server `spec.serverName` names in `namespace`.
async fn connect(servers: &Servers, namespace: &str, spec: &DatabaseTableSpec) -> Result<Connection, SyncError> {
    let credentials = server::credentials(namespace, &spec.server_name).await?;
    let (host, port) = servers.address(namespace, &spec.server_name);
    let server = format!("{host}:{port}/{}", credentials.dbname);
    let mut config = tokio_postgres::Config::new();
    config
        .host(&host)
        .port(port)
        .dbname(&credentials.dbname)
        .user(&credentials.username)
        .password(&credentials.password)
        .application_name("cnpgi-database-table")
        .connect_timeout(Duration::from_secs(10));
    let (client, connection) = config.connect(NoTls).await.map_err(|source| SyncError::Postgres {
        server: server.clone(),
        source,
    })?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "PostgreSQL connection ended");
        }
    });
    Ok(Connection { client, server })
}

/// Runs `work` within [`DEADLINE`], naming the server when it does not finish.
async fn within_deadline<T>(
    spec: &DatabaseTableSpec,
    work: impl Future<Output = Result<T, SyncError>>,
) -> Result<T, SyncError> {
    tokio::time::timeout(DEADLINE, work)
        .await
        .map_err(|_| SyncError::Deadline {
            server: spec.server_name.clone(),
        })?
}

/// Makes `table` exist in its database as its spec and `partitioning` say.
pub async fn sync(servers: &Servers, table: &DatabaseTable, partitioning: &Partitioning) -> Result<Report, SyncError> {
    let spec = &table.spec;
    let namespace = table.metadata.namespace.as_deref().unwrap_or("default");
    let mut report = within_deadline(spec, async {
        let mut connection = connect(servers, namespace, spec).await?;
        let server = connection.server.clone();
        apply(&mut connection.client, spec, partitioning)
            .await
            .map_err(|source| SyncError::Postgres { server, source })
    })
    .await?;
    report.generation = table.metadata.generation.unwrap_or_default();
    if !report.applied.is_empty() {
        tracing::info!(table = %report.table, applied = ?report.applied, "table altered");
    }
    Ok(report)
}

/// Drops the table of `table` (its partitions with it), if it exists;
/// returns whether it did.
pub async fn drop_table(servers: &Servers, table: &DatabaseTable) -> Result<bool, SyncError> {
    let spec = &table.spec;
    let namespace = table.metadata.namespace.as_deref().unwrap_or("default");
    within_deadline(spec, async {
        let connection = connect(servers, namespace, spec).await?;
        let in_postgres = |source| SyncError::Postgres {
            server: connection.server.clone(),
            source,
        };
        let relation = format!("public.{}", quote(&spec.name));
        let exists = connection
            .client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&relation])
            .await
            .map_err(in_postgres)?;
        if !exists.get::<_, bool>(0) {
            return Ok(false);
        }
        connection
            .client
            .batch_execute(&format!("DROP TABLE IF EXISTS {relation}"))
            .await
            .map_err(in_postgres)?;
        tracing::info!(table = %spec.name, server = %connection.server, "table dropped (deletionPolicy: Delete)");
        Ok(true)
    })
    .await
}

/// A column as PostgreSQL describes it.
#[derive(Debug, Clone, PartialEq)]
struct Existing {
    name: String,
    column_type: String,
    not_null: bool,
}

async fn apply(
    client: &mut Client,
    spec: &DatabaseTableSpec,
    partitioning: &Partitioning,
) -> Result<Report, tokio_postgres::Error> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&spec.name])
        .await?;
    let relation = format!("public.{}", quote(&spec.name));
    // In PostgreSQL's words: what the spec asks, then what there is.
    let definitions: Vec<String> = spec
        .columns
        .iter()
        .map(|column| {
            let not_null = if column.nullable { "" } else { " NOT NULL" };
            format!(
                "{} {}{not_null}",
                quote(&column.name),
                columns::pg_type(column.column_type)
            )
        })
        .collect();
    tx.batch_execute(&format!(
        "CREATE TEMPORARY TABLE cnpgi_wanted ({}) ON COMMIT DROP",
        definitions.join(", ")
    ))
    .await?;
    let wanted = describe_columns(&tx, "pg_temp.cnpgi_wanted").await?;
    let existing = describe_columns(&tx, &relation).await?;
    let current = read_partitioning(&tx, &relation).await?;

    let applied = if existing.is_empty() {
        partitions::create(&spec.name, &definitions, partitioning)
    } else if current != *partitioning {
        rebuild(&spec.name, &wanted, &existing, spec.drop_extra_columns, partitioning)
    } else {
        alterations(&quote(&spec.name), &wanted, &existing, spec.drop_extra_columns)
    };
    for statement in &applied {
        tx.batch_execute(statement).await?;
    }
    let columns = describe_columns(&tx, &relation).await?;
    let partitioning = read_partitioning(&tx, &relation).await?;
    let partitions = count_partitions(&tx, &relation).await?;
    let rows: i64 = tx
        .query_one(&format!("SELECT count(*) FROM {relation}"), &[])
        .await?
        .get(0);
    let database: String = tx.query_one("SELECT current_database()", &[]).await?.get(0);
    tx.commit().await?;
    Ok(Report {
        generation: 0,
        table: format!("{database}.public.{}", spec.name),
        columns: columns.iter().map(Existing::to_string).collect(),
        partitioning: partitioning.to_string(),
        applied,
        partitions,
        rows,
    })
}

/// The statements rebuilding `table` as `partitioning` says: the wanted
/// columns, and the extra ones unless they are dropped; each column the old
/// table has is copied, cast to its new type.
fn rebuild(
    table: &str,
    wanted: &[Existing],
    existing: &[Existing],
    drop_extra: bool,
    partitioning: &Partitioning,
) -> Vec<String> {
    let extras = existing
        .iter()
        .filter(|e| !drop_extra && !wanted.iter().any(|w| w.name == e.name));
    let columns: Vec<&Existing> = wanted.iter().chain(extras).collect();
    let definitions: Vec<String> = columns.iter().map(ToString::to_string).collect();
    let copied: Vec<(String, String)> = columns
        .iter()
        .filter(|column| existing.iter().any(|e| e.name == column.name))
        .map(|column| (column.name.clone(), column.column_type.clone()))
        .collect();
    partitions::rebuild(table, &definitions, &copied, partitioning)
}

/// The statements that turn `existing` into `wanted` on a table partitioned as wanted.
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
async fn describe_columns(tx: &Transaction<'_>, relation: &str) -> Result<Vec<Existing>, tokio_postgres::Error> {
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

/// How `relation` is partitioned now.
async fn read_partitioning(tx: &Transaction<'_>, relation: &str) -> Result<Partitioning, tokio_postgres::Error> {
    let row = tx
        .query_opt(
            "SELECT p.partstrat::text, \
                    ARRAY(SELECT a.attname::text FROM unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, n) \
                          JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = k.attnum ORDER BY k.n), \
                    (SELECT count(*) FROM pg_inherits i WHERE i.inhparent = p.partrelid), \
                    p.partnatts::int \
             FROM pg_partitioned_table p WHERE p.partrelid = to_regclass($1)",
            &[&relation],
        )
        .await?;
    let Some(row) = row else {
        return Ok(Partitioning::None);
    };
    let strategy: String = row.get(0);
    let mut key: Vec<String> = row.get(1);
    let count: i64 = row.get(2);
    let key_columns: i32 = row.get(3);
    // An expression in the key has no column: not a key this plugin makes.
    if usize::try_from(key_columns).ok() != Some(key.len()) {
        key.push("(an expression)".to_owned());
    }
    Ok(Partitioning::from_catalog(Some(&strategy), &key, count))
}

/// The partitions of `relation` and their rows, in order (`_p2` before `_p10`).
async fn count_partitions(tx: &Transaction<'_>, relation: &str) -> Result<Vec<PartitionRows>, tokio_postgres::Error> {
    let names = tx
        .query(
            "SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             WHERE i.inhparent = to_regclass($1) ORDER BY length(c.relname), c.relname",
            &[&relation],
        )
        .await?;
    let mut partitions = Vec::with_capacity(names.len());
    for row in names {
        let name: String = row.get(0);
        let rows: i64 = tx
            .query_one(&format!("SELECT count(*) FROM public.{}", quote(&name)), &[])
            .await?
            .get(0);
        partitions.push(PartitionRows { name, rows });
    }
    Ok(partitions)
}

impl std::fmt::Display for Existing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let not_null = if self.not_null { " NOT NULL" } else { "" };
        write!(f, "{} {}{not_null}", quote(&self.name), self.column_type)
    }
}

/// An identifier, quoted (admission allows only `[a-z_][a-z0-9_]*`; quoting
/// keeps reserved words usable and makes the statements unambiguous).
pub fn quote(identifier: &str) -> String {
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
            column("id", "numeric(20,0)", true),
            column("email", "character varying(255)", false),
            column("created_at", "timestamp with time zone", false),
        ];
        let existing = [
            column("id", "numeric(20,0)", true),
            column("email", "text", true),
            column("legacy", "text", false),
        ];
        let kept = alterations("\"users\"", &wanted, &existing, false);
        assert_eq!(
            kept,
            [
                "ALTER TABLE \"users\" ALTER COLUMN \"email\" TYPE character varying(255) USING \"email\"::character varying(255)",
                "ALTER TABLE \"users\" ALTER COLUMN \"email\" DROP NOT NULL",
                "ALTER TABLE \"users\" ADD COLUMN \"created_at\" timestamp with time zone",
            ]
        );
        let dropped = alterations("\"users\"", &wanted, &existing, true);
        assert_eq!(dropped.last().unwrap(), "ALTER TABLE \"users\" DROP COLUMN \"legacy\"");
        assert!(alterations("\"users\"", &existing, &existing, true).is_empty());
    }

    #[test]
    fn a_rebuild_keeps_extra_columns_unless_asked_and_copies_what_both_have() {
        let wanted = [column("id", "bigint", true), column("email", "text", false)];
        let existing = [column("id", "integer", true), column("legacy", "text", false)];
        let hash = Partitioning::Hash {
            column: "id".into(),
            partitions: 2,
        };
        let kept = rebuild("users", &wanted, &existing, false, &hash);
        assert_eq!(
            kept[0],
            r#"CREATE TABLE "users__new" ("id" bigint NOT NULL, "email" text, "legacy" text) PARTITION BY HASH ("id")"#
        );
        assert_eq!(
            kept[3],
            r#"INSERT INTO "users__new" ("id", "legacy") SELECT "id"::bigint, "legacy"::text FROM "users""#
        );
        let dropped = rebuild("users", &wanted, &existing, true, &hash);
        assert_eq!(
            dropped[0],
            r#"CREATE TABLE "users__new" ("id" bigint NOT NULL, "email" text) PARTITION BY HASH ("id")"#
        );
        assert_eq!(
            dropped[3],
            r#"INSERT INTO "users__new" ("id") SELECT "id"::bigint FROM "users""#
        );
    }

    #[test]
    fn the_reference_report_counts_the_partitions() {
        let report = Report {
            table: "app.public.users".into(),
            partitions: vec![
                PartitionRows {
                    name: "users_p0".into(),
                    rows: 2,
                },
                PartitionRows {
                    name: "users_p1".into(),
                    rows: 1,
                },
            ],
            ..Report::default()
        };
        let json = serde_json::to_value(report.partition_report()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"table": "app.public.users", "partitionCount": 2,
                               "partitions": [{"name": "users_p0", "rows": 2}, {"name": "users_p1", "rows": 1}]})
        );
        // The table's own entry does not repeat them.
        let own = serde_json::to_value(&report).unwrap();
        assert!(own.get("partitions").is_none() && own.get("rows").is_none(), "{own}");
    }

    #[test]
    fn quoting_doubles_quotes() {
        assert_eq!(quote("user"), "\"user\"");
        assert_eq!(quote("a\"b"), "\"a\"\"b\"");
    }
}
