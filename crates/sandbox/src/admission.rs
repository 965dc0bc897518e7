//! The sandbox's dynamic admission: on a create or update whose resource a
//! MutatingWebhookConfiguration or ValidatingWebhookConfiguration matches, it calls those
//! webhooks with an AdmissionReview v1 over HTTPS, mutating ones first (their JSON patches
//! applied in turn) and validating ones after schema validation, honouring rules, namespace and
//! object selectors, `timeoutSeconds`, `failurePolicy` and `sideEffects` on dry runs, with the
//! kube-apiserver's error messages.
//!
//! Owns the calls and how their answers become API errors. It reads webhook configurations and
//! namespaces from the store but writes nothing: the caller decides what is stored. Webhooks
//! are reached by `clientConfig.url` only: the sandbox has no cluster network behind a Service.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use base64::Engine;
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::admissionregistration::v1 as reg;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{Value, json};
use tracing::warn;

use super::api_status::ApiError;
use super::registry::ResourceInfo;
use super::store::{ResKey, Store};

/// Which of the two admission phases runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Mutating,
    Validating,
}

impl Phase {
    fn plural(self) -> &'static str {
        match self {
            Phase::Mutating => "mutatingwebhookconfigurations",
            Phase::Validating => "validatingwebhookconfigurations",
        }
    }
}

/// What is being admitted, besides the object itself.
pub struct Attributes<'a> {
    pub info: &'a ResourceInfo,
    pub sub: Option<&'a str>,
    /// `CREATE` or `UPDATE`.
    pub operation: &'static str,
    pub namespace: Option<&'a str>,
    pub name: &'a str,
    /// The stored object an update replaces (view form).
    pub old: Option<&'a Value>,
    pub dry_run: bool,
}

/// One webhook of either kind, with the fields both kinds share.
struct Hook {
    name: String,
    client_config: reg::WebhookClientConfig,
    rules: Vec<reg::RuleWithOperations>,
    failure_policy: String,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    side_effects: String,
    timeout: Duration,
}

/// The fields of MutatingWebhook and ValidatingWebhook the sandbox uses (both kinds share them;
/// the configurations were checked against their types when written).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HookSpec {
    name: String,
    client_config: reg::WebhookClientConfig,
    #[serde(default)]
    rules: Vec<reg::RuleWithOperations>,
    failure_policy: Option<String>,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
    #[serde(default)]
    side_effects: String,
    timeout_seconds: Option<i32>,
}

fn hooks(store: &Store, phase: Phase) -> Vec<Hook> {
    let res = ResKey::new("admissionregistration.k8s.io", phase.plural());
    let (_, mut configs) = store.list(&res, None);
    // The apiserver calls configurations in name order, webhooks in list order.
    let name = |o: &Value| {
        o.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    configs.sort_by_key(|c| name(c));
    configs
        .iter()
        .filter_map(|c| c.get("webhooks").cloned())
        .filter_map(|w| serde_json::from_value::<Vec<HookSpec>>(w).ok())
        .flatten()
        .map(|w| Hook {
            name: w.name,
            client_config: w.client_config,
            rules: w.rules,
            failure_policy: w.failure_policy.unwrap_or_else(|| "Fail".into()),
            namespace_selector: w.namespace_selector,
            object_selector: w.object_selector,
            side_effects: w.side_effects,
            timeout: Duration::from_secs(w.timeout_seconds.unwrap_or(10).clamp(1, 30) as u64),
        })
        .collect()
}

/// Runs the phase's matching webhooks on `object` (view form). Mutating webhooks may change
/// it; a refusal or a failed call under `failurePolicy: Fail` is the error to return.
pub fn admit(
    store: &Store,
    phase: Phase,
    attrs: &Attributes<'_>,
    object: &mut Value,
    warnings: &mut Vec<String>,
) -> Result<(), ApiError> {
    // Admission never applies to the webhook configurations themselves, so a broken webhook
    // can always be removed.
    if attrs.info.group == "admissionregistration.k8s.io" {
        return Ok(());
    }
    let hooks = hooks(store, phase);
    if hooks.is_empty() {
        return Ok(());
    }
    for hook in hooks {
        if !matches(store, &hook, attrs, object) {
            continue;
        }
        if attrs.dry_run && !matches!(hook.side_effects.as_str(), "None" | "NoneOnDryRun") {
            return Err(ApiError::bad_request(format!(
                "admission webhook \"{}\" does not support dry run",
                hook.name
            )));
        }
        let review = review(attrs, object);
        let uid = review["request"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let answer = match call(&hook, &review) {
            Ok(answer) => answer,
            Err(why) => {
                failure_policy(&hook, "failed calling webhook", &why)?;
                continue;
            }
        };
        let outcome = outcome(&hook.name, &uid, &answer, phase, object);
        match outcome {
            Ok(w) => warnings.extend(w),
            Err(Refusal::Denied(e)) => return Err(e),
            Err(Refusal::Broken(why)) => {
                failure_policy(&hook, "webhook answered nonsense", &why)?;
            }
        }
    }
    Ok(())
}

/// A webhook that could not be called or answered nonsense (`what`, `why`): with failurePolicy
/// Ignore the request goes on (`Ok`, logged), else it fails as kube-apiserver fails it.
fn failure_policy(hook: &Hook, what: &str, why: &str) -> Result<(), ApiError> {
    if hook.failure_policy == "Ignore" {
        warn!(webhook = %hook.name, error = %why, "{what}; failurePolicy Ignore lets the request through");
        return Ok(());
    }
    Err(ApiError::internal(format!(
        "failed calling webhook \"{}\": {why}",
        hook.name
    )))
}

fn matches(store: &Store, hook: &Hook, attrs: &Attributes<'_>, object: &Value) -> bool {
    let info = attrs.info;
    let resource = match attrs.sub {
        Some(sub) => format!("{}/{sub}", info.plural),
        None => info.plural.clone(),
    };
    let rule_matches = hook.rules.iter().any(|r| {
        let has = |list: &Option<Vec<String>>, value: &str| {
            list.as_ref()
                .is_some_and(|l| l.iter().any(|x| x == "*" || x == value))
        };
        let resource_ok = r.resources.as_ref().is_some_and(|l| {
            l.iter().any(|x| match x.as_str() {
                "*/*" => true,
                "*" => attrs.sub.is_none(),
                x => {
                    x == resource
                        || x.strip_suffix("/*")
                            .is_some_and(|main| attrs.sub.is_some() && main == info.plural)
                }
            })
        });
        let scope_ok = match r.scope.as_deref().unwrap_or("*") {
            "Cluster" => !info.namespaced,
            "Namespaced" => info.namespaced,
            _ => true,
        };
        has(&r.operations, attrs.operation)
            && has(&r.api_groups, &info.group)
            && has(&r.api_versions, &info.version)
            && resource_ok
            && scope_ok
    });
    if !rule_matches {
        return false;
    }
    if let (Some(selector), Some(ns)) = (&hook.namespace_selector, attrs.namespace)
        && info.namespaced
    {
        let namespace = store.get(
            &ResKey::new("", "namespaces"),
            &(String::new(), ns.to_string()),
        );
        let labels = namespace.as_deref().map(labels_of).unwrap_or_default();
        if !selects(selector, &labels) {
            return false;
        }
    }
    if let Some(selector) = &hook.object_selector {
        let new = selects(selector, &labels_of(object));
        let old = attrs
            .old
            .is_some_and(|old| selects(selector, &labels_of(old)));
        if !new && !old {
            return false;
        }
    }
    true
}

fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn selects(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    use kube::core::SelectorExt;
    match kube::core::Selector::try_from(selector.clone()) {
        Ok(s) => s.matches(labels),
        // An invalid selector selects nothing, as the apiserver's does.
        Err(_) => false,
    }
}

fn review(attrs: &Attributes<'_>, object: &Value) -> Value {
    let info = attrs.info;
    let kind = json!({"group": info.group, "version": info.version, "kind": info.kind});
    let resource = json!({"group": info.group, "version": info.version, "resource": info.plural});
    let options_kind = if attrs.operation == "CREATE" {
        "CreateOptions"
    } else {
        "UpdateOptions"
    };
    let mut request = json!({
        "uid": uuid::Uuid::new_v4().to_string(),
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attrs.name,
        "operation": attrs.operation,
        "userInfo": {"username": "sandbox-admin", "groups": ["system:masters", "system:authenticated"]},
        "object": object,
        "oldObject": attrs.old.cloned().unwrap_or(Value::Null),
        "dryRun": attrs.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    });
    if let Some(ns) = attrs.namespace {
        request["namespace"] = json!(ns);
    }
    if let Some(sub) = attrs.sub {
        request["subResource"] = json!(sub);
        request["requestSubResource"] = json!(sub);
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request})
}

enum Refusal {
    /// The webhook said no: returned to the client as is.
    Denied(ApiError),
    /// The answer is unusable: handled by failurePolicy.
    Broken(String),
}

fn outcome(
    name: &str,
    uid: &str,
    answer: &Value,
    phase: Phase,
    object: &mut Value,
) -> Result<Vec<String>, Refusal> {
    let Some(response) = answer.get("response") else {
        return Err(Refusal::Broken("webhook response was absent".to_string()));
    };
    if response.get("uid").and_then(Value::as_str) != Some(uid) {
        return Err(Refusal::Broken(format!(
            "expected response.uid=\"{uid}\", got \"{}\"",
            response
                .get("uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
        )));
    }
    let warnings = response
        .get("warnings")
        .and_then(Value::as_array)
        .map(|w| {
            w.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    if response.get("allowed").and_then(Value::as_bool) != Some(true) {
        let status = response.get("status").cloned().unwrap_or(Value::Null);
        let code = status
            .get("code")
            .and_then(Value::as_u64)
            .map_or(400, |c| c.clamp(400, 599) as u16);
        let message = status.get("message").and_then(Value::as_str).unwrap_or("");
        let reason = status.get("reason").and_then(Value::as_str).unwrap_or("");
        let text = match (message, reason) {
            ("", "") => {
                format!("admission webhook \"{name}\" denied the request without explanation")
            }
            ("", reason) => format!("admission webhook \"{name}\" denied the request: {reason}"),
            (message, _) => format!("admission webhook \"{name}\" denied the request: {message}"),
        };
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            409 => "Conflict",
            422 => "Invalid",
            429 => "TooManyRequests",
            _ => "",
        };
        return Err(Refusal::Denied(ApiError::new(code, reason, text)));
    }
    if let Some(patch) = response.get("patch").filter(|p| !p.is_null()) {
        if phase == Phase::Validating {
            return Err(Refusal::Broken(
                "validating webhook may not return a patch".to_string(),
            ));
        }
        if response.get("patchType").and_then(Value::as_str) != Some("JSONPatch") {
            return Err(Refusal::Broken(format!(
                "unsupported patch type {}",
                response.get("patchType").unwrap_or(&Value::Null)
            )));
        }
        let bytes = patch_bytes(patch).map_err(Refusal::Broken)?;
        let patch: json_patch::Patch = serde_json::from_slice(&bytes)
            .map_err(|e| Refusal::Broken(format!("patch is not a JSON patch: {e}")))?;
        let mut patched = object.clone();
        json_patch::patch(&mut patched, &patch)
            .map_err(|e| Refusal::Broken(format!("cannot apply the webhook's patch: {e}")))?;
        *object = patched;
    }
    Ok(warnings)
}

/// The patch's bytes. Go's JSON decoder, which reads the answer in kube-apiserver, takes a
/// `[]byte` either as a base64 string or as an array of numbers (what kube-rs sends).
fn patch_bytes(patch: &Value) -> Result<Vec<u8>, String> {
    match patch {
        Value::String(s) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(|e| format!("patch is not base64: {e}")),
        Value::Array(items) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|n| u8::try_from(n).ok())
                    .ok_or_else(|| format!("patch byte {v} is not in 0..=255"))
            })
            .collect(),
        other => Err(format!("patch must be base64 or bytes, not {other}")),
    }
}

/// POSTs the review to the webhook's URL, trusting only its caBundle (the system roots when
/// it is empty), within its timeout.
fn call(hook: &Hook, review: &Value) -> Result<Value, String> {
    let Some(url) = hook.client_config.url.clone() else {
        let service = hook
            .client_config
            .service
            .as_ref()
            .map(|s| format!("{}/{}", s.namespace, s.name))
            .unwrap_or_default();
        return Err(format!(
            "the diorch sandbox has no cluster network to reach Service {service}; register the webhook with clientConfig.url"
        ));
    };
    let body = serde_json::to_vec(review).map_err(|e| e.to_string())?;
    let ca = hook
        .client_config
        .ca_bundle
        .as_ref()
        .map(|b| b.0.clone())
        .unwrap_or_default();
    let timeout = hook.timeout;
    let shown = format!("Post \"{url}?timeout={}s\"", timeout.as_secs());
    let result = run_blocking(async move {
        tokio::time::timeout(timeout, post(&url, &ca, body))
            .await
            .unwrap_or_else(|_| Err("context deadline exceeded".to_string()))
    })?;
    result.map_err(|e| format!("failed to call webhook: {shown}: {e}"))
}

async fn post(url: &str, ca: &[u8], body: Vec<u8>) -> Result<Value, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let uri: http::Uri = url.parse().map_err(|e| format!("invalid URL: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err("webhook URLs must use https".to_string());
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let config = if ca.is_empty() {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(ca) {
            let cert = cert.map_err(|e| format!("invalid caBundle: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("invalid caBundle: {e}"))?;
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    };
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_only()
        .enable_http1()
        .build();
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build::<_, Full<bytes::Bytes>>(https);
    let request = http::Request::post(uri)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::ACCEPT, "application/json")
        .body(Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let response = client.request(request).await.map_err(|e| {
        // hyper's top-level error says only "client error (Connect)": show the cause.
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text = format!("{text}: {s}");
            source = s.source();
        }
        text
    })?;
    let status = response.status();
    let bytes = response
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?
        .to_bytes();
    if !status.is_success() {
        return Err(format!(
            "webhook answered HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
        ));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| format!("webhook answered a body that is not JSON: {e}"))
}

/// Runs `f` to completion from synchronous code, wherever it is called: the API's REST
/// functions are synchronous and run on the server's runtime workers.
fn run_blocking<T: Send>(f: impl Future<Output = T> + Send) -> Result<T, String> {
    let on_thread = || {
        std::thread::scope(|s| {
            s.spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map(|rt| rt.block_on(f))
                    .map_err(|e| format!("cannot start a runtime for the webhook call: {e}"))
            })
            .join()
            .unwrap_or_else(|_| Err("the webhook call panicked".to_string()))
        })
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(on_thread)
        }
        _ => on_thread(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> ResourceInfo {
        super::super::registry::builtin_resources()
            .into_iter()
            .find(|r| r.plural == "configmaps")
            .expect("configmaps")
    }

    fn hook(rules: Value) -> Hook {
        Hook {
            name: "h.example.com".into(),
            client_config: reg::WebhookClientConfig::default(),
            rules: serde_json::from_value(rules).expect("rules"),
            failure_policy: "Fail".into(),
            namespace_selector: None,
            object_selector: None,
            side_effects: "None".into(),
            timeout: Duration::from_secs(1),
        }
    }

    fn attrs<'a>(info: &'a ResourceInfo, sub: Option<&'a str>, op: &'static str) -> Attributes<'a> {
        Attributes {
            info,
            sub,
            operation: op,
            namespace: Some("default"),
            name: "x",
            old: None,
            dry_run: false,
        }
    }

    #[test]
    fn rules_match_operation_group_version_resource_subresource_and_scope() {
        let store = Store::new(10);
        let info = info();
        let obj = json!({"metadata": {"name": "x"}});
        let rule = |ops: &str, res: &str, scope: &str| {
            hook(
                json!([{"operations": [ops], "apiGroups": [""], "apiVersions": ["v1"], "resources": [res], "scope": scope}]),
            )
        };
        let m = |h: &Hook, sub, op| matches(&store, h, &attrs(&info, sub, op), &obj);
        assert!(m(&rule("CREATE", "configmaps", "*"), None, "CREATE"));
        assert!(!m(&rule("CREATE", "configmaps", "*"), None, "UPDATE"));
        assert!(m(&rule("*", "configmaps", "*"), None, "UPDATE"));
        assert!(!m(&rule("*", "configmaps", "*"), Some("status"), "UPDATE"));
        assert!(m(
            &rule("*", "configmaps/status", "*"),
            Some("status"),
            "UPDATE"
        ));
        assert!(m(&rule("*", "configmaps/*", "*"), Some("status"), "UPDATE"));
        assert!(!m(&rule("*", "*", "*"), Some("status"), "UPDATE"));
        assert!(m(&rule("*", "*/*", "*"), Some("status"), "UPDATE"));
        assert!(!m(&rule("*", "secrets", "*"), None, "CREATE"));
        assert!(!m(&rule("*", "configmaps", "Cluster"), None, "CREATE"));
        assert!(m(&rule("*", "configmaps", "Namespaced"), None, "CREATE"));
        let other_group = hook(
            json!([{"operations": ["*"], "apiGroups": ["apps"], "apiVersions": ["*"], "resources": ["*"]}]),
        );
        assert!(!m(&other_group, None, "CREATE"));
    }

    #[test]
    fn object_selector_matches_new_or_old_labels() {
        let store = Store::new(10);
        let info = info();
        let mut h = hook(
            json!([{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"]}]),
        );
        h.object_selector =
            Some(serde_json::from_value(json!({"matchLabels": {"team": "rl"}})).expect("selector"));
        let labelled = json!({"metadata": {"labels": {"team": "rl"}}});
        let plain = json!({"metadata": {}});
        assert!(matches(
            &store,
            &h,
            &attrs(&info, None, "CREATE"),
            &labelled
        ));
        assert!(!matches(&store, &h, &attrs(&info, None, "CREATE"), &plain));
        let mut update = attrs(&info, None, "UPDATE");
        update.old = Some(&labelled);
        assert!(matches(&store, &h, &update, &plain));
    }

    #[test]
    fn answers_become_patches_warnings_refusals_or_failures() {
        let uid = "u1";
        let mut obj = json!({"spec": {"a": 1}});
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/spec/b","value":2}]"#);
        let allowed = json!({"response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": patch, "warnings": ["careful"]}});
        let warnings = outcome("h", uid, &allowed, Phase::Mutating, &mut obj)
            .unwrap_or_else(|_| panic!("allowed"));
        assert_eq!(obj, json!({"spec": {"a": 1, "b": 2}}));
        // The same patch as a byte array, as kube-rs serialises it.
        let bytes: Vec<u8> = br#"[{"op":"add","path":"/spec/c","value":3}]"#.to_vec();
        let as_array = json!({"response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": bytes}});
        outcome("h", uid, &as_array, Phase::Mutating, &mut obj)
            .unwrap_or_else(|_| panic!("allowed"));
        assert_eq!(obj["spec"]["c"], 3);
        assert_eq!(warnings, vec!["careful".to_string()]);
        assert!(matches!(
            outcome("h", uid, &allowed, Phase::Validating, &mut obj),
            Err(Refusal::Broken(_))
        ));
        let nonsense = json!({"response": {"uid": uid, "allowed": true, "patchType": "JSONPatch", "patch": [300]}});
        assert!(matches!(
            outcome("h", uid, &nonsense, Phase::Mutating, &mut obj),
            Err(Refusal::Broken(m)) if m.contains("not in 0..=255")
        ));
        let denied = json!({"response": {"uid": uid, "allowed": false, "status": {"code": 403, "message": "spec.x: no"}}});
        match outcome("h", uid, &denied, Phase::Validating, &mut obj) {
            Err(Refusal::Denied(e)) => {
                assert_eq!(e.code, 403);
                assert_eq!(e.reason, "Forbidden");
                assert_eq!(
                    e.message,
                    "admission webhook \"h\" denied the request: spec.x: no"
                );
            }
            _ => panic!("denied"),
        }
        let bare = json!({"response": {"uid": uid, "allowed": false}});
        match outcome("h", uid, &bare, Phase::Validating, &mut obj) {
            Err(Refusal::Denied(e)) => {
                assert_eq!(e.code, 400);
                assert!(
                    e.message
                        .ends_with("denied the request without explanation")
                );
            }
            _ => panic!("denied"),
        }
        let wrong_uid = json!({"response": {"uid": "other", "allowed": true}});
        assert!(matches!(
            outcome("h", uid, &wrong_uid, Phase::Validating, &mut obj),
            Err(Refusal::Broken(m)) if m.contains("expected response.uid")
        ));
    }

    #[test]
    fn service_references_and_dead_urls_fail_with_the_cause() {
        let mut h = hook(json!([]));
        h.client_config.service = Some(reg::ServiceReference {
            name: "diorch-webhook".into(),
            namespace: "diorch-system".into(),
            ..Default::default()
        });
        let err = call(&h, &json!({})).expect_err("no network");
        assert!(
            err.contains("Service diorch-system/diorch-webhook"),
            "{err}"
        );
        h.client_config.service = None;
        // A port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("port");
        h.client_config.url = Some(format!("https://127.0.0.1:{port}/x"));
        let err = call(&h, &json!({})).expect_err("refused");
        assert!(
            err.starts_with(&format!(
                "failed to call webhook: Post \"https://127.0.0.1:{port}/x?timeout=1s\""
            )),
            "{err}"
        );
    }
}
