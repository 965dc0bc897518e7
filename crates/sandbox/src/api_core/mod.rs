//! The sandbox API server's REST semantics, independent of HTTP: create, get, list, update
//! (PUT and the status split), patch, delete (finalizers, graceful pod deletion, propagation
//! finalizers), bindings and CRD registration, with the kube-apiserver's rules and errors.
//! Used by `server` (HTTP) and `gc.rs` (in-process controllers).
//!
//! Objects are kept in the store in storage form (core/v1 for both Event APIs; custom
//! resources in the version they were written with) and converted to the requested view on
//! the way out. It must not know about HTTP or hold the store's lock across calls.
//!
//! `api` holds the state (`Api`); each verb is an `impl Api` block in its own file (`read`,
//! `create`, `update`, `patch_apply`, `bind`, `delete`), with the shared steps in
//! `decode_validate` and `hooks`, and the helpers in `options`, `resource_rules`,
//! `object_meta` and `ip_pool`. This file only declares them and re-exports the public items;
//! the files import each other, never this one.

mod api;
mod bind;
mod create;
mod decode_validate;
mod delete;
mod hooks;
mod ip_pool;
mod object_meta;
mod options;
mod patch_apply;
mod read;
mod resource_rules;
mod update;

pub use api::Api;
pub use options::{
    DeleteOpts, FOREGROUND, FieldValidation, ListOpts, ListOut, ORPHAN, WriteOptions, Written,
};
pub use resource_rules::{storage_key, to_view};

#[cfg(test)]
mod tests;
