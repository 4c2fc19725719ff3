//! Environment variable names: every flag of `cnpgi-operator` that can come
//! from the environment reads `CNPGI_<FLAG>`. The names of 0.1 (without the
//! prefix, or spelled otherwise) are still read when the new one is unset,
//! and each use is logged as deprecated; they go in 0.3.
//!
//! clap reads one variable per flag, so for a run where only the old name is
//! set, that flag is pointed at the old name before parsing.

use std::sync::{Once, OnceLock};

use clap::{Arg, Command};

/// Current name → the name it had in 0.1. Only names that existed: a
/// variable never read before must not start being read under a short name
/// (`CLUSTER`, say) that something else may have set. A current name may
/// have several old ones; the first set is read.
const DEPRECATED: &[(&str, &str)] = &[
    // run
    ("CNPGI_OPERATOR_NAMESPACE", "OPERATOR_NAMESPACE"),
    ("CNPGI_WATCH_NAMESPACE", "WATCH_NAMESPACE"),
    ("CNPGI_WEBHOOK_ADDRESS", "WEBHOOK_ADDRESS"),
    ("CNPGI_WEBHOOK_CERT_DIR", "WEBHOOK_CERT_DIR"),
    ("CNPGI_WEBHOOK_TIMEOUT_SECONDS", "WEBHOOK_DEADLINE_SECONDS"),
    ("CNPGI_DISABLE_WEBHOOKS", "DISABLE_WEBHOOKS"),
    ("CNPGI_DISABLE_CONTROLLER", "DISABLE_CONTROLLER"),
    ("CNPGI_METRICS_BIND_ADDRESS", "METRICS_BIND_ADDRESS"),
    ("CNPGI_HEALTH_PROBE_BIND_ADDRESS", "HEALTH_PROBE_BIND_ADDRESS"),
    ("CNPGI_KUBERNETES_PLUGINS", "KUBERNETES_PLUGINS"),
    ("CNPGI_DIAL_OVERRIDES", "DIAL_OVERRIDES"),
    ("CNPGI_PROBE_INTERVAL_SECONDS", "PROBE_INTERVAL_SECONDS"),
    ("CNPGI_PLUGIN_TIMEOUT_SECONDS", "PLUGIN_TIMEOUT_SECONDS"),
    (
        "CNPGI_HTTP_HEADER_READ_TIMEOUT_SECONDS",
        "HTTP_HEADER_READ_TIMEOUT_SECONDS",
    ),
    ("CNPGI_HTTP_IDLE_TIMEOUT_SECONDS", "HTTP_IDLE_TIMEOUT_SECONDS"),
    ("CNPGI_HTTP_REQUEST_TIMEOUT_SECONDS", "HTTP_REQUEST_TIMEOUT_SECONDS"),
    ("CNPGI_HTTP_MAX_CONNECTIONS", "HTTP_MAX_CONNECTIONS"),
    ("CNPGI_SHUTDOWN_GRACE_SECONDS", "SHUTDOWN_GRACE_SECONDS"),
    ("CNPGI_LEADER_ELECT", "LEADER_ELECT"),
    ("CNPGI_LEADER_ELECTION_ID", "LEADER_ELECTION_ID"),
    ("CNPGI_LEADER_ELECTION_LEASE_SECONDS", "LEADER_ELECTION_LEASE_SECONDS"),
    (
        "CNPGI_LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
        "LEADER_ELECTION_RENEW_DEADLINE_SECONDS",
    ),
    ("CNPGI_LEADER_ELECTION_RETRY_SECONDS", "LEADER_ELECTION_RETRY_SECONDS"),
    // every command
    ("CNPGI_LOG_FORMAT", "LOG_FORMAT"),
    ("CNPGI_LOG_LEVEL", "LOG_LEVEL"),
    // run, render, check-plugin
    ("CNPGI_PLUGIN_DIR", "PLUGIN_DIR"),
];

/// Old names read only by some commands: (commands, current, old). The WAL
/// commands' deadline was `CNPGI_WAL_TIMEOUT` in 0.1 and
/// `CNPGI_WAL_TIMEOUT_SECONDS` in 0.2; `run` never read either.
const DEPRECATED_IN: &[(&[&str], &str, &str)] = &[
    (
        &["wal-archive", "wal-restore"],
        "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        "CNPGI_WAL_TIMEOUT_SECONDS",
    ),
    (
        &["wal-archive", "wal-restore"],
        "CNPGI_PLUGIN_TIMEOUT_SECONDS",
        "CNPGI_WAL_TIMEOUT",
    ),
];

/// The old names of `current` that `command` reads, in order of preference.
fn old_names<'a>(command: &'a str, current: &'a str) -> impl Iterator<Item = (&'static str, &'static str)> + 'a {
    let everywhere = DEPRECATED.iter().filter(move |(name, _)| *name == current).copied();
    let here = DEPRECATED_IN
        .iter()
        .filter(move |(commands, name, _)| *name == current && commands.contains(&command))
        .map(|&(_, name, old)| (name, old));
    here.chain(everywhere)
}

/// A variable read under its 0.1 name in this run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeprecatedName {
    /// The name that was set.
    pub(crate) old: &'static str,
    /// The name to use instead.
    pub(crate) current: &'static str,
}

static IN_USE: OnceLock<Vec<DeprecatedName>> = OnceLock::new();

/// Points each flag whose `CNPGI_` variable is unset at its 0.1 name when
/// that one is set (`is_set` says whether a variable is set), in `command`
/// and all its subcommands. Returns the command and the old names in use.
pub(crate) fn fall_back_on_deprecated(
    command: Command,
    is_set: &dyn Fn(&str) -> bool,
) -> (Command, Vec<DeprecatedName>) {
    let mut in_use = Vec::new();
    let command = visit(command, is_set, &mut in_use);
    in_use.sort_by_key(|name| name.old);
    in_use.dedup();
    (command, in_use)
}

fn visit(command: Command, is_set: &dyn Fn(&str) -> bool, in_use: &mut Vec<DeprecatedName>) -> Command {
    let name = command.get_name().to_owned();
    let command = command.mut_args(|arg| fall_back(&name, arg, is_set, in_use));
    let mut nested = Vec::new();
    let command = command.mut_subcommands(|sub| visit(sub, is_set, &mut nested));
    in_use.extend(nested);
    command
}

fn fall_back(command: &str, arg: Arg, is_set: &dyn Fn(&str) -> bool, in_use: &mut Vec<DeprecatedName>) -> Arg {
    let Some(current) = arg.get_env().and_then(|name| name.to_str()) else {
        return arg;
    };
    if is_set(current) {
        return arg;
    }
    let Some((current, old)) = old_names(command, current).find(|(_, old)| is_set(old)) else {
        return arg;
    };
    in_use.push(DeprecatedName { old, current });
    arg.env(old)
}

/// Remembers the old names in use, for [`log_deprecated`] once logging is set up.
pub(crate) fn remember(in_use: Vec<DeprecatedName>) {
    let _ = IN_USE.set(in_use);
}

/// Warns once per old name read in this run: through the log subscriber
/// when one is installed, else as a `warning:` line on stderr. Only the
/// first call writes.
pub(crate) fn log_deprecated() {
    static LOGGED: Once = Once::new();
    LOGGED.call_once(|| {
        for name in IN_USE.get().map(Vec::as_slice).unwrap_or_default() {
            let message = format!(
                "environment variable {} is deprecated and will be ignored from 0.3; set {} instead",
                name.old, name.current
            );
            if tracing::dispatcher::has_been_set() {
                tracing::warn!(deprecated = name.old, use_instead = name.current, "{message}");
            } else {
                eprintln!("warning: {message}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(Debug, Subcommand)]
    enum Sub {
        Run {
            #[arg(long, env = "CNPGI_LOG_LEVEL", default_value = "info")]
            log_level: String,
            #[arg(long, env = "CNPGI_WEBHOOK_TIMEOUT_SECONDS", default_value_t = 8)]
            webhook_timeout_seconds: u64,
            #[arg(long, env = "CNPGI_CLUSTER")]
            cluster: Option<String>,
        },
        WalArchive {
            #[arg(long, env = "CNPGI_PLUGIN_TIMEOUT_SECONDS", default_value_t = 300)]
            plugin_timeout_seconds: u64,
        },
    }

    fn parse(set: &[(&str, &str)], args: &[&str]) -> (Sub, Vec<DeprecatedName>) {
        let is_set = |name: &str| set.iter().any(|(n, _)| *n == name);
        let (command, in_use) = fall_back_on_deprecated(Cli::command(), &is_set);
        // clap reads the real environment: give it the variables through a
        // command whose env names point at test-only variables instead.
        let command = command.mut_subcommands(|sub| {
            sub.mut_args(|arg| match arg.get_env().and_then(|n| n.to_str()).map(str::to_owned) {
                Some(name) => match set.iter().find(|(n, _)| *n == name) {
                    Some((_, value)) => arg.default_value(value.to_string()),
                    None => arg,
                },
                None => arg,
            })
        });
        let matches = command.try_get_matches_from(args).unwrap();
        (Cli::from_arg_matches(&matches).unwrap().command, in_use)
    }

    #[test]
    fn the_old_name_is_read_when_only_it_is_set_and_reported() {
        let (
            Sub::Run {
                log_level,
                webhook_timeout_seconds,
                cluster,
            },
            in_use,
        ) = parse(
            &[("LOG_LEVEL", "debug"), ("WEBHOOK_DEADLINE_SECONDS", "3")],
            &["cli", "run"],
        )
        else {
            panic!("not run")
        };
        assert_eq!(log_level, "debug");
        assert_eq!(webhook_timeout_seconds, 3);
        assert_eq!(cluster, None);
        assert_eq!(
            in_use,
            vec![
                DeprecatedName {
                    old: "LOG_LEVEL",
                    current: "CNPGI_LOG_LEVEL"
                },
                DeprecatedName {
                    old: "WEBHOOK_DEADLINE_SECONDS",
                    current: "CNPGI_WEBHOOK_TIMEOUT_SECONDS"
                },
            ]
        );
    }

    #[test]
    fn the_current_name_wins_and_unknown_short_names_are_never_read() {
        let (Sub::Run { log_level, cluster, .. }, in_use) = parse(
            &[("LOG_LEVEL", "debug"), ("CNPGI_LOG_LEVEL", "warn"), ("CLUSTER", "x")],
            &["cli", "run"],
        ) else {
            panic!("not run")
        };
        assert_eq!(log_level, "warn");
        assert_eq!(cluster, None);
        assert!(in_use.is_empty(), "{in_use:?}");
    }

    /// The WAL commands' two older names of their deadline, the newer one
    /// first; `run` reads neither.
    #[test]
    fn the_wal_commands_read_their_own_old_names_of_the_plugin_timeout() {
        let timeout = |set: &[(&str, &str)]| match parse(set, &["cli", "wal-archive"]) {
            (Sub::WalArchive { plugin_timeout_seconds }, in_use) => (plugin_timeout_seconds, in_use),
            (other, _) => panic!("{other:?}"),
        };
        let (seconds, in_use) = timeout(&[("CNPGI_WAL_TIMEOUT", "7")]);
        assert_eq!(seconds, 7);
        assert_eq!(
            in_use,
            vec![DeprecatedName {
                old: "CNPGI_WAL_TIMEOUT",
                current: "CNPGI_PLUGIN_TIMEOUT_SECONDS"
            }]
        );
        assert_eq!(
            timeout(&[("CNPGI_WAL_TIMEOUT", "7"), ("CNPGI_WAL_TIMEOUT_SECONDS", "8")]).0,
            8
        );
        assert_eq!(
            timeout(&[("CNPGI_WAL_TIMEOUT", "7"), ("CNPGI_PLUGIN_TIMEOUT_SECONDS", "9")]).0,
            9
        );
        assert_eq!(timeout(&[]).0, 300);
        let run: Vec<_> = old_names("run", "CNPGI_PLUGIN_TIMEOUT_SECONDS").collect();
        assert_eq!(run, vec![("CNPGI_PLUGIN_TIMEOUT_SECONDS", "PLUGIN_TIMEOUT_SECONDS")]);
    }

    #[test]
    fn every_deprecated_name_maps_to_a_cnpgi_name() {
        let rows = DEPRECATED_IN.iter().map(|(_, current, old)| (current, old));
        for (current, old) in DEPRECATED.iter().map(|(current, old)| (current, old)).chain(rows) {
            assert!(current.starts_with("CNPGI_"), "{current}");
            assert_ne!(current, old);
        }
    }
}
