//! One Lease per daemon (docs/ha.md), sans-IO: the timing rules, the
//! daemon's own Lease (may it act?) and what it has seen of its peers'
//! (which have expired?). Times are [`Mono`] readings of a clock that
//! counts suspended time ([`super::clock`]); nothing here reads a clock,
//! opens a socket or sleeps.
//!
//! The rules are client-go's leader election's, applied to a Lease that
//! each daemon holds for itself rather than one all of them contend for:
//!
//! - **Timing** ([`LeaseTiming`]): the duration, the renew deadline and the
//!   retry period, with `NewLeaderElector`'s checks (duration > renew
//!   deadline > 1.2 × retry period, each at least a second here since the
//!   record holds whole seconds).
//! - **Own Lease** ([`OwnLease`]): it acts only while its last successful
//!   renewal is younger than the renew deadline, so it stops before any
//!   peer may take over (a peer waits the whole duration after it last saw
//!   the record change). A 409 on its own Lease means someone else wrote
//!   it: the daemon is fenced for good and must not renew as if nothing
//!   happened.
//! - **Peers** ([`Peers`]): a peer's Lease has expired when this daemon has
//!   seen its record unchanged for the record's duration, on its own
//!   clock, never by comparing the record's `renewTime` with its own wall
//!   clock (clocks differ; a paused daemon's wall clock jumps). While this
//!   daemon's own reads fail it judges nobody, and when they come back
//!   every peer's clock starts again: an API server outage is not every
//!   peer's death.

use super::clock::Mono;
use std::collections::BTreeMap;
use std::time::Duration;

/// client-go's `JitterFactor`: the renew deadline must exceed the retry
/// period times this, so a renewal can be tried more than once before it.
pub const JITTER_FACTOR: f64 = 1.2;

/// A daemon Lease's timing (`[ha]` in the config; docs/ha.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTiming {
    /// How long peers wait, after they last saw the record change, before
    /// they take the holder's sessions (`leaseDurationSeconds`).
    pub duration: Duration,
    /// How long the holder acts after its last successful renewal.
    pub renew_deadline: Duration,
    /// How often the holder renews (and peers read).
    pub retry_period: Duration,
}

impl Default for LeaseTiming {
    /// client-go's defaults: 15 s, 10 s, 2 s.
    fn default() -> LeaseTiming {
        LeaseTiming {
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseTiming {
    /// `NewLeaderElector`'s checks, and whole seconds of at least one for
    /// the duration (the record's `leaseDurationSeconds` is an integer).
    pub fn validate(&self) -> Result<(), String> {
        if self.retry_period.is_zero() || self.renew_deadline.is_zero() {
            return Err("the renew deadline and the retry period must be more than 0".into());
        }
        if self.duration.as_secs() == 0 || self.duration.subsec_nanos() != 0 {
            return Err("the lease duration must be a whole number of seconds, at least 1".into());
        }
        if self.duration <= self.renew_deadline {
            return Err(format!(
                "the lease duration ({} s) must be greater than the renew deadline ({} s)",
                self.duration.as_secs_f64(),
                self.renew_deadline.as_secs_f64()
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER_FACTOR * self.retry_period.as_secs_f64() {
            return Err(format!(
                "the renew deadline ({} s) must be greater than {JITTER_FACTOR} x the retry period ({} s)",
                self.renew_deadline.as_secs_f64(),
                self.retry_period.as_secs_f64()
            ));
        }
        Ok(())
    }
}

/// How a write of the daemon's own Lease (an update carrying the
/// resourceVersion it read last) ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Written: the Lease's new resourceVersion.
    Renewed { resource_version: String },
    /// 409: someone else wrote the Lease since this daemon last did.
    Conflict,
    /// Not written (no answer, 5xx, 429): tried again after the retry
    /// period, while the renew deadline allows acting.
    Failed,
}

/// The daemon's own Lease, as far as it knows.
#[derive(Debug, Clone)]
pub struct OwnLease {
    timing: LeaseTiming,
    renewed_at: Option<Mono>,
    resource_version: Option<String>,
    fenced: bool,
}

impl OwnLease {
    pub fn new(timing: LeaseTiming) -> OwnLease {
        OwnLease {
            timing,
            renewed_at: None,
            resource_version: None,
            fenced: false,
        }
    }

    /// Takes a renewal's outcome, `at` the time the write was SENT (a
    /// renewal counts from when it left, not from when its answer came:
    /// the server may have applied it at any moment in between, and peers
    /// saw it no earlier).
    pub fn renewal(&mut self, sent_at: Mono, outcome: Renewal) {
        if self.fenced {
            return;
        }
        match outcome {
            Renewal::Renewed { resource_version } => {
                self.renewed_at = Some(self.renewed_at.map_or(sent_at, |t| t.max(sent_at)));
                self.resource_version = Some(resource_version);
            }
            Renewal::Conflict => self.fenced = true,
            Renewal::Failed => {}
        }
    }

    /// The resourceVersion the next renewal must carry.
    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// Fenced by a 409: this holder never acts again (the daemon comes back
    /// as a new holder, with a new identity, if at all).
    pub fn fenced(&self) -> bool {
        self.fenced
    }

    /// Whether the daemon may act at `now`: write to the cluster for a
    /// session, send stdin into one, tell viewers it serves. Only while its
    /// last renewal is younger than the renew deadline, which ends before
    /// any peer may judge the Lease expired (the duration).
    pub fn may_act(&self, now: Mono) -> bool {
        !self.fenced
            && self
                .renewed_at
                .is_some_and(|t| now.since(t) < self.timing.renew_deadline)
    }

    /// When acting must stop unless a renewal succeeds first (None: it
    /// does not act).
    pub fn acts_until(&self) -> Option<Mono> {
        if self.fenced {
            return None;
        }
        self.renewed_at.map(|t| t.after(self.timing.renew_deadline))
    }
}

/// A peer's Lease as read: what identifies one version of its record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRecord {
    /// `spec.holderIdentity`.
    pub holder: String,
    /// `spec.renewTime` as written (compared, never read as a time).
    pub renew_time: String,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// The address peers use (the Lease's advertise annotation).
    pub advertise_url: Option<String>,
}

#[derive(Debug, Clone)]
struct Seen {
    record: PeerRecord,
    /// When this daemon first saw this version of the record.
    observed_at: Mono,
}

/// What this daemon has seen of its peers' Leases (by Lease name).
#[derive(Debug, Clone, Default)]
pub struct Peers {
    seen: BTreeMap<String, Seen>,
    /// Since when this daemon's own reads have failed.
    blind_since: Option<Mono>,
}

impl Peers {
    pub fn new() -> Peers {
        Peers::default()
    }

    /// A read of peer `name`'s Lease at `at`. A record that changed (holder,
    /// renewal or duration) starts its clock again; an unchanged one keeps
    /// the time it was first seen.
    pub fn observe(&mut self, name: &str, record: PeerRecord, at: Mono) {
        self.read_ok(at);
        match self.seen.get_mut(name) {
            Some(s) if s.record == record => {}
            Some(s) => {
                s.record = record;
                s.observed_at = at;
            }
            None => {
                self.seen.insert(
                    name.to_string(),
                    Seen {
                        record,
                        observed_at: at,
                    },
                );
            }
        }
    }

    /// Peer `name`'s Lease is gone (an orderly stop deletes it; its
    /// sessions were handed over first).
    pub fn gone(&mut self, name: &str) {
        self.seen.remove(name);
    }

    /// This daemon's own reads of the Leases failed at `at`: until they
    /// work again, no peer is judged.
    pub fn read_failed(&mut self, at: Mono) {
        self.blind_since.get_or_insert(at);
    }

    /// A read worked at `at`: after a blind spell, every peer's clock
    /// starts again now (what changed meanwhile was not seen).
    pub fn read_ok(&mut self, at: Mono) {
        if self.blind_since.take().is_some() {
            for s in self.seen.values_mut() {
                s.observed_at = at;
            }
        }
    }

    /// The peers whose Lease has expired at `now`: seen unchanged for at
    /// least its duration. None while this daemon's reads fail.
    pub fn expired(&self, now: Mono) -> Vec<&str> {
        if self.blind_since.is_some() {
            return Vec::new();
        }
        self.seen
            .iter()
            .filter(|(_, s)| now.since(s.observed_at) >= s.record.duration)
            .map(|(n, _)| n.as_str())
            .collect()
    }

    /// The peers not expired at `now` (a blind daemon counts every one it
    /// knows as live), with their records.
    pub fn live(&self, now: Mono) -> Vec<(&str, &PeerRecord)> {
        let blind = self.blind_since.is_some();
        self.seen
            .iter()
            .filter(|(_, s)| blind || now.since(s.observed_at) < s.record.duration)
            .map(|(n, s)| (n.as_str(), &s.record))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Mono {
        Mono::from_nanos(ms * 1_000_000)
    }

    fn timing(d: u64, r: f64, p: f64) -> LeaseTiming {
        LeaseTiming {
            duration: Duration::from_secs(d),
            renew_deadline: Duration::from_secs_f64(r),
            retry_period: Duration::from_secs_f64(p),
        }
    }

    /// client-go's constructor rules, and whole seconds for the duration.
    #[test]
    fn the_timing_follows_client_gos_rules() {
        assert_eq!(LeaseTiming::default().validate(), Ok(()));
        assert_eq!(timing(15, 10.0, 2.0), LeaseTiming::default());
        assert!(
            timing(10, 10.0, 2.0).validate().is_err(),
            "duration = deadline"
        );
        assert!(timing(9, 10.0, 2.0).validate().is_err());
        // 1.2 x 2 s = 2.4 s: a deadline of 2.4 s is not enough, 2.5 s is.
        assert!(timing(15, 2.4, 2.0).validate().is_err());
        assert_eq!(timing(15, 2.5, 2.0).validate(), Ok(()));
        assert!(timing(0, 0.5, 0.1).validate().is_err());
        assert!(timing(15, 10.0, 0.0).validate().is_err());
        let frac = LeaseTiming {
            duration: Duration::from_millis(15_500),
            ..LeaseTiming::default()
        };
        assert!(frac.validate().is_err());
    }

    /// A holder acts from its first renewal until the renew deadline after
    /// the last one that worked (counted from when it was sent); failed
    /// renewals do not extend it.
    #[test]
    fn the_holder_acts_only_within_the_renew_deadline() {
        let mut own = OwnLease::new(LeaseTiming::default());
        assert!(!own.may_act(t(0)), "not before the first renewal");
        own.renewal(
            t(1_000),
            Renewal::Renewed {
                resource_version: "5".into(),
            },
        );
        assert!(own.may_act(t(1_000)) && own.may_act(t(10_999)));
        assert!(!own.may_act(t(11_000)));
        assert_eq!(own.acts_until(), Some(t(11_000)));
        own.renewal(t(3_000), Renewal::Failed);
        assert!(!own.may_act(t(11_000)), "a failed renewal extends nothing");
        own.renewal(
            t(9_000),
            Renewal::Renewed {
                resource_version: "9".into(),
            },
        );
        assert_eq!(own.resource_version(), Some("9"));
        assert!(own.may_act(t(18_999)) && !own.may_act(t(19_000)));
        // An answer that comes late for an earlier send moves nothing back.
        own.renewal(
            t(4_000),
            Renewal::Renewed {
                resource_version: "10".into(),
            },
        );
        assert_eq!(own.acts_until(), Some(t(19_000)));
    }

    /// A 409 on its own Lease fences the holder at once and for good, even
    /// inside the deadline, and later successes change nothing.
    #[test]
    fn a_conflict_on_its_own_lease_fences_the_holder_for_good() {
        let mut own = OwnLease::new(LeaseTiming::default());
        own.renewal(
            t(0),
            Renewal::Renewed {
                resource_version: "1".into(),
            },
        );
        own.renewal(t(2_000), Renewal::Conflict);
        assert!(own.fenced());
        assert!(!own.may_act(t(2_001)));
        own.renewal(
            t(4_000),
            Renewal::Renewed {
                resource_version: "3".into(),
            },
        );
        assert!(!own.may_act(t(4_001)));
        assert_eq!(own.acts_until(), None);
    }

    /// The holder stops acting before any peer may take over: its deadline
    /// counts from the renewal's send, a peer's duration from when it saw
    /// that renewal, which is later.
    #[test]
    fn the_holder_stops_before_a_peer_may_take_over() {
        let timing = LeaseTiming::default();
        let mut own = OwnLease::new(timing);
        let mut peers = Peers::new();
        let rec = |renew: &str| PeerRecord {
            holder: "a-1".into(),
            renew_time: renew.into(),
            duration: timing.duration,
            advertise_url: None,
        };
        own.renewal(
            t(1_000),
            Renewal::Renewed {
                resource_version: "2".into(),
            },
        );
        peers.observe("kubegate-a", rec("r1"), t(1_050));
        // The holder then hangs (SIGSTOP): no more renewals.
        let stops = own.acts_until().expect("acting");
        let mut first_expired = None;
        for ms in (1_000..40_000).step_by(10) {
            peers.observe("kubegate-a", rec("r1"), t(ms.max(1_050)));
            if first_expired.is_none() && !peers.expired(t(ms)).is_empty() {
                first_expired = Some(t(ms));
            }
        }
        let first_expired = first_expired.expect("expired at last");
        assert!(stops < first_expired, "{stops:?} {first_expired:?}");
        assert_eq!(first_expired, t(16_050));
    }

    /// Expiry is judged by how long the record has been seen unchanged on
    /// this daemon's clock: the renewal times themselves are only compared,
    /// so a peer whose wall clock is an hour off is judged the same.
    #[test]
    fn a_peer_expires_when_its_record_is_seen_unchanged_for_its_duration() {
        let mut peers = Peers::new();
        let rec = |renew: &str| PeerRecord {
            holder: "b-7".into(),
            renew_time: renew.into(),
            duration: Duration::from_secs(15),
            advertise_url: Some("https://b:8443".into()),
        };
        peers.observe("kubegate-b", rec("1999-01-01T00:00:00.000000Z"), t(0));
        peers.observe("kubegate-b", rec("1999-01-01T00:00:02.000000Z"), t(2_000));
        assert!(peers.expired(t(16_999)).is_empty());
        assert_eq!(peers.expired(t(17_000)), ["kubegate-b"]);
        assert!(peers.live(t(17_000)).is_empty());
        // A renewal seen again: live.
        peers.observe("kubegate-b", rec("1999-01-01T00:00:19.000000Z"), t(19_000));
        assert_eq!(peers.live(t(19_000)).len(), 1);
        assert_eq!(
            peers.live(t(19_000))[0].1.advertise_url.as_deref(),
            Some("https://b:8443")
        );
        peers.gone("kubegate-b");
        assert!(peers.live(t(19_000)).is_empty() && peers.expired(t(99_000)).is_empty());
    }

    /// While this daemon's own reads fail it judges nobody, and when they
    /// work again every peer's clock starts over: the API server coming
    /// back after an outage longer than the duration kills no peer.
    #[test]
    fn an_outage_of_its_own_reads_restarts_every_peers_clock() {
        let mut peers = Peers::new();
        let rec = PeerRecord {
            holder: "c-1".into(),
            renew_time: "r".into(),
            duration: Duration::from_secs(15),
            advertise_url: None,
        };
        peers.observe("kubegate-c", rec.clone(), t(0));
        peers.read_failed(t(1_000));
        peers.read_failed(t(3_000));
        assert!(peers.expired(t(30_000)).is_empty(), "blind: nobody judged");
        assert_eq!(peers.live(t(30_000)).len(), 1);
        // Reads work again at 40 s: the record looks unchanged, but its
        // clock starts now.
        peers.observe("kubegate-c", rec.clone(), t(40_000));
        assert!(peers.expired(t(54_999)).is_empty());
        assert_eq!(peers.expired(t(55_000)), ["kubegate-c"]);
        // A successful read of something else ends the blind spell too.
        peers.read_failed(t(56_000));
        peers.read_ok(t(60_000));
        assert!(peers.expired(t(74_999)).is_empty());
        assert_eq!(peers.expired(t(75_000)), ["kubegate-c"]);
    }
}
