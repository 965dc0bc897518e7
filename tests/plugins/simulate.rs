//! The policy simulator: small traces whose outcomes are worked out by hand in each test's
//! comment, run through the operator's own allocator and planner; the command through the real
//! binary (its files byte-identical from run to run); and bad inputs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use diorch::simulate::engine::{self, JobResult, Options, PolicyChoice, Run};
use diorch::simulate::input::{Cluster, Trace};
use diorch::simulate::report::Summary;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// Three nodes of 8 GPUs (`gpu-0`, `gpu-1`, `gpu-2`).
const THREE_NODES: &str = "
nodes:
  - name: gpu
    count: 3
    capacity: {cpu: 32, memory: 128Gi, gpus: 8}
";

/// Instant pod starts and no re-plans, so the times below are exactly the policies' doing.
fn plain() -> Options {
    Options {
        pod_start: Duration::ZERO,
        optimize_period: Duration::ZERO,
        ..Options::default()
    }
}

fn simulate(cluster: &str, trace: &str, policy: &str, options: &Options) -> Run {
    let cluster = Cluster::from_yaml(cluster).unwrap_or_else(|e| panic!("cluster: {e}"));
    let trace = Trace::from_yaml(trace).unwrap_or_else(|e| panic!("trace: {e}"));
    let choice = PolicyChoice::builtin(policy).expect("a built-in policy");
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(engine::run(&cluster, &trace, &choice, options))
        .unwrap()
}

fn job<'a>(run: &'a Run, name: &str) -> &'a JobResult {
    run.jobs.iter().find(|j| j.name == name).unwrap()
}

/// (name, start, end) in seconds, every job.
fn times(run: &Run) -> Vec<(String, f64, f64)> {
    run.jobs
        .iter()
        .map(|j| {
            (
                j.name.clone(),
                j.started_ms.expect("started") as f64 / 1000.0,
                j.ended_ms.expect("ended") as f64 / 1000.0,
            )
        })
        .collect()
}

fn single(name: &str, arrival: u32, gpus: u32, duration: u32) -> String {
    format!(
        "  - {{name: {name}, arrival: {arrival}, duration: {duration}, tasks: [{{type: learner, replicas: 1, requests: {{cpu: 1, memory: 1Gi, gpus: {gpus}}}}}]}}\n"
    )
}

/// Bin-packing keeps a whole node free, spreading does not:
/// a, b, c (4 GPUs each, 1000 s) arrive at 0, 1, 2; d (8 GPUs, 100 s) at 3.
/// - binpack: a and b share gpu-0, c takes gpu-1, d gets gpu-2 at once: d runs 3–103.
/// - spread: a, b, c take a node each (4 GPUs free on every node), so d waits for a's end at
///   1000 and runs 1000–1100. 12 GPUs sit free on partly used nodes from 2 to 1000.
#[test]
fn bin_packing_beats_spreading_when_a_whole_node_is_needed() {
    let trace = format!(
        "jobs:\n{}{}{}{}",
        single("a", 0, 4, 1000),
        single("b", 1, 4, 1000),
        single("c", 2, 4, 1000),
        single("d", 3, 8, 100)
    );
    let binpack = simulate(THREE_NODES, &trace, "binpack", &plain());
    let spread = simulate(THREE_NODES, &trace, "spread", &plain());
    let expect = |v: &[(&str, f64, f64)]| -> Vec<(String, f64, f64)> {
        v.iter().map(|(n, s, e)| (n.to_string(), *s, *e)).collect()
    };
    assert_eq!(
        times(&binpack),
        expect(&[
            ("a", 0.0, 1000.0),
            ("b", 1.0, 1001.0),
            ("c", 2.0, 1002.0),
            ("d", 3.0, 103.0)
        ])
    );
    assert_eq!(
        times(&spread),
        expect(&[
            ("a", 0.0, 1000.0),
            ("b", 1.0, 1001.0),
            ("c", 2.0, 1002.0),
            ("d", 1000.0, 1100.0)
        ])
    );
    let (b, s) = (Summary::of(&binpack), Summary::of(&spread));
    // JCTs: binpack 1000, 1000, 1000, 100; spread 1000, 1000, 1000, 1097.
    assert_eq!(b.jct.mean, 3100.0 / 4.0);
    assert_eq!(s.jct.mean, 4097.0 / 4.0);
    assert_eq!(s.queueing.p99, 997.0);
    assert_eq!(b.makespan, 1002.0);
    assert_eq!(s.makespan, 1100.0);
    // Fragmented GPUs, integrated: binpack has 4 free on gpu-0 during 0–1 and on gpu-1
    // during 2–1002 minus... worked out per interval:
    //   binpack: [0,1) gpu-0 4 free → 4; [1,2) gpu-0 full → 0; [2,1000) gpu-1 4 free → 4
    //   (gpu-2 is full from 3 to 103, then empty: not partly used); [1000,1001) gpu-0 has b
    //   only → 4 + gpu-1 4 → 8; [1001,1002) gpu-1 → 4. Sum 4 + 0 + 998*4 + 8 + 4 = 4008.
    //   spread: [0,1) 4; [1,2) 8; [2,1000) 12; [1000,1001): gpu-0 has d (full), gpu-1 and
    //   gpu-2 4 each → 8; [1001,1002) 4; [1002,1100) 0. Sum 4 + 8 + 11976 + 8 + 4 = 12000.
    assert_eq!(binpack.fragmented_gpu_ms / 1000.0, 4008.0);
    assert_eq!(spread.fragmented_gpu_ms / 1000.0, 12000.0);
    assert!(b.fragmented_gpus < s.fragmented_gpus);
}

/// Spreading leaves room a many-replica job can use, bin-packing does not:
/// x and y (2 GPUs each, 1000 s) arrive at 0 and 1; z (3 replicas of 6 GPUs, 100 s) at 2.
/// - binpack: x and y share gpu-0 (4 free there), so only gpu-1 and gpu-2 can take a 6-GPU
///   replica: z waits for x's end at 1000 (6 free on gpu-0 beside y): z runs 1000–1100.
/// - spread: x on gpu-0, y on gpu-1, 6 free on each and 8 on gpu-2: z runs 2–102.
#[test]
fn spreading_beats_bin_packing_when_every_node_must_take_a_replica() {
    let trace = format!(
        "jobs:\n{}{}  - {{name: z, arrival: 2, duration: 100, tasks: [{{type: learner, replicas: 3, requests: {{cpu: 1, memory: 1Gi, gpus: 6}}}}]}}\n",
        single("x", 0, 2, 1000),
        single("y", 1, 2, 1000),
    );
    let binpack = simulate(THREE_NODES, &trace, "binpack", &plain());
    let spread = simulate(THREE_NODES, &trace, "spread", &plain());
    assert_eq!(
        job(&binpack, "z").started_ms,
        Some(1_000_000),
        "{:?}",
        binpack.jobs
    );
    assert_eq!(job(&binpack, "z").ended_ms, Some(1_100_000));
    assert_eq!(job(&spread, "z").started_ms, Some(2_000));
    assert_eq!(job(&spread, "z").ended_ms, Some(102_000));
    let (b, s) = (Summary::of(&binpack), Summary::of(&spread));
    // JCTs: binpack 1000, 1000, 1098; spread 1000, 1000, 100.
    assert_eq!(b.jct.mean, 3098.0 / 3.0);
    assert_eq!(s.jct.mean, 2100.0 / 3.0);
    assert!(s.jct.mean < b.jct.mean);
}

/// A job larger than the cluster never starts; the run ends instead of waiting forever, and
/// says so. Pod start time counts in the JCT: 30 s here.
#[test]
fn a_job_that_never_fits_is_reported_unfinished_and_the_run_ends() {
    let trace = format!("jobs:\n{}{}", single("ok", 0, 8, 60), {
        "  - {name: huge, arrival: 0, duration: 60, tasks: [{type: learner, replicas: 4, requests: {gpus: 8}}]}\n"
    });
    let options = Options {
        pod_start: Duration::from_secs(30),
        ..Options::default()
    };
    let run = simulate(THREE_NODES, &trace, "binpack", &options);
    assert_eq!(job(&run, "ok").ended_ms, Some(90_000));
    assert_eq!(job(&run, "huge").started_ms, None);
    assert_eq!(job(&run, "huge").phase, "");
    let s = Summary::of(&run);
    assert_eq!((s.finished, s.jobs), (1, 2));
}

fn diorch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_diorch"))
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// `diorch simulate` through the binary with `policies` (and `extra` options); asserts it
/// succeeded and returns its standard output (the table).
fn simulate_command(
    cluster: &Path,
    trace: &Path,
    policies: &[&str],
    out: &Path,
    extra: &[&str],
) -> String {
    let mut args = vec![
        "simulate",
        "--cluster",
        cluster.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    for p in policies {
        args.extend(["--policy", p]);
    }
    args.extend(extra);
    let run = diorch(&args);
    assert!(run.status.success(), "{}", text(&run.stderr));
    text(&run.stdout)
}

/// The command compares policies side by side and writes the same files twice over.
#[test]
fn the_command_prints_a_comparison_and_its_files_are_identical_from_run_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = dir.path().join("cluster.yaml");
    let trace = dir.path().join("trace.yaml");
    std::fs::write(&cluster, THREE_NODES).unwrap();
    let mut jobs = String::from("jobs:\n");
    for i in 0..24 {
        jobs.push_str(&single(
            &format!("j{i:02}"),
            i * 7,
            1 + i % 8,
            200 + 13 * (i % 5),
        ));
    }
    std::fs::write(&trace, jobs).unwrap();
    let mut outputs = Vec::new();
    for round in 0..2 {
        let out = dir.path().join(format!("out{round}"));
        let table = simulate_command(
            &cluster,
            &trace,
            &["builtin:binpack", "builtin:spread"],
            &out,
            &[],
        );
        let header = table.lines().next().unwrap();
        assert!(
            header.contains("builtin:binpack") && header.contains("builtin:spread"),
            "{table}"
        );
        assert!(
            table.contains("jobs finished") && table.contains("24/24"),
            "{table}"
        );
        let files: Vec<String> = ["summary.csv", "jobs.csv", "timeline.csv"]
            .iter()
            .map(|f| std::fs::read_to_string(out.join(f)).unwrap())
            .collect();
        assert_eq!(files[1].lines().count(), 1 + 2 * 24);
        assert!(out.join("calls.csv").exists());
        outputs.push(files);
    }
    assert_eq!(outputs[0], outputs[1]);
}

#[test]
fn bad_inputs_are_refused_with_the_entry_named() {
    let cases = [
        (
            "jobs: [{name: a, arrival: -1, duration: 1, tasks: [{type: learner, replicas: 1}]}]",
            "arrival",
        ),
        (
            "jobs: [{name: a, arrival: 0, tasks: [{type: learner, replicas: 1}]}]",
            "give duration or work",
        ),
        (
            "jobs: [{name: a, arrival: 0, work: 5, tasks: [{type: learner, replicas: 1}]}]",
            "throughput",
        ),
        (
            "jobs: [{name: a, arrival: 0, duration: .inf, tasks: [{type: learner, replicas: 1}]}]",
            "duration",
        ),
        (
            "jobs: [{name: a, arrival: 0, duration: 1, tasks: [{type: learner, replicas: 1, requests: {cpu: lots}}]}]",
            "not a quantity",
        ),
        (
            "jobs: [{name: a, arrival: 0, duration: 1, tasks: [{type: learner, replicas: 100000}]}]",
            "job \"a\"",
        ),
        (
            "jobs: [{name: a, arrival: 0, duration: 1, tasks: [{type: learner, replicas: 1}]}, {name: a, arrival: 1, duration: 1, tasks: [{type: learner, replicas: 1}]}]",
            "named twice",
        ),
        (
            "jobs: [{name: a, arrival: 0, duration: 1, colour: red, tasks: []}]",
            "colour",
        ),
    ];
    for (trace, needle) in cases {
        let err = Trace::from_yaml(trace).expect_err(trace).to_string();
        assert!(err.contains(needle), "{trace}: {err}");
    }
    let clusters = [
        ("nodes: []", "no nodes"),
        ("nodes: [{name: n, count: 1000001, capacity: {}}]", "count"),
        (
            "nodes: [{name: N_1, capacity: {}}]",
            "not a valid node name",
        ),
        ("nodes: [{name: n, capacity: {gpus: -1}}]", "negative"),
        (
            "nodes: [{name: n, capacity: {}, taints: [{key: k, effect: Sometimes}]}]",
            "taint effect",
        ),
        (
            "nodes: [{name: n, capacity: {}}, {name: n, capacity: {}}]",
            "named twice",
        ),
    ];
    let cluster = Cluster::from_yaml(THREE_NODES).unwrap();
    let trace = Trace::from_yaml(&format!(
        "jobs:\n{}nodeEvents: [{{at: 5, node: gpu-9, ready: false}}]\n",
        single("a", 0, 1, 10)
    ))
    .unwrap();
    let err = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(engine::run(
            &cluster,
            &trace,
            &PolicyChoice::builtin("binpack").unwrap(),
            &plain(),
        ))
        .expect_err("an unknown node");
    assert!(err.to_string().contains("gpu-9"), "{err}");
    for (cluster, needle) in clusters {
        let err = Cluster::from_yaml(cluster).expect_err(cluster).to_string();
        assert!(err.contains(needle), "{cluster}: {err}");
    }
    // Through the binary: a clear message and a failing exit, nothing written.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let run = diorch(&[
        "simulate",
        "--cluster",
        repo("no-such-file.yaml").to_str().unwrap(),
        "--trace",
        "x",
        "--policy",
        "builtin:binpack",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(!run.status.success());
    assert!(
        text(&run.stderr).contains("no-such-file.yaml"),
        "{}",
        text(&run.stderr)
    );
    assert!(!out.exists());
    let run = diorch(&[
        "simulate",
        "--cluster",
        "x",
        "--trace",
        "x",
        "--policy",
        "builtin:fifo",
        "--out",
        "x",
    ]);
    assert!(!run.status.success());
    for (flag, value) in [
        ("--deadline-ms", "600000"),
        ("--deadline-ms", "0"),
        ("--memory-mib", "1048576"),
        ("--pod-start", "99999999999"),
        ("--preemption-min-run-time", "99999999999"),
        ("--preemption-cooldown", "99999999999"),
        ("--preemption", "sometimes"),
    ] {
        let bad = diorch(&[
            "simulate",
            "--cluster",
            "x",
            "--trace",
            "x",
            "--policy",
            "builtin:binpack",
            "--out",
            "x",
            flag,
            value,
        ]);
        assert!(!bad.status.success(), "{flag} {value}");
        assert!(
            text(&bad.stderr).contains(flag),
            "{flag}: {}",
            text(&bad.stderr)
        );
    }
    assert!(
        text(&run.stderr).contains("builtin:binpack, builtin:spread"),
        "{}",
        text(&run.stderr)
    );
}

/// The shipped urgent trace under the three preemption modes: one run per mode, labelled
/// `<policy>/<mode>`, each row of summary.csv with its mode and the trace's urgent jobs; with
/// preemption off nothing is shrunk or evicted and no work is lost.
#[test]
fn the_command_compares_preemption_modes_on_the_urgent_trace() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let table = simulate_command(
        &repo("examples/simulator/cluster.yaml"),
        &repo("examples/simulator/urgent.yaml"),
        &["builtin:binpack"],
        &out,
        &[
            "--preemption",
            "off",
            "--preemption",
            "evict",
            "--preemption",
            "shrink",
        ],
    );
    let header = table.lines().next().unwrap();
    for mode in ["off", "evict", "shrink"] {
        assert!(
            header.contains(&format!("builtin:binpack/{mode}")),
            "{table}"
        );
    }
    assert!(table.contains("urgent queueing p95 (s)"), "{table}");
    let summary = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let mut lines = summary.lines();
    let columns: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 3);
    let at = |row: &[&str], name: &str| {
        row[columns.iter().position(|c| *c == name).unwrap()].to_string()
    };
    let urgent = std::fs::read_to_string(repo("examples/simulator/urgent.yaml"))
        .unwrap()
        .matches("priority: high")
        .count();
    assert!(urgent > 0);
    for (row, mode) in rows.iter().zip(["off", "evict", "shrink"]) {
        assert_eq!(at(row, "policy"), format!("builtin:binpack/{mode}"));
        assert_eq!(at(row, "preemption"), mode);
        assert_eq!(at(row, "urgent_jobs"), urgent.to_string());
        assert_eq!(
            at(row, "finished"),
            at(row, "jobs"),
            "{mode}: every job ends"
        );
    }
    assert_eq!(
        (
            at(&rows[0], "shrinks"),
            at(&rows[0], "evictions"),
            at(&rows[0], "work_lost_gpu_s")
        ),
        ("0".into(), "0".into(), "0.000".into())
    );
}

/// The page that checks the report in the browser: loads it in a frame and, for every chart,
/// writes its drawn size and how many of its lines have a length and a width on screen.
const CHECK_PAGE: &str = r#"<!DOCTYPE html><html><body><iframe id="r" src="report.html" width="900" height="3000"></iframe>
<pre id="out">pending</pre>
<script>
document.getElementById('r').addEventListener('load', () => {
  const doc = document.getElementById('r').contentDocument;
  const lines = [...doc.querySelectorAll('figure')].map(f => {
    const svg = f.querySelector('svg');
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const paths = [...f.querySelectorAll('path.series')];
    const drawn = paths.filter(p => p.getTotalLength() > 0 && p.getBBox().width > 0).length;
    return f.id + ' ' + Math.round(box.width) + 'x' + Math.round(box.height) + ' ' + drawn + '/' + paths.length;
  });
  document.getElementById('out').textContent = lines.join('\n');
});
</script></body></html>"#;

fn chromium() -> String {
    std::env::var("DIORCH_CHROMIUM").unwrap_or_else(|_| "chromium".into())
}

/// The HTML report opened from disk in headless Chromium: every chart is drawn with a line per
/// policy. Leaves a screenshot in target/simulate-report.png to look at.
#[test]
#[ignore = "needs Chromium (Debian's chromium); scripts/test.sh installs it and runs this"]
fn the_report_renders_every_chart_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    simulate_command(
        &repo("examples/simulator/cluster.yaml"),
        &repo("examples/simulator/burst.yaml"),
        &["builtin:binpack", "builtin:spread"],
        &out,
        &[],
    );
    std::fs::write(out.join("check.html"), CHECK_PAGE).unwrap();
    let url = format!("file://{}", out.join("check.html").display());
    let dom = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--allow-file-access-from-files",
            "--virtual-time-budget=10000",
            "--dump-dom",
            &url,
        ])
        .output()
        .expect("chromium runs (set DIORCH_CHROMIUM to its path)");
    let dom = text(&dom.stdout);
    let result = dom
        .split("<pre id=\"out\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_default();
    let charts: Vec<&str> = result.lines().collect();
    assert_eq!(
        charts,
        [
            "utilisation 720x260 2/2",
            "queue 720x260 2/2",
            "fragmentation 720x260 2/2",
            "jct 720x260 2/2"
        ],
        "{dom}"
    );
    let shot = repo("target/simulate-report.png");
    let status = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=800,1700",
            &format!("--screenshot={}", shot.display()),
            &format!("file://{}", out.join("report.html").display()),
        ])
        .output()
        .unwrap();
    assert!(status.status.success() && shot.exists());
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

/// The Wasm build of bin-pack, run by the operator's plugin host, places every job exactly as
/// the built-in bin-pack (the same policy code): the files differ only in the policy's name.
#[test]
fn a_wasm_policy_runs_through_the_plugin_host_and_matches_its_native_build() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let wasm = plugin("binpack");
    simulate_command(
        &repo("examples/simulator/cluster.yaml"),
        &repo("examples/simulator/steady.yaml"),
        &[wasm.to_str().unwrap(), "builtin:binpack"],
        &out,
        // Generous: this test is about placements, not about a loaded machine's call times.
        &["--deadline-ms", "5000"],
    );
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let (mut wasm_rows, mut native_rows) = (Vec::new(), Vec::new());
    for line in jobs.lines().skip(1) {
        let (policy, rest) = line.split_once(',').unwrap();
        match policy {
            "binpack.wasm" => wasm_rows.push(rest),
            "builtin:binpack" => native_rows.push(rest),
            other => panic!("unexpected policy {other}"),
        }
    }
    assert_eq!(wasm_rows.len(), 300);
    assert_eq!(wasm_rows, native_rows);
    let calls = std::fs::read_to_string(out.join("calls.csv")).unwrap();
    assert!(calls.contains("binpack.wasm,allocate,3"), "{calls}");
}

use crate::registry;

/// `--policy` takes an OCI reference: the bin-pack component pushed to a real registry and
/// pulled by digest places every job as the built-in bin-pack does.
#[test]
fn a_policy_named_by_oci_reference_is_pulled_and_simulated() {
    if !registry::registry_available("a_policy_named_by_oci_reference_is_pulled_and_simulated") {
        return;
    }
    let registry = registry::Registry::start();
    let wasm = plugin("binpack");
    let pushed = diorch(&[
        "plugin",
        "push",
        wasm.to_str().unwrap(),
        &format!("{}/policies/binpack:v1", registry.host),
        "--insecure-registry",
        &registry.host,
    ]);
    assert!(pushed.status.success(), "{}", text(&pushed.stderr));
    let pinned = text(&pushed.stdout).trim().to_string();
    assert!(pinned.contains("@sha256:"), "{pinned}");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    simulate_command(
        &repo("examples/simulator/cluster.yaml"),
        &repo("examples/simulator/steady.yaml"),
        &[&pinned, "builtin:binpack"],
        &out,
        &[
            "--deadline-ms",
            "5000",
            "--insecure-registry",
            &registry.host,
        ],
    );
    let jobs = std::fs::read_to_string(out.join("jobs.csv")).unwrap();
    let (mut pulled, mut native) = (Vec::new(), Vec::new());
    for line in jobs.lines().skip(1) {
        let (policy, rest) = line.split_once(',').unwrap();
        match policy {
            "builtin:binpack" => native.push(rest),
            other => {
                assert!(other.starts_with("binpack:v1@sha256:"), "{other}");
                pulled.push(rest);
            }
        }
    }
    assert_eq!(pulled.len(), 300);
    assert_eq!(pulled, native);
}

/// Goodput grows the collectors of jobs whose throughput still rises, so on the elastic trace
/// it resizes jobs and finishes them sooner on average than bin-pack, which never resizes.
#[test]
fn goodput_resizes_elastic_jobs_and_shortens_their_completion() {
    let cluster = std::fs::read_to_string(repo("examples/simulator/cluster.yaml")).unwrap();
    let trace = std::fs::read_to_string(repo("examples/simulator/elastic.yaml")).unwrap();
    let binpack = Summary::of(&simulate(&cluster, &trace, "binpack", &Options::default()));
    let goodput = Summary::of(&simulate(&cluster, &trace, "goodput", &Options::default()));
    assert_eq!(binpack.resizes, 0);
    assert!(goodput.resizes > 0);
    assert_eq!(goodput.finished, 200);
    assert!(
        goodput.jct.mean < binpack.jct.mean,
        "{goodput:?} vs {binpack:?}"
    );
}

/// A node failure: job a (8 GPUs, 1000 s) runs on gpu-0, which goes down at 100 and comes back
/// at 5000. Its pod is evicted and made again on the same allocation, where it cannot start.
/// - With re-plans, the operator's node watch asks for one a second later: at 101 a moves to
///   an empty node and does its remaining 900 s: it ends at 1001.
/// - Without re-plans nothing moves it: it waits for gpu-0 and ends at 5000 + 900 = 5900.
///
/// Work done before the failure is kept (DI-engine resumes from its checkpoint).
#[test]
fn a_job_on_a_failed_node_is_moved_by_the_re_plan_or_waits_for_the_node() {
    let trace = format!(
        "jobs:\n{}nodeEvents:\n  - {{at: 100, node: gpu-0, ready: false}}\n  - {{at: 5000, node: gpu-0, ready: true}}\n",
        single("a", 0, 8, 1000)
    );
    let replans = Options {
        pod_start: Duration::ZERO,
        ..Options::default()
    };
    let run = simulate(THREE_NODES, &trace, "binpack", &replans);
    let a = job(&run, "a");
    assert_eq!((a.ended_ms, a.moves), (Some(1_001_000), 1), "{a:?}");
    let run = simulate(THREE_NODES, &trace, "binpack", &plain());
    let a = job(&run, "a");
    assert_eq!((a.ended_ms, a.moves), (Some(5_900_000), 0), "{a:?}");
    // While gpu-0 is down the cluster has 16 GPUs: none used while a waits.
    let during = run
        .timeline
        .iter()
        .find(|s| s.at_ms == 3_000_000)
        .expect("a sample at 3000 s");
    assert_eq!((during.total_gpus, during.used_gpus), (16, 0));
}

mod no_overcommit {
    use super::*;
    use proptest::prelude::*;

    fn cluster() -> impl Strategy<Value = String> {
        prop::collection::vec((1u32..=8, 2u32..=32), 1..=4).prop_map(|nodes| {
            let mut text = String::from("nodes:\n");
            for (i, (gpus, cpu)) in nodes.iter().enumerate() {
                text.push_str(&format!(
                    "  - {{name: n{i}, capacity: {{cpu: {cpu}, memory: 64Gi, gpus: {gpus}}}}}\n"
                ));
            }
            text
        })
    }

    /// Up to a dozen jobs: a learner, sometimes collectors with a throughput profile.
    fn trace() -> impl Strategy<Value = String> {
        let job = (
            0u32..600,
            1u32..=3,
            0u32..=4,
            1u32..=8,
            10u32..900,
            0u32..=3,
            // A one-pod job that is not preemptible (kube-scheduler places it).
            prop::bool::weighted(0.2),
        );
        (prop::collection::vec(job, 1..=12), prop::option::of((0u32..900, 0usize..4, 1u32..900)))
            .prop_map(|(jobs, failure)| {
                let mut text = String::from("jobs:\n");
                for (i, (arrival, replicas, gpus, cpu, duration, collectors, fixed)) in jobs.iter().enumerate() {
                    let (replicas, collectors) = if *fixed { (1, 0) } else { (*replicas, *collectors) };
                    text.push_str(&format!(
                        "  - name: j{i}\n    arrival: {arrival}\n    preemptible: {}\n    tasks:\n      - {{type: learner, replicas: {replicas}, requests: {{cpu: {cpu}, memory: 1Gi, gpus: {gpus}}}}}\n",
                        !fixed
                    ));
                    if collectors > 0 {
                        text.push_str(&format!(
                            "      - {{type: collector, replicas: {collectors}, minReplicas: 1, maxReplicas: 6, requests: {{cpu: 1, memory: 1Gi}}}}\n    throughput: {{1: 10, 2: 18, 4: 30, 6: 34}}\n    work: {}\n",
                            duration * 10
                        ));
                    } else {
                        text.push_str(&format!("    duration: {duration}\n"));
                    }
                }
                if let Some((at, node, back)) = failure {
                    text.push_str(&format!(
                        "nodeEvents:\n  - {{at: {at}, node: n{node}, ready: false}}\n  - {{at: {}, node: n{node}, ready: true}}\n",
                        at + back
                    ));
                }
                text
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Whatever the cluster, the jobs and the policy, no simulated node is ever asked for
        /// more than it has, and every job that ran for its work ended no sooner than its work
        /// allows.
        #[test]
        fn no_node_is_ever_over_committed(cluster in cluster(), trace in trace(), policy in 0usize..3) {
            // A node event may name a node the cluster does not have: drop it then.
            let nodes = cluster.matches("- {name:").count();
            let trace = match trace.split_once("nodeEvents:") {
                Some((jobs, events)) if !(0..nodes).any(|n| events.contains(&format!("node: n{n},"))) => jobs.to_string(),
                _ => trace,
            };
            let policy = ["binpack", "spread", "goodput"][policy];
            let options = Options {
                pod_start: Duration::from_secs(5),
                optimize_period: Duration::from_secs(30),
                min_reschedule_interval: Duration::from_secs(60),
                ..Options::default()
            };
            let run = simulate(&cluster, &trace, policy, &options);
            prop_assert_eq!(run.overcommits, 0);
            let parsed = Trace::from_yaml(&trace).unwrap();
            // Liveness: a job that finishes when it runs alone finishes among the others too
            // (the others end, and every node is back by the end of the trace).
            for j in &run.jobs {
                if j.ended_ms.is_none() {
                    let alone = trace
                        .split("  - name: ")
                        .find(|part| part.starts_with(&format!("{}\n", j.name)))
                        .unwrap();
                    let alone = format!("jobs:\n  - name: {}", alone.split("nodeEvents:").next().unwrap());
                    let solo = simulate(&cluster, &alone, policy, &options);
                    prop_assert!(solo.jobs[0].ended_ms.is_none(), "{} finishes alone but not among the others", j.name);
                }
            }
            for (j, t) in run.jobs.iter().zip(&parsed.jobs) {
                if let (Some(start), Some(end)) = (j.started_ms, j.ended_ms) {
                    prop_assert!(start >= j.arrival_ms && end >= start);
                    if t.collector.is_none() {
                        // A plain job runs its duration at least (more when moved or evicted).
                        prop_assert!(end - start >= (t.work * 1000.0) as u64 - 1, "{:?}", j);
                    }
                }
            }
        }
    }
}

/// A CSV trace is the same trace as its YAML form: same jobs, same outcome.
#[test]
fn a_csv_trace_runs_as_its_yaml_form() {
    let yaml = "jobs:
  - {name: a, arrival: 0, priority: high, duration: 100, tasks: [{type: learner, replicas: 1, requests: {cpu: 1, memory: 1Gi, gpus: 4}}]}
  - name: b
    arrival: 5
    tasks:
      - {type: learner, replicas: 1, requests: {cpu: 1, memory: 1Gi, gpus: 8}}
      - {type: collector, replicas: 2, minReplicas: 1, maxReplicas: 4, requests: {cpu: 2, memory: 2Gi}}
    throughput: {1: 10, 2: 18, 4: 30}
    work: 3600
";
    let csv = "job,arrival,priority,preemptible,duration,work,throughput,task,type,replicas,min_replicas,max_replicas,cpu,memory,gpus
a,0,high,,100,,,,learner,1,,,1,1Gi,4
b,5,,true,,3600,1:10;2:18;4:30,,learner,1,,,1,1Gi,8
b,,,,,,,,collector,2,1,4,2,2Gi,
";
    let from_csv = Trace::from_csv(csv).unwrap_or_else(|e| panic!("{e}"));
    let from_yaml = Trace::from_yaml(yaml).unwrap();
    assert_eq!(
        format!(
            "{:?}",
            from_csv.jobs.iter().map(|j| &j.dijob).collect::<Vec<_>>()
        ),
        format!(
            "{:?}",
            from_yaml.jobs.iter().map(|j| &j.dijob).collect::<Vec<_>>()
        )
    );
    assert_eq!(from_csv.jobs[1].work, from_yaml.jobs[1].work);
    assert_eq!(from_csv.jobs[1].collector, Some(1));
    for (bad, needle) in [
        ("job,arrival,colour\n", "unknown column"),
        ("job,arrival,type\na,0,learner\n", "replicas"),
        (
            "job,arrival,type,replicas\na,0,learner\n",
            "3 cells for 4 columns",
        ),
        (
            "job,arrival,type,replicas,duration\na,soon,learner,1,5\n",
            "not a number",
        ),
        (
            "job,arrival,type,replicas,duration\n\"a\",0,learner,1,5\n",
            "quoted",
        ),
        (
            "job,arrival,type,replicas,work,throughput\na,0,learner,1,5,2=3\n",
            "count:rate",
        ),
        (
            "job,arrival,type,replicas,duration,priority\na,0,learner,1,5,urgent\n",
            "priority",
        ),
    ] {
        let err = Trace::from_csv(bad).expect_err(bad).to_string();
        assert!(err.contains(needle), "{bad}: {err}");
    }
}

/// A job that is not preemptible is placed by kube-scheduler, pod by pod, on the least allocated
/// node with room; the policy places the others around it:
/// n (2 pods of 4 GPUs, 500 s) at 0: its first pod goes to gpu-0 (all equal, first by name),
/// its second to gpu-1 (gpu-0 has less CPU left). p (8 GPUs, 100 s) at 1 gets the only whole
/// node, gpu-2: 1–101. q (8 GPUs, 100 s) at 2 waits for p to end, and gets gpu-2: 101–201
/// (gpu-0 and gpu-1 keep 4 GPUs of n each until 500).
#[test]
fn jobs_that_are_not_preemptible_are_placed_by_the_scheduler_model() {
    let trace = format!(
        "jobs:\n  - {{name: n, arrival: 0, duration: 500, preemptible: false, tasks: [{{type: learner, replicas: 2, requests: {{cpu: 1, memory: 1Gi, gpus: 4}}}}]}}\n{}{}",
        single("p", 1, 8, 100),
        single("q", 2, 8, 100)
    );
    let run = simulate(THREE_NODES, &trace, "binpack", &plain());
    let expect = |v: &[(&str, f64, f64)]| -> Vec<(String, f64, f64)> {
        v.iter().map(|(n, s, e)| (n.to_string(), *s, *e)).collect()
    };
    assert_eq!(
        times(&run),
        expect(&[("n", 0.0, 500.0), ("p", 1.0, 101.0), ("q", 101.0, 201.0)])
    );
    assert_eq!(run.overcommits, 0);
    // n's pods hold 4 GPUs on gpu-0 and on gpu-1 while q runs: 8 fragmented GPUs from 1 to 500
    // (gpu-2 is full from 1 to 201, then empty).
    let at = |t: u64| {
        run.timeline
            .iter()
            .find(|s| s.at_ms == t)
            .unwrap()
            .fragmented_gpus
    };
    assert_eq!(at(120_000), 8);
}

/// A dozen jobs, bin-packed on three 8-GPU nodes, where a big job is passed by smaller ones:
/// a0..a5 (4 GPUs, 100 s) arrive at 0..5 and fill the nodes two by two (gpu-0: a0, a1; gpu-1:
/// a2, a3; gpu-2: a4, a5). b (8 GPUs, 50 s) arrives at 6, c1..c5 (4 GPUs, 100 s) at 7..11.
/// Each a's end frees half a node: b, first in line, needs a whole one, so the c's take each
/// half as it frees (c1 at 100 beside a1 on gpu-0, c2 at 101 where a1 was, c3 at 102, c4 at
/// 103, c5 at 104 beside a5). gpu-0 is whole again when c2 ends at 201: b runs 201–251.
/// JCTs: six a's 100, b 245, five c's 193: mean 1810 / 12.
#[test]
fn a_dozen_jobs_where_smaller_ones_pass_a_big_one() {
    let mut trace = String::from("jobs:\n");
    for i in 0..6 {
        trace.push_str(&single(&format!("a{i}"), i, 4, 100));
    }
    trace.push_str(&single("b", 6, 8, 50));
    for i in 1..=5 {
        trace.push_str(&single(&format!("c{i}"), 6 + i, 4, 100));
    }
    let run = simulate(THREE_NODES, &trace, "binpack", &plain());
    let mut expected: Vec<(String, f64, f64)> = (0..6)
        .map(|i| (format!("a{i}"), f64::from(i), f64::from(100 + i)))
        .collect();
    expected.push(("b".into(), 201.0, 251.0));
    expected.extend((1..=5).map(|i| (format!("c{i}"), f64::from(99 + i), f64::from(199 + i))));
    assert_eq!(times(&run), expected);
    let s = Summary::of(&run);
    assert_eq!(s.jct.mean, 1810.0 / 12.0);
    assert_eq!(s.makespan, 251.0);
    assert_eq!(s.queueing.p99, 195.0);
}
