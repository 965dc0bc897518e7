//! Server-side Table rendering (`Accept: application/json;as=Table;v=v1;g=meta.k8s.io`), the
//! only way `kubectl get` learns a resource's columns.
//!
//! Owns the column definitions and cell rules of the real apiserver's printers
//! (`pkg/printers/internalversion/printers.go`), the CRD table convertor
//! (`apiextensions-apiserver/.../tableconvertor`) with its minimal JSONPath, the default
//! `Name`/`Created At` convertor, and `duration.HumanDuration`. Like the apiserver's printer
//! storage, it always renders the wide columns: kubectl hides priority > 0 columns itself.
//! It must not touch storage or HTTP: callers pass the objects and write the result.
//!
//! One concern per file: `render` (Tables and rows), `columns` (printers and their column
//! definitions), the cells of `pod`, `node_service`, `event` and `custom` resources with the
//! shared `cell` helpers, `jsonpath` and `duration`. This file only declares them and
//! re-exports the public items; the files import each other, never this one.

mod cell;
mod columns;
mod custom;
mod duration;
mod event;
mod jsonpath;
mod node_service;
mod pod;
mod render;

pub use columns::columns_for;
pub use duration::human_duration;
pub use jsonpath::eval_jsonpath;
pub use render::{
    IncludeObject, TableError, parse_include_object, render_table, render_table_row_event,
};

#[cfg(test)]
mod tests;
