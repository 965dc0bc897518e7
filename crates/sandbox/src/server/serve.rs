//! `ApiServer`: building the in-process API server and serving it until shutdown, with the
//! garbage collector and namespace/CRD controllers running beside it.
//!
//! Wiring only: requests go to `dispatch.rs`.

use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::Router;
use tokio::sync::watch;

use crate::api_core::Api;
use crate::gc;

use super::dispatch::handle;
use super::state::{AppState, ServerOptions};

/// Why the server stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("serving HTTP failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The in-process Kubernetes API server.
pub struct ApiServer {
    api: Arc<Api>,
    options: ServerOptions,
}

impl ApiServer {
    pub fn new(options: ServerOptions) -> Self {
        ApiServer {
            api: Api::new(options.history_size),
            options,
        }
    }

    /// The REST layer, for in-process use (tests, benches).
    pub fn api(&self) -> Arc<Api> {
        self.api.clone()
    }

    /// Serves until `shutdown` completes; open watches are ended first so that graceful
    /// shutdown does not wait for them. Also runs the garbage collector and namespace/CRD
    /// controllers.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let controllers = tokio::spawn(gc::run(self.api.clone(), stop_rx.clone()));
        let state = Arc::new(AppState {
            api: self.api.clone(),
            options: self.options.clone(),
            stop: stop_rx,
            openapi: Mutex::new(None),
        });
        let app = Router::new().fallback(handle).with_state(state);
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                shutdown.await;
                let _ = stop_tx.send(true);
            })
            .await;
        controllers.abort();
        result.map_err(ServerError::Io)
    }
}
