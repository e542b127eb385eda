//! The restart debounce, sans-IO: fed with (time, change), it says when the
//! quiet period after the last change has passed and what to do then.
//!
//! A burst of writes (an editor's save, a `git checkout`, the daemon's
//! apply of several files) becomes ONE restart once nothing has changed
//! for `quiet` (default 100 ms). Two kinds of change are tracked apart:
//! `restart` (a relevant workspace file) and `manifest` (`kubegate.toml`,
//! re-read for its ports even when an ignore pattern keeps it from
//! restarting the program).

use std::time::{Duration, Instant};

/// What became due.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Due {
    pub restart: bool,
    pub manifest: bool,
}

#[derive(Debug, Clone)]
pub struct Debounce {
    quiet: Duration,
    deadline: Option<Instant>,
    pending: Due,
}

impl Debounce {
    pub fn new(quiet: Duration) -> Debounce {
        Debounce {
            quiet,
            deadline: None,
            pending: Due::default(),
        }
    }

    /// A change seen at `now`: the quiet period starts again.
    pub fn change(&mut self, now: Instant, restart: bool, manifest: bool) {
        if !restart && !manifest {
            return;
        }
        self.pending.restart |= restart;
        self.pending.manifest |= manifest;
        self.deadline = Some(now + self.quiet);
    }

    /// When [`Debounce::poll`] will next have something (None: nothing
    /// pending).
    pub fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// What is due at `now` (then forgotten), or None.
    pub fn poll(&mut self, now: Instant) -> Option<Due> {
        match self.deadline {
            Some(d) if now >= d => {
                self.deadline = None;
                Some(std::mem::take(&mut self.pending))
            }
            _ => None,
        }
    }

    /// A new run started: it sees every file written so far, so pending
    /// restarts are moot (a pending manifest check stays).
    pub fn run_started(&mut self) {
        self.pending.restart = false;
        if !self.pending.manifest {
            self.deadline = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: Duration = Duration::from_millis(100);

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    #[test]
    fn one_change_fires_after_the_quiet_period() {
        let t0 = Instant::now();
        let mut d = Debounce::new(Q);
        assert_eq!(d.deadline(), None);
        assert_eq!(d.poll(t0), None);
        d.change(t0, true, false);
        assert_eq!(d.deadline(), Some(ms(t0, 100)));
        assert_eq!(d.poll(ms(t0, 99)), None);
        assert_eq!(
            d.poll(ms(t0, 100)),
            Some(Due {
                restart: true,
                manifest: false
            })
        );
        assert_eq!(d.poll(ms(t0, 500)), None, "fired once");
        assert_eq!(d.deadline(), None);
    }

    #[test]
    fn a_burst_is_one_restart_after_its_last_change() {
        let t0 = Instant::now();
        let mut d = Debounce::new(Q);
        for i in 0..10 {
            d.change(ms(t0, i * 50), true, false);
            assert_eq!(d.poll(ms(t0, i * 50 + 10)), None);
        }
        // Last change at 450: due at 550.
        assert_eq!(d.deadline(), Some(ms(t0, 550)));
        assert_eq!(d.poll(ms(t0, 549)), None);
        assert!(d.poll(ms(t0, 550)).is_some_and(|due| due.restart));
        assert_eq!(d.poll(ms(t0, 2000)), None);
    }

    #[test]
    fn kinds_accumulate_and_nothing_is_not_a_change() {
        let t0 = Instant::now();
        let mut d = Debounce::new(Q);
        d.change(t0, false, false);
        assert_eq!(d.deadline(), None);
        d.change(t0, false, true);
        d.change(ms(t0, 10), true, false);
        assert_eq!(
            d.poll(ms(t0, 110)),
            Some(Due {
                restart: true,
                manifest: true
            })
        );
    }

    #[test]
    fn a_new_run_absorbs_pending_restarts_but_not_manifest_checks() {
        let t0 = Instant::now();
        let mut d = Debounce::new(Q);
        d.change(t0, true, false);
        d.run_started();
        assert_eq!(d.deadline(), None);
        assert_eq!(d.poll(ms(t0, 1000)), None);

        d.change(t0, true, true);
        d.run_started();
        assert_eq!(
            d.poll(ms(t0, 100)),
            Some(Due {
                restart: false,
                manifest: true
            })
        );
    }
}
