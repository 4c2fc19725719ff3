//! `wal-archive` and `wal-restore`: PostgreSQL's `archive_command` and
//! `restore_command` through the plugins.

use std::{path::PathBuf, process::ExitCode};

use clap::Args;
use cnpgi_client::instance::wal::{RestoreWalError, archive_wal, restore_wal};

use super::{InstanceFlags, absolute, deadline};

/// Flags of `cnpgi-operator wal-archive`.
#[derive(Debug, Args)]
pub(crate) struct ArchiveArgs {
    #[command(flatten)]
    pub(crate) instance: InstanceFlags,

    /// Deadline of each plugin call, in seconds (0: none).
    #[arg(long, env = "CNPGI_WAL_TIMEOUT", value_name = "SECONDS", default_value_t = 300)]
    pub(crate) timeout: u64,

    /// The WAL file, as PostgreSQL's `%p` (relative to the working
    /// directory, which is PGDATA when PostgreSQL runs the command).
    #[arg(value_name = "PATH")]
    pub(crate) path: PathBuf,
}

/// Exit 0 once every archiving plugin has the file; 1 when one refused it
/// or none could be asked; 2 on bad input.
pub(crate) async fn archive(args: ArchiveArgs) -> ExitCode {
    let shown = args.path.display().to_string();
    let input = (|| {
        let cluster = args.instance.read_cluster()?;
        let path = absolute(&args.path)?;
        std::fs::metadata(&path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
        anyhow::Ok((cluster, path))
    })();
    let (cluster, path) = match input {
        Ok(input) => input,
        Err(error) => {
            eprintln!("wal-archive {shown}: {error:#}");
            return ExitCode::from(2);
        }
    };
    match archive_wal(&cluster, &path, &args.instance.options(deadline(args.timeout))).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("wal-archive {shown}: {error}");
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
    #[arg(long, env = "CNPGI_WAL_TIMEOUT", value_name = "SECONDS", default_value_t = 300)]
    pub(crate) timeout: u64,

    /// The WAL file to restore, as PostgreSQL's `%f`.
    #[arg(value_name = "NAME")]
    pub(crate) name: String,

    /// Where to write it, as PostgreSQL's `%p` (relative to the working
    /// directory, which is PGDATA when PostgreSQL runs the command).
    #[arg(value_name = "DEST")]
    pub(crate) destination: PathBuf,
}

/// Exit 0 once a plugin restored the file; 1 when none has it (PostgreSQL
/// then carries on: ends recovery or tries streaming) or none could be
/// asked; 2 on bad input.
pub(crate) async fn restore(args: RestoreArgs) -> ExitCode {
    let input = (|| anyhow::Ok((args.instance.read_cluster()?, absolute(&args.destination)?)))();
    let (cluster, destination) = match input {
        Ok(input) => input,
        Err(error) => {
            eprintln!("wal-restore {}: {error:#}", args.name);
            return ExitCode::from(2);
        }
    };
    let options = args.instance.options(deadline(args.timeout));
    match restore_wal(&cluster, &args.name, &destination, &options).await {
        Ok(_) => ExitCode::SUCCESS,
        Err(error @ RestoreWalError::NotRestored { .. }) => {
            eprintln!("wal-restore {error}");
            ExitCode::FAILURE
        }
        Err(RestoreWalError::Instance(error)) => {
            eprintln!("wal-restore {}: {error}", args.name);
            ExitCode::FAILURE
        }
    }
}
