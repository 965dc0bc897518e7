//! `bench_report heap`: a heaptrack peak flamegraph sorted into the operator's owners of
//! memory, printed and appended to the CSV as `heap-owner` rows.
//!
//! Owns: the owners and their call-stack keys. Must not touch: the report (the rows it appends
//! are read like any other).

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Who owns heap, by a substring of an allocation's call stack; the first match wins.
pub const HEAP_OWNERS: [(&str, &[&str]); 9] = [
    ("Event series cache", &["diorch::events::"]),
    (
        "allocator book (counted pods, held allocations)",
        &["allocator::book::"],
    ),
    (
        "allocator (node cache, re-plan, pod watch)",
        &["diorch::allocator::"],
    ),
    ("controller pod cache (objects)", &["CachedPod"]),
    ("DIJob cache (objects)", &["CachedJob"]),
    (
        "reflector stores (entries and keys)",
        &["reflector::store::", "reflector::object_ref"],
    ),
    (
        "plugins (compiled components, calls)",
        &["wasmtime", "cranelift", "diorch::plugin::"],
    ),
    ("replica API", &["diorch::server::"]),
    (
        "HTTP clients, TLS, watches",
        &["hyper", "rustls", "kube_client", "watcher"],
    ),
];

/// Peak bytes by owner from a heaptrack flamegraph (`frame;frame;... bytes` per line), largest
/// first, `other` for stacks no owner matches.
pub fn heap_owners(stacks: &str) -> Vec<(String, u64)> {
    let mut by: BTreeMap<&str, u64> = BTreeMap::new();
    for line in stacks.lines() {
        let Some((stack, bytes)) = line.rsplit_once(' ') else {
            continue;
        };
        let Ok(bytes) = bytes.trim().parse::<u64>() else {
            continue;
        };
        let owner = HEAP_OWNERS
            .iter()
            .find(|(_, keys)| keys.iter().any(|k| stack.contains(k)))
            .map_or("other", |(owner, _)| owner);
        *by.entry(owner).or_default() += bytes;
    }
    let mut owners: Vec<(String, u64)> = by
        .into_iter()
        .filter(|(_, b)| *b > 0)
        .map(|(o, b)| (o.to_string(), b))
        .collect();
    owners.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    owners
}

pub fn heap_command(stacks: &std::path::Path, csv: Option<&std::path::Path>) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(stacks)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", stacks.display()))?;
    let owners = heap_owners(&text);
    let total: u64 = owners.iter().map(|(_, b)| b).sum();
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    println!("heap at its peak, by owner ({:.1} MiB in all):", mib(total));
    let mut rows = String::new();
    for (owner, bytes) in &owners {
        println!("  {:>8.1} MiB  {owner}", mib(*bytes));
        let _ = writeln!(rows, "heap-owner,{owner},{:.1}", mib(*bytes));
    }
    if let Some(csv) = csv {
        use std::io::Write as _;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(csv)
            .and_then(|mut f| f.write_all(rows.as_bytes()))
            .map_err(|e| anyhow::anyhow!("cannot append to {}: {e}", csv.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{Row, one};

    #[test]
    fn heap_stacks_are_sorted_into_owners_first_match_wins() {
        let stacks = "main;tokio;kube_runtime::reflector::store::Writer::apply;<diorch_core::cached::CachedPod as Clone>::clone; 3000\n\
            main;tokio;kube_runtime::reflector::store::Writer::apply; 1000\n\
            main;diorch::events::SeriesCache::record; 10\n\
            main;diorch::allocator::book::Book::apply_pod;diorch::allocator::Allocator::start; 500\n\
            main;std::rt::lang_start; 7\n\
            main;zero; 0\n\
            garbage line without a number\n";
        assert_eq!(
            heap_owners(stacks),
            [
                ("controller pod cache (objects)".to_string(), 3000),
                ("reflector stores (entries and keys)".to_string(), 1000),
                (
                    "allocator book (counted pods, held allocations)".to_string(),
                    500
                ),
                ("Event series cache".to_string(), 10),
                ("other".to_string(), 7),
            ]
        );
        assert_eq!(
            one("heap-owner,Event series cache,0.4"),
            Row::HeapOwner {
                owner: "Event series cache".into(),
                mib: 0.4
            }
        );
    }
}
