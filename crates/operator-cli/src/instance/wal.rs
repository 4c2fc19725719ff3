//! `wal-archive` and `wal-restore`: PostgreSQL's `archive_command` and
//! `restore_command` through the plugins.
//!
//! PostgreSQL reads a `restore_command` that exits with a status up to 125
//! as "this file is not in the archive": during a recovery it then ends the
//! recovery where it is and promotes. So `wal-restore` exits 1 only when
//! every plugin answered `NOT_FOUND`; any other failure during a recovery
//! (`recovery.signal` in PGDATA) exits [`EXIT_ABORT_RECOVERY`], above 125,
//! which makes PostgreSQL stop instead: the restore can be run again once the
//! archive is repaired, with nothing lost. In standby mode (`standby.signal`)
//! PostgreSQL promotes nothing on its own and goes on streaming, so a
//! failure of a plugin exits 1 there. A command line, an environment or a
//! Cluster file that cannot be used exits [`EXIT_ABORT_RECOVERY`] in both
//! (it never mends itself; `crate::usage_errors` does the same for the
//! command line's usage errors). Transient failures are retried first
//! ([`RestoreArgs::retries`]).

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    time::Duration,
};

use clap::Args;
use cnpgi_client::instance::{
    archive_ahead::{ArchiveAhead, archive_wal_ahead},
    backup::CHECK_EMPTY_WAL_ARCHIVE_FILE,
    wal::{RestoreWalError, restore_wal, should_check_empty_wal_archive},
};
use cnpgi_proto::wal::v1::wal_restore_request::Mode;

use super::{InstanceFlags, Severity, absolute, deadline};

/// The exit status that makes PostgreSQL abort a recovery instead of ending
/// it (its `restore_command` contract: a status above 125, like a signal,
/// is fatal to the startup process).
pub(crate) const EXIT_ABORT_RECOVERY: u8 = 255;

/// Flags of `cnpgi-operator wal-archive`.
#[derive(Debug, Args)]
pub(crate) struct ArchiveArgs {
    #[command(flatten)]
    pub(crate) instance: InstanceFlags,

    /// Deadline of each plugin call, in seconds (0: none).
    #[arg(
        long = "plugin-timeout-seconds",
        aliases = ["timeout-seconds", "timeout"],
        env = "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = 300
    )]
    pub(crate) timeout: u64,

    /// PostgreSQL's data directory (default: the working directory, which
    /// is PGDATA when PostgreSQL runs the command): where
    /// `.check-empty-wal-archive` is looked for.
    #[arg(long, value_name = "DIR")]
    pub(crate) pgdata: Option<PathBuf>,

    /// How many WAL segments one request archives at once: the one
    /// PostgreSQL asks for and the next ready ones (`pg_wal/archive_status`),
    /// whose own requests are then answered from the spool (1: one at a
    /// time, as PostgreSQL alone does).
    #[arg(
        long,
        env = "CNPGI_WAL_MAX_PARALLEL",
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=256)
    )]
    pub(crate) max_parallel: u16,

    /// Where the markers of segments archived ahead are kept (default:
    /// `cnpgi-wal-spool/<PGDATA's name>` beside PGDATA: on its volume, out
    /// of its base backups).
    #[arg(long, env = "CNPGI_WAL_SPOOL_DIR", value_name = "DIR")]
    pub(crate) spool_dir: Option<PathBuf>,

    /// The WAL file, as PostgreSQL's `%p` (relative to the working
    /// directory, which is PGDATA when PostgreSQL runs the command).
    #[arg(value_name = "PATH")]
    pub(crate) path: PathBuf,
}

/// `--pgdata`, or the working directory.
fn pgdata(flag: Option<&Path>) -> anyhow::Result<PathBuf> {
    match flag {
        Some(dir) => absolute(dir),
        None => Ok(std::env::current_dir()?),
    }
}

/// `cnpgi-wal-spool/<PGDATA's name>` beside PGDATA: on its volume, out of
/// its base backups, and apart from another PGDATA's in the same directory
/// (Debian's `15/main` and `15/other`).
fn default_spool_dir(pgdata: &Path) -> PathBuf {
    let name = pgdata.file_name().unwrap_or_else(|| "pgdata".as_ref());
    pgdata.parent().unwrap_or(pgdata).join("cnpgi-wal-spool").join(name)
}

/// Exit 0 once every archiving plugin has the file; 1 when one refused it,
/// none could be asked or the file cannot be a WAL segment (PostgreSQL
/// keeps it and retries); 2 on bad input.
pub(crate) async fn archive(args: ArchiveArgs) -> ExitCode {
    let shown = args.path.display().to_string();
    let input = (|| {
        let cluster = args.instance.read_cluster(true)?;
        let path = absolute(&args.path)?;
        std::fs::metadata(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        anyhow::Ok((cluster, path, pgdata(args.pgdata.as_deref())?))
    })();
    let (cluster, path, pgdata) = match input {
        Ok(input) => input,
        Err(error) => {
            args.instance
                .report(Severity::Error, &format!("wal-archive {shown}: {error:#}"));
            return ExitCode::from(2);
        }
    };
    let check_empty = should_check_empty_wal_archive(&cluster, &pgdata);
    let ahead = ArchiveAhead {
        max_parallel: usize::from(args.max_parallel),
        spool_dir: match &args.spool_dir {
            Some(dir) => absolute(dir).unwrap_or_else(|_| dir.clone()),
            None => default_spool_dir(&pgdata),
        },
    };
    let report = archive_wal_ahead(
        &cluster,
        &path,
        check_empty,
        &ahead,
        &args.instance.options(deadline(args.timeout)),
    )
    .await;
    for warning in &report.warnings {
        args.instance
            .report(Severity::Warning, &format!("wal-archive {shown}: {warning}"));
    }
    match report.outcome {
        Ok(_) => {
            // As CloudNativePG's instance manager once archiving works (the
            // annotation aside): the archive is now this instance's own.
            let marker = pgdata.join(CHECK_EMPTY_WAL_ARCHIVE_FILE);
            if let Err(error) = std::fs::remove_file(&marker)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                args.instance.report(
                    Severity::Warning,
                    &format!(
                        "wal-archive {shown}: archived, but cannot remove {}: {error}",
                        marker.display()
                    ),
                );
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            args.instance
                .report(Severity::Error, &format!("wal-archive {shown}: {error}"));
            ExitCode::FAILURE
        }
    }
}

/// Flags of `cnpgi-operator wal-restore`.
#[derive(Debug, Args)]
pub(crate) struct RestoreArgs {
    #[command(flatten)]
    pub(crate) instance: InstanceFlags,

    /// Deadline of each plugin call, in seconds (0: none).
    #[arg(
        long = "plugin-timeout-seconds",
        aliases = ["timeout-seconds", "timeout"],
        env = "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        value_name = "SECONDS",
        default_value_t = 300
    )]
    pub(crate) timeout: u64,

    /// How many times a transient failure (a plugin unreachable, busy or out
    /// of time; none reporting damage) is retried, after 1, 2, 4, ... s
    /// (at most 30 s apart), before giving up.
    #[arg(long, env = "CNPGI_WAL_RETRIES", value_name = "N", default_value_t = 3)]
    pub(crate) retries: u32,

    /// PostgreSQL's data directory (default: the working directory, which
    /// is PGDATA when PostgreSQL runs the command): `recovery.signal` and
    /// `standby.signal` there say how a failure must be reported.
    #[arg(long, value_name = "DIR")]
    pub(crate) pgdata: Option<PathBuf>,

    /// The restore is for `pg_rewind` (`MODE_REWIND`), not a recovery.
    #[arg(long)]
    pub(crate) rewind: bool,

    /// The WAL file to restore, as PostgreSQL's `%f`.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,

    /// Where to write it, as PostgreSQL's `%p` (relative to the working
    /// directory, which is PGDATA when PostgreSQL runs the command).
    #[arg(value_name = "DEST")]
    pub(crate) destination: PathBuf,
}

/// What PostgreSQL is doing when it asks for a file, from PGDATA's signal
/// files (`standby.signal` wins, as in PostgreSQL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recovering {
    /// `standby.signal`: a standby, which streams when the archive fails
    /// and promotes only when told to.
    Standby,
    /// `recovery.signal`: an archive recovery, which ends and promotes at
    /// the first file not restored.
    Archive,
    /// Neither: run by hand, or by `pg_rewind`.
    No,
}

impl Recovering {
    pub(crate) fn of(pgdata: &Path) -> Self {
        if pgdata.join("standby.signal").exists() {
            Self::Standby
        } else if pgdata.join("recovery.signal").exists() {
            Self::Archive
        } else {
            Self::No
        }
    }

    /// The exit status of a command line, environment or Cluster file that
    /// cannot be used, and what it does, for the message. In a recovery, or
    /// in standby mode, it stops PostgreSQL: such a mistake never mends
    /// itself, and a standby left without its archive may be promoted later
    /// without the WAL only the archive has.
    pub(crate) fn bad_input(self) -> (u8, &'static str) {
        match self {
            Self::Standby => (
                EXIT_ABORT_RECOVERY,
                "standby stopped rather than left without its archive: correct restore_command, its environment \
                 or the Cluster file, then start PostgreSQL again",
            ),
            Self::Archive => (
                EXIT_ABORT_RECOVERY,
                "recovery aborted, not ended: correct restore_command, its environment or the Cluster file, then \
                 start PostgreSQL again",
            ),
            Self::No => (2, "bad input"),
        }
    }

    /// The exit status of a failure that is not "not in the archive", and
    /// what it does, for the message.
    fn failure(self) -> (u8, &'static str) {
        match self {
            Self::Standby => (
                1,
                "standby mode: PostgreSQL streams or asks again, and promotes nothing",
            ),
            Self::Archive => (
                EXIT_ABORT_RECOVERY,
                "recovery aborted so that it does not end early; repair the archive or the plugin, then start \
                 PostgreSQL again to resume it",
            ),
            Self::No => (
                EXIT_ABORT_RECOVERY,
                "a failure, not an absence (no recovery.signal or standby.signal in PGDATA)",
            ),
        }
    }
}

/// Exit 0 once a plugin restored the file; 1 when none has it (every plugin
/// answered `NOT_FOUND`: PostgreSQL ends recovery or tries streaming);
/// otherwise, after retrying transient failures, 255 (PostgreSQL aborts the
/// recovery) or, in standby mode, 1. Bad input (an unusable Cluster file)
/// exits 255 in a recovery or in standby mode, 2 otherwise.
pub(crate) async fn restore(args: RestoreArgs) -> ExitCode {
    let recovering = match pgdata(args.pgdata.as_deref()) {
        Ok(dir) => Recovering::of(&dir),
        Err(_) => Recovering::No,
    };
    let input = (|| anyhow::Ok((args.instance.read_cluster(false)?, absolute(&args.destination)?)))();
    let (cluster, destination) = match input {
        Ok(input) => input,
        Err(error) => {
            let (code, effect) = recovering.bad_input();
            args.instance.report(
                Severity::Error,
                &format!("wal-restore {}: {error:#} ({effect}; exit {code})", args.name),
            );
            return ExitCode::from(code);
        }
    };
    let options = args.instance.options(deadline(args.timeout));
    let mode = if args.rewind { Mode::Rewind } else { Mode::Recovery };
    let mut attempt = 0u32;
    let error = loop {
        match restore_wal(&cluster, &args.name, &destination, mode, &options).await {
            Ok(_) => return ExitCode::SUCCESS,
            Err(error) if error.is_transient() && attempt < args.retries => {
                let pause = retry_pause(attempt);
                attempt += 1;
                args.instance.report(
                    Severity::Warning,
                    &format!(
                        "{} (attempt {attempt} of {}; retrying in {} s)",
                        describe(&args.name, &error),
                        args.retries + 1,
                        pause.as_secs()
                    ),
                );
                tokio::time::sleep(pause).await;
            }
            Err(error) => break error,
        }
    };
    if error.is_absent() {
        // Absence, not a failure: PostgreSQL asks for files that were never archived.
        args.instance.report(Severity::Info, &describe(&args.name, &error));
        return ExitCode::FAILURE;
    }
    let (code, effect) = recovering.failure();
    let tries = if attempt > 0 {
        format!(" after {} attempts", attempt + 1)
    } else {
        String::new()
    };
    args.instance.report(
        Severity::Error,
        &format!("{}{tries} ({effect}; exit {code})", describe(&args.name, &error)),
    );
    ExitCode::from(code)
}

/// The one line naming the file, each plugin and its answer.
fn describe(name: &str, error: &RestoreWalError) -> String {
    match error {
        // Starts with the file's name.
        RestoreWalError::NotRestored { .. } => format!("wal-restore {error}"),
        RestoreWalError::Instance(_) => format!("wal-restore {name}: {error}"),
    }
}

/// The pause before retry `attempt` (0-based): 1, 2, 4, ... s, at most 30 s.
fn retry_pause(attempt: u32) -> Duration {
    Duration::from_secs(1u64.checked_shl(attempt).unwrap_or(u64::MAX).min(30))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spool_is_beside_pgdata_and_named_after_it() {
        assert_eq!(
            default_spool_dir(Path::new("/var/lib/postgresql/15/main")),
            Path::new("/var/lib/postgresql/15/cnpgi-wal-spool/main")
        );
        assert_eq!(default_spool_dir(Path::new("/")), Path::new("/cnpgi-wal-spool/pgdata"));
    }

    #[test]
    fn retries_back_off_to_30_seconds() {
        let pauses: Vec<u64> = (0..7).map(|a| retry_pause(a).as_secs()).collect();
        assert_eq!(pauses, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(retry_pause(100).as_secs(), 30);
    }

    #[test]
    fn the_signal_files_say_what_postgresql_is_doing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Recovering::of(dir.path()), Recovering::No);
        std::fs::write(dir.path().join("recovery.signal"), "").unwrap();
        assert_eq!(Recovering::of(dir.path()), Recovering::Archive);
        std::fs::write(dir.path().join("standby.signal"), "").unwrap();
        assert_eq!(Recovering::of(dir.path()), Recovering::Standby);
        assert_eq!(Recovering::Standby.failure().0, 1);
        assert!(Recovering::Archive.failure().0 > 125);
        // An unusable command line or Cluster file stops a standby too.
        assert_eq!(Recovering::Standby.bad_input().0, EXIT_ABORT_RECOVERY);
        assert_eq!(Recovering::Archive.bad_input().0, EXIT_ABORT_RECOVERY);
        assert_eq!(Recovering::No.bad_input().0, 2);
    }
}
