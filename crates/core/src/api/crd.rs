//! Generation of the DIJob CustomResourceDefinition checked in under `crds/`.
//!
//! Owns the post-processing that keeps the CRD installable with client-side `kubectl apply`
//! (whose last-applied annotation must stay under 256 KiB) while keeping the full pod-template
//! schema: descriptions inside the embedded pod template are dropped, validation is kept.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;
use schemars::{Schema, SchemaGenerator, json_schema};
use serde_json::Value;

use super::DIJob;

/// Schema of a free-form object whose content the API server must keep (status.profilings).
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The DIJob CRD as diorch installs it.
pub fn dijob_crd() -> CustomResourceDefinition {
    let mut crd = DIJob::crd();
    for version in &mut crd.spec.versions {
        if let Some(schema) = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
        {
            let mut value = match serde_json::to_value(&*schema) {
                Ok(v) => v,
                Err(_) => continue,
            };
            slim_schema(&mut value);
            if let Ok(slimmed) = serde_json::from_value(value) {
                *schema = slimmed;
            }
        }
    }
    crd
}

/// Drops descriptions inside the embedded pod templates and volumes (copies of the Kubernetes
/// API reference that `kubectl explain pod.spec` already serves) so the CRD stays small.
fn slim_schema(root: &mut Value) {
    normalize(root);
    if let Some(template) =
        root.pointer_mut("/properties/spec/properties/tasks/items/properties/template")
        && let Value::Object(map) = template
    {
        // Serde's default for a missing template is a Rust convenience; the API has none.
        map.remove("default");
    }
    let Some(spec) = root.pointer_mut("/properties/spec/properties") else {
        return;
    };
    if let Some(volumes) = spec.get_mut("volumes") {
        strip_descriptions(volumes, true);
    }
    if let Some(template) = spec.pointer_mut("/tasks/items/properties/template") {
        strip_descriptions(template, true);
    }
}

/// Makes the generated schema read like a Kubernetes one: no `nullable` (an explicit null is then
/// pruned and defaulted, as DI-orchestrator's CRD does).
fn normalize(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("nullable");
            // Optional enums come out of schemars with a `null` member; Kubernetes enums have none.
            if let Some(Value::Array(members)) = map.get_mut("enum") {
                members.retain(|m| !m.is_null());
            }
            map.values_mut().for_each(normalize);
        }
        Value::Array(items) => items.iter_mut().for_each(normalize),
        _ => {}
    }
}

fn strip_descriptions(value: &mut Value, keep_top: bool) {
    match value {
        Value::Object(map) => {
            if !keep_top {
                map.remove("description");
            }
            for (key, child) in map.iter_mut() {
                // Under `properties` every key is a field name, not a schema keyword.
                if key == "properties" {
                    if let Value::Object(fields) = child {
                        for field in fields.values_mut() {
                            strip_descriptions(field, false);
                        }
                    }
                } else {
                    strip_descriptions(child, false);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| strip_descriptions(v, false)),
        _ => {}
    }
}

/// The CRD rendered as the YAML document checked in at `crds/dijobs.diengine.opendilab.org.yaml`.
pub fn dijob_crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&dijob_crd())
}
