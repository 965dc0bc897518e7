//! Plugins from an OCI registry, end to end: a real registry (Debian's `docker-registry`, the
//! CNCF distribution registry) started on 127.0.0.1, components pushed and signed with the
//! `diorch plugin` CLI, and policy ConfigMaps that name them by reference. Written against a
//! `Kubectl` so the sandbox tests and the real-cluster e2e suite share the scenario.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::Kubectl;
use super::allocation::{self as placement, gpu_job, plugin_file, wait_allocated, wait_event};
use super::controller as scenario;

use super::registry::Registry;

/// Runs `diorch plugin <args>`; its stdout, or a panic with its stderr.
pub fn diorch_plugin(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_diorch"))
        .arg("plugin")
        .args(args)
        .output()
        .expect("diorch plugin");
    assert!(
        out.status.success(),
        "diorch plugin {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Pushes a built example plugin to `<registry>/<repository>:<tag>`, signed with `key` if
/// given; the reference pinned by digest.
pub fn push(registry: &Registry, plugin: &str, repository: &str, key: Option<&Path>) -> String {
    let reference = format!("{}/{repository}:v1", registry.host);
    let file = plugin_file(plugin);
    let mut args = vec![
        "push",
        &file,
        &reference,
        "--insecure-registry",
        &registry.host,
    ];
    let key = key.map(|k| k.display().to_string());
    if let Some(key) = &key {
        args.extend(["--sign", key]);
    }
    diorch_plugin(&args)
}

/// The layer digest of the component a pinned reference names (read back through the CLI's
/// own pull, as `plugin check` would).
fn layer_digest(file: &str) -> String {
    use sha2::Digest as _;
    let bytes = std::fs::read(file).expect("plugin file");
    let hex: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A key pair in `dir`: (private, public).
pub fn keygen(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let prefix = dir.join(name);
    diorch_plugin(&["keygen", "--out", &prefix.display().to_string()]);
    (prefix.with_extension("key"), prefix.with_extension("pub"))
}

/// The operator flags this scenario needs: plain HTTP to the test registry, and every plugin
/// signed by a key in the (default) trusted-keys ConfigMap.
pub fn operator_flags(registry: &Registry) -> Vec<String> {
    vec![
        "--plugin-insecure-registries".into(),
        registry.host.clone(),
        "--require-plugin-signatures".into(),
        // Short pulls: a refusal shows within the scenario's waits.
        "--plugin-pull-timeout".into(),
        "30s".into(),
    ]
}

/// A policy ConfigMap naming `image`, applied with kubectl.
fn point(p: &Kubectl, image: &str) {
    let cm = diorch_plugin(&[
        "configmap",
        "--image",
        image,
        "--name",
        "registry",
        "--kind",
        "policy",
    ]);
    p.ok_stdin(&["apply", "-f", "-"], &cm);
}

/// The plugin `registry` from the registry: a signed spread policy loads and places a job;
/// re-pointed at a signed bin-pack digest it swaps hot; an unsigned component, one signed by
/// another key and a tampered blob are each refused with their reason while bin-pack keeps
/// placing jobs. The operator runs with [`operator_flags`]; plugins live in `plugin_ns`.
/// Needs 4 ready nodes with at least 4 free GPUs each.
pub fn signed_policy_from_a_registry(k: &Kubectl, ns: &str, plugin_ns: &str, registry: &Registry) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    let keys = tempfile::tempdir().expect("tempdir");
    let (team_key, team_pub) = keygen(keys.path(), "team");
    let (other_key, _) = keygen(keys.path(), "other");
    let public = std::fs::read_to_string(&team_pub).expect("public key");
    p.ok(&[
        "create",
        "configmap",
        "diorch-plugin-keys",
        &format!("--from-literal=team.pub={public}"),
    ]);
    let spread = push(registry, "spread", "policies/spread", Some(&team_key));
    let binpack = push(registry, "binpack", "policies/binpack", Some(&team_key));
    let unsigned = push(registry, "goodput", "policies/unsigned", None);
    let foreign = push(registry, "goodput", "policies/foreign", Some(&other_key));
    // `plugin check` pulls and verifies as the operator will.
    let checked = Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args([
            "plugin",
            "check",
            &spread,
            "--insecure-registry",
            &registry.host,
        ])
        .args(["--trusted-key", &team_pub.display().to_string()])
        .output()
        .expect("plugin check");
    assert!(checked.status.success(), "{checked:?}");

    // Signed spread, by digest: loaded, and it places a job one replica per node.
    point(&p, &spread);
    let note = wait_event(&p, "ConfigMap", "plugin-registry", "PluginLoaded", 1);
    assert!(
        note.contains(&layer_digest(&plugin_file("spread"))[7..]),
        "{note}"
    );
    let status = p.ok(&["get", "configmap", "plugin-registry", "-o", "json"]);
    assert!(
        status.contains("\"diorch.io/plugin-state\": \"Loaded\""),
        "{status}"
    );
    scenario::apply(&k, &gpu_job("from-registry", "registry", 4, 1));
    let (_, _, message) = wait_allocated(&k, "from-registry", "True");
    assert!(message.starts_with("placed by registry@"), "{message}");
    scenario::wait_phase(&k, "from-registry", "Running");
    assert_eq!(
        placement::distinct(&placement::placement(&k, "from-registry")),
        4
    );

    // Re-pointed at bin-pack's digest: the next job is packed by the new version.
    point(&p, &binpack);
    wait_event(&p, "ConfigMap", "plugin-registry", "PluginLoaded", 2);
    scenario::apply(&k, &gpu_job("repointed", "registry", 4, 1));
    let (_, _, packed_by) = wait_allocated(&k, "repointed", "True");
    assert_ne!(
        packed_by.split_whitespace().nth(2),
        message.split_whitespace().nth(2),
        "the job after re-pointing was placed by the old version: {packed_by}"
    );
    scenario::wait_phase(&k, "repointed", "Running");
    assert_eq!(
        placement::distinct(&placement::placement(&k, "repointed")),
        1
    );

    // Unsigned, then signed by a key the cluster does not trust: refused, bin-pack serves.
    point(&p, &unsigned);
    let note = wait_event(&p, "ConfigMap", "plugin-registry", "SignatureRefused", 1);
    assert!(note.contains("no signature"), "{note}");
    assert!(note.contains("last good version"), "{note}");
    point(&p, &foreign);
    let note = wait_event(&p, "ConfigMap", "plugin-registry", "SignatureRefused", 2);
    assert!(note.contains("trusted key"), "{note}");

    // Tampered: a signed component whose blob changed in the registry's storage.
    let tampered = push(registry, "goodput", "policies/tampered", Some(&team_key));
    let blob = registry.blob_file(&layer_digest(&plugin_file("goodput")));
    let mut bytes = std::fs::read(&blob).expect("blob");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&blob, bytes).expect("tamper");
    point(&p, &tampered);
    let note = wait_event(&p, "ConfigMap", "plugin-registry", "DigestMismatch", 1);
    assert!(note.contains("tampered"), "{note}");
    let status = p.ok(&["get", "configmap", "plugin-registry", "-o", "json"]);
    assert!(
        status.contains("\"diorch.io/plugin-state\": \"Rejected\""),
        "{status}"
    );

    // Through all of it, the last good version (bin-pack) keeps placing jobs.
    scenario::apply(&k, &gpu_job("after-refusals", "registry", 2, 1));
    let (_, _, still) = wait_allocated(&k, "after-refusals", "True");
    assert_eq!(
        still.split_whitespace().nth(2),
        packed_by.split_whitespace().nth(2),
        "{still} / {packed_by}"
    );
    scenario::wait_phase(&k, "after-refusals", "Running");
    p.ok(&[
        "delete",
        "configmap",
        "plugin-registry",
        "diorch-plugin-keys",
    ]);
}

/// A policy whose registry is down when its ConfigMap is applied is refused (`PullFailed`), and
/// loads by itself once the registry serves again (the watcher retries a failed pull with
/// backoff, from 10 s). The operator runs with [`operator_flags`].
pub fn a_pull_that_failed_is_tried_again(k: &Kubectl, plugin_ns: &str, registry: &mut Registry) {
    let p = k.in_namespace(plugin_ns);
    let keys = tempfile::tempdir().expect("tempdir");
    let (key, public) = keygen(keys.path(), "team");
    let public = std::fs::read_to_string(&public).expect("public key");
    p.ok(&[
        "create",
        "configmap",
        "diorch-plugin-keys",
        &format!("--from-literal=team.pub={public}"),
    ]);
    let binpack = push(registry, "binpack", "policies/later", Some(&key));
    registry.stop();
    point(&p, &binpack);
    let note = wait_event(&p, "ConfigMap", "plugin-registry", "PullFailed", 1);
    assert!(note.contains(&registry.host), "{note}");
    registry.resume();
    let note = wait_event(&p, "ConfigMap", "plugin-registry", "PluginLoaded", 1);
    assert!(
        note.contains(&layer_digest(&plugin_file("binpack"))[7..]),
        "{note}"
    );
    p.ok(&[
        "delete",
        "configmap",
        "plugin-registry",
        "diorch-plugin-keys",
    ]);
}

/// Python and JavaScript plugins in the operator: a Python spread policy pushed to the registry
/// and signed, named by a policy ConfigMap, and the JS env mutator carried inline (compressed,
/// signed), each loaded by the operator, place and shape a job: one learner per node, and the
/// learners' env set by the JS mutator. The operator runs with [`operator_flags`].
/// Needs 4 ready nodes with at least 1 free GPU each.
pub fn python_policy_and_js_mutator_place_and_shape_a_job(
    k: &Kubectl,
    ns: &str,
    plugin_ns: &str,
    registry: &Registry,
) {
    let k = k.in_namespace(ns);
    let p = k.in_namespace(plugin_ns);
    let keys = tempfile::tempdir().expect("tempdir");
    let (key, public) = keygen(keys.path(), "team");
    let public_pem = std::fs::read_to_string(&public).expect("public key");
    p.ok(&[
        "create",
        "configmap",
        "diorch-plugin-keys",
        &format!("--from-literal=team.pub={public_pem}"),
    ]);
    // The Python component (~19 MiB) travels through the registry; interpreted, it gets a
    // longer deadline than the 50 ms default (docs/plugins-languages.md).
    let python = push(registry, "py_spread", "policies/python-spread", Some(&key));
    let cm = diorch_plugin(&[
        "configmap",
        "--image",
        &python,
        "--name",
        "python",
        "--kind",
        "policy",
        "--deadline-ms",
        "2000",
    ]);
    p.ok_stdin(&["apply", "-f", "-"], &cm);
    // The JS component (QuickJS, ~1.7 MiB) fits a ConfigMap once compressed (gzip, ~0.6 MB).
    let key_arg = key.display().to_string();
    let js = plugin_file("js_accel_env");
    let cm = diorch_plugin(&[
        "configmap",
        &js,
        "--compress",
        "gzip",
        "--sign",
        &key_arg,
        "--name",
        "js-env",
        "--kind",
        "mutator",
        "--task-types",
        "learner",
        "--deadline-ms",
        "2000",
        "--config",
        r#"{"interface": "ib0", "env": {"TEAM": "rl"}}"#,
    ]);
    // Server-side: a client-side apply copies the object into an annotation (256 KiB at most).
    p.ok_stdin(&["apply", "--server-side", "-f", "-"], &cm);
    let note = wait_event(&p, "ConfigMap", "plugin-python", "PluginLoaded", 1);
    assert!(
        note.contains(&layer_digest(&plugin_file("py_spread"))[7..]),
        "{note}"
    );
    wait_event(&p, "ConfigMap", "plugin-js-env", "PluginLoaded", 1);

    scenario::apply(&k, &gpu_job("polyglot", "python", 4, 1));
    let (_, _, message) = wait_allocated(&k, "polyglot", "True");
    assert!(message.starts_with("placed by python@"), "{message}");
    scenario::wait_phase(&k, "polyglot", "Running");
    assert_eq!(
        placement::distinct(&placement::placement(&k, "polyglot")),
        4
    );
    let pods = scenario::pods(&k, "polyglot");
    for rank in 0..4 {
        let pod = &pods[&format!("polyglot-learner-{rank}")];
        let env = placement::container_env(pod);
        let get = |name: &str| env.get(name).map(String::as_str);
        assert_eq!(
            get("NCCL_SOCKET_IFNAME"),
            Some("ib0"),
            "rank {rank}: {env:?}"
        );
        assert_eq!(get("TEAM"), Some("rl"), "rank {rank}");
        assert_eq!(
            get("LEARNER_RANK"),
            Some(rank.to_string().as_str()),
            "rank {rank}"
        );
        assert_eq!(
            get("DI_RANK"),
            Some(rank.to_string().as_str()),
            "operator env kept"
        );
    }
    p.ok(&[
        "delete",
        "configmap",
        "plugin-python",
        "plugin-js-env",
        "diorch-plugin-keys",
    ]);
}
