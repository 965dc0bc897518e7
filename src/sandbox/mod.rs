//! An in-process, in-memory subset of the Kubernetes API server, with simulated nodes,
//! scheduler and kubelet, for running diorch and `kubectl` with no cluster.
//!
//! It is a test bed, not the product: operator code never depends on anything here.

pub mod gc;
pub mod kubelet;
pub mod openapi;
pub mod patch;
pub mod registry;
pub mod schema;
pub mod selector;
pub mod server;
pub mod store;
pub mod table;
