//! CEL `x-kubernetes-validations` of custom resources, evaluated as kube-apiserver evaluates
//! them on create and update, with kube-cel (the kube-rs project's Kubernetes CEL library).
//!
//! Owns the compiled rules of one CRD version and how a failed rule becomes an apiserver
//! cause (`<path>: Invalid value: "object": <message>`). It must not touch the store; the
//! structural schema engine (`schema`) stays CEL-free.

use serde_json::{Value, json};

use super::api_status::{Cause, duplicate, forbidden_field, invalid_value, required};

/// The CEL rules of one CRD version, compiled once.
pub struct CelRules {
    compiled: kube_cel::CompiledSchema,
}

impl std::fmt::Debug for CelRules {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CelRules")
    }
}

thread_local! {
    // Registering the Kubernetes CEL library is not free: once per thread.
    static VALIDATOR: kube_cel::Validator = kube_cel::Validator::new();
}

fn has_rules(schema: &Value) -> bool {
    match schema {
        Value::Object(m) => {
            m.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
                || m.values().any(has_rules)
        }
        Value::Array(a) => a.iter().any(has_rules),
        _ => false,
    }
}

impl CelRules {
    /// The rules of `schema` (an `openAPIV3Schema`), or `None` when it has none.
    pub fn compile(schema: &Value) -> Option<CelRules> {
        has_rules(schema).then(|| CelRules {
            compiled: kube_cel::compile_schema(schema),
        })
    }

    /// The causes of every failed rule (empty when all hold). `old` is the stored object on an
    /// update, for transition rules (`oldSelf`).
    pub fn check(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        let result = VALIDATOR.with(|v| v.validate_compiled(&self.compiled, obj, old));
        let Err(errors) = result else {
            return Vec::new();
        };
        errors
            .into_vec()
            .into_iter()
            // As apiextensions-apiserver's fieldErrorForReason: the rule's reason picks the
            // kind of field error; the value shown is the node's type.
            .map(|e| {
                // A root rule's fieldPath comes back as `.name`; the apiserver prints `name`.
                let field = e.field_path.trim_start_matches('.');
                match e.reason.as_deref() {
                    Some("FieldValueRequired") => required(field, &e.message),
                    Some("FieldValueForbidden") => forbidden_field(field, &e.message),
                    Some("FieldValueDuplicate") => duplicate(field, &json!("object")),
                    _ => invalid_value(field, &json!("object"), &e.message),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_rules_become_causes_at_their_field_path() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "tasks": {"type": "array", "items": {"type": "object",
                "x-kubernetes-validations": [{"rule": "!has(self.min) || self.min <= self.replicas",
                    "message": "min must not exceed replicas", "fieldPath": ".min"}],
                "properties": {"replicas": {"type": "integer", "default": 1}, "min": {"type": "integer"}}}}}}}});
        let rules = CelRules::compile(&schema).expect("rules");
        let ok = json!({"spec": {"tasks": [{"replicas": 2, "min": 1}, {"replicas": 1}]}});
        assert!(rules.check(&ok, None).is_empty());
        // The default (replicas 1) is applied before the rule runs, as the apiserver does.
        let bad = json!({"spec": {"tasks": [{"replicas": 2}, {"min": 2}]}});
        let causes = rules.check(&bad, None);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].field, "spec.tasks[1].min");
        assert_eq!(
            causes[0].message,
            "Invalid value: \"object\": min must not exceed replicas"
        );
        assert!(CelRules::compile(&json!({"type": "object"})).is_none());
        let required_rule = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "has(self.name)", "message": "name it", "fieldPath": ".name", "reason": "FieldValueRequired"}],
            "properties": {"name": {"type": "string"}}});
        let causes = CelRules::compile(&required_rule)
            .expect("rules")
            .check(&json!({}), None);
        assert_eq!(causes[0].field, "name");
        assert_eq!(causes[0].message, "Required value: name it");
    }
}
