//! The clock the daemon's fencing runs on: `CLOCK_BOOTTIME`, which keeps
//! counting while the machine (or the process, stopped) is suspended.
//! Rust's `Instant` is `CLOCK_MONOTONIC` on Linux, which stops during a
//! suspend: a laptop or a VM paused past the Lease duration would wake up
//! believing its renew deadline had not passed, and act beside the peer
//! that took its sessions (docs/ha.md).

use std::time::Duration;

/// A reading of `CLOCK_BOOTTIME`, in nanoseconds since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mono(u64);

impl Mono {
    /// The clock now.
    pub fn now() -> Mono {
        let ts = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
        let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
        let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
        Mono(secs.saturating_mul(1_000_000_000).saturating_add(nanos))
    }

    /// A reading `ns` nanoseconds after boot (tests, and arithmetic).
    pub fn from_nanos(ns: u64) -> Mono {
        Mono(ns)
    }

    /// How long after `earlier` this is (zero if it is not after it).
    pub fn since(self, earlier: Mono) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `d` later.
    pub fn after(self, d: Duration) -> Mono {
        Mono(
            self.0
                .saturating_add(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boottime_moves_forward_with_real_time() {
        let a = Mono::now();
        let i = std::time::Instant::now();
        // A busy wait of a few milliseconds: both clocks see it.
        while i.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        let b = Mono::now();
        assert!(b.since(a) >= Duration::from_millis(5), "{a:?} {b:?}");
        assert_eq!(a.since(b), Duration::ZERO);
        assert_eq!(
            Mono::from_nanos(1).after(Duration::from_secs(2)),
            Mono::from_nanos(2_000_000_001)
        );
    }
}
