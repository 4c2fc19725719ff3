//! CloudNativePG's instance-manager commands in the configuration a plugin
//! hands back, mapped to `cnpgi-operator`'s.
//!
//! Plugins written for CloudNativePG's Pods answer `RestoreJobHooks.Restore`
//! with a `restore_config` whose `restore_command` calls the instance
//! manager, `/controller/manager wal-restore --log-destination … %f %p`
//! (plugin-barman-cloud does exactly this): in those Pods that path is
//! CloudNativePG's own binary. On a host it does not exist, and PostgreSQL
//! would fail every restore with "command not found". [`map_instance_manager`]
//! rewrites such a setting into the same command of `cnpgi-operator`, with
//! the Cluster file and plugin directory of the restore, so the recovering
//! PostgreSQL asks the same plugins:
//!
//! | CloudNativePG | here |
//! |---|---|
//! | `/controller/manager wal-restore [flags] %f %p` | `<cnpgi-operator> wal-restore --cluster <file> --plugin-dir <dir> [--rewind] [--pgdata D] %f %p` |
//! | `/controller/manager wal-archive [flags] %p` | `<cnpgi-operator> wal-archive --cluster <file> --plugin-dir <dir> [--pgdata D] %p` |
//!
//! Of the instance manager's flags, `--rewind` and `--pg-data` keep their
//! meaning; the logging flags (`--log-destination`, `--log-level`,
//! `--log-field-level`, `--log-field-timestamp`) and `--pod-name` (there is
//! no Pod) are dropped. Any other flag, subcommand or shell syntax is
//! refused rather than guessed at.
//!
//! ```
//! use cnpgi_client::instance::commands::{InstanceCli, map_instance_manager};
//!
//! let cli = InstanceCli { program: "/usr/bin/cnpgi-operator".into(), cluster: "/etc/c.yaml".into(),
//!     plugin_dir: "/plugins".into() };
//! let config = "recovery_target_action = promote\n\
//!     restore_command = '/controller/manager wal-restore --log-destination /controller/log/postgres.json %f %p'\n";
//! let mapped = map_instance_manager(config, &cli)?;
//! assert_eq!(mapped.config, "recovery_target_action = promote\n\
//!     restore_command = '/usr/bin/cnpgi-operator wal-restore --cluster /etc/c.yaml --plugin-dir /plugins %f %p'\n");
//! assert_eq!(mapped.settings, ["restore_command"]);
//! # Ok::<(), cnpgi_client::instance::commands::MappingError>(())
//! ```

use cnpgi_core::postgres::quote;

/// The program CloudNativePG's Pods run as their instance manager.
pub const INSTANCE_MANAGER: &str = "/controller/manager";

/// The settings whose commands are mapped.
const COMMAND_SETTINGS: [&str; 2] = ["restore_command", "archive_command"];

/// How `cnpgi-operator`'s instance commands are run on this host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceCli {
    /// The `cnpgi-operator` executable (an absolute path).
    pub program: String,
    /// The Cluster file (an absolute path).
    pub cluster: String,
    /// The plugin socket directory (an absolute path).
    pub plugin_dir: String,
}

/// A configuration with its instance-manager commands mapped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapped {
    /// The configuration, each mapped setting rewritten in place.
    pub config: String,
    /// The settings rewritten, in order (e.g. `restore_command`).
    pub settings: Vec<String>,
}

/// Why a setting calling the instance manager cannot be mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{setting} calls CloudNativePG's instance manager ({command:?}), which does not exist here, and {reason}")]
pub struct MappingError {
    /// The setting, e.g. `restore_command`.
    pub setting: String,
    /// Its command, as the plugin wrote it.
    pub command: String,
    /// Why it cannot be mapped.
    pub reason: String,
}

/// Rewrites every `restore_command` and `archive_command` line of `config`
/// (PostgreSQL configuration text) that calls [`INSTANCE_MANAGER`]'s
/// `wal-restore` or `wal-archive` into `cli`'s; other lines are kept as
/// they are.
///
/// # Errors
///
/// [`MappingError`] when such a line calls another subcommand, has a flag
/// with no equivalent, or is not a plain command (quotes aside, no shell
/// syntax): PostgreSQL would otherwise fail on it during recovery.
pub fn map_instance_manager(config: &str, cli: &InstanceCli) -> Result<Mapped, MappingError> {
    let mut out = String::with_capacity(config.len() + 128);
    let mut settings = Vec::new();
    for line in config.split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        match command_setting(body) {
            Some((setting, command)) if calls_instance_manager(&command) => {
                let mapped = map_command(&command, cli).map_err(|reason| MappingError {
                    setting: setting.to_owned(),
                    command: command.clone(),
                    reason,
                })?;
                out.push_str(setting);
                out.push_str(" = ");
                out.push_str(&quote(&mapped));
                out.push_str(&line[body.len()..]);
                settings.push(setting.to_owned());
            }
            _ => out.push_str(line),
        }
    }
    Ok(Mapped { config: out, settings })
}

/// `(setting, value)` of a `restore_command` / `archive_command` line with
/// a quoted value (`name = '…'` or `name '…'`), the value unescaped.
fn command_setting(line: &str) -> Option<(&'static str, String)> {
    let trimmed = line.trim_start();
    let setting = COMMAND_SETTINGS
        .into_iter()
        .find(|s| trimmed.starts_with(s) && trimmed[s.len()..].starts_with(|c: char| c == '=' || c.is_whitespace()))?;
    let rest = trimmed[setting.len()..].trim_start();
    let rest = rest.strip_prefix('=').unwrap_or(rest).trim_start();
    let quoted = rest.strip_prefix('\'')?;
    let mut value = String::new();
    let mut chars = quoted.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' if chars.peek() == Some(&'\'') => {
                chars.next();
                value.push('\'');
            }
            '\'' => return Some((setting, value)),
            '\\' => match chars.next()? {
                'n' => value.push('\n'),
                'r' => value.push('\r'),
                't' => value.push('\t'),
                other => value.push(other),
            },
            c => value.push(c),
        }
    }
    None
}

/// Whether `command`'s program is the instance manager.
fn calls_instance_manager(command: &str) -> bool {
    let trimmed = command.trim_start();
    let trimmed = trimmed.strip_prefix("exec ").map_or(trimmed, str::trim_start);
    trimmed
        .strip_prefix(INSTANCE_MANAGER)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(char::is_whitespace))
}

/// The words of a plain command: split on blanks, `'…'` and `"…"` quoting
/// removed; anything a shell would expand or redirect is refused.
fn words(command: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' | '"' => {
                let current = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some(end) if end == c => break,
                        Some('$' | '`' | '\\') if c == '"' => {
                            return Err("it uses shell expansions inside double quotes".to_owned());
                        }
                        Some(other) => current.push(other),
                        None => return Err("it has an unterminated quote".to_owned()),
                    }
                }
            }
            '$' | '`' | '\\' | ';' | '|' | '&' | '<' | '>' | '(' | ')' | '*' | '?' | '[' | '#' | '~' | '{' => {
                return Err(format!("it uses shell syntax ({c:?}), which cannot be mapped safely"));
            }
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Ok(words)
}

/// A word quoted for `sh` when it needs to be.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"%+,-./:=@_".contains(&b));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `command` (calling the instance manager) as `cli`'s command.
fn map_command(command: &str, cli: &InstanceCli) -> Result<String, String> {
    let words = words(command)?;
    let mut words = words.iter().map(String::as_str).skip_while(|w| *w == "exec").skip(1);
    let subcommand = match words.next() {
        Some(sub @ ("wal-restore" | "wal-archive")) => sub,
        Some(other) => {
            return Err(format!(
                "its subcommand {other:?} has no equivalent (only wal-restore and wal-archive do)"
            ));
        }
        None => return Err("it names no subcommand".to_owned()),
    };
    let mut flags: Vec<String> = Vec::new();
    let mut positional: Vec<String> = Vec::new();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) if word.starts_with("--") => (flag, Some(value.to_owned())),
            _ => (word, None),
        };
        let mut value = || -> Result<String, String> {
            match inline.clone() {
                Some(value) => Ok(value),
                None => words
                    .next()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("its flag {flag} has no value")),
            }
        };
        match flag {
            "--log-destination" | "--log-level" | "--pod-name" => {
                value()?;
            }
            "--log-field-level" | "--log-field-timestamp" => {
                // Booleans in cobra: `--flag` or `--flag=value`.
            }
            "--pg-data" => {
                flags.push("--pgdata".to_owned());
                flags.push(shell_word(&value()?));
            }
            "--rewind" if subcommand == "wal-restore" => {
                if inline.as_deref().is_none_or(|v| v == "true") {
                    flags.push("--rewind".to_owned());
                }
            }
            flag if flag.starts_with('-') => return Err(format!("its flag {flag} has no equivalent")),
            word => positional.push(shell_word(word)),
        }
    }
    let expected = if subcommand == "wal-restore" { 2 } else { 1 };
    if positional.len() != expected {
        return Err(format!(
            "{subcommand} takes {expected} argument(s) (PostgreSQL's {}), not {}",
            if expected == 2 { "%f and %p" } else { "%p" },
            positional.len()
        ));
    }
    let mut mapped = vec![
        shell_word(&cli.program),
        subcommand.to_owned(),
        "--cluster".to_owned(),
        shell_word(&cli.cluster),
        "--plugin-dir".to_owned(),
        shell_word(&cli.plugin_dir),
    ];
    mapped.extend(flags);
    mapped.extend(positional);
    Ok(mapped.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cli() -> InstanceCli {
        InstanceCli {
            program: "/opt/cnpgi/bin/cnpgi-operator".to_owned(),
            cluster: "/etc/cnpgi/it's.yaml".to_owned(),
            plugin_dir: "/run/plugins".to_owned(),
        }
    }

    #[test]
    fn barman_clouds_restore_config_is_mapped_with_the_paths_quoted() {
        let config = "recovery_target_action = promote\n\
                      restore_command = '/controller/manager wal-restore --log-destination /controller/log/postgres.json %f %p'\n";
        let mapped = map_instance_manager(config, &cli()).unwrap();
        assert_eq!(
            mapped.config,
            "recovery_target_action = promote\nrestore_command = '/opt/cnpgi/bin/cnpgi-operator wal-restore \
             --cluster ''/etc/cnpgi/it''\\\\''''s.yaml'' --plugin-dir /run/plugins %f %p'\n"
        );
        // What PostgreSQL reads back is the command sh runs.
        let (_, command) = command_setting(mapped.config.lines().nth(1).unwrap()).unwrap();
        assert_eq!(
            command,
            "/opt/cnpgi/bin/cnpgi-operator wal-restore --cluster '/etc/cnpgi/it'\\''s.yaml' --plugin-dir /run/plugins %f %p"
        );
    }

    #[test]
    fn shell_words_reach_the_program_unchanged() {
        for word in ["it's", "a b", "$HOME", "`x`", "*", "plain/path-1.yaml", ""] {
            let output = std::process::Command::new("sh")
                .arg("-c")
                .arg(format!("printf '%s' {}", shell_word(word)))
                .output()
                .unwrap();
            assert_eq!(String::from_utf8(output.stdout).unwrap(), word);
        }
    }

    #[test]
    fn archive_commands_flags_and_exec_are_mapped() {
        let config = "archive_command='exec /controller/manager wal-archive --pod-name=pg-1 --pg-data \"/var/lib/pg data\" \
                      --log-field-level %p'   \n\
                      restore_command '/controller/manager wal-restore --rewind %f %p'";
        let mapped = map_instance_manager(config, &cli()).unwrap();
        let lines: Vec<&str> = mapped.config.lines().collect();
        assert_eq!(
            lines[0],
            "archive_command = '/opt/cnpgi/bin/cnpgi-operator wal-archive --cluster ''/etc/cnpgi/it''\\\\''''s.yaml'' \
             --plugin-dir /run/plugins --pgdata ''/var/lib/pg data'' %p'"
        );
        assert!(
            lines[1].ends_with("--plugin-dir /run/plugins --rewind %f %p'"),
            "{}",
            lines[1]
        );
        assert_eq!(mapped.settings, ["archive_command", "restore_command"]);
    }

    #[test]
    fn other_lines_and_commands_are_kept_byte_for_byte() {
        let config = "# restore_command = '/controller/manager wal-restore %f %p'\r\n\
                      restore_command = 'cp /archive/%f %p'\r\nrecovery_target_timeline = 'latest'";
        let mapped = map_instance_manager(config, &cli()).unwrap();
        assert_eq!(mapped.config, config);
        assert!(mapped.settings.is_empty());
        let manager_like = "restore_command = '/controller/manager2 wal-restore %f %p'\n";
        assert_eq!(map_instance_manager(manager_like, &cli()).unwrap().config, manager_like);
    }

    #[test]
    fn what_cannot_be_mapped_is_refused_with_the_reason() {
        for (config, reason) in [
            (
                "restore_command = '/controller/manager backup %f %p'",
                "its subcommand \"backup\" has no equivalent",
            ),
            (
                "restore_command = '/controller/manager wal-restore --cache-dir /x %f %p'",
                "its flag --cache-dir has no equivalent",
            ),
            (
                "restore_command = '/controller/manager wal-restore %f %p || true'",
                "it uses shell syntax ('|')",
            ),
            (
                "restore_command = '/controller/manager wal-restore %f'",
                "wal-restore takes 2 argument(s) (PostgreSQL's %f and %p), not 1",
            ),
            (
                "restore_command = '/controller/manager wal-restore --log-level'",
                "has no value",
            ),
        ] {
            let error = map_instance_manager(config, &cli()).unwrap_err();
            assert!(error.to_string().contains(reason), "{config}: {error}");
            assert_eq!(error.setting, "restore_command");
        }
    }
}
