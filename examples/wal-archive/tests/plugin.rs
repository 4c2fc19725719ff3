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

/// A WAL object as the plugin wrote them before BLAKE3 (format 1), built
/// byte by byte: a zstd skippable frame holding the JSON header with the
/// content's SHA-256, then the zstd frame with its checksum.
fn format_1_object(name: &str, content: &[u8]) -> Vec<u8> {
    use sha2::Digest as _;
    let sha256: String = sha2::Sha256::digest(content)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let header = format!(
        r#"{{"format":"cnpgi-wal-archive/1","name":"{name}","size":{},"sha256":"{sha256}"}}"#,
        content.len()
    );
    let mut object = 0x184D_2A5Cu32.to_le_bytes().to_vec();
    object.extend_from_slice(&(header.len() as u32).to_le_bytes());
    object.extend_from_slice(header.as_bytes());
    let mut compressor = zstd::bulk::Compressor::new(3).unwrap();
    compressor
        .set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
        .unwrap();
    object.extend_from_slice(&compressor.compress(content).unwrap());
    object
}

#[tokio::test]
async fn an_archive_written_before_blake3_is_still_restored_and_compared() {
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let mut wal = WalClient::new(plugin.channel());
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));
    let content: Vec<u8> = (0..16u32 << 16).map(|i| (i % 11) as u8).collect();
    let object = store.join("pg1/wals/0000000100000000").join(format!("{SEGMENT}.zst"));
    std::fs::create_dir_all(object.parent().unwrap()).unwrap();
    let old = format_1_object(SEGMENT, &content);
    std::fs::write(&object, &old).unwrap();

    // Restored, and checked against its SHA-256.
    let destination = dir.path().join("restored");
    wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap();
    assert_eq!(std::fs::read(&destination).unwrap(), content);

    // Archived again with the same content (PostgreSQL retrying across the
    // upgrade): OK, the old object kept as it is.
    let source = pgdata_with(&dir.path().join("pgdata"), &content);
    wal.archive(archive(&cluster, &source)).await.unwrap();
    assert_eq!(std::fs::read(&object).unwrap(), old);

    // Other content under that name: refused.
    let mut other = content.clone();
    other[7] ^= 1;
    let other_source = pgdata_with(&dir.path().join("other"), &other);
    let status = wal.archive(archive(&cluster, &other_source)).await.unwrap_err();
    assert_eq!(status.code(), Code::AlreadyExists, "{status:?}");
    assert_eq!(std::fs::read(&object).unwrap(), old);

    // A damaged old object: DATA_LOSS naming its key, never restored, and
    // never taken for the same content.
    let mut damaged = old.clone();
    let at = damaged.len() - 10;
    damaged[at] ^= 0xFF;
    std::fs::write(&object, &damaged).unwrap();
    let status = wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(
        status.message().contains(&format!("{SEGMENT}.zst")),
        "{}",
        status.message()
    );
    let status = wal.archive(archive(&cluster, &source)).await.unwrap_err();
    assert_ne!(status.code(), Code::Ok, "{status:?}");
    assert_eq!(std::fs::read(&object).unwrap(), damaged);
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
            backup_definition: br#"{"metadata":{"name":"b2"}}"#.to_vec(),
            parameters: HashMap::from([("compression".to_owned(), "gzip".to_owned())]),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("compression"), "{}", status.message());
    // So is a request without its Backup (CloudNativePG always sends it).
    let status = BackupClient::new(plugin.channel())
        .backup(BackupRequest {
            cluster_definition: cluster.clone(),
            backup_definition: Vec::new(),
            parameters: HashMap::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);

    // A recovery without a backup in the source archive (which exists: a
    // missing directory is another error, below).
    std::fs::create_dir_all(&store).unwrap();
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
async fn a_recovery_source_is_validated_where_the_user_wrote_it() {
    use cnpgi_pluginhelper::proto::operator::v1::OperatorValidateClusterChangeRequest;
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    // The plugin is only the recovery source's: the Cluster does not archive.
    let recovering = serde_json::to_vec(&json!({
        "metadata": {"name": "pg2"},
        "spec": {"bootstrap": {"recovery": {"source": "origin"}},
                 "externalClusters": [{"name": "origin", "plugin": {"name": PLUGIN_NAME,
                     "parameters": {"destinationPath": "/archive", "compressionLevel": "x"}}}]}
    }))
    .unwrap();
    let expected = ["spec.externalClusters.0.plugin.parameters.compressionLevel"];
    let errors = plugin
        .operator()
        .validate_cluster_create(OperatorValidateClusterCreateRequest {
            definition: recovering.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .validation_errors;
    let paths: Vec<String> = errors.iter().map(|e| e.path_components.join(".")).collect();
    assert_eq!(paths, expected);
    let errors = plugin
        .operator()
        .validate_cluster_change(OperatorValidateClusterChangeRequest {
            old_cluster: recovering.clone(),
            new_cluster: recovering,
        })
        .await
        .unwrap()
        .into_inner()
        .validation_errors;
    let paths: Vec<String> = errors.iter().map(|e| e.path_components.join(".")).collect();
    assert_eq!(paths, expected);
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

// --- Status codes: absence, damage and an unreachable store never confused -------------------------
//
// `cnpgi-operator wal-restore` ends recovery (exit 1) only when every plugin
// answered NOT_FOUND, and aborts it on any other code: a damaged object or a
// store that cannot be read must never look like a file missing from the
// archive.

/// Flips one byte near the end of `data` (inside the compressed stream).
fn flip_near_end(data: &mut [u8]) {
    let at = data.len() - 10;
    data[at] ^= 0xFF;
}

#[tokio::test]
async fn wal_codes_on_a_local_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let cluster = cluster(&store, json!({}), json!({}));
    let content: Vec<u8> = (0..1u32 << 18).map(|i| (i % 13) as u8).collect();
    let source = pgdata_with(&dir.path().join("pgdata"), &content);
    let destination = dir.path().join("pgdata/pg_wal/RECOVERYXLOG");
    let object = store.join("pg1/wals/0000000100000000").join(format!("{SEGMENT}.zst"));

    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let mut wal = WalClient::new(plugin.channel());
    wal.archive(archive(&cluster, &source)).await.unwrap();
    let stored = std::fs::read(&object).unwrap();

    // Absent: NOT_FOUND.
    let status = wal
        .restore(restore(&cluster, "000000010000000000000004", &destination))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    // A flipped byte: DATA_LOSS, naming the object and what is wrong.
    let mut damaged = stored.clone();
    flip_near_end(&mut damaged);
    std::fs::write(&object, &damaged).unwrap();
    let status = wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(
        status
            .message()
            .contains("pg1/wals/0000000100000000/000000010000000000000003.zst"),
        "{}",
        status.message()
    );
    assert!(!destination.exists(), "nothing is written from a damaged object");

    // A truncated object: DATA_LOSS too.
    std::fs::write(&object, &stored[..stored.len() / 2]).unwrap();
    let status = wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");

    // Archiving the same file again over a damaged copy must not answer OK
    // (PostgreSQL would recycle the only good copy): DATA_LOSS, untouched.
    std::fs::write(&object, &damaged).unwrap();
    let status = wal.archive(archive(&cluster, &source)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(status.message().contains("damaged"), "{}", status.message());
    assert_eq!(std::fs::read(&object).unwrap(), damaged);
    std::fs::write(&object, &stored).unwrap();
    wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap();
    assert_eq!(std::fs::read(&destination).unwrap(), content);

    // The store's directory gone (an unmounted volume): UNAVAILABLE naming
    // it, for this process (store already open) and for a new one.
    let moved = dir.path().join("moved-away");
    std::fs::rename(&store, &moved).unwrap();
    for plugin in [&plugin, &TestPlugin::start_unix(server()).await.unwrap()] {
        let mut wal = WalClient::new(plugin.channel());
        let status = wal
            .restore(restore(&cluster, "000000010000000000000004", &destination))
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains(store.to_str().unwrap()) && status.message().contains("does not exist"),
            "{}",
            status.message()
        );
        let status = wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(!store.exists(), "a restore never creates the store's directory");
    }
}

/// A base backup in a local store, made as `Backup` makes one: PGDATA as a
/// zstd-compressed tar under `backups/<id>/data.tar.zst`, then its manifest.
/// Returns the data object's path and its content.
fn write_backup(store: &std::path::Path, id: &str) -> (std::path::PathBuf, Vec<u8>) {
    use cnpgi_wal_archive::storage::manifest::{self, DataObject, Manifest};
    let mut tar = tar::Builder::new(Vec::new());
    let mut add = |name: &str, content: &[u8]| {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(0o600);
        header.set_size(content.len() as u64);
        tar.append_data(&mut header, name, content).unwrap();
    };
    add("PG_VERSION", b"17\n");
    add(
        "backup_label",
        b"START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\n",
    );
    // Large and incompressible enough that a damaged end is reached only
    // after the first files were written.
    let big: Vec<u8> = (0..3u64 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    add("base/1/1259", &big);
    add("global/pg_control", b"control");
    let tar = tar.into_inner().unwrap();
    let data = zstd::bulk::compress(&tar, 1).unwrap();
    let folder = store.join("pg1/backups").join(id);
    std::fs::create_dir_all(&folder).unwrap();
    std::fs::write(folder.join(manifest::DATA_FILE), &data).unwrap();
    let at = chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
        .unwrap()
        .to_utc();
    let manifest = Manifest {
        format: manifest::FORMAT.into(),
        backup_id: id.into(),
        backup_name: "b1".into(),
        cluster_name: "pg1".into(),
        server_name: "pg1".into(),
        started_at: at,
        stopped_at: at,
        begin_lsn: "0/2000028".into(),
        end_lsn: "0/2000100".into(),
        begin_wal: "000000010000000000000002".into(),
        end_wal: "000000010000000000000002".into(),
        timeline: 1,
        pg_version: 170000,
        system_identifier: "1".into(),
        wal_segment_size: 16 << 20,
        data: DataObject {
            file: manifest::DATA_FILE.into(),
            size: data.len() as u64,
            sha256: cnpgi_wal_archive::storage::object::sha256_hex(&data),
            tar_size: tar.len() as u64,
            compression: "zstd".into(),
        },
        backup_label: String::new(),
        tablespace_map: String::new(),
    };
    std::fs::write(
        folder.join(manifest::MANIFEST_FILE),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    (folder.join(manifest::DATA_FILE), data)
}

/// The plugin, restoring backups into `pgdata`.
fn restoring_into(
    pgdata: &std::path::Path,
) -> cnpgi_pluginhelper::transport::PluginServer<cnpgi_pluginhelper::plugin::PluginIdentity> {
    cnpgi_wal_archive::plugin_with(cnpgi_wal_archive::Settings {
        pgdata: pgdata.to_owned(),
        restore_command: "cli wal-restore %f %p".into(),
        ..cnpgi_wal_archive::Settings::from_env()
    })
    .server()
}

/// A Cluster recovering from the archive in `store` (server `pg1`).
fn recovering_from(store: &std::path::Path) -> RestoreRequest {
    recovering_with(json!({"destinationPath": store.to_str().unwrap()}))
}

/// A Cluster recovering from the archive `parameters` describe (server `pg1`).
fn recovering_with(parameters: Value) -> RestoreRequest {
    RestoreRequest {
        cluster_definition: serde_json::to_vec(&json!({
            "metadata": {"name": "pg2"},
            "spec": {"bootstrap": {"recovery": {"source": "pg1"}},
                     "externalClusters": [{"name": "pg1", "plugin": {"name": PLUGIN_NAME,
                         "parameters": parameters}}]}
        }))
        .unwrap(),
        check_empty_wal_archive: None,
    }
}

/// Every path under `dir`, relative, sorted.
fn tree(dir: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(dir).unwrap().to_str().unwrap().to_owned());
            if path.is_dir() {
                pending.push(path);
            }
        }
    }
    found.sort();
    found
}

#[tokio::test]
async fn a_damaged_base_backup_never_reaches_pgdata() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("store");
    let (data_path, data) = write_backup(&store, "20260101T000000");
    let volume = dir.path().join("volume");
    std::fs::create_dir(&volume).unwrap();
    let pgdata = volume.join("pgdata");
    std::fs::create_dir(&pgdata).unwrap();
    let plugin = TestPlugin::start_unix(restoring_into(&pgdata)).await.unwrap();
    let mut hooks = RestoreJobHooksClient::new(plugin.channel());

    // A flipped byte late in the stream: DATA_LOSS, PGDATA still empty and
    // nothing left beside it.
    let mut damaged = data.clone();
    flip_near_end(&mut damaged);
    std::fs::write(&data_path, &damaged).unwrap();
    let status = hooks.restore(recovering_from(&store)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(status.message().contains("20260101T000000"), "{}", status.message());
    assert_eq!(tree(&pgdata), Vec::<String>::new());
    assert_eq!(tree(&volume), ["pgdata"]);

    // Truncated: the same.
    std::fs::write(&data_path, &data[..data.len() - 100]).unwrap();
    let status = hooks.restore(recovering_from(&store)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert_eq!(tree(&volume), ["pgdata"]);

    // Valid zstd and tar, but not what the manifest recorded (only the
    // checksum sees it, after every file was unpacked): the same.
    let mut other = zstd::bulk::decompress(&data, 64 << 20).unwrap();
    let len = other.len();
    other[len / 2] ^= 1;
    std::fs::write(&data_path, zstd::bulk::compress(&other, 1).unwrap()).unwrap();
    let status = hooks.restore(recovering_from(&store)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(status.message().contains("SHA-256"), "{}", status.message());
    assert_eq!(tree(&volume), ["pgdata"]);

    // The data object missing while its manifest is there: the backup is
    // damaged, not absent.
    std::fs::remove_file(&data_path).unwrap();
    let status = hooks.restore(recovering_from(&store)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(status.message().contains("data.tar.zst"), "{}", status.message());
    assert_eq!(tree(&volume), ["pgdata"]);

    // Intact: every file in place, PGDATA private.
    std::fs::write(&data_path, &data).unwrap();
    hooks.restore(recovering_from(&store)).await.unwrap();
    assert_eq!(
        tree(&pgdata),
        [
            "PG_VERSION",
            "backup_label",
            "base",
            "base/1",
            "base/1/1259",
            "global",
            "global/pg_control"
        ]
    );
    assert_eq!(tree(&volume).len(), 1 + 7, "{:?}", tree(&volume));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&pgdata).unwrap().permissions().mode() & 0o777, 0o700);

    // An absent PGDATA stays absent when the backup is damaged.
    std::fs::remove_dir_all(&pgdata).unwrap();
    std::fs::write(&data_path, &damaged).unwrap();
    let status = hooks.restore(recovering_from(&store)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert_eq!(tree(&volume), Vec::<String>::new());

    // The only manifest damaged: DATA_LOSS naming it, not "no backup";
    // the same when asked for that backup by id.
    let manifest_path = data_path.with_file_name("backup.json");
    let manifest = std::fs::read(&manifest_path).unwrap();
    std::fs::write(&manifest_path, &manifest[..manifest.len() / 2]).unwrap();
    let mut by_id = recovering_from(&store);
    let mut definition: Value = serde_json::from_slice(&by_id.cluster_definition).unwrap();
    definition["spec"]["bootstrap"]["recovery"]["recoveryTarget"] = json!({"backupID": "20260101T000000"});
    by_id.cluster_definition = serde_json::to_vec(&definition).unwrap();
    for request in [recovering_from(&store), by_id] {
        let status = hooks.restore(request).await.unwrap_err();
        assert_eq!(status.code(), Code::DataLoss, "{status:?}");
        assert!(
            status.message().contains("20260101T000000") && status.message().contains("backup.json"),
            "{}",
            status.message()
        );
    }
    assert_eq!(tree(&volume), Vec::<String>::new());

    // The store's directory gone: UNAVAILABLE, not "no backup".
    std::fs::rename(&store, dir.path().join("moved-away")).unwrap();
    let status = hooks.restore(recovering_from(&store)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains(store.to_str().unwrap()),
        "{}",
        status.message()
    );
}

/// A moto S3 server on loopback, stopped when dropped.
struct Moto {
    child: std::process::Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback port nothing listens on (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Sends one plain HTTP request to `endpoint` and returns the status line.
fn http(endpoint: &str, request_line: &str) -> String {
    use std::io::{Read, Write};
    let address = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "{request_line} HTTP/1.1\r\nHost: {address}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer.lines().next().unwrap_or_default().to_owned()
}

impl Moto {
    /// Starts moto with one bucket, `wal-archive`; `None` when moto is not
    /// installed (`pip install 'moto[server]==5.2.1'`). With `checking`,
    /// moto checks credentials after creating the bucket (and knows none).
    fn start(checking: bool) -> Option<Self> {
        let installed = std::process::Command::new("python3")
            .args(["-c", "import moto.server"])
            .status()
            .is_ok_and(|s| s.success());
        if !installed {
            return None;
        }
        let port = free_port();
        let mut command = std::process::Command::new("python3");
        if checking {
            // Every request after the first (the bucket's creation) must be
            // signed with credentials moto knows.
            command.env("INITIAL_NO_AUTH_ACTION_COUNT", "1");
        }
        let child = command
            .args(["-m", "moto.server", "-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let moto = Self {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
        };
        let started = std::time::Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(started.elapsed().as_secs() < 30, "moto did not start on port {port}");
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let created = http(&moto.endpoint, "PUT /wal-archive");
        assert!(created.contains(" 200 "), "creating the bucket: {created}");
        Some(moto)
    }
}

/// The S3 tests run in a child process of this test binary, which gets the
/// credentials in its environment as the sidecar does (the store reads
/// them from there; a test cannot set its own environment safely).
const S3_ENDPOINT_ENV: &str = "WAL_ARCHIVE_TEST_S3_ENDPOINT";
/// The endpoint of a moto checking credentials, for the child process.
const S3_CHECKING_ENDPOINT_ENV: &str = "WAL_ARCHIVE_TEST_S3_CHECKING_ENDPOINT";

#[tokio::test]
async fn wal_codes_on_s3() {
    let Ok(endpoint) = std::env::var(S3_ENDPOINT_ENV) else {
        let Some(moto) = Moto::start(false) else {
            assert!(
                std::env::var_os("WAL_ARCHIVE_REQUIRE_S3").is_none(),
                "moto is not installed: pip install 'moto[server]==5.2.1'"
            );
            eprintln!("SKIPPED: moto is not installed (pip install 'moto[server]==5.2.1')");
            return;
        };
        let checking = Moto::start(true).unwrap();
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "wal_codes_on_s3", "--nocapture", "--test-threads=1"])
            .env(S3_ENDPOINT_ENV, &moto.endpoint)
            .env(S3_CHECKING_ENDPOINT_ENV, &checking.endpoint)
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            output.status.success() && stdout.contains("1 passed"),
            "the S3 test failed:\n{stdout}\n{stderr}"
        );
        return;
    };
    let checking = std::env::var(S3_CHECKING_ENDPOINT_ENV).unwrap();
    s3_codes(&endpoint, &checking).await;
}

/// The multipart uploads in progress in moto's bucket `wal-archive`.
fn multipart_uploads(endpoint: &str) -> usize {
    use std::io::{Read, Write};
    let address = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET /wal-archive?uploads HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    answer.matches("<UploadId>").count()
}

/// A backup's data on S3: in 5 MiB parts, completed into one object; and an
/// upload dropped half-way (the backup failed) leaves no multipart upload
/// behind.
async fn backup_upload_on_s3(endpoint: &str) {
    use cnpgi_wal_archive::storage::part_upload::{PartUpload, UploadFailure};
    use cnpgi_wal_archive::storage::store::{Location, Store, StoreConfig};
    use std::io::Write as _;
    let store = Store::open(&StoreConfig {
        location: Location::S3 {
            bucket: "wal-archive".into(),
            prefix: "ci".into(),
            endpoint: Some(endpoint.to_owned()),
            region: "us-east-1".into(),
        },
        server_name: "pg1".into(),
    })
    .unwrap();
    assert_eq!(store.upload_part_size(), 5 << 20);
    let data: Vec<u8> = (0..(11u32 << 20)).map(|i| (i % 253) as u8).collect();
    let start = |id: &str| {
        let key = store.backup_prefix(id).join("data.tar.zst");
        let upload = PartUpload::new(
            tokio::runtime::Handle::current(),
            &store,
            key.clone(),
            store.upload_part_size(),
            &UploadFailure::default(),
        );
        (key, upload)
    };

    let (key, mut upload) = start("20260101T000000");
    let written = data.clone();
    tokio::task::spawn_blocking(move || {
        upload.write_all(&written)?;
        upload.shutdown()
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(store.get(&key).await.unwrap().unwrap().to_vec(), data);
    assert_eq!(multipart_uploads(endpoint), 0);

    // Two parts sent, the third filling, then dropped: aborted.
    let (_, mut upload) = start("20260102T000000");
    let written = data.clone();
    let upload = tokio::task::spawn_blocking(move || {
        upload.write_all(&written).unwrap();
        upload
    })
    .await
    .unwrap();
    assert_eq!(multipart_uploads(endpoint), 1, "the unfinished upload is in progress");
    drop(upload);
    let started = std::time::Instant::now();
    while multipart_uploads(endpoint) > 0 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "the dropped upload was not aborted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn s3_codes(endpoint: &str, checking_endpoint: &str) {
    use object_store::{ObjectStoreExt, PutPayload, aws::AmazonS3Builder, path::Path};
    let plugin = TestPlugin::start_unix(server()).await.unwrap();
    let mut wal = WalClient::new(plugin.channel());
    let dir = tempfile::tempdir().unwrap();
    let s3_cluster = |bucket: &str, endpoint: &str| {
        cluster(
            std::path::Path::new(&format!("s3://{bucket}/ci")),
            json!({"endpointURL": endpoint}),
            json!({}),
        )
    };
    let cluster = s3_cluster("wal-archive", endpoint);
    let content: Vec<u8> = (0..1u32 << 18).map(|i| (i % 11) as u8).collect();
    let source = pgdata_with(&dir.path().join("pgdata"), &content);
    let destination = dir.path().join("pgdata/pg_wal/RECOVERYXLOG");

    wal.archive(archive(&cluster, &source)).await.unwrap();
    wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap();
    assert_eq!(std::fs::read(&destination).unwrap(), content);
    std::fs::remove_file(&destination).unwrap();

    // Absent: NOT_FOUND.
    let status = wal
        .restore(restore(&cluster, "000000010000000000000004", &destination))
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    // A flipped byte in the stored object: DATA_LOSS naming the key.
    let s3 = AmazonS3Builder::from_env()
        .with_bucket_name("wal-archive")
        .with_endpoint(endpoint)
        .with_allow_http(true)
        .with_region("us-east-1")
        .build()
        .unwrap();
    let key = Path::from(format!("ci/pg1/wals/0000000100000000/{SEGMENT}.zst"));
    let mut stored = s3.get(&key).await.unwrap().bytes().await.unwrap().to_vec();
    flip_near_end(&mut stored);
    s3.put(&key, PutPayload::from(stored)).await.unwrap();
    let status = wal.restore(restore(&cluster, SEGMENT, &destination)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(status.message().contains(key.as_ref()), "{}", status.message());
    assert!(!destination.exists());

    // A bucket that does not exist: never NOT_FOUND, and said so.
    let missing = s3_cluster("no-such-bucket", endpoint);
    let status = wal.restore(restore(&missing, SEGMENT, &destination)).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("bucket no-such-bucket does not exist"),
        "{}",
        status.message()
    );
    let status = wal.archive(archive(&missing, &source)).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("bucket no-such-bucket does not exist"),
        "{}",
        status.message()
    );

    backup_upload_on_s3(endpoint).await;

    // Credentials the store does not know: never NOT_FOUND, and said so.
    let refused = s3_cluster("wal-archive", checking_endpoint);
    for status in [
        wal.restore(restore(&refused, SEGMENT, &destination)).await.unwrap_err(),
        wal.archive(archive(&refused, &source)).await.unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
        assert!(
            status
                .message()
                .contains("the credentials were refused: InvalidAccessKeyId"),
            "{}",
            status.message()
        );
    }

    // Nothing listening at the endpoint: UNAVAILABLE, naming it.
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let unreachable = s3_cluster("wal-archive", &nowhere);
    for status in [
        wal.restore(restore(&unreachable, SEGMENT, &destination))
            .await
            .unwrap_err(),
        wal.archive(archive(&unreachable, &source)).await.unwrap_err(),
    ] {
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            status.message().contains(&format!("cannot connect to {nowhere}")),
            "{}",
            status.message()
        );
    }

    // RestoreJobHooks on S3: a damaged base backup never reaches PGDATA, and
    // a missing bucket or an unreachable endpoint is not "no backup".
    let backup = tempfile::tempdir().unwrap();
    let (data_path, data) = write_backup(backup.path(), "20260101T000000");
    let folder = "ci/pg1/backups/20260101T000000";
    let mut damaged = data.clone();
    flip_near_end(&mut damaged);
    s3.put(&Path::from(format!("{folder}/data.tar.zst")), PutPayload::from(damaged))
        .await
        .unwrap();
    let manifest = std::fs::read(data_path.with_file_name("backup.json")).unwrap();
    s3.put(&Path::from(format!("{folder}/backup.json")), PutPayload::from(manifest))
        .await
        .unwrap();
    let volume = dir.path().join("volume");
    let pgdata = volume.join("pgdata");
    std::fs::create_dir_all(&pgdata).unwrap();
    let restoring = TestPlugin::start_unix(restoring_into(&pgdata)).await.unwrap();
    let mut hooks = RestoreJobHooksClient::new(restoring.channel());
    let from = |bucket: &str, endpoint: &str| {
        recovering_with(json!({"destinationPath": format!("s3://{bucket}/ci"), "endpointURL": endpoint}))
    };
    let status = hooks.restore(from("wal-archive", endpoint)).await.unwrap_err();
    assert_eq!(status.code(), Code::DataLoss, "{status:?}");
    assert!(
        status.message().contains(&format!("{folder}/data.tar.zst")),
        "{}",
        status.message()
    );
    assert_eq!(tree(&volume), ["pgdata"]);
    s3.put(&Path::from(format!("{folder}/data.tar.zst")), PutPayload::from(data))
        .await
        .unwrap();
    hooks.restore(from("wal-archive", endpoint)).await.unwrap();
    assert!(pgdata.join("backup_label").is_file());
    assert_eq!(tree(&volume).len(), 1 + 7, "{:?}", tree(&volume));

    let status = hooks.restore(from("no-such-bucket", endpoint)).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition, "{status:?}");
    assert!(
        status.message().contains("bucket no-such-bucket does not exist"),
        "{}",
        status.message()
    );
    let status = hooks.restore(from("wal-archive", &nowhere)).await.unwrap_err();
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        status.message().contains(&format!("cannot connect to {nowhere}")),
        "{}",
        status.message()
    );
}
