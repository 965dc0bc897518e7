//! Plugin ConfigMaps: a pure mapping from a `diorch.io/plugin`-labelled ConfigMap to a typed
//! [`PluginSpec`] plus the component bytes, and back (for `diorch plugin configmap`).
//!
//! Owns: the ConfigMap format. Must not touch: loading or watching.
//!
//! Format: label `diorch.io/plugin` (any value); `binaryData["plugin.wasm"]` = the component;
//! `data`: `kind` (`policy`|`mutator`, required), `name` (default: the ConfigMap's name),
//! `taskTypes` (mutators: comma-separated task types, empty or `*` = all), `order` (mutators:
//! integer, lower runs first, default 0), `config` (string handed to the plugin),
//! `deadlineMs`, `memoryMiB` (overrides of the host defaults), `failurePolicy` (`Fail` default
//! or `Ignore`, meaning what it means for Kubernetes admission webhooks: on a plugin error, Fail
//! refuses the pod creation, Ignore creates the pod unmutated by that plugin), `grants`
//! (mutators: comma-separated capabilities beyond the default set, from the closed vocabulary
//! of [`super::capabilities::Grant`]; an unknown name refuses the ConfigMap).
//!
//! The component comes from one of two places (both at once refuses the ConfigMap):
//! - inline: `binaryData["plugin.wasm"]`, raw or compressed as `data["encoding"]` says (`gzip`
//!   or `zstd`; `identity` by default), at most [`INLINE_MAX_BYTES`] once decompressed; an
//!   optional `data["signature"]` is a `cosign sign-blob` signature of the raw component;
//! - by reference: `data["image"]`, an OCI reference (pinned `…@sha256:…`, or a tag the
//!   operator resolves when it loads the ConfigMap), pulled with the credentials of the
//!   `kubernetes.io/dockerconfigjson` Secret `data["imagePullSecret"]` names, if any.
//!
//! `data["requireSignature"]` (`true`|`false`) asks for a signature by a trusted key (see
//! `crate::oci::sign`); when absent the operator's `--require-plugin-signatures` decides.
//!
//! A policy's part in the rollout of another ([`Rollout`]) is a label, so that promotion and
//! rollback are one `kubectl label` (one object, one write):
//! - [`SHADOW_OF_LABEL`]` = NAME`: a shadow of policy NAME, given every input NAME answers and
//!   never applied;
//! - [`REPLACES_LABEL`]` = NAME`: answers the calls for NAME while NAME's own plugin stays
//!   loaded, standing by (removing the label rolls back).
//!
//! Both at once, either on a mutator, or naming the plugin itself refuses the ConfigMap.
//!
//! The operator writes back to the ConfigMap's metadata only (never `data` or `binaryData`),
//! after every load attempt: labels [`STATE_LABEL`] and [`VERSION_LABEL`], annotation
//! [`STATUS_ANNOTATION`]. [`from_configmap`] reads none of them (only the presence of
//! [`PLUGIN_LABEL`]), so these writes never change the parsed spec and never cause a reload.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;

use super::Limits;
use super::capabilities::Grants;
use super::compress::Encoding;
use crate::oci::Reference;
use diorch_core::key::ObjectKey;

pub const PLUGIN_LABEL: &str = "diorch.io/plugin";
/// Written by the operator: `Loaded` when the last upload loaded, `Rejected` when it was refused
/// (an older version may still serve: see [`VERSION_LABEL`]).
pub const STATE_LABEL: &str = "diorch.io/plugin-state";
/// Written by the operator: the first 12 hex digits of the sha256 of the version serving now;
/// absent while no version of the plugin serves.
pub const VERSION_LABEL: &str = "diorch.io/plugin-version";
/// Written by the operator: one line for people, e.g. `loaded version 3f2a…` or
/// `refused: <cause>; serving 3f2a…`.
pub const STATUS_ANNOTATION: &str = "diorch.io/plugin-status";
/// Set by people: this policy is a shadow of the policy the value names (see [`Rollout`]).
pub const SHADOW_OF_LABEL: &str = "diorch.io/shadow-of";
/// Set by people: this policy answers for the policy the value names (see [`Rollout`]).
pub const REPLACES_LABEL: &str = "diorch.io/replaces";
pub const WASM_KEY: &str = "plugin.wasm";
/// Largest inline component once decompressed: what a ConfigMap (~1 MiB) can carry compressed
/// (zstd shrinks an interpreted component about 4×). Larger ones go through a registry.
pub const INLINE_MAX_BYTES: usize = 16 << 20;
/// Longest `data["signature"]` (a base64 ECDSA signature is ~100 bytes).
const SIGNATURE_CAP: usize = 4096;
/// Caps that a ConfigMap may ask for: a plugin cannot grant itself unbounded resources.
pub const MAX_DEADLINE: Duration = Duration::from_secs(5);
pub const MAX_MEMORY_MIB: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PluginKind {
    Policy,
    Mutator,
}

impl fmt::Display for PluginKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PluginKind::Policy => "policy",
            PluginKind::Mutator => "mutator",
        })
    }
}

impl std::str::FromStr for PluginKind {
    type Err = SpecError;
    fn from_str(s: &str) -> Result<Self, SpecError> {
        match s {
            "policy" => Ok(PluginKind::Policy),
            "mutator" => Ok(PluginKind::Mutator),
            other => Err(SpecError::Invalid {
                key: "kind",
                message: format!("{other:?} is neither \"policy\" nor \"mutator\""),
            }),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum FailurePolicy {
    #[default]
    Fail,
    Ignore,
}

impl fmt::Display for FailurePolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        })
    }
}

/// A policy's part in the rollout of another policy (labels [`SHADOW_OF_LABEL`] and
/// [`REPLACES_LABEL`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Rollout {
    /// Serves under its own name.
    #[default]
    Own,
    /// Shadows the named policy: called with its inputs, never applied.
    ShadowOf(String),
    /// Answers the named policy's calls (promoted over it).
    Replaces(String),
}

impl Rollout {
    /// The policy this one shadows, if it is a shadow.
    pub fn shadows(&self) -> Option<&str> {
        match self {
            Rollout::ShadowOf(name) => Some(name),
            _ => None,
        }
    }

    /// The policy this one answers for, if promoted over one.
    pub fn replaces(&self) -> Option<&str> {
        match self {
            Rollout::Replaces(name) => Some(name),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginSpec {
    pub name: String,
    pub kind: PluginKind,
    /// Mutators: task types they apply to; empty = all.
    pub task_types: Vec<String>,
    /// Mutators: lower runs first; ties by name.
    pub order: i32,
    pub config: String,
    pub deadline: Option<Duration>,
    pub memory_bytes: Option<usize>,
    pub failure_policy: FailurePolicy,
    /// Mutators: what they may change beyond the default capabilities.
    pub grants: Grants,
    /// `namespace/name` of the ConfigMap (empty when not from one).
    pub source: String,
    /// Whether a signature by a trusted key is required (`None`: the operator's default).
    pub require_signature: Option<bool>,
    /// Policies: a shadow of, or promoted over, another policy.
    pub rollout: Rollout,
}

/// Where a plugin's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentSource {
    /// Carried by the ConfigMap, as its bytes say (decoded on load, bounded).
    Inline {
        bytes: Vec<u8>,
        encoding: Encoding,
        /// A `cosign sign-blob` signature of the decoded component.
        signature: Option<String>,
    },
    /// Pulled from a registry.
    Image {
        reference: Reference,
        /// The `kubernetes.io/dockerconfigjson` Secret with the registry's credentials.
        pull_secret: Option<String>,
    },
}

impl ComponentSource {
    /// An uncompressed inline component.
    pub fn inline(bytes: Vec<u8>) -> ComponentSource {
        ComponentSource::Inline {
            bytes,
            encoding: Encoding::Identity,
            signature: None,
        }
    }
}

impl PluginSpec {
    pub fn new(name: &str, kind: PluginKind) -> PluginSpec {
        PluginSpec {
            name: name.into(),
            kind,
            task_types: vec![],
            order: 0,
            config: String::new(),
            deadline: None,
            memory_bytes: None,
            failure_policy: FailurePolicy::default(),
            grants: Grants::NONE,
            source: String::new(),
            require_signature: None,
            rollout: Rollout::Own,
        }
    }

    /// The host defaults with this spec's overrides.
    pub fn limits(&self, defaults: Limits) -> Limits {
        Limits {
            deadline: self.deadline.unwrap_or(defaults.deadline),
            memory_bytes: self.memory_bytes.unwrap_or(defaults.memory_bytes),
        }
    }

    pub fn applies_to(&self, task_type: &str) -> bool {
        self.task_types.is_empty() || self.task_types.iter().any(|t| t == task_type)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("ConfigMap is not a plugin: it lacks the {PLUGIN_LABEL} label")]
    NotAPlugin,
    #[error(
        "ConfigMap has neither binaryData[\"{WASM_KEY}\"] with the component nor data[\"image\"] \
         naming it in a registry"
    )]
    MissingComponent,
    #[error("ConfigMap has both binaryData[\"{WASM_KEY}\"] and data[\"image\"]: keep one")]
    TwoComponents,
    #[error("ConfigMap lacks data[\"{0}\"]")]
    Missing(&'static str),
    #[error("data[\"{key}\"]: {message}")]
    Invalid { key: &'static str, message: String },
    #[error("label {key}: {message}")]
    InvalidLabel { key: &'static str, message: String },
}

fn invalid(key: &'static str, message: impl Into<String>) -> SpecError {
    SpecError::Invalid {
        key,
        message: message.into(),
    }
}

/// A plugin name: a DNS label.
pub fn valid_plugin_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The rollout labels of a policy named `name` (see [`Rollout`]).
fn rollout(cm: &ConfigMap, kind: PluginKind, name: &str) -> Result<Rollout, SpecError> {
    let label = |key: &'static str| -> Result<Option<String>, SpecError> {
        let Some(value) = cm.metadata.labels.as_ref().and_then(|l| l.get(key)) else {
            return Ok(None);
        };
        let bad = |message: String| SpecError::InvalidLabel { key, message };
        if !valid_plugin_name(value) {
            return Err(bad(format!("{value:.64?} is not a plugin name")));
        }
        if kind != PluginKind::Policy {
            return Err(bad(
                "only a scheduling policy takes part in a rollout".into()
            ));
        }
        if value == name {
            return Err(bad(format!("{name} names the plugin itself")));
        }
        Ok(Some(value.clone()))
    };
    match (label(SHADOW_OF_LABEL)?, label(REPLACES_LABEL)?) {
        (Some(_), Some(_)) => Err(SpecError::InvalidLabel {
            key: REPLACES_LABEL,
            message: format!("a policy is a shadow ({SHADOW_OF_LABEL}) or promoted, not both"),
        }),
        (Some(of), None) => Ok(Rollout::ShadowOf(of)),
        (None, Some(of)) => Ok(Rollout::Replaces(of)),
        (None, None) => Ok(Rollout::Own),
    }
}

/// A Kubernetes object name (DNS subdomain), as a Secret's.
fn valid_object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// `data[key]`, trimmed; `None` when absent or blank.
fn field<'a>(cm: &'a ConfigMap, key: &str) -> Option<&'a str> {
    cm.data
        .as_ref()?
        .get(key)
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
}

/// `data.taskTypes` as a list (empty, or `*` alone, means all).
fn task_types(cm: &ConfigMap) -> Vec<String> {
    field(cm, "taskTypes")
        .map(|v| {
            v.split(',')
                .map(str::trim)
                .filter(|t| !t.is_empty() && *t != "*")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// For a ConfigMap [`from_configmap`] refused: the mutator name and task types it asks for, if
/// its `data` says `kind: mutator` and not `failurePolicy: Ignore` (read leniently, by the same
/// field rules): whose pods must wait while it is invalid (fail closed).
pub fn fail_closed_target(cm: &ConfigMap) -> Option<(String, Vec<String>)> {
    if field(cm, "kind") != Some("mutator") || field(cm, "failurePolicy") == Some("Ignore") {
        return None;
    }
    let name = field(cm, "name")
        .map(str::to_string)
        .or_else(|| cm.metadata.name.clone())
        .unwrap_or_default();
    Some((name, task_types(cm)))
}

/// Parses a plugin ConfigMap; the component is returned as it is (decoded and checked on load).
pub fn from_configmap(cm: &ConfigMap) -> Result<(PluginSpec, ComponentSource), SpecError> {
    let labelled = cm
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.contains_key(PLUGIN_LABEL));
    if !labelled {
        return Err(SpecError::NotAPlugin);
    }
    let get = |k: &str| field(cm, k);
    let kind: PluginKind = get("kind").ok_or(SpecError::Missing("kind"))?.parse()?;
    let name = match get("name") {
        Some(n) => n.to_string(),
        None => cm
            .metadata
            .name
            .clone()
            .ok_or_else(|| invalid("name", "no name and the ConfigMap has none"))?,
    };
    if !valid_plugin_name(&name) {
        return Err(invalid("name", format!("{name:?} is not a DNS label")));
    }
    let rollout = rollout(cm, kind, &name)?;
    let task_types = task_types(cm);
    if kind == PluginKind::Policy && !task_types.is_empty() {
        return Err(invalid("taskTypes", "only mutators have task types"));
    }
    let order = match get("order") {
        Some(v) => v
            .parse::<i32>()
            .map_err(|e| invalid("order", format!("{v:?}: {e}")))?,
        None => 0,
    };
    let deadline = match get("deadlineMs") {
        Some(v) => {
            let ms = v
                .parse::<u64>()
                .map_err(|e| invalid("deadlineMs", format!("{v:?}: {e}")))?;
            let d = Duration::from_millis(ms);
            if ms == 0 || d > MAX_DEADLINE {
                return Err(invalid(
                    "deadlineMs",
                    format!("{ms} is not in 1..={}", MAX_DEADLINE.as_millis()),
                ));
            }
            Some(d)
        }
        None => None,
    };
    let memory_bytes = match get("memoryMiB") {
        Some(v) => {
            let mib = v
                .parse::<usize>()
                .map_err(|e| invalid("memoryMiB", format!("{v:?}: {e}")))?;
            if mib == 0 || mib > MAX_MEMORY_MIB {
                return Err(invalid(
                    "memoryMiB",
                    format!("{mib} is not in 1..={MAX_MEMORY_MIB}"),
                ));
            }
            Some(mib << 20)
        }
        None => None,
    };
    let failure_policy = match get("failurePolicy") {
        None | Some("Fail") => FailurePolicy::Fail,
        Some("Ignore") => FailurePolicy::Ignore,
        Some(other) => {
            return Err(invalid(
                "failurePolicy",
                format!("{other:?} is neither \"Fail\" nor \"Ignore\""),
            ));
        }
    };
    let grants = match get("grants") {
        Some(v) => Grants::parse(v).map_err(|e| invalid("grants", e.to_string()))?,
        None => Grants::NONE,
    };
    if kind == PluginKind::Policy && !grants.is_empty() {
        return Err(invalid("grants", "only mutators have grants"));
    }
    let inline = cm
        .binary_data
        .as_ref()
        .and_then(|b| b.get(WASM_KEY))
        .map(|b| b.0.clone())
        .filter(|b| !b.is_empty());
    let encoding = match get("encoding") {
        Some(v) => v
            .parse::<Encoding>()
            .map_err(|e| invalid("encoding", e.to_string()))?,
        None => Encoding::Identity,
    };
    let signature = get("signature").map(str::to_string);
    if signature.as_ref().is_some_and(|s| s.len() > SIGNATURE_CAP) {
        return Err(invalid(
            "signature",
            format!("longer than {SIGNATURE_CAP} bytes"),
        ));
    }
    let require_signature = match get("requireSignature") {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(other) => {
            return Err(invalid(
                "requireSignature",
                format!("{other:.64?} is neither \"true\" nor \"false\""),
            ));
        }
    };
    let pull_secret = get("imagePullSecret").map(str::to_string);
    if let Some(secret) = &pull_secret
        && !valid_object_name(secret)
    {
        return Err(invalid(
            "imagePullSecret",
            format!("{secret:.64?} is not a Secret name"),
        ));
    }
    let component = match (inline, get("image")) {
        (Some(_), Some(_)) => return Err(SpecError::TwoComponents),
        (None, None) => return Err(SpecError::MissingComponent),
        (Some(bytes), None) => {
            if pull_secret.is_some() {
                return Err(invalid(
                    "imagePullSecret",
                    "only a component named by data[\"image\"] is pulled",
                ));
            }
            ComponentSource::Inline {
                bytes,
                encoding,
                signature,
            }
        }
        (None, Some(image)) => {
            if encoding != Encoding::Identity {
                return Err(invalid("encoding", "only inline components are decoded"));
            }
            if signature.is_some() {
                return Err(invalid(
                    "signature",
                    "a component in a registry is signed there (diorch plugin push --sign)",
                ));
            }
            let reference: Reference = image
                .parse()
                .map_err(|e: crate::oci::ReferenceError| invalid("image", e.to_string()))?;
            ComponentSource::Image {
                reference,
                pull_secret,
            }
        }
    };
    // Shown in the plugin status as kubectl writes it.
    let source = ObjectKey::of(&cm.metadata).to_string();
    Ok((
        PluginSpec {
            name,
            kind,
            task_types,
            order,
            // The config is passed verbatim (not trimmed): it is the plugin's to interpret.
            config: cm
                .data
                .as_ref()
                .and_then(|d| d.get("config"))
                .cloned()
                .unwrap_or_default(),
            deadline,
            memory_bytes,
            failure_policy,
            grants,
            source,
            require_signature,
            rollout,
        },
        component,
    ))
}

/// The ConfigMap for `spec` and raw component `bytes` (ConfigMap name = plugin name prefixed
/// `plugin-`).
pub fn to_configmap(spec: &PluginSpec, bytes: Vec<u8>, namespace: Option<&str>) -> ConfigMap {
    to_configmap_from(spec, ComponentSource::inline(bytes), namespace)
}

/// The ConfigMap for `spec` and `component` (see [`to_configmap`]).
pub fn to_configmap_from(
    spec: &PluginSpec,
    component: ComponentSource,
    namespace: Option<&str>,
) -> ConfigMap {
    let mut data = BTreeMap::new();
    data.insert("kind".to_string(), spec.kind.to_string());
    data.insert("name".to_string(), spec.name.clone());
    if !spec.task_types.is_empty() {
        data.insert("taskTypes".to_string(), spec.task_types.join(","));
    }
    if spec.order != 0 {
        data.insert("order".to_string(), spec.order.to_string());
    }
    if !spec.config.is_empty() {
        data.insert("config".to_string(), spec.config.clone());
    }
    if let Some(d) = spec.deadline {
        data.insert("deadlineMs".to_string(), d.as_millis().to_string());
    }
    if let Some(m) = spec.memory_bytes {
        data.insert("memoryMiB".to_string(), (m >> 20).to_string());
    }
    data.insert("failurePolicy".to_string(), spec.failure_policy.to_string());
    if !spec.grants.is_empty() {
        data.insert("grants".to_string(), spec.grants.to_string());
    }
    if let Some(required) = spec.require_signature {
        data.insert("requireSignature".to_string(), required.to_string());
    }
    let binary_data = match component {
        ComponentSource::Inline {
            bytes,
            encoding,
            signature,
        } => {
            if encoding != Encoding::Identity {
                data.insert("encoding".to_string(), encoding.to_string());
            }
            if let Some(signature) = signature {
                data.insert("signature".to_string(), signature);
            }
            Some(BTreeMap::from([(WASM_KEY.to_string(), ByteString(bytes))]))
        }
        ComponentSource::Image {
            reference,
            pull_secret,
        } => {
            data.insert("image".to_string(), reference.to_string());
            if let Some(secret) = pull_secret {
                data.insert("imagePullSecret".to_string(), secret);
            }
            None
        }
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("plugin-{}", spec.name)),
            namespace: namespace.map(str::to_string),
            labels: Some(
                [(PLUGIN_LABEL, spec.kind.to_string())]
                    .into_iter()
                    .chain(
                        spec.rollout
                            .shadows()
                            .map(|n| (SHADOW_OF_LABEL, n.to_string())),
                    )
                    .chain(
                        spec.rollout
                            .replaces()
                            .map(|n| (REPLACES_LABEL, n.to_string())),
                    )
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            ),
            ..Default::default()
        },
        data: Some(data),
        binary_data,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cm(data: &[(&str, &str)]) -> ConfigMap {
        let mut spec = PluginSpec::new("x", PluginKind::Mutator);
        spec.source.clear();
        let mut cm = to_configmap(&spec, b"\0asm".to_vec(), Some("diorch"));
        cm.data = Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        cm
    }

    #[test]
    fn round_trip() {
        let mut spec = PluginSpec::new("node-placement", PluginKind::Mutator);
        spec.task_types = vec!["learner".into(), "collector".into()];
        spec.order = -3;
        spec.config = " {\"a\": 1}\n".into();
        spec.deadline = Some(Duration::from_millis(20));
        spec.memory_bytes = Some(16 << 20);
        spec.failure_policy = FailurePolicy::Ignore;
        spec.grants = Grants::parse("hostPath,privileged").unwrap_or_default();
        let cm = to_configmap(&spec, vec![1, 2, 3], Some("diorch"));
        assert_eq!(
            cm.data
                .as_ref()
                .and_then(|d| d.get("grants"))
                .map(String::as_str),
            Some("privileged,hostPath")
        );
        let (back, component) = from_configmap(&cm).unwrap();
        spec.source = "diorch/plugin-node-placement".into();
        assert_eq!(back, spec);
        assert_eq!(component, ComponentSource::inline(vec![1, 2, 3]));
        assert!(back.applies_to("learner") && !back.applies_to("evaluator"));
    }

    #[test]
    fn operator_written_metadata_does_not_change_the_spec() {
        let spec = PluginSpec::new("p", PluginKind::Policy);
        let mut cm = to_configmap(&spec, vec![1], Some("diorch"));
        let before = from_configmap(&cm).unwrap();
        let labels = cm.metadata.labels.get_or_insert_with(BTreeMap::new);
        labels.insert(STATE_LABEL.into(), "Rejected".into());
        labels.insert(VERSION_LABEL.into(), "0123456789ab".into());
        cm.metadata.annotations = Some(BTreeMap::from([(
            STATUS_ANNOTATION.to_string(),
            "refused: x; serving 0123456789ab".to_string(),
        )]));
        assert_eq!(from_configmap(&cm).unwrap(), before);
    }

    #[test]
    fn rollout_labels_round_trip_and_bad_ones_are_refused() {
        for rollout in [
            Rollout::Own,
            Rollout::ShadowOf("binpack".into()),
            Rollout::Replaces("binpack".into()),
        ] {
            let mut spec = PluginSpec::new("binpack-next", PluginKind::Policy);
            spec.rollout = rollout.clone();
            let cm = to_configmap(&spec, vec![1], Some("diorch"));
            assert_eq!(from_configmap(&cm).unwrap().0.rollout, rollout);
        }
        let labelled = |kind: PluginKind, labels: &[(&str, &str)]| {
            let mut cm = to_configmap(&PluginSpec::new("next", kind), vec![1], Some("diorch"));
            let all = cm.metadata.labels.get_or_insert_with(BTreeMap::new);
            for (k, v) in labels {
                all.insert(k.to_string(), v.to_string());
            }
            from_configmap(&cm).map(|(spec, _)| spec.rollout)
        };
        let refused = |labels: &[(&str, &str)], kind: PluginKind, why: &str| {
            let err = labelled(kind, labels).unwrap_err();
            assert!(
                matches!(&err, SpecError::InvalidLabel { .. }) && err.to_string().contains(why),
                "{labels:?}: {err}"
            );
        };
        refused(
            &[(SHADOW_OF_LABEL, "a"), (REPLACES_LABEL, "a")],
            PluginKind::Policy,
            "not both",
        );
        refused(
            &[(SHADOW_OF_LABEL, "a")],
            PluginKind::Mutator,
            "scheduling policy",
        );
        refused(&[(REPLACES_LABEL, "next")], PluginKind::Policy, "itself");
        refused(
            &[(SHADOW_OF_LABEL, "Bad_Name")],
            PluginKind::Policy,
            "not a plugin name",
        );
        assert_eq!(
            labelled(PluginKind::Policy, &[(SHADOW_OF_LABEL, "binpack")]),
            Ok(Rollout::ShadowOf("binpack".into()))
        );
    }

    #[test]
    fn defaults() {
        let (spec, _) = from_configmap(&cm(&[("kind", "policy")])).unwrap();
        assert_eq!(spec.name, "plugin-x");
        assert_eq!(spec.failure_policy, FailurePolicy::Fail);
        assert!(spec.applies_to("anything"));
        let d = Limits::default();
        assert_eq!(spec.limits(d), d);
    }

    #[test]
    fn components_by_reference_compressed_or_signed_round_trip() {
        let digest = format!("sha256:{}", "ab".repeat(32));
        let mut spec = PluginSpec::new("fair", PluginKind::Policy);
        spec.require_signature = Some(true);
        let image = ComponentSource::Image {
            reference: format!("registry.example:5000/policies/fair@{digest}")
                .parse()
                .unwrap(),
            pull_secret: Some("regcred".into()),
        };
        let cm = to_configmap_from(&spec, image.clone(), Some("diorch"));
        assert_eq!(cm.binary_data, None);
        let (back, component) = from_configmap(&cm).unwrap();
        assert_eq!(back.require_signature, Some(true));
        assert_eq!(component, image);

        let packed = ComponentSource::Inline {
            bytes: vec![1, 2],
            encoding: Encoding::Zstd,
            signature: Some("MEUCIQ==".into()),
        };
        let cm = to_configmap_from(&spec, packed.clone(), Some("diorch"));
        assert_eq!(from_configmap(&cm).unwrap().1, packed);
    }

    #[test]
    fn component_keys_are_checked() {
        let image = "registry.example/p:v1";
        let cases: &[(&[(&str, &str)], &str)] = &[
            (
                &[("kind", "policy"), ("image", image)],
                "both binaryData[\"plugin.wasm\"] and data[\"image\"]",
            ),
            (
                &[("kind", "policy"), ("encoding", "br")],
                "data[\"encoding\"]",
            ),
            (
                &[("kind", "policy"), ("requireSignature", "yes")],
                "data[\"requireSignature\"]",
            ),
            (
                &[("kind", "policy"), ("imagePullSecret", "regcred")],
                "data[\"imagePullSecret\"]: only a component named",
            ),
            (
                &[("kind", "policy"), ("signature", &"A".repeat(5000))],
                "data[\"signature\"]",
            ),
        ];
        for (data, needle) in cases {
            let err = from_configmap(&cm(data)).unwrap_err();
            assert!(err.to_string().contains(needle), "{data:?}: {err}");
        }
        let by_reference = |data: &[(&str, &str)]| {
            let mut cm = cm(data);
            cm.binary_data = None;
            from_configmap(&cm)
        };
        for (data, needle) in [
            (
                vec![("kind", "policy"), ("image", "Registry/P")],
                "data[\"image\"]: invalid OCI reference",
            ),
            (
                vec![
                    ("kind", "policy"),
                    ("image", image),
                    ("imagePullSecret", "Bad_Name"),
                ],
                "data[\"imagePullSecret\"]",
            ),
            (
                vec![("kind", "policy"), ("image", image), ("encoding", "gzip")],
                "data[\"encoding\"]: only inline",
            ),
            (
                vec![
                    ("kind", "policy"),
                    ("image", image),
                    ("signature", "MEUCIQ=="),
                ],
                "data[\"signature\"]",
            ),
        ] {
            let err = by_reference(&data).unwrap_err();
            assert!(err.to_string().contains(needle), "{data:?}: {err}");
        }
        let (_, component) = by_reference(&[("kind", "policy"), ("image", image)]).unwrap();
        assert!(matches!(
            component,
            ComponentSource::Image {
                pull_secret: None,
                ..
            }
        ));
    }

    #[test]
    fn errors_name_the_key() {
        let cases: &[(&[(&str, &str)], &str)] = &[
            (&[], "lacks data[\"kind\"]"),
            (&[("kind", "scheduler")], "data[\"kind\"]"),
            (
                &[("kind", "policy"), ("name", "Bad_Name")],
                "data[\"name\"]",
            ),
            (
                &[("kind", "policy"), ("taskTypes", "learner")],
                "data[\"taskTypes\"]",
            ),
            (
                &[("kind", "mutator"), ("order", "first")],
                "data[\"order\"]",
            ),
            (
                &[("kind", "mutator"), ("deadlineMs", "0")],
                "data[\"deadlineMs\"]",
            ),
            (
                &[("kind", "mutator"), ("deadlineMs", "999999")],
                "data[\"deadlineMs\"]",
            ),
            (
                &[("kind", "mutator"), ("memoryMiB", "2048")],
                "data[\"memoryMiB\"]",
            ),
            (
                &[("kind", "mutator"), ("failurePolicy", "Retry")],
                "data[\"failurePolicy\"]",
            ),
            (
                &[("kind", "mutator"), ("grants", "privileged,root")],
                "data[\"grants\"]: unknown grant \"root\"; grants are privileged",
            ),
            (
                &[("kind", "policy"), ("grants", "hostPath")],
                "data[\"grants\"]: only mutators have grants",
            ),
        ];
        for (data, needle) in cases {
            let err = from_configmap(&cm(data)).unwrap_err();
            assert!(err.to_string().contains(needle), "{data:?}: {err}");
        }
        let mut unlabelled = cm(&[("kind", "policy")]);
        unlabelled.metadata.labels = None;
        assert_eq!(from_configmap(&unlabelled), Err(SpecError::NotAPlugin));
        let mut empty = cm(&[("kind", "policy")]);
        empty.binary_data = None;
        assert_eq!(from_configmap(&empty), Err(SpecError::MissingComponent));
    }
}
