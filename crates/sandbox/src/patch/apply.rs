//! The entry points of PATCH: which patch types a kind accepts (strategic merge only for built-in
//! kinds with metadata) and `apply_patch`, which hands the body to the right algorithm.
//!
//! Only dispatches: each algorithm lives in its own file.

use serde_json::Value;

use super::json_patch::json_patch;
use super::merge_patch::merge_patch;
use super::strategic::strategic_merge_patch;
use super::strategic_meta::root_schema;
use super::types::{PatchError, PatchType};

/// The 415 error for a patch type the resource does not accept, listing the ones it does as
/// kube-apiserver does (server-side apply last).
pub fn unsupported_media_type(api_version: &str, kind: &str) -> PatchError {
    let mut accepted = vec![
        PatchType::Json.content_type(),
        PatchType::Merge.content_type(),
    ];
    if is_strategic_kind(api_version, kind) {
        accepted.push(PatchType::StrategicMerge.content_type());
    }
    accepted.push(PatchType::Apply.content_type());
    PatchError::UnsupportedMediaType(accepted.join(", "))
}

/// Whether the kind is a built-in type with strategic-merge metadata (custom resources have none).
pub fn is_strategic_kind(api_version: &str, kind: &str) -> bool {
    root_schema(api_version, kind).is_some()
}

/// Applies `patch` (the raw request body) to `original`, an object of the given apiVersion/kind.
pub fn apply_patch(
    api_version: &str,
    kind: &str,
    original: &Value,
    patch_type: PatchType,
    patch: &[u8],
) -> Result<Value, PatchError> {
    match patch_type {
        PatchType::Json => json_patch(original, patch),
        PatchType::Merge => merge_patch(original, patch),
        PatchType::StrategicMerge => {
            let schema = root_schema(api_version, kind)
                .ok_or_else(|| unsupported_media_type(api_version, kind))?;
            strategic_merge_patch(original, patch, schema)
        }
        PatchType::Apply => Err(unsupported_media_type(api_version, kind)),
    }
}
