//! PATCH (JSON, merge, strategic merge) and server-side apply: each computes the new object from
//! the current one and writes it through `guaranteed_update`.
//!
//! Patch semantics live in `crate::patch` and field ownership in `crate::ssa`; this file only
//! connects them to the update loop.

use serde_json::{Value, json};

use crate::api_kinds::now_rfc3339;
use crate::api_status::ApiError;
use crate::patch::{self, PatchType};
use crate::registry::ResourceInfo;
use crate::ssa;

use super::api::Api;
use super::object_meta::meta_mut;
use super::options::{WriteOptions, Written};
use super::resource_rules::storage_key;

impl Api {
    /// PATCH (JSON, merge, strategic) on the main resource or `status`.
    #[allow(clippy::too_many_arguments)]
    pub fn patch(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        patch_type: PatchType,
        body: &[u8],
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        if patch_type == PatchType::Apply {
            return Err(ApiError::bad_request(
                "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch",
            ));
        }
        if patch_type == PatchType::StrategicMerge
            && !patch::is_strategic_kind(&info.api_version(), &info.kind)
        {
            let e = patch::unsupported_media_type(&info.api_version(), &info.kind);
            return Err(ApiError::unsupported_media_type(e.to_string()));
        }
        let api_version = info.api_version();
        self.guaranteed_update(info, ns, name, sub, opts, false, &|current| {
            let Some(current) = current else {
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            patch::apply_patch(&api_version, &info.kind, current, patch_type, body).map_err(|e| {
                let status = e.to_status();
                ApiError {
                    code: e.status_code(),
                    reason: e.reason(),
                    message: e.status_message(),
                    details: status.get("details").cloned(),
                }
            })
        })
    }

    /// Server-side apply (`application/apply-patch+yaml`) by `manager`: creates the object or
    /// merges the manager's intent into it, refusing to change fields other managers applied
    /// unless `force` (see `ssa`).
    #[allow(clippy::too_many_arguments)]
    pub fn apply(
        &self,
        info: &ResourceInfo,
        ns: Option<&str>,
        name: &str,
        sub: Option<&str>,
        body: &[u8],
        manager: &str,
        force: bool,
        opts: &WriteOptions,
    ) -> Result<Written, ApiError> {
        let applied: Value = serde_json::from_slice(body)
            .or_else(|_| serde_saphyr::from_slice(body))
            .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
        if !applied.is_object() {
            return Err(ApiError::bad_request(
                "the body of an apply patch must be an object",
            ));
        }
        let now = now_rfc3339();
        let conflict = |c: ssa::Conflicts| ApiError {
            code: 409,
            reason: "Conflict",
            message: c.message(),
            details: Some(json!({"causes": c.0.iter().map(|(m, f)| json!({
                "reason": "FieldManagerConflict",
                "message": format!("conflict with \"{m}\""),
                "field": f,
            })).collect::<Vec<_>>()})),
        };
        let res = storage_key(info);
        if sub.is_none() && self.store.get(&res, &Self::key(ns, name)).is_none() {
            let mut created = ssa::apply(None, &applied, manager, force, &now).map_err(conflict)?;
            let meta = meta_mut(&mut created);
            meta.insert("name".into(), json!(name));
            if let Some(ns) = ns {
                meta.insert("namespace".into(), json!(ns));
            }
            match self.create(info, ns, created, opts) {
                // Lost a race with another create: apply to what won.
                Err(e) if e.code == 409 && e.reason == "AlreadyExists" => {}
                other => return other,
            }
        }
        self.guaranteed_update(info, ns, name, sub, opts, false, &|current| {
            let Some(current) = current else {
                return Err(ApiError::not_found(&info.group, &info.plural, name));
            };
            ssa::apply(Some(current), &applied, manager, force, &now).map_err(conflict)
        })
    }
}
