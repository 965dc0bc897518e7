//! The simulated cluster's event loop: one task that follows pods and nodes with watches, keeps
//! the scheduler's per-node usage (bound plus assumed pods), schedules pending pods, runs the
//! kubelets' timers from a single delay queue, and sends API requests with bounded concurrency.
//! Behaviour is documented in `kubelet.rs`; decisions come from `sim_sched.rs`/`sim_pod.rs`.
//!
//! Must not touch the sandbox's store or server: everything goes through the `kube` client.
//!
//! `sim` holds the state and the loop; each of its inputs is handled by an `impl Sim` block in
//! its own file (`watches`, `schedule`, `kubelet_pods`, `requests`), with the data types in
//! `types` and pure helpers in `pods` and `events`. This file only declares them and re-exports
//! `Sim`; the files import each other, never this one.

mod events;
mod kubelet_pods;
mod pods;
mod requests;
mod schedule;
mod sim;
mod types;
mod watches;

pub(crate) use sim::Sim;

#[cfg(test)]
mod tests;
