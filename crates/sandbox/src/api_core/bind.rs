//! POST `pods/<name>/binding`: assigning a pod to a node as kube-apiserver's binding storage does.
//!
//! Must not schedule: the caller chooses the node.

use serde_json::{Value, json};

use crate::api_kinds::{self, now_rfc3339};
use crate::api_status::ApiError;
use crate::store::{ResKey, StoreError, object_rv};

use super::api::Api;
use super::object_meta::{meta_mut, meta_str};
use super::options::Written;

impl Api {
    /// POST `pods/<name>/binding`.
    pub fn bind(&self, ns: &str, name: &str, mut body: Value) -> Result<Written, ApiError> {
        if body
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("Binding")
            != "Binding"
        {
            return Err(ApiError::bad_request(
                "the kind in the data does not match the expected kind (Binding)",
            ));
        }
        body["apiVersion"] = json!("v1");
        body["kind"] = json!("Binding");
        if let Some(Err(e)) = api_kinds::typed_roundtrip("v1", "Binding", &body) {
            return Err(ApiError::bad_request(format!(
                "Binding in version \"v1\" cannot be handled as a Binding: {e}"
            )));
        }
        let target = body["target"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if target.is_empty() {
            return Err(ApiError::invalid1(
                "",
                "Binding",
                name,
                "target.name",
                "FieldValueRequired",
                "Required value",
            ));
        }
        let res = ResKey::new("", "pods");
        let key = (ns.to_string(), name.to_string());
        loop {
            let Some(current) = self.store.get(&res, &key) else {
                return Err(ApiError::not_found("", "pods", name));
            };
            if current.pointer("/metadata/deletionTimestamp").is_some() {
                return Err(ApiError::conflict(
                    "",
                    "pods/binding",
                    name,
                    &format!("pod {name} is being deleted, cannot be assigned to a host"),
                ));
            }
            let node = current["spec"]["nodeName"].as_str().unwrap_or_default();
            if !node.is_empty() {
                return Err(ApiError::conflict(
                    "",
                    "pods/binding",
                    name,
                    &format!("pod {name} is already assigned to node {node:?}"),
                ));
            }
            let uid = meta_str(&body, "uid");
            if !uid.is_empty() && uid != meta_str(&current, "uid") {
                return Err(ApiError::conflict(
                    "",
                    "pods/binding",
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta_str(&current, "uid")
                    ),
                ));
            }
            let mut new = (*current).clone();
            new["spec"]["nodeName"] = json!(target);
            if let Some(ann) = body
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
            {
                let meta = meta_mut(&mut new);
                let a = meta.entry("annotations").or_insert_with(|| json!({}));
                if let Some(a) = a.as_object_mut() {
                    for (k, v) in ann {
                        a.insert(k.clone(), v.clone());
                    }
                }
            }
            let cond = json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": now_rfc3339()});
            let status = new["status"].as_object_mut();
            if let Some(status) = status {
                let conds = status.entry("conditions").or_insert_with(|| json!([]));
                if let Some(list) = conds.as_array_mut() {
                    list.retain(|c| c["type"] != "PodScheduled");
                    list.push(cond);
                }
            }
            match self.store.replace(&res, object_rv(&current), new) {
                Ok(_) => {
                    return Ok(Written {
                        body: json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                        code: 201,
                        warnings: Vec::new(),
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::not_found("", "pods", &e.to_string())),
            }
        }
    }
}
