//! Per-kind rules of the sandbox API server for built-in resources: defaulting (as the
//! apiserver's `SetDefaults_*` and admission plugins do), decoding through the typed
//! k8s-openapi structs (unknown-field detection, type errors, canonical form), the core/v1 ↔
//! events.k8s.io/v1 Event conversion, Secret `stringData`, pod QoS and small validations.
//!
//! Pure functions over `serde_json::Value`; no store, no HTTP. Custom resources are handled by
//! `schema` through `api_core`.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::api_status::{Cause, required};
use super::schema::NameRule;

/// `2024-05-01T10:00:00Z`, as metav1.Time serialises.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// `2024-05-01T10:00:00.123456Z`, as metav1.MicroTime serialises.
pub fn now_micro() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

/// RFC3339 (seconds) `secs` seconds from now.
pub fn rfc3339_in(secs: i64) -> String {
    let now = jiff::Timestamp::now();
    let t = now
        .checked_add(jiff::SignedDuration::from_secs(secs))
        .unwrap_or(now);
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Five characters from the apiserver's name-generation alphabet (no vowels, no confusables).
pub fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// The `metadata.name` rule of a resource (custom resources use DNS-1123 subdomains).
pub fn name_rule(group: &str, plural: &str) -> NameRule {
    match (group, plural) {
        ("", "namespaces") => NameRule::Dns1123Label,
        ("", "services") => NameRule::Dns1035Label,
        _ => NameRule::Dns1123Subdomain,
    }
}

/// Decodes `obj` through its k8s-openapi type and back, as the apiserver decodes a body into
/// its Go struct. Returns the canonical form and the paths of unknown (dropped) fields, or the
/// decode error text; `None` for kinds without a typed form here.
pub fn typed_roundtrip(
    api_version: &str,
    kind: &str,
    obj: &Value,
) -> Option<Result<(Value, Vec<String>), String>> {
    use k8s_openapi::api::{admissionregistration, coordination, core, events, scheduling};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    Some(match (api_version, kind) {
        ("v1", "Pod") => rt::<core::v1::Pod>(obj),
        ("v1", "Node") => rt::<core::v1::Node>(obj),
        ("v1", "Namespace") => rt::<core::v1::Namespace>(obj),
        ("v1", "Service") => rt::<core::v1::Service>(obj),
        ("v1", "Endpoints") => rt::<core::v1::Endpoints>(obj),
        ("v1", "ConfigMap") => rt::<core::v1::ConfigMap>(obj),
        ("v1", "Secret") => rt::<core::v1::Secret>(obj),
        ("v1", "ServiceAccount") => rt::<core::v1::ServiceAccount>(obj),
        ("v1", "Event") => rt::<core::v1::Event>(obj),
        ("v1", "Binding") => rt::<core::v1::Binding>(obj),
        ("events.k8s.io/v1", "Event") => rt::<events::v1::Event>(obj),
        ("coordination.k8s.io/v1", "Lease") => rt::<coordination::v1::Lease>(obj),
        ("scheduling.k8s.io/v1", "PriorityClass") => {
            // Go decodes a missing `value` as 0; k8s-openapi requires it.
            let mut obj = obj.clone();
            if let Some(m) = obj.as_object_mut()
                && m.get("value").is_none_or(Value::is_null)
            {
                m.insert("value".into(), json!(0));
            }
            rt::<scheduling::v1::PriorityClass>(&obj)
        }
        ("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration") => {
            rt::<admissionregistration::v1::MutatingWebhookConfiguration>(obj)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration") => {
            rt::<admissionregistration::v1::ValidatingWebhookConfiguration>(obj)
        }
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            rt::<apiext::CustomResourceDefinition>(obj)
        }
        _ => return None,
    })
}

fn rt<T: DeserializeOwned + Serialize>(obj: &Value) -> Result<(Value, Vec<String>), String> {
    let typed: T = serde_json::from_value(obj.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&typed).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    dropped_fields(obj, &back, "", &mut unknown);
    Ok((back, unknown))
}

/// Paths present (non-null) in `input` but absent from `output`.
fn dropped_fields(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    Some(ov) => dropped_fields(v, ov, &p, out),
                    None if v.is_null() => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                dropped_fields(iv, ov, &format!("{path}[{n}]"), out);
            }
        }
        _ => {}
    }
}

fn obj_mut<'a>(v: &'a mut Value, key: &str) -> Option<&'a mut Map<String, Value>> {
    let map = v.as_object_mut()?;
    let entry = map
        .entry(key.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    entry.as_object_mut()
}

fn set_default(map: &mut Map<String, Value>, key: &str, value: Value) {
    if map.get(key).is_none_or(Value::is_null) {
        map.insert(key.to_string(), value);
    }
}

fn default_container(c: &mut Value) {
    let Some(m) = c.as_object_mut() else { return };
    set_default(m, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(m, "terminationMessagePolicy", json!("File"));
    let image = m.get("image").and_then(Value::as_str).unwrap_or_default();
    let last = image.rsplit('/').next().unwrap_or_default();
    let tag = last.split_once('@').map_or(last, |(n, _)| n);
    let pull = if !last.contains('@') && tag.split_once(':').is_none_or(|(_, t)| t == "latest") {
        "Always"
    } else {
        "IfNotPresent"
    };
    set_default(m, "imagePullPolicy", json!(pull));
    set_default(m, "resources", json!({}));
    if let Some(res) = m.get_mut("resources").and_then(Value::as_object_mut) {
        // SetDefaults_ResourceList: requests default to limits.
        if let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() {
            let requests = res
                .entry("requests")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Some(r) = requests.as_object_mut() {
                for (k, v) in limits {
                    r.entry(k).or_insert(v);
                }
            }
        }
    }
    if let Some(ports) = m.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
}

/// Pod defaults plus the ServiceAccount, Priority and DefaultTolerationSeconds admission
/// plugins' effects.
pub fn default_pod(pod: &mut Value) {
    let Some(spec) = obj_mut(pod, "spec") else {
        return;
    };
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    set_default(spec, "serviceAccountName", json!("default"));
    let sa = spec.get("serviceAccountName").cloned().unwrap_or_default();
    set_default(spec, "serviceAccount", sa);
    set_default(spec, "priority", json!(0));
    set_default(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    for key in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(key).and_then(Value::as_array_mut) {
            cs.iter_mut().for_each(default_container);
        }
    }
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if let Some(list) = tolerations.as_array_mut() {
        for key in [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unreachable",
        ] {
            let has = list.iter().any(|t| {
                t.get("key").and_then(Value::as_str) == Some(key)
                    || (t.get("key").is_none() && t["operator"] == "Exists")
            });
            if !has {
                list.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
            }
        }
    }
}

/// The pod's QoS class, as `qos.GetPodQOS` computes it from cpu/memory requests and limits.
pub fn pod_qos(pod: &Value) -> &'static str {
    let mut any = false;
    let mut guaranteed = true;
    let containers = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .chain(pod["spec"]["initContainers"].as_array())
        .flatten();
    for c in containers {
        let req = &c["resources"]["requests"];
        let lim = &c["resources"]["limits"];
        for r in ["cpu", "memory"] {
            let (q, l) = (&req[r], &lim[r]);
            if !q.is_null() || !l.is_null() {
                any = true;
            }
            if l.is_null() || (!q.is_null() && q != l) {
                guaranteed = false;
            }
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}

/// Service defaults (without the cluster IP, which the caller allocates).
pub fn default_service(svc: &mut Value) {
    let Some(spec) = obj_mut(svc, "spec") else {
        return;
    };
    set_default(spec, "type", json!("ClusterIP"));
    set_default(spec, "sessionAffinity", json!("None"));
    if spec.get("type") != Some(&json!("ExternalName")) {
        set_default(spec, "internalTrafficPolicy", json!("Cluster"));
        set_default(spec, "ipFamilies", json!(["IPv4"]));
        set_default(spec, "ipFamilyPolicy", json!("SingleStack"));
    }
    if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
            if let Some(port) = p.get("port").cloned() {
                set_default(p, "targetPort", port);
            }
        }
    }
}

/// PriorityClass defaults (`SetDefaults_PriorityClass`).
pub fn default_priority_class(class: &mut Value) {
    if let Some(m) = class.as_object_mut() {
        set_default(m, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
}

/// Moves Secret `stringData` into base64 `data`, as the apiserver's conversion does.
pub fn fold_string_data(secret: &mut Value) {
    let Some(m) = secret.as_object_mut() else {
        return;
    };
    set_default(m, "type", json!("Opaque"));
    let Some(Value::Object(sd)) = m.remove("stringData") else {
        return;
    };
    let data = m.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in sd {
            let raw = v.as_str().unwrap_or_default().as_bytes().to_vec();
            let enc = serde_json::to_value(k8s_openapi::ByteString(raw)).unwrap_or_default();
            d.insert(k, enc);
        }
    }
}

fn move_field(from: &mut Map<String, Value>, to: &mut Map<String, Value>, a: &str, b: &str) {
    if let Some(v) = from.remove(a) {
        to.insert(b.to_string(), v);
    }
}

/// The fields of an Event under both APIs, as (core/v1 name, events.k8s.io/v1 name): one table,
/// read one way or the other, so the two conversions cannot disagree on a field.
const EVENT_FIELDS: [(&str, &str); 15] = [
    ("metadata", "metadata"),
    ("involvedObject", "regarding"),
    ("related", "related"),
    ("message", "note"),
    ("reason", "reason"),
    ("type", "type"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("eventTime", "eventTime"),
    ("series", "series"),
    ("action", "action"),
    ("reportingComponent", "reportingController"),
    ("reportingInstance", "reportingInstance"),
];

/// `event` as an Event of `api_version`: its type fields replaced, and each field of `renames`
/// (from, to) moved to its new name. What both conversions share.
fn convert_event<'a>(
    event: &Value,
    api_version: &str,
    renames: impl Iterator<Item = (&'a str, &'a str)>,
) -> Map<String, Value> {
    let mut from = event.as_object().cloned().unwrap_or_default();
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!("Event"));
    from.remove("apiVersion");
    from.remove("kind");
    for (a, b) in renames {
        move_field(&mut from, &mut out, a, b);
    }
    out
}

/// core/v1 Event → events.k8s.io/v1 Event (`Convert_core_Event_To_v1_Event`).
pub fn event_core_to_v1(core: &Value) -> Value {
    let mut out = convert_event(core, "events.k8s.io/v1", EVENT_FIELDS.into_iter());
    // eventTime is required in events.k8s.io/v1; the apiserver serialises the zero MicroTime.
    out.entry("eventTime").or_insert(Value::Null);
    if out.get("deprecatedSource") == Some(&json!({})) {
        out.remove("deprecatedSource");
    }
    Value::Object(out)
}

/// events.k8s.io/v1 Event → core/v1 Event (`Convert_v1_Event_To_core_Event`).
pub fn event_v1_to_core(ev: &Value) -> Value {
    let mut out = convert_event(
        ev,
        "v1",
        EVENT_FIELDS.into_iter().map(|(core, v1)| (v1, core)),
    );
    out.entry("involvedObject").or_insert_with(|| json!({}));
    out.entry("source").or_insert_with(|| json!({}));
    if out.get("eventTime") == Some(&Value::Null) {
        out.remove("eventTime");
    }
    Value::Object(out)
}

/// Minimal structural validation of built-in kinds (what kubectl users hit most).
pub fn validate_builtin(group: &str, plural: &str, obj: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    match (group, plural) {
        ("", "pods") => {
            match obj["spec"]["containers"].as_array() {
                Some(cs) if !cs.is_empty() => {
                    for (i, c) in cs.iter().enumerate() {
                        if c["name"].as_str().is_none_or(str::is_empty) {
                            out.push(required(&format!("spec.containers[{i}].name"), ""));
                        }
                        if c["image"].as_str().is_none_or(str::is_empty) {
                            out.push(required(&format!("spec.containers[{i}].image"), ""));
                        }
                    }
                }
                _ => out.push(required("spec.containers", "")),
            }
            for field in ["initContainers", "containers"] {
                for (i, c) in obj["spec"][field]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    extended_resource_limits(&format!("spec.{field}[{i}]"), c, &mut out);
                }
            }
            if let Some(rp) = obj["spec"]["restartPolicy"].as_str()
                && !matches!(rp, "Always" | "OnFailure" | "Never")
            {
                out.push(super::api_status::not_supported(
                    "spec.restartPolicy",
                    &json!(rp),
                    &["Always", "OnFailure", "Never"],
                ));
            }
        }
        ("", "services") => {
            let headless = obj["spec"]["clusterIP"] == "None";
            let ports = obj["spec"]["ports"].as_array().map_or(0, Vec::len);
            if ports == 0 && !headless && obj["spec"]["type"] != "ExternalName" {
                out.push(required("spec.ports", ""));
            }
        }
        _ => {}
    }
    out
}

/// A quantity given as a string or a bare number.
fn quantity(v: &Value) -> Option<i128> {
    match v {
        Value::String(s) => diorch_core::resources::parse_quantity(s),
        Value::Number(n) => diorch_core::resources::parse_quantity(&n.to_string()),
        _ => None,
    }
}

/// Extended resources (`nvidia.com/gpu`: a domain outside `kubernetes.io`) cannot be
/// overcommitted: a container that requests one must limit it to the same quantity, as
/// kube-apiserver's `ValidateResourceRequirements` demands.
fn extended_resource_limits(path: &str, container: &Value, out: &mut Vec<Cause>) {
    let resources = &container["resources"];
    let Some(requests) = resources["requests"].as_object() else {
        return;
    };
    let extended = |name: &str| {
        name.contains('/')
            && !name.starts_with("kubernetes.io/")
            && !name.contains(".kubernetes.io/")
            && !name.starts_with("requests.")
    };
    for (name, request) in requests.iter().filter(|(n, _)| extended(n)) {
        match resources["limits"].get(name) {
            None => out.push(required(
                &format!("{path}.resources.limits"),
                "Limit must be set for non overcommitable resources",
            )),
            Some(limit)
                if quantity(limit)
                    .zip(quantity(request))
                    .is_some_and(|(l, r)| l != r) =>
            {
                out.push(Cause {
                    reason: "FieldValueInvalid".into(),
                    message: format!("Invalid value: {request}: must be equal to {name} limit"),
                    field: format!("{path}.resources.requests[{name}]"),
                })
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extended_resources_need_equal_limits() {
        let pod = |resources: Value| json!({"spec": {"containers": [{"name": "c", "image": "i", "resources": resources}]}});
        let missing =
            validate_builtin("", "pods", &pod(json!({"requests": {"nvidia.com/gpu": 1}})));
        assert_eq!(missing.len(), 1);
        assert_eq!(missing[0].field, "spec.containers[0].resources.limits");
        assert_eq!(
            missing[0].message,
            "Required value: Limit must be set for non overcommitable resources"
        );
        let unequal = validate_builtin(
            "",
            "pods",
            &pod(json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}})),
        );
        assert_eq!(
            unequal[0].field,
            "spec.containers[0].resources.requests[nvidia.com/gpu]"
        );
        for ok in [
            json!({"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": 1}}),
            json!({"requests": {"cpu": "1", "memory": "1Gi"}}),
            json!({"limits": {"nvidia.com/gpu": "2"}}),
        ] {
            assert!(
                validate_builtin("", "pods", &pod(ok.clone())).is_empty(),
                "{ok}"
            );
        }
    }

    #[test]
    fn roundtrip_finds_unknown_fields() {
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"foo": 1, "containers": [{"name": "c", "image": "i", "bar": true}]}});
        let (_, unknown) = typed_roundtrip("v1", "Pod", &pod).unwrap().unwrap();
        assert_eq!(unknown, ["spec.containers[0].bar", "spec.foo"]);
        let bad = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": 3}});
        assert!(typed_roundtrip("v1", "Pod", &bad).unwrap().is_err());
    }

    #[test]
    fn event_conversion_round_trips() {
        let v1 = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "d"}, "regarding": {"kind": "Pod", "name": "p"},
            "note": "hello", "reason": "Started", "type": "Normal",
            "reportingController": "diorch", "reportingInstance": "diorch-1",
            "eventTime": "2024-01-01T00:00:00.000000Z", "action": "Start"});
        let core = event_v1_to_core(&v1);
        assert_eq!(core["involvedObject"]["name"], "p");
        assert_eq!(core["message"], "hello");
        assert_eq!(core["reportingComponent"], "diorch");
        assert_eq!(event_core_to_v1(&core), v1);
    }

    #[test]
    fn pod_defaults_and_qos() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "nginx:1.2",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}]}});
        default_pod(&mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["imagePullPolicy"],
            "IfNotPresent"
        );
        assert_eq!(
            pod["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "1"
        );
        assert_eq!(pod_qos(&pod), "Guaranteed");
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 2);
        let be = json!({"spec": {"containers": [{"name": "c", "image": "nginx"}]}});
        assert_eq!(pod_qos(&be), "BestEffort");
    }

    #[test]
    fn string_data_is_folded() {
        let mut s = json!({"stringData": {"k": "hi"}});
        fold_string_data(&mut s);
        assert_eq!(s["data"]["k"], "aGk=");
        assert_eq!(s["type"], "Opaque");
    }
}
