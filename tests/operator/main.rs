//! The operator's integration tests, in one test binary (linked once, not once per file): the
//! sandbox in-process, the real `diorch` binary and kubectl, the CRD and the install manifests.
//! Run one file's tests with its module name as the filter, e.g.
//! `cargo test --test operator controller::`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its report

#[path = "../common/mod.rs"]
mod common;

mod allocation;
mod controller;
mod crd;
mod crd_schema;
mod deploy;
mod ha;
mod hostile_input;
mod monitoring;
mod rbac;
mod sandbox_api;
mod sandbox_cli;
mod webhook;
