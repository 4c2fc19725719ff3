//! The local commands' interruption by SIGTERM or SIGINT, with a shell's
//! exit codes. (The servers' graceful shutdown on the same signals is
//! `cnpgi_process::signals::shutdown_signal`, shared with the plugin SDK.)

use std::process::ExitCode;

/// Runs a local command (`render`, `check-plugin`) until it finishes or the
/// process receives SIGTERM or SIGINT. On a signal the command's future is
/// dropped, which kills the plugin processes it started and removes their
/// temporary directories; the exit code is then 128 + the signal number
/// (143 for SIGTERM, 130 for SIGINT), as a shell reports it.
pub(crate) async fn until_signal(work: std::pin::Pin<Box<dyn std::future::Future<Output = ExitCode>>>) -> ExitCode {
    use tokio::signal::unix::{SignalKind, signal};

    // Installed before the command starts any plugin.
    let (mut term, mut int) = match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(term), Ok(int)) => (term, int),
        (Err(error), _) | (_, Err(error)) => {
            eprintln!("error: cannot handle SIGTERM and SIGINT: {error}");
            return ExitCode::from(2);
        }
    };
    let (name, code) = tokio::select! {
        code = work => return code,
        _ = term.recv() => ("SIGTERM", 143),
        _ = int.recv() => ("SIGINT", 130),
    };
    eprintln!("error: interrupted by {name}; stopped the plugins and removed their temporary directories");
    ExitCode::from(code)
}
