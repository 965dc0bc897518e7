//! Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch, server side: parallel lists
//! merged, unmatched nulls ignored): maps merged key by key, lists merged by their merge key or
//! replaced, as the kind's metadata says.
//!
//! The recursive merge only; directives, list order and metadata are sibling files.

use serde_json::{Map, Value};

use super::go_values::{GoType, go_type, json_kind_word, parse_json};
use super::strategic_directives::{
    DELETE_DIRECTIVE, DELETE_FROM_PRIMITIVE_LIST_PREFIX, DIRECTIVE_MARKER, MAP_TYPE,
    MERGE_DIRECTIVE, REPLACE_DIRECTIVE, SET_ELEMENT_ORDER_PREFIX, SLICE_TYPE,
    apply_retain_keys_directive, discard_null_values, err_bad_arg_type, err_bad_patch_type,
    err_no_merge_key, extract_key, handle_directive_in_merge_map, remove_directives,
    validate_patch_with_set_order_list,
};
use super::strategic_meta::{Schema, list_strategy};
use super::strategic_order::{
    find_map_in_slice, normalize_element_order, partition_maps, partition_primitives,
    slice_element_type,
};
use super::types::PatchError;

pub(super) fn strategic_merge_patch(
    original: &Value,
    body: &[u8],
    schema: Schema,
) -> Result<Value, PatchError> {
    let patch = match parse_json(body).map_err(PatchError::BadRequest)? {
        Value::Object(p) => p,
        Value::Null => Map::new(),
        other => {
            return Err(PatchError::BadRequest(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_kind_word(&other)
            )));
        }
    };
    let original = match original {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    merge_map(original, patch, schema).map(Value::Object)
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: Schema,
) -> Result<Map<String, Value>, PatchError> {
    if let Some(directive) = patch.get(DIRECTIVE_MARKER).cloned() {
        return handle_directive_in_merge_map(&directive, patch);
    }
    apply_retain_keys_directive(&mut original, &mut patch)?;
    merge_patch_into_original(&mut original, &mut patch, schema)?;

    for (k, patch_v) in patch {
        let (key, is_delete_list) = if k.starts_with(DELETE_FROM_PRIMITIVE_LIST_PREFIX) {
            (extract_key(&k, DELETE_FROM_PRIMITIVE_LIST_PREFIX)?, true)
        } else {
            (k, false)
        };
        if patch_v.is_null() {
            original.remove(&key);
            continue;
        }
        let same_type = original
            .get(&key)
            .map(|orig| go_type(orig) == go_type(&patch_v));
        if same_type != Some(true) {
            // Missing from the original, or of another type: the patch value wins.
            if !is_delete_list {
                let mut v = patch_v;
                discard_null_values(&mut v);
                match remove_directives(v) {
                    Some(v) => {
                        original.insert(key, v);
                    }
                    None => {
                        original.remove(&key);
                    }
                }
            }
            continue;
        }
        let Some(orig) = original.remove(&key) else {
            continue;
        };
        let merged = match (orig, patch_v) {
            (Value::Object(o), Value::Object(p)) => {
                let (sub, tag, _) = schema.lookup(&key)?;
                if list_strategy(tag) == REPLACE_DIRECTIVE {
                    Some(Value::Object(p))
                } else {
                    Some(Value::Object(merge_map(o, p, sub)?))
                }
            }
            (Value::Array(o), Value::Array(p)) => {
                let (sub, tag, merge_key) = schema.lookup(&key)?;
                Some(Value::Array(merge_slice_handler(
                    o,
                    p,
                    sub,
                    list_strategy(tag),
                    merge_key,
                    is_delete_list,
                )?))
            }
            (_, p) => remove_directives(p),
        };
        if let Some(v) = merged {
            original.insert(key, v);
        }
    }
    Ok(original)
}

/// Processes every `$setElementOrder/<list>` directive together with its list: merges the list
/// and orders the result by the directive, then the patch, then the live object.
fn merge_patch_into_original(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
    schema: Schema,
) -> Result<(), PatchError> {
    let keys: Vec<String> = patch
        .keys()
        .filter(|k| k.starts_with(SET_ELEMENT_ORDER_PREFIX))
        .cloned()
        .collect();
    for key in keys {
        let Some(order_value) = patch.remove(&key) else {
            continue;
        };
        let Value::Array(set_order) = order_value else {
            return Err(err_bad_arg_type(SLICE_TYPE, &order_value));
        };
        let original_key = extract_key(&key, SET_ELEMENT_ORDER_PREFIX)?;
        let original_list = match original.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
        };
        let patch_list = match patch.get(&original_key) {
            None => None,
            Some(Value::Array(a)) => Some(a.clone()),
            Some(other) => return Err(err_bad_arg_type(SLICE_TYPE, other)),
        };
        let (sub, tag, merge_key) = schema.lookup(&original_key)?;
        let strategy = list_strategy(tag);
        validate_patch_with_set_order_list(
            patch_list.as_deref().unwrap_or(&[]),
            &set_order,
            merge_key,
        )?;

        let original_items = original_list.clone().unwrap_or_default();
        let patch_items_raw = patch_list.clone().unwrap_or_default();
        let merged = match (original_list, patch_list) {
            (Some(o), None) => o,
            (None, Some(p)) => match remove_directives(Value::Array(p)) {
                Some(Value::Array(v)) => v,
                _ => continue,
            },
            (Some(o), Some(p)) => merge_slice_handler(o, p, sub, strategy, merge_key, false)?,
            (None, None) => continue,
        };

        let (patch_items, server_only) = if merge_key.is_empty() {
            partition_primitives(merged, &set_order)
        } else {
            partition_maps(merged, &set_order, merge_key)?
        };
        let kind = slice_element_type(&[&original_items, &patch_items_raw])?;
        let both = normalize_element_order(
            patch_items,
            server_only,
            &set_order,
            &original_items,
            merge_key,
            kind,
        )?;
        original.insert(original_key.clone(), Value::Array(both));
        patch.remove(&original_key);
    }
    Ok(())
}

fn merge_slice_handler(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Schema,
    strategy: &str,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if strategy == MERGE_DIRECTIVE || is_delete_list {
        merge_slice(original, patch, schema, merge_key, is_delete_list)
    } else {
        Ok(patch)
    }
}

fn merge_slice(
    original: Vec<Value>,
    patch: Vec<Value>,
    schema: Schema,
    merge_key: &str,
    is_delete_list: bool,
) -> Result<Vec<Value>, PatchError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    let kind = slice_element_type(&[&original, &patch])?;
    let (server_order, patch, merged) = if kind != GoType::Map {
        if is_delete_list {
            return Ok(original
                .into_iter()
                .filter(|v| !patch.contains(v))
                .collect());
        }
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(patch.iter()) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        (original, patch, merged)
    } else {
        if merge_key.is_empty() {
            return Err(PatchError::Internal(format!(
                "cannot merge lists without merge key for {}",
                schema.name()
            )));
        }
        let (original, patch) = merge_slice_with_special_elements(original, patch, merge_key)?;
        let merged =
            merge_slice_without_special_elements(original.clone(), &patch, merge_key, schema)?;
        (original, patch, merged)
    };
    let (patch_items, server_only) = if merge_key.is_empty() {
        partition_primitives(merged, &patch)
    } else {
        partition_maps(merged, &patch, merge_key)?
    };
    normalize_element_order(
        patch_items,
        server_only,
        &patch,
        &server_order,
        merge_key,
        kind,
    )
}

/// Applies `$patch: delete` / `$patch: replace` list items; returns the new original and the
/// patch items without directives.
fn merge_slice_with_special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    let mut plain = Vec::new();
    let mut replace = false;
    for v in patch {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, &v));
        };
        let Some(directive) = m.get(DIRECTIVE_MARKER) else {
            plain.push(v);
            continue;
        };
        match directive.as_str() {
            Some(DELETE_DIRECTIVE) => {
                let Some(value) = m.get(merge_key) else {
                    return Err(err_no_merge_key(m, merge_key));
                };
                for (i, item) in original.iter().enumerate() {
                    if !item.is_object() {
                        return Err(PatchError::Internal(format!(
                            "value for key {i} is not a map"
                        )));
                    }
                }
                original.retain(|item| item.get(merge_key) != Some(value));
            }
            Some(REPLACE_DIRECTIVE) => replace = true,
            Some(MERGE_DIRECTIVE) => {
                return Err(PatchError::Internal(
                    "merging lists cannot yet be specified in the patch".to_string(),
                ));
            }
            _ => return Err(err_bad_patch_type(directive, m)),
        }
    }
    if replace {
        return Ok((plain, Vec::new()));
    }
    Ok((original, plain))
}

fn merge_slice_without_special_elements(
    mut original: Vec<Value>,
    patch: &[Value],
    merge_key: &str,
    schema: Schema,
) -> Result<Vec<Value>, PatchError> {
    for v in patch {
        let Some(m) = v.as_object() else {
            return Err(err_bad_arg_type(MAP_TYPE, v));
        };
        let Some(value) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        match find_map_in_slice(&original, merge_key, value)? {
            Some(i) => {
                let current = match std::mem::take(&mut original[i]) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                original[i] = Value::Object(merge_map(current, m.clone(), schema)?);
            }
            None => original.push(v.clone()),
        }
    }
    Ok(original)
}
