//! Output checks: what a plugin returns must be usable and must not break the operator's
//! invariants. Pure functions, shared by the Wasm host and tests.
//!
//! Owns: the rules (allocations name existing ready nodes, one per replica; mutators keep pod
//! identity, owner references, `diengine/*` metadata and the `DI_*` env the operator injects).
//! Must not touch: how plugins are run.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use serde_json::Value;

use diorch_policies::preempt::{Preemption, Running, Shrink};

use super::{Job, JobAllocation, JobPlan, Node, PluginError, PreemptAnswer, RawPreemption};

fn malformed(plugin: &str, message: String) -> PluginError {
    PluginError::MalformedOutput {
        plugin: plugin.to_string(),
        message,
    }
}

/// Node names of a valid allocation of `job`.
pub fn allocation(
    plugin: &str,
    job: &Job,
    nodes: &[Node],
    alloc: &[u32],
) -> Result<Vec<String>, PluginError> {
    let want = job.total_replicas();
    if alloc.len() != want {
        return Err(malformed(
            plugin,
            format!(
                "job {}: {} nodes for {want} replicas (one per replica expected)",
                job.key,
                alloc.len()
            ),
        ));
    }
    alloc
        .iter()
        .enumerate()
        .map(|(rank, &i)| match nodes.get(i as usize) {
            None => Err(malformed(
                plugin,
                format!(
                    "job {}: rank {rank} on node index {i}, but only {} nodes exist",
                    job.key,
                    nodes.len()
                ),
            )),
            Some(n) if !n.ready => Err(malformed(
                plugin,
                format!(
                    "job {}: rank {rank} on node {} which is not ready",
                    job.key, n.name
                ),
            )),
            Some(n) => Ok(n.name.clone()),
        })
        .collect()
}

/// A plan by names to the index form the WIT uses; entries naming unknown jobs or nodes are
/// dropped (they cannot be expressed, and the plugin re-plans those jobs anyway).
pub fn plan_to_indices(jobs: &[Job], nodes: &[Node], plan: &[JobPlan]) -> Vec<JobAllocation> {
    let node_index: BTreeMap<&str, u32> = nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| Some((n.name.as_str(), u32::try_from(i).ok()?)))
        .collect();
    plan.iter()
        .filter_map(|p| {
            let job = u32::try_from(jobs.iter().position(|j| j.key == p.job)?).ok()?;
            let nodes = p
                .nodes
                .iter()
                .map(|n| node_index.get(n.as_str()).copied())
                .collect::<Option<Vec<u32>>>()?;
            Some(JobAllocation {
                job,
                nodes,
                reason: None,
            })
        })
        .collect()
}

/// Node names of a valid plan: known jobs, each at most once, each a valid allocation.
pub fn plan(
    plugin: &str,
    jobs: &[Job],
    nodes: &[Node],
    plan: &[JobAllocation],
) -> Result<Vec<JobPlan>, PluginError> {
    let mut seen = vec![false; jobs.len()];
    plan.iter()
        .map(|p| {
            let Some(job) = jobs.get(p.job as usize) else {
                return Err(malformed(
                    plugin,
                    format!(
                        "plan names job index {}, but only {} jobs exist",
                        p.job,
                        jobs.len()
                    ),
                ));
            };
            if std::mem::replace(&mut seen[p.job as usize], true) {
                return Err(malformed(
                    plugin,
                    format!("plan names job {} twice", job.key),
                ));
            }
            // A resized entry (see `Job::resized_counts`): checked against the new counts.
            let replicas = if p.nodes.len() == job.total_replicas() {
                None
            } else {
                let counts = job.resized_counts(p.nodes.len()).ok_or_else(|| {
                    malformed(
                        plugin,
                        format!(
                            "job {}: {} nodes for {} replicas; only a job with one collector task may be resized",
                            job.key,
                            p.nodes.len(),
                            job.total_replicas()
                        ),
                    )
                })?;
                Some(replica_counts(plugin, job, Some(&counts), p.nodes.len())?)
            };
            let mut sized = job.clone();
            if let Some(counts) = &replicas {
                for (task, n) in sized.tasks.iter_mut().zip(counts) {
                    task.replicas = *n;
                }
            }
            Ok(JobPlan {
                job: job.key.clone(),
                nodes: allocation(plugin, &sized, nodes, &p.nodes)?,
                replicas,
                reason: p.reason.as_deref().and_then(diorch_core::reason::sanitize),
            })
        })
        .collect()
}

/// Whether an allocation (node names, one per replica in rank order) fits the nodes' free
/// capacity: a policy that over-commits a node would leave pods pending forever. Callers go
/// through [`super::Checked`].
pub(super) fn capacity(
    plugin: &str,
    job: &Job,
    nodes: &[Node],
    alloc: &[String],
) -> Result<(), PluginError> {
    plan_capacity(
        plugin,
        std::slice::from_ref(job),
        nodes,
        &[JobPlan {
            job: job.key.clone(),
            nodes: alloc.to_vec(),
            replicas: None,
            reason: None,
        }],
    )
}

/// The task replica counts of a plan entry with `nodes` nodes: the job's own counts, or the
/// `resized` ones, which must name every task, stay within its min/max and add up to `nodes`.
pub fn replica_counts(
    plugin: &str,
    job: &Job,
    resized: Option<&[u32]>,
    nodes: usize,
) -> Result<Vec<u32>, PluginError> {
    let counts: Vec<u32> = match resized {
        None => job.tasks.iter().map(|t| t.replicas).collect(),
        Some(counts) => {
            if counts.len() != job.tasks.len() {
                return Err(malformed(
                    plugin,
                    format!(
                        "job {}: {} replica counts for {} tasks",
                        job.key,
                        counts.len(),
                        job.tasks.len()
                    ),
                ));
            }
            if let Some((t, n)) = job
                .tasks
                .iter()
                .zip(counts)
                .find(|(t, n)| **n < t.min_replicas || **n > t.max_replicas)
            {
                return Err(malformed(
                    plugin,
                    format!(
                        "job {}: task {} resized to {n} replicas, outside its minReplicas {} .. maxReplicas {}",
                        job.key, t.name, t.min_replicas, t.max_replicas
                    ),
                ));
            }
            counts.to_vec()
        }
    };
    let want: usize = counts.iter().map(|n| *n as usize).sum();
    if nodes != want {
        return Err(malformed(
            plugin,
            format!(
                "job {}: {nodes} nodes for {want} replicas (one per replica expected)",
                job.key
            ),
        ));
    }
    Ok(counts)
}

/// Whether a whole plan fits: each entry one node per replica of its job (at its resized
/// counts, if any), and every node's replicas of all the plan's jobs together within its free
/// capacity. Callers go through [`super::Checked`].
pub(super) fn plan_capacity(
    plugin: &str,
    jobs: &[Job],
    nodes: &[Node],
    plan: &[JobPlan],
) -> Result<(), PluginError> {
    let mut taken: BTreeMap<&str, super::Resources> = BTreeMap::new();
    for entry in plan {
        let Some(job) = jobs.iter().find(|j| j.key == entry.job) else {
            return Err(malformed(
                plugin,
                format!("plan names unknown job {}", entry.job),
            ));
        };
        let counts = replica_counts(plugin, job, entry.replicas.as_deref(), entry.nodes.len())?;
        let replicas = job
            .tasks
            .iter()
            .zip(&counts)
            .flat_map(|(t, n)| std::iter::repeat_n(t, *n as usize));
        for (task, node) in replicas.zip(&entry.nodes) {
            let sum = taken.entry(node.as_str()).or_default();
            sum.cpu_millis = sum.cpu_millis.saturating_add(task.requests.cpu_millis);
            sum.memory_bytes = sum.memory_bytes.saturating_add(task.requests.memory_bytes);
            sum.gpus = sum.gpus.saturating_add(task.requests.gpus);
            for (name, q) in &task.requests.extended {
                match sum.extended.iter_mut().find(|(n, _)| n == name) {
                    Some(slot) => slot.1 = slot.1.saturating_add(*q),
                    None => sum.extended.push((name.clone(), *q)),
                }
            }
        }
    }
    for (name, sum) in taken {
        let Some(node) = nodes.iter().find(|n| n.name == name) else {
            return Err(malformed(plugin, format!("unknown node {name}")));
        };
        if !node.free.fits(&sum) {
            return Err(malformed(
                plugin,
                format!(
                    "node {name} is over-committed: its replicas ask {} GPUs, {}m CPU, {} bytes of memory{}, it has {} GPUs, {}m CPU, {} bytes free",
                    sum.gpus,
                    sum.cpu_millis,
                    sum.memory_bytes,
                    if sum.extended.is_empty() {
                        String::new()
                    } else {
                        format!(", {:?}", sum.extended)
                    },
                    node.free.gpus,
                    node.free.cpu_millis,
                    node.free.memory_bytes,
                ),
            ));
        }
    }
    Ok(())
}

/// The checked form of a `preempt` answer (contract 0.5.0) for `job` with `candidates` on
/// `nodes`: `raw`'s job indices are the WIT's (0 is `job`, candidate `c` is `c + 1`). Refused
/// (as a malformed output) unless the job's allocation is valid (one ready node per replica,
/// [`allocation`]), every victim is a candidate (never `job` itself) and keeps the rules of
/// [`diorch_policies::preempt::check`] (preemptible, of lower priority, allowed what it is
/// given, named once; a shrink one count per task within `max(min_replicas, 1)..=replicas`, at
/// least one lower). Whether the job fits the room freed is [`preemption_capacity`]'s.
pub fn preemption(
    plugin: &str,
    job: &Job,
    candidates: &[Running],
    nodes: &[Node],
    raw: &RawPreemption,
) -> Result<PreemptAnswer, PluginError> {
    let names = allocation(plugin, job, nodes, &raw.nodes)?;
    let candidate = |index: u32, what: &str| -> Result<usize, PluginError> {
        match (index as usize).checked_sub(1) {
            None => Err(malformed(
                plugin,
                format!("{what} job index 0, the job {} being placed", job.key),
            )),
            Some(c) if c >= candidates.len() => Err(malformed(
                plugin,
                format!(
                    "{what} job index {index}, but only {} candidates exist",
                    candidates.len()
                ),
            )),
            Some(c) => Ok(c),
        }
    };
    let plan = Preemption {
        nodes: raw.nodes.clone(),
        shrinks: raw
            .shrinks
            .iter()
            .map(|(index, replicas)| {
                Ok(Shrink {
                    job: candidate(*index, "shrinks")?,
                    replicas: replicas.clone(),
                })
            })
            .collect::<Result<_, PluginError>>()?,
        evictions: raw
            .evictions
            .iter()
            .map(|&index| candidate(index, "evicts"))
            .collect::<Result<_, PluginError>>()?,
    };
    diorch_policies::preempt::check(job, candidates, nodes, &plan)
        .map_err(|e| malformed(plugin, format!("preemption for {}: {e}", job.key)))?;
    Ok(PreemptAnswer {
        nodes: names,
        shrinks: plan
            .shrinks
            .into_iter()
            .map(|s| (s.job, s.replicas))
            .collect(),
        evictions: plan.evictions,
        reason: raw
            .reason
            .as_deref()
            .and_then(diorch_core::reason::sanitize),
    })
}

/// `nodes` as a checked `answer` leaves them: every evicted candidate's placed replicas and
/// every shrunk one's removed replicas (per task, the highest local ranks) given back to their
/// node's free resources ([`diorch_policies::preempt::check`]'s room).
pub fn preempted_room(
    plugin: &str,
    job: &Job,
    candidates: &[Running],
    nodes: &[Node],
    answer: &PreemptAnswer,
) -> Result<Vec<Node>, PluginError> {
    let plan = Preemption {
        nodes: answer
            .nodes
            .iter()
            .map(|name| {
                nodes
                    .iter()
                    .position(|n| &n.name == name)
                    .and_then(|i| u32::try_from(i).ok())
                    .ok_or_else(|| malformed(plugin, format!("unknown node {name}")))
            })
            .collect::<Result<_, _>>()?,
        shrinks: answer
            .shrinks
            .iter()
            .map(|(job, replicas)| Shrink {
                job: *job,
                replicas: replicas.clone(),
            })
            .collect(),
        evictions: answer.evictions.clone(),
    };
    diorch_policies::preempt::check(job, candidates, nodes, &plan)
        .map_err(|e| malformed(plugin, format!("preemption for {}: {e}", job.key)))
}

/// Whether `answer`'s allocation of `job` fits the room the preemption frees (see
/// [`preempted_room`]). Callers go through [`super::Checked`].
pub(super) fn preemption_capacity(
    plugin: &str,
    job: &Job,
    candidates: &[Running],
    nodes: &[Node],
    answer: &PreemptAnswer,
) -> Result<(), PluginError> {
    let room = preempted_room(plugin, job, candidates, nodes, answer)?;
    capacity(plugin, job, &room, &answer.nodes)
}

/// Env vars the operator injects (spec §5): a mutator may not add, change or drop them.
pub fn protected_env(name: &str) -> bool {
    matches!(name, "DI_JOB_ID" | "DI_SERVER_URL" | "DI_RANK" | "DI_NODES")
        || (name.starts_with("DI_") && name.ends_with("_NODES"))
}

const PROTECTED_PREFIX: &str = "diengine/";

fn protected_meta(pod: &Value, field: &str) -> BTreeMap<String, Value> {
    pod.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter(|(k, _)| k.starts_with(PROTECTED_PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// (container, env name) → the whole env entry, for protected names.
fn protected_envs(pod: &Value) -> BTreeMap<(String, String), Value> {
    let mut out = BTreeMap::new();
    let containers = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    for c in containers {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
        let env = c
            .get("env")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for e in env {
            if let Some(n) = e.get("name").and_then(Value::as_str)
                && protected_env(n)
            {
                // The last entry wins at runtime (duplicates are allowed), so keep the last.
                out.insert((cname.to_string(), n.to_string()), e.clone());
            }
        }
    }
    out
}

/// Checks a mutator's output JSON against the pod it was given; returns the typed pod.
pub fn mutation(plugin: &str, input: &Value, output: &str) -> Result<Pod, PluginError> {
    let out: Value = serde_json::from_str(output)
        .map_err(|e| malformed(plugin, format!("the pod is not JSON: {e}")))?;
    for (field, pointer) in [
        ("metadata.name", "/metadata/name"),
        ("metadata.namespace", "/metadata/namespace"),
        ("metadata.ownerReferences", "/metadata/ownerReferences"),
    ] {
        if input.pointer(pointer) != out.pointer(pointer) {
            return Err(malformed(
                plugin,
                format!("it changed {field}, which mutators may not"),
            ));
        }
    }
    for field in ["labels", "annotations"] {
        let (before, after) = (protected_meta(input, field), protected_meta(&out, field));
        if before != after {
            let key = before
                .iter()
                .find(|(k, v)| after.get(*k) != Some(v))
                .or_else(|| after.iter().find(|(k, _)| !before.contains_key(*k)))
                .map_or("?", |(k, _)| k.as_str());
            return Err(malformed(
                plugin,
                format!("it changed {field} {key:?}; diengine/* {field} belong to the operator"),
            ));
        }
    }
    let (before, after) = (protected_envs(input), protected_envs(&out));
    if before != after {
        let none = (String::new(), String::new());
        let ((container, name), what) = before
            .iter()
            .find(|(k, v)| after.get(*k) != Some(v))
            .map(|(k, _)| {
                (
                    k,
                    if after.contains_key(k) {
                        "changed"
                    } else {
                        "removed"
                    },
                )
            })
            .or_else(|| {
                after
                    .keys()
                    .find(|k| !before.contains_key(*k))
                    .map(|k| (k, "added"))
            })
            .unwrap_or((&none, "changed"));
        return Err(malformed(
            plugin,
            format!(
                "it {what} env {name} in container {container:?}; that env belongs to the operator"
            ),
        ));
    }
    serde_json::from_value(out).map_err(|e| malformed(plugin, format!("not a valid Pod: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// An edit of the sample preemption's job, candidates or answer.
    type PreemptionEdit = dyn FnOnce(&mut Job, &mut Vec<Running>, &mut RawPreemption);

    /// A `preempt` answer's refusal message (contract 0.5.0), on the sample preemption input.
    fn preemption_refusal(
        edit: impl FnOnce(&mut Job, &mut Vec<Running>, &mut RawPreemption),
    ) -> String {
        let (mut job, mut candidates, nodes) = crate::plugin::sample::preempt_input(true);
        // The built-in shrink plan: 4 learners on gpu-0, low-a's collectors 7 → 3.
        let mut raw = RawPreemption {
            nodes: vec![0; 4],
            shrinks: vec![(1, vec![1, 3])],
            evictions: vec![],
            reason: None,
        };
        assert!(preemption("p", &job, &candidates, &nodes, &raw).is_ok());
        edit(&mut job, &mut candidates, &mut raw);
        match preemption("p", &job, &candidates, &nodes, &raw) {
            Err(PluginError::MalformedOutput { message, .. }) => message,
            other => panic!("not refused: {other:?}"),
        }
    }

    #[test]
    fn a_preemption_names_only_allowed_victims_each_once_within_their_counts() {
        let cases: Vec<(&str, Box<PreemptionEdit>)> = vec![
            (
                "job index 0, the job ns/urgent",
                Box::new(|_, _, r| r.shrinks[0].0 = 0),
            ),
            (
                "evicts job index 0",
                Box::new(|_, _, r| r.evictions = vec![0]),
            ),
            (
                "job index 3, but only 2 candidates",
                Box::new(|_, _, r| r.evictions = vec![3]),
            ),
            (
                "job index 4294967295",
                Box::new(|_, _, r| r.shrinks[0].0 = u32::MAX),
            ),
            (
                "ns/low-a is preempted twice",
                Box::new(|_, _, r| r.evictions = vec![1]),
            ),
            (
                "ns/low-a is preempted twice",
                Box::new(|_, _, r| r.shrinks.push((1, vec![1, 2]))),
            ),
            (
                "may not be shrunk now",
                Box::new(|_, c, _| c[0].may_shrink = false),
            ),
            (
                "may not be evicted now",
                Box::new(|_, c, r| {
                    c[1].may_evict = false;
                    r.evictions = vec![2];
                }),
            ),
            (
                "(priority 0, preemptible true) for a job of priority 0",
                Box::new(|j, _, _| j.priority = 0),
            ),
            (
                "preemptible false",
                Box::new(|_, c, _| c[0].job.preemptible = false),
            ),
            (
                "gives 1 counts for 2 tasks",
                Box::new(|_, _, r| r.shrinks[0].1 = vec![1]),
            ),
            (
                "collector 8 replicas, not within 1..=7",
                Box::new(|_, _, r| r.shrinks[0].1 = vec![1, 8]),
            ),
            (
                "collector 0 replicas, not within 1..=7",
                Box::new(|_, _, r| r.shrinks[0].1 = vec![1, 0]),
            ),
            (
                "collector 3 replicas, not within 4..=7",
                Box::new(|_, c, _| {
                    c[0].job.tasks[1].min_replicas = 4;
                }),
            ),
            (
                "removes nothing",
                Box::new(|_, _, r| r.shrinks[0].1 = vec![1, 7]),
            ),
            (
                "3 nodes for 4 replicas",
                Box::new(|_, _, r| {
                    r.nodes.pop();
                }),
            ),
            ("node index 9", Box::new(|_, _, r| r.nodes[0] = 9)),
        ];
        for (says, edit) in cases {
            let message = preemption_refusal(edit);
            assert!(message.contains(says), "{says}: {message}");
        }
    }

    #[test]
    fn a_preemption_must_fit_the_room_it_frees() {
        let (job, candidates, nodes) = crate::plugin::sample::preempt_input(true);
        let raw = RawPreemption {
            nodes: vec![0; 4],
            shrinks: vec![(1, vec![1, 3])],
            evictions: vec![],
            reason: Some("room\nfor ns/urgent".into()),
        };
        let answer = preemption("p", &job, &candidates, &nodes, &raw).unwrap();
        assert_eq!(answer.shrinks, vec![(0, vec![1, 3])]);
        assert_eq!(answer.reason.as_deref(), Some("room for ns/urgent"));
        assert_eq!(
            preemption_capacity("p", &job, &candidates, &nodes, &answer),
            Ok(())
        );
        // The highest collectors go: four GPUs free on gpu-0, none on gpu-1.
        let room = preempted_room("p", &job, &candidates, &nodes, &answer).unwrap();
        assert_eq!((room[0].free.gpus, room[1].free.gpus), (4, 0));
        // Three collectors fewer is not enough for four learners.
        let mut short = answer.clone();
        short.shrinks[0].1 = vec![1, 4];
        let err = preemption_capacity("p", &job, &candidates, &nodes, &short).unwrap_err();
        assert!(err.to_string().contains("over-committed"), "{err}");
        // On the other node, where nothing was freed.
        let mut elsewhere = answer.clone();
        elsewhere.nodes = vec!["gpu-1".into(); 4];
        assert!(preemption_capacity("p", &job, &candidates, &nodes, &elsewhere).is_err());
        // An eviction frees the whole job.
        let evicted = PreemptAnswer {
            nodes: vec!["gpu-1".into(); 4],
            shrinks: vec![],
            evictions: vec![1],
            reason: None,
        };
        assert_eq!(
            preemption_capacity("p", &job, &candidates, &nodes, &evicted),
            Ok(())
        );
        let room = preempted_room("p", &job, &candidates, &nodes, &evicted).unwrap();
        assert_eq!(room[1].free.gpus, 8);
    }

    #[test]
    fn resized_counts_must_cover_every_task_within_min_and_max() {
        // Tasks: learner 2 (1..4), evaluator 1 (1..2), collector 4 (1..8).
        let (job, _) = crate::plugin::sample::allocate_input(4, 2);
        assert_eq!(replica_counts("p", &job, None, 7), Ok(vec![2, 1, 4]));
        assert_eq!(
            replica_counts("p", &job, Some(&[2, 1, 6]), 9),
            Ok(vec![2, 1, 6])
        );
        for (counts, nodes, needle) in [
            (&[2u32, 1][..], 3, "2 replica counts for 3 tasks"),
            (
                &[2, 1, 9],
                12,
                "task collector resized to 9 replicas, outside",
            ),
            (&[0, 1, 4], 5, "task learner resized to 0"),
            (&[2, 1, 6], 7, "7 nodes for 9 replicas"),
        ] {
            let err = replica_counts("p", &job, Some(counts), nodes).expect_err(needle);
            assert!(err.to_string().contains(needle), "{err}");
        }
        assert!(replica_counts("p", &job, None, 8).is_err());
    }

    #[test]
    fn a_plan_may_resize_the_single_collector_task_within_its_bounds() {
        // Tasks: learner 2 (1..4), evaluator 1 (1..2), collector 4 (1..8) on 4 nodes.
        let (job, nodes) = crate::plugin::sample::allocate_input(4, 2);
        let grown = JobAllocation {
            job: 0,
            nodes: vec![0, 0, 1, 1, 1, 2, 2, 3, 3],
            reason: None,
        };
        let p = plan("p", std::slice::from_ref(&job), &nodes, &[grown]).expect("resize");
        assert_eq!(p[0].replicas, Some(vec![2, 1, 6]));
        assert_eq!(p[0].nodes.len(), 9);
        // Past maxReplicas (8 collectors + 3 others = 11; 12 is one too many).
        let too_many = JobAllocation {
            job: 0,
            nodes: vec![0; 12],
            reason: None,
        };
        let err = plan("p", std::slice::from_ref(&job), &nodes, &[too_many]).expect_err("max");
        assert!(err.to_string().contains("outside its minReplicas"), "{err}");
        // Fewer nodes than the other tasks need.
        let short = JobAllocation {
            job: 0,
            nodes: vec![0; 2],
            reason: None,
        };
        assert!(plan("p", std::slice::from_ref(&job), &nodes, &[short]).is_err());
        // No collector task: no resize.
        let mut fixed = job.clone();
        fixed.tasks.retain(|t| t.task_type != "collector");
        let other = JobAllocation {
            job: 0,
            nodes: vec![0; 4],
            reason: None,
        };
        let err = plan("p", &[fixed], &nodes, &[other]).expect_err("not elastic");
        assert!(
            err.to_string()
                .contains("only a job with one collector task"),
            "{err}"
        );
    }

    #[test]
    fn capacity_refuses_an_over_committed_node() {
        // 2 learners with 1 GPU each, an evaluator and 4 collectors; node-0000 has 1 GPU free.
        let (job, mut nodes) = crate::plugin::sample::allocate_input(4, 2);
        nodes[0].free.gpus = 1;
        let n = job.total_replicas();
        let spread: Vec<String> = (0..n).map(|i| nodes[i % 4].name.clone()).collect();
        assert_eq!(capacity("p", &job, &nodes, &spread), Ok(()));
        let packed = vec![nodes[0].name.clone(); n];
        let err = capacity("p", &job, &nodes, &packed).expect_err("over-committed");
        assert!(
            err.to_string()
                .contains("node node-0000 is over-committed: its replicas ask 2 GPUs"),
            "{err}"
        );
        let unknown = vec!["nowhere".to_string(); n];
        assert!(capacity("p", &job, &nodes, &unknown).is_err());
    }

    fn pod() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "j-learner-0", "namespace": "ns",
                "labels": {"diengine/job": "j", "team": "a"},
                "annotations": {"diengine/rank": "0"},
                "ownerReferences": [{"apiVersion": "diengine.opendilab.org/v2alpha1", "kind": "DIJob", "name": "j", "uid": "u"}]},
            "spec": {"containers": [{"name": "di-container", "image": "x",
                "env": [{"name": "DI_RANK", "value": "0"}, {"name": "DI_LEARNER_NODES", "value": "a"}, {"name": "USER", "value": "1"}]}]}})
    }

    #[test]
    fn harmless_edits_pass() {
        let mut out = pod();
        out["metadata"]["labels"]["team"] = json!("b");
        out["spec"]["nodeSelector"] = json!({"pool": "gpu"});
        out["spec"]["containers"][0]["env"][2]["value"] = json!("2");
        let p = mutation("m", &pod(), &out.to_string()).unwrap();
        assert_eq!(p.spec.unwrap().node_selector.unwrap()["pool"], "gpu");
    }

    #[test]
    fn protected_edits_fail_naming_the_field() {
        type Edit = fn(&mut Value);
        let cases: Vec<(Edit, &str)> = vec![
            (|p| p["metadata"]["name"] = json!("x"), "metadata.name"),
            (
                |p| p["metadata"]["namespace"] = json!("x"),
                "metadata.namespace",
            ),
            (
                |p| p["metadata"]["ownerReferences"] = json!([]),
                "ownerReferences",
            ),
            (
                |p| p["metadata"]["labels"]["diengine/job"] = json!("x"),
                "diengine/job",
            ),
            (
                |p| p["metadata"]["labels"]["diengine/new"] = json!("x"),
                "diengine/new",
            ),
            (
                |p| p["metadata"]["annotations"] = json!({}),
                "diengine/rank",
            ),
            (
                |p| {
                    p["spec"]["containers"][0]["env"]
                        .as_array_mut()
                        .unwrap()
                        .remove(0);
                },
                "removed env DI_RANK",
            ),
            (
                |p| p["spec"]["containers"][0]["env"][1]["value"] = json!("b"),
                "changed env DI_LEARNER_NODES",
            ),
            (
                |p| {
                    p["spec"]["containers"][0]["env"]
                        .as_array_mut()
                        .unwrap()
                        .push(json!({"name": "DI_NODES", "value": "z"}))
                },
                "added env DI_NODES",
            ),
        ];
        for (edit, needle) in cases {
            let mut out = pod();
            edit(&mut out);
            let err = mutation("m", &pod(), &out.to_string()).unwrap_err();
            assert!(err.to_string().contains(needle), "{needle}: {err}");
            assert_eq!(err.reason(), "MalformedOutput");
        }
    }

    #[test]
    fn garbage_and_invalid_pods_fail() {
        assert!(mutation("m", &pod(), "nope").is_err());
        let mut out = pod();
        out["spec"]["restartPolicy"] = json!(["not", "a", "string"]);
        let err = mutation("m", &pod(), &out.to_string()).unwrap_err();
        assert!(err.to_string().contains("not a valid Pod"), "{err}");
    }

    #[test]
    fn protected_names() {
        for n in [
            "DI_JOB_ID",
            "DI_SERVER_URL",
            "DI_RANK",
            "DI_NODES",
            "DI_COLLECTOR_NODES",
        ] {
            assert!(protected_env(n), "{n}");
        }
        for n in ["NCCL_DEBUG", "DI_OTHER", "NODES"] {
            assert!(!protected_env(n), "{n}");
        }
    }
}
