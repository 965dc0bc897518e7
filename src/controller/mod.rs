//! The DIJob lifecycle controller: DIJob → pods and a headless service, phases, restarts,
//! rescheduling and cleanup, compatible with DI-orchestrator v2.
//!
//! Owns reconciliation. It reads only from reflector caches and writes only pods, services,
//! events and DIJob status; placement decisions belong to the allocator.

pub mod build;
pub mod cache;
pub mod executor;
pub mod expectations;
pub mod naming;
pub mod planner;
pub mod queue;
pub mod ranks;
pub mod throttle;
pub mod validate;
