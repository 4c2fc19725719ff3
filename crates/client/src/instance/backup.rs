//! Base backups and restores through plugins: `Backup.Backup`, as
//! CloudNativePG's instance manager calls it for a Backup with `method:
//! plugin`, and `RestoreJobHooks.Restore`, as its `instance restore` calls it
//! in the recovery Job, followed by the recovery configuration it writes.

use std::{
    collections::{BTreeMap, HashMap},
    io::Write as _,
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    time::{SystemTime, UNIX_EPOCH},
};

use base64::Engine as _;
use cnpgi_core::{
    capabilities::{BackupRpc, RestoreJobKind, ServiceType},
    postgres::{empty_wal_archive_check_enabled, recovery_target_options},
    service,
};
use cnpgi_proto::{
    backup::v1::{BackupRequest, BackupResult},
    wal::v1::{RestoreRequest, RestoreResponse},
};
use serde_json::{Value, json};

use super::{InstanceError, InstanceOptions, connect_one};

/// The Backup object CloudNativePG sends with `Backup.Backup`: `method:
/// plugin`, the plugin and its parameters in `spec.pluginConfiguration`,
/// and phase `started` (set by the Backup controller before the instance is
/// asked). Its `apiVersion` is the Cluster's, so that it is in the same
/// group (`postgresql.cnpg.io/v1` for a CloudNativePG Cluster).
///
/// ```
/// let cluster = serde_json::json!({"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
///     "metadata": {"name": "pg", "namespace": "db"}});
/// let backup = cnpgi_client::instance::backup::backup_object(&cluster, "pg-1", "p.example.com", &Default::default());
/// assert_eq!(backup["kind"], "Backup");
/// assert_eq!(backup["status"]["phase"], "started");
/// assert_eq!(backup["spec"]["cluster"]["name"], "pg");
/// ```
pub fn backup_object(cluster: &Value, name: &str, plugin: &str, parameters: &BTreeMap<String, String>) -> Value {
    let text = |pointer: &str| cluster.pointer(pointer).and_then(Value::as_str);
    let mut metadata = json!({ "name": name });
    if let Some(namespace) = text("/metadata/namespace") {
        metadata["namespace"] = Value::from(namespace);
    }
    let mut configuration = json!({ "name": plugin });
    if !parameters.is_empty() {
        configuration["parameters"] = json!(parameters);
    }
    json!({
        "apiVersion": text("/apiVersion").unwrap_or("postgresql.cnpg.io/v1"),
        "kind": "Backup",
        "metadata": metadata,
        "spec": {
            "cluster": { "name": text("/metadata/name").unwrap_or_default() },
            "method": "plugin",
            "pluginConfiguration": configuration,
        },
        "status": { "phase": "started", "method": "plugin" },
    })
}

/// `<cluster>-<YYYYMMDDhhmmss>` (UTC), the form of ScheduledBackup names.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let at = UNIX_EPOCH + Duration::from_secs(1_767_323_045); // 2026-01-02T03:04:05Z
/// assert_eq!(cnpgi_client::instance::backup::default_backup_name("pg", at), "pg-20260102030405");
/// ```
pub fn default_backup_name(cluster_name: &str, at: SystemTime) -> String {
    let seconds = at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{cluster_name}-{year:04}{month:02}{day:02}{:02}{:02}{:02}",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// `Backup.Backup` on `plugin` (which must advertise `TYPE_BACKUP_SERVICE`
/// and `TYPE_BACKUP`), with the Cluster, `backup` (see [`backup_object`])
/// and `parameters`. The call lasts as long as the backup; its deadline is
/// [`InstanceOptions::client`]'s (CloudNativePG sets none over a socket).
///
/// # Errors
///
/// The plugin has no socket, does not back up, or fails.
pub async fn backup(
    cluster: &Value,
    backup: &Value,
    plugin: &str,
    parameters: &BTreeMap<String, String>,
    options: &InstanceOptions,
) -> Result<BackupResult, InstanceError> {
    let target = connect_one(plugin, ServiceType::BackupService, options).await?;
    if !target.info.backup_rpcs.contains(&BackupRpc::Backup) {
        return Err(InstanceError::Unsupported {
            plugin: plugin.to_owned(),
            what: "the Backup RPC TYPE_BACKUP".to_owned(),
        });
    }
    let request = BackupRequest {
        cluster_definition: serde_json::to_vec(cluster)?,
        backup_definition: serde_json::to_vec(backup)?,
        parameters: parameters
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<HashMap<_, _>>(),
    };
    Ok(target
        .client
        .backup()
        .backup(target.client.request(request))
        .await
        .map_err(|s| InstanceError::call(plugin, service::backup::BACKUP.method, &s))?
        .into_inner())
}

/// A `BackupResult` as JSON, in the protobuf JSON mapping's field names
/// (`backupId`, `startedAt`, ...; bytes in base64), with the times as the
/// Unix seconds the plugin sent.
pub fn backup_result_json(result: &BackupResult) -> Value {
    let base64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let metadata: BTreeMap<&String, &String> = result.metadata.iter().collect();
    json!({
        "backupId": result.backup_id,
        "backupName": result.backup_name,
        "startedAt": result.started_at,
        "stoppedAt": result.stopped_at,
        "beginWal": result.begin_wal,
        "endWal": result.end_wal,
        "beginLsn": result.begin_lsn,
        "endLsn": result.end_lsn,
        "backupLabelFile": base64(&result.backup_label_file),
        "tablespaceMapFile": base64(&result.tablespace_map_file),
        "instanceId": result.instance_id,
        "online": result.online,
        "metadata": metadata,
    })
}

/// `RestoreJobHooks.Restore` on `plugin` (which must advertise
/// `TYPE_RESTORE_JOB` and `KIND_RESTORE`) with the Cluster: the plugin fills
/// PGDATA before answering. `check_empty_wal_archive` is the Cluster's
/// [`empty_wal_archive_check_enabled`], as CloudNativePG's main branch sends it.
///
/// # Errors
///
/// The plugin has no socket, does not restore, or fails.
pub async fn restore(
    cluster: &Value,
    plugin: &str,
    options: &InstanceOptions,
) -> Result<RestoreResponse, InstanceError> {
    let target = connect_one(plugin, ServiceType::RestoreJob, options).await?;
    if !target.info.restore_job_kinds.contains(&RestoreJobKind::Restore) {
        return Err(InstanceError::Unsupported {
            plugin: plugin.to_owned(),
            what: "restore jobs (KIND_RESTORE)".to_owned(),
        });
    }
    let request = RestoreRequest {
        cluster_definition: serde_json::to_vec(cluster)?,
        check_empty_wal_archive: Some(empty_wal_archive_check_enabled(cluster)),
    };
    Ok(target
        .client
        .restore_job()
        .restore(target.client.request(request))
        .await
        .map_err(|s| InstanceError::call(plugin, service::restore_job::RESTORE.method, &s))?
        .into_inner())
}

/// The file CloudNativePG creates in PGDATA after a restore: while it
/// exists, a WAL plugin checks that the archive it writes to is empty.
pub const CHECK_EMPTY_WAL_ARCHIVE_FILE: &str = ".check-empty-wal-archive";

/// What [`write_recovery_configuration`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryFiles {
    /// The configuration file appended to.
    pub config: PathBuf,
    /// `recovery.signal`.
    pub signal: PathBuf,
    /// [`CHECK_EMPTY_WAL_ARCHIVE_FILE`].
    pub check_empty_wal_archive: PathBuf,
}

/// The block [`write_recovery_configuration`] appends: what CloudNativePG
/// appends to `custom.conf` (`archive_command = 'false'`, then the plugin's
/// `restore_config`, then the recovery target of
/// `spec.bootstrap.recovery.recoveryTarget`), under a comment saying how to
/// undo it.
///
/// ```
/// let block = cnpgi_client::instance::backup::recovery_block(
///     "restore_command = 'cnpgi-operator wal-restore %f %p'", &serde_json::json!({}));
/// assert!(block.contains("archive_command = 'false'\nrestore_command = "));
/// ```
pub fn recovery_block(restore_config: &str, cluster: &Value) -> String {
    let mut block = String::from(
        "\n# Written by `cnpgi-operator restore`: archiving is off until recovery ends.\n\
         # After promotion: ALTER SYSTEM RESET archive_command (and restore_command,\n\
         # recovery_target_*), or remove these lines.\n\
         archive_command = 'false'\n",
    );
    block.push_str(restore_config);
    if !block.ends_with('\n') {
        block.push('\n');
    }
    block.push_str(&recovery_target_options(cluster));
    block
}

/// Writes the recovery configuration of a restored PGDATA, as CloudNativePG's
/// `instance restore` does after `RestoreJobHooks.Restore`: appends
/// [`recovery_block`] to `PGDATA/<config_file>`, and creates
/// `recovery.signal` and [`CHECK_EMPTY_WAL_ARCHIVE_FILE`] (mode 0600).
///
/// CloudNativePG appends to `custom.conf`, which the `postgresql.conf` it
/// writes includes; a plain PostgreSQL reads `postgresql.auto.conf` last, so
/// that is the usual `config_file` (as `pg_basebackup -R` appends there).
///
/// # Errors
///
/// [`InstanceError::Io`] naming the file that could not be written.
pub fn write_recovery_configuration(
    pgdata: &Path,
    config_file: &str,
    restore_config: &str,
    cluster: &Value,
) -> Result<RecoveryFiles, InstanceError> {
    let files = RecoveryFiles {
        config: pgdata.join(config_file),
        signal: pgdata.join("recovery.signal"),
        check_empty_wal_archive: pgdata.join(CHECK_EMPTY_WAL_ARCHIVE_FILE),
    };
    let io = |what: &str, path: &Path| {
        let what = format!("cannot {what} {}", path.display());
        move |source| InstanceError::Io { what, source }
    };
    let mut config = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(&files.config)
        .map_err(io("open", &files.config))?;
    config
        .write_all(recovery_block(restore_config, cluster).as_bytes())
        .and_then(|()| config.sync_all())
        .map_err(io("append to", &files.config))?;
    for empty in [&files.check_empty_wal_archive, &files.signal] {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(empty)
            .map_err(io("create", empty))?;
    }
    Ok(files)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn backup_names_are_utc_timestamps() {
        assert_eq!(default_backup_name("pg", UNIX_EPOCH), "pg-19700101000000");
        // 2000-02-29T23:59:59Z: a leap day in a century year divisible by 400.
        let leap = UNIX_EPOCH + Duration::from_secs(951_868_799);
        assert_eq!(default_backup_name("x", leap), "x-20000229235959");
        let later = UNIX_EPOCH + Duration::from_secs(4_102_444_800); // 2100-01-01
        assert_eq!(default_backup_name("x", later), "x-21000101000000");
    }

    #[test]
    fn the_backup_object_carries_the_plugin_and_its_parameters() {
        let cluster = json!({"metadata": {"name": "pg"}});
        let parameters = BTreeMap::from([("mode".to_owned(), "full".to_owned())]);
        let backup = backup_object(&cluster, "b", "p.example.com", &parameters);
        assert_eq!(backup["apiVersion"], "postgresql.cnpg.io/v1");
        assert_eq!(backup["spec"]["pluginConfiguration"]["parameters"]["mode"], "full");
        assert!(backup["metadata"].get("namespace").is_none());
    }

    #[test]
    fn results_use_the_protobuf_json_names() {
        let result = BackupResult {
            backup_id: "id".into(),
            started_at: 10,
            backup_label_file: b"label".to_vec(),
            metadata: [("k".to_owned(), "v".to_owned())].into(),
            ..Default::default()
        };
        let json = backup_result_json(&result);
        assert_eq!(json["backupId"], "id");
        assert_eq!(json["startedAt"], 10);
        assert_eq!(json["backupLabelFile"], "bGFiZWw=");
        assert_eq!(json["metadata"]["k"], "v");
    }

    #[test]
    fn recovery_files_are_appended_and_created() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("postgresql.auto.conf"), "port = '5433'\n").unwrap();
        let cluster = json!({"spec": {"bootstrap": {"recovery": {"recoveryTarget": {"targetName": "x"}}}}});
        let files = write_recovery_configuration(
            dir.path(),
            "postgresql.auto.conf",
            "restore_command = 'cp /a/%f %p'",
            &cluster,
        )
        .unwrap();
        let text = std::fs::read_to_string(&files.config).unwrap();
        assert!(text.starts_with("port = '5433'\n"), "{text}");
        assert!(
            text.ends_with(
                "archive_command = 'false'\nrestore_command = 'cp /a/%f %p'\nrecovery_target_name = 'x'\n\
                 recovery_target_inclusive = true\n"
            ),
            "{text}"
        );
        assert!(files.signal.exists() && files.check_empty_wal_archive.exists());
        let missing = write_recovery_configuration(&dir.path().join("nope"), "postgresql.auto.conf", "", &cluster);
        let error = missing.unwrap_err().to_string();
        assert!(error.starts_with("cannot open ") && error.contains("nope"), "{error}");
    }
}
