//! The schema engine's error types: `FieldError` (a `field.Error`, with the message body a
//! StatusCause carries) and its kind, and `SchemaError` (why a schema does not compile).
//!
//! Plain data and message rendering; must not validate anything itself.

use std::fmt;

use serde_json::Value;

use super::render::render_bad_value;

/// The kind of a field error, as `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorKind {
    Invalid,
    NotSupported,
    Required,
    Duplicate,
    Forbidden,
    TooLong,
    TooMany,
    TypeInvalid,
}

impl FieldErrorKind {
    /// The `reason` of a `StatusCause`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Invalid => "FieldValueInvalid",
            Self::NotSupported => "FieldValueNotSupported",
            Self::Required => "FieldValueRequired",
            Self::Duplicate => "FieldValueDuplicate",
            Self::Forbidden => "FieldValueForbidden",
            Self::TooLong => "FieldValueTooLong",
            Self::TooMany => "FieldValueTooMany",
            Self::TypeInvalid => "FieldValueTypeInvalid",
        }
    }

    fn title(&self) -> &'static str {
        match self {
            Self::Invalid | Self::TypeInvalid => "Invalid value",
            Self::NotSupported => "Unsupported value",
            Self::Required => "Required value",
            Self::Duplicate => "Duplicate value",
            Self::Forbidden => "Forbidden",
            Self::TooLong => "Too long",
            Self::TooMany => "Too many",
        }
    }
}

/// One field error, as `k8s.io/apimachinery/pkg/util/validation/field.Error`.
/// `bad_value: None` means the value is omitted from the message.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub kind: FieldErrorKind,
    pub field: String,
    pub bad_value: Option<Value>,
    pub detail: String,
}

impl FieldError {
    pub(super) fn new(
        kind: FieldErrorKind,
        field: &str,
        bad_value: Option<Value>,
        detail: &str,
    ) -> Self {
        FieldError {
            kind,
            field: field.to_string(),
            bad_value,
            detail: detail.to_string(),
        }
    }

    /// The message without the field name (`field.Error.ErrorBody()`), used as a StatusCause message.
    pub fn body(&self) -> String {
        let mut s = self.kind.title().to_string();
        let omit = matches!(
            self.kind,
            FieldErrorKind::Required | FieldErrorKind::Forbidden | FieldErrorKind::TooLong
        );
        if !omit && let Some(v) = &self.bad_value {
            s.push_str(": ");
            s.push_str(&render_bad_value(v));
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Why a schema cannot be compiled.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SchemaError {
    #[error("schema is not structural: {}", .0.join(", "))]
    NotStructural(Vec<String>),
    #[error("invalid schema at {path}: {reason}")]
    Malformed { path: String, reason: String },
}
