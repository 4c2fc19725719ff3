//! Log set-up of `cnpgi-operator run`, `metrics` and the other instance
//! commands' messages: text or JSON lines on stderr.
//!
//! The same choices as a plugin's (`--log-format`, `--log-level`, `RUST_LOG`
//! wins), written here so that the operator binary does not depend on the
//! plugin SDK.

use std::io::IsTerminal;

use tracing_subscriber::{EnvFilter, fmt, prelude::*};

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Installs the global tracing subscriber writing to stderr. `level` is an
/// `EnvFilter` directive such as `info` or `info,cnpgi_operator=debug`;
/// `RUST_LOG`, when set, wins. A subscriber already installed is kept.
pub(crate) fn init(format: LogFormat, level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    install(format, filter);
}

/// Installs the subscriber of a command whose messages are its output (the
/// instance commands'): every message at `info` and above, whatever
/// `RUST_LOG` says, as their text lines are always written.
pub(crate) fn init_messages(format: LogFormat) {
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
    crate::env_names::log_deprecated();
}
