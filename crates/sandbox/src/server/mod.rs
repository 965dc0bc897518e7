//! The sandbox API server's HTTP layer (axum 0.8, plain HTTP/1.1): URL routing for `/api/v1`
//! and `/apis/<group>/<version>` resources (namespaced and cluster-wide collections, objects,
//! subresources, legacy `/watch/` paths), query and body decoding, watch streaming (shared
//! event bytes, bookmarks, timeouts, selectors, 410 as an ERROR event), Table output, legacy
//! discovery, OpenAPI v3, `/version` and health endpoints, and `Status` error bodies.
//!
//! REST semantics live in `api_core`; this module must not implement kind rules.
//!
//! One concern per file: `serve` (the `ApiServer`), `state`, `dispatch` (the handler),
//! `routing`, `request` and `response` (decoding and encoding), `discovery`, `resource`
//! (object and collection requests) and `watch`. This file only declares them and re-exports
//! the public items; the files import each other, never this one.

mod discovery;
mod dispatch;
mod request;
mod resource;
mod response;
mod routing;
mod serve;
mod state;
mod watch;

pub use serve::{ApiServer, ServerError};
pub use state::ServerOptions;

#[cfg(test)]
mod tests;
