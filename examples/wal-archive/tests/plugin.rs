//! The plugin served in-process (over a Unix socket, as a sidecar, and over
//! mutual TLS), called as CloudNativePG calls it, with a real local store in
//! a temporary directory. PostgreSQL itself is in `tests/postgres.sh`.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;

use cnpgi_pluginhelper::{
    proto::{
        backup::v1::{BackupRequest, backup_client::BackupClient},
        metrics::v1::{CollectMetricsRequest, DefineMetricsRequest, metrics_client::MetricsClient},
        operator::v1::OperatorValidateClusterCreateRequest,
        wal::v1::{
            RestoreRequest, WalArchiveRequest, WalRestoreRequest, WalStatusRequest,
            restore_job_hooks_client::RestoreJobHooksClient, wal_client::WalClient,
        },
    },
    testing::TestPlugin,
};
use cnpgi_wal_archive::{metadata::PLUGIN_NAME, server};
use serde_json::{Value, json};
use tonic::Code;

const SEGMENT: &str = "000000010000000000000003";

fn cluster(store: &std::path::Path, extra_parameters: Value, annotations: Value) -> Vec<u8> {
    let mut parameters = json!({"destinationPath": store.to_str().unwrap(), "pgHost": "/nonexistent", "pgPort": "1"});
    parameters
        .as_object_mut()
        .unwrap()
        .extend(extra_parameters.as_object().unwrap().clone());
    serde_json::to_vec(&json!({
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": "pg1", "namespace": "default", "annotations": annotations},
        "spec": {"instances": 1, "plugins": [{"name": PLUGIN_NAME, "isWALArchiver": true, "parameters": parameters}]},
        "status": {"currentPrimary": "pg1-1"}
    }))
    .unwrap()
}

/// A PGDATA with one WAL file of the given content.
fn pgdata_with(dir: &std::path::Path, content: &[u8]) -> String {
    std::fs::create_dir_all(dir.join("pg_wal")).unwrap();
    let path = dir.join("pg_wal").join(SEGMENT);
    std::fs::write(&path, content).unwrap();
    path.to_str().unwrap().to_owned()
}

fn archive(cluster: &[u8], source: &str) -> WalArchiveRequest {
    WalArchiveRequest {
        cluster_definition: cluster.to_vec(),
        source_file_name: source.to_owned(),
        parameters: HashMap::new(),
        check_empty_wal_archive: None,
    }
}

fn restore(cluster: &[u8], name: &str, destination: &std::path::Path) -> WalRestoreRequest {
    WalRestoreRequest {
        cluster_definition: cluster.to_vec(),
        source_wal_name: name.to_owned(),
        destination_file_name: destination.to_str().unwrap().to_owned(),
        parameters: HashMap::new(),
        mode: 0,
    }
}

#[tokio::test]
async fn passes_the_conformance_suite_on_both_transports() {
    for plugin in [
        TestPlugin::start_unix(server()).await.unwrap(),
        TestPlugin::start_tls(server()).await.unwrap(),
    ] {
        let report = plugin.check_conformance(PLUGIN_NAME).await.unwrap();
        assert!(report.passed(), "{report}");
    }
}

#[tokio::test]
async fn archive_is_idempotent_refuses_other_content_and_restores_atomically() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let mut wal = WalClient::new(plugin.channel());
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));
    let content: Vec<u8> = (0..16u32 << 16).map(|i| (i % 7) as u8).collect();
    let source = pgdata_with(&dir.path().join("pgdata"), &content);

    wal.archive(archive(&cluster, &source)).await.unwrap();
    let object = store.join("pg1/wals/0000000100000000").join(format!("{SEGMENT}.zst"));
    let stored = std::fs::read(&object).unwrap();
    assert!(stored.len() < content.len() / 10, "zstd: {} bytes", stored.len());
    // A standard zstd decoder reads it (the header is a skippable frame).
    assert_eq!(zstd::stream::decode_all(&stored[..]).unwrap(), content);

    // Again, same content: OK, nothing rewritten.
    wal.archive(archive(&cluster, &source)).await.unwrap();
    assert_eq!(std::fs::read(&object).unwrap(), stored);

    // Same name, other content: refused, the archived object untouched.
    let mut other = content.clone();
    other[100] ^= 1;
    let other_source = pgdata_with(&dir.path().join("other"), &other);
    let status = wal.archive(archive(&cluster, &other_source)).await.unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    assert!(status.message().contains("different content"), "{}", status.message());
    assert_eq!(std::fs::read(&object).unwrap(), stored);

    // Restore: the same bytes, through a temporary file.
    let destination = dir.path().join("pgdata/pg_wal/RECOVERYXLOG");
    wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap();
    assert_eq!(std::fs::read(&destination).unwrap(), content);
    let leftovers: Vec<_> = std::fs::read_dir(dir.path().join("pgdata/pg_wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains("tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // A missing name is NOT_FOUND; a damaged object is DATA_LOSS.
    let status = wal
        .restore(restore(&cluster, "00000002.history", &destination))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound);
    let mut damaged = stored.clone();
    let at = damaged.len() - 10;
    damaged[at] ^= 0xFF;
    std::fs::write(&object, &damaged).unwrap();
    let status = wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");

    // Bad names never reach the store.
    let status = wal
        .restore(restore(&cluster, "../../etc/passwd", &destination))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    // Status: first and last segment.
    let status = wal
        .status(WalStatusRequest {
            cluster_definition: cluster.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (status.first_wal.as_str(), status.last_wal.as_str()),
        (SEGMENT, SEGMENT)
    );
}

#[tokio::test]
async fn the_empty_archive_check_follows_cloudnative_pg() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let mut wal = WalClient::new(plugin.channel());
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));

    // Another cluster's WAL is already there.
    let foreign = pgdata_with(&dir.path().join("foreign"), b"foreign");
    wal.archive(archive(&cluster, &foreign)).await.unwrap();

    // A new instance (marker present) must not archive into it...
    let pgdata = dir.path().join("pgdata");
    let source = pgdata_with(&pgdata, b"mine");
    let other_name = source.replace(SEGMENT, "000000010000000000000004");
    std::fs::rename(&source, &other_name).unwrap();
    let marker = pgdata.join(".check-empty-wal-archive");
    std::fs::write(&marker, b"").unwrap();
    let status = wal.archive(archive(&cluster, &other_name)).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(status.message().contains("is not empty"), "{}", status.message());
    assert!(marker.exists());
    // ...nor when the host asks explicitly, marker or not.
    let mut asked = archive(&cluster, &other_name);
    asked.check_empty_wal_archive = Some(true);
    assert_eq!(wal.archive(asked).await.unwrap_err().code(), Code::FailedPrecondition);
    // The host saying no check wins over the marker.
    let mut not_asked = archive(&cluster, &other_name);
    not_asked.check_empty_wal_archive = Some(false);
    wal.archive(not_asked).await.unwrap();
    assert!(!marker.exists(), "the marker is removed after the first success");

    // The annotation skips the check.
    let skipping = self::cluster(
        &store,
        json!({}),
        json!({"cnpg.io/skipEmptyWalArchiveCheck": "enabled"}),
    );
    std::fs::write(&marker, b"").unwrap();
    let next = source.replace(SEGMENT, "000000010000000000000005");
    std::fs::write(&next, b"next").unwrap();
    wal.archive(archive(&skipping, &next)).await.unwrap();
    assert!(!marker.exists());

    // An empty archive (another serverName) passes the check.
    let fresh = self::cluster(&store, json!({"serverName": "pg2"}), json!({}));
    std::fs::write(&marker, b"").unwrap();
    let last = source.replace(SEGMENT, "000000010000000000000006");
    std::fs::write(&last, b"last").unwrap();
    wal.archive(archive(&fresh, &last)).await.unwrap();
    assert!(!marker.exists());
}

#[tokio::test]
async fn errors_name_what_failed() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));

    // A backup whose PostgreSQL is unreachable: UNAVAILABLE, saying where.
    let status = BackupClient::new(plugin.channel())
        .backup(BackupRequest {
            cluster_definition: cluster.clone(),
            backup_definition: br#"{"metadata":{"name":"b1"}}"#.to_vec(),
            parameters: HashMap::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains("PostgreSQL at /nonexistent:1: connect"),
        "{}",
        status.message()
    );

    // Backup parameters are refused by name.
    let status = BackupClient::new(plugin.channel())
        .backup(BackupRequest {
            cluster_definition: cluster.clone(),
            backup_definition: Vec::new(),
            parameters: HashMap::from([("compression".to_owned(), "gzip".to_owned())]),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("compression"), "{}", status.message());

    // A recovery without a backup in the source archive.
    let recovering = serde_json::to_vec(&json!({
        "metadata": {"name": "pg2"},
        "spec": {"bootstrap": {"recovery": {"source": "origin"}},
                 "externalClusters": [{"name": "origin", "plugin": {"name": PLUGIN_NAME,
                     "parameters": {"destinationPath": store.to_str().unwrap()}}}]}
    }))
    .unwrap();
    let status = RestoreJobHooksClient::new(plugin.channel())
        .restore(RestoreRequest {
            cluster_definition: recovering,
            check_empty_wal_archive: None,
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert!(status.message().contains("no completed backup"), "{}", status.message());

    // Invalid parameters: every one reported on its field, and WAL calls
    // refuse to run with them.
    let bad = self::cluster(
        &store,
        json!({"compressionLevel": "99", "keepBackups": "none"}),
        json!({}),
    );
    let errors = plugin
        .operator()
        .validate_cluster_create(OperatorValidateClusterCreateRequest {
            definition: bad.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .validation_errors;
    let paths: Vec<String> = errors.iter().map(|e| e.path_components.join(".")).collect();
    assert_eq!(paths, ["spec.plugins.0.compressionLevel", "spec.plugins.0.keepBackups"]);
    let status = WalClient::new(plugin.channel())
        .archive(archive(&bad, "/pgdata/pg_wal/000000010000000000000001"))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("spec.plugins[0].parameters.compressionLevel"),
        "{}",
        status.message()
    );
}

#[tokio::test]
async fn metrics_report_archiving() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));
    let mut metrics = MetricsClient::new(plugin.channel());
    let defined = metrics
        .define(DefineMetricsRequest {
            cluster_definition: cluster.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .metrics;
    assert!(
        defined
            .iter()
            .all(|m| m.fq_name.starts_with("cnpgi_wal_archive_") && m.value_type.is_some())
    );

    let source = pgdata_with(&dir.path().join("pgdata"), b"wal");
    WalClient::new(plugin.channel())
        .archive(archive(&cluster, &source))
        .await
        .unwrap();
    let _ = WalClient::new(plugin.channel())
        .archive(archive(&cluster, "/pgdata/pg_wal/000000010000000000000009"))
        .await
        .unwrap_err();
    let collected = metrics
        .collect(CollectMetricsRequest {
            cluster_definition: cluster.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .metrics;
    let value = |name: &str| {
        collected
            .iter()
            .find(|m| m.fq_name == format!("cnpgi_wal_archive_{name}"))
            .map(|m| (m.value, m.variable_labels.clone()))
    };
    assert_eq!(value("archived_total"), Some((1.0, vec![])));
    assert_eq!(value("failures_total"), Some((1.0, vec![])));
    assert_eq!(value("last_archived_info"), Some((1.0, vec![SEGMENT.to_owned()])));
    assert_eq!(value("backups_in_store"), Some((0.0, vec![])));
    assert!(value("last_archived_timestamp_seconds").unwrap().0 > 1.7e9);
    // Every collected value is defined with as many labels.
    for metric in &collected {
        let definition = defined.iter().find(|d| d.fq_name == metric.fq_name).unwrap();
        assert_eq!(definition.variable_labels.len(), metric.variable_labels.len());
    }
}

#[tokio::test]
async fn concurrent_writers_of_one_name_never_both_win() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));
    for round in 0..5u8 {
        let name = format!("0000000100000000000000{round:02X}");
        let mut calls = Vec::new();
        for writer in 0..4u8 {
            let pgdata = dir.path().join(format!("w{round}-{writer}"));
            std::fs::create_dir_all(pgdata.join("pg_wal")).unwrap();
            let source = pgdata.join("pg_wal").join(&name);
            std::fs::write(&source, vec![writer; 1 << 20]).unwrap();
            let mut wal = WalClient::new(plugin.channel());
            let request = archive(&cluster, source.to_str().unwrap());
            calls.push(tokio::spawn(async move { wal.archive(request).await.map(drop) }));
        }
        let mut won = 0;
        for call in calls {
            match call.await.unwrap() {
                Ok(()) => won += 1,
                Err(status) => assert_eq!(status.code(), Code::AlreadyExists, "{status:?}"),
            }
        }
        assert_eq!(won, 1, "round {round}: exactly one writer stores {name}");
    }
}
