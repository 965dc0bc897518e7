//! `ratio.svg`: the operator/floor time ratio against N (issue 39's measure), a line per server
//! and milestone (pods exist, pods Running), with the goal; drawn by the operator crate's chart
//! renderer. N without a floor row is left out.
//!
//! Owns: which lines the chart has. Must not touch: the SVG markup (`diorch::chart` draws it).

use std::collections::BTreeMap;

use diorch::chart::{Axis, Chart, Goal, Legend, Range, Series};

use crate::goals::{FLOOR_RATIO_GOAL, floor_of};
use crate::rows::{Row, ratio, servers};

/// One line per server and milestone: its (N, ratio) points, by N.
pub fn series(rows: &[Row]) -> Vec<Series> {
    let mut out = Vec::new();
    for server in servers(rows) {
        for running in [false, true] {
            // The last row of each N wins.
            let mut points: BTreeMap<u64, f64> = BTreeMap::new();
            for row in rows {
                if let Row::ControllerTime {
                    server: s,
                    n,
                    operator_exist_ms,
                    operator_running_ms,
                    ..
                } = row
                    && *s == server
                    && let Some((floor_exist_ms, floor_running_ms)) = floor_of(rows, &server, *n)
                {
                    let r = if running {
                        ratio(*operator_running_ms, floor_running_ms)
                    } else {
                        ratio(*operator_exist_ms, floor_exist_ms)
                    };
                    if let Some(r) = r
                        && *n > 0
                    {
                        points.insert(*n, r);
                    }
                }
            }
            if !points.is_empty() {
                out.push(Series {
                    label: format!(
                        "{server}, {}",
                        if running {
                            "pods Running"
                        } else {
                            "pods exist"
                        }
                    ),
                    points: points.into_iter().map(|(n, r)| (n as f64, r)).collect(),
                });
            }
        }
    }
    out
}

/// The chart: 640 × 360, a log N axis once N spans a decade, the y axis holding 1 and the goal.
pub fn svg(series: &[Series]) -> String {
    Chart {
        title: "Time via the operator / the floor's time, against N (DIJobs of 4 replicas)".into(),
        x: Axis::new("N, DIJobs created", Range::Padded),
        y: Axis::new(
            "operator / floor",
            Range::Rounded {
                include: vec![1.0, FLOOR_RATIO_GOAL],
            },
        ),
        series: series.to_vec(),
        goal: Some(Goal {
            value: FLOOR_RATIO_GOAL,
            label: format!("goal ≤ {FLOOR_RATIO_GOAL} at N = 1000"),
        }),
        width: 640.0,
        height: 360.0,
        legend: Legend::Right,
    }
    .svg()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::{SAMPLE, parse};

    #[test]
    fn the_chart_is_an_svg_with_a_line_per_series_and_the_goal() {
        let (rows, _) = parse(SAMPLE);
        let lines = series(&rows);
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].label, "sandbox, pods exist");
        assert_eq!(lines[3].label, "real API server, pods Running");
        let chart = svg(&lines);
        assert!(chart.starts_with("<svg"));
        assert!(chart.trim_end().ends_with("</svg>"));
        assert_eq!(chart.matches(r#"<path class="series""#).count(), 4);
        assert_eq!(chart.matches(r#"class="goal""#).count(), 1);
        assert!(chart.contains("stroke-dasharray"));
        assert!(chart.contains("log scale"), "N spans 10x: a log axis");
        // Text is escaped; tags balance (a rough well-formedness check).
        let odd = svg(&[Series {
            label: "a<b & \"c\"".into(),
            points: vec![(100.0, 1.1), (300.0, 1.2)],
        }]);
        assert!(odd.contains("a&lt;b &amp; &quot;c&quot;"));
        assert!(!odd.contains("log scale"), "N spans 3x: a linear axis");
        for chart in [&chart, &odd, &svg(&[])] {
            let opens = chart.matches('<').count();
            let closes = chart.matches('>').count();
            assert_eq!(opens, closes);
            assert_eq!(
                chart.matches("<text").count(),
                chart.matches("</text>").count()
            );
            assert!(!chart.contains("NaN") && !chart.contains("inf"), "{chart}");
        }
    }
}
