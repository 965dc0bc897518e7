//! Defaulting and validation of a DIJob's tasks, as DI-orchestrator's reconciler does them
//! (spec section 11), plus the checks it lacks: a job with no replicas, and names that would
//! make pod hostnames, the service name or label values invalid (spec 15.19). An invalid job is
//! marked Failed once with the message returned here, instead of burning restarts on pod
//! creation errors.
//!
//! Pure functions of the spec; no API access. The admission webhook reuses them.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::{build, naming};
use crate::api::limits::{MAX_JOB_REPLICAS, MAX_PRIORITY_CLASS_NAME, MAX_TASK_REPLICAS, MAX_TASKS};
use crate::api::{DIJob, TaskType};

/// The JSON patch that gives every typed task without a name its type as name, or `None` when
/// no task needs it. Each `add` is guarded by a `test` of the task's type, so a concurrent
/// reordering of `spec.tasks` makes the patch fail instead of naming the wrong task.
pub fn task_name_defaults(job: &DIJob) -> Option<Value> {
    let mut ops = Vec::new();
    for (i, task) in job.spec.tasks.iter().enumerate() {
        let unnamed = task.name.as_deref().is_none_or(str::is_empty);
        match task.type_ {
            Some(t) if unnamed && t != TaskType::None => {
                ops.push(json!({"op": "test", "path": format!("/spec/tasks/{i}/type"), "value": t.as_str()}));
                ops.push(json!({"op": "add", "path": format!("/spec/tasks/{i}/name"), "value": t.as_str()}));
            }
            _ => {}
        }
    }
    (!ops.is_empty()).then_some(Value::Array(ops))
}

/// Why a job is invalid: the field at fault, the message (DI-orchestrator's where it has one;
/// the controller's Failed condition shows it), and how to fix it (the admission webhook shows
/// both).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub message: String,
    pub fix: &'static str,
    /// The Failed condition names the field and the fix too (rules DI-orchestrator never had,
    /// whose condition message no tooling matches on).
    pub explain_in_condition: bool,
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl Invalid {
    fn new(field: impl Into<String>, message: impl Into<String>, fix: &'static str) -> Invalid {
        Invalid {
            field: field.into(),
            message: message.into(),
            fix,
            explain_in_condition: false,
        }
    }

    /// A violated maximum (`api::limits`): the job's Failed condition says which field.
    fn limit(field: impl Into<String>, message: impl Into<String>, fix: &'static str) -> Invalid {
        Invalid {
            explain_in_condition: true,
            ..Invalid::new(field, message, fix)
        }
    }

    /// The message of the job's Failed condition.
    pub fn condition_message(&self) -> String {
        if self.explain_in_condition {
            self.explained()
        } else {
            self.message.clone()
        }
    }

    /// `<field>: <message>; <fix>`, for admission responses.
    pub fn explained(&self) -> String {
        format!("{}: {}; {}", self.field, self.message, self.fix)
    }
}

/// Checks the job after task-name defaulting; the error's message is the condition message of
/// the resulting Failed phase. DI-orchestrator's three rules come first with its exact messages.
pub fn validate(job: &DIJob) -> Result<(), Invalid> {
    let mut seen_types: Vec<TaskType> = Vec::new();
    for (i, task) in job.spec.tasks.iter().enumerate() {
        match task.type_ {
            Some(TaskType::None) | None => {
                if task.name.as_deref().is_none_or(str::is_empty) {
                    return Err(Invalid::new(
                        format!("spec.tasks[{i}].name"),
                        "none type task has no name",
                        "give every task of type none a name",
                    ));
                }
            }
            Some(t) => {
                if seen_types.contains(&t) {
                    return Err(Invalid::new(
                        format!("spec.tasks[{i}].type"),
                        format!("the number of {} task is more than one", t.as_str()),
                        "a job has at most one learner, collector and evaluator task; raise that task's replicas, or use type none",
                    ));
                }
                seen_types.push(t);
            }
        }
    }
    let mut seen = BTreeMap::new();
    for (i, task) in job.spec.tasks.iter().enumerate() {
        let name = build::task_name(task);
        if seen.insert(name.clone(), i).is_some() {
            return Err(Invalid::new(
                format!("spec.tasks[{i}].name"),
                format!("there is more than one task named {name}"),
                "give every task a different name",
            ));
        }
    }

    if job.spec.tasks.is_empty() {
        return Err(Invalid::new(
            "spec.tasks",
            "job has no tasks",
            "add at least one task",
        ));
    }
    if let Some((i, task)) = job
        .spec
        .tasks
        .iter()
        .enumerate()
        .find(|(_, t)| t.replicas < 1)
    {
        return Err(Invalid::new(
            format!("spec.tasks[{i}].replicas"),
            format!(
                "task {} has {} replicas, must be at least 1",
                build::task_name(task),
                task.replicas
            ),
            "set replicas to 1 or more",
        ));
    }

    within_limits(job)?;

    if let Some(codes) = &job.spec.non_retryable_exit_codes {
        if codes.len() > crate::api::limits::MAX_EXIT_CODES {
            return Err(Invalid::limit(
                "spec.nonRetryableExitCodes",
                format!(
                    "job lists {} exit codes, more than the {} it may",
                    codes.len(),
                    crate::api::limits::MAX_EXIT_CODES
                ),
                "list only the codes that mean a user error",
            ));
        }
        if let Some((i, code)) = codes
            .iter()
            .enumerate()
            .find(|(_, c)| !(1..=255).contains(*c))
        {
            return Err(Invalid::new(
                format!("spec.nonRetryableExitCodes[{i}]"),
                format!("exit code {code} is not in 1 to 255"),
                "list exit codes from 1 to 255 (0 is success)",
            ));
        }
    }
    if let Some(s) = job.spec.active_deadline_seconds.filter(|s| *s < 1) {
        return Err(Invalid::new(
            "spec.activeDeadlineSeconds",
            format!("activeDeadlineSeconds is {s}, must be at least 1"),
            "set it to 1 or more, or leave it out for no deadline",
        ));
    }
    if let Some(t) = job.spec.ttl_seconds_after_finished.filter(|t| *t < 0) {
        return Err(Invalid::new(
            "spec.ttlSecondsAfterFinished",
            format!("ttlSecondsAfterFinished is {t}, must be at least 0"),
            "set it to 0 or more, or leave it out to keep finished jobs",
        ));
    }
    if let Some(class) = &job.spec.priority_class_name
        && let Some(why) = dns_subdomain_problem(class)
    {
        return Err(Invalid::new(
            "spec.priorityClassName",
            format!("priorityClassName {class} {why}"),
            "name an existing PriorityClass (kubectl get priorityclasses), or leave it out to use priority",
        ));
    }

    for (i, task) in job.spec.tasks.iter().enumerate() {
        let (min, max) = (task.min_replicas(), task.max_replicas());
        if min < 1 || min > task.replicas || task.replicas > max {
            return Err(Invalid::new(
                format!("spec.tasks[{i}]"),
                format!(
                    "task {} has minReplicas {min}, replicas {}, maxReplicas {max}: they must satisfy 1 <= minReplicas <= replicas <= maxReplicas",
                    build::task_name(task),
                    task.replicas
                ),
                "leave minReplicas and maxReplicas out (both default to replicas), or order them",
            ));
        }
    }

    let job_name = job.metadata.name.as_deref().unwrap_or_default();
    let service = naming::service_name(job_name);
    if let Some(why) = dns_label_problem(&service) {
        return Err(Invalid::new(
            "metadata.name",
            format!("job name {job_name} is not usable: its service name {service} {why}"),
            "use a job name of at most 60 lowercase letters, digits and '-'",
        ));
    }
    for (i, task) in job.spec.tasks.iter().enumerate() {
        let name = build::task_name(task);
        if let Some(why) = dns_label_problem(&name) {
            return Err(Invalid::new(
                format!("spec.tasks[{i}].name"),
                format!("task name {name} {why}"),
                "use lowercase letters, digits and '-'",
            ));
        }
        let most = task.replicas.max(task.max_replicas());
        let last = naming::pod_name(job_name, &name, most.saturating_sub(1));
        if let Some(why) = dns_label_problem(&last) {
            return Err(Invalid::new(
                format!("spec.tasks[{i}].name"),
                format!("pod name {last} (the pod's hostname) {why}"),
                "shorten the job or task name",
            ));
        }
    }
    Ok(())
}

/// The documented maximums (`api::limits`) of the numbers that size the operator's memory and
/// work: tasks, each task's replicas, minReplicas and maxReplicas, and the job's replicas summed
/// over its tasks at their largest. Nothing may build per-replica state for a job before this
/// holds; it reads each number once, so it costs the same whatever they say.
pub fn within_limits(job: &DIJob) -> Result<(), Invalid> {
    let tasks = &job.spec.tasks;
    if tasks.len() > MAX_TASKS {
        return Err(Invalid::limit(
            "spec.tasks",
            format!(
                "job has {} tasks, more than the {MAX_TASKS} a job may have",
                tasks.len()
            ),
            "split the job into several jobs",
        ));
    }
    for (i, task) in tasks.iter().enumerate() {
        let counts = [
            ("replicas", Some(task.replicas)),
            ("minReplicas", task.min_replicas),
            ("maxReplicas", task.max_replicas),
        ];
        for (field, value) in counts {
            if let Some(n) = value.filter(|n| *n > MAX_TASK_REPLICAS) {
                return Err(Invalid::limit(
                    format!("spec.tasks[{i}].{field}"),
                    format!(
                        "task {} has {field} {n}, more than the {MAX_TASK_REPLICAS} a task may have",
                        build::task_name(task)
                    ),
                    "lower it, or split the task into several tasks",
                ));
            }
        }
    }
    // Each task at its largest: what the allocator may grow it to.
    let total: i64 = tasks
        .iter()
        .map(|t| i64::from(t.replicas.max(t.max_replicas())))
        .sum();
    if total > i64::from(MAX_JOB_REPLICAS) {
        return Err(Invalid::limit(
            "spec.tasks",
            format!(
                "job has {total} replicas over its tasks (each counted at its maxReplicas), more than the {MAX_JOB_REPLICAS} a job may have"
            ),
            "lower replicas or maxReplicas, or split the job into several jobs",
        ));
    }
    Ok(())
}

/// Why `s` is not an RFC 1123 DNS label (what hostnames, subdomains and label values need
/// here), in the API server's words; `None` if it is one.
fn dns_label_problem(s: &str) -> Option<String> {
    if s.len() > naming::MAX_DNS_LABEL {
        return Some(format!(
            "must be no more than {} characters",
            naming::MAX_DNS_LABEL
        ));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let ok = !s.is_empty()
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum);
    (!ok).then(|| {
        "must be a lowercase RFC 1123 label: lower case alphanumeric characters or '-', \
         starting and ending with an alphanumeric character"
            .to_string()
    })
}

/// Why `s` is not an RFC 1123 DNS subdomain (what the names of most objects, PriorityClasses
/// among them, must be), in the API server's words; `None` if it is one.
fn dns_subdomain_problem(s: &str) -> Option<String> {
    if s.len() > MAX_PRIORITY_CLASS_NAME {
        return Some(format!(
            "must be no more than {MAX_PRIORITY_CLASS_NAME} characters"
        ));
    }
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars().all(|c| alnum(c) || c == '-')
            && l.starts_with(alnum)
            && l.ends_with(alnum)
    };
    (!s.split('.').all(label_ok)).then(|| {
        "must be a lowercase RFC 1123 subdomain: lower case alphanumeric characters, '-' or '.', \
         starting and ending with an alphanumeric character"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_and_max_replicas_must_bracket_replicas() {
        let ok = job(
            "mm",
            json!([{"type": "collector", "replicas": 2, "minReplicas": 1, "maxReplicas": 4}]),
        );
        assert_eq!(validate(&ok), Ok(()));
        for (min, max) in [(3, 4), (1, 1), (0, 2)] {
            let bad = job(
                "mm",
                json!([{"type": "collector", "replicas": 2, "minReplicas": min, "maxReplicas": max}]),
            );
            let err = validate(&bad).expect_err("out of order");
            assert_eq!(err.field, "spec.tasks[0]");
            assert!(
                err.message
                    .contains("1 <= minReplicas <= replicas <= maxReplicas")
            );
        }
    }

    #[test]
    fn the_longest_pod_name_counts_max_replicas() {
        // `<53 chars>-learner-1` is 63 characters; `-99` makes it 64.
        let name = "a".repeat(53);
        let fits = job(&name, json!([{"type": "learner", "replicas": 2}]));
        assert_eq!(validate(&fits), Ok(()));
        let grows = job(
            &name,
            json!([{"type": "learner", "replicas": 2, "maxReplicas": 100}]),
        );
        assert!(validate(&grows).is_err());
    }

    fn job(name: &str, tasks: Value) -> DIJob {
        serde_json::from_value(json!({
            "apiVersion": "diengine.opendilab.org/v2alpha1",
            "kind": "DIJob",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"tasks": tasks}
        }))
        .expect("job")
    }

    #[test]
    fn typed_tasks_without_names_get_their_type_once() {
        let j = job(
            "j",
            json!([{"type": "learner"}, {"type": "collector", "name": "c"}, {"type": "evaluator", "name": ""}, {"type": "none", "name": "x"}]),
        );
        let patch = task_name_defaults(&j).expect("patch");
        assert_eq!(
            patch,
            json!([
                {"op": "test", "path": "/spec/tasks/0/type", "value": "learner"},
                {"op": "add", "path": "/spec/tasks/0/name", "value": "learner"},
                {"op": "test", "path": "/spec/tasks/2/type", "value": "evaluator"},
                {"op": "add", "path": "/spec/tasks/2/name", "value": "evaluator"},
            ])
        );
        let mut value = serde_json::to_value(&j).expect("json");
        let patch: json_patch::Patch = serde_json::from_value(patch).expect("json patch");
        json_patch::patch(&mut value, &patch).expect("applies");
        let named: DIJob = serde_json::from_value(value).expect("job");
        assert_eq!(task_name_defaults(&named), None, "defaulting happens once");
        assert_eq!(validate(&named), Ok(()));
    }

    #[test]
    fn di_orchestrator_rules_and_messages() {
        let cases = [
            (
                json!([{"type": "collector", "name": "a"}, {"type": "collector", "name": "b"}]),
                "the number of collector task is more than one",
            ),
            (
                json!([{"type": "learner", "name": "l"}, {"type": "none"}]),
                "none type task has no name",
            ),
            (
                json!([{"type": "evaluator", "name": "name-test"}, {"type": "collector", "name": "name-test"}]),
                "there is more than one task named name-test",
            ),
            (
                json!([{"type": "none", "name": "a"}, {"type": "none", "name": "a"}]),
                "there is more than one task named a",
            ),
        ];
        for (tasks, message) in cases {
            assert_eq!(
                validate(&job("j", tasks)).map_err(|e| e.message),
                Err(message.to_string())
            );
        }
        assert_eq!(
            validate(&job(
                "j",
                json!([{"type": "none", "name": "a"}, {"type": "none", "name": "b"}])
            )),
            Ok(())
        );
    }

    #[test]
    fn empty_jobs_and_bad_names_are_refused_with_a_clear_message() {
        assert_eq!(
            validate(&job("j", json!([]))).map_err(|e| e.message),
            Err("job has no tasks".to_string())
        );
        let zero = validate(&job(
            "j",
            json!([{"type": "learner", "name": "l", "replicas": 0}]),
        ))
        .expect_err("zero replicas");
        assert_eq!(
            zero.explained(),
            "spec.tasks[0].replicas: task l has 0 replicas, must be at least 1; set replicas to 1 or more"
        );
        let long = "a".repeat(55);
        let err = validate(&job(
            &long,
            json!([{"type": "learner", "name": "learner", "replicas": 12}]),
        ))
        .expect_err("too long")
        .message;
        assert!(
            err.starts_with(&format!(
                "pod name {long}-learner-11 (the pod's hostname) must be no more than 63 characters"
            )),
            "{err}"
        );
        let err = validate(&job("a.b", json!([{"type": "learner", "name": "l"}])))
            .expect_err("dots")
            .message;
        assert!(err.starts_with("job name a.b is not usable"), "{err}");
        let err = validate(&job("j", json!([{"type": "none", "name": "Under_Score"}])))
            .expect_err("task name")
            .message;
        assert!(
            err.starts_with("task name Under_Score must be a lowercase RFC 1123 label"),
            "{err}"
        );
        // 61-character service name: fine; pods at the 63 limit: fine.
        let name = "b".repeat(55);
        assert_eq!(
            validate(&job(
                &name,
                json!([{"type": "none", "name": "x", "replicas": 10}])
            )),
            Ok(())
        );
    }

    #[test]
    fn priority_class_names_are_dns_subdomains_of_at_most_253_characters() {
        let with_class = |class: &str| {
            let mut j = job("j", json!([{"type": "learner", "name": "l"}]));
            j.spec.priority_class_name = Some(class.to_string());
            j
        };
        // 63 + 1 + 63 + 1 + 63 + 1 + 61 = 253.
        let longest = [
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61),
        ]
        .join(".");
        assert_eq!(longest.len(), 253);
        for ok in [
            "high",
            "system-cluster-critical",
            "team-a.batch",
            "0",
            "a1-b2.c3",
            &longest,
        ] {
            assert_eq!(validate(&with_class(ok)), Ok(()), "{ok}");
        }
        let too_long = format!("{longest}e");
        for bad in [
            "",
            "High",
            "under_score",
            "-lead",
            "trail-",
            ".dot",
            "dot.",
            "two..dots",
            "a.-b",
            "sp ace",
            "é",
            &too_long,
        ] {
            let err = validate(&with_class(bad)).expect_err(bad);
            assert_eq!(err.field, "spec.priorityClassName", "{bad}");
            let want = if bad.len() > 253 {
                "must be no more than 253 characters"
            } else {
                "must be a lowercase RFC 1123 subdomain"
            };
            assert!(err.message.contains(want), "{bad}: {}", err.message);
        }
        // No class: nothing to check.
        let mut none = with_class("x");
        none.spec.priority_class_name = None;
        assert_eq!(validate(&none), Ok(()));
    }

    #[test]
    fn the_documented_maximums_hold_exactly_and_name_the_field() {
        let at = job(
            "j",
            json!([{"type": "none", "name": "a", "replicas": 1000},
                   {"type": "none", "name": "b", "replicas": 1, "maxReplicas": 1000},
                   {"type": "none", "name": "c", "replicas": 1000, "minReplicas": 1000},
                   {"type": "none", "name": "d", "replicas": 1000}]),
        );
        assert_eq!(validate(&at), Ok(()));
        let cases = [
            (
                json!([{"type": "none", "name": "a", "replicas": 1001}]),
                "spec.tasks[0].replicas",
            ),
            (
                json!([{"type": "none", "name": "a", "replicas": 2, "maxReplicas": i32::MAX}]),
                "spec.tasks[0].maxReplicas",
            ),
            (
                json!([{"type": "none", "name": "a", "replicas": 1}, {"type": "none", "name": "b", "replicas": 1, "minReplicas": 2_000_000_000}]),
                "spec.tasks[1].minReplicas",
            ),
            (
                json!([{"type": "none", "name": "a", "replicas": 1000}, {"type": "none", "name": "b", "replicas": 1000},
                       {"type": "none", "name": "c", "replicas": 1000}, {"type": "none", "name": "d", "replicas": 1000},
                       {"type": "none", "name": "e", "replicas": 1}]),
                "spec.tasks",
            ),
            (
                Value::Array(
                    (0..65)
                        .map(|i| json!({"type": "none", "name": format!("t{i}")}))
                        .collect(),
                ),
                "spec.tasks",
            ),
        ];
        for (tasks, field) in cases {
            let err = validate(&job("j", tasks)).expect_err("over a maximum");
            assert_eq!(err.field, field, "{err:?}");
            // The controller's Failed condition names the field as the webhook does.
            assert!(
                err.condition_message().starts_with(&format!("{field}: ")),
                "{}",
                err.condition_message()
            );
        }
        // DI-orchestrator's own rules keep their bare messages in the condition.
        let dup = validate(&job(
            "j",
            json!([{"type": "collector", "name": "a"}, {"type": "collector", "name": "b"}]),
        ))
        .expect_err("two collectors");
        assert_eq!(
            dup.condition_message(),
            "the number of collector task is more than one"
        );
    }
}
