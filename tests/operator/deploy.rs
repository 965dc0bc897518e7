//! The install manifests: every kustomize variant renders with kubectl, says what the
//! operations guide promises (replicas, probes, security context, webhook wiring), and every
//! rendered object validates offline against the Kubernetes 1.33 schemas (the
//! `kubernetes-validate` package, which `scripts/test.sh` installs into `target/`).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `kubectl kustomize <dir>` (relative to the repository, or absolute): the YAML text and its
/// objects.
fn render(dir: impl AsRef<Path>) -> (String, Vec<Value>) {
    let dir = dir.as_ref();
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(root().join(dir))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kubectl kustomize {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).expect("UTF-8");
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("rendered YAML");
    (text, docs)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
}

fn args(deployment: &Value) -> Vec<String> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

/// Every pod template of the variant runs non-root, read-only, with no capabilities.
fn assert_locked_down(docs: &[Value]) {
    for doc in docs {
        let template = match doc["kind"].as_str() {
            Some("Deployment") | Some("Job") => &doc["spec"]["template"]["spec"],
            _ => continue,
        };
        let name = &doc["metadata"]["name"];
        assert_eq!(template["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(
            template["securityContext"]["seccompProfile"]["type"], "RuntimeDefault",
            "{name}"
        );
        for c in template["containers"].as_array().expect("containers") {
            let sc = &c["securityContext"];
            assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
            assert_eq!(sc["readOnlyRootFilesystem"], true, "{name}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_json::json!(["ALL"]),
                "{name}"
            );
            assert!(c["resources"]["limits"]["memory"].is_string(), "{name}");
        }
    }
}

#[test]
fn the_base_installs_two_elected_replicas_with_webhooks_and_a_certificate_job() {
    let (_, docs) = render("deploy");
    let deployment = find(&docs, "Deployment", "diorch").expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_eq!(deployment["metadata"]["namespace"], "diorch-system");
    let args = args(deployment);
    for flag in [
        "--leader-elect",
        "--webhook-addr=:9443",
        "--log-format=json",
    ] {
        assert!(args.iter().any(|a| a == flag), "{flag} missing: {args:?}");
    }
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "diorch:0.1.0");
    assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env: Vec<&Value> = container["env"].as_array().expect("env").iter().collect();
    for var in ["POD_NAMESPACE", "POD_NAME"] {
        assert!(env.iter().any(|e| e["name"] == var), "{var}");
    }
    assert_locked_down(&docs);
    // The webhook Service reaches the container's webhook port; the configurations name it.
    let service = find(&docs, "Service", "diorch-webhook").expect("webhook Service");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "webhook");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = find(&docs, kind, "diorch").expect(kind);
        let hook = &config["webhooks"][0];
        assert_eq!(hook["clientConfig"]["service"]["name"], "diorch-webhook");
        assert_eq!(hook["failurePolicy"], "Fail");
        assert_eq!(hook["sideEffects"], "None");
    }
    // The replica API's Service is what DI_SERVER_URL names.
    assert!(find(&docs, "Service", "diorch-server").is_some());
    assert!(
        args.iter()
            .any(|a| a
                == "--di-server-url=http://diorch-server.diorch-system.svc.cluster.local:8081")
    );
    assert_eq!(
        find(&docs, "PodDisruptionBudget", "diorch").expect("PDB")["spec"]["minAvailable"],
        1
    );
    // The certificate Job runs with its own, name-limited rights.
    let job = find(&docs, "Job", "diorch-webhook-cert").expect("Job");
    assert_eq!(
        job["spec"]["template"]["spec"]["serviceAccountName"],
        "diorch-webhook-cert"
    );
    let cluster_role = find(&docs, "ClusterRole", "diorch-webhook-cert").expect("ClusterRole");
    assert_eq!(
        cluster_role["rules"][0]["resourceNames"],
        serde_json::json!(["diorch"])
    );
    assert!(
        find(
            &docs,
            "CustomResourceDefinition",
            "dijobs.diengine.opendilab.org"
        )
        .is_some()
    );
}

#[test]
fn the_dev_overlay_runs_one_replica_without_a_disruption_budget() {
    let (_, docs) = render("deploy/overlays/dev");
    let deployment = find(&docs, "Deployment", "diorch").expect("Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(args(deployment).iter().any(|a| a == "--log-format=text"));
    assert!(find(&docs, "PodDisruptionBudget", "diorch").is_none());
    assert_locked_down(&docs);
}

#[test]
fn the_cert_manager_variant_injects_the_ca_instead_of_running_the_job() {
    let (_, docs) = render("deploy/cert-manager");
    assert!(find(&docs, "Job", "diorch-webhook-cert").is_none());
    assert!(find(&docs, "ClusterRole", "diorch-webhook-cert").is_none());
    assert!(find(&docs, "ServiceAccount", "diorch-webhook-cert").is_none());
    let certificate = find(&docs, "Certificate", "diorch-webhook-cert").expect("Certificate");
    assert_eq!(certificate["spec"]["secretName"], "diorch-webhook-cert");
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        let config = find(&docs, kind, "diorch").expect(kind);
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "diorch-system/diorch-webhook-cert"
        );
    }
}

fn validator() -> Option<PathBuf> {
    let path = root().join("target/validate-venv/bin/kubernetes-validate");
    path.exists().then_some(path)
}

#[test]
fn every_rendered_manifest_validates_against_the_kubernetes_schemas() {
    let Some(validator) = validator() else {
        eprintln!(
            "SKIPPED offline schema validation: target/validate-venv has no kubernetes-validate; run the tests with scripts/test.sh, which installs it (it skips only where python3 is missing)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    for variant in [
        "deploy",
        "deploy/overlays/dev",
        "deploy/cert-manager",
        "deploy/overlays/monitoring",
    ] {
        let (text, docs) = render(variant);
        let file = dir
            .path()
            .join(format!("{}.yaml", variant.replace('/', "-")));
        std::fs::write(&file, &text).expect("write");
        let out = run_validator(&validator, &file);
        let report = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{variant}: {report}");
        // Every object was checked; only cert-manager's and the Prometheus Operator's kinds
        // have no schema there (tests/operator/monitoring.rs checks those).
        let passed = report.matches(" passed for resource ").count();
        let unknown: Vec<&str> = report
            .lines()
            .filter(|l| l.contains("Couldn't find schema"))
            .collect();
        assert!(
            unknown
                .iter()
                .all(|l| l.contains("cert-manager.io") || l.contains("monitoring.coreos.com")),
            "{variant}: {unknown:?}"
        );
        assert_eq!(passed + unknown.len(), docs.len(), "{variant}: {report}");
    }
    // It does catch a mistake.
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  portz: []\n",
    )
    .expect("write");
    assert!(!run_validator(&validator, &bad).status.success());
}

fn run_validator(validator: &Path, file: &Path) -> std::process::Output {
    Command::new(validator)
        .args(["--strict", "-k", "1.33.0"])
        .arg(file)
        .output()
        .expect("run kubernetes-validate")
}

/// `scripts/pack-plugins.sh` packs the example plugins (built into target/plugins by
/// scripts/build-plugins.sh) into ConfigMaps that the watcher loads: labelled, in the operator's
/// namespace, the component byte for byte, each under the API server's 1 MiB object limit, and
/// valid against the schemas.
#[test]
fn the_example_plugins_pack_into_configmaps_by_script() {
    use base64::Engine as _;
    let out = tempfile::tempdir().expect("tempdir");
    let status = Command::new("bash")
        .arg(root().join("scripts/pack-plugins.sh"))
        .arg("diorch-system")
        .arg(out.path())
        .env("DIORCH", env!("CARGO_BIN_EXE_diorch"))
        .status()
        .expect("run scripts/pack-plugins.sh");
    assert!(status.success(), "scripts/pack-plugins.sh: {status}");
    let (text, docs) = render(out.path());
    let expected = [
        ("binpack", "binpack", "policy"),
        ("spread", "spread", "policy"),
        ("goodput", "goodput", "policy"),
        ("node_placement", "node-placement", "mutator"),
        ("accel_env", "accel-env", "mutator"),
    ];
    assert_eq!(docs.len(), expected.len(), "{text}");
    for (file, name, kind) in expected {
        let cm = find(&docs, "ConfigMap", &format!("plugin-{name}"))
            .unwrap_or_else(|| panic!("no ConfigMap for {name}: {text}"));
        assert_eq!(cm["metadata"]["namespace"], "diorch-system");
        assert!(
            cm["metadata"]["labels"]["diorch.io/plugin"].is_string(),
            "{name}"
        );
        assert_eq!(cm["data"]["kind"], kind);
        if kind == "mutator" {
            // An empty config fails the watcher's load-time smoke call: the script packs an
            // inert one.
            assert!(
                cm["data"]["config"].as_str().is_some_and(|c| !c.is_empty()),
                "{name}: {}",
                cm["data"]
            );
        }
        let packed = base64::engine::general_purpose::STANDARD
            .decode(
                cm["binaryData"]["plugin.wasm"]
                    .as_str()
                    .expect("binaryData"),
            )
            .expect("base64");
        let built = std::fs::read(root().join(format!("target/plugins/{file}.wasm")))
            .expect("run scripts/build-plugins.sh first");
        assert!(packed == built, "{name}: the packed component differs");
        let size = serde_json::to_vec(cm).expect("JSON").len();
        assert!(
            size < 1 << 20,
            "{name}: {size} bytes, over a ConfigMap's 1 MiB"
        );
    }
    if let Some(validator) = validator() {
        let file = out.path().join("rendered.yaml");
        std::fs::write(&file, &text).expect("write");
        let report = run_validator(&validator, &file);
        assert!(
            report.status.success(),
            "{}",
            String::from_utf8_lossy(&report.stdout)
        );
    }
}

// ---- Security defaults (issue 17): replica API auth, network policies, certificate renewal,
// RBAC, the image. ----

const VARIANTS: [&str; 3] = ["deploy", "deploy/overlays/dev", "deploy/cert-manager"];

/// The value of `--flag=value` in the operator's arguments.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let prefix = format!("{name}=");
    args.iter().find_map(|a| a.strip_prefix(prefix.as_str()))
}

#[test]
fn every_variant_turns_replica_api_authentication_on_with_the_reviews_it_needs() {
    for variant in VARIANTS {
        let (_, docs) = render(variant);
        let deployment = find(&docs, "Deployment", "diorch").expect("Deployment");
        let args = args(deployment);
        let auth = flag(&args, "--server-auth");
        assert!(
            auth.is_some_and(|v| v != "none"),
            "{variant}: the replica API must not be open (--server-auth={auth:?}): {args:?}"
        );
        // Checking a caller takes a TokenReview and a SubjectAccessReview.
        let role = find(&docs, "ClusterRole", "diorch").expect("ClusterRole diorch");
        for (group, resource) in [
            ("authentication.k8s.io", "tokenreviews"),
            ("authorization.k8s.io", "subjectaccessreviews"),
        ] {
            assert!(
                grants(role, group, resource, "create"),
                "{variant}: {resource}"
            );
        }
    }
}

/// Whether a Role or ClusterRole has a rule granting `verb` on `group`/`resource`.
fn grants(role: &Value, group: &str, resource: &str, verb: &str) -> bool {
    let has = |rule: &Value, key: &str, want: &str| {
        rule[key]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == want))
    };
    role["rules"].as_array().into_iter().flatten().any(|r| {
        has(r, "apiGroups", group) && has(r, "resources", resource) && has(r, "verbs", verb)
    })
}

#[test]
fn rbac_binds_only_the_operators_and_the_certificate_jobs_roles_and_nothing_broad() {
    for variant in VARIANTS {
        let (_, docs) = render(variant);
        for doc in &docs {
            let kind = doc["kind"].as_str().unwrap_or_default();
            let name = doc["metadata"]["name"].as_str().unwrap_or_default();
            if kind.ends_with("Binding") {
                // Each install ServiceAccount gets its own role (the operator's named reads of
                // plugin sources a second one); the callers' roles stay unbound.
                assert!(
                    ["diorch", "diorch-webhook-cert", "diorch-plugin-sources"].contains(&name),
                    "{variant}: unexpected {kind} {name}"
                );
                assert_eq!(doc["roleRef"]["name"], name, "{variant}: {kind} {name}");
                let account = if name == "diorch-plugin-sources" {
                    "diorch"
                } else {
                    name
                };
                assert_eq!(
                    doc["subjects"],
                    serde_json::json!([{"kind": "ServiceAccount", "name": account, "namespace": "diorch-system"}]),
                    "{variant}: {kind} {name}"
                );
            }
            if kind != "Role" && kind != "ClusterRole" {
                continue;
            }
            for rule in doc["rules"].as_array().into_iter().flatten() {
                let text = rule.to_string();
                assert!(
                    !text.contains('*'),
                    "{variant}: {kind} {name}: wildcard in {text}"
                );
                for forbidden in ["escalate", "bind", "impersonate"] {
                    assert!(
                        !text.contains(forbidden),
                        "{variant}: {kind} {name}: {text}"
                    );
                }
                // Only the certificate Job touches Secrets, and only its own by name (create
                // cannot be limited by name); the operator only reads the plugin sources' named
                // Secrets (trusted keys, registry credentials).
                if rule["resources"].to_string().contains("secrets") {
                    match name {
                        "diorch-webhook-cert" => assert!(
                            rule["resourceNames"] == serde_json::json!(["diorch-webhook-cert"])
                                || rule["verbs"] == serde_json::json!(["create"]),
                            "{variant}: {text}"
                        ),
                        "diorch-plugin-sources" => assert!(
                            rule["verbs"] == serde_json::json!(["get"])
                                && rule["resourceNames"]
                                    .as_array()
                                    .is_some_and(|n| !n.is_empty()),
                            "{variant}: {text}"
                        ),
                        other => panic!("{variant}: {kind} {other} touches Secrets: {text}"),
                    }
                }
            }
        }
        // The callers' roles ship with every variant.
        let client = find(&docs, "ClusterRole", "diorch-replica-client").expect("replica client");
        assert!(grants(
            client,
            "diengine.opendilab.org",
            "dijobs/replicas",
            "update"
        ));
        let metrics = find(&docs, "ClusterRole", "diorch-metrics-reader").expect("metrics reader");
        assert_eq!(
            metrics["rules"],
            serde_json::json!([
                {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
                {"nonResourceURLs": ["/plugins"], "verbs": ["get"]}
            ])
        );
    }
}

// A NetworkPolicy evaluator, for what the test needs: label selectors with matchLabels only,
// peers by pod and namespace selectors or IPv4 ipBlocks, TCP/UDP ports by number.

/// Who connects: a pod (its namespace's labels and its own), or an address outside the pod
/// network (a node, a control plane).
#[derive(Clone, Debug)]
enum Peer {
    Pod {
        namespace: &'static str,
        labels: &'static [(&'static str, &'static str)],
    },
    Address(&'static str),
}

/// The labels of namespace `name`: Kubernetes sets `kubernetes.io/metadata.name` on every one.
fn namespace_labels(name: &str) -> Vec<(String, String)> {
    vec![("kubernetes.io/metadata.name".to_string(), name.to_string())]
}

fn selects(selector: &Value, labels: &[(String, String)]) -> bool {
    let object = selector.as_object().expect("a label selector");
    assert!(
        object.keys().all(|k| k == "matchLabels"),
        "the evaluator knows matchLabels only: {selector}"
    );
    selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && v == lv))
}

fn ipv4(text: &str) -> u32 {
    let octets: Vec<u32> = text
        .split('.')
        .map(|o| o.parse().expect("IPv4 octet"))
        .collect();
    assert_eq!(octets.len(), 4, "{text}");
    octets.iter().fold(0, |a, o| (a << 8) | o)
}

fn in_cidr(address: &str, cidr: &str) -> bool {
    let (net, bits) = cidr.split_once('/').expect("CIDR");
    let bits: u32 = bits.parse().expect("prefix length");
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - bits)
    };
    ipv4(address) & mask == ipv4(net) & mask
}

fn peer_matches(peer_rule: &Value, policy_namespace: &str, peer: &Peer) -> bool {
    if let Some(block) = peer_rule.get("ipBlock") {
        // ipBlock is for addresses outside the pod network (NetworkPolicy's own advice).
        let Peer::Address(address) = peer else {
            return false;
        };
        let except = block["except"].as_array().into_iter().flatten();
        return in_cidr(address, block["cidr"].as_str().expect("cidr"))
            && !except
                .into_iter()
                .any(|c| in_cidr(address, c.as_str().expect("except")));
    }
    let Peer::Pod { namespace, labels } = peer else {
        return false;
    };
    let pod_labels: Vec<(String, String)> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let namespace_ok = match peer_rule.get("namespaceSelector") {
        Some(selector) => selects(selector, &namespace_labels(namespace)),
        None => *namespace == policy_namespace,
    };
    let pod_ok = peer_rule
        .get("podSelector")
        .is_none_or(|selector| selects(selector, &pod_labels));
    namespace_ok && pod_ok
}

/// Whether `peer` may open a connection to `port`/TCP of a pod with `labels` in
/// diorch-system, under the variant's NetworkPolicies (no policy selecting it: open).
fn admits(docs: &[Value], labels: &[(String, String)], port: u16, peer: &Peer) -> bool {
    let policies: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "NetworkPolicy")
        .filter(|d| d["metadata"]["namespace"] == "diorch-system")
        .filter(|d| {
            d["spec"]["policyTypes"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "Ingress"))
        })
        .filter(|d| selects(&d["spec"]["podSelector"], labels))
        .collect();
    if policies.is_empty() {
        return true;
    }
    policies.iter().any(|policy| {
        policy["spec"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|rule| {
                let port_ok = rule["ports"].as_array().is_none_or(|ports| {
                    ports.iter().any(|p| {
                        p["protocol"].as_str().unwrap_or("TCP") == "TCP"
                            && p["port"].as_u64() == Some(u64::from(port))
                    })
                });
                let peer_ok = rule["from"]
                    .as_array()
                    .is_none_or(|from| from.iter().any(|f| peer_matches(f, "diorch-system", peer)));
                port_ok && peer_ok
            })
    })
}

/// Labels as (key, value) pairs.
type Labels = Vec<(String, String)>;

/// The operator pod's labels and the port of each of its listeners (by container port name),
/// from the Deployment.
fn operator_pod(docs: &[Value]) -> (Labels, Vec<(String, u16)>) {
    let deployment = find(docs, "Deployment", "diorch").expect("Deployment");
    let template = &deployment["spec"]["template"];
    let labels = template["metadata"]["labels"]
        .as_object()
        .expect("labels")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("label").to_string()))
        .collect();
    let ports = template["spec"]["containers"][0]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            let port = u16::try_from(p["containerPort"].as_u64().expect("port")).expect("u16");
            (p["name"].as_str().expect("port name").to_string(), port)
        })
        .collect();
    (labels, ports)
}

const DIJOB_POD: Peer = Peer::Pod {
    namespace: "team-a",
    labels: &[
        ("diengine/operator", "di-operator"),
        ("diengine/job", "job-with-tasks"),
    ],
};
const OTHER_POD: Peer = Peer::Pod {
    namespace: "team-a",
    labels: &[("app", "notebook")],
};
const OPERATOR_NAMESPACE_POD: Peer = Peer::Pod {
    namespace: "diorch-system",
    labels: &[("app.kubernetes.io/name", "diorch")],
};
const PROMETHEUS: Peer = Peer::Pod {
    namespace: "monitoring",
    labels: &[("app.kubernetes.io/name", "prometheus")],
};
const CONTROL_PLANE: Peer = Peer::Address("10.0.0.5");

#[test]
fn network_policies_admit_each_listener_only_its_callers() {
    // The DIJob pods' label the replica API rule selects is the one the controller sets.
    assert_eq!(diorch_core::api::labels::OPERATOR, "diengine/operator");
    assert_eq!(diorch_core::api::labels::OPERATOR_NAME, "di-operator");
    for variant in VARIANTS {
        let (_, docs) = render(variant);
        let (labels, ports) = operator_pod(&docs);
        let port = |name: &str| {
            ports
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, p)| *p)
                .unwrap_or_else(|| panic!("{variant}: no container port {name}"))
        };
        let (api, webhook, metrics, probes) = (
            port("http"),
            port("webhook"),
            port("metrics"),
            port("probes"),
        );
        // (peer, port, admitted)
        let expected = [
            (&DIJOB_POD, api, true),
            (&OTHER_POD, api, false),
            (&PROMETHEUS, api, false),
            (&DIJOB_POD, metrics, false),
            (&OTHER_POD, metrics, false),
            (&OPERATOR_NAMESPACE_POD, metrics, false),
            (&PROMETHEUS, metrics, true),
            // The probe port serves the kubelet, whose traffic from the pod's own node is
            // always allowed; no pod anywhere may reach it.
            (&DIJOB_POD, probes, false),
            (&PROMETHEUS, probes, false),
            (&OPERATOR_NAMESPACE_POD, probes, false),
            (&CONTROL_PLANE, probes, false),
            // The base leaves the webhook port open (see networkpolicy.yaml).
            (&CONTROL_PLANE, webhook, true),
            // Any other port: nobody.
            (&DIJOB_POD, 22, false),
            (&CONTROL_PLANE, 22, false),
        ];
        for (peer, port, admitted) in expected {
            assert_eq!(
                admits(&docs, &labels, port, peer),
                admitted,
                "{variant}: {peer:?} to port {port}"
            );
        }
        // The certificate Job's pods listen on nothing and admit nothing.
        let job_labels = vec![(
            "app.kubernetes.io/name".to_string(),
            "diorch-webhook-cert".to_string(),
        )];
        if find(&docs, "CronJob", "diorch-webhook-cert").is_some() {
            for peer in [&DIJOB_POD, &PROMETHEUS, &CONTROL_PLANE] {
                assert!(!admits(&docs, &job_labels, 8080, peer), "{variant}");
            }
        }
        // The flags open the same ports the policies name.
        let args = args(find(&docs, "Deployment", "diorch").expect("Deployment"));
        for (name, port) in [
            ("--server-bind-address", api),
            ("--webhook-addr", webhook),
            ("--metric-addr", metrics),
            ("--probe-addr", probes),
        ] {
            assert_eq!(
                flag(&args, name),
                Some(format!(":{port}").as_str()),
                "{variant}"
            );
        }
        assert_egress_is_api_server_and_dns_only(variant, &docs);
    }
}

/// Every pod of the namespace may connect only to the API server's ports and DNS.
fn assert_egress_is_api_server_and_dns_only(variant: &str, docs: &[Value]) {
    let egress = find(docs, "NetworkPolicy", "diorch-egress").expect("egress policy");
    assert_eq!(egress["spec"]["podSelector"], serde_json::json!({}));
    assert_eq!(egress["spec"]["policyTypes"], serde_json::json!(["Egress"]));
    let mut allowed = std::collections::BTreeSet::new();
    for rule in egress["spec"]["egress"].as_array().expect("egress rules") {
        let ports = rule["ports"]
            .as_array()
            .unwrap_or_else(|| panic!("{variant}: an egress rule without ports opens all"));
        for p in ports {
            allowed.insert((
                p["protocol"].as_str().expect("protocol").to_string(),
                p["port"].as_u64().expect("numeric port"),
            ));
        }
    }
    let expected: std::collections::BTreeSet<(String, u64)> = [
        ("TCP", 443),
        ("TCP", 6443),
        ("TCP", 8443),
        ("UDP", 53),
        ("TCP", 53),
    ]
    .into_iter()
    .map(|(p, n)| (p.to_string(), n))
    .collect();
    assert_eq!(allowed, expected, "{variant}");
    // No other policy in the namespace opens egress wider.
    for doc in docs.iter().filter(|d| d["kind"] == "NetworkPolicy") {
        if doc["metadata"]["name"] != "diorch-egress" {
            assert!(doc["spec"]["egress"].is_null(), "{variant}: {doc}");
        }
    }
}

#[test]
fn the_control_plane_component_narrows_the_webhook_port_to_its_range() {
    // A kustomization of the user's own, as the component's header shows; kustomize wants
    // relative paths, so it lives under target/.
    let dir = tempfile::tempdir_in(root().join("target")).expect("tempdir in target/");
    let up = "../..";
    std::fs::write(
        dir.path().join("kustomization.yaml"),
        format!(
            "resources: [{up}/deploy]\ncomponents: [{up}/deploy/components/webhook-from-control-plane]\npatches:\n- target: {{kind: NetworkPolicy, name: diorch-ingress}}\n  patch: |-\n    - op: replace\n      path: /spec/ingress/1/from/0/ipBlock/cidr\n      value: 10.0.0.0/24\n"
        ),
    )
    .expect("write kustomization");
    let (text, docs) = render(dir.path());
    if let Some(validator) = validator() {
        let file = dir.path().join("rendered.yaml");
        std::fs::write(&file, &text).expect("write");
        let out = run_validator(&validator, &file);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    let (labels, ports) = operator_pod(&docs);
    let webhook = ports
        .iter()
        .find(|(n, _)| n == "webhook")
        .expect("webhook")
        .1;
    assert!(admits(&docs, &labels, webhook, &CONTROL_PLANE));
    assert!(!admits(
        &docs,
        &labels,
        webhook,
        &Peer::Address("192.168.1.9")
    ));
    assert!(!admits(&docs, &labels, webhook, &DIJOB_POD));
    // The other rules are unchanged.
    assert!(admits(&docs, &labels, 8081, &DIJOB_POD));
    assert!(admits(&docs, &labels, 8443, &PROMETHEUS));
    // Unpatched, its placeholder (a documentation range) admits no real control plane.
    let dir2 = tempfile::tempdir_in(root().join("target")).expect("tempdir in target/");
    std::fs::write(
        dir2.path().join("kustomization.yaml"),
        format!(
            "resources: [{up}/deploy]\ncomponents: [{up}/deploy/components/webhook-from-control-plane]\n"
        ),
    )
    .expect("write kustomization");
    let (_, docs) = render(dir2.path());
    assert!(!admits(&docs, &labels, webhook, &CONTROL_PLANE));
}

/// The longest time between two runs of a cron schedule, for the forms the install uses: a
/// fixed minute and hour, every day (`M H * * *`). Anything else fails, so a schedule change
/// gets a look.
fn longest_gap_hours(schedule: &str) -> u64 {
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    assert_eq!(fields.len(), 5, "{schedule}");
    assert!(
        fields[0].parse::<u8>().is_ok_and(|m| m < 60)
            && fields[1].parse::<u8>().is_ok_and(|h| h < 24),
        "the test understands a fixed minute and hour only: {schedule}"
    );
    assert_eq!(&fields[2..], ["*", "*", "*"], "daily only: {schedule}");
    24
}

fn number_flag(args: &[String], name: &str) -> u64 {
    flag(args, name)
        .unwrap_or_else(|| panic!("{name} missing: {args:?}"))
        .parse()
        .expect("a number")
}

#[test]
fn the_webhook_certificate_is_renewed_well_before_it_expires() {
    for variant in ["deploy", "deploy/overlays/dev"] {
        let (_, docs) = render(variant);
        let cron = find(&docs, "CronJob", "diorch-webhook-cert").expect("CronJob");
        let job = find(&docs, "Job", "diorch-webhook-cert").expect("initial Job");
        let spec = &cron["spec"];
        let pod = &spec["jobTemplate"]["spec"]["template"]["spec"];
        let cron_args: Vec<String> = pod["containers"][0]["args"]
            .as_array()
            .expect("args")
            .iter()
            .filter_map(|a| a.as_str().map(str::to_string))
            .collect();
        // The same command, image and rights as the initial Job.
        assert_eq!(
            pod["containers"][0]["args"],
            job["spec"]["template"]["spec"]["containers"][0]["args"]
        );
        assert_eq!(pod["containers"][0]["image"], "diorch:0.1.0");
        assert_eq!(pod["serviceAccountName"], "diorch-webhook-cert");
        assert_eq!(spec["concurrencyPolicy"], "Forbid");
        assert_eq!(spec["timeZone"], "Etc/UTC");
        // A run renews once the certificate expires within the window; runs come at most
        // `gap` apart (plus the starting deadline for a missed one). The window leaves room for
        // a week of failed runs, and the validity for a year of not renewing needlessly.
        let validity_days = number_flag(&cron_args, "--validity-days");
        let window_days = number_flag(&cron_args, "--renew-before-days");
        let gap_hours = longest_gap_hours(spec["schedule"].as_str().expect("schedule"))
            + spec["startingDeadlineSeconds"].as_u64().expect("deadline") / 3600;
        assert!(
            window_days * 24 >= 7 * gap_hours,
            "{variant}: a {window_days}-day window, runs {gap_hours} h apart"
        );
        assert!(
            validity_days >= 10 * window_days,
            "{variant}: {validity_days} days valid, renewed {window_days} days before"
        );
        // The operator mounts the Secret whole (no subPath), so the kubelet projects a renewed
        // certificate into running pods, which re-read it.
        let deployment = find(&docs, "Deployment", "diorch").expect("Deployment");
        let mounts = &deployment["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
        let mount = mounts
            .as_array()
            .expect("mounts")
            .iter()
            .find(|m| m["name"] == "webhook-cert")
            .expect("webhook-cert mount");
        assert!(mount.get("subPath").is_none(), "{variant}: {mount}");
        assert_locked_down(&docs);
    }
    let (_, docs) = render("deploy/cert-manager");
    assert!(find(&docs, "CronJob", "diorch-webhook-cert").is_none());
}

/// `FROM` lines of the Dockerfile, with `ARG` defaults substituted.
fn dockerfile_stages(text: &str) -> Vec<String> {
    let mut args = std::collections::BTreeMap::new();
    let mut stages = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(arg) = line.strip_prefix("ARG ") {
            if let Some((k, v)) = arg.split_once('=') {
                args.insert(format!("${{{k}}}"), v.to_string());
            }
        } else if let Some(from) = line.strip_prefix("FROM ") {
            let image = from.split_whitespace().next().expect("image");
            stages.push(
                args.get(image)
                    .cloned()
                    .unwrap_or_else(|| image.to_string()),
            );
        }
    }
    stages
}

#[test]
fn the_image_is_built_from_pinned_bases_and_runs_distroless_as_non_root() {
    let text = std::fs::read_to_string(root().join("Dockerfile")).expect("Dockerfile");
    let stages = dockerfile_stages(&text);
    assert_eq!(stages.len(), 2, "{stages:?}");
    for image in &stages {
        let (_, tag) = image.rsplit_once(':').expect("a tag");
        assert!(!image.contains(":latest"), "{image}");
        assert!(!tag.is_empty(), "{image}");
    }
    // The build stage's Rust is an exact release, at least the crate's rust-version.
    let rust = stages[0]
        .strip_prefix("rust:")
        .and_then(|t| t.split(['-', '@']).next())
        .expect("a rust:<version> build image");
    let version: Vec<u32> = rust
        .split('.')
        .map(|p| p.parse().expect("number"))
        .collect();
    assert_eq!(version.len(), 3, "an exact x.y.z release: {rust}");
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let minimum: Vec<u32> = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("rust-version")
        .trim_matches('"')
        .split('.')
        .map(|p| p.parse().expect("number"))
        .collect();
    assert!(version[..2] >= minimum[..2], "{rust} < {minimum:?}");
    // Same Debian release in both stages, so the binary finds the glibc it was linked with.
    assert!(stages[0].contains("-bookworm"), "{}", stages[0]);
    assert!(
        stages[1].starts_with("gcr.io/distroless/cc-debian12:nonroot"),
        "{}",
        stages[1]
    );
    // The runtime stage only copies the binary in: nothing runs there (no shell to run it).
    let runtime = text.rsplit("\nFROM ").next().expect("runtime stage");
    assert!(!runtime.contains("\nRUN "), "{runtime}");
    assert!(runtime.contains("\nUSER 65532:65532\n"), "{runtime}");
    // The install runs the image as that user too.
    let (_, docs) = render("deploy");
    let deployment = find(&docs, "Deployment", "diorch").expect("Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"],
        65532
    );
}
