//! Legacy discovery (`/api`, `/apis`, group and resource lists with their verbs), `/version`, and
//! the OpenAPI v3 documents, cached per registry generation.
//!
//! Reads the registry only: must not touch objects.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::api_core::Api;
use crate::openapi;
use crate::registry::ResourceInfo;

use super::state::AppState;

pub(super) fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "33",
        "gitVersion": "v1.33.0-diorch-sandbox",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-04-23T00:00:00Z",
        "goVersion": "go1.24.2",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": "33",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "32"
    })
}

/// Kubernetes version priority: GA > beta > alpha > other; higher numbers first.
pub(super) fn version_rank(v: &str) -> (u8, u64, u64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    for (prefix, rank) in [("beta", 2), ("alpha", 1)] {
        if let Some(n) = tail.strip_prefix(prefix)
            && let Ok(minor) = n.parse::<u64>()
        {
            return (rank, major, minor);
        }
    }
    (0, 0, 0)
}

fn groups(api: &Api) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for r in api.registry.all() {
        if r.group.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(g, _)| *g == r.group) {
            Some((_, vs)) => {
                if !vs.contains(&r.version) {
                    vs.push(r.version.clone());
                }
            }
            None => out.push((r.group.clone(), vec![r.version.clone()])),
        }
    }
    for (_, vs) in out.iter_mut() {
        vs.sort_by_key(|v| std::cmp::Reverse(version_rank(v)));
    }
    out
}

fn group_json(g: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
        .collect();
    json!({"name": g, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

pub(super) fn group_list(api: &Api) -> Value {
    let groups: Vec<Value> = groups(api)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(super) fn group_doc(api: &Api, g: &str) -> Option<Value> {
    let (g, vs) = groups(api).into_iter().find(|(name, _)| name == g)?;
    let mut doc = group_json(&g, &vs);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

const ALL_VERBS: [&str; 8] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

pub(super) fn resource_list(api: &Api, g: &str, v: &str) -> Value {
    let mut resources = Vec::new();
    for r in api.registry.all() {
        if r.group != g || r.version != v {
            continue;
        }
        let mut main = Map::new();
        main.insert("name".into(), json!(r.plural));
        main.insert("singularName".into(), json!(r.singular));
        main.insert("namespaced".into(), json!(r.namespaced));
        main.insert("kind".into(), json!(r.kind));
        main.insert("verbs".into(), json!(ALL_VERBS));
        if !r.short_names.is_empty() {
            main.insert("shortNames".into(), json!(r.short_names));
        }
        if !r.categories.is_empty() {
            main.insert("categories".into(), json!(r.categories));
        }
        resources.push(Value::Object(main));
        for sub in &r.subresources {
            let (kind, verbs, group, version): (&str, &[&str], Option<&str>, Option<&str>) =
                match sub.as_str() {
                    "status" => (&r.kind, &["get", "patch", "update"], None, None),
                    "binding" => ("Binding", &["create"], None, None),
                    "log" => (&r.kind, &["get"], None, None),
                    "scale" => (
                        "Scale",
                        &["get", "patch", "update"],
                        Some("autoscaling"),
                        Some("v1"),
                    ),
                    _ => continue,
                };
            let mut s = json!({"name": format!("{}/{sub}", r.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": kind, "verbs": verbs});
            if let (Some(gr), Some(ve)) = (group, version) {
                s["group"] = json!(gr);
                s["version"] = json!(ve);
            }
            resources.push(s);
        }
    }
    let gv = if g.is_empty() {
        v.to_string()
    } else {
        format!("{g}/{v}")
    };
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources})
}

pub(super) fn openapi_docs(state: &AppState) -> (Value, HashMap<String, Value>) {
    let generation = state.api.registry.generation();
    let mut cache = state.openapi.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((g, root, docs)) = cache.as_ref()
        && *g == generation
    {
        return (root.clone(), docs.clone());
    }
    let resources: Vec<ResourceInfo> = state
        .api
        .registry
        .all()
        .iter()
        .map(|r| (**r).clone())
        .collect();
    let mut docs = HashMap::new();
    let mut gvs: Vec<(String, String)> = Vec::new();
    for r in &resources {
        let gv = (r.group.clone(), r.version.clone());
        if !gvs.contains(&gv) {
            gvs.push(gv);
        }
    }
    for (g, v) in gvs {
        if let Some(doc) = openapi::v3_group_version(&g, &v, &resources) {
            docs.insert(openapi::gv_path(&g, &v), doc);
        }
    }
    let root = openapi::v3_root(&resources);
    *cache = Some((generation, root.clone(), docs.clone()));
    (root, docs)
}
