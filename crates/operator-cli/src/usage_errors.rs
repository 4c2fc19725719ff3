//! A mistyped `restore_command` must stop a recovery (exit 255), not end it: clap's exit 2 reads as "not archived".
//!
//! The argument vector is parsed here rather than by `get_matches`, whose
//! usage errors exit 2 whatever the command. When it fails:
//!
//! * for `wal-restore`, or a subcommand clap does not know (a misspelt
//!   `wal-restore`), with `recovery.signal` or `standby.signal` in the
//!   working directory (PGDATA, where PostgreSQL runs its `restore_command`)
//!   or in `--pgdata`: one line naming the flag, variable or argument at
//!   fault and what to do, and exit [`EXIT_ABORT_RECOVERY`], so that
//!   PostgreSQL stops instead of ending the recovery early;
//! * `--help` or `--version` with other arguments to `wal-archive` or
//!   `wal-restore` (a command line PostgreSQL runs, not a person asking for
//!   help): nothing was archived or restored, so never exit 0;
//! * otherwise clap's own message and status (2; 0 for `--help` and
//!   `--version`).

use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::{
    Command, FromArgMatches,
    error::{ContextKind, ContextValue, ErrorKind},
};

use crate::instance::wal::{EXIT_ABORT_RECOVERY, Recovering};

/// The subcommand PostgreSQL runs as its `restore_command`.
const RESTORE: &str = "wal-restore";
/// The subcommand PostgreSQL runs as its `archive_command`.
const ARCHIVE: &str = "wal-archive";

/// How a command line that does not parse is refused.
#[derive(Debug)]
enum Refusal {
    /// clap's own message and exit status.
    Clap(clap::Error),
    /// One line on stderr, and this exit status.
    Line(String, u8),
}

/// Parses `args` (the program's name first) with `command` into `T`;
/// `Err` holds the exit status once the error is written.
pub(crate) fn parse<T: FromArgMatches>(command: Command, args: &[OsString]) -> Result<T, ExitCode> {
    match try_parse(command, args, std::env::current_dir().ok().as_deref()) {
        Ok(parsed) => Ok(parsed),
        Err(Refusal::Clap(error)) => {
            // Help and version go to stdout; a closed stdout is no reason to panic.
            let _ = error.print();
            Err(ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2)))
        }
        Err(Refusal::Line(line, code)) => {
            eprintln!("{line}");
            Err(ExitCode::from(code))
        }
    }
}

/// [`parse`] without writing anything, `cwd` being the working directory.
fn try_parse<T: FromArgMatches>(mut command: Command, args: &[OsString], cwd: Option<&Path>) -> Result<T, Refusal> {
    let error = match command
        .try_get_matches_from_mut(args)
        .and_then(|matches| T::from_arg_matches(&matches))
    {
        Ok(parsed) => return Ok(parsed),
        Err(error) => error,
    };
    let words: Vec<&str> = args.iter().skip(1).filter_map(|arg| arg.to_str()).collect();
    // The first word that is not a flag (the top level has no flag taking a value).
    let subcommand = words.iter().copied().find(|word| !word.starts_with('-'));
    let recovery = recovery(args, cwd);
    if matches!(error.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let Some(sub @ (RESTORE | ARCHIVE)) = subcommand else {
            return Err(Refusal::Clap(error));
        };
        let others = words
            .iter()
            .filter(|word| **word != sub && !matches!(**word, "-h" | "--help" | "-V" | "--version"))
            .count();
        if others == 0 {
            return Err(Refusal::Clap(error));
        }
        let (code, effect) = match recovery {
            Some(recovery) if sub == RESTORE => (EXIT_ABORT_RECOVERY, effect(&recovery)),
            _ => (2, String::new()),
        };
        let setting = if sub == RESTORE {
            "restore_command"
        } else {
            "archive_command"
        };
        return Err(Refusal::Line(
            format!(
                "{sub}: --help or --version given with other arguments, so nothing was {}: remove it from \
                 {setting} (run `cnpgi-operator {sub} --help` alone for the help){effect}",
                if sub == RESTORE { "restored" } else { "archived" },
            ),
            code,
        ));
    }
    // A misspelt or missing subcommand may be a misspelt `wal-restore`.
    let restore_like = subcommand == Some(RESTORE)
        || matches!(
            error.kind(),
            ErrorKind::InvalidSubcommand
                | ErrorKind::MissingSubcommand
                | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
        );
    match recovery {
        Some(recovery) if restore_like => Err(Refusal::Line(
            format!(
                "{RESTORE}: {}{}",
                what_is_wrong(&error, command.find_subcommand(RESTORE), &words),
                effect(&recovery)
            ),
            EXIT_ABORT_RECOVERY,
        )),
        _ => Err(Refusal::Clap(error)),
    }
}

/// The signal file that makes this run part of a recovery: in the working
/// directory, or in the directory `--pgdata` names.
fn recovery(args: &[OsString], cwd: Option<&Path>) -> Option<(Recovering, PathBuf)> {
    let pgdata = args.iter().enumerate().find_map(|(at, arg)| {
        let arg = arg.to_str()?;
        match arg.strip_prefix("--pgdata=") {
            Some(value) => Some(PathBuf::from(value)),
            None if arg == "--pgdata" => args.get(at + 1).map(PathBuf::from),
            None => None,
        }
    });
    let pgdata = pgdata.map(|dir| cwd.map_or_else(|| dir.clone(), |cwd| cwd.join(&dir)));
    cwd.map(Path::to_path_buf)
        .into_iter()
        .chain(pgdata)
        .map(|dir| (Recovering::of(&dir), dir))
        .find(|(recovering, _)| *recovering != Recovering::No)
}

/// The end of the line: the signal file, what the exit does and what to do.
fn effect((recovering, dir): &(Recovering, PathBuf)) -> String {
    let signal = if *recovering == Recovering::Standby {
        "standby.signal"
    } else {
        "recovery.signal"
    };
    let (code, effect) = recovering.bad_input();
    format!(" ({signal} in {}: {effect}; exit {code})", dir.display())
}

/// What is wrong with the command line, naming the flag, the environment
/// variable or the argument, and what to do.
fn what_is_wrong(error: &clap::Error, restore: Option<&Command>, words: &[&str]) -> String {
    const FLAGS: &str = "`cnpgi-operator wal-restore --help` lists the flags";
    let rendered = error.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    let first = first.strip_prefix("error: ").unwrap_or(first);
    match (error.kind(), error.get(ContextKind::InvalidArg)) {
        (ErrorKind::MissingRequiredArgument, Some(ContextValue::Strings(missing))) => {
            let (positional, flags): (Vec<&String>, Vec<&String>) =
                missing.iter().partition(|arg| arg.starts_with('<'));
            let mut parts: Vec<String> = flags
                .iter()
                .map(|flag| match env_of(restore, flag) {
                    Some(env) => format!(
                        "no {flag} and no {env} in the environment: set {env} in PostgreSQL's environment or pass \
                         {flag} in restore_command"
                    ),
                    None => format!("no {flag}: pass it in restore_command"),
                })
                .collect();
            if !positional.is_empty() {
                let names: Vec<&str> = positional.iter().map(|name| name.as_str()).collect();
                parts.push(format!(
                    "no {}: restore_command must end with %f %p (`cnpgi-operator wal-restore %f %p`)",
                    names.join(" ")
                ));
            }
            parts.join("; ")
        }
        (ErrorKind::InvalidSubcommand | ErrorKind::MissingSubcommand, _)
        | (ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand, _) => format!(
            "{}: restore_command must run `cnpgi-operator wal-restore %f %p`",
            if error.kind() == ErrorKind::InvalidSubcommand {
                first
            } else {
                "no subcommand"
            }
        ),
        (ErrorKind::UnknownArgument, _) => match error.get(ContextKind::SuggestedArg) {
            Some(ContextValue::String(similar)) => {
                format!("{first} (did you mean '{similar}'?; {FLAGS})")
            }
            _ => format!("{first} ({FLAGS})"),
        },
        (_, Some(ContextValue::String(flag))) => {
            let given = flag
                .split_whitespace()
                .next()
                .is_some_and(|long| words.iter().any(|word| word.split('=').next() == Some(long)));
            match env_of(restore, flag).filter(|_| !given) {
                Some(env) if std::env::var_os(&env).is_some_and(|value| value.is_empty()) => {
                    format!("{first}: {env} is set but empty; set it in PostgreSQL's environment, or pass {flag}")
                }
                Some(env) if std::env::var_os(&env).is_some() => {
                    format!("{first} (the value of {env}): correct {env} in PostgreSQL's environment")
                }
                _ => format!("{first} ({FLAGS})"),
            }
        }
        _ => format!("{first} ({FLAGS})"),
    }
}

/// The environment variable of `shown` (clap's `--flag <VALUE>`) in `command`.
fn env_of(command: Option<&Command>, shown: &str) -> Option<String> {
    let long = shown.split_whitespace().next()?.strip_prefix("--")?;
    let arg = command?.get_arguments().find(|arg| arg.get_long() == Some(long))?;
    arg.get_env().map(|env| env.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::Cli;

    /// The outcome of `args` (after the program) in `cwd`: `Ok(())`, or the
    /// exit status and the line written (clap's message for clap's own).
    fn outcome(args: &[&str], cwd: &Path) -> Result<(), (u8, String)> {
        let argv: Vec<OsString> = std::iter::once("cnpgi-operator")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        match try_parse::<Cli>(Cli::command(), &argv, Some(cwd)) {
            Ok(_) => Ok(()),
            Err(Refusal::Clap(error)) => Err((u8::try_from(error.exit_code()).unwrap(), error.render().to_string())),
            Err(Refusal::Line(line, code)) => Err((code, line)),
        }
    }

    fn dirs() -> (tempfile::TempDir, tempfile::TempDir) {
        let (plain, recovering) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        std::fs::write(recovering.path().join("recovery.signal"), "").unwrap();
        (plain, recovering)
    }

    #[test]
    fn usage_errors_of_wal_restore_abort_a_recovery_and_keep_2_outside() {
        let (plain, recovering) = dirs();
        for (args, names) in [
            (&["wal-restore"][..], "no <NAME> <DEST>"),
            (
                &["wal-restore", "--cluster", "c.yaml", "000000010000000000000001"],
                "no <DEST>",
            ),
            (
                &["wal-restore", "--clutser", "c.yaml", "000000010000000000000001", "p"],
                "unexpected argument '--clutser' found (did you mean '--cluster'?; `cnpgi-operator wal-restore --help` lists",
            ),
            (
                &["wal-restore", "--plugin-timeout-seconds", "soon", "F", "P"],
                "invalid value 'soon'",
            ),
            (&["wal-restor", "F", "P"], "unrecognized subcommand 'wal-restor'"),
            (&[], "no subcommand"),
        ] {
            let (code, line) = outcome(args, recovering.path()).unwrap_err();
            assert_eq!(code, EXIT_ABORT_RECOVERY, "{args:?}: {line}");
            assert!(
                line.starts_with("wal-restore: ") && line.contains(names),
                "{args:?}: {line}"
            );
            assert!(
                line.ends_with(&format!(
                    "(recovery.signal in {}: recovery aborted, not ended: correct restore_command, its environment \
                     or the Cluster file, then start PostgreSQL again; exit 255)",
                    recovering.path().display()
                )),
                "{args:?}: {line}"
            );
            assert_eq!(line.lines().count(), 1, "{line}");
            let (code, message) = outcome(args, plain.path()).unwrap_err();
            assert_eq!(code, 2, "{args:?}: {message}");
            // clap's own (with no subcommand at all, its help).
            assert!(message.starts_with("error: ") || args.is_empty(), "{message}");
        }
        // With --cluster but not NAME: NAME and DEST.
        let (_, line) = outcome(&["wal-restore", "--cluster=c.yaml"], recovering.path()).unwrap_err();
        assert!(
            line.contains("no <NAME> <DEST>: restore_command must end with %f %p"),
            "{line}"
        );
    }

    #[test]
    fn standby_signal_and_pgdata_count_as_a_recovery() {
        let (plain, recovering) = dirs();
        let (code, line) = outcome(
            &[
                "wal-restore",
                "--pgdata",
                recovering.path().to_str().unwrap(),
                "--nope",
                "F",
                "P",
            ],
            plain.path(),
        )
        .unwrap_err();
        assert_eq!(code, EXIT_ABORT_RECOVERY, "{line}");
        std::fs::write(plain.path().join("standby.signal"), "").unwrap();
        let (code, line) = outcome(&["wal-restore", "--nope", "F", "P"], plain.path()).unwrap_err();
        assert_eq!(code, EXIT_ABORT_RECOVERY, "{line}");
        assert!(
            line.contains("(standby.signal in") && line.contains("standby stopped"),
            "{line}"
        );
    }

    #[test]
    fn other_commands_keep_clap_and_help_keeps_0_alone() {
        let (_, recovering) = dirs();
        let dir = recovering.path();
        // Other subcommands, even in a recovering PGDATA: clap's exit 2.
        assert_eq!(outcome(&["wal-archive"], dir).unwrap_err().0, 2);
        assert_eq!(outcome(&["render", "--nope"], dir).unwrap_err().0, 2);
        // Help and version alone: 0, in a recovery too.
        for args in [
            &["--help"][..],
            &["--version"],
            &["wal-restore", "--help"],
            &["wal-archive", "-h"],
            &["help", "wal-restore"],
        ] {
            assert_eq!(outcome(args, dir).unwrap_err().0, 0, "{args:?}");
        }
        // With a file to archive or restore, never 0.
        let (code, line) = outcome(&["wal-archive", "--help", "pg_wal/X"], dir).unwrap_err();
        assert_eq!(code, 2);
        assert!(
            line.starts_with("wal-archive: --help or --version given with other arguments, so nothing was archived"),
            "{line}"
        );
        let (code, line) = outcome(&["wal-restore", "F", "--help", "P"], dir).unwrap_err();
        assert_eq!(code, EXIT_ABORT_RECOVERY, "{line}");
        assert!(
            line.contains("nothing was restored") && line.ends_with("exit 255)"),
            "{line}"
        );
        let plain = tempfile::tempdir().unwrap();
        assert_eq!(
            outcome(&["wal-restore", "F", "--help", "P"], plain.path())
                .unwrap_err()
                .0,
            2
        );
        // A command line that parses is not refused.
        assert!(outcome(&["wal-restore", "--cluster", "c.yaml", "F", "P"], dir).is_ok());
    }
}
