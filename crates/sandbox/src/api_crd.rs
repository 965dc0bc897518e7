//! CustomResourceDefinition rules of the sandbox API server: defaulting, validation (with the
//! apiextensions-apiserver's messages), the status its controllers would write (NamesAccepted,
//! Established, acceptedNames, storedVersions) and the `ResourceInfo`s plus compiled schemas a
//! CRD serves. Pure functions; registration happens in `api_core` (`api_core/hooks.rs`).

use std::sync::Arc;

use serde_json::{Value, json};

use super::api_status::{Cause, forbidden_field, invalid_value, not_supported, required};
use super::registry::{CustomResourceInfo, PrinterColumn, ResourceInfo};
use super::schema::StructuralSchema;

/// The finalizer the apiextensions-apiserver puts on every CRD to delete its custom resources.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `SetDefaults_CustomResourceDefinition*`.
pub fn default_crd(crd: &mut Value) {
    let kind = text(crd, "/spec/names/kind").to_string();
    if let Some(names) = crd
        .pointer_mut("/spec/names")
        .and_then(Value::as_object_mut)
    {
        if names.get("singular").is_none_or(|s| s.as_str() == Some("")) {
            names.insert("singular".into(), json!(kind.to_ascii_lowercase()));
        }
        if names.get("listKind").is_none_or(|s| s.as_str() == Some("")) && !kind.is_empty() {
            names.insert("listKind".into(), json!(format!("{kind}List")));
        }
    }
    if let Some(spec) = crd.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("conversion")
            .or_insert_with(|| json!({"strategy": "None"}));
    }
}

/// The 422 causes for an invalid CRD (the checks users hit; not every upstream rule).
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let name = text(crd, "/metadata/name");
    if group.is_empty() {
        out.push(required("spec.group", ""));
    } else if !group.contains('.') {
        out.push(invalid_value(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    if name != format!("{plural}.{group}") {
        out.push(invalid_value(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if plural.is_empty() {
        out.push(required("spec.names.plural", ""));
    }
    if text(crd, "/spec/names/kind").is_empty() {
        out.push(required("spec.names.kind", ""));
    }
    let scope = text(crd, "/spec/scope");
    if !matches!(scope, "Namespaced" | "Cluster") {
        out.push(not_supported(
            "spec.scope",
            &json!(scope),
            &["Cluster", "Namespaced"],
        ));
    }
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if versions.is_empty() {
        out.push(invalid_value(
            "spec.versions",
            &Value::Null,
            "must have exactly one version marked as storage version",
        ));
    } else {
        let storage = versions.iter().filter(|v| v["storage"] == true).count();
        if storage != 1 {
            out.push(invalid_value(
                "spec.versions",
                &Value::Array(versions.clone()),
                "must have exactly one version marked as storage version",
            ));
        }
    }
    for (i, v) in versions.iter().enumerate() {
        let field = format!("spec.versions[{i}]");
        if v["name"].as_str().is_none_or(str::is_empty) {
            out.push(required(&format!("{field}.name"), ""));
        }
        match v.pointer("/schema/openAPIV3Schema") {
            None | Some(Value::Null) => out.push(required(
                &format!("{field}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
            Some(schema) => {
                if let Err(e) = StructuralSchema::compile(schema) {
                    match e {
                        super::schema::SchemaError::NotStructural(errs) => {
                            for msg in errs {
                                out.push(Cause {
                                    reason: "FieldValueInvalid".into(),
                                    message: msg,
                                    field: format!("{field}.schema.openAPIV3Schema"),
                                });
                            }
                        }
                        other => out.push(forbidden_field(
                            &format!("{field}.schema.openAPIV3Schema"),
                            &other.to_string(),
                        )),
                    }
                }
            }
        }
    }
    out
}

/// The status the CRD controllers converge to: names accepted, established, stored versions.
pub fn crd_status(crd: &Value, old_status: Option<&Value>, now: &str) -> Value {
    let mut accepted = crd
        .pointer("/spec/names")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if let Some(m) = accepted.as_object_mut() {
        m.retain(|_, v| !v.is_null());
    }
    let storage: Vec<Value> = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == true)
        .map(|v| v["name"].clone())
        .collect();
    let mut stored: Vec<Value> = old_status
        .and_then(|s| s["storedVersions"].as_array())
        .cloned()
        .unwrap_or_default();
    for s in storage {
        if !stored.contains(&s) {
            stored.push(s);
        }
    }
    let old_cond = |t: &str| -> Option<Value> {
        old_status?
            .get("conditions")?
            .as_array()?
            .iter()
            .find(|c| c["type"] == t)
            .cloned()
    };
    let cond = |t: &str, reason: &str, message: &str| {
        old_cond(t).filter(|c| c["status"] == "True").unwrap_or_else(|| {
            json!({"type": t, "status": "True", "lastTransitionTime": now, "reason": reason, "message": message})
        })
    };
    let mut conditions = vec![
        cond("NamesAccepted", "NoConflicts", "no conflicts found"),
        cond(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    if crd.pointer("/metadata/deletionTimestamp").is_some() {
        conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": now,
            "reason": "InstanceDeletionInProgress", "message": "CustomResource deletion is in progress"}));
    }
    json!({"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored})
}

/// The resources a CRD serves (one per served version), each with its compiled schema.
pub fn crd_resources(crd: &Value) -> Vec<(ResourceInfo, Option<Arc<StructuralSchema>>)> {
    let names = crd.pointer("/spec/names").cloned().unwrap_or_default();
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s.as_str().map(str::to_string))
            .collect()
    };
    let crd_name = text(crd, "/metadata/name").to_string();
    let kind = text(&names, "/kind").to_string();
    let mut out = Vec::new();
    for v in crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|v| v["served"] == true)
    {
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .cloned()
            .unwrap_or(Value::Null);
        let compiled = StructuralSchema::compile(&schema).ok().map(Arc::new);
        let mut subresources = Vec::new();
        if v.pointer("/subresources/status").is_some() {
            subresources.push("status".to_string());
        }
        if v.pointer("/subresources/scale").is_some() {
            subresources.push("scale".to_string());
        }
        let printer_columns = v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| PrinterColumn {
                name: text(c, "/name").to_string(),
                type_: text(c, "/type").to_string(),
                format: text(c, "/format").to_string(),
                description: text(c, "/description").to_string(),
                priority: c["priority"].as_i64().unwrap_or(0) as i32,
                json_path: text(c, "/jsonPath").to_string(),
            })
            .collect();
        let info = ResourceInfo {
            group: text(crd, "/spec/group").to_string(),
            version: text(v, "/name").to_string(),
            kind: kind.clone(),
            list_kind: text(&names, "/listKind").to_string(),
            plural: text(&names, "/plural").to_string(),
            singular: text(&names, "/singular").to_string(),
            short_names: strs(&names["shortNames"]),
            namespaced: text(crd, "/spec/scope") == "Namespaced",
            subresources,
            categories: strs(&names["categories"]),
            printer_columns,
            custom: Some(Arc::new(CustomResourceInfo {
                schema,
                crd_name: crd_name.clone(),
            })),
        };
        out.push((info, compiled));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}})
    }

    #[test]
    fn valid_crd_serves_its_versions() {
        let mut c = crd();
        default_crd(&mut c);
        assert!(validate_crd(&c).is_empty());
        assert_eq!(c["spec"]["names"]["listKind"], "WidgetList");
        let res = crd_resources(&c);
        assert_eq!(res.len(), 1);
        let (info, schema) = &res[0];
        assert_eq!(info.singular, "widget");
        assert_eq!(info.subresources, ["status"]);
        assert_eq!(info.printer_columns[0].json_path, ".spec.size");
        assert!(schema.is_some());
        let status = crd_status(&c, None, "2024-01-01T00:00:00Z");
        assert_eq!(status["conditions"][1]["type"], "Established");
        assert_eq!(status["storedVersions"], json!(["v1"]));
        assert_eq!(status["acceptedNames"]["kind"], "Widget");
    }

    #[test]
    fn invalid_crd_causes() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"] = json!({"properties": {"spec": {}}});
        let causes = validate_crd(&c);
        assert!(causes.iter().any(|c| c.field == "metadata.name"));
        assert!(
            causes
                .iter()
                .any(|c| c.field == "spec.versions[0].schema.openAPIV3Schema")
        );
    }
}
