//! The server's options (`ServerOptions`) and the state every request handler shares: the REST
//! layer, the options, the stop signal for open watches and the cached OpenAPI documents.
//!
//! Data only: must not handle requests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;

use crate::api_core::Api;

/// Options of the sandbox API server.
#[derive(Debug, Clone)]
pub struct ServerOptions {
    /// Events kept per resource for watch resumption; older RVs get `410 Gone`.
    pub history_size: usize,
    /// How often a watch with `allowWatchBookmarks=true` gets a BOOKMARK.
    pub bookmark_interval: Duration,
    /// Answers to TokenReview and SubjectAccessReview.
    pub auth: Arc<crate::auth::AuthConfig>,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            history_size: 20_000,
            bookmark_interval: Duration::from_secs(10),
            auth: Arc::default(),
        }
    }
}

/// (registry generation, `/openapi/v3` index, documents by path).
type OpenApiCache = (u64, Value, HashMap<String, Value>);

pub(super) struct AppState {
    pub(super) api: Arc<Api>,
    pub(super) options: ServerOptions,
    pub(super) stop: watch::Receiver<bool>,
    pub(super) openapi: Mutex<Option<OpenApiCache>>,
}
