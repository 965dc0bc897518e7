//! The monitoring component (`deploy/components/monitoring`, installed by
//! `deploy/overlays/monitoring`): its ServiceMonitor reaches the metrics Service with a token
//! the install lets it use, and every alert rule and dashboard panel queries only metrics and
//! labels that a running operator exports. The operator runs on the sandbox and is driven
//! through what the rules watch (a refusing mutator, a trapping policy, a rejected upload,
//! webhook reviews, replica API calls), so every queried family has series to check labels on.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};

use common::controller::{self as scenario, OperatorProcess};
use common::ha::{free_local_addr, scrape_as, wait_until};
use common::{Kubectl, SandboxProcess, allocation, webhook as admission};
use promql_parser::parser::{self, Expr, LabelModifier};
use serde_json::Value;

/// Labels Prometheus adds to every scraped series (target labels), and its own `up`.
const TARGET_LABELS: &[&str] = &[
    "job",
    "instance",
    "namespace",
    "pod",
    "service",
    "endpoint",
    "container",
];
const SYNTHETIC: &[&str] = &["up"];

fn render_monitoring() -> Vec<Value> {
    let out = std::process::Command::new("kubectl")
        .arg("kustomize")
        .arg(common::repo_root().join("deploy/overlays/monitoring"))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).expect("rendered YAML")
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name}"))
}

/// The dashboard, from its generated ConfigMap.
fn dashboard(docs: &[Value]) -> Value {
    let cm = find(docs, "ConfigMap", "diorch-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    let text = cm["data"]["diorch.json"].as_str().expect("diorch.json");
    serde_json::from_str(text).expect("dashboard JSON")
}

#[test]
fn the_service_monitor_scrapes_the_metrics_port_with_a_token_the_install_accepts() {
    let docs = render_monitoring();
    let monitor = find(&docs, "ServiceMonitor", "diorch");
    let spec = &monitor["spec"];
    // It selects the metrics Service and only it (the three Services share the name label).
    let selected: Vec<&Value> = docs
        .iter()
        .filter(|d| d["kind"] == "Service")
        .filter(|d| {
            spec["selector"]["matchLabels"]
                .as_object()
                .expect("matchLabels")
                .iter()
                .all(|(k, v)| &d["metadata"]["labels"][k] == v)
        })
        .collect();
    assert_eq!(selected.len(), 1, "{selected:?}");
    let service = selected[0];
    assert_eq!(service["metadata"]["name"], "diorch-metrics");
    let namespaces = spec["namespaceSelector"]["matchNames"]
        .as_array()
        .expect("matchNames");
    assert!(namespaces.contains(&service["metadata"]["namespace"]));
    let endpoint = &spec["endpoints"][0];
    assert!(
        service["spec"]["ports"]
            .as_array()
            .expect("ports")
            .iter()
            .any(|p| p["name"] == endpoint["port"]),
        "{endpoint}"
    );
    assert_eq!(endpoint["path"], "/metrics");
    // The Deployment's container serves that port, and the operator checks the scraper's
    // token: the binding gives the scraper the reader role, which allows get on /metrics.
    let binding = find(&docs, "ClusterRoleBinding", "diorch-metrics-reader");
    let role = find(&docs, "ClusterRole", "diorch-metrics-reader");
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    assert!(role["rules"].as_array().expect("rules").iter().any(|r| {
        r["nonResourceURLs"] == serde_json::json!(["/metrics"])
            && r["verbs"] == serde_json::json!(["get"])
    }));
    assert!(
        endpoint["bearerTokenFile"]
            .as_str()
            .is_some_and(|f| f.ends_with("serviceaccount/token"))
    );
    // The scraper's namespace is the one the NetworkPolicy lets reach the metrics port.
    assert_eq!(binding["subjects"][0]["namespace"], "monitoring");
    // The job label the rules filter on is what jobLabel makes of the Service's labels.
    assert_eq!(
        service["metadata"]["labels"][spec["jobLabel"].as_str().expect("jobLabel")],
        "diorch"
    );
    let rules = find(&docs, "PrometheusRule", "diorch");
    let alerts = alerts(rules);
    let names: BTreeSet<&str> = alerts.iter().map(|a| a.name.as_str()).collect();
    for wanted in [
        "DiorchLeaderAbsent",
        "DiorchReconcileErrors",
        "DiorchPluginUploadRejected",
        "DiorchPolicyFallbacks",
        "DiorchWebhookErrors",
        "DiorchWebhookSlow",
        "DiorchJobStuck",
    ] {
        assert!(names.contains(wanted), "{wanted} missing: {names:?}");
    }
    for alert in &alerts {
        assert!(
            ["critical", "warning", "info"].contains(&alert.severity.as_str()),
            "{}: severity {:?}",
            alert.name,
            alert.severity
        );
    }
    let panels = panels(&dashboard(&docs));
    assert!(panels.len() >= 20, "{}", panels.len());
}

struct Alert {
    name: String,
    expr: String,
    severity: String,
    /// The annotations' text, where `{{ $labels.x }}` must name an output label.
    annotations: String,
}

fn alerts(rule: &Value) -> Vec<Alert> {
    rule["spec"]["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules"))
        .map(|r| Alert {
            name: r["alert"].as_str().expect("alert rules only").to_string(),
            expr: r["expr"].as_str().expect("expr").to_string(),
            severity: r["labels"]["severity"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            annotations: r["annotations"].to_string(),
        })
        .collect()
}

/// (panel title, expression, legend format) of every target of every panel.
fn panels(dashboard: &Value) -> Vec<(String, String, String)> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|p| p["type"] != "row")
        .flat_map(|p| {
            let title = p["title"].as_str().unwrap_or_default().to_string();
            p["targets"]
                .as_array()
                .expect("targets")
                .iter()
                .map(move |t| {
                    (
                        title.clone(),
                        t["expr"].as_str().expect("expr").to_string(),
                        t["legendFormat"].as_str().unwrap_or_default().to_string(),
                    )
                })
        })
        .collect()
}

/// Grafana's variables, replaced by what Grafana would put there.
fn grafana_to_promql(expr: &str) -> String {
    expr.replace("$__rate_interval", "5m")
        .replace("$__interval", "1m")
        .replace("$job", "diorch")
}

/// Label names per sample name in a scrape (`# ` lines skipped). Values are quoted and may
/// hold `{`, `}`, `,` or escaped quotes (routes such as `/v2alpha1/job/{job}/replicas`).
fn exported(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let Some(end) = line.find(['{', ' ']) else {
            continue;
        };
        let labels = out.entry(line[..end].to_string()).or_default();
        let Some(mut rest) = line[end..].strip_prefix('{') else {
            continue;
        };
        // name="value", ... }
        while let Some((name, after)) = rest.split_once("=\"") {
            labels.insert(name.trim_start_matches(',').trim().to_string());
            let mut chars = after.char_indices();
            let mut close = after.len();
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => {
                        chars.next();
                    }
                    '"' => {
                        close = i;
                        break;
                    }
                    _ => {}
                }
            }
            rest = &after[(close + 1).min(after.len())..];
            if rest.starts_with('}') {
                break;
            }
        }
    }
    out
}

/// Checks one expression against the scrape: every selected metric is exported, every label
/// it matches on or groups by exists there; returns the labels of the expression's result.
struct Checker<'a> {
    metrics: &'a BTreeMap<String, BTreeSet<String>>,
    problems: Vec<String>,
}

impl Checker<'_> {
    fn labels_of(&self, name: &str) -> BTreeSet<String> {
        let mut labels: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        if let Some(own) = self.metrics.get(name) {
            labels.extend(own.iter().cloned());
        }
        labels
    }

    fn selector(&mut self, vs: &promql_parser::parser::VectorSelector) -> BTreeSet<String> {
        let Some(name) = vs.name.clone() else {
            self.problems
                .push(format!("a selector without a metric name: {vs}"));
            return BTreeSet::new();
        };
        if !SYNTHETIC.contains(&name.as_str()) && !self.metrics.contains_key(&name) {
            self.problems
                .push(format!("{name} is not exported (or no series was seen)"));
            return BTreeSet::new();
        }
        let labels = self.labels_of(&name);
        for m in vs
            .matchers
            .matchers
            .iter()
            .chain(vs.matchers.or_matchers.iter().flatten())
        {
            if m.name != "__name__" && !labels.contains(&m.name) {
                self.problems
                    .push(format!("{name} has no label {}", m.name));
            }
        }
        labels
    }

    fn grouping(&mut self, inner: &BTreeSet<String>, wanted: &[String], what: &str) {
        for label in wanted {
            if !inner.contains(label) {
                self.problems.push(format!(
                    "{what} ({label}) names a label the selected series lack: {inner:?}"
                ));
            }
        }
    }

    fn expr(&mut self, e: &Expr) -> BTreeSet<String> {
        match e {
            Expr::VectorSelector(vs) => self.selector(vs),
            Expr::MatrixSelector(ms) => self.selector(&ms.vs),
            Expr::Paren(p) => self.expr(&p.expr),
            Expr::Unary(u) => self.expr(&u.expr),
            Expr::Subquery(s) => self.expr(&s.expr),
            Expr::NumberLiteral(_) | Expr::StringLiteral(_) | Expr::Extension(_) => BTreeSet::new(),
            Expr::Aggregate(a) => {
                if let Some(p) = &a.param {
                    self.expr(p);
                }
                let inner = self.expr(&a.expr);
                match &a.modifier {
                    Some(LabelModifier::Include(by)) => {
                        self.grouping(&inner, &by.labels, "by");
                        by.labels.iter().cloned().collect()
                    }
                    Some(LabelModifier::Exclude(without)) => {
                        self.grouping(&inner, &without.labels, "without");
                        inner
                            .into_iter()
                            .filter(|l| !without.labels.contains(l))
                            .collect()
                    }
                    None => BTreeSet::new(),
                }
            }
            Expr::Call(c) => {
                let args: Vec<BTreeSet<String>> =
                    c.args.args.iter().map(|a| self.expr(a)).collect();
                match c.func.name {
                    "histogram_quantile" => {
                        let buckets = args.get(1).cloned().unwrap_or_default();
                        if !buckets.contains("le") {
                            self.problems
                                .push(format!("histogram_quantile over series without le: {c}"));
                        }
                        buckets.into_iter().filter(|l| l != "le").collect()
                    }
                    "vector" | "absent" | "time" | "scalar" => BTreeSet::new(),
                    _ => args.into_iter().find(|a| !a.is_empty()).unwrap_or_default(),
                }
            }
            Expr::Binary(b) => {
                let lhs = self.expr(&b.lhs);
                let rhs = self.expr(&b.rhs);
                if let Some(matching) = b.modifier.as_ref().and_then(|m| m.matching.as_ref()) {
                    let labels = &matching.labels().labels;
                    self.grouping(&lhs, labels, "on/ignoring (left)");
                    self.grouping(&rhs, labels, "on/ignoring (right)");
                }
                match b.op.to_string().as_str() {
                    "or" => lhs.union(&rhs).cloned().collect(),
                    _ if lhs.is_empty() => rhs,
                    _ => lhs,
                }
            }
        }
    }
}

/// `{{x}}` in a legend format, `{{ $labels.x }}` in an annotation.
fn placeholders(text: &str, prefix: &str) -> Vec<String> {
    text.split("{{")
        .skip(1)
        .filter_map(|rest| rest.split("}}").next())
        .map(str::trim)
        .filter_map(|inner| inner.strip_prefix(prefix))
        .map(|l| l.split_whitespace().next().unwrap_or_default().to_string())
        .filter(|l| !l.is_empty() && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .collect()
}

/// Every rule and panel expression checked against `scrape`; the problems found.
fn check_all(docs: &[Value], scrape: &str) -> Vec<String> {
    let metrics = exported(scrape);
    let mut problems = Vec::new();
    let mut check = |what: String, expr: &str, placeholders: Vec<String>| {
        let parsed = match parser::parse(expr) {
            Ok(parsed) => parsed,
            Err(e) => {
                problems.push(format!("{what}: does not parse: {e}"));
                return;
            }
        };
        let mut checker = Checker {
            metrics: &metrics,
            problems: Vec::new(),
        };
        let out = checker.expr(&parsed);
        for label in placeholders {
            if !out.contains(&label) {
                checker
                    .problems
                    .push(format!("shows {label}, which the result lacks: {out:?}"));
            }
        }
        problems.extend(checker.problems.into_iter().map(|p| format!("{what}: {p}")));
    };
    for alert in alerts(find(docs, "PrometheusRule", "diorch")) {
        let shown = placeholders(&alert.annotations, "$labels.");
        check(format!("alert {}", alert.name), &alert.expr, shown);
    }
    for (title, expr, legend) in panels(&dashboard(docs)) {
        check(
            format!("panel {title:?}"),
            &grafana_to_promql(&expr),
            placeholders(&legend, ""),
        );
    }
    // The dashboard's job variable: label_values(<metric>, <label>).
    let dash = dashboard(docs);
    for var in dash["templating"]["list"].as_array().expect("variables") {
        if let Some(q) = var["query"]["query"].as_str() {
            let inner = q
                .strip_prefix("label_values(")
                .and_then(|r| r.strip_suffix(')'))
                .expect("label_values query");
            let (metric, label) = inner.split_once(',').expect("metric, label");
            let (metric, label) = (metric.trim(), label.trim());
            let known = metrics.contains_key(metric)
                && (TARGET_LABELS.contains(&label) || metrics[metric].contains(label));
            if !known {
                problems.push(format!("variable {}: {q}", var["name"]));
            }
        }
    }
    problems
}

/// The checker finds what it is for: a misspelt metric, a label a metric lacks, a legend or
/// an annotation naming a label the result does not carry, and PromQL that does not parse.
#[test]
fn the_checker_catches_wrong_names_and_labels() {
    let scrape = "diorch_jobs{phase=\"Running\"} 1\ndiorch_leader 1\n\
                  diorch_x_bucket{le=\"0.1\",call=\"allocate\"} 0\n\
                  diorch_http_requests_total{route=\"/job/{job}/a,\\\"b\",code=\"200\"} 1\n";
    assert_eq!(
        exported(scrape)["diorch_http_requests_total"],
        ["code", "route"].map(String::from).into_iter().collect()
    );
    let docs_with = |expr: &str, legend: &str, annotation: &str| {
        let dashboard = serde_json::json!({
            "panels": [{"type": "timeseries", "title": "t",
                        "targets": [{"expr": expr, "legendFormat": legend}]}],
            "templating": {"list": []}
        });
        vec![
            serde_json::json!({"kind": "PrometheusRule", "metadata": {"name": "diorch"},
                "spec": {"groups": [{"rules": [{"alert": "A", "expr": expr,
                    "annotations": {"summary": annotation}}]}]}}),
            serde_json::json!({"kind": "ConfigMap", "metadata": {"name": "diorch-dashboard",
                "labels": {"grafana_dashboard": "1"}},
                "data": {"diorch.json": dashboard.to_string()}}),
        ]
    };
    let ok = docs_with(
        "sum by (phase) (diorch_jobs{job=\"$job\"}) * on () group_left max(diorch_leader)",
        "{{phase}}",
        "{{ $labels.phase }}",
    );
    assert_eq!(check_all(&ok, scrape), Vec::<String>::new());
    for (expr, legend, annotation, needle) in [
        ("sum(diorch_jbos)", "", "", "diorch_jbos is not exported"),
        ("diorch_jobs{state=\"x\"}", "", "", "has no label state"),
        ("sum by (policy) (diorch_jobs)", "", "", "by (policy)"),
        ("sum by (phase) (diorch_jobs)", "{{pod}}", "", "shows pod"),
        ("sum(diorch_jobs)", "", "{{ $labels.phase }}", "shows phase"),
        ("sum(rate(diorch_jobs[5m]", "", "", "does not parse"),
        (
            "histogram_quantile(0.9, sum by (le) (rate(diorch_jobs[5m])))",
            "",
            "",
            "by (le)",
        ),
        (
            "histogram_quantile(0.9, sum by (le, call) (rate(diorch_x_bucket[5m])))",
            "{{phase}}",
            "",
            "shows phase",
        ),
    ] {
        let problems = check_all(&docs_with(expr, legend, annotation), scrape);
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "{expr}: expected {needle:?} in {problems:?}"
        );
    }
}

/// A sandbox with GPU nodes, token review (a Prometheus token allowed `get` on any path), and
/// the admission webhooks pointed at a local port.
struct Cluster {
    sandbox: SandboxProcess,
    _files: tempfile::TempDir,
    webhook_addr: String,
    cert_dir: String,
}

fn cluster() -> Cluster {
    let files = tempfile::tempdir().expect("tempdir");
    let auth = files.path().join("auth.yaml");
    std::fs::write(
        &auth,
        "tokens:\n- {token: prom-token, user: prometheus}\nrules:\n- {user: prometheus, verbs: [get], nonResourceURLs: [/metrics]}\n- {user: prometheus, verbs: [get], resources: [dijobs/replicas]}\n",
    )
    .expect("auth file");
    let sandbox = allocation::gpu_sandbox_with(&["--auth-file", auth.to_str().expect("utf-8")]);
    let k = sandbox.kubectl();
    let webhook_addr = free_local_addr();
    k.ok_stdin(
        &["apply", "-f", "-"],
        &admission::local_configurations("diorch", &format!("https://{webhook_addr}"), "Fail"),
    );
    let certs = files.path().join("certs");
    std::fs::create_dir(&certs).expect("cert dir");
    admission::webhook_cert(&sandbox.kubeconfig, &certs, &[]);
    Cluster {
        sandbox,
        webhook_addr,
        cert_dir: certs.display().to_string(),
        _files: files,
    }
}

fn wait_for_series(addr: &str, family: &str) -> String {
    let mut text = String::new();
    wait_until(family, scenario::T, || {
        text = scrape_as(addr, Some("prom-token"));
        text.lines().any(|l| l.starts_with(family))
    });
    text
}

#[test]
fn every_alert_and_panel_queries_metrics_and_labels_a_running_operator_exports() {
    let docs = render_monitoring();
    let cluster = cluster();
    let k: Kubectl = cluster.sandbox.kubectl().in_namespace("default");
    let addr = free_local_addr();
    let operator = OperatorProcess::start_with(
        &cluster.sandbox.kubeconfig,
        &[
            "--metric-addr",
            &addr,
            "--server-auth",
            "kubernetes",
            "--webhook-addr",
            &cluster.webhook_addr,
            "--webhook-cert-dir",
            &cluster.cert_dir,
            "--plugin-namespace",
            "default",
        ],
    );
    wait_until("the operator to serve metrics", scenario::T, || {
        std::net::TcpStream::connect(&addr).is_ok()
    });

    // A mutator that refuses pods of rank 1 and above (failurePolicy Fail): failed plugin
    // calls and reconcile errors of kind `mutate`; deleting it lets the job run.
    let hostile_mutator = allocation::plugin_file("hostile_mutator");
    allocation::upload_by(
        "create",
        &k,
        &hostile_mutator,
        "refuse",
        "mutator",
        &["--config", "later:error"],
    );
    allocation::wait_event(&k, "ConfigMap", "plugin-refuse", "PluginLoaded", 1);
    scenario::apply(&k, &scenario::standard_job("watched", ""));
    allocation::wait_event(&k, "DIJob", "watched", "MutatorFailed", 1);
    wait_for_series(&addr, "diorch_reconcile_errors_total{");
    k.ok(&["delete", "configmap", "plugin-refuse"]);
    scenario::wait_phase(&k, "watched", "Running");

    // A policy that traps: its job is placed by the built-in policy instead.
    let hostile_policy = allocation::plugin_file("hostile_policy");
    allocation::upload_by("create", &k, &hostile_policy, "hostile", "policy", &[]);
    allocation::wait_event(&k, "ConfigMap", "plugin-hostile", "PluginLoaded", 1);
    scenario::apply(&k, &allocation::gpu_job("trap", "hostile", 2, 1));
    allocation::wait_allocated(&k, "trap", "True");
    wait_for_series(&addr, "diorch_allocator_fallbacks_total{");

    // An upload of the wrong world is rejected: a load failure and an unhealthy plugin.
    allocation::upload_by("create", &k, &hostile_policy, "wrong", "mutator", &[]);
    wait_for_series(&addr, "diorch_plugin_loads_total{plugin=\"wrong\"");

    // Webhook reviews: a refused job and an admitted one.
    let refused = &admission::invalid_jobs()[0].0;
    k.fails_stdin(&["create", "-f", "-"], refused);
    wait_for_series(&addr, "diorch_admission_reviews_total{");

    // The replica API, with and without a token: requests and authorisation decisions.
    let api = operator.api_url();
    for token in [None, Some("prom-token")] {
        let mut stream =
            std::net::TcpStream::connect(api.trim_start_matches("http://")).expect("connect");
        let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
        std::io::Write::write_all(
            &mut stream,
            format!(
                "GET /v2alpha1/job/default.watched/replicas HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n"
            )
            .as_bytes(),
        )
        .expect("request");
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut stream, &mut answer).expect("answer");
        assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    }
    wait_for_series(&addr, "diorch_http_requests_total{");

    // The gauges refresh every few seconds: wait until the running job shows.
    let scrape = {
        let mut text = String::new();
        wait_until("the jobs gauge", scenario::T, || {
            text = scrape_as(&addr, Some("prom-token"));
            text.contains("diorch_jobs{phase=\"Running\"} 2")
        });
        text
    };
    let problems = check_all(&docs, &scrape);
    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n\nscrape:\n{scrape}",
        problems.len(),
        problems.join("\n")
    );
    drop(operator);
}
