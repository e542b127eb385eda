//! The daemon's metrics in the Prometheus text format (version 0.0.4):
//! labelled counters and gauges in one registry, rendered on `GET
//! /metrics`, plus process figures read from /proc at scrape time. Updates
//! take one uncontended lock; hot paths add their totals once per exec, not
//! per byte.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Every series the daemon exports: name, type, help.
const FAMILIES: &[(&str, &str, &str)] = &[
    (
        "kubegate_http_requests_total",
        "counter",
        "Front-door requests by route class and status.",
    ),
    (
        "kubegate_api_errors_total",
        "counter",
        "Error answers (HTTP JSON or exec error frames) by code.",
    ),
    (
        "kubegate_exec_total",
        "counter",
        "Finished execs by kind and result (exit, or the error code).",
    ),
    (
        "kubegate_exec_active",
        "gauge",
        "Execs running now, by kind.",
    ),
    (
        "kubegate_exec_bytes_total",
        "counter",
        "Bytes relayed by exec, by direction (in: stdin, out: stdout and stderr).",
    ),
    (
        "kubegate_exec_queue_frames",
        "gauge",
        "Frames queued towards interactive exec clients, summed over sessions.",
    ),
    (
        "kubegate_exec_recordings_truncated_total",
        "counter",
        "Recordings of interactive execs stopped before the exec ended, by reason (max_bytes: exec.recording_max_bytes; free_space: below exec.recording_min_free_bytes; error: a write failed).",
    ),
    (
        "kubegate_exec_recordings_skipped_total",
        "counter",
        "Interactive execs run without a recording, by reason (free_space: below exec.recording_min_free_bytes; error: the file could not be created).",
    ),
    (
        "kubegate_audit_rotations_total",
        "counter",
        "Times the audit log reached exec.audit_max_bytes and was renamed to FILE.1.",
    ),
    (
        "kubegate_audit_lines_dropped_total",
        "counter",
        "Audit lines that could not be written (the rotation or the write failed).",
    ),
    (
        "kubegate_watch_restarts_total",
        "counter",
        "Kubernetes watches re-opened.",
    ),
    (
        "kubegate_api_retries_total",
        "counter",
        "Kubernetes API requests and exec/attach upgrades repeated under the retry policy (429/503 with Retry-After, GETs after 5xx or transport errors, connections refused).",
    ),
    (
        "kubegate_tunnels_active",
        "gauge",
        "TCP tunnels open now, by kind (session, deployment).",
    ),
    (
        "kubegate_tunnels_total",
        "counter",
        "TCP tunnels ended, by kind and how they ended (closed, idle, max_duration, shutdown, far_error, protocol, peer_closed, socket; or the error code of a pod connection that failed).",
    ),
    (
        "kubegate_tunnel_bytes_total",
        "counter",
        "Bytes through TCP tunnels, by direction (in: client to pod, out: pod to client).",
    ),
    (
        "kubegate_body_bytes_buffered",
        "gauge",
        "Request body bytes the front door holds in memory now (being read or handled).",
    ),
    (
        "kubegate_body_budget_bytes",
        "gauge",
        "Bytes reserved in the body budget now: bodies in flight and bundles of sessions not yet seeded.",
    ),
    (
        "kubegate_peer_connections_max",
        "gauge",
        "The most not-yet-authenticated connections one peer address holds now.",
    ),
    (
        "kubegate_principal_connections",
        "gauge",
        "Long-lived connections by principal and kind (io, events, ports, tunnels, keepalive).",
    ),
    (
        "kubegate_refusals_total",
        "counter",
        "Requests refused by the front door's admission, by reason.",
    ),
    (
        "kubegate_threads",
        "gauge",
        "Threads of the daemon process.",
    ),
    (
        "kubegate_open_fds",
        "gauge",
        "Open file descriptors of the daemon process.",
    ),
    (
        "kubegate_resident_memory_bytes",
        "gauge",
        "Resident set size of the daemon process.",
    ),
];

type Key = (&'static str, String);
/// A gauge computed at scrape time.
type Probe = (&'static str, Box<dyn Fn() -> i64 + Send + Sync>);

#[derive(Default)]
pub struct Metrics {
    values: Mutex<BTreeMap<Key, i64>>,
    /// Gauges computed at scrape time (queue depths).
    probes: Mutex<Vec<Probe>>,
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Adds `by` to the series `name{labels}`; `labels` is the inside of the
    /// braces (`kind="oneshot",result="exit"`), empty for none.
    pub fn add(&self, name: &'static str, labels: impl Into<String>, by: i64) {
        *self.values.lock().entry((name, labels.into())).or_insert(0) += by;
    }

    /// Sets the gauge `name{labels}` (a zero removes the series).
    pub fn set(&self, name: &'static str, labels: impl Into<String>, v: i64) {
        let mut values = self.values.lock();
        if v == 0 {
            values.remove(&(name, labels.into()));
        } else {
            values.insert((name, labels.into()), v);
        }
    }

    pub fn inc(&self, name: &'static str, labels: impl Into<String>) {
        self.add(name, labels, 1);
    }

    /// A gauge computed at every scrape.
    pub fn probe(&self, name: &'static str, f: impl Fn() -> i64 + Send + Sync + 'static) {
        self.probes.lock().push((name, Box::new(f)));
    }

    /// The current value of one series (tests, `/metrics`).
    pub fn get(&self, name: &'static str, labels: &str) -> i64 {
        self.values
            .lock()
            .get(&(name, labels.to_string()))
            .copied()
            .unwrap_or(0)
    }

    pub fn render(&self) -> String {
        let mut values = self.values.lock().clone();
        for (name, f) in self.probes.lock().iter() {
            values.insert((name, String::new()), f());
        }
        let (threads, fds, rss) = process_figures();
        values.insert(("kubegate_threads", String::new()), threads);
        values.insert(("kubegate_open_fds", String::new()), fds);
        values.insert(("kubegate_resident_memory_bytes", String::new()), rss);
        let mut out = String::new();
        for (family, kind, help) in FAMILIES {
            let _ = writeln!(out, "# HELP {family} {help}");
            let _ = writeln!(out, "# TYPE {family} {kind}");
            for ((name, labels), v) in values.range((*family, String::new())..) {
                if name != family {
                    break;
                }
                if labels.is_empty() {
                    let _ = writeln!(out, "{name} {v}");
                } else {
                    let _ = writeln!(out, "{name}{{{labels}}} {v}");
                }
            }
        }
        out
    }
}

/// Escapes a label value (backslash, double quote, newline).
pub fn label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Threads, open fds and RSS bytes of this process (0 where unreadable).
pub fn process_figures() -> (i64, i64, i64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |k: &str| -> i64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0)
    };
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as i64);
    (field("Threads:"), fds, field("VmRSS:") * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_families_with_help_type_and_labels() {
        let m = Metrics::new();
        m.inc("kubegate_exec_total", r#"kind="oneshot",result="exit""#);
        m.add("kubegate_exec_total", r#"kind="oneshot",result="exit""#, 2);
        m.add("kubegate_exec_bytes_total", r#"direction="out""#, 10);
        m.probe("kubegate_exec_queue_frames", || 7);
        let t = m.render();
        assert!(t.contains("# TYPE kubegate_exec_total counter\n"), "{t}");
        assert!(
            t.contains("kubegate_exec_total{kind=\"oneshot\",result=\"exit\"} 3\n"),
            "{t}"
        );
        assert!(
            t.contains("kubegate_exec_bytes_total{direction=\"out\"} 10\n"),
            "{t}"
        );
        assert!(t.contains("kubegate_exec_queue_frames 7\n"), "{t}");
        assert!(
            t.lines()
                .any(|l| l.starts_with("kubegate_threads ") && !l.ends_with(" 0")),
            "{t}"
        );
        assert_eq!(
            m.get("kubegate_exec_total", r#"kind="oneshot",result="exit""#),
            3
        );
        // Every sample line belongs to a declared family.
        for l in t.lines().filter(|l| !l.starts_with('#')) {
            let name = l.split(['{', ' ']).next().unwrap();
            assert!(FAMILIES.iter().any(|(f, _, _)| *f == name), "{l}");
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
