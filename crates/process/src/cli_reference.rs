//! A command line's reference page in Markdown, generated from its clap
//! definition: every subcommand, and for each flag its environment variable,
//! default and help. The book's reference pages are this output, checked
//! against the definitions by a test of each binary, so they cannot drift.
//!
//! Not `clap-markdown`: it prints no environment variables, and every flag
//! of these binaries is also read from one.
//!
//! ```
//! let command = clap::Command::new("tool")
//!     .about("Does one thing")
//!     .arg(clap::Arg::new("level").long("level").env("TOOL_LEVEL").default_value("info").help("How much to say"));
//! let page = cnpgi_process::cli_reference::markdown(&command, "The tool");
//! assert!(page.contains("| `--level <level>` | `TOOL_LEVEL` | `info` | How much to say |"));
//! ```

use std::fmt::Write as _;

use clap::{Arg, ArgAction, Command};

/// The reference page of `command` and all its subcommands, under the
/// title `title`.
pub fn markdown(command: &Command, title: &str) -> String {
    let mut page = format!("# {title}\n\n");
    page.push_str(
        "<!-- Generated from the clap definitions; do not edit. `CNPGI_UPDATE_REFERENCE=1 cargo test` \
         rewrites it after a change of flags. -->\n",
    );
    let mut command = command.clone();
    command.build();
    section(&mut page, &command, command.get_name(), 2);
    page
}

fn section(page: &mut String, command: &Command, path: &str, level: usize) {
    if !page.ends_with("\n\n") {
        page.push('\n');
    }
    let _ = write!(page, "{} `{path}`\n\n", "#".repeat(level.min(6)));
    if let Some(about) = command.get_long_about().or(command.get_about()) {
        let _ = writeln!(page, "{}\n", about.to_string().trim());
    }
    let mut usage = command.clone();
    let usage = usage.render_usage().to_string();
    let usage = usage.trim().trim_start_matches("Usage:").trim();
    let _ = writeln!(page, "```text\n{usage}\n```\n");

    let args: Vec<&Arg> = command
        .get_arguments()
        .filter(|arg| !arg.is_hide_set() && !matches!(arg.get_id().as_str(), "help" | "version"))
        .collect();
    if !args.is_empty() {
        page.push_str("| Flag | Environment | Default | Description |\n|---|---|---|---|\n");
        for arg in args {
            let _ = writeln!(
                page,
                "| {} | {} | {} | {} |",
                flag(arg),
                arg.get_env()
                    .map(|name| format!("`{}`", name.to_string_lossy()))
                    .unwrap_or_default(),
                default(arg),
                cell(&description(arg)),
            );
        }
        page.push('\n');
    }
    for sub in command
        .get_subcommands()
        .filter(|sub| !sub.is_hide_set() && sub.get_name() != "help")
    {
        section(page, sub, &format!("{path} {}", sub.get_name()), level + 1);
    }
}

/// `--name <VALUE>`, `-s, --name`, or `<POSITIONAL>`.
fn flag(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .and_then(|names| names.first())
        .map(ToString::to_string)
        .unwrap_or_else(|| arg.get_id().to_string());
    let takes_value = matches!(arg.get_action(), ArgAction::Set | ArgAction::Append);
    let mut shown = match (arg.get_short(), arg.get_long()) {
        (Some(short), Some(long)) => format!("-{short}, --{long}"),
        (None, Some(long)) => format!("--{long}"),
        (Some(short), None) => format!("-{short}"),
        (None, None) => return format!("`<{value}>`"),
    };
    if takes_value {
        shown.push_str(&format!(" <{value}>"));
    }
    format!("`{shown}`")
}

fn default(arg: &Arg) -> String {
    let values: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if values.is_empty() || !matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        String::new()
    } else {
        format!("`{}`", values.join(","))
    }
}

/// The flag's long help, then its possible values, and `(repeatable)`.
fn description(arg: &Arg) -> String {
    let text = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|help| help.to_string())
        .unwrap_or_default();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let mut text = text.trim().to_owned();
    let repeatable = matches!(arg.get_action(), ArgAction::Append) && !text.to_lowercase().contains("repeatable");
    if !values.is_empty() && matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        add_sentence(&mut text, &format!("One of {}.", values.join(", ")));
    }
    if repeatable {
        add_sentence(&mut text, "Repeatable.");
    }
    text
}

/// `text`, ended with a full stop, then `sentence`.
fn add_sentence(text: &mut String, sentence: &str) {
    if !text.is_empty() {
        if !text.ends_with('.') {
            text.push('.');
        }
        text.push(' ');
    }
    text.push_str(sentence);
}

/// Text for a table cell: one line, no unescaped `|`.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// Compares `page` with the file at `path`; rewrites the file instead when
/// `CNPGI_UPDATE_REFERENCE` is set. The `Err` says what to run.
pub fn check_or_update(page: &str, path: &std::path::Path) -> Result<(), String> {
    if std::env::var_os("CNPGI_UPDATE_REFERENCE").is_some() {
        return std::fs::write(path, page).map_err(|e| format!("cannot write {}: {e}", path.display()));
    }
    let written = std::fs::read_to_string(path).unwrap_or_default();
    if written == page {
        Ok(())
    } else {
        Err(format!(
            "{} is not what the clap definitions generate: the flags changed. Run the same test with \
             CNPGI_UPDATE_REFERENCE=1 to rewrite it, and commit the result.",
            path.display()
        ))
    }
}

#[cfg(test)]
mod tests {
    use clap::{Arg, ArgAction, Command};

    use super::markdown;

    #[test]
    fn every_visible_flag_subcommand_env_and_default_is_listed() {
        let command = Command::new("tool")
            .about("Does things")
            .subcommand(
                Command::new("run")
                    .about("Runs")
                    .arg(
                        Arg::new("timeout")
                            .long("timeout-seconds")
                            .env("TOOL_TIMEOUT_SECONDS")
                            .value_name("SECONDS")
                            .default_value("30")
                            .help("Deadline | of each call"),
                    )
                    .arg(
                        Arg::new("format")
                            .long("format")
                            .value_parser(["text", "json"])
                            .help("Output"),
                    )
                    .arg(
                        Arg::new("quiet")
                            .long("quiet")
                            .action(ArgAction::SetTrue)
                            .help("Say nothing"),
                    )
                    .arg(Arg::new("old").long("old").hide(true))
                    .arg(Arg::new("FILE").required(true).help("The input")),
            )
            .subcommand(Command::new("secret").hide(true));
        let page = markdown(&command, "tool");
        assert!(page.starts_with("# tool\n"), "{page}");
        assert!(page.contains("## `tool`"), "{page}");
        assert!(page.contains("### `tool run`\n\nRuns\n"), "{page}");
        assert!(
            page.contains(
                "| `--timeout-seconds <SECONDS>` | `TOOL_TIMEOUT_SECONDS` | `30` | Deadline \\| of each call |"
            ),
            "{page}"
        );
        assert!(
            page.contains("| `--format <format>` |  |  | Output. One of `text`, `json`. |"),
            "{page}"
        );
        assert!(page.contains("| `--quiet` |  |  | Say nothing |"), "{page}");
        assert!(page.contains("| `<FILE>` |  |  | The input |"), "{page}");
        assert!(!page.contains("--old") && !page.contains("secret"), "{page}");
        assert!(page.contains("tool run [OPTIONS] <FILE>"), "{page}");
    }
}
