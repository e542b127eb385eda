//! The front door's admission accounting, sans-IO: the daemon-wide body
//! budget with a share per principal, and the per-principal counts of
//! long-lived connections (docs/api.md "Limits"). Both hand out guards that
//! give back what they hold when dropped, wherever they travel (a body
//! permit rides with a session start into the engine until the workspace
//! is seeded; a connection guard lives in the stream or socket it counts).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::http::BodyCharge;

/// Why the budget refused a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetFull {
    /// Every principal together holds `total`.
    Total,
    /// This principal holds its share.
    Share,
}

#[derive(Default)]
struct BudgetState {
    used: usize,
    by: HashMap<String, usize>,
}

/// Body bytes in flight (reserved at admission, or as a chunked body grows)
/// and decoded bundles held until their session's workspace is seeded.
pub struct Budget {
    total: usize,
    share: usize,
    state: Mutex<BudgetState>,
}

impl Budget {
    /// `total` bytes for everyone, at most `share` of them per principal.
    pub fn new(total: usize, share: usize) -> Arc<Budget> {
        Arc::new(Budget {
            total,
            share: share.min(total),
            state: Mutex::new(BudgetState::default()),
        })
    }

    /// Bytes reserved now, all principals.
    pub fn used(&self) -> usize {
        self.state.lock().used
    }

    /// Bytes `principal` holds now.
    pub fn used_by(&self, principal: &str) -> usize {
        self.state.lock().by.get(principal).copied().unwrap_or(0)
    }

    /// Takes `n` bytes for `principal` (0 is fine: a permit to grow).
    pub fn reserve(self: &Arc<Self>, principal: &str, n: usize) -> Result<Permit, BudgetFull> {
        self.take(principal, n)?;
        Ok(Permit {
            budget: self.clone(),
            principal: principal.to_string(),
            held: Mutex::new(n),
        })
    }

    fn take(&self, principal: &str, n: usize) -> Result<(), BudgetFull> {
        let mut st = self.state.lock();
        let mine = st.by.get(principal).copied().unwrap_or(0);
        if mine.saturating_add(n) > self.share {
            return Err(BudgetFull::Share);
        }
        if st.used.saturating_add(n) > self.total {
            return Err(BudgetFull::Total);
        }
        st.used += n;
        *st.by.entry(principal.to_string()).or_insert(0) += n;
        Ok(())
    }

    fn give(&self, principal: &str, n: usize) {
        if n == 0 {
            return;
        }
        let mut st = self.state.lock();
        st.used = st.used.saturating_sub(n);
        if let Some(m) = st.by.get_mut(principal) {
            *m = m.saturating_sub(n);
            if *m == 0 {
                st.by.remove(principal);
            }
        }
    }
}

/// Bytes held in the budget for one request; given back when dropped.
pub struct Permit {
    budget: Arc<Budget>,
    principal: String,
    held: Mutex<usize>,
}

impl Permit {
    pub fn held(&self) -> usize {
        *self.held.lock()
    }

    /// Holds at least `total` bytes; false (holding what it held) when the
    /// budget or the principal's share has no room.
    pub fn grow_to(&self, total: usize) -> bool {
        let mut held = self.held.lock();
        if total <= *held {
            return true;
        }
        if self.budget.take(&self.principal, total - *held).is_err() {
            return false;
        }
        *held = total;
        true
    }
}

impl BodyCharge for Permit {
    fn grow(&self, total: usize) -> bool {
        self.grow_to(total)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.budget.give(&self.principal, *self.held.get_mut());
    }
}

/// The long-lived connections a principal holds, each kind capped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Session io WebSockets.
    Io,
    /// Session event streams (SSE).
    Events,
    /// Port-proxy WebSockets and streamed answers.
    Ports,
    /// TCP tunnels (sessions' and the exec gateway's).
    Tunnels,
    /// Keep-alive connections between (and during) requests.
    KeepAlive,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::Io,
        Kind::Events,
        Kind::Ports,
        Kind::Tunnels,
        Kind::KeepAlive,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Io => "io",
            Kind::Events => "events",
            Kind::Ports => "ports",
            Kind::Tunnels => "tunnels",
            Kind::KeepAlive => "keepalive",
        }
    }
}

/// The caps of each kind, per principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapLimits {
    pub io: usize,
    pub events: usize,
    pub ports: usize,
    pub tunnels: usize,
    pub keep_alive: usize,
}

impl CapLimits {
    fn of(&self, k: Kind) -> usize {
        match k {
            Kind::Io => self.io,
            Kind::Events => self.events,
            Kind::Ports => self.ports,
            Kind::Tunnels => self.tunnels,
            Kind::KeepAlive => self.keep_alive,
        }
    }
}

/// Called with (principal, kind, count now) whenever a count changes (the
/// metrics gauge).
pub type OnChange = Box<dyn Fn(&str, Kind, usize) + Send + Sync>;

/// Per-principal counts of long-lived connections.
pub struct Caps {
    limits: CapLimits,
    counts: Mutex<HashMap<(String, Kind), usize>>,
    on_change: Option<OnChange>,
}

impl Caps {
    pub fn new(limits: CapLimits, on_change: Option<OnChange>) -> Arc<Caps> {
        Arc::new(Caps {
            limits,
            counts: Mutex::new(HashMap::new()),
            on_change,
        })
    }

    pub fn limit(&self, k: Kind) -> usize {
        self.limits.of(k)
    }

    pub fn count(&self, principal: &str, k: Kind) -> usize {
        self.counts
            .lock()
            .get(&(principal.to_string(), k))
            .copied()
            .unwrap_or(0)
    }

    /// The most connections of kind `k` any principal holds.
    pub fn max_of(&self, k: Kind) -> usize {
        self.counts
            .lock()
            .iter()
            .filter(|((_, kind), _)| *kind == k)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0)
    }

    /// One more connection of kind `k` for `principal`, unless it holds its
    /// cap already.
    pub fn acquire(self: &Arc<Self>, principal: &str, k: Kind) -> Option<CapGuard> {
        let n = {
            let mut counts = self.counts.lock();
            let n = counts.entry((principal.to_string(), k)).or_insert(0);
            if *n >= self.limits.of(k) {
                return None;
            }
            *n += 1;
            *n
        };
        if let Some(f) = &self.on_change {
            f(principal, k, n);
        }
        Some(CapGuard {
            caps: self.clone(),
            principal: principal.to_string(),
            kind: k,
        })
    }

    fn release(&self, principal: &str, k: Kind) {
        let n = {
            let mut counts = self.counts.lock();
            let key = (principal.to_string(), k);
            let Some(n) = counts.get_mut(&key) else {
                return;
            };
            *n = n.saturating_sub(1);
            let now = *n;
            if now == 0 {
                counts.remove(&key);
            }
            now
        };
        if let Some(f) = &self.on_change {
            f(principal, k, n);
        }
    }
}

/// One counted connection; released when dropped.
pub struct CapGuard {
    caps: Arc<Caps>,
    principal: String,
    kind: Kind,
}

impl CapGuard {
    pub fn kind(&self) -> Kind {
        self.kind
    }
}

impl Drop for CapGuard {
    fn drop(&mut self) {
        self.caps.release(&self.principal, self.kind);
    }
}

/// The front door's limits, from `[server]` with the zero ("derived")
/// values filled in from the per-principal limits they follow
/// (docs/api.md "Limits").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrontDoorLimits {
    /// The body limit of `POST /v1/sessions` (a bundle base64 in JSON).
    pub start_body: usize,
    /// The body limit of every other route.
    pub body: usize,
    pub budget_total: usize,
    pub budget_share: usize,
    pub caps: CapLimits,
    pub per_peer: usize,
}

impl FrontDoorLimits {
    pub fn from_config(cfg: &crate::config::Config) -> FrontDoorLimits {
        let s = &cfg.server;
        let sessions = usize::try_from(cfg.sessions.max_sessions_per_principal).unwrap_or(1);
        let n = |v: u64, derived: usize| -> usize {
            if v == 0 {
                derived
            } else {
                usize::try_from(v).unwrap_or(usize::MAX)
            }
        };
        let body = usize::try_from(s.max_body_bytes).unwrap_or(usize::MAX);
        let start_body = usize::try_from(
            s.max_body_bytes
                .max(cfg.sessions.max_bundle_bytes.saturating_mul(4) / 3 + (1 << 20)),
        )
        .unwrap_or(usize::MAX);
        // One principal may upload (or hold unseeded) one session's
        // largest bundle at a time; the daemon three of them.
        let budget_share = n(s.body_budget_per_principal_bytes, start_body);
        let budget_total = n(s.body_budget_bytes, start_body.saturating_mul(3));
        FrontDoorLimits {
            start_body,
            body,
            budget_total,
            budget_share,
            caps: CapLimits {
                // A viewer per app of every session it may run (`kubegate
                // dev` attaches every app), 8 apps a session on average.
                io: n(s.max_io_sockets_per_principal, sessions.saturating_mul(8)),
                // A viewer and a `kubegate dev` per session.
                events: n(
                    s.max_event_streams_per_principal,
                    sessions.saturating_mul(2),
                ),
                // A few forwarded browsers' connections per session.
                ports: n(s.max_port_streams_per_principal, sessions.saturating_mul(4)),
                // A database, a debugger and a browser's connections per
                // session: 8 a session.
                tunnels: n(s.max_tunnels_per_principal, sessions.saturating_mul(8)),
                keep_alive: n(s.max_connections_per_principal, 64),
            },
            per_peer: n(s.max_connections_per_peer, 64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra_server: &str) -> crate::config::Config {
        let text = format!("[server]\n{extra_server}\n[cluster]\nmode = \"sim\"\n");
        crate::config::Config::parse(&text, std::path::Path::new("/etc/kubegate"))
            .unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn defaults_follow_the_per_principal_limits() {
        let l = FrontDoorLimits::from_config(&config(""));
        // 64 MiB of bundle, base64 in JSON, plus 1 MiB.
        assert_eq!(l.start_body, (64usize << 20) * 4 / 3 + (1 << 20));
        assert_eq!(l.body, 1 << 20);
        assert_eq!(l.budget_share, l.start_body);
        assert_eq!(l.budget_total, 3 * l.start_body);
        // sessions.max_sessions_per_principal defaults to 8.
        assert_eq!(
            l.caps,
            CapLimits {
                io: 64,
                events: 16,
                ports: 32,
                tunnels: 64,
                keep_alive: 64
            }
        );
        assert_eq!(l.per_peer, 64);
    }

    #[test]
    fn configured_values_win_over_derived_ones() {
        let l = FrontDoorLimits::from_config(&config(
            "body_budget_bytes = 1000\nbody_budget_per_principal_bytes = 10\n\
             max_io_sockets_per_principal = 3\nmax_event_streams_per_principal = 2\n\
             max_port_streams_per_principal = 1\nmax_connections_per_principal = 5\n\
             max_tunnels_per_principal = 4\n\
             max_connections_per_peer = 7",
        ));
        assert_eq!((l.budget_total, l.budget_share), (1000, 10));
        assert_eq!(
            l.caps,
            CapLimits {
                io: 3,
                events: 2,
                ports: 1,
                tunnels: 4,
                keep_alive: 5
            }
        );
        assert_eq!(l.per_peer, 7);
    }

    #[test]
    fn the_connection_keys_must_be_positive() {
        for key in [
            "max_connections_per_peer",
            "max_connections_per_principal",
            "head_grace_secs",
            "min_head_bytes_per_sec",
        ] {
            let text = format!("[server]\n{key} = 0\n[cluster]\nmode = \"sim\"\n");
            let e = crate::config::Config::parse(&text, std::path::Path::new("/etc/kubegate"))
                .expect_err(key);
            assert_eq!(e.key, format!("server.{key}"), "{e:?}");
        }
    }

    #[test]
    fn the_budget_bounds_everyone_and_each_principal() {
        let b = Budget::new(100, 60);
        let a1 = b.reserve("a", 40).unwrap();
        assert_eq!(b.reserve("a", 30).err(), Some(BudgetFull::Share));
        let b1 = b.reserve("b", 50).unwrap();
        assert_eq!(b.used(), 90);
        // a is within its share (40 + 20 = 60) but the total is not.
        assert_eq!(b.reserve("a", 20).err(), Some(BudgetFull::Total));
        let a2 = b.reserve("a", 10).unwrap();
        assert_eq!(b.used_by("a"), 50);
        drop(b1);
        assert_eq!(b.used(), 50);
        assert!(b.reserve("a", 20).is_err(), "a's share is 60");
        drop(a1);
        drop(a2);
        assert_eq!(b.used(), 0);
        assert_eq!(b.used_by("a"), 0);
    }

    #[test]
    fn a_permit_grows_within_the_budget_and_gives_everything_back() {
        let b = Budget::new(100, 100);
        let p = b.reserve("a", 0).unwrap();
        assert!(p.grow(30));
        assert!(p.grow(30), "growing to what it holds takes nothing");
        assert!(p.grow(10), "never shrinks");
        assert_eq!(p.held(), 30);
        let q = b.reserve("b", 60).unwrap();
        assert!(!p.grow(41), "30 + 60 + 11 > 100");
        assert_eq!(p.held(), 30, "a refused growth keeps what it held");
        assert!(p.grow(40));
        assert_eq!(b.used(), 100);
        drop(p);
        assert_eq!(b.used(), 60);
        drop(q);
        assert_eq!(b.used(), 0);
    }

    #[test]
    fn a_share_larger_than_the_total_is_the_total() {
        let b = Budget::new(10, 1000);
        assert_eq!(b.reserve("a", 11).err(), Some(BudgetFull::Share));
        assert!(b.reserve("a", 10).is_ok());
    }

    #[test]
    fn caps_count_each_kind_per_principal() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let caps = Caps::new(
            CapLimits {
                io: 2,
                events: 1,
                ports: 1,
                tunnels: 1,
                keep_alive: 1,
            },
            Some(Box::new(move |p, k, n| {
                s.lock().push((p.to_string(), k, n))
            })),
        );
        let a1 = caps.acquire("a", Kind::Io).unwrap();
        let a2 = caps.acquire("a", Kind::Io).unwrap();
        assert!(caps.acquire("a", Kind::Io).is_none(), "a's io cap is 2");
        assert!(caps.acquire("b", Kind::Io).is_some(), "b has its own");
        let e = caps.acquire("a", Kind::Events).unwrap();
        assert!(caps.acquire("a", Kind::Events).is_none());
        let t = caps.acquire("a", Kind::Tunnels).unwrap();
        assert!(
            caps.acquire("a", Kind::Tunnels).is_none(),
            "a's tunnel cap is 1"
        );
        drop(t);
        assert!(caps.acquire("a", Kind::Tunnels).is_some());
        assert_eq!(caps.count("a", Kind::Io), 2);
        assert_eq!(caps.max_of(Kind::Io), 2);
        drop(a1);
        assert_eq!(caps.count("a", Kind::Io), 1);
        assert!(caps.acquire("a", Kind::Io).is_some());
        drop((a2, e));
        assert_eq!(caps.count("a", Kind::Events), 0);
        assert_eq!(caps.max_of(Kind::Events), 0);
        let log = seen.lock();
        assert_eq!(log[0], ("a".to_string(), Kind::Io, 1));
        assert_eq!(log[1], ("a".to_string(), Kind::Io, 2));
        assert!(log.contains(&("a".to_string(), Kind::Events, 0)));
    }
}
