//! The sandbox's resource registry: which REST resources exist (built-in kinds plus those
//! defined by CustomResourceDefinitions), and how they are named and served.
//!
//! Owns the `ResourceInfo` descriptors shared by the HTTP layer, discovery, OpenAPI and
//! Table rendering. It must not hold objects: storage lives in the store.

use std::sync::Arc;

use serde_json::Value;

/// One `additionalPrinterColumns` entry (CRDs) or one built-in Table column.
#[derive(Clone, Debug, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// OpenAPI type of the cell: `string`, `integer`, `number`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    /// 0 = shown by default; > 0 = only with `-o wide`.
    pub priority: i32,
    /// Simple JSONPath such as `.status.phase` (CRDs only; empty for built-ins).
    pub json_path: String,
}

/// What a custom resource's version needs beyond naming: its schema and columns.
#[derive(Clone, Debug)]
pub struct CustomResourceInfo {
    /// `openAPIV3Schema` of the served version, as stored in the CRD.
    pub schema: Value,
    /// Name of the owning CRD (`<plural>.<group>`).
    pub crd_name: String,
}

/// A REST resource the sandbox serves, e.g. `pods` in the core group `v1`.
#[derive(Clone, Debug)]
pub struct ResourceInfo {
    /// API group; empty for the core (legacy `/api/v1`) group.
    pub group: String,
    pub version: String,
    pub kind: String,
    pub list_kind: String,
    pub plural: String,
    pub singular: String,
    pub short_names: Vec<String>,
    pub namespaced: bool,
    /// Subresources served, e.g. `status`, `binding`, `log`.
    pub subresources: Vec<String>,
    pub categories: Vec<String>,
    /// Columns for Table output. Built-ins leave this empty and are rendered by `table`.
    pub printer_columns: Vec<PrinterColumn>,
    /// Present for resources defined by a CRD.
    pub custom: Option<Arc<CustomResourceInfo>>,
}

impl ResourceInfo {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `pods` for core resources, `dijobs.diengine.opendilab.org` for grouped ones (the
    /// "qualified resource" Kubernetes uses in error messages).
    pub fn qualified_name(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `/api/v1` or `/apis/<group>/<version>`.
    pub fn base_path(&self) -> String {
        if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        }
    }

    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    short_names: &'static [&'static str],
    namespaced: bool,
    subresources: &'static [&'static str],
}

const BUILTINS: &[Builtin] = &[
    Builtin {
        group: "",
        version: "v1",
        kind: "Namespace",
        plural: "namespaces",
        short_names: &["ns"],
        namespaced: false,
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Node",
        plural: "nodes",
        short_names: &["no"],
        namespaced: false,
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Pod",
        plural: "pods",
        short_names: &["po"],
        namespaced: true,
        subresources: &["status", "binding", "log"],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Service",
        plural: "services",
        short_names: &["svc"],
        namespaced: true,
        subresources: &["status"],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Endpoints",
        plural: "endpoints",
        short_names: &["ep"],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        plural: "configmaps",
        short_names: &["cm"],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Secret",
        plural: "secrets",
        short_names: &[],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "ServiceAccount",
        plural: "serviceaccounts",
        short_names: &["sa"],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "",
        version: "v1",
        kind: "Event",
        plural: "events",
        short_names: &["ev"],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "events.k8s.io",
        version: "v1",
        kind: "Event",
        plural: "events",
        short_names: &["ev"],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "coordination.k8s.io",
        version: "v1",
        kind: "Lease",
        plural: "leases",
        short_names: &[],
        namespaced: true,
        subresources: &[],
    },
    Builtin {
        group: "scheduling.k8s.io",
        version: "v1",
        kind: "PriorityClass",
        plural: "priorityclasses",
        short_names: &["pc"],
        namespaced: false,
        subresources: &[],
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "MutatingWebhookConfiguration",
        plural: "mutatingwebhookconfigurations",
        short_names: &[],
        namespaced: false,
        subresources: &[],
    },
    Builtin {
        group: "admissionregistration.k8s.io",
        version: "v1",
        kind: "ValidatingWebhookConfiguration",
        plural: "validatingwebhookconfigurations",
        short_names: &[],
        namespaced: false,
        subresources: &[],
    },
    Builtin {
        group: "authentication.k8s.io",
        version: "v1",
        kind: "TokenReview",
        plural: "tokenreviews",
        short_names: &[],
        namespaced: false,
        subresources: &[],
    },
    Builtin {
        group: "authorization.k8s.io",
        version: "v1",
        kind: "SubjectAccessReview",
        plural: "subjectaccessreviews",
        short_names: &[],
        namespaced: false,
        subresources: &[],
    },
    Builtin {
        group: "apiextensions.k8s.io",
        version: "v1",
        kind: "CustomResourceDefinition",
        plural: "customresourcedefinitions",
        short_names: &["crd", "crds"],
        namespaced: false,
        subresources: &["status"],
    },
];

/// The built-in resources every sandbox serves from start-up.
pub fn builtin_resources() -> Vec<ResourceInfo> {
    BUILTINS
        .iter()
        .map(|b| ResourceInfo {
            group: b.group.to_string(),
            version: b.version.to_string(),
            kind: b.kind.to_string(),
            list_kind: format!("{}List", b.kind),
            plural: b.plural.to_string(),
            singular: b.kind.to_ascii_lowercase(),
            short_names: b.short_names.iter().map(|s| s.to_string()).collect(),
            namespaced: b.namespaced,
            subresources: b.subresources.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            printer_columns: Vec::new(),
            custom: None,
        })
        .collect()
}

/// The mutable set of served resources: built-ins plus every version served by each
/// CustomResourceDefinition, replaced as a whole when the CRD changes.
pub struct Registry {
    inner: std::sync::RwLock<RegistryInner>,
}

struct RegistryInner {
    builtins: Vec<Arc<ResourceInfo>>,
    /// CRD name → the resources (one per served version) it defines.
    custom: std::collections::BTreeMap<String, Vec<Arc<ResourceInfo>>>,
    /// Bumped on every change, so discovery/OpenAPI caches know when to rebuild.
    generation: u64,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// The built-in resources only. Pods and services are in the `all` category as upstream.
    pub fn new() -> Self {
        let builtins = builtin_resources()
            .into_iter()
            .map(|mut r| {
                if r.group.is_empty() && matches!(r.plural.as_str(), "pods" | "services") {
                    r.categories = vec!["all".to_string()];
                }
                Arc::new(r)
            })
            .collect();
        Registry {
            inner: std::sync::RwLock::new(RegistryInner {
                builtins,
                custom: Default::default(),
                generation: 0,
            }),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, RegistryInner> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Every served resource: built-ins first, then custom ones by CRD name.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        let inner = self.read();
        inner
            .builtins
            .iter()
            .chain(inner.custom.values().flatten())
            .cloned()
            .collect()
    }

    /// The resource served at `group`/`version` under `plural`.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        let inner = self.read();
        inner
            .builtins
            .iter()
            .chain(inner.custom.values().flatten())
            .find(|r| r.group == group && r.version == version && r.plural == plural)
            .cloned()
    }

    /// Whether any resource is served in `group` (and `version`, when given).
    pub fn serves(&self, group: &str, version: Option<&str>) -> bool {
        let inner = self.read();
        inner
            .builtins
            .iter()
            .chain(inner.custom.values().flatten())
            .any(|r| r.group == group && version.is_none_or(|v| r.version == v))
    }

    /// Changes whenever the set of resources changes.
    pub fn generation(&self) -> u64 {
        self.read().generation
    }

    /// Replaces the resources defined by one CRD (an empty list unregisters it).
    pub fn set_custom(&self, crd_name: &str, resources: Vec<ResourceInfo>) {
        let mut inner = self.inner.write().unwrap_or_else(|p| p.into_inner());
        inner.generation += 1;
        if resources.is_empty() {
            inner.custom.remove(crd_name);
        } else {
            inner.custom.insert(
                crd_name.to_string(),
                resources.into_iter().map(Arc::new).collect(),
            );
        }
    }
}
