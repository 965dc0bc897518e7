//! `diorch plugin run` through the real binary: placements of `examples/snapshot.json` by the
//! example policies, the built-in comparison, a misbehaving plugin, and bad inputs. Components
//! come from `scripts/build-plugins.sh` (target/plugins/*.wasm).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use diorch::plugin::snapshot::Snapshot;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn plugin(name: &str) -> PathBuf {
    let path = repo(&format!("target/plugins/{name}.wasm"));
    assert!(
        path.exists(),
        "{} is missing; run scripts/build-plugins.sh first",
        path.display()
    );
    path
}

fn diorch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn example() -> Snapshot {
    Snapshot::from_json(&std::fs::read_to_string(repo("examples/snapshot.json")).unwrap()).unwrap()
}

/// Per job section of the report: node → replica count from its placement table (the rows
/// between the `NODE` header and the next line not indented by exactly two spaces plus a
/// node), and the section's other lines.
struct Section {
    rows: BTreeMap<String, usize>,
    lines: Vec<String>,
}

fn sections(report: &str) -> BTreeMap<String, Section> {
    let mut out = BTreeMap::new();
    let mut current: Option<(String, Section, bool)> = None;
    for line in report.lines() {
        if let Some(rest) = line.strip_prefix("job ") {
            if let Some((key, s, _)) = current.take() {
                out.insert(key, s);
            }
            let key = rest.split(':').next().unwrap().to_string();
            let section = Section {
                rows: BTreeMap::new(),
                lines: vec![],
            };
            current = Some((key, section, false));
            continue;
        }
        let Some((_, section, in_table)) = current.as_mut() else {
            continue;
        };
        if line.is_empty() {
            let (key, s, _) = current.take().unwrap();
            out.insert(key, s);
            continue;
        }
        section.lines.push(line.to_string());
        if line.starts_with("  NODE ") {
            *in_table = true;
        } else if *in_table && line.starts_with("  ") && !line.starts_with("   ") {
            let mut words = line.split_whitespace();
            let (node, count) = (words.next().unwrap(), words.next().unwrap());
            match count.parse::<usize>() {
                Ok(n) => {
                    section.rows.insert(node.to_string(), n);
                }
                Err(_) => *in_table = false,
            }
        } else {
            *in_table = false;
        }
    }
    if let Some((key, s, _)) = current {
        out.insert(key, s);
    }
    out
}

#[test]
fn binpack_places_every_unplaced_job_on_existing_nodes() {
    let snapshot = example();
    let out = diorch(&[
        "plugin",
        "run",
        plugin("binpack").to_str().unwrap(),
        "--input",
        repo("examples/snapshot.json").to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let schedulable: Vec<&str> = snapshot
        .nodes
        .iter()
        .filter(|n| n.schedulable())
        .map(|n| n.name.as_str())
        .collect();
    let sections = sections(&stdout);
    let unplaced: Vec<_> = snapshot.unplaced_jobs().collect();
    assert_eq!(unplaced.len(), 3);
    assert_eq!(sections.len(), unplaced.len(), "{stdout}");
    for job in unplaced {
        let s = sections
            .get(&job.key)
            .unwrap_or_else(|| panic!("no section for {}:\n{stdout}", job.key));
        assert!(!s.rows.is_empty(), "{}: no placement\n{stdout}", job.key);
        for node in s.rows.keys() {
            assert!(
                schedulable.contains(&node.as_str()),
                "{}: placed on {node}, not a schedulable node of the snapshot\n{stdout}",
                job.key
            );
        }
        assert_eq!(
            s.rows.values().sum::<usize>(),
            job.total_replicas(),
            "{}\n{stdout}",
            job.key
        );
        assert!(
            s.lines
                .iter()
                .any(|l| l.trim() == "check     ok: one ready node per replica"),
            "{stdout}"
        );
        assert!(
            s.lines
                .iter()
                .any(|l| l.trim_start().starts_with("time ") && l.contains(" µs")),
            "{stdout}"
        );
    }
    assert!(
        stdout.contains("summary   3 placed, 0 refused, 0 failed"),
        "{stdout}"
    );
}

#[test]
fn the_binpack_plugin_agrees_with_the_builtin_and_spread_does_not() {
    let input = repo("examples/snapshot.json");
    let run = |file: &str| {
        let out = diorch(&[
            "plugin",
            "run",
            plugin(file).to_str().unwrap(),
            "--input",
            input.to_str().unwrap(),
            "--compare-builtin",
            "binpack",
        ]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        text(&out.stdout)
    };
    let same = run("binpack");
    assert_eq!(
        same.matches("builtin-binpack  same placement").count(),
        3,
        "{same}"
    );
    assert!(!same.contains("diff "), "{same}");
    let other = run("spread");
    assert!(other.contains("  diff      built-in → plugin: "), "{other}");
    // The built-in's answer is printed as its own table, indented under the plugin's.
    assert!(other.contains("  builtin-binpack\n    NODE "), "{other}");
}

#[test]
fn optimize_replans_every_preemptible_job() {
    let snapshot = example();
    let out = diorch(&[
        "plugin",
        "run",
        plugin("spread").to_str().unwrap(),
        "--input",
        repo("examples/snapshot.json").to_str().unwrap(),
        "--call",
        "optimize",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}", text(&out.stderr));
    let sections = sections(&stdout);
    let preemptible: Vec<_> = snapshot.preemptible_jobs().collect();
    assert_eq!(sections.len(), preemptible.len(), "{stdout}");
    for job in &preemptible {
        let s = &sections[&job.key];
        assert_eq!(s.rows.values().sum::<usize>(), job.total_replicas());
        let in_previous = snapshot.previous.iter().any(|p| p.job == job.key);
        let says = s
            .lines
            .iter()
            .find(|l| l.starts_with("  previous"))
            .unwrap();
        assert_eq!(says.contains("previous → now"), in_previous, "{says}");
    }
    assert!(
        stdout.contains("summary   4 of 4 job(s) placed"),
        "{stdout}"
    );
}

/// A policy that sleeps 30 s in `allocate` (WASI monotonic-clock subscribe + poll, which the
/// epoch deadline cannot interrupt) is stopped at its first clock call, and the run goes on.
#[test]
fn a_sleeping_plugin_is_stopped_at_once_not_after_its_sleep() {
    let mut snapshot = example();
    let job = snapshot
        .jobs
        .iter_mut()
        .find(|j| j.key == "research/ppo-football")
        .unwrap();
    job.key = "research/sleep".into();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("snapshot.json");
    std::fs::write(&input, snapshot.to_json().unwrap()).unwrap();
    let started = std::time::Instant::now();
    let out = diorch(&[
        "plugin",
        "run",
        plugin("hostile_policy").to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
    ]);
    let took = started.elapsed();
    let stdout = text(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    // The sleep alone would take 30 s; a loaded machine runs the rest in well under 20 s.
    assert!(took < std::time::Duration::from_secs(20), "took {took:?}");
    let sections = sections(&stdout);
    assert!(
        sections["research/sleep"]
            .lines
            .iter()
            .any(|l| l.starts_with("  FAILED")
                && l.contains("subscribe-duration, which is denied")
                && l.contains("(Trap)")),
        "{stdout}"
    );
    assert!(
        stdout.contains("summary   2 placed, 0 refused, 1 failed"),
        "{stdout}"
    );
}

#[test]
fn a_plugin_answer_the_host_refuses_fails_the_run() {
    // The hostile policy puts every replica of a job named `not-ready` on a node that is not
    // ready and bin-packs the others.
    let mut snapshot = example();
    let job = snapshot
        .jobs
        .iter_mut()
        .find(|j| j.key == "research/ppo-football")
        .unwrap();
    job.key = "research/not-ready".into();
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("snapshot.json");
    std::fs::write(&input, snapshot.to_json().unwrap()).unwrap();
    let out = diorch(&[
        "plugin",
        "run",
        plugin("hostile_policy").to_str().unwrap(),
        "--input",
        input.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}");
    let sections = sections(&stdout);
    let bad = &sections["research/not-ready"];
    assert!(bad.rows.is_empty(), "{stdout}");
    assert!(
        bad.lines.iter().any(|l| l.starts_with("  FAILED")
            && l.contains("not ready")
            && l.contains("(MalformedOutput)")),
        "{stdout}"
    );
    // The other jobs are still placed.
    assert_eq!(
        sections["prod/qmix-smac"].rows.values().sum::<usize>(),
        6,
        "{stdout}"
    );
    assert!(
        stdout.contains("summary   2 placed, 0 refused, 1 failed"),
        "{stdout}"
    );
    assert!(
        stderr.contains("error: the plugin failed 1 of 3 calls"),
        "{stderr}"
    );
}

#[test]
fn bad_inputs_fail_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, content: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, content).unwrap();
        path.to_str().unwrap().to_string()
    };
    let example = repo("examples/snapshot.json").to_str().unwrap().to_string();
    let binpack = plugin("binpack").to_str().unwrap().to_string();
    let mutator = plugin("accel_env").to_str().unwrap().to_string();
    let malformed = write("malformed.json", "{\n  \"version\": 1,\n  \"nodes\": [}\n");
    let v2 = write("v2.json", "{\"version\": 2, \"nodes\": [], \"jobs\": []}");
    let typo = write(
        "typo.json",
        &example_text().replacen("\"gpus\"", "\"gpu\"", 1),
    );
    let missing = dir.path().join("missing.json");
    let missing = missing.to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (
            vec![&binpack, "--input", missing],
            vec!["reading ", "missing.json", "No such file"],
        ),
        (
            vec![&binpack, "--input", &malformed],
            vec![
                "malformed.json is not a usable snapshot",
                "line 3 column 13",
            ],
        ),
        (
            vec![&binpack, "--input", &v2],
            vec!["snapshot version 2 is not supported"],
        ),
        (
            vec![&binpack, "--input", &typo],
            vec!["unknown field `gpu`"],
        ),
        (
            vec![&binpack, "--input", &example, "--job", "default/nope"],
            vec![
                "job \"default/nope\" is not in the snapshot",
                "research/dqn-pong",
            ],
        ),
        (
            vec![
                &binpack, "--input", &example, "--call", "optimize", "--job", "a/b",
            ],
            vec!["--job applies to --call allocate"],
        ),
        (
            vec![&mutator, "--input", &example],
            vec!["is a pod mutator, not a scheduling policy"],
        ),
        (
            vec![&example, "--input", &example],
            vec!["not a valid component"],
        ),
    ];
    for (args, needles) in cases {
        let mut full = vec!["plugin", "run"];
        full.extend(&args);
        let out = diorch(&full);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: {}", text(&out.stdout));
        for needle in needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: {needle:?} not in {stderr}"
            );
        }
    }
}

fn example_text() -> String {
    std::fs::read_to_string(repo("examples/snapshot.json")).unwrap()
}

/// Under an address-space limit too small for the Wasm instance pool, the host says so and
/// maps each call's memory instead: the same placements come out.
#[test]
fn without_room_for_the_instance_pool_calls_map_their_own_memory() {
    let args = [
        "plugin".to_string(),
        "run".to_string(),
        plugin("binpack").display().to_string(),
        "--input".to_string(),
        repo("examples/snapshot.json").display().to_string(),
    ];
    let unlimited = diorch(&args.iter().map(String::as_str).collect::<Vec<_>>());
    // 32 GiB: room for one instance's 4 GiB reservation, not for the pool's ~0.5 TiB.
    let limited = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 33554432 && exec \"$0\" \"$@\"")
        .arg(env!("CARGO_BIN_EXE_diorch"))
        .args(&args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    let stderr = text(&limited.stderr);
    assert!(limited.status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot reserve the Wasm instance pool; every call maps its own memory"),
        "{stderr}"
    );
    // Same placements; only the timings differ.
    let placements = |out: &Output| -> Vec<String> {
        text(&out.stdout)
            .lines()
            .filter(|l| !l.contains(" ms") && !l.contains(" µs"))
            .map(String::from)
            .collect()
    };
    assert_eq!(placements(&limited), placements(&unlimited));
    assert!(text(&limited.stdout).contains("job research/ppo-football"));
}

/// `plugin check` on a mutator lists the capabilities its sample change uses and the grants it
/// needs, fails naming field and grant when `--grants` lacks one, and passes with them; the
/// example mutators need none.
#[test]
fn plugin_check_shows_a_mutators_grants_and_refuses_what_is_not_granted() {
    let hostile = plugin("hostile_mutator");
    let hostile = hostile.to_str().unwrap();
    let all = "privileged,host-path,host-network,service-account,extra-container,add-capability";
    let out = diorch(&[
        "plugin",
        "check",
        hostile,
        "--config",
        all,
        "--deadline-ms",
        "5000",
    ]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(!out.status.success(), "{stdout}");
    for needle in [
        "needs:    privileged (set spec.containers[di-container].securityContext.privileged), \
         capabilities (set spec.containers[di-container].securityContext.capabilities.add), \
         hostPath (set spec.volumes[host-root].hostPath), hostNetwork (set spec.hostNetwork), \
         serviceAccountName (set spec.serviceAccountName), containers (set spec.containers[miner])",
        "granted:  none",
        "uses:     volumes (set spec.containers[di-container].volumeMounts[/host])",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
    assert!(
        stderr.contains(
            "the operator would refuse this mutator: it set \
             spec.containers[di-container].securityContext.privileged, which needs the grant \
             privileged in its ConfigMap (data.grants); it also needs capabilities"
        ),
        "{stderr}"
    );

    // One grant short: refused, naming only that one.
    let five = "privileged,capabilities,hostPath,hostNetwork,serviceAccountName";
    let out = diorch(&[
        "plugin",
        "check",
        hostile,
        "--config",
        all,
        "--grants",
        five,
        "--deadline-ms",
        "5000",
    ]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(
            "it set spec.containers[miner], which needs the grant containers in its ConfigMap"
        ) && !stderr.contains("also"),
        "{stderr}"
    );

    // All granted: passes and says what the ConfigMap must grant.
    let six = format!("{five},containers");
    let out = diorch(&[
        "plugin",
        "check",
        hostile,
        "--config",
        all,
        "--grants",
        &six,
        "--deadline-ms",
        "5000",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(
        stdout.contains(
            "ConfigMap: data.grants must include \
             privileged,capabilities,hostPath,hostNetwork,serviceAccountName,containers"
        ),
        "{stdout}"
    );

    // An unknown grant is a usage error naming it.
    let out = diorch(&["plugin", "check", hostile, "--grants", "root"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("unknown grant \"root\""));

    // The example mutators: default capabilities only.
    let placement = plugin("node_placement");
    let out = diorch(&[
        "plugin",
        "check",
        placement.to_str().unwrap(),
        "--config",
        r#"{"*": {"nodeSelector": {"pool": "a"}}}"#,
        "--deadline-ms",
        "5000",
    ]);
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for needle in [
        "uses:     scheduling (set spec.nodeSelector)",
        "needs:    none",
        "ConfigMap: no grants needed",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }

    // `plugin configmap --grants` writes them where the operator reads them.
    let out = diorch(&[
        "plugin",
        "configmap",
        hostile,
        "--name",
        "h",
        "--kind",
        "mutator",
        "--grants",
        "hostNetwork,privileged",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("grants: privileged,hostNetwork"),
        "{}",
        text(&out.stdout)
    );
}

/// Each `diorch plugin` subcommand has its own one-line help, and `plugin run --help` says what
/// it runs (its text was once attached to `snapshot`).
#[test]
fn every_plugin_subcommand_has_its_own_help() {
    let out = diorch(&["plugin", "--help"]);
    assert!(out.status.success());
    let help = text(&out.stdout);
    let line_of = |name: &str| -> String {
        help.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")) || l.trim() == name)
            .unwrap_or_else(|| panic!("no `{name}` line in:\n{help}"))
            .trim_start()
            .trim_start_matches(name)
            .trim()
            .to_string()
    };
    for name in ["check", "configmap", "snapshot", "run"] {
        assert!(
            !line_of(name).is_empty(),
            "`plugin {name}` has no help: {help}"
        );
    }
    assert!(line_of("snapshot").starts_with("Record the cluster"));
    assert!(!line_of("snapshot").contains("Run a policy"));
    assert!(line_of("run").starts_with("Run a policy component on a cluster snapshot"));

    let out = diorch(&["plugin", "run", "--help"]);
    assert!(out.status.success());
    assert!(text(&out.stdout).starts_with("Run a policy component on a cluster snapshot"));
}

/// Linked as `kubectl-dijob` on PATH, the binary is a kubectl plugin: `kubectl dijob …` runs it,
/// and its help names the command the user typed.
#[test]
fn the_binary_runs_as_the_kubectl_dijob_plugin() {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_diorch"),
        dir.path().join("kubectl-dijob"),
    )
    .unwrap();
    let path = std::env::join_paths(std::iter::once(dir.path().to_path_buf()).chain(
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()),
    ))
    .unwrap();
    let out = Command::new("kubectl")
        .args(["dijob", "replicas", "--help"])
        .env("PATH", &path)
        .output()
        .expect("kubectl (the tests drive clusters with it)");
    assert!(out.status.success(), "{out:?}");
    let help = text(&out.stdout);
    assert!(
        help.contains("Usage: kubectl dijob replicas"),
        "help does not name `kubectl dijob`:\n{help}"
    );
    // Run under its own name, it still says `diorch`.
    let help = text(&diorch(&["replicas", "--help"]).stdout);
    assert!(help.contains("Usage: diorch replicas"), "{help}");
}
