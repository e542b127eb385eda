//! Exponential backoff with jitter, shared by REST retries and watch
//! reconnects. Pure arithmetic over a clock value and a random number the
//! caller passes in (`next_at`), so it is tested without sleeping; the
//! convenience `next` reads the real clock and `rand`.
//!
//! The shape is client-go's `ExponentialBackoffManager` as the reflector
//! uses it: start at `initial`, double up to `max`, add up to `jitter` x the
//! step at random, and start over when no backoff was asked for during
//! `reset_after` (the connection was healthy that long).

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    jitter: f64,
    reset_after: Duration,
    step: Duration,
    last: Option<Instant>,
}

impl Backoff {
    /// `jitter` is a fraction of the step (client-go uses 1.0: up to +100 %).
    pub fn new(initial: Duration, max: Duration, jitter: f64, reset_after: Duration) -> Backoff {
        Backoff {
            initial,
            max,
            jitter: jitter.max(0.0),
            reset_after,
            step: initial,
            last: None,
        }
    }

    /// client-go's watch reconnect backoff: 0.8 s doubling to 30 s, jitter
    /// 1.0, reset after 2 minutes without a backoff.
    pub fn watch() -> Backoff {
        Backoff::new(
            Duration::from_millis(800),
            Duration::from_secs(30),
            1.0,
            Duration::from_secs(120),
        )
    }

    /// The next delay, using the real clock and a random jitter.
    pub fn next_delay(&mut self) -> Duration {
        self.next_at(Instant::now(), rand::random::<f64>())
    }

    /// The next delay at `now`, with `rand01` in [0, 1) choosing the jitter.
    /// The result never exceeds `max` (jitter included).
    pub fn next_at(&mut self, now: Instant, rand01: f64) -> Duration {
        if let Some(last) = self.last {
            if now.saturating_duration_since(last) >= self.reset_after {
                self.step = self.initial;
            }
        }
        self.last = Some(now);
        let base = self.step.min(self.max);
        self.step = (self.step * 2).min(self.max);
        let extra = base.mul_f64(self.jitter * rand01.clamp(0.0, 1.0));
        (base + extra).min(self.max)
    }

    /// Starts over at `initial` (after a success).
    pub fn reset(&mut self) {
        self.step = self.initial;
        self.last = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_caps_and_resets() {
        let mut b = Backoff::watch();
        let t0 = Instant::now();
        let d: Vec<u64> = (0..8)
            .map(|i| {
                b.next_at(t0 + Duration::from_secs(i), 0.0)
                    .as_millis()
                    .try_into()
                    .unwrap_or(u64::MAX)
            })
            .collect();
        assert_eq!(d, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
        // Two healthy minutes later it starts over.
        assert_eq!(
            b.next_at(t0 + Duration::from_secs(200), 0.0),
            Duration::from_millis(800)
        );
    }

    #[test]
    fn jitter_adds_up_to_one_step_and_never_exceeds_max() {
        let mut b = Backoff::watch();
        let t0 = Instant::now();
        assert_eq!(b.next_at(t0, 0.5), Duration::from_millis(1200));
        for _ in 0..10 {
            assert!(b.next_at(t0, 0.999) <= Duration::from_secs(30));
        }
        b.reset();
        assert_eq!(b.next_at(t0, 0.0), Duration::from_millis(800));
    }
}
