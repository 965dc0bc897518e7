//! `StructuralSchema`, a compiled CRD version schema, and its entry points: compile, prune,
//! apply_defaults, validate and validate_status, in the order and with the paths the apiserver
//! uses.
//!
//! Only wires the passes together: each pass lives in its own file.

use serde_json::Value;

use super::compile::Compiler;
use super::defaults::default_value;
use super::embedded::validate_embedded;
use super::errors::{FieldError, SchemaError};
use super::listtype::list_sets_and_maps_object;
use super::node::Node;
use super::prune::{coerce_embedded_meta, prune_defaults, prune_nulls, prune_value};
use super::result::to_field_errors;
use super::validate::validate_node;

/// A compiled structural schema (the `openAPIV3Schema` of one CRD version).
#[derive(Debug, Clone)]
pub struct StructuralSchema {
    root: Node,
    has_cel: bool,
    patterns: bool,
}

impl StructuralSchema {
    /// Compiles an `openAPIV3Schema`, rejecting schemas a v1 CRD could not have (non-structural).
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        let mut c = Compiler {
            errors: Vec::new(),
            has_cel: false,
            patterns: false,
        };
        let mut root = c.node(schema, "", true, false)?;
        if root.ty.as_deref() != Some("object") {
            c.errors
                .push("type: Invalid value: must be object at the root".into());
        }
        if root.additional.is_some() {
            c.errors
                .push("additionalProperties: Forbidden: must not be used at the root".into());
        }
        if let Some(meta) = root.properties.get("metadata") {
            let only_names = meta
                .properties
                .keys()
                .all(|k| k == "name" || k == "generateName");
            if !only_names || meta.default.is_some() || meta.additional.is_some() {
                c.errors.push(
                    "properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified".into(),
                );
            }
        }
        if !c.errors.is_empty() {
            return Err(SchemaError::NotStructural(c.errors));
        }
        prune_defaults(&mut root);
        Ok(StructuralSchema {
            root,
            has_cel: c.has_cel,
            patterns: c.patterns,
        })
    }

    /// True when some node has `x-kubernetes-validations` (CEL rules, evaluated by `cel`).
    pub fn has_cel(&self) -> bool {
        self.has_cel
    }

    /// True when some node has a `pattern`, which this engine does not check (no regex engine).
    pub fn has_unchecked_patterns(&self) -> bool {
        self.patterns
    }

    /// Drops fields the schema does not declare (unless x-kubernetes-preserve-unknown-fields), in
    /// place, and returns the sorted paths of what it dropped, as strict field validation reports
    /// them (`spec.foo`, `spec.tasks[0].bar`). Also drops nulls of non-nullable fields without a
    /// default, and unknown fields of embedded resources' ObjectMeta, as the apiserver's decoder does.
    /// At the root, `apiVersion`, `kind` and `metadata` are never touched.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut paths = Vec::new();
        let root = &self.root;
        prune_value(obj, Some(root), true, "", &mut paths);
        prune_nulls(obj, Some(root));
        coerce_embedded_meta(obj, Some(root), "", &mut paths);
        paths.sort();
        paths
    }

    /// Applies `default`s in place, as the apiserver does after decoding.
    pub fn apply_defaults(&self, obj: &mut Value) {
        default_value(obj, Some(&self.root));
    }

    /// Validates a whole object; an empty Vec means valid. Order: schema (kube-openapi) errors,
    /// then embedded-resource checks, then list-type set/map uniqueness, as the apiserver orders them.
    pub fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let res = validate_node(&self.root, "", obj);
        let mut out = to_field_errors(None, &res.errors);
        validate_embedded(&self.root, "", obj, &mut out);
        if let Value::Object(m) = obj {
            list_sets_and_maps_object(&self.root, "", m, &mut out);
        }
        out
    }

    /// Validates the `status` of an object as the `/status` subresource does: the status schema is
    /// validated on its own, so messages name `conditions[0].type` while paths are under `status.`.
    pub fn validate_status(&self, status: &Value) -> Vec<FieldError> {
        match self.root.properties.get("status") {
            Some(s) => to_field_errors(Some("status"), &validate_node(s, "", status).errors),
            None => Vec::new(),
        }
    }
}
