//! Which survivor claims which session of a daemon whose Lease expired
//! (docs/ha.md), sans-IO: rendezvous (highest-random-weight) hashing over
//! the live daemons, so every survivor computes the same answer from the
//! same Lease list without talking to the others, about a third each of
//! three, and losing one more daemon moves only that daemon's sessions.
//! Each claim is then a compare-and-swap of the session record's owner and
//! epoch, so two survivors that disagree (one saw a Lease the other did
//! not yet) cannot both win; this only keeps them from trying.
//!
//! A survivor takes its share in batches no bigger than its own room
//! (its session limits) and a rate the caller sets; sessions its first
//! choice cannot take are left to the next-ranked daemon in a later round.

use sha2::{Digest, Sha256};

/// The score of `daemon` for `session`: the first 8 bytes of
/// SHA-256(session, NUL, daemon). A stable hash (the same on every daemon
/// and every build), not `std`'s randomly keyed one.
fn score(session: &str, daemon: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(session.as_bytes());
    h.update([0u8]);
    h.update(daemon.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

/// The live daemons in the order they should claim `session`: the
/// rendezvous winner first. Ties (never in practice) go to the smaller
/// identity, so the order is total.
pub fn rank<'a>(session: &str, daemons: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<(u64, &'a str)> = daemons.iter().map(|d| (score(session, d), *d)).collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    v.dedup_by(|a, b| a.1 == b.1);
    v.into_iter().map(|(_, d)| d).collect()
}

/// The orphaned sessions `me` claims now: those for which it is among the
/// first `round + 1` daemons of [`rank`] over `live` (which includes
/// `me`), in the order given, at most `min(batch, room)` of them. Round 0
/// is each session's winner alone; a session still orphaned a round later
/// (its winner had no room, or died too) is offered to the next one.
pub fn my_claims<'a>(
    me: &str,
    orphaned: &[&'a str],
    live: &[&str],
    round: usize,
    batch: usize,
    room: usize,
) -> Vec<&'a str> {
    let take = batch.min(room);
    orphaned
        .iter()
        .filter(|s| rank(s, live).iter().take(round + 1).any(|d| *d == me))
        .take(take)
        .copied()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("s{i:05}x")).collect()
    }

    /// Every daemon computes the same winner, the three survivors get about
    /// a third each, and a daemon's death moves only its own sessions.
    #[test]
    fn the_winner_is_shared_balanced_and_moves_only_what_it_must() {
        let ids = sessions(3_000);
        let four = ["a-1", "b-2", "c-3", "d-4"];
        let three = ["a-1", "b-2", "c-3"];
        let mut counts = std::collections::BTreeMap::new();
        for s in &ids {
            let w4 = rank(s, &four)[0];
            let w3 = rank(s, &three)[0];
            // The order of the list does not matter.
            assert_eq!(rank(s, &["c-3", "a-1", "b-2"])[0], w3);
            if w4 != "d-4" {
                assert_eq!(w3, w4, "{s}: moved although its daemon lives");
            }
            *counts.entry(w3).or_insert(0) += 1;
        }
        for (d, n) in &counts {
            assert!((900..=1_100).contains(n), "{d}: {n} of 3,000");
        }
        assert!(rank("s", &[]).is_empty());
        assert_eq!(rank("s", &["a", "a"]), ["a"]);
    }

    /// Each survivor claims only its share, in batches within its room;
    /// what a full winner leaves goes to the next-ranked in a later round,
    /// and between them nothing is claimed twice in one round.
    #[test]
    fn claims_come_in_batches_within_room_and_widen_by_round() {
        let ids = sessions(300);
        let orphaned: Vec<&str> = ids.iter().map(String::as_str).collect();
        let live = ["a-1", "b-2", "c-3"];
        let mut all = Vec::new();
        for me in live {
            let mine = my_claims(me, &orphaned, &live, 0, usize::MAX, usize::MAX);
            assert!(mine.iter().all(|s| rank(s, &live)[0] == me));
            all.extend(mine);
        }
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 300, "each once, none left");
        let a = my_claims("a-1", &orphaned, &live, 0, 10, 4);
        assert_eq!(a.len(), 4, "room caps the batch");
        assert_eq!(my_claims("a-1", &orphaned, &live, 0, 3, 100).len(), 3);
        // a-1 is full: its sessions stay orphaned; in round 1 each goes to
        // its second choice too.
        let left: Vec<&str> = orphaned
            .iter()
            .copied()
            .filter(|s| rank(s, &live)[0] == "a-1")
            .collect();
        let b1 = my_claims("b-2", &left, &live, 1, usize::MAX, usize::MAX);
        let c1 = my_claims("c-3", &left, &live, 1, usize::MAX, usize::MAX);
        assert_eq!(b1.len() + c1.len(), left.len());
        assert!(b1.iter().all(|s| !c1.contains(s)));
        assert!(my_claims("b-2", &left, &live, 0, 100, 100).is_empty());
    }
}
