//! `report.html`: the runs' summary table and charts (GPU utilisation, queue length and
//! fragmentation over time, the JCT distribution) as one self-contained file: inline SVG, no
//! script, no fonts or styles fetched, so it opens from disk with no server or network.
//!
//! Deterministic like the CSV files: the wall-clock call times are left out.
//!
//! Owns: the page, and which charts it shows from which figures; the drawing is
//! [`crate::chart`]'s. Must not touch: the figures (report.rs defines them) or the chart markup.

use std::fmt::Write as _;

use super::engine::Run;
use super::report::Summary;
use crate::chart::{Axis, Chart, Range, Series, escape};

/// A chart of the page: 720 × 260 (the browser test checks that size), legend inside.
fn chart(id: &str, title: &str, x: Axis, y: Axis, series: Vec<Series>) -> String {
    Chart::new(title, x, y, series).figure(id)
}

/// One line per policy of `value` against hours since its first sample.
fn over_time(runs: &[Run], value: impl Fn(&super::engine::Sample) -> f64) -> Vec<Series> {
    runs.iter()
        .map(|r| Series {
            label: r.policy.clone(),
            points: r
                .timeline
                .iter()
                .map(|s| {
                    (
                        s.at_ms.saturating_sub(r.first_ms) as f64 / 3_600_000.0,
                        value(s),
                    )
                })
                .collect(),
        })
        .collect()
}

/// The JCT distribution: the share of finished jobs done within each JCT, in hours.
fn jct_cdf(runs: &[Run]) -> Vec<Series> {
    runs.iter()
        .map(|r| {
            let mut jct: Vec<f64> = r
                .jobs
                .iter()
                .filter_map(|j| Some(j.ended_ms?.saturating_sub(j.arrival_ms) as f64 / 3_600_000.0))
                .collect();
            jct.sort_by(f64::total_cmp);
            let n = jct.len() as f64;
            let points = jct
                .iter()
                .enumerate()
                .map(|(i, v)| (*v, (i + 1) as f64 / n))
                .collect();
            Series {
                label: r.policy.clone(),
                points,
            }
        })
        .collect()
}

/// The whole page.
pub fn page(runs: &[Run], summaries: &[Summary], title: &str) -> String {
    let mut html = String::new();
    let _ = write!(
        html,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font-family:sans-serif;margin:24px;color:#222}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th:first-child,td:first-child{{text-align:left}}\
         figure{{margin:24px 0}}figcaption{{font-weight:bold;margin-bottom:4px}}</style></head><body>\n<h1>{}</h1>\n",
        escape(title),
        escape(title)
    );
    html.push_str("<table id=\"summary\"><tr><th></th>");
    for s in summaries {
        let _ = write!(html, "<th>{}</th>", escape(&s.policy));
    }
    html.push_str("</tr>\n");
    // The terminal's rows but the wall-clock ones: the page is the same on every run.
    for (name, f) in super::report::VIRTUAL_ROWS {
        let _ = write!(html, "<tr><td>{}</td>", escape(name));
        for s in summaries {
            let _ = write!(html, "<td>{}</td>", escape(&f(s)));
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
    let hours = || Axis::new("hours", Range::FromZero);
    html.push_str(&chart(
        "utilisation",
        "GPU utilisation over time",
        hours(),
        Axis::new("used / total GPUs", Range::ZeroTo(1.0)),
        over_time(runs, |s| {
            if s.total_gpus == 0 {
                0.0
            } else {
                s.used_gpus as f64 / s.total_gpus as f64
            }
        }),
    ));
    html.push_str(&chart(
        "queue",
        "Queue length over time",
        hours(),
        Axis::new("jobs waiting", Range::FromZero),
        over_time(runs, |s| s.queued as f64),
    ));
    html.push_str(&chart(
        "fragmentation",
        "Fragmented GPUs over time (free GPUs on partly used nodes)",
        hours(),
        Axis::new("GPUs", Range::FromZero),
        over_time(runs, |s| s.fragmented_gpus as f64),
    ));
    html.push_str(&chart(
        "jct",
        "JCT distribution (share of finished jobs done within a JCT)",
        Axis::new("JCT (hours)", Range::FromZero),
        Axis::new("share of jobs", Range::ZeroTo(1.0)),
        jct_cdf(runs),
    ));
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The page's table has the preemption rows, with the run's figures.
    #[test]
    fn the_table_shows_urgent_queueing_and_preemptions() {
        let run = crate::simulate::report::tests::preempting_run();
        let summary = Summary::of(&run);
        let html = page(std::slice::from_ref(&run), &[summary], "t");
        for row in [
            "<tr><td>preemption</td><td>shrink</td></tr>",
            "<tr><td>urgent jobs started</td><td>10/11</td></tr>",
            "<tr><td>urgent queueing p50 (s)</td><td>50.0</td></tr>",
            "<tr><td>urgent queueing p95 (s)</td><td>100.0</td></tr>",
            "<tr><td>shrinks</td><td>2</td></tr>",
            "<tr><td>evictions</td><td>1</td></tr>",
            "<tr><td>GPU-seconds lost</td><td>5400.3</td></tr>",
        ] {
            assert!(html.contains(row), "{row}");
        }
        assert!(html.contains("<th>builtin:binpack/shrink</th>"));
    }

    #[test]
    fn a_figure_is_a_captioned_chart_of_the_pages_size_with_a_path_per_policy() {
        let series = ["a<b", "c"]
            .iter()
            .map(|p| Series {
                label: p.to_string(),
                points: vec![(0.0, 0.0), (1.0, 1.0)],
            })
            .collect();
        let figure = chart(
            "queue",
            "<t>",
            Axis::new("hours", Range::FromZero),
            Axis::new("jobs", Range::FromZero),
            series,
        );
        assert!(figure.starts_with(r#"<figure id="queue"><figcaption>&lt;t&gt;</figcaption><svg"#));
        assert!(figure.contains(r#"width="720" height="260""#));
        assert_eq!(figure.matches(r#"<path class="series""#).count(), 2);
        assert!(figure.contains("a&lt;b") && !figure.contains("<t>"));
    }
}
