//! The operator's controllers. The DIJob lifecycle controller (`executor`): DIJob → pods and a
//! headless service, phases, restarts, rescheduling and cleanup, compatible with
//! DI-orchestrator v2. The plugin controller (`plugins`): plugin ConfigMaps → the plugin
//! registry, with their status written back.
//!
//! Owns reconciliation's I/O: the watches and reflector caches, the executor that carries out
//! `diorch_core::planner`'s plans, expectations, the write throttle and the work queue. It reads
//! only from reflector caches and writes only pods, services, events and DIJob status.
//! Placement is asked through `diorch_core::placement::Placement`: this module does not know the
//! allocator.

pub mod cache;
pub mod executor;
pub mod expectations;
pub mod plugins;
pub mod queue;
pub mod resync;
pub mod throttle;
