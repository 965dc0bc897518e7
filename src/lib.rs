//! diorch: a Kubernetes operator for DI-engine's distributed RL jobs (DIJob v2alpha1).
//!
//! This crate acts: watches, caches, API writes, the allocator, the Wasm plugin host, the
//! replica API, webhooks, leader election and metrics. What it decides comes from
//! `diorch-core`; it never links the sandbox (`diorch-sandbox` is a dev-dependency only).
//!
#![doc = include_str!("../docs/design/crates.md")]

pub mod allocator;
pub mod audit;
pub mod chart;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod controller;
pub mod events;
pub mod flags;
pub mod heap;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod oci;
pub mod operator;
pub mod plugin;
pub mod server;
pub mod simulate;
#[cfg(test)]
pub(crate) mod testing;
pub mod webhook;
pub mod writes;
