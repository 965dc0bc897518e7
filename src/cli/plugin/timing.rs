//! Timings of plugin calls for `plugin check` and `plugin run`: the best of a few runs, in µs.
//!
//! Owns: how a call is timed and how its time is printed. Must not touch: the calls themselves.

use std::time::{Duration, Instant};

pub(super) fn micros(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

/// Times `f` over a few runs and returns its last result and the best time.
pub(super) fn timed<T>(runs: usize, mut f: impl FnMut() -> T) -> (T, Duration) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs.max(1) {
        let started = Instant::now();
        last = Some(f());
        best = best.min(started.elapsed());
    }
    // ok: runs.max(1) iterations ran, so `last` is set.
    #[allow(clippy::expect_used)]
    (last.expect("ran at least once"), best)
}
