//! diorch-core: every decision diorch makes about a DIJob, with no I/O.
//!
//! Owns the DIJob API types and CRD ([`api`]), names ([`naming`]), pod and service building
//! ([`build`]), ranks ([`ranks`]), validation ([`validate`]), the reconcile planner
//! ([`planner`]), the cached shapes of watched objects ([`cached`]), the scheduling model and
//! resource arithmetic ([`model`], [`resources`]), kube-scheduler's fit rules ([`fit`]), the placement contract ([`placement`]) and
//! status merge patches ([`merge_patch`]).
//! Must not touch: the network, the clock, threads or a kube client. `cargo tree -p diorch-core`
//! shows no kube-client, hyper, tokio or wasmtime, and every test here is synchronous.
//!
//! Where this sits among the crates, and how a DIJob watch event becomes a created pod:
#![doc = include_str!("../../../docs/design/crates.md")]

pub mod allocation;
pub mod api;
pub mod build;
pub mod cached;
pub mod fit;
#[cfg(test)]
mod fixtures;
pub mod key;
pub mod merge_patch;
pub mod model;
pub mod mutation;
pub mod naming;
pub mod placement;
pub mod planner;
pub mod ranks;
pub mod reason;
pub mod resources;
pub mod step;
pub mod validate;
pub mod watched;
