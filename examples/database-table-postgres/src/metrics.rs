//! The partitions' metrics, served on `/metrics` (`--metrics-address`), in
//! Prometheus' text format:
//!
//! * `dbt_postgres_table_partitions{namespace, name, table}`: how many
//!   partitions the table has (0: not partitioned);
//! * `dbt_postgres_partition_rows{namespace, name, table, partition}`: the
//!   rows of each partition (an unpartitioned table counts as its own one
//!   partition).
//!
//! `namespace` and `name` are the DatabaseTable's; `table` is the table in
//! PostgreSQL. Each sync replaces the table's series; a deleted table's go.
//! The same numbers go into the `PostgreSqlDatabaseTable`'s status.

use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex, PoisonError},
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::sync::PartitionRows;

/// A table's labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TableLabels {
    namespace: String,
    name: String,
    table: String,
}

/// A partition's labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PartitionLabels {
    namespace: String,
    name: String,
    table: String,
    partition: String,
}

/// The series of each DatabaseTable (`namespace/name`): its table's, and its partitions'.
type Series = HashMap<String, (TableLabels, Vec<PartitionLabels>)>;

/// The plugin's metrics. Cloning is cheap (the clones share them).
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    partitions: Family<TableLabels, Gauge>,
    rows: Family<PartitionLabels, Gauge>,
    /// The series each DatabaseTable (`namespace/name`) has, to remove them.
    series: Arc<Mutex<Series>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        let partitions = Family::<TableLabels, Gauge>::default();
        let rows = Family::<PartitionLabels, Gauge>::default();
        let mut registry = Registry::default();
        registry.register(
            "dbt_postgres_table_partitions",
            "Partitions of a DatabaseTable's table in PostgreSQL (0: not partitioned)",
            partitions.clone(),
        );
        registry.register(
            "dbt_postgres_partition_rows",
            "Rows in each partition of a DatabaseTable's table in PostgreSQL (an unpartitioned table is its own one partition)",
            rows.clone(),
        );
        Self {
            registry: Arc::new(registry),
            partitions,
            rows,
            series: Arc::default(),
        }
    }
}

impl Metrics {
    /// Replaces the series of DatabaseTable `namespace/name` (table `table`
    /// in PostgreSQL) with `partitions` (empty: not partitioned) and, for an
    /// unpartitioned table, its `rows`.
    pub fn record(&self, namespace: &str, name: &str, table: &str, partitions: &[PartitionRows], rows: i64) {
        self.forget(namespace, name);
        let labels = TableLabels {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            table: table.to_owned(),
        };
        self.partitions
            .get_or_create(&labels)
            .set(i64::try_from(partitions.len()).unwrap_or(i64::MAX));
        let counted: Vec<(String, i64)> = if partitions.is_empty() {
            vec![(table.to_owned(), rows)]
        } else {
            partitions.iter().map(|p| (p.name.clone(), p.rows)).collect()
        };
        let mut series = Vec::with_capacity(counted.len());
        for (partition, rows) in counted {
            let labels = PartitionLabels {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                table: table.to_owned(),
                partition,
            };
            self.rows.get_or_create(&labels).set(rows);
            series.push(labels);
        }
        self.lock().insert(format!("{namespace}/{name}"), (labels, series));
    }

    /// Removes the series of DatabaseTable `namespace/name`.
    pub fn forget(&self, namespace: &str, name: &str) {
        let Some((table, partitions)) = self.lock().remove(&format!("{namespace}/{name}")) else {
            return;
        };
        self.partitions.remove(&table);
        for labels in &partitions {
            self.rows.remove(labels);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String does not fail.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "cannot encode the metrics");
        }
        text
    }

    /// Serves `/metrics` on `address` until the process ends; fails when the
    /// address cannot be listened on.
    pub async fn serve(self, address: SocketAddr) -> std::io::Result<()> {
        let listener = tokio::net::TcpListener::bind(address).await?;
        tracing::info!(address = %listener.local_addr()?, "serving /metrics");
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let metrics = self.clone();
                async move {
                    (
                        [(
                            axum::http::header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.encode(),
                    )
                }
            }),
        );
        axum::serve(listener, app).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition(name: &str, rows: i64) -> PartitionRows {
        PartitionRows {
            name: name.into(),
            rows,
        }
    }

    #[test]
    fn each_sync_replaces_the_tables_series_and_forgetting_removes_them() {
        let metrics = Metrics::default();
        metrics.record(
            "tables",
            "users",
            "users",
            &[partition("users_p0", 3), partition("users_p1", 5)],
            8,
        );
        let text = metrics.encode();
        assert!(
            text.contains(r#"dbt_postgres_table_partitions{namespace="tables",name="users",table="users"} 2"#),
            "{text}"
        );
        assert!(
            text.contains(
                r#"dbt_postgres_partition_rows{namespace="tables",name="users",table="users",partition="users_p1"} 5"#
            ),
            "{text}"
        );
        // Repartitioned to none: the partitions' series go, the table counts as one.
        metrics.record("tables", "users", "users", &[], 8);
        let text = metrics.encode();
        assert!(!text.contains("users_p1"), "{text}");
        assert!(
            text.contains(r#"dbt_postgres_table_partitions{namespace="tables",name="users",table="users"} 0"#),
            "{text}"
        );
        assert!(text.contains(r#"partition="users"} 8"#), "{text}");
        metrics.forget("tables", "users");
        assert!(!metrics.encode().contains("name=\"users\""));
    }

    #[tokio::test]
    async fn metrics_are_served_on_slash_metrics() {
        let metrics = Metrics::default();
        metrics.record("ns", "t", "t", &[partition("t_default", 1)], 1);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        drop(listener);
        tokio::spawn(metrics.serve(address));
        let mut answer = String::new();
        for _ in 0..50 {
            if let Ok(mut stream) = tokio::net::TcpStream::connect(address).await {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                stream
                    .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .unwrap();
                stream.read_to_string(&mut answer).await.unwrap();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains(r#"partition="t_default"} 1"#), "{answer}");
    }
}
