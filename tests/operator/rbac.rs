//! The RBAC tables (`tests/common/rbac.rs`) against the install manifests and the source: each
//! grant is used, each call is granted.

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value;

use crate::common::rbac::*;

type Grant = (Scope, String, String, String);

fn table() -> BTreeSet<Grant> {
    PERMISSIONS
        .iter()
        .flat_map(|p| {
            p.verbs.iter().map(|v| {
                (
                    p.scope,
                    p.group.to_string(),
                    p.resource.to_string(),
                    v.to_string(),
                )
            })
        })
        .collect()
}

fn manifest() -> BTreeSet<Grant> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("rbac.yaml is YAML");
    let mut out = BTreeSet::new();
    for doc in docs {
        let scope = match (doc["kind"].as_str(), doc["metadata"]["name"].as_str()) {
            (Some("ClusterRole"), Some("diorch")) => Scope::Cluster,
            (Some("Role"), Some("diorch")) => Scope::Namespace,
            _ => continue,
        };
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let strings = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            assert!(
                rule.get("resourceNames").is_none(),
                "the operator's rules name no objects: {rule}"
            );
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        assert_ne!(verb, "*", "no wildcard verbs: {rule}");
                        assert_ne!(resource, "*", "no wildcard resources: {rule}");
                        out.insert((scope, group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
    }
    out
}

/// (scope, group, resource, names, verb) granted to the certificate Job.
type NamedGrant = (Scope, String, String, String, String);

fn named_table(table: &[NamedPermission]) -> BTreeSet<NamedGrant> {
    table
        .iter()
        .flat_map(|p| {
            p.verbs.iter().map(|v| {
                (
                    p.scope,
                    p.group.to_string(),
                    p.resource.to_string(),
                    p.names.join(","),
                    v.to_string(),
                )
            })
        })
        .collect()
}

/// The grants of the ClusterRole and Role named `role` in `docs`.
fn named_grants(docs: &[Value], role: &str) -> BTreeSet<NamedGrant> {
    let mut granted = BTreeSet::new();
    for doc in docs {
        let scope = match (doc["kind"].as_str(), doc["metadata"]["name"].as_str()) {
            (Some("ClusterRole"), Some(name)) if name == role => Scope::Cluster,
            (Some("Role"), Some(name)) if name == role => Scope::Namespace,
            _ => continue,
        };
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let strings = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            let names = strings("resourceNames").join(",");
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    for verb in strings("verbs") {
                        granted.insert((
                            scope,
                            group.clone(),
                            resource.clone(),
                            names.clone(),
                            verb,
                        ));
                    }
                }
            }
        }
    }
    granted
}

#[test]
fn the_plugin_sources_role_grants_exactly_the_named_reads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/rbac.yaml");
    let text = std::fs::read_to_string(&path).expect("rbac.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let (code, granted) = (
        named_table(PLUGIN_SOURCE_PERMISSIONS),
        named_grants(&docs, "diorch-plugin-sources"),
    );
    assert_eq!(
        code, granted,
        "rbac.yaml's diorch-plugin-sources differs from the table"
    );
    for p in PLUGIN_SOURCE_PERMISSIONS {
        assert!(
            !p.names.is_empty() && p.verbs == ["get"],
            "named gets only: {p:?}"
        );
    }
    // Bound to the operator's ServiceAccount, in its namespace.
    let bound = docs.iter().any(|d| {
        d["kind"] == "RoleBinding"
            && d["roleRef"]["name"] == "diorch-plugin-sources"
            && d["subjects"][0]["name"] == "diorch"
    });
    assert!(bound, "diorch-plugin-sources is bound to the operator");
    // The default key object is the one the Role names.
    assert!(diorch::operator::DEFAULT_TRUSTED_KEYS.ends_with("/diorch-plugin-keys"));
}

#[test]
fn the_certificate_job_gets_exactly_what_webhook_cert_uses_by_name() {
    let code = named_table(CERT_JOB_PERMISSIONS);
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/base/webhook-cert-job.yaml");
    let text = std::fs::read_to_string(&path).expect("webhook-cert-job.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("YAML");
    let granted = named_grants(&docs, "diorch-webhook-cert");
    let missing: Vec<_> = code.difference(&granted).collect();
    let extra: Vec<_> = granted.difference(&code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "webhook-cert-job.yaml differs from CERT_JOB_PERMISSIONS:\n  used but not granted: {missing:?}\n  granted but not used: {extra:?}"
    );
    // Only `create` goes without a name, and the names are the ones the Job passes.
    for p in CERT_JOB_PERMISSIONS {
        assert!(!p.names.is_empty() || p.verbs == ["create"], "{p:?}");
    }
    let job = docs
        .iter()
        .find(|d| d["kind"] == "Job")
        .expect("the certificate Job");
    let job_pod = &job["spec"]["template"]["spec"];
    let args = job_pod["containers"][0]["args"].to_string();
    for flag in [
        "--secret=diorch-webhook-cert",
        "--webhook-configuration=diorch",
    ] {
        assert!(args.contains(flag), "{flag} missing from {args}");
    }
    // The renewing CronJob runs the same command with the same (and only these) rights.
    let cron = docs
        .iter()
        .find(|d| d["kind"] == "CronJob")
        .expect("the certificate CronJob");
    let cron_pod = &cron["spec"]["jobTemplate"]["spec"]["template"]["spec"];
    assert_eq!(
        cron_pod["containers"][0]["args"],
        job_pod["containers"][0]["args"]
    );
    assert_eq!(cron_pod["serviceAccountName"], "diorch-webhook-cert");
    assert_eq!(job_pod["serviceAccountName"], "diorch-webhook-cert");
}

/// (role, target, verb): a resource as `group/resource`, a URL as itself.
type CallerGrant = (String, String, String);

fn caller_table() -> BTreeSet<CallerGrant> {
    CALLER_ROLES
        .iter()
        .flat_map(|p| {
            let target = match p.target {
                Target::Resource { group, resource } => format!("{group}/{resource}"),
                Target::Url(url) => url.to_string(),
            };
            p.verbs
                .iter()
                .map(move |v| (p.role.to_string(), target.clone(), v.to_string()))
        })
        .collect()
}

/// Every ClusterRole in rbac.yaml but the operator's own, as grants; panics on a wildcard
/// or a named object, which no caller needs.
fn caller_manifest(docs: &[Value]) -> BTreeSet<CallerGrant> {
    let mut out = BTreeSet::new();
    for doc in docs {
        let (Some("ClusterRole"), Some(role)) =
            (doc["kind"].as_str(), doc["metadata"]["name"].as_str())
        else {
            continue;
        };
        if role == "diorch" {
            continue;
        }
        for rule in doc["rules"].as_array().into_iter().flatten() {
            let strings = |k: &str| -> Vec<String> {
                rule[k]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            };
            assert!(rule.get("resourceNames").is_none(), "{role}: {rule}");
            let mut targets = strings("nonResourceURLs");
            for group in strings("apiGroups") {
                for resource in strings("resources") {
                    targets.push(format!("{group}/{resource}"));
                }
            }
            for target in targets {
                for verb in strings("verbs") {
                    assert!(
                        !target.contains('*') && verb != "*",
                        "{role}: no wildcards: {rule}"
                    );
                    out.insert((role.to_string(), target.clone(), verb));
                }
            }
        }
    }
    out
}

#[test]
fn the_callers_roles_are_exactly_the_table_and_bound_to_no_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy");
    let text = std::fs::read_to_string(root.join("base/rbac.yaml")).expect("rbac.yaml");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("rbac.yaml is YAML");
    let (code, granted) = (caller_table(), caller_manifest(&docs));
    let missing: Vec<&CallerGrant> = code.difference(&granted).collect();
    let extra: Vec<&CallerGrant> = granted.difference(&code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "deploy/base/rbac.yaml's caller roles differ from rbac::CALLER_ROLES:\n  in the table only: {missing:?}\n  in the manifest only: {extra:?}"
    );
    // Unbound: no binding anywhere under deploy/ names them (an administrator chooses whom),
    // except the opt-in monitoring component's, which binds the metrics reader to the
    // Prometheus it sets up a ServiceMonitor for (choosing it is choosing whom).
    let opted_in = root.join("components/monitoring/metrics-reader-binding.yaml");
    let roles: BTreeSet<&str> = CALLER_ROLES.iter().map(|p| p.role).collect();
    let mut dirs = vec![root];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("deploy/").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read");
            let Ok(docs) = serde_saphyr::from_multiple::<Value>(&text) else {
                continue;
            };
            for doc in docs {
                let kind = doc["kind"].as_str().unwrap_or_default();
                if kind.ends_with("Binding") {
                    let name = doc["roleRef"]["name"].as_str().unwrap_or_default();
                    if path == opted_in && name == "diorch-metrics-reader" {
                        continue;
                    }
                    assert!(
                        !roles.contains(name),
                        "{} binds {name}: the callers' roles ship unbound",
                        path.display()
                    );
                }
            }
        }
    }
}

#[test]
fn the_manifest_grants_exactly_what_the_code_uses() {
    let (code, granted) = (table(), manifest());
    let missing: Vec<&Grant> = code.difference(&granted).collect();
    let extra: Vec<&Grant> = granted.difference(&code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "deploy/base/rbac.yaml differs from tests/common/rbac.rs:\n  used but not granted: {missing:?}\n  granted but not used: {extra:?}"
    );
}

/// The API handles the operator's source builds, as (type, file).
fn api_types() -> Vec<(String, String)> {
    // Installer-side and test-bed code runs with other rights.
    const NOT_THE_OPERATOR: &[&str] = &[
        "webhook/cert.rs",
        "plugin/record.rs",
        "plugin/cli.rs",
        "main.rs",
        "rbac.rs",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.clone()];
    let mut out = Vec::new();
    while let Some(path) = files.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("src").flatten() {
                files.push(entry.path());
            }
            continue;
        }
        let rel = path
            .strip_prefix(&root)
            .expect("under src")
            .to_string_lossy()
            .replace('\\', "/");
        if !rel.ends_with(".rs")
            || rel.ends_with("tests.rs")
            || NOT_THE_OPERATOR.iter().any(|n| rel.starts_with(n))
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("source");
        // Unit tests at the end of a file build handles of their own.
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        for marker in ["Api<", "Api::<"] {
            for part in text.split(marker).skip(1) {
                let ty: String = part
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == ':' || *c == '_')
                    .collect();
                let ty = ty.rsplit("::").next().unwrap_or_default().to_string();
                out.push((ty, rel.clone()));
            }
        }
    }
    out
}

/// The resources a typed handle reaches.
fn resources_of(ty: &str) -> Option<&'static [&'static str]> {
    Some(match ty {
        "DIJob" | "CachedJob" | "WrittenStatus" => &["dijobs", "dijobs/status"],
        "Pod" | "UsagePod" | "WatchedPod" => &["pods"],
        "Service" | "WatchedService" => &["services"],
        "Node" => &["nodes"],
        "PriorityClass" => &["priorityclasses"],
        "ConfigMap" => &["configmaps"],
        "Lease" => &["leases"],
        "Secret" => &["secrets"],
        "Event" => &["events"],
        "TokenReview" => &["tokenreviews"],
        "SubjectAccessReview" => &["subjectaccessreviews"],
        // The gang scheduler's PodGroup, by group and version chosen at run time.
        "DynamicObject" => &["podgroups"],
        _ => return None,
    })
}

#[test]
fn every_api_handle_in_the_operator_is_for_a_listed_resource_and_each_is_used() {
    let found = api_types();
    assert!(
        found.len() > 10,
        "the scan found too few API handles: {found:?}"
    );
    let listed: BTreeSet<&str> = PERMISSIONS
        .iter()
        .map(|p| p.resource)
        .chain(PLUGIN_SOURCE_PERMISSIONS.iter().map(|p| p.resource))
        .collect();
    let mut used = BTreeSet::new();
    for (ty, file) in &found {
        let resources = resources_of(ty).unwrap_or_else(|| {
            panic!("src/{file} builds an Api<{ty}>: add its resource and verbs to tests/common/rbac.rs and deploy/base/rbac.yaml")
        });
        for r in resources {
            assert!(
                listed.contains(r),
                "src/{file} uses {r}, not in tests/common/rbac.rs"
            );
            used.insert(*r);
        }
    }
    let unused: Vec<&&str> = listed.difference(&used).collect();
    assert!(unused.is_empty(), "listed but never used: {unused:?}");
}
