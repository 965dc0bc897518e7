//! List types (apiextensions `schema/listtype`): duplicates in `x-kubernetes-list-type: set`
//! lists and duplicate keys in `map` lists, compared as Go compares decoded values.
//!
//! Must not check anything else about the lists.

use serde_json::{Map, Value};

use super::errors::{FieldError, FieldErrorKind};
use super::node::{Node, child_path};
use super::render::go_json;

pub(super) fn list_sets_and_maps_object(
    s: &Node,
    path: &str,
    m: &Map<String, Value>,
    out: &mut Vec<FieldError>,
) {
    if let Some(add) = s.additional_schema() {
        for (k, v) in m {
            list_sets_and_maps(add, &format!("{path}[{k}]"), v, out);
        }
    }
    for (k, v) in m {
        if let Some(p) = s.properties.get(k) {
            list_sets_and_maps(p, &child_path(path, k), v, out);
        }
    }
}

fn list_sets_and_maps(s: &Node, path: &str, x: &Value, out: &mut Vec<FieldError>) {
    match x {
        Value::Array(a) => {
            match s.list_type.as_deref() {
                Some("set") => {
                    for i in non_unique(a) {
                        out.push(FieldError::new(
                            FieldErrorKind::Duplicate,
                            &format!("{path}[{i}]"),
                            Some(a[i].clone()),
                            "",
                        ));
                    }
                }
                Some("map") => validate_list_map(s, path, a, out),
                _ => {}
            }
            if let Some(items) = &s.items {
                for (i, v) in a.iter().enumerate() {
                    list_sets_and_maps(items, &format!("{path}[{i}]"), v, out);
                }
            }
        }
        Value::Object(m) => list_sets_and_maps_object(s, path, m, out),
        _ => {}
    }
}

/// The indices of second occurrences (only the first repeat of each value is reported).
fn non_unique(a: &[Value]) -> Vec<usize> {
    let mut seen: Vec<(String, usize)> = Vec::new();
    let mut out = Vec::new();
    for (i, x) in a.iter().enumerate() {
        // Scalars compare as Go interface values (int64 1 != float64 1); compounds as JSON text.
        let key = match x {
            Value::Object(_) | Value::Array(_) => format!("c{}", go_json(x)),
            Value::Number(n) if n.is_f64() => format!("f{}", go_json(x)),
            other => format!("s{}", go_json(other)),
        };
        match seen.iter_mut().find(|(k, _)| *k == key) {
            Some((_, times)) => {
                *times += 1;
                if *times == 2 {
                    out.push(i);
                }
            }
            None => seen.push((key, 1)),
        }
    }
    out
}

fn validate_list_map(s: &Node, path: &str, a: &[Value], out: &mut Vec<FieldError>) {
    for (i, x) in a.iter().enumerate() {
        if !x.is_null() && !x.is_object() {
            out.push(FieldError::new(
                FieldErrorKind::Invalid,
                &format!("{path}[{i}]"),
                Some(x.clone()),
                "must be an object for an array of list-type map",
            ));
            return;
        }
    }
    if a.len() <= 1 {
        return;
    }
    let keys: Vec<Value> = a
        .iter()
        .map(|x| {
            let mut key = Map::new();
            if let Value::Object(o) = x {
                for k in &s.list_map_keys {
                    if let Some(v) = o.get(k) {
                        key.insert(k.clone(), v.clone());
                    }
                }
            }
            Value::Object(key)
        })
        .collect();
    // With one key Go compares the bare key values (scalars by type); the reported value is the
    // same one-entry map either way.
    let compared: Vec<Value> = if s.list_map_keys.len() == 1 {
        let k = &s.list_map_keys[0];
        keys.iter()
            .map(|m| match m.get(k) {
                Some(v) => v.clone(),
                // An absent key is its own marker value, distinct from any JSON value.
                None => Value::Array(vec![Value::String("\u{0}unspecified".into())]),
            })
            .collect()
    } else {
        keys.clone()
    };
    for i in non_unique(&compared) {
        out.push(FieldError::new(
            FieldErrorKind::Duplicate,
            &format!("{path}[{i}]"),
            Some(keys[i].clone()),
            "",
        ));
    }
}
