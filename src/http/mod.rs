//! The operator's HTTP plumbing shared by every endpoint: the bounded listeners ([`listen`])
//! that serve the replica API (`server`), the admission webhooks (`webhook`), `/metrics` and
//! the probes, and the routes of the metrics address besides `/metrics` ([`plugins`]).
//!
//! Owns: accept loops, per-request limits, and the plugin status route. Must not touch: what
//! any route decides (the replica API's and the webhooks' own modules do that).

pub mod listen;
pub mod plugins;
