//! The Kubernetes API permissions `diorch run` needs: one entry per (group, resource), with the
//! verbs the code calls and where. Test-only: the operator does not read it. `deploy/base/rbac.yaml` grants exactly these (a test compares the
//! two both ways), and a scan of the source checks that every API handle the operator builds is
//! for a resource listed here, and that every listed resource is used.
//!
//! Owns only these tables. The installer-side tools (`plugin snapshot`) run with the installer's
//! rights; `diorch webhook-cert`, run by the certificate Job and CronJob, has a table of its own
//! with the objects it may touch by name; the ClusterRoles the install ships unbound for the
//! operator's callers (replica-API clients, Prometheus) have a third.

/// Where a permission is granted: cluster-wide (ClusterRole) or in the operator's namespace
/// (Role).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scope {
    Cluster,
    Namespace,
}

/// One resource the operator calls, with the verbs it uses.
#[derive(Clone, Copy, Debug)]
pub struct Permission {
    pub scope: Scope,
    pub group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    /// Who calls it, for readers of the manifest.
    pub used_by: &'static str,
}

/// Everything `diorch run` calls.
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        scope: Scope::Cluster,
        group: "diengine.opendilab.org",
        resource: "dijobs",
        verbs: &["get", "list", "watch", "patch", "delete"],
        used_by: "controller (watch, task-name defaults, delete after ttlSecondsAfterFinished), replica API (re-read on conflict)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "diengine.opendilab.org",
        resource: "dijobs/status",
        verbs: &["patch"],
        used_by: "controller (status), replica API (status.taskReplicas)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "pods",
        verbs: &["list", "watch", "create", "delete"],
        used_by: "controller, allocator (usage)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "services",
        verbs: &["list", "watch", "create", "delete"],
        used_by: "controller",
    },
    Permission {
        scope: Scope::Cluster,
        group: "",
        resource: "nodes",
        verbs: &["list", "watch"],
        used_by: "allocator",
    },
    Permission {
        scope: Scope::Cluster,
        group: "scheduling.k8s.io",
        resource: "priorityclasses",
        verbs: &["get", "list", "watch"],
        used_by: "allocator (allocator::priorities: its watch lists and watches classes for the value a job's spec.priorityClassName names; get, read-only, for looking one up by name)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "scheduling.volcano.sh",
        resource: "podgroups",
        verbs: &["create", "patch"],
        used_by: "controller (--gang-scheduler volcano)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "scheduling.x-k8s.io",
        resource: "podgroups",
        verbs: &["create", "patch"],
        used_by: "controller (--gang-scheduler scheduler-plugins)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "events.k8s.io",
        resource: "events",
        verbs: &["create", "patch"],
        used_by: "controller and plugin watcher (events::Recorder)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "authentication.k8s.io",
        resource: "tokenreviews",
        verbs: &["create"],
        used_by: "replica API (--server-auth kubernetes)",
    },
    Permission {
        scope: Scope::Cluster,
        group: "authorization.k8s.io",
        resource: "subjectaccessreviews",
        verbs: &["create"],
        used_by: "replica API (--server-auth kubernetes)",
    },
    Permission {
        scope: Scope::Namespace,
        group: "",
        resource: "configmaps",
        verbs: &["list", "watch", "patch"],
        used_by: "plugin watcher (load, status labels)",
    },
    Permission {
        scope: Scope::Namespace,
        group: "coordination.k8s.io",
        resource: "leases",
        verbs: &["get", "list", "watch", "create", "patch"],
        used_by: "leader election (kube-lease-manager: get, create, server-side apply; the leader watches its Lease)",
    },
];

/// One resource `diorch webhook-cert` calls, limited to named objects where Kubernetes allows.
#[derive(Clone, Copy, Debug)]
pub struct NamedPermission {
    pub scope: Scope,
    pub group: &'static str,
    pub resource: &'static str,
    /// Empty: any object (only for `create`, whose object does not exist yet).
    pub names: &'static [&'static str],
    pub verbs: &'static [&'static str],
}

/// Everything `diorch webhook-cert --secret diorch-webhook-cert --webhook-configuration diorch`
/// calls (`webhook::cert`): read the Secret, write it (a Secret of another type is deleted and
/// created again), read and update both webhook configurations' caBundle.
/// `deploy/base/webhook-cert-job.yaml` grants exactly this to the Job's own ServiceAccount.
pub const CERT_JOB_PERMISSIONS: &[NamedPermission] = &[
    NamedPermission {
        scope: Scope::Namespace,
        group: "",
        resource: "secrets",
        names: &[],
        verbs: &["create"],
    },
    NamedPermission {
        scope: Scope::Namespace,
        group: "",
        resource: "secrets",
        names: &["diorch-webhook-cert"],
        verbs: &["get", "update", "delete"],
    },
    NamedPermission {
        scope: Scope::Cluster,
        group: "admissionregistration.k8s.io",
        resource: "mutatingwebhookconfigurations",
        names: &["diorch"],
        verbs: &["get", "update"],
    },
    NamedPermission {
        scope: Scope::Cluster,
        group: "admissionregistration.k8s.io",
        resource: "validatingwebhookconfigurations",
        names: &["diorch"],
        verbs: &["get", "update"],
    },
];

/// The named objects `diorch run` reads for plugins from registries (`plugin::fetch`): the
/// trusted keys (`--plugin-trusted-keys`, `configmap/diorch-plugin-keys` by default) and the
/// pull Secrets that plugin ConfigMaps name. `deploy/base/rbac.yaml` grants exactly this in the
/// Role `diorch-plugin-sources`; a plugin ConfigMap naming another pull Secret needs that name
/// added there (docs/plugins-oci.md).
pub const PLUGIN_SOURCE_PERMISSIONS: &[NamedPermission] = &[
    NamedPermission {
        scope: Scope::Namespace,
        group: "",
        resource: "configmaps",
        names: &["diorch-plugin-keys"],
        verbs: &["get"],
    },
    NamedPermission {
        scope: Scope::Namespace,
        group: "",
        resource: "secrets",
        names: &["diorch-plugin-keys", "diorch-registry-credentials"],
        verbs: &["get"],
    },
];

/// What a caller's permission applies to.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    /// A resource (or `resource/subresource`) of an API group.
    Resource {
        group: &'static str,
        resource: &'static str,
    },
    /// A non-resource URL, such as `/metrics`.
    Url(&'static str),
}

/// A permission of a ClusterRole that `deploy/base/rbac.yaml` ships for the operator's callers
/// and binds to no one: the operator asks the API server (SubjectAccessReview) whether a caller
/// holds it, and an administrator binds the role to whom they trust.
#[derive(Clone, Copy, Debug)]
pub struct CallerPermission {
    pub role: &'static str,
    pub target: Target,
    pub verbs: &'static [&'static str],
    /// What the operator serves with it.
    pub checked_by: &'static str,
}

/// The callers' ClusterRoles, exactly as `deploy/base/rbac.yaml` has them (a test compares the
/// two both ways, and checks that nothing in `deploy/` binds them).
pub const CALLER_ROLES: &[CallerPermission] = &[
    CallerPermission {
        role: "diorch-replica-client",
        target: Target::Resource {
            group: "diengine.opendilab.org",
            resource: "dijobs/replicas",
        },
        verbs: &["get", "update"],
        checked_by: "replica API (--server-auth kubernetes or job-pods): get reads replicas; update scales, removes replicas, posts profilings",
    },
    CallerPermission {
        role: "diorch-metrics-reader",
        target: Target::Url("/metrics"),
        verbs: &["get"],
        checked_by: "GET /metrics",
    },
    CallerPermission {
        role: "diorch-metrics-reader",
        target: Target::Url("/plugins"),
        verbs: &["get"],
        checked_by: "GET /plugins",
    },
];
