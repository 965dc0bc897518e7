//! `diorch plugin shadow NAME`: what a policy's shadows did on a running operator's live
//! decisions, fetched from its metrics address (`GET /v1/policies/NAME/shadow`) and printed as
//! two tables: counts per shadow, then the latest divergent decisions (job, active placement,
//! shadow placement, sizes).
//!
//! Owns: the request and the tables. Must not touch: the report's making (`allocator::shadow`);
//! it reads the JSON leniently, so an older or newer operator's report still prints.

use std::fmt::Write as _;
use std::time::Duration;

use axum::http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Largest report read (the operator bounds its record; this bounds what a wrong URL sends).
const MAX_REPORT_BYTES: usize = 8 << 20;
/// The whole request, connect to last byte.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// `GET {url}/v1/policies/{policy}/shadow`, with a bearer token if given.
pub async fn fetch(url: &str, policy: &str, token: Option<&str>) -> anyhow::Result<Value> {
    let uri = format!("{}/v1/policies/{policy}/shadow", url.trim_end_matches('/'));
    let mut request = Request::get(&uri);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let request = request
        .body(Empty::<axum::body::Bytes>::new())
        .map_err(|e| anyhow::anyhow!("invalid URL {uri}: {e}"))?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<axum::body::Bytes>>();
    let call = async {
        let response = client
            .request(request)
            .await
            .map_err(|e| anyhow::anyhow!("cannot reach the operator at {url}: {e}"))?;
        let status = response.status();
        let body = Limited::new(response.into_body(), MAX_REPORT_BYTES)
            .collect()
            .await
            .map_err(|e| anyhow::anyhow!("reading {uri}: {e}"))?
            .to_bytes();
        anyhow::Ok((status, body))
    };
    let (status, body) = tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .map_err(|_| anyhow::anyhow!("{uri}: no answer within {REQUEST_TIMEOUT:?}"))??;
    let text = String::from_utf8_lossy(&body);
    if status != StatusCode::OK {
        anyhow::bail!(
            "{uri} answered {status}: {}{}",
            text.trim().chars().take(300).collect::<String>(),
            if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
                " (give --token-file with a token allowed get on /plugins)"
            } else {
                ""
            }
        );
    }
    serde_json::from_str(&text).map_err(|e| anyhow::anyhow!("{uri}: not a shadow report: {e}"))
}

/// The report as tables for people.
pub fn render(report: &Value) -> String {
    let mut out = String::new();
    let policy = report["policy"].as_str().unwrap_or("?");
    let empty = serde_json::Map::new();
    let shadows = report["shadows"].as_object().unwrap_or(&empty);
    if shadows.is_empty() {
        let _ = writeln!(
            out,
            "policy {policy} has no shadow (label a policy ConfigMap diorch.io/shadow-of={policy})"
        );
        return out;
    }
    let _ = writeln!(out, "policy {policy}: {} shadow(s)\n", shadows.len());
    let mut rows = vec![row(&["SHADOW", "SAME", "DIFFERENT", "FAILED", "DROPPED"])];
    for (name, counts) in shadows {
        let n = |k: &str| counts[k].as_u64().unwrap_or(0).to_string();
        rows.push(vec![
            name.clone(),
            n("same"),
            n("different"),
            n("failed"),
            n("dropped"),
        ]);
    }
    table(&mut out, &rows);
    let divergences = report["divergences"].as_array().map(Vec::as_slice);
    let divergences = divergences.unwrap_or_default();
    if divergences.is_empty() {
        let _ = writeln!(out, "\nno divergent decision recorded");
        return out;
    }
    let _ = writeln!(
        out,
        "\nlatest divergent decisions, newest first ({}):\n",
        divergences.len()
    );
    let mut rows = vec![row(&[
        "TIME",
        "CALL",
        "SHADOW",
        "JOB",
        "ACTIVE",
        "SHADOW ANSWER",
    ])];
    for d in divergences {
        let jobs = d["jobs"].as_array().map(Vec::as_slice).unwrap_or_default();
        let at = d["at"].as_str().unwrap_or("-");
        let at = at.split('.').next().unwrap_or(at).to_string();
        let call = d["call"].as_str().unwrap_or("-").to_string();
        let shadow = d["shadow"].as_str().unwrap_or("-");
        let shadow = shadow.split('@').next().unwrap_or(shadow).to_string();
        for (i, job) in jobs.iter().enumerate() {
            let (at, call, shadow) = if i == 0 {
                (at.clone(), call.clone(), shadow.clone())
            } else {
                (String::new(), String::new(), String::new())
            };
            rows.push(vec![
                at,
                call,
                shadow,
                job["job"].as_str().unwrap_or("-").to_string(),
                side(&job["active"]),
                side(&job["shadow"]),
            ]);
        }
        let more = d["differing"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(jobs.len() as u64);
        if more > 0 {
            rows.push(vec![
                String::new(),
                String::new(),
                String::new(),
                format!("(+{more} more jobs)"),
                String::new(),
                String::new(),
            ]);
        }
    }
    table(&mut out, &rows);
    // The shadows' reasons (contract 0.4.0), under the table: they are sentences.
    let reasons: Vec<String> = divergences
        .iter()
        .filter_map(|d| {
            let reason = d["shadowReason"].as_str()?;
            let reason = diorch_core::reason::sanitize(reason)?;
            let at = d["at"].as_str().unwrap_or("-");
            let at = at.split('.').next().unwrap_or(at);
            let job = d["jobs"][0]["job"].as_str().unwrap_or("-");
            let job = diorch_core::reason::sanitize(job).unwrap_or_default();
            Some(format!("- {at}  {job}: {reason}"))
        })
        .collect();
    if !reasons.is_empty() {
        let _ = writeln!(
            out,
            "
why the shadow answered as it did:"
        );
        for line in reasons {
            let _ = writeln!(out, "{line}");
        }
    }
    out
}

fn row(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

/// One side of a job's comparison: `n0×2,n1` (+ ` sizes 1,2` if resized), `waits: …`, or
/// `failed: …`.
fn side(value: &Value) -> String {
    if let Some(placed) = value.get("placed") {
        let nodes: Vec<&str> = placed["nodes"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut text = compact(&nodes);
        if let Some(sizes) = placed["replicas"].as_array() {
            let sizes: Vec<String> = sizes.iter().map(|n| n.to_string()).collect();
            let _ = write!(text, " sizes {}", sizes.join(","));
        }
        return text;
    }
    for (key, label) in [("waits", "waits"), ("failed", "failed")] {
        if let Some(why) = value.get(key).and_then(Value::as_str) {
            let why: String = why.chars().filter(|c| !c.is_control()).take(60).collect();
            return if why.is_empty() {
                label.to_string()
            } else {
                format!("{label}: {why}")
            };
        }
    }
    "-".to_string()
}

/// Node names in rank order, runs of one node folded: `n0×3,n1`.
fn compact(nodes: &[&str]) -> String {
    let mut parts: Vec<(String, usize)> = Vec::new();
    for node in nodes {
        match parts.last_mut() {
            Some((last, n)) if last == node => *n += 1,
            _ => parts.push((node.to_string(), 1)),
        }
    }
    let parts: Vec<String> = parts
        .into_iter()
        .map(
            |(node, n)| {
                if n == 1 { node } else { format!("{node}×{n}") }
            },
        )
        .collect();
    if parts.is_empty() {
        "-".to_string()
    } else {
        parts.join(",")
    }
}

/// Left-aligned columns, two spaces apart; every cell is one line of printable text (a policy's
/// words are untrusted).
fn table(out: &mut String, rows: &[Vec<String>]) {
    let clean = |c: &str| -> String { c.chars().filter(|ch| !ch.is_control()).collect() };
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| clean(c)).collect())
        .collect();
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in &rows {
        let mut line = String::new();
        for (i, cell) in r.iter().enumerate() {
            let pad = widths[i].saturating_sub(cell.chars().count());
            let _ = write!(line, "{cell}{}", " ".repeat(pad + 2));
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_report_prints_counts_and_each_divergent_job_with_both_answers() {
        let report = json!({
            "policy": "team",
            "shadows": {"team-next": {"same": 2, "different": 1, "failed": 1, "dropped": 0}},
            "divergences": [
                {"at": "2026-11-27T00:00:01.123Z", "call": "optimize", "active": "team@aa",
                 "shadow": "team-next@bb", "inputJobs": 3, "inputNodes": 4, "verdict": "different",
                 "differing": 40,
                 "jobs": [{"job": "ns/a",
                           "active": {"placed": {"nodes": ["n0", "n1", "n2"]}},
                           "shadow": {"placed": {"nodes": ["n0", "n0", "n0", "n1"], "replicas": [1, 3]}}}]},
                {"at": "2026-11-27T00:00:00.5Z", "call": "allocate", "active": "team@aa",
                 "shadow": "team-next@bb", "verdict": "different", "differing": 1,
                 "shadowReason": "bin-pack, fullest\nfitting node first: n0×2\u{1b}[2J",
                 "jobs": [{"job": "ns/c", "active": {"placed": {"nodes": ["n0", "n1"]}},
                           "shadow": {"placed": {"nodes": ["n0", "n0"]}}}]},
                {"at": "2026-11-27T00:00:00Z", "call": "allocate", "active": "team@aa",
                 "shadow": "team-next@bb", "verdict": "failed", "differing": 0,
                 "jobs": [{"job": "ns/b", "active": {"waits": "no room"},
                           "shadow": {"failed": "trap:\nunreachable\u{1b}[31m"}}]}
            ]
        });
        let text = render(&report);
        assert!(text.starts_with("policy team: 1 shadow(s)"), "{text}");
        let counts = text.lines().find(|l| l.starts_with("team-next")).unwrap();
        assert_eq!(
            counts.split_whitespace().collect::<Vec<_>>(),
            ["team-next", "2", "1", "1", "0"]
        );
        let a = text.lines().find(|l| l.contains("ns/a")).unwrap();
        assert!(
            a.contains("n0,n1,n2") && a.contains("n0×3,n1 sizes 1,3"),
            "{a}"
        );
        assert_eq!(
            a.split_whitespace().take(4).collect::<Vec<_>>(),
            ["2026-11-27T00:00:01", "optimize", "team-next", "ns/a"]
        );
        assert!(text.contains("(+39 more jobs)"), "{text}");
        let b = text.lines().find(|l| l.contains("ns/b")).unwrap();
        assert!(
            b.contains("waits: no room") && b.contains("failed: trap:unreachable"),
            "{b}"
        );
        assert!(!text.contains('\u{1b}'), "control characters are dropped");
        assert!(
            text.ends_with(
                "\nwhy the shadow answered as it did:\n- 2026-11-27T00:00:00  ns/c: bin-pack, fullest fitting node first: n0×2 [2J\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_policy_without_shadows_says_how_to_add_one() {
        let text = render(&json!({"policy": "team", "shadows": {}, "divergences": []}));
        assert!(text.contains("diorch.io/shadow-of=team"), "{text}");
        let text = render(&json!({"policy": "team", "shadows": {"x": {}}, "divergences": []}));
        assert!(text.contains("no divergent decision recorded"), "{text}");
    }

    #[tokio::test]
    async fn the_report_is_fetched_with_the_token_and_refusals_are_explained() {
        use axum::http::HeaderMap;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new().route(
            "/v1/policies/{name}/shadow",
            axum::routing::get(|headers: HeaderMap| async move {
                if headers.get("authorization").and_then(|v| v.to_str().ok())
                    == Some("Bearer t0ken")
                {
                    (StatusCode::OK, r#"{"policy":"team","shadows":{}}"#)
                } else {
                    (StatusCode::UNAUTHORIZED, "unauthorised")
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://{addr}");
        let report = fetch(&url, "team", Some("t0ken")).await.unwrap();
        assert_eq!(report["policy"], "team");
        let err = fetch(&url, "team", None).await.unwrap_err().to_string();
        assert!(err.contains("401") && err.contains("--token-file"), "{err}");
    }

    #[tokio::test]
    async fn an_endless_or_garbage_answer_is_refused_with_a_clear_error() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .route(
                "/v1/policies/big/shadow",
                axum::routing::get(|| async { "x".repeat(MAX_REPORT_BYTES + 1) }),
            )
            .route(
                "/v1/policies/junk/shadow",
                axum::routing::get(|| async { "<html>not json</html>" }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url = format!("http://{addr}");
        let err = fetch(&url, "big", None).await.unwrap_err().to_string();
        assert!(err.contains("reading"), "{err}");
        let err = fetch(&url, "junk", None).await.unwrap_err().to_string();
        assert!(err.contains("not a shadow report"), "{err}");
    }
}
