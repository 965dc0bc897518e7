//! One compiled schema node (`Node`, structural or inside a value validation) and the field-path
//! helper every pass shares.
//!
//! Data only: parsing is `compile.rs`, each pass over objects has its own file.

use std::collections::BTreeMap;

use serde_json::Value;

#[derive(Debug, Clone)]
pub(super) enum Additional {
    Allows(bool),
    Schema(Box<Node>),
}

/// One schema node: a structural node or a value-validation node (inside allOf/anyOf/oneOf/not).
#[derive(Debug, Clone, Default)]
pub(super) struct Node {
    pub(super) ty: Option<String>,
    /// Only formats the apiserver validates for CRDs are kept (others are stripped, as it does).
    pub(super) format: Option<String>,
    pub(super) nullable: bool,
    pub(super) properties: BTreeMap<String, Node>,
    pub(super) additional: Option<Additional>,
    pub(super) items: Option<Box<Node>>,
    pub(super) required: Vec<String>,
    pub(super) enumv: Option<Vec<Value>>,
    pub(super) minimum: Option<f64>,
    pub(super) maximum: Option<f64>,
    pub(super) exclusive_minimum: bool,
    pub(super) exclusive_maximum: bool,
    pub(super) multiple_of: Option<f64>,
    pub(super) min_length: Option<i64>,
    pub(super) max_length: Option<i64>,
    pub(super) min_items: Option<i64>,
    pub(super) max_items: Option<i64>,
    pub(super) min_properties: Option<i64>,
    pub(super) max_properties: Option<i64>,
    pub(super) unique_items: bool,
    pub(super) pattern: Option<String>,
    pub(super) default: Option<Value>,
    pub(super) preserve_unknown: bool,
    pub(super) int_or_string: bool,
    pub(super) embedded: bool,
    pub(super) list_type: Option<String>,
    pub(super) list_map_keys: Vec<String>,
    pub(super) all_of: Vec<Node>,
    pub(super) any_of: Vec<Node>,
    pub(super) one_of: Vec<Node>,
    pub(super) not: Option<Box<Node>>,
}

impl Node {
    pub(super) fn types(&self) -> Vec<&str> {
        if self.int_or_string {
            vec!["integer", "string"]
        } else {
            self.ty.iter().map(String::as_str).collect()
        }
    }
    pub(super) fn additional_schema(&self) -> Option<&Node> {
        match &self.additional {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        }
    }
    /// The schema a map key's value follows (`properties`, else `additionalProperties`).
    pub(super) fn field_schema(&self, key: &str) -> Option<&Node> {
        self.properties
            .get(key)
            .or_else(|| self.additional_schema())
    }
}

pub(super) fn child_path(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}
