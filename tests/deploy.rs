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
    for variant in ["deploy", "deploy/overlays/dev", "deploy/cert-manager"] {
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
        // Every object was checked; only cert-manager's kinds have no schema there.
        let passed = report.matches(" passed for resource ").count();
        let unknown: Vec<&str> = report
            .lines()
            .filter(|l| l.contains("Couldn't find schema"))
            .collect();
        assert!(
            unknown.iter().all(|l| l.contains("cert-manager.io")),
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
