//! Output an app wrote while the daemon was down, read back from its
//! container log (docs/sessions.md#operations: "recovered from the container
//! log (`log?sinceTime=`) or announced as a gap"), sans-IO.
//!
//! The engine asks `GET …/pods/{pod}/log?container=C&timestamps=true&
//! sinceTime=T` where T is the second of the last output the daemon
//! pushed before it stopped ([`since_time`]; the API server forwards
//! `sinceTime` to the kubelet with whole seconds, so the answer starts up
//! to a second early). Every line of the answer starts with the kubelet's
//! RFC 3339 timestamp (nanoseconds, trailing zeros trimmed) and a space;
//! [`lines_after`] keeps the lines stamped strictly after the last output
//! the daemon had (those before or at it were delivered by the old
//! attach), without their timestamps. The other end of the window is the
//! new attach: its held output's first lines are dropped from the
//! recovery by `io::held_overlap`.
//!
//! Assumptions (docs/sessions.md "Re-adoption"): the node's clock and the
//! daemon's agree (NTP); a line the old attach had read from the kubelet
//! but not yet delivered when the daemon stopped (its timestamp is before
//! the last delivered output's arrival by at most the attach's latency)
//! is not recovered. The log merges stdout and stderr: recovered output
//! goes to the app's main stream (`tty` or `stdout`).

use crate::kube::time::{parse_rfc3339, rfc3339};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tungstenite::Bytes;

/// `sinceTime` for output after `after_ns` (ns since the Unix epoch): its
/// whole second (what the API server forwards anyway). None for 0 (no
/// output was ever seen: the whole log is wanted).
pub fn since_time(after_ns: u64) -> Option<String> {
    (after_ns > 0).then(|| rfc3339(UNIX_EPOCH + Duration::from_nanos(after_ns)))
}

/// ns since the Unix epoch of an RFC 3339 time.
fn ns(t: SystemTime) -> Option<u64> {
    t.duration_since(UNIX_EPOCH)
        .ok()
        .and_then(|d| u64::try_from(d.as_nanos()).ok())
}

/// The lines of a `timestamps=true` log answer stamped strictly after
/// `after_ns`, each with its time (ns) and without its timestamp (its
/// newline kept; a last line without one is kept as it is). A line whose
/// prefix is not a timestamp (a log the client cannot parse) belongs with
/// the line before it, and has its time.
pub fn lines_after(body: &[u8], after_ns: u64) -> Vec<(u64, Bytes)> {
    let mut out = Vec::new();
    let mut at: Option<u64> = None;
    for line in body.split_inclusive(|b| *b == b'\n') {
        let stamp = line.iter().position(|b| *b == b' ').and_then(|sp| {
            let ts = std::str::from_utf8(&line[..sp]).ok()?;
            Some((ns(parse_rfc3339(ts)?)?, sp))
        });
        let content = match stamp {
            Some((ts, sp)) => {
                at = Some(ts);
                &line[sp + 1..]
            }
            None => line,
        };
        if let Some(ts) = at.filter(|ts| *ts > after_ns) {
            if !content.is_empty() {
                out.push((ts, Bytes::copy_from_slice(content)));
            }
        }
    }
    out
}

/// Of the log's `lines` (read from a margin before `since_ns`, the last
/// output's arrival), those no viewer was given. A line stamped before
/// that arrival can still have been in flight when the stream was cut
/// (the kubelet, an API server's stream translator, proxies between), so
/// the time alone does not tell: the longest run of leading lines whose
/// bytes end what was delivered (`delivered_tail`) was delivered, and
/// what follows it was not (a run starts where a delivered line starts:
/// `delivered_tail` holds one byte more than the lines, or all there was).
/// Without such a run, the lines stamped after
/// `since_ns` (the time rule alone). Identical lines at the boundary
/// cannot be told apart: the longest run wins.
pub fn undelivered(
    lines: Vec<(u64, Bytes)>,
    since_ns: u64,
    delivered_tail: &[u8],
) -> Vec<(u64, Bytes)> {
    let mut best = None;
    let mut len = 0;
    for (k, (_, l)) in lines.iter().enumerate() {
        len += l.len();
        if len > delivered_tail.len() {
            break;
        }
        // Do lines[..=k] end the delivered bytes, from a line's start?
        let start = delivered_tail.len() - len;
        if start > 0 && delivered_tail[start - 1] != b'\n' {
            continue;
        }
        let mut at = start;
        let matches = lines[..=k].iter().all(|(_, c)| {
            let ok = delivered_tail.get(at..at + c.len()) == Some(&c[..]);
            at += c.len();
            ok
        });
        if matches {
            best = Some(k + 1);
        }
    }
    match best {
        Some(k) => lines.into_iter().skip(k).collect(),
        None => lines.into_iter().filter(|(ts, _)| *ts > since_ns).collect(),
    }
}

/// How many of `lines` (in order) are stamped at or after `ns`: the lines
/// the new attach delivers as well, once it catches up.
pub fn stamped_from(lines: &[(u64, Bytes)], ns: u64) -> usize {
    lines.iter().rev().take_while(|(ts, _)| *ts >= ns).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_700_000_000_000_000_000;

    fn stamped(lines: &[(u64, &'static str)]) -> Vec<(u64, Bytes)> {
        lines
            .iter()
            .map(|(t, l)| (*t, Bytes::from_static(l.as_bytes())))
            .collect()
    }

    fn texts(lines: &[(u64, Bytes)]) -> Vec<String> {
        lines
            .iter()
            .map(|(_, l)| String::from_utf8_lossy(l).into_owned())
            .collect()
    }

    /// Lines stamped before the last output's arrival but still in flight
    /// when the stream was cut are recovered; those delivered are not.
    #[test]
    fn what_was_in_flight_is_recovered_and_what_was_delivered_is_not() {
        let log = stamped(&[
            (T, "5\n"),
            (T + 100, "6\n"),
            (T + 200, "7\n"),
            (T + 300, "8\n"),
            (T + 400, "9\n"),
        ]);
        // 6 arrived at T + 350 (it was the last delivered): 7 and 8 were
        // stamped before that, in flight.
        let got = undelivered(log.clone(), T + 350, b"4\n5\n6\n");
        assert_eq!(texts(&got), ["7\n", "8\n", "9\n"]);
        // Everything delivered: nothing to recover.
        assert!(undelivered(log.clone(), T + 450, b"5\n6\n7\n8\n9\n").is_empty());
        // The tail shares nothing with the log (it was rotated, or the
        // ring was emptied): the time rule alone.
        let got = undelivered(log.clone(), T + 250, b"x\n");
        assert_eq!(texts(&got), ["8\n", "9\n"]);
        // Nothing delivered yet: the time rule (here: all of it).
        assert_eq!(undelivered(log, 0, b"").len(), 5);
        // A line that ends the tail only inside a longer line ("12" in
        // "112") was not delivered: the time rule decides.
        let log = stamped(&[(T, "12\n"), (T + 100, "13\n")]);
        let got = undelivered(log, T - 1, b"112\n");
        assert_eq!(texts(&got), ["12\n", "13\n"]);
    }

    #[test]
    fn since_time_is_the_whole_second_or_nothing() {
        assert_eq!(since_time(0), None);
        assert_eq!(
            since_time(T + 999_999_999).as_deref(),
            Some("2023-11-14T22:13:20Z")
        );
    }

    #[test]
    fn lines_stamped_after_the_last_output_are_kept_without_their_stamps() {
        let body = b"2023-11-14T22:13:20.5Z old\n\
2023-11-14T22:13:20.500000001Z new 1\n\
2023-11-14T22:13:21Z new 2\r\n\
not a stamp, part of new 2\n\
2023-11-14T22:13:20.1Z late but old\n\
2023-11-14T22:13:22.25Z partial";
        let lines = lines_after(body, T + 500_000_000);
        let text: Vec<String> = lines
            .iter()
            .map(|(_, l)| String::from_utf8_lossy(l).into_owned())
            .collect();
        assert_eq!(
            text,
            [
                "new 1\n",
                "new 2\r\n",
                "not a stamp, part of new 2\n",
                "partial"
            ]
        );
        // The unstamped line has the time of the line before it.
        assert_eq!(lines[2].0, T + 1_000_000_000);
        assert_eq!(stamped_from(&lines, T + 1_000_000_000), 3);
        assert_eq!(stamped_from(&lines, T + 3_000_000_000), 0);
        // Everything when nothing was seen; nothing from an empty log.
        assert_eq!(lines_after(body, 0).len(), 6);
        assert!(lines_after(b"", T).is_empty());
        // Text before any stamp has nothing to belong to: dropped.
        assert!(lines_after(b"garbage\n", 0).is_empty());
    }
}
