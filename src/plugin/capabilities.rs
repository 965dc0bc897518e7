//! Mutator capabilities: what a pod mutator may change in the pods it is given, by default and
//! with the grants its ConfigMap lists (`data.grants`).
//!
//! A mutator's change is the difference between the pod it was given and the pod it returned,
//! classified field by field against an allowlist. By default a mutator may change labels and
//! annotations (not the operator's keys), env, resources, scheduling fields (nodeSelector,
//! affinity, tolerations, topologySpreadConstraints), volumes of safe types and their mounts,
//! and make a container more restricted (`privileged: false`, `runAsNonRoot: true`, dropped
//! capabilities...). Everything else needs a [`Grant`] from a closed vocabulary, and a field the
//! allowlist does not name needs the grant `other`: a field nobody thought of is refused by
//! default. Fields the operator owns (pod identity, `diengine/*` keys, gang-scheduling keys,
//! hostname/subdomain, restartPolicy, the pin to the allocated node) need a grant no ConfigMap
//! can give.
//!
//! Owns: the grant vocabulary, the default capability set and the classification of a change.
//! Must not touch: how mutators are run (host) or loaded (registry); the invariants
//! `checks::mutation` enforces on every mutator's output (identity, operator env) stay there.
//!
//! Cost: linear in the size of the two pods (lists are matched by name through ordered maps),
//! and a refusal's message is bounded (one field per grant, long names cut).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{Map, Value};

use super::PluginError;

/// A capability a ConfigMap may give its mutator, beyond the default set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Grant {
    /// `privileged`, `allowPrivilegeEscalation`, `procMount`, Windows `hostProcess`, mount
    /// propagation.
    Privileged,
    /// Added Linux capabilities (`capabilities.add`), or fewer dropped.
    Capabilities,
    /// Any other security context field: user and group ids, `runAsNonRoot: false`,
    /// SELinux/seccomp/AppArmor, sysctls, `hostUsers`, `shareProcessNamespace`,
    /// `runtimeClassName`.
    SecurityContext,
    /// `hostPath` volumes.
    HostPath,
    /// `hostNetwork`, container `hostPort`/`hostIP`.
    HostNetwork,
    /// `hostPID`.
    HostPid,
    /// `hostIPC`.
    HostIpc,
    /// `serviceAccountName`, `automountServiceAccountToken`, projected service account tokens.
    ServiceAccountName,
    /// Adding or removing containers, init containers or ephemeral containers.
    Containers,
    /// A container's `image`, `imagePullPolicy`; the pod's `imagePullSecrets`.
    Image,
    /// A container's `command`, `args`, `workingDir`, lifecycle hooks and probes (they run
    /// commands too).
    Command,
    /// `schedulerName`, `nodeName`, priority (`priorityClassName`, `priority`,
    /// `preemptionPolicy`) and `schedulingGates`: they bypass gang scheduling or preempt other
    /// tenants' pods.
    Scheduler,
    /// Volumes of types other than the safe ones and `hostPath` (nfs, csi, iscsi, ...).
    VolumeTypes,
    /// Every field no other grant or default covers.
    Other,
}

impl Grant {
    pub const ALL: [Grant; 14] = [
        Grant::Privileged,
        Grant::Capabilities,
        Grant::SecurityContext,
        Grant::HostPath,
        Grant::HostNetwork,
        Grant::HostPid,
        Grant::HostIpc,
        Grant::ServiceAccountName,
        Grant::Containers,
        Grant::Image,
        Grant::Command,
        Grant::Scheduler,
        Grant::VolumeTypes,
        Grant::Other,
    ];

    /// The name in `data.grants`.
    pub fn name(self) -> &'static str {
        match self {
            Grant::Privileged => "privileged",
            Grant::Capabilities => "capabilities",
            Grant::SecurityContext => "securityContext",
            Grant::HostPath => "hostPath",
            Grant::HostNetwork => "hostNetwork",
            Grant::HostPid => "hostPID",
            Grant::HostIpc => "hostIPC",
            Grant::ServiceAccountName => "serviceAccountName",
            Grant::Containers => "containers",
            Grant::Image => "image",
            Grant::Command => "command",
            Grant::Scheduler => "scheduler",
            Grant::VolumeTypes => "volumeTypes",
            Grant::Other => "other",
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A grant name outside the vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown grant {name:?}; grants are {}", known())]
pub struct UnknownGrant {
    pub name: String,
}

fn known() -> String {
    Grant::ALL.map(Grant::name).join(", ")
}

impl std::str::FromStr for Grant {
    type Err = UnknownGrant;
    fn from_str(s: &str) -> Result<Grant, UnknownGrant> {
        Grant::ALL
            .into_iter()
            .find(|g| g.name() == s)
            .ok_or_else(|| UnknownGrant {
                // Cut: the name comes from a ConfigMap and ends up in status and Events.
                name: cut(s),
            })
    }
}

/// A set of grants (the ConfigMap's `data.grants`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub struct Grants(u16);

impl Grants {
    pub const NONE: Grants = Grants(0);

    pub fn contains(self, grant: Grant) -> bool {
        self.0 & grant.bit() != 0
    }

    pub fn with(self, grant: Grant) -> Grants {
        Grants(self.0 | grant.bit())
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn iter(self) -> impl Iterator<Item = Grant> {
        Grant::ALL.into_iter().filter(move |g| self.contains(*g))
    }

    /// Parses a comma- or space-separated list of grant names (exact spelling, as in
    /// [`Grant::name`]); empty entries are ignored, an unknown name is an error.
    pub fn parse(text: &str) -> Result<Grants, UnknownGrant> {
        text.split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .try_fold(Grants::NONE, |set, name| Ok(set.with(name.parse()?)))
    }
}

impl FromIterator<Grant> for Grants {
    fn from_iter<I: IntoIterator<Item = Grant>>(iter: I) -> Grants {
        iter.into_iter().fold(Grants::NONE, Grants::with)
    }
}

/// `a,b` in vocabulary order; empty for none.
impl fmt::Display for Grants {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.iter().map(Grant::name).collect();
        f.write_str(&names.join(","))
    }
}

impl serde::Serialize for Grants {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter().map(Grant::name))
    }
}

/// What a change to a pod uses: one of the defaults, a grant, or the operator's fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    /// Labels and annotations outside the operator's keys.
    Metadata,
    Env,
    Resources,
    /// nodeSelector, affinity (keeping the operator's node pin), tolerations,
    /// topologySpreadConstraints.
    Scheduling,
    /// Volumes of safe types (configMap, secret, emptyDir, downwardAPI, persistentVolumeClaim,
    /// ephemeral, projected from those), removed volumes, volume mounts.
    Volumes,
    /// A container made more restricted: `privileged: false`, `allowPrivilegeEscalation: false`,
    /// `runAsNonRoot: true`, `readOnlyRootFilesystem: true`, more dropped or fewer added
    /// capabilities.
    Hardening,
    Granted(Grant),
    /// What the operator owns; no grant allows it.
    Operator,
}

impl Capability {
    pub fn grant(self) -> Option<Grant> {
        match self {
            Capability::Granted(g) => Some(g),
            _ => None,
        }
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Capability::Metadata => "labels/annotations",
            Capability::Env => "env",
            Capability::Resources => "resources",
            Capability::Scheduling => "scheduling",
            Capability::Volumes => "volumes",
            Capability::Hardening => "hardening",
            Capability::Granted(g) => g.name(),
            Capability::Operator => "operator-owned",
        })
    }
}

impl From<Grant> for Capability {
    fn from(g: Grant) -> Capability {
        Capability::Granted(g)
    }
}

/// One changed field, e.g. `set spec.hostNetwork`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `set`, `changed` or `removed`.
    pub verb: &'static str,
    /// `spec.containers[di-container].securityContext.privileged`; list items by name, long
    /// names cut.
    pub field: String,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verb, self.field)
    }
}

/// The capabilities a change uses, each with the first field (in walk order) that used it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uses {
    pub by_capability: BTreeMap<Capability, Change>,
}

impl Uses {
    /// The grants the change needs.
    pub fn needs(&self) -> Grants {
        self.by_capability
            .keys()
            .filter_map(|c| c.grant())
            .collect()
    }

    /// The grants the change needs that `granted` lacks, with the field that needs each.
    pub fn missing(&self, granted: Grants) -> Vec<(Grant, &Change)> {
        self.by_capability
            .iter()
            .filter_map(|(c, change)| Some((c.grant()?, change)))
            .filter(|(g, _)| !granted.contains(*g))
            .collect()
    }

    /// Why `granted` does not allow this change; `None` if it does.
    pub fn refusal(&self, granted: Grants) -> Option<String> {
        if let Some(change) = self.by_capability.get(&Capability::Operator) {
            return Some(format!(
                "it {change}, which belongs to the operator; no grant allows it"
            ));
        }
        let missing = self.missing(granted);
        let ((grant, change), rest) = missing.split_first()?;
        let mut text =
            format!("it {change}, which needs the grant {grant} in its ConfigMap (data.grants)");
        if !rest.is_empty() {
            let others: Vec<String> = rest.iter().map(|(g, c)| format!("{g} ({c})")).collect();
            text.push_str(&format!("; it also needs {}", others.join(", ")));
        }
        Some(text)
    }
}

/// Longest name or key shown in a field path: values come from the mutator's output.
const SHOWN: usize = 64;

fn cut(s: &str) -> String {
    if s.len() <= SHOWN {
        return s.to_string();
    }
    format!("{}…", &s[..s.floor_char_boundary(SHOWN)])
}

type V<'a> = Option<&'a Value>;

/// `null` counts as absent: Kubernetes does not tell the two apart.
fn present(v: V<'_>) -> V<'_> {
    v.filter(|v| !v.is_null())
}

fn verb(before: V<'_>, after: V<'_>) -> &'static str {
    match (present(before), present(after)) {
        (None, _) => "set",
        (_, None) => "removed",
        _ => "changed",
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        cut(key)
    } else {
        format!("{path}.{}", cut(key))
    }
}

fn item(path: &str, name: &str) -> String {
    format!("{path}[{}]", cut(name))
}

static EMPTY_MAP: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

/// The object at `v` (absent or null = empty); `None` when `v` is something else.
fn object(v: V<'_>) -> Option<&Map<String, Value>> {
    match present(v) {
        None => Some(&EMPTY_MAP),
        Some(Value::Object(m)) => Some(m),
        Some(_) => None,
    }
}

/// The list at `v` (absent or null = empty); `None` when `v` is something else.
fn list(v: V<'_>) -> Option<&[Value]> {
    match present(v) {
        None => Some(&[]),
        Some(Value::Array(a)) => Some(a),
        Some(_) => None,
    }
}

fn name_of(v: &Value) -> &str {
    v.get("name").and_then(Value::as_str).unwrap_or_default()
}

/// Named items (containers, volumes) by name, the first of a name only: a duplicate is compared
/// with it, so it cannot hide a change.
fn first_by_name(items: &[Value]) -> BTreeMap<&str, &Value> {
    let mut by_name = BTreeMap::new();
    for v in items {
        by_name.entry(name_of(v)).or_insert(v);
    }
    by_name
}

/// The keys whose values differ between two objects, with both values.
type Changed<'a> = Vec<(&'a str, V<'a>, V<'a>)>;

fn changed<'a>(before: &'a Map<String, Value>, after: &'a Map<String, Value>) -> Changed<'a> {
    let keys: BTreeSet<&str> = before
        .keys()
        .chain(after.keys())
        .map(String::as_str)
        .collect();
    keys.into_iter()
        .filter_map(|k| {
            let (b, a) = (present(before.get(k)), present(after.get(k)));
            (b != a).then_some((k, b, a))
        })
        .collect()
}

/// Keys of the operator's own labels and annotations, besides `diengine/*`.
fn operator_key(which: &str, key: &str) -> bool {
    use diorch_core::build::{COSCHEDULING_GROUP_LABEL, VOLCANO_GROUP_ANNOTATION};
    key.starts_with("diengine/")
        || (which == "labels" && key == COSCHEDULING_GROUP_LABEL)
        || (which == "annotations" && key == VOLCANO_GROUP_ANNOTATION)
}

/// Volume types any mutator may add: the Pod Security Standards' "restricted" list minus `csi`
/// (an inline CSI volume reaches whatever its driver does, e.g. a cloud secret store).
/// `secret` and `persistentVolumeClaim` reach only the job's own namespace, which the job's
/// author can mount from the DIJob already.
const SAFE_VOLUME_TYPES: [&str; 6] = [
    "configMap",
    "secret",
    "emptyDir",
    "downwardAPI",
    "persistentVolumeClaim",
    "ephemeral",
];

#[derive(Default)]
struct Walk {
    uses: Uses,
}

impl Walk {
    fn note(&mut self, cap: impl Into<Capability>, path: &str, before: V<'_>, after: V<'_>) {
        self.uses
            .by_capability
            .entry(cap.into())
            .or_insert_with(|| Change {
                verb: verb(before, after),
                field: path.to_string(),
            });
    }

    /// The changed keys of two objects; if either is not an object the whole field is noted
    /// with `whole` and `None` returned.
    fn fields<'a>(
        &mut self,
        path: &str,
        before: V<'a>,
        after: V<'a>,
        whole: Capability,
    ) -> Option<Changed<'a>> {
        match (object(before), object(after)) {
            (Some(b), Some(a)) => Some(changed(b, a)),
            _ => {
                self.note(whole, path, before, after);
                None
            }
        }
    }

    fn pod(&mut self, before: &Value, after: &Value) {
        let whole = "(the whole pod)";
        let Some(keys) = self.fields(whole, Some(before), Some(after), Grant::Other.into()) else {
            return;
        };
        for (key, b, a) in keys {
            let path = join("", key);
            match key {
                "metadata" => self.metadata(&path, b, a),
                "spec" => self.spec(&path, b, a),
                // apiVersion, kind, status.
                _ => self.note(Grant::Other, &path, b, a),
            }
        }
    }

    fn metadata(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let Some(keys) = self.fields(path, before, after, Capability::Operator) else {
            return;
        };
        for (key, b, a) in keys {
            let path = join(path, key);
            match key {
                "labels" | "annotations" => {
                    let Some(entries) = self.fields(&path, b, a, Capability::Operator) else {
                        continue;
                    };
                    for (k, b, a) in entries {
                        let cap = if operator_key(key, k) {
                            Capability::Operator
                        } else {
                            Capability::Metadata
                        };
                        self.note(cap, &item(&path, k), b, a);
                    }
                }
                "name" | "namespace" | "ownerReferences" => {
                    self.note(Capability::Operator, &path, b, a);
                }
                _ => self.note(Grant::Other, &path, b, a),
            }
        }
    }

    fn spec(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let Some(keys) = self.fields(path, before, after, Grant::Other.into()) else {
            return;
        };
        for (key, b, a) in keys {
            let path = join(path, key);
            let cap: Capability = match key {
                "nodeSelector" | "tolerations" | "topologySpreadConstraints" => {
                    Capability::Scheduling
                }
                "affinity" => {
                    self.node_pin(&path, b, a);
                    Capability::Scheduling
                }
                "resources" => Capability::Resources,
                "schedulerName" | "nodeName" | "priorityClassName" | "priority"
                | "preemptionPolicy" | "schedulingGates" => Grant::Scheduler.into(),
                "hostNetwork" => Grant::HostNetwork.into(),
                "hostPID" => Grant::HostPid.into(),
                "hostIPC" => Grant::HostIpc.into(),
                "securityContext" => {
                    self.security_context(&path, b, a, false);
                    continue;
                }
                "hostUsers" | "shareProcessNamespace" | "runtimeClassName" => {
                    Grant::SecurityContext.into()
                }
                "serviceAccountName" | "serviceAccount" | "automountServiceAccountToken" => {
                    Grant::ServiceAccountName.into()
                }
                "containers" | "initContainers" => {
                    self.containers(&path, b, a);
                    continue;
                }
                "ephemeralContainers" => Grant::Containers.into(),
                "volumes" => {
                    self.volumes(&path, b, a);
                    continue;
                }
                "imagePullSecrets" => Grant::Image.into(),
                // The pod's DNS identity (DI_NODES names it) and its lifecycle.
                "hostname" | "subdomain" | "restartPolicy" => Capability::Operator,
                _ => Grant::Other.into(),
            };
            self.note(cap, &path, b, a);
        }
    }

    /// The operator pins a placed pod to its node with a `metadata.name` field requirement in
    /// every required node-affinity term (`controller::build::pin_to_node`): every term after
    /// the change must still carry all of them.
    fn node_pin(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        const TERMS: &str =
            "/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms";
        let terms = |v: V<'_>| -> Vec<Value> {
            v.and_then(|v| v.pointer(TERMS))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default()
        };
        let pins_of = |term: &Value| -> BTreeSet<String> {
            term.get("matchFields")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .filter(|r| r.get("key").and_then(Value::as_str) == Some("metadata.name"))
                .map(Value::to_string)
                .collect()
        };
        let pins: BTreeSet<String> = terms(before).iter().flat_map(pins_of).collect();
        if pins.is_empty() {
            return;
        }
        let after_terms = terms(after);
        let kept =
            !after_terms.is_empty() && after_terms.iter().all(|t| pins_of(t).is_superset(&pins));
        if !kept {
            let field = format!(
                "{path}.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution (the pin to the allocated node)"
            );
            self.note(Capability::Operator, &field, before, after);
        }
    }

    /// A pod's (`container` false) or a container's security context.
    fn security_context(&mut self, path: &str, before: V<'_>, after: V<'_>, container: bool) {
        let Some(keys) = self.fields(path, before, after, Grant::SecurityContext.into()) else {
            return;
        };
        let is = |v: V<'_>, want: bool| v.and_then(Value::as_bool) == Some(want);
        for (key, b, a) in keys {
            let path = join(path, key);
            let cap: Capability = match key {
                "privileged" | "allowPrivilegeEscalation" if container && is(a, false) => {
                    Capability::Hardening
                }
                "privileged" | "allowPrivilegeEscalation" | "procMount" | "windowsOptions" => {
                    Grant::Privileged.into()
                }
                "runAsNonRoot" if is(a, true) => Capability::Hardening,
                "readOnlyRootFilesystem" if container && is(a, true) => Capability::Hardening,
                "capabilities" if container => {
                    self.capabilities(&path, b, a);
                    continue;
                }
                _ => Grant::SecurityContext.into(),
            };
            self.note(cap, &path, b, a);
        }
    }

    /// More dropped or fewer added capabilities harden a container; anything else needs the
    /// grant `capabilities`.
    fn capabilities(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let Some(keys) = self.fields(path, before, after, Grant::Capabilities.into()) else {
            return;
        };
        let names = |v: V<'_>| -> Option<BTreeSet<String>> {
            list(v).map(|l| l.iter().map(Value::to_string).collect())
        };
        for (key, b, a) in keys {
            let path = join(path, key);
            let hardens = match (key, names(b), names(a)) {
                ("add", Some(b), Some(a)) => a.is_subset(&b),
                ("drop", Some(b), Some(a)) => a.is_superset(&b),
                _ => false,
            };
            let cap = if hardens {
                Capability::Hardening
            } else {
                Grant::Capabilities.into()
            };
            self.note(cap, &path, b, a);
        }
    }

    /// Containers or init containers, matched by name: an added or removed one needs the grant
    /// `containers`, a changed one is classified field by field.
    fn containers(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let (Some(b), Some(a)) = (list(before), list(after)) else {
            self.note(Grant::Containers, path, before, after);
            return;
        };
        let by_name = first_by_name(b);
        let mut seen = BTreeSet::new();
        for c in a {
            let name = name_of(c);
            let path = item(path, name);
            if !seen.insert(name) {
                // A second container of a name is an extra container, even if a copy.
                self.note(Grant::Containers, &path, None, Some(c));
            }
            match by_name.get(name) {
                Some(old) if *old == c => {}
                Some(old) => self.container(&path, Some(old), Some(c), false),
                None => {
                    self.note(Grant::Containers, &path, None, Some(c));
                    self.container(&path, None, Some(c), true);
                }
            }
        }
        for (name, old) in by_name {
            if !seen.contains(name) {
                self.note(Grant::Containers, &item(path, name), Some(old), None);
            }
        }
    }

    /// One container; `added`: a new one, whose image and command the grant `containers`
    /// covers (its security context, ports and mounts are classified as for any container).
    fn container(&mut self, path: &str, before: V<'_>, after: V<'_>, added: bool) {
        let Some(keys) = self.fields(path, before, after, Grant::Containers.into()) else {
            return;
        };
        let own = |g: Grant| -> Capability {
            if added {
                Grant::Containers.into()
            } else {
                g.into()
            }
        };
        for (key, b, a) in keys {
            let path = join(path, key);
            let cap: Capability = match key {
                "name" => continue,
                "env" | "envFrom" => Capability::Env,
                "resources" | "resizePolicy" => Capability::Resources,
                "volumeMounts" => {
                    self.mounts(&path, b, a);
                    continue;
                }
                "securityContext" => {
                    self.security_context(&path, b, a, true);
                    continue;
                }
                "ports" => {
                    self.ports(&path, b, a, own(Grant::Other));
                    continue;
                }
                "image" | "imagePullPolicy" => own(Grant::Image),
                "command" | "args" | "workingDir" | "lifecycle" | "livenessProbe"
                | "readinessProbe" | "startupProbe" => own(Grant::Command),
                _ => own(Grant::Other),
            };
            self.note(cap, &path, b, a);
        }
    }

    /// Mounts, matched by mount path: any change is `volumes` (the volumes themselves are
    /// checked), except mount propagation, which only privileged containers may use.
    fn mounts(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let (Some(b), Some(a)) = (list(before), list(after)) else {
            self.note(Grant::Other, path, before, after);
            return;
        };
        let mount_path = |m: &Value| m.get("mountPath").and_then(Value::as_str).map(cut);
        let by_path: BTreeMap<Option<String>, &Value> =
            b.iter().map(|m| (mount_path(m), m)).collect();
        for m in a {
            let at = mount_path(m);
            let old = by_path.get(&at).copied();
            if old == Some(m) {
                continue;
            }
            let path = item(path, at.as_deref().unwrap_or_default());
            let propagation = present(m.get("mountPropagation"));
            if propagation.is_some_and(|p| p.as_str() != Some("None"))
                && present(old.and_then(|o| o.get("mountPropagation"))) != propagation
            {
                self.note(
                    Grant::Privileged,
                    &join(&path, "mountPropagation"),
                    old,
                    Some(m),
                );
            } else {
                self.note(Capability::Volumes, &path, old, Some(m));
            }
        }
        if a.len() < b.len() {
            self.note(Capability::Volumes, path, before, after);
        }
    }

    /// Ports, matched whole: a new one with a `hostPort` or `hostIP` needs `hostNetwork`, any
    /// other change `other_cap`.
    fn ports(&mut self, path: &str, before: V<'_>, after: V<'_>, other_cap: Capability) {
        let (Some(b), Some(a)) = (list(before), list(after)) else {
            self.note(Grant::Other, path, before, after);
            return;
        };
        let old: BTreeSet<String> = b.iter().map(Value::to_string).collect();
        for p in a {
            if old.contains(&p.to_string()) {
                continue;
            }
            let on_host = ["hostPort", "hostIP"]
                .iter()
                .any(|k| present(p.get(*k)).is_some_and(|v| v != &Value::from(0)));
            let port = p.get("containerPort").map(Value::to_string);
            let path = item(path, port.as_deref().unwrap_or_default());
            if on_host {
                self.note(Grant::HostNetwork, &path, None, Some(p));
            } else {
                self.note(other_cap, &path, None, Some(p));
            }
        }
        if a.len() < b.len() {
            self.note(other_cap, path, before, after);
        }
    }

    /// Volumes, matched by name: an added or changed one is classified by its type; removing
    /// one is `volumes`.
    fn volumes(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let (Some(b), Some(a)) = (list(before), list(after)) else {
            self.note(Grant::Other, path, before, after);
            return;
        };
        let by_name = first_by_name(b);
        let mut seen = BTreeSet::new();
        for v in a {
            let name = name_of(v);
            seen.insert(name);
            let old = by_name.get(name).copied();
            if old == Some(v) {
                continue;
            }
            let path = item(path, name);
            let Some(keys) = self.fields(&path, old, Some(v), Grant::Other.into()) else {
                continue;
            };
            for (key, b, a) in keys {
                let path = join(&path, key);
                let cap: Capability = match key {
                    "name" => continue,
                    _ if a.is_none() => Capability::Volumes,
                    "hostPath" => Grant::HostPath.into(),
                    "projected" => {
                        self.projected(&path, b, a);
                        continue;
                    }
                    k if SAFE_VOLUME_TYPES.contains(&k) => Capability::Volumes,
                    _ => Grant::VolumeTypes.into(),
                };
                self.note(cap, &path, b, a);
            }
        }
        if by_name.keys().any(|n| !seen.contains(n)) {
            self.note(Capability::Volumes, path, before, after);
        }
    }

    /// A projected volume: sources of safe types are `volumes`, service account tokens need
    /// `serviceAccountName`, other sources `volumeTypes`.
    fn projected(&mut self, path: &str, before: V<'_>, after: V<'_>) {
        let Some(keys) = self.fields(path, before, after, Grant::VolumeTypes.into()) else {
            return;
        };
        for (key, b, a) in keys {
            let path = join(path, key);
            if key != "sources" {
                self.note(Capability::Volumes, &path, b, a);
                continue;
            }
            let (Some(old), Some(new)) = (list(b), list(a)) else {
                self.note(Grant::VolumeTypes, &path, b, a);
                continue;
            };
            let old: BTreeSet<String> = old.iter().map(Value::to_string).collect();
            for source in new.iter().filter(|s| !old.contains(&s.to_string())) {
                let Some(kinds) = source.as_object() else {
                    self.note(Grant::VolumeTypes, &path, b, a);
                    continue;
                };
                for kind in kinds.keys() {
                    let cap: Capability = match kind.as_str() {
                        "configMap" | "secret" | "downwardAPI" => Capability::Volumes,
                        "serviceAccountToken" => Grant::ServiceAccountName.into(),
                        _ => Grant::VolumeTypes.into(),
                    };
                    self.note(cap, &item(&path, kind), None, Some(source));
                }
            }
        }
    }
}

/// The capabilities the change from `before` to `after` (pods as JSON) uses.
pub fn uses(before: &Value, after: &Value) -> Uses {
    let mut walk = Walk::default();
    walk.pod(before, after);
    walk.uses
}

fn refused(plugin: &str, message: String) -> PluginError {
    PluginError::NotGranted {
        plugin: plugin.to_string(),
        message,
    }
}

/// The change's capabilities, or an error naming the first field `granted` does not allow
/// and the grant it needs.
pub fn check(
    plugin: &str,
    granted: Grants,
    before: &Value,
    after: &Value,
) -> Result<Uses, PluginError> {
    let uses = uses(before, after);
    match uses.refusal(granted) {
        Some(message) => Err(refused(plugin, message)),
        None => Ok(uses),
    }
}

/// [`check`] on typed pods (as the operator would create them).
pub fn check_pods(
    plugin: &str,
    granted: Grants,
    before: &Pod,
    after: &Pod,
) -> Result<Uses, PluginError> {
    let json = |pod: &Pod| {
        serde_json::to_value(pod).map_err(|e| PluginError::Host {
            plugin: plugin.to_string(),
            message: format!("cannot serialise the pod: {e}"),
        })
    };
    check(plugin, granted, &json(before)?, &json(after)?)
}

/// A mutator `call` on `before`, whose result is refused unless `granted` allows the change.
/// The check runs on the blocking pool: it is linear in the output's size, which the mutator
/// chooses (within its memory cap), so it must not hold an async worker.
pub fn enforce(
    plugin: &str,
    granted: Grants,
    before: Pod,
    call: BoxFuture<'static, Result<Pod, PluginError>>,
) -> BoxFuture<'static, Result<Pod, PluginError>> {
    let plugin = plugin.to_string();
    async move {
        let after = call.await?;
        let name = plugin.clone();
        tokio::task::spawn_blocking(move || {
            check_pods(&plugin, granted, &before, &after).map(|_| after)
        })
        .await
        .unwrap_or_else(|e| {
            Err(PluginError::Host {
                plugin: name,
                message: format!("the capability check did not finish: {e}"),
            })
        })
    }
    .boxed()
}

#[cfg(test)]
mod tests;
