//! The orphan reaper's decisions, sans-IO (docs/sessions.md#operations: pods
//! that carry the managed-by label AND `kubegate.dev/mode: watch` AND a
//! session-id that no record knows are reaped after a grace period; never
//! pods without those labels, such as exec targets).
//!
//! The engine's `session-reaper` thread lists the session namespace's pods
//! every little while, reads which session ids the daemon knows, and asks
//! [`Reaper::decide`] which pods to delete. A pod is deleted once it has
//! been seen as an orphan, without interruption, for the grace period:
//! counted from when this daemon first saw it so (not from its creation),
//! so a clock skew between the daemon and the cluster cannot shorten it,
//! and a pod whose session appears meanwhile (a start racing the list) is
//! forgotten at once. Never acted on, never counted: pods without the
//! three labels, Evicted pods (Kubernetes keeps them for inspection and
//! its pod garbage collector removes them), and pods already terminating.

use super::machine::Millis;
use super::pod::{MODE_LABEL, MODE_WATCH, SESSION_ID_LABEL};
use crate::kube::client::Pod;
use crate::kube::labels::MANAGED_BY_LABEL;
use serde_json::Value;
use std::collections::{HashMap, HashSet};

/// What the reaper needs to know of a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFacts {
    pub name: String,
    /// The uid (the name when the pod has none), so a new pod under an
    /// old name starts its own grace period.
    pub uid: String,
    pub labels: std::collections::BTreeMap<String, String>,
    /// `status.reason` is `Evicted`.
    pub evicted: bool,
    /// `metadata.deletionTimestamp` is set.
    pub terminating: bool,
}

impl PodFacts {
    pub fn of(p: &Pod) -> PodFacts {
        let reason = p
            .status
            .as_ref()
            .and_then(|s| s.extra.get("reason"))
            .and_then(Value::as_str);
        PodFacts {
            name: p.metadata.name().to_string(),
            uid: p
                .metadata
                .uid
                .clone()
                .unwrap_or_else(|| p.metadata.name().to_string()),
            labels: p.metadata.labels.clone().unwrap_or_default(),
            evicted: reason == Some("Evicted"),
            terminating: p.metadata.deletion_timestamp.is_some(),
        }
    }

    /// The session id of a watch-session pod of ours: managed-by is
    /// `managed_by`, the mode is `watch`, and a session id is set.
    fn watch_session(&self, managed_by: &str) -> Option<&str> {
        let l = |k: &str| self.labels.get(k).map(String::as_str);
        (l(MANAGED_BY_LABEL) == Some(managed_by) && l(MODE_LABEL) == Some(MODE_WATCH))
            .then(|| l(SESSION_ID_LABEL))
            .flatten()
            .filter(|id| !id.is_empty())
    }
}

/// The reaper's memory: since when each orphan has been seen.
#[derive(Debug, Default)]
pub struct Reaper {
    grace_ms: Millis,
    /// Pod uid -> first seen as an orphan.
    orphans: HashMap<String, Millis>,
}

impl Reaper {
    pub fn new(grace_ms: Millis) -> Reaper {
        Reaper {
            grace_ms,
            orphans: HashMap::new(),
        }
    }

    /// Given every pod listed now and the session ids the daemon knows,
    /// the names of the pods to delete now. Pods not listed any more are
    /// forgotten.
    pub fn decide(
        &mut self,
        pods: &[PodFacts],
        known: &HashSet<String>,
        managed_by: &str,
        now: Millis,
    ) -> Vec<String> {
        let mut seen = HashSet::new();
        let mut reap = Vec::new();
        for p in pods {
            if p.evicted || p.terminating {
                continue;
            }
            let Some(id) = p.watch_session(managed_by) else {
                continue;
            };
            if known.contains(id) {
                continue;
            }
            seen.insert(p.uid.clone());
            let since = *self.orphans.entry(p.uid.clone()).or_insert(now);
            if now.saturating_sub(since) >= self.grace_ms {
                reap.push(p.name.clone());
            }
        }
        // Gone, terminating, or known again: start over if it comes back.
        self.orphans.retain(|uid, _| seen.contains(uid));
        reap
    }

    /// Orphans being timed (metrics, tests).
    pub fn watching(&self) -> usize {
        self.orphans.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(name: &str, labels: &[(&str, &str)]) -> PodFacts {
        PodFacts {
            name: name.into(),
            uid: format!("uid-{name}"),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            evicted: false,
            terminating: false,
        }
    }

    fn watch(name: &str, id: &str) -> PodFacts {
        facts(
            name,
            &[
                (MANAGED_BY_LABEL, "kubegate"),
                (MODE_LABEL, MODE_WATCH),
                (SESSION_ID_LABEL, id),
            ],
        )
    }

    #[test]
    fn an_orphan_goes_after_the_grace_period_counted_from_first_sight() {
        let mut r = Reaper::new(10_000);
        let known: HashSet<String> = ["known".to_string()].into();
        let pods = vec![watch("a", "lost"), watch("b", "known")];
        assert!(r.decide(&pods, &known, "kubegate", 1_000).is_empty());
        assert_eq!(r.watching(), 1);
        assert!(r.decide(&pods, &known, "kubegate", 10_999).is_empty());
        assert_eq!(r.decide(&pods, &known, "kubegate", 11_000), ["a"]);
        // Still there (the delete failed or is slow): asked again.
        assert_eq!(r.decide(&pods, &known, "kubegate", 12_000), ["a"]);
        // Gone from the list: forgotten.
        assert!(r.decide(&pods[1..], &known, "kubegate", 13_000).is_empty());
        assert_eq!(r.watching(), 0);
    }

    #[test]
    fn a_session_that_appears_resets_the_clock() {
        let mut r = Reaper::new(10_000);
        let pods = vec![watch("a", "late")];
        let mut known = HashSet::new();
        assert!(r.decide(&pods, &known, "kubegate", 0).is_empty());
        known.insert("late".to_string());
        assert!(r.decide(&pods, &known, "kubegate", 9_000).is_empty());
        assert_eq!(r.watching(), 0);
        known.clear();
        assert!(r.decide(&pods, &known, "kubegate", 15_000).is_empty());
        assert_eq!(r.decide(&pods, &known, "kubegate", 25_000), ["a"]);
    }

    #[test]
    fn pods_without_the_three_labels_evicted_or_terminating_are_never_touched() {
        let mut r = Reaper::new(0);
        let known = HashSet::new();
        let mut evicted = watch("evicted", "x");
        evicted.evicted = true;
        let mut going = watch("going", "x");
        going.terminating = true;
        let pods = vec![
            // An exec target: managed-by, but no mode.
            facts(
                "exec-target",
                &[(MANAGED_BY_LABEL, "kubegate"), (SESSION_ID_LABEL, "x")],
            ),
            // Another mode, another manager, no session id, an empty one.
            facts(
                "other-mode",
                &[
                    (MANAGED_BY_LABEL, "kubegate"),
                    (MODE_LABEL, "exec"),
                    (SESSION_ID_LABEL, "x"),
                ],
            ),
            facts(
                "other-manager",
                &[
                    (MANAGED_BY_LABEL, "helm"),
                    (MODE_LABEL, MODE_WATCH),
                    (SESSION_ID_LABEL, "x"),
                ],
            ),
            facts(
                "no-id",
                &[(MANAGED_BY_LABEL, "kubegate"), (MODE_LABEL, MODE_WATCH)],
            ),
            watch("empty-id", ""),
            facts("unlabelled", &[]),
            evicted,
            going,
        ];
        for t in [0, 1_000_000] {
            assert!(r.decide(&pods, &known, "kubegate", t).is_empty());
        }
        assert_eq!(r.watching(), 0, "none of them is even counted");
        // The configured manager name is the one that counts.
        assert_eq!(r.decide(&[watch("w", "x")], &known, "kubegate", 0), ["w"]);
        assert!(r.decide(&[watch("w", "x")], &known, "other", 0).is_empty());
    }

    #[test]
    fn facts_read_the_pod() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "uid": "u", "labels": {"a": "b"},
                         "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"phase": "Failed", "reason": "Evicted"}
        }))
        .unwrap();
        let f = PodFacts::of(&p);
        assert_eq!((f.name.as_str(), f.uid.as_str()), ("p", "u"));
        assert!(f.evicted && f.terminating);
        assert_eq!(f.labels["a"], "b");
        let q: Pod =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "q"}})).unwrap();
        let f = PodFacts::of(&q);
        assert_eq!(f.uid, "q");
        assert!(!f.evicted && !f.terminating);
    }
}
