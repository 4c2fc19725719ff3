//! Log set-up for plugin binaries: text or JSON lines on stderr.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs a global tracing subscriber writing to stderr.
///
/// `level` is an `EnvFilter` directive such as `info` or
/// `info,cnpgi_pluginhelper=debug`; `RUST_LOG`, when set, wins. Does nothing
/// if a subscriber is already installed (e.g. by the plugin's own `main`).
pub fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
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
