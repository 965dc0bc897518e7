//! Client-side rate limit of the controller's writes (`--qps`, `--burst`, as client-go's token
//! bucket in DI-orchestrator). Reads come from watches, so limiting writes limits the load the
//! operator puts on the API server.
//!
//! Hand-written (a token bucket is a dozen lines) rather than pulling a rate-limiting crate and
//! its dependencies into every build.

use std::time::Duration;

use tokio::sync::Mutex;
// tokio's clock, so that tests run the bucket in virtual time (`tokio::time::pause`).
use tokio::time::Instant;

/// A token bucket shared by all writers; `qps <= 0` disables it.
pub struct Throttle {
    bucket: Option<Mutex<Bucket>>,
}

struct Bucket {
    qps: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl Bucket {
    /// Takes a token, going into debt if none is left; returns how long to wait for it.
    fn reserve(&mut self, now: Instant) -> Duration {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.qps).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.qps)
        }
    }
}

impl Throttle {
    pub fn new(qps: f32, burst: u32) -> Throttle {
        let qps = f64::from(qps);
        let burst = f64::from(burst.max(1));
        Throttle {
            bucket: (qps > 0.0).then(|| {
                Mutex::new(Bucket {
                    qps,
                    burst,
                    tokens: burst,
                    last: Instant::now(),
                })
            }),
        }
    }

    /// Waits for the right to issue one write.
    pub async fn acquire(&self) {
        let Some(bucket) = &self.bucket else {
            return;
        };
        let wait = bucket.lock().await.reserve(Instant::now());
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_passes_then_writes_are_spaced_at_qps() {
        let t0 = Instant::now();
        let mut b = Bucket {
            qps: 10.0,
            burst: 3.0,
            tokens: 3.0,
            last: t0,
        };
        for _ in 0..3 {
            assert_eq!(b.reserve(t0), Duration::ZERO);
        }
        let waits: Vec<u128> = (0..3).map(|_| b.reserve(t0).as_millis()).collect();
        assert_eq!(waits, [100, 200, 300], "queued writers wait in turn");
        // After a long pause the bucket is full again, never more than the burst.
        let later = t0 + Duration::from_secs(60);
        for _ in 0..3 {
            assert_eq!(b.reserve(later), Duration::ZERO);
        }
        assert!(b.reserve(later) > Duration::ZERO);
    }

    /// The bucket as writers see it, in virtual time: the burst goes at once, then one write
    /// per 1/qps, and a writer waits exactly its turn.
    #[tokio::test(start_paused = true)]
    async fn acquire_lets_the_burst_through_then_spaces_writers_at_qps() {
        let throttle = Throttle::new(10.0, 3);
        let start = Instant::now();
        let mut done = Vec::new();
        for _ in 0..6 {
            throttle.acquire().await;
            done.push(start.elapsed().as_millis());
        }
        assert_eq!(done, [0, 0, 0, 100, 200, 300]);
        // Disabled: never waits.
        let free = Throttle::new(0.0, 1);
        let start = Instant::now();
        for _ in 0..100 {
            free.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
