//! The options and results of REST calls: `fieldValidation`, write, delete and list options, a
//! write's outcome and a list's page, and the garbage collector's deletion policies.
//!
//! Plain data: must not call the store.

use std::sync::Arc;

use serde_json::Value;

use crate::api_status::ApiError;
use crate::selector::{FieldSelector, LabelSelector};

/// How unknown fields in a write are treated (`fieldValidation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FieldValidation {
    Ignore,
    #[default]
    Warn,
    Strict,
}

impl FieldValidation {
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::bad_request(format!(
                "fieldValidation parameter unsupported: {other}"
            ))),
        }
    }
}

/// Options of a create, update or patch.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_validation: FieldValidation,
}

/// The outcome of a write: the object (or Status) to return, the HTTP code, `Warning`s.
#[derive(Debug)]
pub struct Written {
    pub body: Value,
    pub code: u16,
    pub warnings: Vec<String>,
}

/// DeleteOptions, from the body or the query.
#[derive(Debug, Clone, Default)]
pub struct DeleteOpts {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    pub orphan_dependents: Option<bool>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub dry_run: bool,
}

/// List options after parsing.
#[derive(Debug, Clone, Default)]
pub struct ListOpts {
    pub label: Option<LabelSelector>,
    pub field: Option<FieldSelector>,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
}

/// A list result in view form.
#[derive(Debug)]
pub struct ListOut {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<u64>,
}

/// The garbage collector's deletion policies.
pub const FOREGROUND: &str = "foregroundDeletion";
pub const ORPHAN: &str = "orphan";
