//! `diorch simulate generate`: a synthetic trace from a seed, with the distributions documented
//! in docs/simulator.md and on [`GenerateArgs`].
//!
//! The random numbers are SplitMix64, written out here rather than taken from a crate: a trace
//! must be the same for the same seed on every version of diorch, and general-purpose RNG
//! crates do not promise their streams stay the same across releases.
//!
//! Owns: the distributions and the trace's YAML text. Must not touch: the simulation.

use std::fmt::Write as _;

use super::input::MAX_JOBS;

/// The shape of the load.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Load {
    /// Poisson arrivals at the given mean gap; 30 % of jobs elastic.
    Steady,
    /// A tenth of the jobs arrive at the mean gap, then the rest at a twentieth of it, then
    /// the gap again: a burst that queues.
    Burst,
    /// As steady, with 90 % of jobs elastic.
    Elastic,
    /// For preemption: three quarters of the jobs are long, normal-priority elastic jobs
    /// arriving at a twentieth of the mean gap to fill the cluster, their collectors holding a
    /// GPU each (so shrinking them frees GPUs); the last quarter are urgent high-priority rigid
    /// jobs arriving at the mean gap from 900 seconds (`URGENT_AFTER`) after the last filler.
    Urgent,
}

/// Seconds from the last filler's arrival to the first urgent job's earliest arrival in
/// `--load urgent`: past pod starts and the operator's default 600-second
/// --preemption-min-run-time, so the fillers have run long enough to be evicted.
pub const URGENT_AFTER: f64 = 900.0;

#[derive(clap::Args, Debug, Clone)]
pub struct GenerateArgs {
    /// How many jobs.
    #[arg(long)]
    pub jobs: usize,
    /// Same seed, same trace.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[arg(long, value_enum, default_value_t = Load::Steady)]
    pub load: Load,
    /// Mean seconds between arrivals (exponentially distributed gaps).
    #[arg(long, default_value_t = 60.0)]
    pub interarrival: f64,
    /// Shortest and longest run time in seconds (log-uniform between them).
    #[arg(long, default_value_t = 300.0)]
    pub min_duration: f64,
    #[arg(long, default_value_t = 14_400.0)]
    pub max_duration: f64,
    /// Write here instead of standard output.
    #[arg(short, long)]
    pub output: Option<std::path::PathBuf>,
}

/// SplitMix64 (Steele, Lea and Flood 2014): small, fast, and fixed forever.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), 53 bits.
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `lo..=hi`.
    fn between(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi - lo) + 1;
        lo + u32::try_from(self.next_u64() % span).unwrap_or(0)
    }

    /// Exponential with `mean`.
    fn exponential(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.unit()).ln()
    }

    /// One of `choices` by weight.
    fn pick<T: Copy>(&mut self, choices: &[(T, u32)]) -> T {
        let total: u32 = choices.iter().map(|(_, w)| w).sum();
        let mut r = self.between(0, total.saturating_sub(1));
        for (v, w) in choices {
            if r < *w {
                return *v;
            }
            r -= w;
        }
        choices[choices.len() - 1].0
    }
}

/// The trace's YAML, or why the arguments cannot make one.
pub fn generate(args: &GenerateArgs) -> Result<String, String> {
    if args.jobs == 0 || args.jobs > MAX_JOBS {
        return Err(format!("--jobs must be between 1 and {MAX_JOBS}"));
    }
    let ok = |v: f64| v.is_finite() && v > 0.0 && v <= 86_400.0 * 30.0;
    if !ok(args.interarrival) || !ok(args.min_duration) || !ok(args.max_duration) {
        return Err(
            "--interarrival, --min-duration and --max-duration must be above 0 and at most 30 days"
                .into(),
        );
    }
    if args.min_duration > args.max_duration {
        return Err("--min-duration is above --max-duration".into());
    }
    if args.load == Load::Urgent && args.jobs < 2 {
        return Err("--load urgent needs at least 2 jobs: fillers and urgent ones".into());
    }
    let elastic_share = match args.load {
        Load::Elastic => 0.9,
        Load::Steady | Load::Burst | Load::Urgent => 0.3,
    };
    let mut rng = SplitMix64(args.seed);
    let mut out = String::from("# diorch simulate generate");
    let _ = writeln!(
        out,
        " --jobs {} --seed {} --load {:?} --interarrival {} --min-duration {} --max-duration {}",
        args.jobs, args.seed, args.load, args.interarrival, args.min_duration, args.max_duration
    );
    out.push_str("jobs:\n");
    if args.load == Load::Urgent {
        urgent(args, &mut rng, &mut out);
        return Ok(out);
    }
    let mut t = 0.0f64;
    let burst = (args.jobs / 10, args.jobs / 10 + args.jobs * 6 / 10);
    for i in 0..args.jobs {
        let gap = match args.load {
            Load::Burst if (burst.0..burst.1).contains(&i) => args.interarrival / 20.0,
            _ => args.interarrival,
        };
        if i > 0 {
            t += rng.exponential(gap);
        }
        let gpus = rng.pick(&[(1u32, 40), (2, 30), (4, 20), (8, 10)]);
        // Log-uniform: as many short jobs per decade as long ones.
        let (lo, hi) = (args.min_duration.ln(), args.max_duration.ln());
        let duration = (lo + (hi - lo) * rng.unit()).exp();
        let high = rng.unit() < 0.1;
        let elastic = rng.unit() < elastic_share;
        let _ = write!(
            out,
            "  - name: job-{i:06}\n    arrival: {t:.3}\n    priority: {}\n",
            if high { "high" } else { "normal" }
        );
        out.push_str("    tasks:\n");
        let _ = writeln!(
            out,
            "      - {{type: learner, replicas: 1, requests: {{cpu: {}, memory: {}Gi, gpus: {gpus}}}}}",
            4 * gpus,
            16 * gpus
        );
        if elastic {
            let collectors = rng.between(2, 8);
            // Throughput saturates: T(c) = peak * (1 - exp(-c / knee)), knee in 2..=8.
            let knee = f64::from(rng.between(2, 8));
            let peak = 1000.0 * f64::from(gpus);
            let _ = writeln!(
                out,
                "      - {{type: collector, replicas: {collectors}, minReplicas: 1, maxReplicas: 16, requests: {{cpu: 2, memory: 4Gi}}}}"
            );
            out.push_str("    throughput: {");
            for (n, c) in [1u32, 2, 4, 8, 16].iter().enumerate() {
                let rate = peak * (1.0 - (-f64::from(*c) / knee).exp());
                let _ = write!(out, "{}{c}: {rate:.1}", if n > 0 { ", " } else { "" });
            }
            out.push_str("}\n");
            // Work: the duration at the first collector count.
            let first = peak * (1.0 - (-f64::from(collectors) / knee).exp());
            let _ = writeln!(out, "    work: {:.1}", duration * first);
        } else {
            let _ = writeln!(out, "    duration: {duration:.1}");
        }
    }
    Ok(out)
}

/// `--load urgent`'s jobs (see [`Load::Urgent`]).
fn urgent(args: &GenerateArgs, rng: &mut SplitMix64, out: &mut String) {
    let urgent = (args.jobs / 4).max(1);
    let fillers = args.jobs - urgent;
    // Log-uniform in lo..=hi.
    let log_uniform = |rng: &mut SplitMix64, lo: f64, hi: f64| {
        let (lo, hi) = (lo.ln(), hi.ln());
        (lo + (hi - lo) * rng.unit()).exp()
    };
    let mut t = 0.0f64;
    for i in 0..fillers {
        if i > 0 {
            t += rng.exponential(args.interarrival / 20.0);
        }
        let gpus = rng.pick(&[(1u32, 50), (2, 35), (4, 15)]);
        // Long: the upper half of the range, by ratio.
        let lo = (args.max_duration / 2.0).max(args.min_duration);
        let duration = log_uniform(rng, lo, args.max_duration);
        let collectors = rng.between(2, 8);
        let knee = f64::from(rng.between(2, 8));
        let peak = 1000.0 * f64::from(collectors + gpus);
        let _ = write!(
            out,
            "  - name: fill-{i:06}\n    arrival: {t:.3}\n    priority: normal\n    tasks:\n"
        );
        let _ = writeln!(
            out,
            "      - {{type: learner, replicas: 1, requests: {{cpu: {}, memory: {}Gi, gpus: {gpus}}}}}",
            4 * gpus,
            16 * gpus
        );
        let _ = writeln!(
            out,
            "      - {{type: collector, replicas: {collectors}, minReplicas: 1, maxReplicas: {collectors}, requests: {{cpu: 2, memory: 8Gi, gpus: 1}}}}"
        );
        out.push_str("    throughput: {");
        for (n, c) in [1u32, 2, 4, 8].iter().enumerate() {
            let rate = peak * (1.0 - (-f64::from(*c) / knee).exp());
            let _ = write!(out, "{}{c}: {rate:.1}", if n > 0 { ", " } else { "" });
        }
        out.push_str("}\n");
        let first = peak * (1.0 - (-f64::from(collectors) / knee).exp());
        let _ = writeln!(out, "    work: {:.1}", duration * first);
    }
    t += URGENT_AFTER;
    for i in 0..urgent {
        t += rng.exponential(args.interarrival);
        let gpus = rng.pick(&[(2u32, 30), (4, 40), (8, 30)]);
        // Short: the lower part of the range, up to a quarter of the longest.
        let hi = (args.max_duration / 4.0).max(args.min_duration);
        let duration = log_uniform(rng, args.min_duration, hi);
        let _ = write!(
            out,
            "  - name: urgent-{i:06}\n    arrival: {t:.3}\n    priority: high\n    tasks:\n"
        );
        let _ = writeln!(
            out,
            "      - {{type: learner, replicas: 1, requests: {{cpu: {}, memory: {}Gi, gpus: {gpus}}}}}",
            4 * gpus,
            16 * gpus
        );
        let _ = writeln!(out, "    duration: {duration:.1}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulate::input::Trace;

    fn args(jobs: usize, seed: u64, load: Load) -> GenerateArgs {
        GenerateArgs {
            jobs,
            seed,
            load,
            interarrival: 60.0,
            min_duration: 300.0,
            max_duration: 14_400.0,
            output: None,
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_trace_and_it_loads() {
        let a = generate(&args(200, 7, Load::Steady)).unwrap();
        assert_eq!(a, generate(&args(200, 7, Load::Steady)).unwrap());
        assert_ne!(a, generate(&args(200, 8, Load::Steady)).unwrap());
        let trace = Trace::from_yaml(&a).unwrap();
        assert_eq!(trace.jobs.len(), 200);
        let elastic = trace.jobs.iter().filter(|j| j.collector.is_some()).count();
        // 30 % elastic: 60 of 200 expected; a binomial sd is ~6.5.
        assert!((30..=90).contains(&elastic), "{elastic}");
        let mut durations: Vec<f64> = trace
            .jobs
            .iter()
            .filter(|j| j.collector.is_none())
            .map(|j| j.work)
            .collect();
        durations.sort_by(f64::total_cmp);
        assert!(durations[0] >= 300.0 && durations[durations.len() - 1] <= 14_400.0);
    }

    #[test]
    fn the_stream_is_fixed() {
        // SplitMix64's published first outputs for seed 0, so the stream can never drift.
        let mut r = SplitMix64(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn a_burst_packs_most_arrivals_into_a_short_window() {
        let trace = Trace::from_yaml(&generate(&args(1000, 3, Load::Burst)).unwrap()).unwrap();
        let at = |i: usize| trace.jobs[i].arrival_ms as f64 / 1000.0;
        let burst = at(700) - at(100);
        let calm = at(999) - at(700);
        // 600 gaps at 3 s against 300 at 60 s.
        assert!(burst * 5.0 < calm, "burst {burst} s, calm {calm} s");
    }

    /// Fillers first, all normal, elastic (min below replicas) and long; then urgent jobs, all
    /// high and rigid, arriving after the last filler plus [`URGENT_AFTER`]; the same seed
    /// gives the same trace, and the other loads are untouched by the new one.
    #[test]
    fn an_urgent_load_fills_with_elastic_jobs_then_sends_high_priority_ones() {
        let a = generate(&args(40, 5, Load::Urgent)).unwrap();
        assert_eq!(a, generate(&args(40, 5, Load::Urgent)).unwrap());
        assert_ne!(a, generate(&args(40, 6, Load::Urgent)).unwrap());
        let trace = Trace::from_yaml(&a).unwrap();
        assert_eq!(trace.jobs.len(), 40);
        let (fill, urgent): (Vec<_>, Vec<_>) = trace
            .jobs
            .iter()
            .partition(|j| j.spec.name.starts_with("fill-"));
        assert_eq!((fill.len(), urgent.len()), (30, 10));
        let filled = fill.iter().map(|j| j.arrival_ms).max().unwrap();
        for j in &fill {
            assert_eq!(j.spec.priority, crate::simulate::input::Priority::Normal);
            assert!(j.spec.preemptible);
            let c = &j.spec.tasks[j.collector.expect("elastic")];
            let min = c.min_replicas.expect("minReplicas");
            assert!(min < c.replicas && (2..=8).contains(&c.replicas), "{c:?}");
            // Long: at least half the longest run time, at the first collector count.
            assert!(
                j.work / j.rate(c.replicas) >= 7_200.0 - 1.0,
                "{}",
                j.spec.name
            );
        }
        for j in &urgent {
            assert_eq!(j.spec.priority, crate::simulate::input::Priority::High);
            assert!(j.spec.preemptible && j.collector.is_none());
            assert!(j.arrival_ms as f64 >= filled as f64 + URGENT_AFTER * 1000.0);
        }
        // Every urgent job comes after every filler in the file too.
        assert!(
            trace.jobs[..30]
                .iter()
                .all(|j| j.spec.name.starts_with("fill-"))
        );
        // The other loads are as they were: the shipped traces come out byte for byte.
        for (text, load, jobs, seed, gap) in [
            (
                include_str!("../../examples/simulator/steady.yaml"),
                Load::Steady,
                300,
                11,
                100.0,
            ),
            (
                include_str!("../../examples/simulator/burst.yaml"),
                Load::Burst,
                200,
                12,
                100.0,
            ),
            (
                include_str!("../../examples/simulator/elastic.yaml"),
                Load::Elastic,
                200,
                13,
                120.0,
            ),
        ] {
            let mut a = args(jobs, seed, load);
            a.interarrival = gap;
            assert_eq!(generate(&a).unwrap(), text, "{load:?}");
        }
        assert!(generate(&args(1, 1, Load::Urgent)).is_err());
    }

    #[test]
    fn bad_arguments_are_refused() {
        assert!(generate(&args(0, 1, Load::Steady)).is_err());
        let mut a = args(10, 1, Load::Steady);
        a.min_duration = 500.0;
        a.max_duration = 100.0;
        assert!(generate(&a).is_err());
        a.max_duration = f64::NAN;
        assert!(generate(&a).is_err());
    }
}
