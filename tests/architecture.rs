//! The architecture as checks: the operator's top-level modules import each other without a
//! cycle, the core crate has no I/O dependency, and the operator's binary does not link the
//! sandbox (docs/design/crates.md).
#![allow(clippy::unwrap_used, clippy::expect_used)] // a test: a panic is its report

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
                || name.contains("api_calls")
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

/// The module path of each `.rs` file under `src` (`a/b.rs` and `a/b/mod.rs` are `a::b`; the
/// crate root is ``), and its code outside comments and its inline test module.
fn module_files(src: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(src).expect("under src").to_string_lossy();
            let Some(stem) = rel.strip_suffix(".rs") else {
                continue;
            };
            let module = stem
                .trim_end_matches("/mod")
                .trim_end_matches("mod")
                .replace('/', "::");
            let module = match module.as_str() {
                "lib" | "main" => String::new(),
                _ => module,
            };
            let text = std::fs::read_to_string(&path).expect("read source");
            let code: String = text
                .split("#[cfg(test)]\nmod tests")
                .next()
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            files.insert(module, code);
        }
    }
    files
}

/// Which files of a crate use which: `crate::a::b::…` and `super::…` paths, each resolved to
/// the longest module path that is a file. Test-only files are left out.
fn file_imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let files = module_files(src);
    let test_only = |m: &str| {
        let last = m.rsplit("::").next().unwrap_or_default();
        last == "tests" || last.ends_with("_tests") || m.contains("api_calls") || m == "fixtures"
    };
    let resolve = |segments: Vec<String>| -> Option<String> {
        (1..=segments.len())
            .rev()
            .map(|n| segments[..n].join("::"))
            .find(|m| files.contains_key(m))
    };
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &files {
        if test_only(module) {
            continue;
        }
        let path_after = |at: usize| -> Vec<String> {
            code[at..]
                .split("::")
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .take_while(|s| !s.is_empty() && s.starts_with(|c: char| c.is_ascii_lowercase()))
                .collect()
        };
        let mut uses = BTreeSet::new();
        for (i, _) in code.match_indices("crate::") {
            if code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
                continue;
            }
            uses.extend(resolve(path_after(i + "crate::".len())));
        }
        let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
        for (i, _) in code.match_indices("super::") {
            if code[..i].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let mut segments: Vec<String> = parent
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            segments.extend(path_after(i + "super::".len()));
            uses.extend(resolve(segments).or_else(|| Some(parent.to_string())));
        }
        uses.remove(module);
        uses.retain(|m| !m.is_empty() && !test_only(m));
        graph.entry(module.clone()).or_default().extend(uses);
    }
    graph
}

#[test]
fn no_file_of_any_crate_imports_a_file_that_imports_it_back() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // The check sees a file-level circle: one made up here.
    let mut made = BTreeMap::new();
    made.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    made.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert!(find_cycle(&made).is_some());
    for src in ["crates/core/src", "src", "crates/sandbox/src"] {
        let graph = file_imports(&root.join(src));
        assert!(graph.len() > 5, "{src}: {graph:#?}");
        assert_eq!(find_cycle(&graph), None, "{src}: a circle of files");
        if src == "src" {
            // The DIJob controller asks placement and pod mutation through the core's ports:
            // it knows neither the allocator nor the plugins.
            let executor = &graph["controller::executor"];
            assert!(
                !executor
                    .iter()
                    .any(|m| m.starts_with("plugin") || m.starts_with("allocator")),
                "{executor:#?}"
            );
        }
    }
}
