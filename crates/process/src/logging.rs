//! Log lines on stderr, text or JSON, filtered by level.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global tracing subscriber writing to stderr.
///
/// `level` is an `EnvFilter` directive such as `info` or
/// `info,cnpgi_pluginhelper=debug`; `RUST_LOG`, when set, wins; an invalid
/// directive falls back to `info`. Does nothing if a subscriber is already
/// installed (e.g. by a plugin's own `main`).
///
/// ```
/// use cnpgi_process::logging::{self, LogFormat};
///
/// logging::init(LogFormat::Text, "info,my_plugin=debug");
/// tracing::info!("written to stderr");
/// ```
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    install(format, filter);
}

/// Installs the subscriber of a command whose log messages are its output
/// (e.g. `cnpgi-operator`'s instance commands, which PostgreSQL runs): every
/// message at `info` and above, whatever `RUST_LOG` says.
///
/// ```
/// cnpgi_process::logging::init_messages(cnpgi_process::logging::LogFormat::Json);
/// ```
pub fn init_messages(format: LogFormat) {
    install(format, EnvFilter::new("info"));
}

fn install(format: LogFormat, filter: EnvFilter) {
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry
            .with(
                fmt::layer()
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(fmt::layer().json().with_current_span(true).with_writer(std::io::stderr))
            .try_init(),
    };
    // An already installed subscriber is the caller's choice, not an error.
    drop(result);
}
