//! The architecture as checks: the operator's top-level modules import each other without a
//! cycle, the core crate has no I/O dependency, and the operator's binary does not link the
//! sandbox (docs/design/crates.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `crate::<module>` references of each top-level module of `src/`, outside its tests.
fn module_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src");
            let name = rel.to_string_lossy();
            let top = name
                .split('/')
                .next()
                .unwrap_or_default()
                .trim_end_matches(".rs");
            let file = path.file_name().unwrap_or_default().to_string_lossy();
            if !name.ends_with(".rs")
                || top == "main"
                || top == "lib"
                || file.ends_with("tests.rs")
                || file == "api_calls.rs"
            {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read source");
            // A file's inline test module sits at its end.
            let code = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default();
            for (i, _) in code.match_indices("crate::") {
                let used: String = code[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !used.is_empty() && used != top {
                    graph.entry(top.to_string()).or_default().insert(used);
                }
            }
        }
    }
    graph
}

/// A cycle in `graph`, if any (depth-first search).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_operators_modules_import_each_other_without_a_cycle() {
    let graph = module_imports(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The check can see a cycle: the operator wires everything, so a module importing it is one.
    let mut broken = graph.clone();
    broken
        .entry("controller".to_string())
        .or_default()
        .insert("operator".to_string());
    assert!(find_cycle(&broken).is_some(), "{broken:#?}");
    assert!(graph.contains_key("controller"), "{graph:#?}");
    assert_eq!(find_cycle(&graph), None, "{graph:#?}");
    // The controller asks placement through the core's trait, never the allocator itself.
    assert!(!graph["controller"].contains("allocator"), "{graph:#?}");
}

/// `cargo tree` of a package's normal dependencies, one crate name per line.
fn dependencies(package: &str) -> BTreeSet<String> {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "--locked", "-e", "normal", "--prefix", "none"])
        .args(["--format", "{p}", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn the_core_has_no_client_runtime_or_wasm_engine() {
    let core = dependencies("diorch-core");
    assert!(
        core.contains("k8s-openapi") && core.contains("kube-core"),
        "{core:?}"
    );
    for banned in [
        "kube-client",
        "kube",
        "hyper",
        "tokio",
        "wasmtime",
        "tower",
        "axum",
    ] {
        assert!(
            !core.contains(banned),
            "diorch-core depends on {banned}: {core:?}"
        );
    }
}

#[test]
fn the_operator_does_not_depend_on_the_sandbox() {
    let operator = dependencies("diorch");
    assert!(operator.contains("diorch-core"), "{operator:?}");
    assert!(!operator.contains("diorch-sandbox"), "{operator:?}");
    assert!(dependencies("diorch-sandbox").contains("diorch-core"));
}
