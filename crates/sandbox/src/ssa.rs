//! A subset of server-side apply (`PATCH` with `application/apply-patch+yaml`): field ownership
//! per manager in `metadata.managedFields` (FieldsV1), conflicts when a field another manager
//! applied would change (refused unless `force`), and removal of fields a manager stops applying.
//! Enough for clients that coordinate through apply conflicts, such as lease-based leader
//! election.
//!
//! Owns only the merge and the ownership bookkeeping, as pure functions; `api_core` stores the
//! result. Simplifications, documented in the README: lists are atomic (replaced whole, owned as
//! one field), and only apply operations record ownership (updates and patches by other clients
//! do not).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// A field: the keys from the object's root to a leaf (a scalar, a list, or an empty map).
type Path = Vec<String>;

/// Fields never owned: identity and bookkeeping.
fn ignored(path: &[String]) -> bool {
    matches!(
        path.iter().map(String::as_str).collect::<Vec<_>>()[..],
        ["apiVersion"]
            | ["kind"]
            | ["metadata", "name"]
            | ["metadata", "namespace"]
            | ["metadata", "resourceVersion"]
            | ["metadata", "managedFields", ..]
            | ["metadata", "uid"]
            | ["metadata", "creationTimestamp"]
            | ["metadata", "generation"]
            | ["status", ..]
    )
}

fn leaves(value: &Value, prefix: &mut Path, out: &mut BTreeMap<Path, Value>) {
    match value {
        Value::Object(m) if !m.is_empty() => {
            for (k, v) in m {
                prefix.push(k.clone());
                leaves(v, prefix, out);
                prefix.pop();
            }
        }
        other => {
            if !prefix.is_empty() && !ignored(prefix) {
                out.insert(prefix.clone(), other.clone());
            }
        }
    }
}

/// The FieldsV1 form of a set of paths: `{"f:spec": {"f:holderIdentity": {}}}`.
fn to_fields_v1(paths: &BTreeSet<Path>) -> Value {
    let mut root = Map::new();
    for path in paths {
        let mut node = &mut root;
        for key in path {
            let entry = node
                .entry(format!("f:{key}"))
                .or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            let Value::Object(next) = entry else {
                unreachable!("just made an object")
            };
            node = next;
        }
    }
    Value::Object(root)
}

fn from_fields_v1(fields: &Value, prefix: &mut Path, out: &mut BTreeSet<Path>) {
    let Some(m) = fields.as_object() else { return };
    let children: Vec<(&String, &Value)> = m.iter().filter(|(k, _)| k.starts_with("f:")).collect();
    if children.is_empty() {
        if !prefix.is_empty() {
            out.insert(prefix.clone());
        }
        return;
    }
    for (k, v) in children {
        prefix.push(k[2..].to_string());
        from_fields_v1(v, prefix, out);
        prefix.pop();
    }
}

/// Who applied what: manager → fields, from `metadata.managedFields` (Apply entries only).
fn ownership(obj: &Value) -> BTreeMap<String, BTreeSet<Path>> {
    let mut out = BTreeMap::new();
    let entries = obj
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for e in entries {
        if e.get("operation").and_then(Value::as_str) != Some("Apply") {
            continue;
        }
        let manager = e
            .get("manager")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let mut paths = BTreeSet::new();
        if let Some(f) = e.get("fieldsV1") {
            from_fields_v1(f, &mut Vec::new(), &mut paths);
        }
        out.entry(manager)
            .or_insert_with(BTreeSet::new)
            .extend(paths);
    }
    out
}

fn get<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, k| v.get(k))
}

fn set(obj: &mut Value, path: &[String], value: Value) {
    let mut node = obj;
    for key in &path[..path.len() - 1] {
        if !node.is_object() {
            *node = Value::Object(Map::new());
        }
        let Value::Object(m) = node else {
            unreachable!("just made an object")
        };
        node = m
            .entry(key.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    if !node.is_object() {
        *node = Value::Object(Map::new());
    }
    if let (Value::Object(m), Some(last)) = (node, path.last()) {
        m.insert(last.clone(), value);
    }
}

fn remove(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut node = obj;
    for key in parents {
        match node.get_mut(key) {
            Some(next) => node = next,
            None => return,
        }
    }
    if let Value::Object(m) = node {
        m.remove(last);
    }
}

fn show(path: &[String]) -> String {
    format!(".{}", path.join("."))
}

/// A refused apply: the fields other managers own that it would change.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflicts(pub Vec<(String, String)>);

impl Conflicts {
    /// kube-apiserver's message.
    pub fn message(&self) -> String {
        let n = self.0.len();
        if n == 1 {
            let (manager, field) = &self.0[0];
            return format!("Apply failed with 1 conflict: conflict with \"{manager}\": {field}");
        }
        let mut text = format!("Apply failed with {n} conflicts:");
        let mut by_manager: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (m, f) in &self.0 {
            by_manager.entry(m).or_default().push(f);
        }
        for (manager, fields) in by_manager {
            text.push_str(&format!(" conflicts with \"{manager}\":"));
            for f in fields {
                text.push_str(&format!("\n- {f}"));
            }
        }
        text
    }
}

/// Applies `applied` (the manager's whole intent for the object) to `current` (`None`: the
/// object is created). Returns the new object with its managedFields.
pub fn apply(
    current: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    now: &str,
) -> Result<Value, Conflicts> {
    let mut wanted = BTreeMap::new();
    leaves(applied, &mut Vec::new(), &mut wanted);
    let mut owners = current.map(ownership).unwrap_or_default();
    let base = current.cloned().unwrap_or_else(|| {
        let mut base = json!({"metadata": {}});
        for key in ["name", "namespace"] {
            if let Some(v) = applied.pointer(&format!("/metadata/{key}")) {
                base["metadata"][key] = v.clone();
            }
        }
        base
    });

    let mut conflicts = Vec::new();
    for (path, value) in &wanted {
        let Some(existing) = get(&base, path) else {
            continue;
        };
        if existing == value {
            continue;
        }
        for (other, fields) in &owners {
            if other != manager && fields.contains(path) {
                conflicts.push((other.clone(), show(path)));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(Conflicts(conflicts));
    }

    let mut out = base;
    // Fields this manager applied before and no longer applies go, unless someone else
    // applied them too.
    let previous = owners.remove(manager).unwrap_or_default();
    for path in &previous {
        let shared = owners.values().any(|f| f.contains(path));
        if !wanted.contains_key(path) && !shared {
            remove(&mut out, path);
        }
    }
    for (path, value) in &wanted {
        set(&mut out, path, value.clone());
        // A changed value belongs to this manager alone (force took it); an unchanged one is
        // shared.
        let changed = current.and_then(|c| get(c, path)) != Some(value);
        if changed {
            for fields in owners.values_mut() {
                fields.remove(path);
            }
        }
    }
    for key in ["apiVersion", "kind"] {
        if let Some(v) = applied.get(key) {
            out[key] = v.clone();
        }
    }
    owners.insert(manager.to_string(), wanted.keys().cloned().collect());
    let api_version = applied.get("apiVersion").cloned().unwrap_or(Value::Null);
    let entries: Vec<Value> = owners
        .into_iter()
        .filter(|(_, f)| !f.is_empty())
        .map(|(m, f)| {
            json!({
                "manager": m,
                "operation": "Apply",
                "apiVersion": api_version,
                "time": now,
                "fieldsType": "FieldsV1",
                "fieldsV1": to_fields_v1(&f),
            })
        })
        .collect();
    set(
        &mut out,
        &["metadata".to_string(), "managedFields".to_string()],
        Value::Array(entries),
    );
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: &str = "2026-01-01T00:00:00Z";

    fn lease(holder: &str) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "l", "namespace": "ns"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    }

    #[test]
    fn the_first_apply_creates_and_owns_its_fields() {
        let out = apply(None, &lease("a"), "a", false, NOW).expect("apply");
        assert_eq!(out["spec"]["holderIdentity"], "a");
        assert_eq!(out["metadata"]["managedFields"][0]["manager"], "a");
        assert_eq!(
            out["metadata"]["managedFields"][0]["fieldsV1"],
            json!({"f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}}})
        );
    }

    #[test]
    fn changing_a_field_another_manager_applied_conflicts_unless_forced() {
        let held = apply(None, &lease("a"), "a", false, NOW).expect("a");
        let err = apply(Some(&held), &lease("b"), "b", false, NOW).expect_err("conflict");
        assert_eq!(
            err.message(),
            "Apply failed with 1 conflict: conflict with \"a\": .spec.holderIdentity"
        );
        // The same values are no conflict: ownership is shared.
        let shared = apply(Some(&held), &lease("a"), "b", false, NOW).expect("same values");
        assert_eq!(
            shared["metadata"]["managedFields"].as_array().map(Vec::len),
            Some(2)
        );
        let taken = apply(Some(&held), &lease("b"), "b", true, NOW).expect("forced");
        assert_eq!(taken["spec"]["holderIdentity"], "b");
        // a keeps only the field whose value did not change.
        let owners = ownership(&taken);
        assert_eq!(
            owners["a"],
            BTreeSet::from([vec!["spec".to_string(), "leaseDurationSeconds".to_string()]])
        );
        // Once the holder field is gone (released by an update), anyone may apply it.
        let mut released = held.clone();
        remove(&mut released, &["spec".into(), "holderIdentity".into()]);
        let out = apply(Some(&released), &lease("b"), "b", false, NOW).expect("free");
        assert_eq!(out["spec"]["holderIdentity"], "b");
    }

    #[test]
    fn fields_a_manager_stops_applying_are_removed() {
        let mut first = lease("a");
        first["metadata"]["labels"] = json!({"x": "1"});
        let out = apply(None, &first, "a", false, NOW).expect("first");
        let out = apply(Some(&out), &lease("a"), "a", false, NOW).expect("second");
        assert!(
            out["metadata"]
                .get("labels")
                .is_none_or(|l| l.get("x").is_none()),
            "{out}"
        );
        assert_eq!(out["metadata"]["name"], "l");
    }

    #[test]
    fn several_conflicts_are_listed_by_manager() {
        let held = apply(None, &lease("a"), "a", false, NOW).expect("a");
        let mut other = lease("b");
        other["spec"]["leaseDurationSeconds"] = json!(30);
        let err = apply(Some(&held), &other, "b", false, NOW).expect_err("conflicts");
        assert_eq!(
            err.message(),
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .spec.holderIdentity\n- .spec.leaseDurationSeconds"
        );
    }
}
