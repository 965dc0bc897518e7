//! Element order of merged strategic-merge lists: list element types, partitions of merged items
//! by the patch, and the stable ordering by `$setElementOrder`, patch and live object that
//! apimachinery's strategicpatch applies (`normalizeElementOrder`, `mergeSortedSlice`).
//!
//! Orders items only: must not merge them.

use serde_json::Value;

use super::go_values::{GoType, go_type, go_v};
use super::strategic_directives::{
    MAP_TYPE, err_bad_arg_type, err_no_merge_key, extract_to_delete_items, partition_maps_by,
};
use super::types::PatchError;

/// `sliceElementType`: all elements must share one type, which must not be a list.
pub(super) fn slice_element_type(slices: &[&[Value]]) -> Result<GoType, PatchError> {
    let mut prev: Option<GoType> = None;
    for v in slices.iter().flat_map(|s| s.iter()) {
        let t = go_type(v);
        match prev {
            None => {
                if t == GoType::Nil {
                    // Go calls Kind() on a nil reflect.Type here and panics.
                    return Err(PatchError::Internal(
                        "runtime error: invalid memory address or nil pointer dereference"
                            .to_string(),
                    ));
                }
                if t == GoType::Slice {
                    return Err(PatchError::Unprocessable(
                        "lists of lists are not supported".to_string(),
                    ));
                }
                prev = Some(t);
            }
            Some(p) if p != t => {
                let all = Value::Array(slices.iter().map(|s| Value::Array(s.to_vec())).collect());
                return Err(PatchError::Internal(format!(
                    "list element types are not identical: {}",
                    go_v(&all)
                )));
            }
            Some(_) => {}
        }
    }
    prev.ok_or_else(|| PatchError::Internal("no elements in any of the given slices".to_string()))
}

pub(super) fn find_map_in_slice(
    list: &[Value],
    key: &str,
    value: &Value,
) -> Result<Option<usize>, PatchError> {
    for (i, v) in list.iter().enumerate() {
        let Some(m) = v.as_object() else {
            return Err(PatchError::Internal(format!(
                "value for key {i} is not a map"
            )));
        };
        if m.get(key) == Some(value) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

pub(super) fn partition_primitives(merged: Vec<Value>, by: &[Value]) -> (Vec<Value>, Vec<Value>) {
    merged.into_iter().partition(|v| by.contains(v))
}

pub(super) fn partition_maps(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: &str,
) -> Result<(Vec<Value>, Vec<Value>), PatchError> {
    // (patch items, server-only items)
    partition_maps_by(merged, |m| {
        let Some(value) = m.get(merge_key) else {
            return Err(err_no_merge_key(m, merge_key));
        };
        Ok(find_map_in_slice(by, merge_key, value)?.is_some())
    })
}

/// The value an item is identified by: its merge key for maps, itself otherwise.
fn identity<'a>(item: &'a Value, merge_key: &str, kind: GoType) -> Option<&'a Value> {
    if kind == GoType::Map {
        item.as_object().and_then(|m| m.get(merge_key))
    } else {
        Some(item)
    }
}

fn index_in(list: &[Value], item: &Value, merge_key: &str, kind: GoType) -> Option<usize> {
    let wanted = identity(item, merge_key, kind);
    list.iter()
        .position(|v| identity(v, merge_key, kind) == wanted)
}

/// Sorts the patch items by `patch_order` and the server-only items by `server_order`, then
/// interleaves them keeping both relative orders.
pub(super) fn normalize_element_order(
    patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, PatchError> {
    let patch = normalize_slice_order(patch, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    Ok(merge_sorted_slice(
        server_only,
        patch,
        server_order,
        merge_key,
        kind,
    ))
}

fn normalize_slice_order(
    to_sort: Vec<Value>,
    order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Result<Vec<Value>, PatchError> {
    let (mut to_sort, to_delete) = if kind == GoType::Map {
        for v in to_sort.iter().chain(order.iter()) {
            let Some(m) = v.as_object() else {
                return Err(err_bad_arg_type(MAP_TYPE, v));
            };
            if !m.contains_key(merge_key) {
                return Err(err_no_merge_key(m, merge_key));
            }
        }
        extract_to_delete_items(to_sort)?
    } else {
        (to_sort, Vec::new())
    };
    // Go's sort.SliceStable with a "less" that is true whenever either item is unranked; for the
    // list sizes seen here that is an insertion sort, reproduced exactly.
    let ranks: Vec<Option<usize>> = to_sort
        .iter()
        .map(|v| index_in(order, v, merge_key, kind))
        .collect();
    let mut idx: Vec<usize> = (0..to_sort.len()).collect();
    let less = |a: usize, b: usize| match (ranks[a], ranks[b]) {
        (Some(x), Some(y)) => x < y,
        _ => true,
    };
    for i in 1..idx.len() {
        let mut j = i;
        while j > 0 && less(idx[j], idx[j - 1]) {
            idx.swap(j, j - 1);
            j -= 1;
        }
    }
    let mut slots: Vec<Option<Value>> = to_sort.drain(..).map(Some).collect();
    let mut sorted: Vec<Value> = idx.into_iter().filter_map(|i| slots[i].take()).collect();
    sorted.extend(to_delete);
    Ok(sorted)
}

fn merge_sorted_slice(
    left: Vec<Value>,
    right: Vec<Value>,
    server_order: &[Value],
    merge_key: &str,
    kind: GoType,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    index_in(server_order, l, merge_key, kind),
                    index_in(server_order, r, merge_key, kind),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}
