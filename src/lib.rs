//! diorch: a Kubernetes operator for DI-engine's distributed RL jobs (DIJob v2alpha1).

pub mod allocator;
pub mod audit;
pub mod cluster;
pub mod controller;
pub mod events;
pub mod flags;
pub mod leader;
pub mod metrics;
pub mod operator;
pub mod plugin;
pub mod rbac;
pub mod server;
pub mod webhook;
pub mod writes;
