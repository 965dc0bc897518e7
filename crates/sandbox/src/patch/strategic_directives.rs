//! Strategic merge patch directives (`$patch`, `$retainKeys`, `$deleteFromPrimitiveList`,
//! `$setElementOrder`): their markers, the errors apimachinery's strategicpatch returns for them,
//! and the helpers that read, check or strip them.
//!
//! Must not merge maps or lists: that is `strategic.rs`.

use serde_json::{Map, Value};

use super::go_values::{go_s, go_type_name, go_v};
use super::types::PatchError;

pub(super) const DIRECTIVE_MARKER: &str = "$patch";
pub(super) const DELETE_DIRECTIVE: &str = "delete";
pub(super) const REPLACE_DIRECTIVE: &str = "replace";
pub(super) const MERGE_DIRECTIVE: &str = "merge";
pub(super) const RETAIN_KEYS_STRATEGY: &str = "retainKeys";
const RETAIN_KEYS_DIRECTIVE: &str = "$retainKeys";
pub(super) const DELETE_FROM_PRIMITIVE_LIST_PREFIX: &str = "$deleteFromPrimitiveList";
pub(super) const SET_ELEMENT_ORDER_PREFIX: &str = "$setElementOrder";

fn err_bad_retain_keys() -> PatchError {
    PatchError::BadRequest("invalid patch format of retainKeys".to_string())
}

fn err_bad_set_element_order() -> PatchError {
    PatchError::BadRequest("invalid patch format of setElementOrder list".to_string())
}

fn err_bad_primitive_list() -> PatchError {
    PatchError::BadRequest("invalid patch format of primitive list".to_string())
}

pub(super) fn err_no_merge_key(m: &Map<String, Value>, key: &str) -> PatchError {
    PatchError::Internal(format!(
        "map: {} does not contain declared merge key: {key}",
        go_v(&Value::Object(m.clone()))
    ))
}

pub(super) fn err_bad_arg_type(expected: &str, actual: &Value) -> PatchError {
    PatchError::Internal(format!(
        "expected a {expected}, but received a {}",
        go_type_name(actual)
    ))
}

pub(super) fn err_bad_patch_type(directive: &Value, m: &Map<String, Value>) -> PatchError {
    PatchError::Internal(format!(
        "unknown patch type: {} in map: {}",
        go_s(directive),
        go_v(&Value::Object(m.clone()))
    ))
}

pub(super) const SLICE_TYPE: &str = "[]interface {}";
pub(super) const MAP_TYPE: &str = "map[string]interface {}";

pub(super) fn handle_directive_in_merge_map(
    directive: &Value,
    mut patch: Map<String, Value>,
) -> Result<Map<String, Value>, PatchError> {
    match directive.as_str() {
        Some(REPLACE_DIRECTIVE) => {
            patch.remove(DIRECTIVE_MARKER);
            Ok(patch)
        }
        Some(DELETE_DIRECTIVE) => Ok(Map::new()),
        _ => Err(err_bad_patch_type(directive, &patch)),
    }
}

/// `extractKey`: the list field a `$prefix/field` directive applies to.
pub(super) fn extract_key(s: &str, prefix: &str) -> Result<String, PatchError> {
    match s.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest.to_string()),
        _ if prefix == DELETE_FROM_PRIMITIVE_LIST_PREFIX => Err(err_bad_primitive_list()),
        _ => Err(err_bad_set_element_order()),
    }
}

pub(super) fn apply_retain_keys_directive(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.remove(RETAIN_KEYS_DIRECTIVE) else {
        return Ok(());
    };
    let Value::Array(keep) = retain else {
        return Err(err_bad_retain_keys());
    };
    let kept = |k: &str| keep.iter().any(|v| v.as_str() == Some(k));
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX)
            || k.starts_with(SET_ELEMENT_ORDER_PREFIX)
        {
            continue;
        }
        if !kept(k) {
            return Err(err_bad_retain_keys());
        }
    }
    original.retain(|k, _| kept(k));
    Ok(())
}

/// Checks that the patch list's items appear in the `$setElementOrder` list, in its order.
pub(super) fn validate_patch_with_set_order_list(
    patch_list: &[Value],
    set_order: &[Value],
    merge_key: &str,
) -> Result<(), PatchError> {
    if set_order.is_empty() || patch_list.is_empty() {
        return Ok(());
    }
    let non_delete: Vec<Value> = if merge_key.is_empty() {
        patch_list.to_vec()
    } else {
        extract_to_delete_items(patch_list.to_vec())?.0
    };
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < set_order.len() {
        if contains_directive_marker(&non_delete[pi]) {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(&non_delete[pi], &set_order[si], merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= set_order.len() {
        return Err(PatchError::Internal(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER_PREFIX} list:\n{}\n",
            go_v(&Value::Array(patch_list.to_vec())),
            go_v(&Value::Array(set_order.to_vec()))
        )));
    }
    Ok(())
}

fn contains_directive_marker(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.contains_key(DIRECTIVE_MARKER))
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> Result<bool, PatchError> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = left
        .as_object()
        .ok_or_else(|| err_bad_arg_type(MAP_TYPE, left))?;
    let r = right
        .as_object()
        .ok_or_else(|| err_bad_arg_type(MAP_TYPE, right))?;
    let lv = l
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(l, merge_key))?;
    let rv = r
        .get(merge_key)
        .ok_or_else(|| err_no_merge_key(r, merge_key))?;
    Ok(lv == rv)
}

/// Splits a list of maps into the items to keep and those marked `$patch: delete`.
pub(super) fn extract_to_delete_items(
    list: Vec<Value>,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let (delete, keep) = partition_maps_by(list, |m| {
        Ok(m.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some(DELETE_DIRECTIVE))
    })?;
    Ok((keep, delete))
}

/// Splits a list that must hold maps only into those `test` holds for and the others, in list
/// order; the first item that is not a map, or the first error of `test`, is the error.
pub(super) fn partition_maps_by(
    list: Vec<Value>,
    mut test: impl FnMut(&Map<String, Value>) -> Result<bool, PatchError>,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut yes = Vec::new();
    let mut no = Vec::new();
    for v in list {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        if test(m)? {
            yes.push(v);
        } else {
            no.push(v);
        }
    }
    Ok((yes, no))
}

/// Drops maps carrying a `$patch` directive (recursively); `None` means "drop this value".
pub(super) fn remove_directives(v: Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.contains_key(DIRECTIVE_MARKER) {
                return None;
            }
            Some(Value::Object(
                m.into_iter()
                    .filter_map(|(k, v)| remove_directives(v).map(|v| (k, v)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(
            a.into_iter().filter_map(remove_directives).collect(),
        )),
        other => Some(other),
    }
}

pub(super) fn discard_null_values(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, v| !v.is_null());
            m.values_mut().for_each(discard_null_values);
        }
        Value::Array(a) => a.iter_mut().for_each(discard_null_values),
        _ => {}
    }
}
