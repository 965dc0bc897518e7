//! Pruning (apiextensions-apiserver `pkg/apiserver/schema/pruning`): drops fields a schema does not
//! declare, non-nullable nulls without a default, unknown ObjectMeta fields of embedded resources,
//! and prunes `default`s against their own schema when a CRD is loaded.
//!
//! Changes objects in place and reports dropped paths; must not validate or default.

use serde_json::Value;

use super::node::{Additional, Node, child_path};

const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn key_path(parent: &str, key: &str) -> String {
    child_path(parent, key)
}

pub(super) fn prune_value(
    x: &mut Value,
    s: Option<&Node>,
    is_root: bool,
    path: &str,
    out: &mut Vec<String>,
) {
    if let Some(s) = s
        && s.preserve_unknown
    {
        skip_prune(x, s, is_root, path, out);
        return;
    }
    match x {
        Value::Object(m) => {
            let Some(s) = s else {
                for k in m.keys() {
                    out.push(key_path(path, k));
                }
                m.clear();
                return;
            };
            let embedded = s.embedded || is_root;
            let keys: Vec<String> = m.keys().cloned().collect();
            for k in keys {
                if embedded && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(&k) {
                    if let Some(v) = m.get_mut(&k) {
                        prune_value(v, Some(prop), false, &key_path(path, &k), out);
                    }
                } else if let Some(add) = &s.additional {
                    if let Some(v) = m.get_mut(&k) {
                        let sub = match add {
                            Additional::Schema(n) => Some(n.as_ref()),
                            Additional::Allows(_) => None,
                        };
                        prune_value(v, sub, false, &key_path(path, &k), out);
                    }
                } else {
                    if !META_FIELDS.contains(&k.as_str()) || !path.is_empty() {
                        out.push(key_path(path, &k));
                    }
                    m.remove(&k);
                }
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, v) in a.iter_mut().enumerate() {
                prune_value(v, items, false, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn skip_prune(x: &mut Value, s: &Node, is_root: bool, path: &str, out: &mut Vec<String>) {
    match x {
        Value::Object(m) => {
            for (k, v) in m.iter_mut() {
                if (s.embedded || is_root) && META_FIELDS.contains(&k.as_str()) {
                    continue;
                }
                if let Some(prop) = s.properties.get(k) {
                    prune_value(v, Some(prop), false, &key_path(path, k), out);
                } else if let Some(Additional::Schema(add)) = &s.additional {
                    prune_value(v, Some(add), false, &key_path(path, k), out);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter_mut().enumerate() {
                    skip_prune(v, items, false, &format!("{path}[{i}]"), out);
                }
            }
        }
        _ => {}
    }
}

/// `PruneNonNullableNullsWithoutDefaults`: a null for a non-nullable field without a default is
/// treated as absent.
pub(super) fn prune_nulls(x: &mut Value, s: Option<&Node>) {
    match x {
        Value::Object(m) => {
            let drop: Vec<String> = m
                .iter()
                .filter(|(k, v)| {
                    v.is_null()
                        && s.and_then(|s| s.field_schema(k))
                            .is_some_and(|f| !f.nullable && f.default.is_none())
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in drop {
                m.remove(&k);
            }
            for (k, v) in m.iter_mut() {
                prune_nulls(v, s.and_then(|s| s.field_schema(k)));
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for v in a {
                prune_nulls(v, items);
            }
        }
        _ => {}
    }
}

const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Drops unknown ObjectMeta fields of embedded resources (the root's metadata is the server's).
pub(super) fn coerce_embedded_meta(
    x: &mut Value,
    s: Option<&Node>,
    path: &str,
    out: &mut Vec<String>,
) {
    let Some(s) = s else { return };
    match x {
        Value::Object(m) => {
            if s.embedded
                && let Some(Value::Object(meta)) = m.get_mut("metadata")
            {
                let unknown: Vec<String> = meta
                    .keys()
                    .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
                    .cloned()
                    .collect();
                for k in unknown {
                    out.push(format!("{}.{k}", key_path(path, "metadata")));
                    meta.remove(&k);
                }
                if meta.get("creationTimestamp").is_some_and(Value::is_null) {
                    meta.remove("creationTimestamp");
                }
            }
            for (k, v) in m.iter_mut() {
                coerce_embedded_meta(v, s.field_schema(k), &key_path(path, k), out);
            }
        }
        Value::Array(a) => {
            for (i, v) in a.iter_mut().enumerate() {
                coerce_embedded_meta(v, s.items.as_deref(), &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

/// `PruneDefaults`: defaults are pruned against their own schema when the CRD is loaded.
pub(super) fn prune_defaults(n: &mut Node) {
    if let Some(mut d) = n.default.take() {
        let mut ignored = Vec::new();
        let schema = n.clone();
        prune_value(&mut d, Some(&schema), false, "", &mut ignored);
        n.default = Some(d);
    }
    if let Some(Additional::Schema(a)) = &mut n.additional {
        prune_defaults(a);
    }
    if let Some(i) = &mut n.items {
        prune_defaults(i);
    }
    for p in n.properties.values_mut() {
        prune_defaults(p);
    }
}
