//! Kubernetes `Status` errors of the sandbox API server, with the kube-apiserver's exact
//! reasons, codes and messages (k8s.io/apimachinery/pkg/api/errors). Owns only error values;
//! HTTP rendering is in `server` (`server/response.rs`).

use serde_json::{Map, Value, json};

/// One `details.causes` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

/// An API error as the apiserver returns it in a `Status` body.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// `details` of the Status (name, group, kind, causes...), if any.
    pub details: Option<Value>,
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.code, self.reason, self.message)
    }
}

impl std::error::Error for ApiError {}

/// `pods` or `dijobs.diengine.opendilab.org`, as GroupResource.String() prints it.
pub fn qualified(group: &str, resource: &str) -> String {
    if group.is_empty() {
        resource.to_string()
    } else {
        format!("{resource}.{group}")
    }
}

fn details(name: &str, group: &str, kind: &str) -> Value {
    let mut d = Map::new();
    if !name.is_empty() {
        d.insert("name".into(), json!(name));
    }
    if !group.is_empty() {
        d.insert("group".into(), json!(group));
    }
    if !kind.is_empty() {
        d.insert("kind".into(), json!(kind));
    }
    Value::Object(d)
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    pub fn not_found(group: &str, resource: &str, name: &str) -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", qualified(group, resource)),
            details: Some(details(name, group, resource)),
        }
    }

    /// 404 for a path the server does not serve.
    pub fn path_not_found() -> Self {
        ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: Some(json!({})),
        }
    }

    pub fn already_exists(group: &str, resource: &str, name: &str) -> Self {
        ApiError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", qualified(group, resource)),
            details: Some(details(name, group, resource)),
        }
    }

    /// `Operation cannot be fulfilled on <resource> "<name>": <why>`.
    pub fn conflict(group: &str, resource: &str, name: &str, why: &str) -> Self {
        ApiError {
            code: 409,
            reason: "Conflict",
            message: format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                qualified(group, resource)
            ),
            details: Some(details(name, group, resource)),
        }
    }

    /// The optimistic-concurrency conflict of a stale update.
    pub fn stale(group: &str, resource: &str, name: &str) -> Self {
        Self::conflict(
            group,
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub fn forbidden(group: &str, resource: &str, name: &str, why: &str) -> Self {
        ApiError {
            code: 403,
            reason: "Forbidden",
            message: format!(
                "{} \"{name}\" is forbidden: {why}",
                qualified(group, resource)
            ),
            details: Some(details(name, group, resource)),
        }
    }

    pub fn method_not_allowed() -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource",
        )
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// A list at a resourceVersion the server has not reached: kube-apiserver's watch cache
    /// waits up to 3 s for it, then answers this. The sandbox has no lag to wait out.
    pub fn too_large_resource_version(requested: u64, current: u64) -> Self {
        ApiError {
            code: 504,
            reason: "Timeout",
            message: format!(
                "Timeout: Too large resource version: {requested}, current: {current}"
            ),
            details: Some(json!({
                "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
                "retryAfterSeconds": 1,
            })),
        }
    }

    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {}", message.into()),
        )
    }

    /// 422 Invalid: `<Kind>[.<group>] "<name>" is invalid: <cause>` or `[c1, c2]` for several.
    /// Each cause's `field` is the field path and `message` the text after `field: `.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let texts: Vec<String> = causes
            .iter()
            .map(|c| {
                if c.field.is_empty() {
                    c.message.clone()
                } else {
                    format!("{}: {}", c.field, c.message)
                }
            })
            .collect();
        let joined = match texts.len() {
            1 => texts[0].clone(),
            _ => format!("[{}]", texts.join(", ")),
        };
        let mut d = details(name, group, kind);
        if let Some(obj) = d.as_object_mut() {
            let list: Vec<Value> = causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            obj.insert("causes".into(), Value::Array(list));
        }
        ApiError {
            code: 422,
            reason: "Invalid",
            message: format!("{} \"{name}\" is invalid: {joined}", qualified(group, kind)),
            details: Some(d),
        }
    }

    /// A single-cause 422.
    pub fn invalid1(
        group: &str,
        kind: &str,
        name: &str,
        field: &str,
        reason: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::invalid(
            group,
            kind,
            name,
            vec![Cause {
                reason: reason.to_string(),
                message: message.into(),
                field: field.to_string(),
            }],
        )
    }

    /// The `Status` object.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(d), Some(obj)) = (&self.details, status.as_object_mut()) {
            obj.insert("details".into(), d.clone());
        }
        status
    }
}

/// Field-error texts as apimachinery's `field.Error.ErrorBody()` prints them.
pub fn required(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueRequired".into(),
        message: if detail.is_empty() {
            "Required value".into()
        } else {
            format!("Required value: {detail}")
        },
        field: field.into(),
    }
}

/// A value in a field error's message, printed as Go's %#v would for strings and ints.
fn go_value(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// `Invalid value: <value>: <detail>`, the value printed as Go's %#v would for strings/ints.
pub fn invalid_value(field: &str, value: &Value, detail: &str) -> Cause {
    let shown = go_value(value);
    Cause {
        reason: "FieldValueInvalid".into(),
        message: format!("Invalid value: {shown}: {detail}"),
        field: field.into(),
    }
}

pub fn forbidden_field(field: &str, detail: &str) -> Cause {
    Cause {
        reason: "FieldValueForbidden".into(),
        message: format!("Forbidden: {detail}"),
        field: field.into(),
    }
}

pub fn duplicate(field: &str, value: &Value) -> Cause {
    let shown = go_value(value);
    Cause {
        reason: "FieldValueDuplicate".into(),
        message: format!("Duplicate value: {shown}"),
        field: field.into(),
    }
}

pub fn not_supported(field: &str, value: &Value, allowed: &[&str]) -> Cause {
    let shown = go_value(value);
    let list: Vec<String> = allowed.iter().map(|a| format!("{a:?}")).collect();
    Cause {
        reason: "FieldValueNotSupported".into(),
        message: format!(
            "Unsupported value: {shown}: supported values: {}",
            list.join(", ")
        ),
        field: field.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_apiserver() {
        assert_eq!(
            ApiError::not_found("", "pods", "p").message,
            "pods \"p\" not found"
        );
        assert_eq!(
            ApiError::already_exists("diengine.opendilab.org", "dijobs", "j").message,
            "dijobs.diengine.opendilab.org \"j\" already exists"
        );
        assert_eq!(
            ApiError::stale("", "configmaps", "c").message,
            "Operation cannot be fulfilled on configmaps \"c\": the object has been modified; please apply your changes to the latest version and try again"
        );
        let e = ApiError::invalid(
            "",
            "Pod",
            "p",
            vec![
                required("spec.containers", ""),
                required("metadata.name", ""),
            ],
        );
        assert_eq!(
            e.message,
            "Pod \"p\" is invalid: [spec.containers: Required value, metadata.name: Required value]"
        );
        assert_eq!(
            e.to_status()["details"]["causes"][0]["reason"],
            "FieldValueRequired"
        );
    }
}
