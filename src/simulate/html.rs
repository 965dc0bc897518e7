//! `report.html`: the runs' summary table and charts (GPU utilisation, queue length and
//! fragmentation over time, the JCT distribution) as one self-contained file: inline SVG, no
//! script, no fonts or styles fetched, so it opens from disk with no server or network.
//!
//! Deterministic like the CSV files: the wall-clock call times are left out.
//!
//! Owns: the page and its charts. Must not touch: the figures (report.rs defines them).

use std::fmt::Write as _;

use super::engine::Run;
use super::report::Summary;

/// Line colours, one per policy (wraps past eight).
const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];

/// Most points drawn per line: a long run's samples are thinned to this (every n-th, the last
/// always kept) so the page stays small.
const MAX_POINTS: usize = 1500;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 260.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 40.0;

/// Text for HTML and SVG.
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

struct Series<'a> {
    label: &'a str,
    points: Vec<(f64, f64)>,
}

fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let step = points.len().div_ceil(MAX_POINTS);
    let last = points.len() - 1;
    points
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i == last)
        .map(|(_, p)| p)
        .collect()
}

/// A round upper bound for an axis: 1, 2 or 5 times a power of ten at or above `max`.
fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if m * power >= max {
            return m * power;
        }
    }
    10.0 * power
}

fn tick(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{:.0}k", v / 1000.0)
    } else if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        let text = format!("{v:.2}");
        text.trim_end_matches('0').to_string()
    }
}

/// A line chart of `series`, with a legend. `y_max` fixes the axis (utilisation is 0–1).
fn chart(
    id: &str,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series<'_>],
    y_max: Option<f64>,
) -> String {
    let x_max = nice_max(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .fold(0.0, f64::max),
    );
    let y_max = y_max.unwrap_or_else(|| {
        nice_max(
            series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .fold(0.0, f64::max),
        )
    });
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |v: f64| LEFT + v / x_max * plot_w;
    let y = |v: f64| TOP + plot_h - v / y_max * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<figure id="{id}"><figcaption>{}</figcaption><svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" role="img" aria-label="{}">"#,
        escape(title),
        escape(title)
    );
    let _ = write!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" stroke="#999"/>"##
    );
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let (vx, vy) = (x_max * f, y_max * f);
        let _ = write!(
            svg,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{:.1}" y2="{:.1}" stroke="#e0e0e0"/><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="end">{}</text><text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"##,
            LEFT + plot_w,
            y(vy),
            y(vy),
            LEFT - 6.0,
            y(vy) + 4.0,
            tick(vy),
            x(vx),
            TOP + plot_h + 16.0,
            tick(vx)
        );
    }
    let _ = write!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" font-size="12" text-anchor="middle">{}</text><text x="14" y="{:.1}" font-size="12" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 6.0,
        escape(x_label),
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let mut d = String::new();
        for (n, (px, py)) in s.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1}",
                if n == 0 { "M" } else { " L" },
                x(*px),
                y(*py)
            );
        }
        let _ = write!(
            svg,
            r#"<path class="series" data-policy="{}" d="{d}" fill="none" stroke="{colour}" stroke-width="1.5"/>"#,
            escape(s.label)
        );
        // The legend sits in the top right corner, over a white box.
        let ly = TOP + 14.0 + 16.0 * i as f64;
        let lx = LEFT + plot_w - 170.0;
        let _ = write!(
            svg,
            r##"<rect x="{:.1}" y="{:.1}" width="166" height="16" fill="#ffffff" fill-opacity="0.85"/><rect x="{:.1}" y="{:.1}" width="12" height="3" fill="{colour}"/><text x="{:.1}" y="{:.1}" font-size="11">{}</text>"##,
            lx - 4.0,
            ly - 12.0,
            lx,
            ly - 4.0,
            lx + 16.0,
            ly,
            escape(s.label)
        );
    }
    svg.push_str("</svg></figure>\n");
    svg
}

fn over_time<'a>(
    runs: &'a [Run],
    value: impl Fn(&super::engine::Sample) -> f64,
) -> Vec<Series<'a>> {
    runs.iter()
        .map(|r| Series {
            label: &r.policy,
            points: thin(
                r.timeline
                    .iter()
                    .map(|s| {
                        (
                            s.at_ms.saturating_sub(r.first_ms) as f64 / 3_600_000.0,
                            value(s),
                        )
                    })
                    .collect(),
            ),
        })
        .collect()
}

/// The JCT distribution: the share of finished jobs done within each JCT, in hours.
fn jct_cdf(runs: &[Run]) -> Vec<Series<'_>> {
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
                label: &r.policy,
                points: thin(points),
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
    html.push_str(&chart(
        "utilisation",
        "GPU utilisation over time",
        "hours",
        "used / total GPUs",
        &over_time(runs, |s| {
            if s.total_gpus == 0 {
                0.0
            } else {
                s.used_gpus as f64 / s.total_gpus as f64
            }
        }),
        Some(1.0),
    ));
    html.push_str(&chart(
        "queue",
        "Queue length over time",
        "hours",
        "jobs waiting",
        &over_time(runs, |s| s.queued as f64),
        None,
    ));
    html.push_str(&chart(
        "fragmentation",
        "Fragmented GPUs over time (free GPUs on partly used nodes)",
        "hours",
        "GPUs",
        &over_time(runs, |s| s.fragmented_gpus as f64),
        None,
    ));
    html.push_str(&chart(
        "jct",
        "JCT distribution (share of finished jobs done within a JCT)",
        "JCT (hours)",
        "share of jobs",
        &jct_cdf(runs),
        Some(1.0),
    ));
    html.push_str("</body></html>\n");
    html
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_drop_trailing_zeros() {
        assert_eq!(tick(2.5), "2.5");
        assert_eq!(tick(0.25), "0.25");
        assert_eq!(tick(5.0), "5");
        assert_eq!(tick(25_000.0), "25k");
    }

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(0.73), 1.0);
        assert_eq!(nice_max(1.2), 2.0);
        assert_eq!(nice_max(340.0), 500.0);
        assert_eq!(nice_max(1000.0), 1000.0);
    }

    #[test]
    fn long_lines_are_thinned_keeping_the_last_point() {
        let points: Vec<(f64, f64)> = (0..10_000).map(|i| (f64::from(i), 0.0)).collect();
        let thinned = thin(points);
        assert!(thinned.len() <= MAX_POINTS + 1);
        assert_eq!(thinned.last(), Some(&(9999.0, 0.0)));
    }

    #[test]
    fn names_are_escaped() {
        let svg = chart(
            "c",
            "<t>",
            "x",
            "y",
            &[Series {
                label: "a<b>&\"c",
                points: vec![(0.0, 0.0), (1.0, 1.0)],
            }],
            None,
        );
        assert!(svg.contains("a&lt;b&gt;&amp;&quot;c") && !svg.contains("<t>"));
    }
}
