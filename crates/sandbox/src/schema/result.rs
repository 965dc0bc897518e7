//! kube-openapi's validation result: the error codes and values it records (`OErr`), the
//! deduplicating result with its match count (`Res`), the Go kind of a JSON value, and the
//! conversion of the result to field errors (`kubeOpenAPIResultToFieldErrors`).
//!
//! Carries errors only; the checks that produce them are `validate.rs` and `scalars.rs`.

use serde_json::Value;

use super::errors::{FieldError, FieldErrorKind};
use super::render::{go_json, go_quote};

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Code {
    InvalidType,
    Required,
    TooLong,
    Enum,
    MaxItems,
    TooManyProperties,
    /// Every other `*errors.Validation` code (converted to `field.Invalid`).
    Other,
    /// A plain error (anyOf/oneOf/allOf/not): converted to `field.Invalid` at the root path.
    Composite,
}

#[derive(Debug, Clone)]
pub(super) struct OErr {
    code: Code,
    name: String,
    /// `None` is Go's nil.
    value: Option<Value>,
    pub(super) valid: Option<i64>,
    pub(super) values: Vec<Value>,
    message: String,
}

impl OErr {
    pub(super) fn new(code: Code, name: &str, value: Option<Value>, message: String) -> Self {
        OErr {
            code,
            name: name.to_string(),
            value,
            valid: None,
            values: Vec::new(),
            message,
        }
    }
}

/// `validate.Result`: errors deduplicated by message, and the match count anyOf/oneOf use to
/// pick the "best" failing alternative.
#[derive(Debug, Default)]
pub(super) struct Res {
    pub(super) errors: Vec<OErr>,
    pub(super) matches: usize,
}

impl Res {
    pub(super) fn err(e: OErr) -> Res {
        Res {
            errors: vec![e],
            matches: 0,
        }
    }
    pub(super) fn add(&mut self, e: OErr) {
        if !self.errors.iter().any(|x| x.message == e.message) {
            self.errors.push(e);
        }
    }
    pub(super) fn merge(&mut self, other: Res) {
        for e in other.errors {
            self.add(e);
        }
        self.matches += other.matches;
    }
    pub(super) fn valid(&self) -> bool {
        self.errors.is_empty()
    }
}

/// The Go kind of a decoded JSON value, as the validators see it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Bool,
    Int(i64),
    Float(f64),
    Str,
    Slice,
    Map,
}

pub(super) fn kind_of(v: &Value) -> Option<Kind> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Kind::Bool,
        Value::Number(n) => match n.as_i64() {
            Some(i) => Kind::Int(i),
            None => Kind::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(_) => Kind::Str,
        Value::Array(_) => Kind::Slice,
        Value::Object(_) => Kind::Map,
    })
}

pub(super) const IN: &str = "body";

pub(super) fn invalid_type(path: &str, ty: &str, got: &str) -> OErr {
    OErr::new(
        Code::InvalidType,
        path,
        Some(Value::String(got.to_string())),
        format!("{path} in {IN} must be of type {ty}: {}", go_quote(got)),
    )
}

pub(super) fn composite(msg: String) -> OErr {
    OErr::new(Code::Composite, "", None, msg)
}

pub(super) fn invalid_type_data(path: &str, format: &str, data: &str) -> OErr {
    OErr::new(
        Code::InvalidType,
        path,
        Some(Value::String(data.to_string())),
        format!(
            "{path} in {IN} must be of type {format}: {}",
            go_quote(data)
        ),
    )
}

/// `kubeOpenAPIResultToFieldErrors`.
pub(super) fn to_field_errors(prefix: Option<&str>, errs: &[OErr]) -> Vec<FieldError> {
    let root = prefix.unwrap_or("<nil>");
    errs.iter()
        .map(|e| {
            let name = e.name.strip_prefix('.').unwrap_or(&e.name);
            let field = if e.code == Code::Composite || name.is_empty() {
                root.to_string()
            } else {
                match prefix {
                    Some(p) => format!("{p}.{name}"),
                    None => name.to_string(),
                }
            };
            let value_or_empty = || Some(e.value.clone().unwrap_or(Value::String(String::new())));
            match e.code {
                Code::Required => FieldError::new(FieldErrorKind::Required, &field, None, ""),
                Code::Enum => {
                    let values: Vec<String> = e
                        .values
                        .iter()
                        .map(|v| match v {
                            Value::String(s) => go_quote(s),
                            other => go_quote(&go_json(other)),
                        })
                        .collect();
                    let detail = if values.is_empty() {
                        String::new()
                    } else {
                        format!("supported values: {}", values.join(", "))
                    };
                    FieldError::new(
                        FieldErrorKind::NotSupported,
                        &field,
                        Some(e.value.clone().unwrap_or(Value::Null)),
                        &detail,
                    )
                }
                Code::TooLong => FieldError::new(
                    FieldErrorKind::TooLong,
                    &field,
                    None,
                    &format!("may not be more than {} bytes", e.valid.unwrap_or(-1)),
                ),
                Code::MaxItems | Code::TooManyProperties => FieldError::new(
                    FieldErrorKind::TooMany,
                    &field,
                    e.value.clone(),
                    &format!("must have at most {} items", e.valid.unwrap_or(-1)),
                ),
                Code::InvalidType => FieldError::new(
                    FieldErrorKind::TypeInvalid,
                    &field,
                    value_or_empty(),
                    &e.message,
                ),
                Code::Other => FieldError::new(
                    FieldErrorKind::Invalid,
                    &field,
                    value_or_empty(),
                    &e.message,
                ),
                Code::Composite => FieldError::new(
                    FieldErrorKind::Invalid,
                    &field,
                    Some(Value::String(String::new())),
                    &e.message,
                ),
            }
        })
        .collect()
}
