//! SVG line charts for diorch's reports: the `diorch simulate` page (`simulate::html`) and the
//! benchmark report (`examples/bench_report`). One renderer, so both reports read the same way:
//! a plot box with grid and ticks at round numbers, one coloured line per series, a legend, an
//! optional dashed goal line, all as self-contained SVG (no script, fonts or styles fetched).
//!
//! Owns: scales, ticks, the SVG markup and the escaping of every text in it. Must not touch:
//! what the charts show (the reports pick the series) or any file: it returns strings.

use std::fmt::Write as _;

/// Line colours, one per series (wraps past eight). No red: red is the goal's.
const PALETTE: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f",
];
/// The goal line's colour.
const GOAL_COLOUR: &str = "#d62728";

/// Most points drawn per line: a long run's samples are thinned to this (every n-th, the last
/// always kept) so a page of several charts stays small.
pub const MAX_POINTS: usize = 1500;
/// Points are marked (a dot with its values as a tooltip) on lines this short or shorter: a
/// bench's few measurements are read one by one, and a line of one point is otherwise not
/// drawn at all.
const MARKED_POINTS: usize = 60;

const LEFT: f64 = 64.0;
const BOTTOM: f64 = 40.0;
/// Room above the plot: a standalone chart draws its title there.
const TOP: f64 = 16.0;
const TITLE_ROOM: f64 = 24.0;
const RIGHT: f64 = 16.0;
/// Room right of the plot for a legend drawn there.
const LEGEND_ROOM: f64 = 220.0;
const LEGEND_ROW: f64 = 16.0;

/// One line: its legend label and its (x, y) points, in drawing order.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Where an axis starts and ends.
#[derive(Debug, Clone, PartialEq)]
pub enum Range {
    /// From 0 to a round number (1, 2 or 5 × 10^k) at or above the data, ticked in quarters.
    FromZero,
    /// From 0 to this fixed top (a share: 1.0), ticked in quarters.
    ZeroTo(f64),
    /// The data's span widened to hold `include` (a goal, a reference value), both ends
    /// rounded out to a round step, ticked at every step.
    Rounded { include: Vec<f64> },
    /// The data's span with 5% padding so no point sits on the frame; on a log scale when the
    /// data spans a decade or more (ticked 1, 2, 5 × 10^k), else ticked at round steps.
    Padded,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub label: String,
    pub range: Range,
}

impl Axis {
    pub fn new(label: &str, range: Range) -> Axis {
        Axis {
            label: label.to_string(),
            range,
        }
    }
}

/// A horizontal dashed line at a target value, with its label.
#[derive(Debug, Clone, PartialEq)]
pub struct Goal {
    pub value: f64,
    pub label: String,
}

/// Where the legend goes: over the plot's top right corner (on a white box), or right of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Legend {
    Inside,
    Right,
}

/// A line chart: build it, then render it as a standalone SVG ([`Chart::svg`]) or as an HTML
/// figure with a caption ([`Chart::figure`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub goal: Option<Goal>,
    pub width: f64,
    pub height: f64,
    pub legend: Legend,
}

/// Text for HTML and SVG: markup characters escaped, control characters (a stray newline in a
/// label) made spaces.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// 29500.4 -> "29 500": whole units, digits grouped by three.
pub fn thousands(v: f64) -> String {
    let rounded = v.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    if rounded < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A tick label without needless decimals: "25k" from ten thousand up, "1 500", "0.125".
pub fn tick_label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        if v.abs() >= 10_000.0 && (v / 1000.0).fract() == 0.0 {
            format!("{:.0}k", v / 1000.0)
        } else {
            thousands(v)
        }
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// A round upper bound for an axis: 1, 2 or 5 times a power of ten at or above `max`.
pub fn nice_max(max: f64) -> f64 {
    if max <= 0.0 || !max.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    for m in [1.0, 2.0, 5.0] {
        if m * power >= max {
            return m * power;
        }
    }
    10.0 * power
}

/// A round step (1, 2 or 5 × 10^k) that cuts `span` into about `parts`.
pub fn nice_step(span: f64, parts: f64) -> f64 {
    let raw = (span / parts).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    let f = raw / magnitude;
    let nice = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Every n-th point (the last always kept) so at most about [`MAX_POINTS`] remain.
pub fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let step = points.len().div_ceil(MAX_POINTS);
    let last = points.len() - 1;
    points
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || *i == last)
        .map(|(_, p)| *p)
        .collect()
}

/// An axis resolved against the data: its domain, whether it is logarithmic, and its ticks.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    /// The domain's ends, in data units (before any log).
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    /// Padding on each side, as a share of the domain.
    pub pad: f64,
    pub ticks: Vec<f64>,
}

impl Scale {
    /// Resolves `range` over `values` (the data on this axis, finite or not).
    pub fn new(range: &Range, values: &[f64]) -> Scale {
        let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        let min = finite.iter().copied().fold(f64::INFINITY, f64::min);
        let max = finite.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let quarters = |hi: f64| Scale {
            lo: 0.0,
            hi,
            log: false,
            pad: 0.0,
            ticks: (0..=4).map(|i| hi * f64::from(i) / 4.0).collect(),
        };
        match range {
            Range::FromZero => quarters(nice_max(max.max(0.0))),
            Range::ZeroTo(top) if *top > 0.0 && top.is_finite() => quarters(*top),
            Range::ZeroTo(_) => quarters(1.0),
            Range::Rounded { include } => {
                let lo_raw = include.iter().copied().fold(min, f64::min);
                let hi_raw = include.iter().copied().fold(max, f64::max);
                let (lo_raw, hi_raw) = if lo_raw.is_finite() && hi_raw.is_finite() {
                    (lo_raw, hi_raw)
                } else {
                    (0.0, 1.0)
                };
                let step = nice_step(hi_raw - lo_raw, 6.0);
                let lo = (lo_raw / step).floor() * step;
                let mut hi = (hi_raw / step).ceil() * step;
                if hi <= lo {
                    hi = lo + step;
                }
                Scale {
                    lo,
                    hi,
                    log: false,
                    pad: 0.0,
                    ticks: steps(lo, hi, step),
                }
            }
            Range::Padded => {
                let (mut lo, mut hi) = if min.is_finite() {
                    (min, max)
                } else {
                    (0.0, 1.0)
                };
                let log = lo > 0.0 && hi / lo >= 10.0;
                if hi <= lo {
                    // One value: a domain around it.
                    (lo, hi) = if lo > 0.0 {
                        (lo / 2.0, hi * 2.0)
                    } else {
                        (lo - 1.0, hi + 1.0)
                    };
                }
                let ticks = if log {
                    log_ticks(lo, hi)
                } else {
                    let step = nice_step(hi - lo, 6.0);
                    steps((lo / step).ceil() * step, hi, step)
                };
                Scale {
                    lo,
                    hi,
                    log,
                    pad: 0.05,
                    ticks,
                }
            }
        }
    }

    /// Where `v` falls between 0 (the low end, padding included) and 1 (the high end).
    pub fn share(&self, v: f64) -> f64 {
        let (a, b, v) = if self.log {
            (
                self.lo.log10(),
                self.hi.log10(),
                v.max(f64::MIN_POSITIVE).log10(),
            )
        } else {
            (self.lo, self.hi, v)
        };
        let pad = (b - a) * self.pad;
        (v - (a - pad)) / ((b + pad) - (a - pad))
    }
}

/// `lo`, `lo + step`, ... up to `hi` (at most 50 of them).
fn steps(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    (0..50)
        .map(|i| lo + step * f64::from(i))
        .take_while(|t| *t <= hi + step * 1e-6)
        .collect()
}

/// 1, 2 and 5 × 10^k within `lo..=hi`.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = 10f64.powf(lo.log10().floor());
    while decade <= hi * 1.0001 && ticks.len() < 40 {
        for m in [1.0, 2.0, 5.0] {
            let t = decade * m;
            if t >= lo * 0.9999 && t <= hi * 1.0001 {
                ticks.push(t);
            }
        }
        decade *= 10.0;
    }
    ticks
}

impl Chart {
    /// A chart with the given axes and lines, no goal, its legend inside, lines as paths.
    pub fn new(title: &str, x: Axis, y: Axis, series: Vec<Series>) -> Chart {
        Chart {
            title: title.to_string(),
            x,
            y,
            series,
            goal: None,
            width: 720.0,
            height: 260.0,
            legend: Legend::Inside,
        }
    }

    /// A standalone SVG document: the title drawn above the plot, on a white background.
    pub fn svg(&self) -> String {
        let mut s = String::new();
        let (w, h) = (self.width, self.height);
        let _ = writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12" role="img" aria-label="{}">"#,
            escape(&self.title)
        );
        let _ = writeln!(
            s,
            r#"<rect x="0" y="0" width="{w}" height="{h}" fill="white"/>"#
        );
        let _ = writeln!(
            s,
            r#"<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>"#,
            w / 2.0,
            escape(&self.title)
        );
        self.plot(&mut s, TOP + TITLE_ROOM);
        s.push_str("</svg>\n");
        s
    }

    /// An HTML `<figure id=…>`: the title as its caption, the SVG inline.
    pub fn figure(&self, id: &str) -> String {
        let (w, h) = (self.width, self.height);
        let mut s = String::new();
        let _ = write!(
            s,
            r#"<figure id="{}"><figcaption>{}</figcaption><svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} {h}" width="{w}" height="{h}" font-family="sans-serif" font-size="12" role="img" aria-label="{}">"#,
            escape(id),
            escape(&self.title),
            escape(&self.title)
        );
        self.plot(&mut s, TOP);
        s.push_str("</svg></figure>\n");
        s
    }

    /// The plot box, axes, goal, lines and legend, the box starting `top` from the top edge.
    fn plot(&self, s: &mut String, top: f64) {
        let series: Vec<Series> = self
            .series
            .iter()
            .map(|l| Series {
                label: l.label.clone(),
                points: thin(&l.points),
            })
            .collect();
        let xs: Vec<f64> = series
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.0))
            .collect();
        let ys: Vec<f64> = series
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1))
            .collect();
        let (sx, sy) = (
            Scale::new(&self.x.range, &xs),
            Scale::new(&self.y.range, &ys),
        );
        let left = LEFT;
        let right = self.width
            - match self.legend {
                Legend::Inside => RIGHT,
                Legend::Right => LEGEND_ROOM,
            };
        let bottom = self.height - BOTTOM;
        let px = |v: f64| left + sx.share(v) * (right - left);
        let py = |v: f64| bottom - sy.share(v) * (bottom - top);

        let _ = writeln!(
            s,
            r##"<rect x="{left}" y="{top}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>"##,
            right - left,
            bottom - top
        );
        for t in &sy.ticks {
            let y = py(*t);
            let _ = writeln!(
                s,
                r##"<line x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="#e0e0e0"/><line x1="{}" y1="{y:.1}" x2="{left}" y2="{y:.1}" stroke="#999"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end">{}</text>"##,
                left - 4.0,
                left - 6.0,
                y + 4.0,
                escape(&tick_label(*t))
            );
        }
        for t in &sx.ticks {
            let x = px(*t);
            let _ = writeln!(
                s,
                r##"<line x1="{x:.1}" y1="{bottom}" x2="{x:.1}" y2="{}" stroke="#999"/><text x="{x:.1}" y="{}" font-size="11" text-anchor="middle">{}</text>"##,
                bottom + 4.0,
                bottom + 16.0,
                escape(&tick_label(*t))
            );
        }
        let x_label = if sx.log {
            format!("{} (log scale)", self.x.label)
        } else {
            self.x.label.clone()
        };
        let mid_y = (top + bottom) / 2.0;
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text><text x="14" y="{mid_y:.1}" text-anchor="middle" transform="rotate(-90 14 {mid_y:.1})">{}</text>"#,
            (left + right) / 2.0,
            self.height - 6.0,
            escape(&x_label),
            escape(&self.y.label)
        );
        if let Some(goal) = &self.goal {
            let y = py(goal.value);
            let _ = writeln!(
                s,
                r#"<line class="goal" x1="{left}" y1="{y:.1}" x2="{right}" y2="{y:.1}" stroke="{GOAL_COLOUR}" stroke-width="1.5" stroke-dasharray="6 4"/><text x="{}" y="{:.1}" font-size="11" text-anchor="end" fill="{GOAL_COLOUR}">{}</text>"#,
                right - 4.0,
                y - 5.0,
                escape(&goal.label)
            );
        }
        if series.iter().all(|l| l.points.is_empty()) {
            let _ = writeln!(
                s,
                r#"<text x="{:.1}" y="{mid_y:.1}" text-anchor="middle">no data</text>"#,
                (left + right) / 2.0
            );
        }
        for (i, line) in series.iter().enumerate() {
            let colour = PALETTE[i % PALETTE.len()];
            let label = escape(&line.label);
            if line.points.is_empty() {
                continue;
            }
            let coords: Vec<String> = line
                .points
                .iter()
                .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
                .collect();
            let _ = writeln!(
                s,
                r#"<path class="series" data-series="{label}" d="M{}" fill="none" stroke="{colour}" stroke-width="1.5"><title>{label}</title></path>"#,
                coords.join(" L")
            );
            if line.points.len() <= MARKED_POINTS {
                for (x, y) in &line.points {
                    let _ = writeln!(
                        s,
                        r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"><title>{}</title></circle>"#,
                        px(*x),
                        py(*y),
                        escape(&format!(
                            "{}: {} = {}, {}",
                            line.label,
                            self.x.label,
                            tick_label(*x),
                            tick_label(*y)
                        ))
                    );
                }
            }
        }
        self.legend(s, &series, (top, right));
    }

    /// One row per line, then the goal's.
    fn legend(&self, s: &mut String, series: &[Series], (top, right): (f64, f64)) {
        let lx = match self.legend {
            Legend::Inside => right - 170.0,
            Legend::Right => right + 12.0,
        };
        let labels = series
            .iter()
            .enumerate()
            .map(|(i, l)| (PALETTE[i % PALETTE.len()], l.label.as_str(), ""))
            .chain(
                self.goal
                    .iter()
                    .map(|g| (GOAL_COLOUR, g.label.as_str(), r#" stroke-dasharray="6 4""#)),
            );
        for (i, (colour, label, dash)) in labels.enumerate() {
            let ly = top + 14.0 + LEGEND_ROW * i as f64;
            if self.legend == Legend::Inside {
                // Over the lines: on a white box so the text stays readable.
                let _ = write!(
                    s,
                    r##"<rect x="{:.1}" y="{:.1}" width="166" height="{LEGEND_ROW}" fill="#ffffff" fill-opacity="0.85"/>"##,
                    lx - 4.0,
                    ly - 12.0
                );
            }
            let _ = writeln!(
                s,
                r#"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"{dash}/><text x="{:.1}" y="{ly:.1}" font-size="11">{}</text>"#,
                ly - 4.0,
                lx + 14.0,
                ly - 4.0,
                lx + 18.0,
                escape(label)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(label: &str, points: &[(f64, f64)]) -> Series {
        Series {
            label: label.into(),
            points: points.to_vec(),
        }
    }

    fn chart(x: Range, y: Range, series: Vec<Series>) -> Chart {
        Chart::new("t", Axis::new("x", x), Axis::new("y", y), series)
    }

    /// The numbers of one attribute of every `<path>`'s `d` or `<polyline>`'s `points`.
    fn coords(svg: &str, attr: &str) -> Vec<Vec<(f64, f64)>> {
        svg.split(&format!(" {attr}=\""))
            .skip(1)
            .map(|rest| {
                rest.split('"')
                    .next()
                    .unwrap()
                    .split([' ', 'M', 'L'])
                    .filter(|p| !p.is_empty())
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn ticks_drop_trailing_zeros_and_group_thousands() {
        assert_eq!(tick_label(2.5), "2.5");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(0.125), "0.125");
        assert_eq!(tick_label(5.0), "5");
        assert_eq!(tick_label(1500.0), "1 500");
        assert_eq!(tick_label(25_000.0), "25k");
        assert_eq!(tick_label(12_500.0), "12 500");
        assert_eq!(thousands(1_234_567.0), "1 234 567");
        assert_eq!(thousands(-29_500.4), "-29 500");
    }

    #[test]
    fn axes_end_on_round_numbers() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(f64::NAN), 1.0);
        assert_eq!(nice_max(0.73), 1.0);
        assert_eq!(nice_max(1.2), 2.0);
        assert_eq!(nice_max(340.0), 500.0);
        assert_eq!(nice_max(1000.0), 1000.0);
        assert_eq!(nice_max(6000.0), 10_000.0);
        assert_eq!(nice_step(12.0, 6.0), 2.0);
        assert_eq!(nice_step(900.0, 6.0), 200.0);
        assert!(nice_step(0.0, 6.0) > 0.0, "an empty span still steps");
    }

    #[test]
    fn scales_resolve_each_range() {
        let from_zero = Scale::new(&Range::FromZero, &[3.0, 340.0]);
        assert_eq!((from_zero.lo, from_zero.hi), (0.0, 500.0));
        assert_eq!(from_zero.ticks, [0.0, 125.0, 250.0, 375.0, 500.0]);
        assert_eq!(from_zero.share(250.0), 0.5);
        assert_eq!(Scale::new(&Range::ZeroTo(1.0), &[7.0]).hi, 1.0);
        assert_eq!(Scale::new(&Range::FromZero, &[]).hi, 1.0);

        let rounded = Scale::new(
            &Range::Rounded {
                include: vec![1.0, 1.3],
            },
            &[1.12, 1.41],
        );
        // Span 0.41 in about six: steps of 0.1, from 1.0 (included) to 1.5 (above 1.41).
        assert_eq!(rounded.ticks.len(), 6, "{rounded:?}");
        assert!((rounded.lo - 1.0).abs() < 1e-9 && (rounded.hi - 1.5).abs() < 1e-9);

        let linear = Scale::new(&Range::Padded, &[100.0, 300.0]);
        assert!(!linear.log);
        assert_eq!(linear.ticks, [100.0, 150.0, 200.0, 250.0, 300.0]);
        assert!((linear.share(100.0) - 0.05 / 1.1).abs() < 1e-9, "padded");

        let log = Scale::new(&Range::Padded, &[100.0, 1000.0, 5000.0]);
        assert!(log.log);
        assert_eq!(log.ticks, [100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0]);
        assert!(
            (log.share(1000.0) - log.share(100.0) - (log.share(10_000.0) - log.share(1000.0)))
                .abs()
                < 1e-9,
            "a decade is as wide as the next"
        );

        let one = Scale::new(&Range::Padded, &[400.0]);
        assert_eq!(
            (one.lo, one.hi),
            (200.0, 800.0),
            "one value: a domain around it"
        );
        let none = Scale::new(&Range::Padded, &[f64::NAN]);
        assert_eq!((none.lo, none.hi), (0.0, 1.0));
    }

    #[test]
    fn a_line_goes_through_its_points() {
        // 720 × 260, legend inside: the plot spans x 64..704 and y 16..220 in a figure.
        let c = chart(
            Range::FromZero,
            Range::ZeroTo(1.0),
            vec![line("a", &[(0.0, 0.0), (5.0, 0.5), (10.0, 1.0)])],
        );
        assert_eq!(
            coords(&c.figure("f"), "d"),
            [vec![(64.0, 220.0), (384.0, 118.0), (704.0, 16.0)]]
        );
        let mut c = c;
        c.legend = Legend::Right;
        // A standalone SVG: the title takes 24 more above, the legend 220 on the right.
        let svg = c.svg();
        assert_eq!(
            coords(&svg, "d"),
            [vec![(64.0, 220.0), (282.0, 130.0), (500.0, 40.0)]]
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3, "short lines are marked");
    }

    #[test]
    fn long_lines_are_thinned_keeping_the_last_point() {
        let points: Vec<(f64, f64)> = (0..10_000).map(|i| (f64::from(i), 0.0)).collect();
        let thinned = thin(&points);
        assert!(thinned.len() <= MAX_POINTS + 1);
        assert_eq!(thinned.first(), Some(&(0.0, 0.0)));
        assert_eq!(thinned.last(), Some(&(9999.0, 0.0)));
        let c = chart(Range::FromZero, Range::FromZero, vec![line("a", &points)]);
        let figure = c.figure("f");
        assert_eq!(coords(&figure, "d")[0].len(), thinned.len());
        assert!(!figure.contains("<circle"), "long lines are not marked");
    }

    #[test]
    fn labels_are_escaped_and_tags_balance() {
        let mut c = chart(
            Range::Padded,
            Range::Rounded { include: vec![] },
            vec![line("a<b>&\"c'\n", &[(1.0, 1.0), (2.0, 3.0)])],
        );
        c.title = "<t>".into();
        c.goal = Some(Goal {
            value: 2.0,
            label: "goal ≤ 2 & <more>".into(),
        });
        for out in [c.svg(), c.figure("id\"x")] {
            assert!(out.contains("a&lt;b&gt;&amp;&quot;c&apos; "), "{out}");
            assert!(out.contains("goal ≤ 2 &amp; &lt;more&gt;"));
            assert!(!out.contains("<t>") && !out.contains("id\"x"));
            assert_eq!(out.matches('<').count(), out.matches('>').count());
            assert_eq!(out.matches("<text").count(), out.matches("</text>").count());
            assert_eq!(out.matches(r#"class="goal""#).count(), 1);
        }
    }

    #[test]
    fn an_empty_chart_says_so_with_finite_numbers() {
        for range in [
            Range::FromZero,
            Range::Padded,
            Range::Rounded { include: vec![] },
        ] {
            let c = chart(range.clone(), range, vec![]);
            for out in [c.svg(), c.figure("e")] {
                assert!(out.contains("no data"));
                assert!(!out.contains("NaN") && !out.contains("inf"), "{out}");
            }
        }
    }

    #[test]
    fn each_line_has_its_own_colour_and_legend_row() {
        let c = chart(
            Range::FromZero,
            Range::FromZero,
            vec![line("one", &[(0.0, 1.0)]), line("two", &[(0.0, 2.0)])],
        );
        let out = c.figure("f");
        assert_eq!(out.matches(r#"<path class="series""#).count(), 2);
        assert!(
            out.contains(r##"data-series="one" d="M64.0,118.0" fill="none" stroke="#1f77b4""##),
            "{out}"
        );
        assert!(out.contains(r##"stroke="#ff7f0e""##));
        assert_eq!(out.matches(">one</text>").count(), 1);
        assert_eq!(out.matches(">two</text>").count(), 1);
    }
}
