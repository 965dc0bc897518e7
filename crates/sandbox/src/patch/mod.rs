//! PATCH semantics of the sandbox API server: RFC 6902 JSON patch, RFC 7386 JSON merge patch and
//! Kubernetes strategic merge patch, applied to an object's JSON form exactly as a v1.33
//! kube-apiserver does (k8s.io/apimachinery `strategicpatch`, `gopkg.in/evanphx/json-patch.v4`),
//! with the apiserver's error messages and HTTP status codes.
//!
//! Pure functions over `serde_json::Value`: no store, no HTTP. The caller decodes, validates and
//! stores the result; it must not depend on anything else here.
//!
//! One concern per file: `types` (patch types and errors), `apply` (the entry points),
//! `json_patch`, `merge_patch`, `strategic` with `strategic_meta` (the kinds' struct tags),
//! `strategic_directives` and `strategic_order`, and `go_values` (Go's rendering of values in
//! messages). This file only declares them and re-exports the public items; the files import
//! each other, never this one.

mod apply;
mod go_values;
mod json_patch;
mod merge_patch;
mod strategic;
mod strategic_directives;
mod strategic_meta;
mod strategic_order;
mod types;

pub use apply::{apply_patch, is_strategic_kind, unsupported_media_type};
pub use types::{PatchError, PatchType};

#[cfg(test)]
mod tests;
