//! Names DI-orchestrator v2 gives to a job's pods, service, DNS records and env vars, which
//! DI-engine workers rely on to find each other (spec section 2 and 5).
//!
//! Pure string functions; no API access.

/// Longest DNS label (pod hostnames, label values, service names).
pub const MAX_DNS_LABEL: usize = 63;

/// Default cluster DNS domain of services.
pub const DEFAULT_SERVICE_DOMAIN: &str = "svc.cluster.local";

/// `<job>-<task>-<localRank>`: the pod's name and hostname.
pub fn pod_name(job: &str, task: &str, local_rank: i32) -> String {
    format!("{job}-{task}-{local_rank}")
}

/// `di-<job>`: the job's headless service and its pods' subdomain.
pub fn service_name(job: &str) -> String {
    format!("di-{job}")
}

/// `<pod>.di-<job>.<namespace>.<domain>`: the DNS name a worker is reached at.
pub fn pod_fqdn(pod: &str, job: &str, namespace: &str, domain: &str) -> String {
    format!("{pod}.{}.{namespace}.{domain}", service_name(job))
}

/// `<namespace>/<name>`: the job id in the `DI_JOB_ID` env var.
pub fn job_id(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Value of the `diengine/job` label (a `/` is not allowed in label values).
pub fn job_label_value(name: &str) -> String {
    name.replace('/', "-")
}

/// `DI_<TASKNAME>_NODES`: upper-cased task name, `-` replaced by `_`.
pub fn task_nodes_env(task_name: &str) -> String {
    format!("DI_{}_NODES", task_name.to_uppercase().replace('-', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_di_orchestrator() {
        assert_eq!(
            pod_name("job-with-tasks", "collector", 1),
            "job-with-tasks-collector-1"
        );
        assert_eq!(service_name("job-with-tasks"), "di-job-with-tasks");
        assert_eq!(
            pod_fqdn(
                "job-with-tasks-learner-0",
                "job-with-tasks",
                "default",
                DEFAULT_SERVICE_DOMAIN
            ),
            "job-with-tasks-learner-0.di-job-with-tasks.default.svc.cluster.local"
        );
        assert_eq!(
            job_id("default", "job-with-tasks"),
            "default/job-with-tasks"
        );
        assert_eq!(job_label_value("a/b"), "a-b");
        assert_eq!(task_nodes_env("collector"), "DI_COLLECTOR_NODES");
        assert_eq!(task_nodes_env("name-test"), "DI_NAME_TEST_NODES");
    }
}
