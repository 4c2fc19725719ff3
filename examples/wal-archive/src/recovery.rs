//! The configuration a recovering PostgreSQL gets from the restore job:
//! `restore_config`, written as CloudNativePG writes it.

use crate::cluster::RecoveryTarget;
use crate::pgtime;

/// Where PGDATA is when `$PGDATA` is not set: CloudNativePG's.
pub const DEFAULT_PGDATA: &str = "/var/lib/postgresql/data/pgdata";
/// CloudNativePG's `restore_command`: its instance manager's `wal-restore`.
pub const DEFAULT_RESTORE_COMMAND: &str =
    "/controller/manager wal-restore --log-destination /controller/log/postgres.json %f %p";
/// The environment variable overriding [`DEFAULT_RESTORE_COMMAND`].
pub const RESTORE_COMMAND_ENV: &str = "WAL_ARCHIVE_RESTORE_COMMAND";

/// `'text'` as a postgresql.conf string.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "''"))
}

/// The recovery target lines, as CloudNativePG's `BuildPostgresOptions`.
pub fn target_options(target: &RecoveryTarget) -> String {
    let mut lines = String::new();
    for (setting, value) in [
        ("recovery_target_timeline", &target.target_tli),
        ("recovery_target_xid", &target.target_xid),
        ("recovery_target_name", &target.target_name),
        ("recovery_target_lsn", &target.target_lsn),
    ] {
        if !value.is_empty() {
            lines.push_str(&format!("{setting} = {}\n", quote(value)));
        }
    }
    if !target.target_time.is_empty() {
        lines.push_str(&format!(
            "recovery_target_time = {}\n",
            quote(&pgtime::to_postgres(&target.target_time))
        ));
    }
    if target.target_immediate == Some(true) {
        lines.push_str("recovery_target = immediate\n");
    }
    let inclusive = if target.exclusive == Some(true) {
        "false"
    } else {
        "true"
    };
    lines.push_str(&format!("recovery_target_inclusive = {inclusive}\n"));
    lines
}

/// The whole `restore_config` answer.
pub fn restore_config(restore_command: &str, target: &RecoveryTarget) -> String {
    format!(
        "recovery_target_action = promote\nrestore_command = {}\n{}",
        quote(restore_command),
        target_options(target)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_config_as_cloudnative_pg_writes_it() {
        let target = RecoveryTarget {
            target_time: "2026-01-02T03:04:05Z".into(),
            ..RecoveryTarget::default()
        };
        assert_eq!(
            restore_config("cli wal-restore %f %p", &target),
            "recovery_target_action = promote\n\
             restore_command = 'cli wal-restore %f %p'\n\
             recovery_target_time = '2026-01-02 03:04:05.000000+00:00'\n\
             recovery_target_inclusive = true\n"
        );
        let target = RecoveryTarget {
            target_tli: "latest".into(),
            target_lsn: "0/3000000".into(),
            target_immediate: Some(true),
            exclusive: Some(true),
            ..RecoveryTarget::default()
        };
        assert_eq!(
            target_options(&target),
            "recovery_target_timeline = 'latest'\nrecovery_target_lsn = '0/3000000'\n\
             recovery_target = immediate\nrecovery_target_inclusive = false\n"
        );
        assert_eq!(quote("it's"), "'it''s'");
    }
}
