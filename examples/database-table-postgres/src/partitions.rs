//! Partitioning, as a `PostgreSqlDatabaseTable` asks for it, and the SQL
//! that makes a table so.
//!
//! * **Hash**: `PARTITION BY HASH (column)`, partitions `<table>_p0` to
//!   `<table>_p<n-1>` (`FOR VALUES WITH (MODULUS n, REMAINDER i)`).
//! * **Range**: `PARTITION BY RANGE (column)` with one `DEFAULT` partition,
//!   `<table>_default`, which takes every row until other partitions are
//!   attached.
//! * **A change** of partitioning on an existing table rebuilds it in the
//!   sync's one transaction ([`rebuild`]): a new table `<table>__new` with
//!   the wanted columns and partitions, every row copied, the old table
//!   dropped, the new one (and its partitions) renamed. Nothing is lost: a
//!   failure at any step rolls the whole of it back.

use std::fmt;

use crate::sync::quote;

/// How a table is partitioned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Partitioning {
    /// Not partitioned.
    #[default]
    None,
    /// `PARTITION BY HASH (column)` in `partitions` partitions.
    Hash {
        /// The partition key.
        column: String,
        /// How many partitions.
        partitions: u32,
    },
    /// `PARTITION BY RANGE (column)`, one `DEFAULT` partition.
    Range {
        /// The partition key.
        column: String,
    },
    /// Another partitioning found in the database (`LIST`, a key of several
    /// columns...): never wanted, so a table found so is rebuilt.
    Other(String),
}

impl Partitioning {
    /// The partition key, when partitioned by one column.
    pub fn column(&self) -> Option<&str> {
        match self {
            Self::Hash { column, .. } | Self::Range { column } => Some(column),
            Self::None | Self::Other(_) => None,
        }
    }

    /// The `PARTITION BY` clause of `CREATE TABLE` (with its leading space), or nothing.
    ///
    /// ```
    /// use cnpgi_example_database_table_postgres::partitions::Partitioning;
    ///
    /// let hash = Partitioning::Hash { column: "id".into(), partitions: 4 };
    /// assert_eq!(hash.clause(), r#" PARTITION BY HASH ("id")"#);
    /// assert_eq!(Partitioning::None.clause(), "");
    /// ```
    pub fn clause(&self) -> String {
        match self {
            Self::Hash { column, .. } => format!(" PARTITION BY HASH ({})", quote(column)),
            Self::Range { column } => format!(" PARTITION BY RANGE ({})", quote(column)),
            Self::None | Self::Other(_) => String::new(),
        }
    }

    /// The names of the partitions of table `table`, in order.
    pub fn partition_names(&self, table: &str) -> Vec<String> {
        match self {
            Self::Hash { partitions, .. } => (0..*partitions).map(|i| format!("{table}_p{i}")).collect(),
            Self::Range { .. } => vec![format!("{table}_default")],
            Self::None | Self::Other(_) => Vec::new(),
        }
    }

    /// The statements creating the partitions of table `table`.
    pub fn create_partitions(&self, table: &str) -> Vec<String> {
        let parent = quote(table);
        let names = self.partition_names(table);
        match self {
            Self::Hash { partitions, .. } => names
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    format!(
                        "CREATE TABLE {} PARTITION OF {parent} FOR VALUES WITH (MODULUS {partitions}, REMAINDER {i})",
                        quote(name)
                    )
                })
                .collect(),
            Self::Range { .. } => names
                .iter()
                .map(|name| format!("CREATE TABLE {} PARTITION OF {parent} DEFAULT", quote(name)))
                .collect(),
            Self::None | Self::Other(_) => Vec::new(),
        }
    }

    /// What a partitioning read from the database is: `strategy` is
    /// `pg_partitioned_table.partstrat` (`h`, `r`, `l`; `None`: not
    /// partitioned), `key` its key's columns, `partitions` how many it has.
    pub fn from_catalog(strategy: Option<&str>, key: &[String], partitions: i64) -> Self {
        let Some(strategy) = strategy else {
            return Self::None;
        };
        match (strategy, key) {
            ("h", [column]) => Self::Hash {
                column: column.clone(),
                partitions: u32::try_from(partitions).unwrap_or(0),
            },
            ("r", [column]) => Self::Range { column: column.clone() },
            _ => Self::Other(format!("strategy {strategy:?} on ({})", key.join(", "))),
        }
    }
}

impl fmt::Display for Partitioning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Hash { column, partitions } => write!(f, "hash({column}) in {partitions} partitions"),
            Self::Range { column } => write!(f, "range({column}) with a default partition"),
            Self::Other(what) => write!(f, "other ({what})"),
        }
    }
}

/// The statements creating table `table` with column `definitions`, partitioned as `partitioning`.
///
/// ```
/// use cnpgi_example_database_table_postgres::partitions::{Partitioning, create};
///
/// let range = Partitioning::Range { column: "at".into() };
/// assert_eq!(create("events", &[r#""at" timestamp with time zone NOT NULL"#.into()], &range), [
///     r#"CREATE TABLE "events" ("at" timestamp with time zone NOT NULL) PARTITION BY RANGE ("at")"#,
///     r#"CREATE TABLE "events_default" PARTITION OF "events" DEFAULT"#,
/// ]);
/// ```
pub fn create(table: &str, definitions: &[String], partitioning: &Partitioning) -> Vec<String> {
    let mut statements = vec![format!(
        "CREATE TABLE {} ({}){}",
        quote(table),
        definitions.join(", "),
        partitioning.clause()
    )];
    statements.extend(partitioning.create_partitions(table));
    statements
}

/// The statements rebuilding table `table` as `partitioning` says, in one
/// transaction: the new table with column `definitions`, the rows copied
/// (`copied`: each column of the new table found in the old one, with the
/// type it gets: `"name"::type`), the old table dropped (its partitions with
/// it), the new table and its partitions renamed to the old names.
///
/// ```
/// use cnpgi_example_database_table_postgres::partitions::{Partitioning, rebuild};
///
/// let hash = Partitioning::Hash { column: "id".into(), partitions: 2 };
/// let statements = rebuild("users", &[r#""id" bigint NOT NULL"#.into()], &[("id".into(), "bigint".into())], &hash);
/// assert_eq!(statements, [
///     r#"CREATE TABLE "users__new" ("id" bigint NOT NULL) PARTITION BY HASH ("id")"#,
///     r#"CREATE TABLE "users__new_p0" PARTITION OF "users__new" FOR VALUES WITH (MODULUS 2, REMAINDER 0)"#,
///     r#"CREATE TABLE "users__new_p1" PARTITION OF "users__new" FOR VALUES WITH (MODULUS 2, REMAINDER 1)"#,
///     r#"INSERT INTO "users__new" ("id") SELECT "id"::bigint FROM "users""#,
///     r#"DROP TABLE "users""#,
///     r#"ALTER TABLE "users__new" RENAME TO "users""#,
///     r#"ALTER TABLE "users__new_p0" RENAME TO "users_p0""#,
///     r#"ALTER TABLE "users__new_p1" RENAME TO "users_p1""#,
/// ]);
/// ```
pub fn rebuild(
    table: &str,
    definitions: &[String],
    copied: &[(String, String)],
    partitioning: &Partitioning,
) -> Vec<String> {
    let new = format!("{table}__new");
    let mut statements = create(&new, definitions, partitioning);
    if !copied.is_empty() {
        let names: Vec<String> = copied.iter().map(|(name, _)| quote(name)).collect();
        let values: Vec<String> = copied
            .iter()
            .map(|(name, column_type)| format!("{}::{column_type}", quote(name)))
            .collect();
        statements.push(format!(
            "INSERT INTO {} ({}) SELECT {} FROM {}",
            quote(&new),
            names.join(", "),
            values.join(", "),
            quote(table)
        ));
    }
    statements.push(format!("DROP TABLE {}", quote(table)));
    statements.push(format!("ALTER TABLE {} RENAME TO {}", quote(&new), quote(table)));
    for (from, to) in partitioning
        .partition_names(&new)
        .iter()
        .zip(partitioning.partition_names(table))
    {
        statements.push(format!("ALTER TABLE {} RENAME TO {}", quote(from), quote(&to)));
    }
    statements
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_partitions_are_numbered_from_zero_with_their_remainder() {
        let hash = Partitioning::Hash {
            column: "id".into(),
            partitions: 3,
        };
        assert_eq!(hash.partition_names("t"), ["t_p0", "t_p1", "t_p2"]);
        assert_eq!(
            hash.create_partitions("t")[2],
            r#"CREATE TABLE "t_p2" PARTITION OF "t" FOR VALUES WITH (MODULUS 3, REMAINDER 2)"#
        );
        assert_eq!(hash.column(), Some("id"));
        assert_eq!(hash.to_string(), "hash(id) in 3 partitions");
    }

    #[test]
    fn an_unpartitioned_table_is_created_alone() {
        assert_eq!(
            create(
                "t",
                &[r#""a" text"#.into(), r#""b" boolean NOT NULL"#.into()],
                &Partitioning::None
            ),
            [r#"CREATE TABLE "t" ("a" text, "b" boolean NOT NULL)"#]
        );
        assert!(Partitioning::None.partition_names("t").is_empty());
    }

    #[test]
    fn a_rebuild_to_no_partitions_copies_drops_and_renames_the_table_only() {
        let statements = rebuild(
            "t",
            &[r#""a" text"#.into(), r#""b" integer"#.into()],
            &[("a".into(), "text".into())],
            &Partitioning::None,
        );
        assert_eq!(
            statements,
            [
                r#"CREATE TABLE "t__new" ("a" text, "b" integer)"#,
                r#"INSERT INTO "t__new" ("a") SELECT "a"::text FROM "t""#,
                r#"DROP TABLE "t""#,
                r#"ALTER TABLE "t__new" RENAME TO "t""#,
            ]
        );
        // Nothing in common: nothing copied (the old rows have no column of the new table).
        assert!(!rebuild("t", &[r#""b" integer"#.into()], &[], &Partitioning::None)[1].starts_with("INSERT"));
    }

    #[test]
    fn the_catalog_reads_back_as_what_was_asked() {
        let key = ["id".to_owned()];
        assert_eq!(Partitioning::from_catalog(None, &[], 0), Partitioning::None);
        assert_eq!(
            Partitioning::from_catalog(Some("h"), &key, 4),
            Partitioning::Hash {
                column: "id".into(),
                partitions: 4
            }
        );
        assert_eq!(
            Partitioning::from_catalog(Some("r"), &key, 1),
            Partitioning::Range { column: "id".into() }
        );
        assert!(matches!(
            Partitioning::from_catalog(Some("l"), &key, 1),
            Partitioning::Other(_)
        ));
        let two = ["a".to_owned(), "b".to_owned()];
        assert!(matches!(
            Partitioning::from_catalog(Some("h"), &two, 2),
            Partitioning::Other(_)
        ));
    }
}
