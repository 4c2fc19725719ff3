//! What every cnpgi binary sets up the same way: its log lines and its
//! shutdown signals.
//!
//! A plugin (through `cnpgi-pluginhelper`'s `plugin` command) and the
//! `cnpgi-operator` binary make the same choices: `--log-format text|json`
//! and `--log-level` (`RUST_LOG` wins) on stderr, and SIGTERM (Kubernetes
//! stopping the Pod) or SIGINT (Ctrl-C) starting a graceful shutdown. They
//! are written once, here, in a crate both can depend on: the operator
//! binary must not depend on the plugin SDK, and `cnpgi-core` does no I/O.
//!
//! * [`logging`]: the tracing subscriber, text or JSON lines on stderr;
//! * [`signals`]: [`signals::shutdown_signal`], SIGTERM or SIGINT;
//! * [`cli_reference`]: a command line's reference page, from its clap definition.
//!
//! ```no_run
//! use cnpgi_process::{logging::{self, LogFormat}, signals::shutdown_signal};
//!
//! # async fn serve(_stop: impl std::future::Future<Output = ()>) {}
//! # async fn example() {
//! logging::init(LogFormat::Json, "info");
//! serve(shutdown_signal()).await;
//! # }
//! ```

#![forbid(unsafe_code)]

pub mod cli_reference;
pub mod logging;
pub mod signals;
