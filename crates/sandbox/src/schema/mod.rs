//! Structural-schema engine for custom resources: pruning, defaulting and validation of
//! `serde_json::Value` objects against a CRD version's `openAPIV3Schema`, with the field paths and
//! messages of a real kube-apiserver v1.33 (kube-openapi validator, apiextensions-apiserver
//! pruning/defaulting/list-type/embedded-resource checks), plus the ObjectMeta checks every kind gets.
//!
//! Owns only this logic; it holds no state and must not touch the store, the HTTP layer or CEL
//! (rules in `x-kubernetes-validations` are recorded here and evaluated by `cel`).
//!
//! Go iterates maps in random order, so a real server orders errors of sibling fields randomly;
//! here siblings are visited in sorted key order, which is one of the orders a real server can give.
//!
//! One concern per file: `structural` (the compiled schema and its entry points), `compile` and
//! `node` (parsing and the structural rules), `prune`, `defaults`, `validate` with `scalars`,
//! `formats` and `result` (kube-openapi validation), `embedded`, `listtype`, `objectmeta` and
//! `names` (ObjectMeta and name syntax), `render` (Go value rendering), `errors`. This file only
//! declares them and re-exports the public items; the files import each other, never this one.

mod compile;
mod defaults;
mod embedded;
mod errors;
mod formats;
mod listtype;
mod names;
mod node;
mod objectmeta;
mod prune;
mod render;
mod result;
mod scalars;
mod structural;
mod validate;

pub use errors::{FieldError, FieldErrorKind, SchemaError};
pub use names::{
    NameRule, is_dns1035_label, is_dns1123_label, is_dns1123_subdomain, is_qualified_name,
    is_valid_label_value,
};
pub use objectmeta::{validate_object_meta, validate_object_meta_scoped};
pub use render::go_quote;
pub use structural::StructuralSchema;

#[cfg(test)]
mod tests;
