//! Shutdown signals: SIGTERM (Kubernetes stopping the Pod) and SIGINT (Ctrl-C).

/// Completes on SIGTERM or SIGINT, logging which: the start of a graceful
/// shutdown. A signal that cannot be listened for is logged as a warning
/// and never completes this future (the other one still can).
///
/// ```no_run
/// # async fn example() {
/// use cnpgi_process::signals::shutdown_signal;
///
/// tokio::select! {
///     () = shutdown_signal() => {}
///     () = std::future::pending::<()>() => {}
/// }
/// # }
/// ```
pub async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = terminate => tracing::info!("received SIGTERM"),
        result = tokio::signal::ctrl_c() => match result {
            Ok(()) => tracing::info!("received SIGINT"),
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGINT");
                std::future::pending::<()>().await;
            }
        },
    }
}
