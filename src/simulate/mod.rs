//! The simulator: what a scheduling policy does to a cluster over a workload, before it is
//! dropped in. A trace of jobs runs against a cluster in virtual time, through the operator's own
//! allocator and planner (see [`engine`]), and each run's figures are summed up, tabled and
//! written as CSV and HTML (see [`report`], [`html`]). The `diorch simulate` command that drives
//! it is in `cli::simulate`. [`replay`] feeds decisions the operator recorded
//! (`--record-decisions`) to another policy and compares.
//!
//! Owns: the engine, its inputs (cluster and trace files, synthetic traces) and its reports.
//! Must not touch: the operator's runtime (no API server, no watches), or the command line.

pub mod engine;
pub mod generate;
pub mod html;
pub mod input;
pub mod replay;
pub mod report;
