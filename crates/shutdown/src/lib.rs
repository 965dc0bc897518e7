//! The shutdown signal of diorch's two binaries (`diorch` and `diorch-sandbox`): one future that
//! resolves on Ctrl-C (SIGINT) or SIGTERM, what Kubernetes sends a pod it stops.
//!
//! It owns waiting for the signal only: what to stop, and what to log, is each binary's.

/// Resolves on Ctrl-C (SIGINT) or SIGTERM.
pub async fn shutdown_signal() {
    let interrupt = async {
        // If the handler cannot be installed there is nothing to wait for: run until killed.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = interrupt => {}
        () = terminate => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    // No signal was sent to the test process: the future must still be waiting (a future that
    // resolved at once, say on a handler it failed to install, would stop a binary at start).
    #[tokio::test]
    async fn without_a_signal_it_keeps_waiting() {
        let waited =
            tokio::time::timeout(Duration::from_millis(50), super::shutdown_signal()).await;
        assert!(waited.is_err(), "resolved without a signal");
    }
}
