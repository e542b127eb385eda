//! An app's attach stream, started by the owner on a worker, and a
//! re-adoption's recovery of what the app wrote while the daemon was down
//! (read from the container log, delivered before the held live output).

use super::owner::Owner;
use super::{now_ns, Msg};
use crate::kube::client::{Api, Client, LogParams, Pod};
use crate::kube::remote::RemoteError;
use crate::session::io::attach::attach;
use crate::session::io::ring::{AppIo, Hold, Recovered};
use crate::session::machine::{Input, OutStream};
use std::time::{Duration, Instant};

impl Owner {
    /// Attaches to an app container on a worker; the stream's end comes
    /// back as an input (a failure on the app's own channel). The app's
    /// output is held from before the attach starts until what the
    /// attach could not deliver is read from the container log
    /// ([`recover_output`]) and goes first:
    ///
    /// - `recover` (a re-adoption, a re-attach after a cut): what the app
    ///   wrote since the last output, read before the attach is answered;
    /// - otherwise (a new pod's container): what it wrote before the
    ///   attach was delivering, its whole log so far, read after the
    ///   attach is answered, so `running` does not wait for it. A real API
    ///   server answers an attach's upgrade before its own stream to the
    ///   kubelet is up, and an app's first lines fell in between.
    pub(super) fn attach(
        &self,
        pod: String,
        app: String,
        container: String,
        tty: bool,
        recover: bool,
    ) {
        let io = self.handle.io(&app);
        // None: a new container, whose whole log is new output.
        let since = recover.then(|| io.last_output_ns());
        // Taken here, on the owner's thread, in the order the attaches are
        // made: a later attach's hold replaces this one's.
        let hold = io.hold();
        let conn = self.engine.conn.clone();
        let client = self.engine.client.clone();
        let ns = self.engine.settings.pod.namespace.clone();
        let log_bytes = self.engine.settings.io_ring_bytes.saturating_add(64 << 10);
        let attaches = self.attaches.clone();
        let tx = self.inbox_tx.clone();
        let answer_tx = self.inbox_tx.clone();
        let sid = self.handle.id.clone();
        let held = io.clone();
        let spawned = self.work_opt(move || {
            let (p, a) = (pod.clone(), app.clone());
            let on_end = move |r: Result<(), RemoteError>| {
                let input = match r {
                    Err(e) => Input::AttachFailed {
                        pod: p,
                        app: a,
                        message: e.to_string(),
                    },
                    Ok(()) => Input::AttachEnded { pod: p, app: a },
                };
                let _ = tx.send(Msg::Input(input));
            };
            let r = attach(&conn, &ns, &pod, &container, tty, io.clone(), on_end);
            let attached_at = r.is_ok().then(now_ns);
            log::debug!(
                "session {sid}: {container}: attach {} (last output {since:?})",
                match &r {
                    Ok(_) => "made".to_string(),
                    Err(e) => format!("failed: {e}"),
                }
            );
            let what = RecoverTarget {
                session: &sid,
                namespace: &ns,
                pod: &pod,
                container: &container,
                max_bytes: log_bytes,
            };
            if r.is_err() {
                // No attach, so nothing to put a recovery before: the next
                // attempt recovers from the same last output. Reading the
                // log now (the API server is likely out) would only
                // announce a gap that attempt fills. (Its hold has nothing
                // of its own; an earlier attach's, replaced, is not ended.)
                io.release(hold, Recovered::Complete(Vec::new()), main_stream(tty));
            } else if since.is_some() {
                recover_output(&client, &what, &io, hold, since, attached_at, tty);
            }
            let answer = match r {
                Ok(h) => {
                    let mut g = attaches.lock();
                    if g.closed.contains(&pod) {
                        drop(g);
                        h.close();
                        io.release(hold, Recovered::Complete(Vec::new()), main_stream(tty));
                        return None;
                    }
                    let open = g.open.entry(pod.clone()).or_default();
                    // Attaches that ended (a re-attach replaces one).
                    open.retain(|h| !h.is_finished());
                    open.push(h);
                    Input::AttachOk {
                        pod: pod.clone(),
                        app,
                    }
                }
                Err(e) => {
                    return Some(Input::AttachFailed {
                        pod,
                        app,
                        message: e.to_string(),
                    })
                }
            };
            if since.is_some() {
                return Some(answer);
            }
            // A new container: answered first, then its early output.
            let _ = answer_tx.send(Msg::Input(answer));
            recover_output(&client, &what, &io, hold, None, attached_at, tty);
            None
        });
        if !spawned {
            held.release(hold, Recovered::Unavailable, main_stream(tty));
        }
    }
}

/// An app's main output stream: where recovered output and gap notices go
/// (a container log merges stdout and stderr).
fn main_stream(tty: bool) -> OutStream {
    if tty {
        OutStream::Tty
    } else {
        OutStream::Stdout
    }
}

/// Whose log [`recover_output`] reads, and how much of it at most.
struct RecoverTarget<'a> {
    session: &'a str,
    namespace: &'a str,
    pod: &'a str,
    container: &'a str,
    max_bytes: usize,
}

/// How long a re-adoption waits for the new attach to deliver the lines
/// the log stamped after the attach began (so they are recovered once).
const ATTACH_CATCH_UP: Duration = Duration::from_secs(1);
/// How far before the last output's arrival the recovery reads the log:
/// what was in flight when the stream was cut (2 s).
const IN_FLIGHT_MARGIN_NS: u64 = 2_000_000_000;
/// The waits before reading a container log again after a transient
/// failure (see [`recover_output`]).
const LOG_RETRIES: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];
/// How long the recovery waits for the new attach's first output before it
/// reads the log. A real API server answers the attach's upgrade before its
/// own stream to the kubelet is up (its stream translator), so what the
/// app writes in between is in neither the attach nor a log read made at
/// once; read after the attach has delivered, the log overlaps it instead.
/// An app that writes nothing meanwhile costs this wait.
const ATTACH_FIRST_OUTPUT: Duration = Duration::from_secs(2);

/// Reads what the app wrote after `since_ns` (the last output the daemon
/// pushed before it stopped) from its container log (`timestamps=true`,
/// `sinceTime`; at most `t.max_bytes`) and releases `hold` (`io`'s held
/// output) behind it (see `session::recover`); nothing once a newer
/// attach's hold replaced it. Lines stamped at or after
/// `attached_at_ns` (the new attach was up) come through the attach too:
/// the release waits (at most [`ATTACH_CATCH_UP`]) until the held output
/// starts with them, so the overlap is dropped once, not delivered twice;
/// lines the attach never delivers stay in the recovery. A log that
/// cannot be read is a gap notice in the stream, and a warning.
fn recover_output(
    client: &Client,
    t: &RecoverTarget<'_>,
    io: &AppIo,
    hold: Hold,
    since: Option<u64>,
    attached_at_ns: Option<u64>,
    tty: bool,
) {
    // From a margin before the last output: a line stamped before its
    // arrival may not have reached the daemon (`recover::undelivered`).
    // A new container (`None`): all of its log.
    let from_ns = match since {
        None | Some(0) => 0,
        Some(ns) => ns.saturating_sub(IN_FLIGHT_MARGIN_NS),
    };
    let params = LogParams {
        container: Some(t.container.to_string()),
        since_time: crate::session::recover::since_time(from_ns),
        timestamps: true,
        tail_lines: None,
    };
    if attached_at_ns.is_some() {
        let deadline = Instant::now() + ATTACH_FIRST_OUTPUT;
        while !io.held_has_output(hold) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    if !io.holds(hold) {
        // A newer attach took over (this one's stream was cut meanwhile):
        // its recovery reads the same window and more.
        log::debug!(
            "session {}: {}: a newer attach took over this one's recovery",
            t.session,
            t.container
        );
        return;
    }
    let api = Api::<Pod>::namespaced(client, t.namespace);
    // A cut of the connection to the API server just after the attach was
    // made (the same blip that cut the last one) is not yet a gap: the log
    // is read again, 0.5 s then 1 s then 2 s later, before one is said.
    let mut read = api.logs(t.pod, &params, t.max_bytes);
    for wait in LOG_RETRIES {
        match &read {
            Err(e) if e.is_retryable() => {
                std::thread::sleep(wait);
                read = api.logs(t.pod, &params, t.max_bytes);
            }
            _ => break,
        }
    }
    let recovered = match read {
        Ok(log) => {
            let stamped = crate::session::recover::lines_after(&log.body, from_ns);
            let span: usize = stamped.iter().map(|(_, l)| l.len()).sum();
            let read_lines = stamped.len();
            // What viewers were given before is another container's
            // output when this one is new: nothing to compare.
            let stamped = match since {
                Some(ns) => {
                    crate::session::recover::undelivered(stamped, ns, &io.delivered_tail(span + 1))
                }
                None => stamped,
            };
            let late =
                attached_at_ns.map_or(0, |t| crate::session::recover::stamped_from(&stamped, t));
            // Counts and times only: an app's output never goes to the log.
            log::debug!(
                "session {}: {}: log read from {from_ns} (last output {since:?}, attached {}): \
                 {read_lines} lines, {} not delivered (stamped {}..{}), {late} after the attach",
                t.session,
                t.container,
                attached_at_ns.unwrap_or(0),
                stamped.len(),
                stamped.first().map_or(0, |l| l.0),
                stamped.last().map_or(0, |l| l.0),
            );
            let lines: Vec<tungstenite::Bytes> = stamped.into_iter().map(|(_, l)| l).collect();
            if late > 0 && !log.truncated {
                // A bounded poll on this worker: the attach's pump pushes
                // into the held output on its own thread.
                // Covered once the held output starts with the log's last
                // lines (the attach delivers from its own start, which may
                // come after lines the log stamped as late).
                let deadline = Instant::now() + ATTACH_CATCH_UP;
                while io.held_covers(hold, &lines) == 0 && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let n: usize = lines.iter().map(|l| l.len()).sum();
            let cut = if log.truncated {
                " (its start only: announcing a gap after it)"
            } else {
                ""
            };
            if since.is_some() {
                log::info!(
                    "session {}: {}: {n} bytes written since the last output read from the container log{cut}",
                    t.session,
                    t.container,
                );
            } else {
                // Every start: what the attach delivers as well is dropped
                // at the release.
                log::debug!(
                    "session {}: {}: {n} bytes of a new container's log read{cut}",
                    t.session,
                    t.container,
                );
            }
            if log.truncated {
                Recovered::Truncated(lines)
            } else {
                Recovered::Complete(lines)
            }
        }
        // A new container: whether it wrote anything before the attach is
        // not known, so a gap announced at every start of a cluster that
        // refuses the read would be noise; said in the daemon's log.
        Err(e) if since.is_none() => {
            log::warn!(
                "session {}: {}: the container log is not available ({e}): \
                 what the app printed before the attach was up is not recovered",
                t.session,
                t.container
            );
            Recovered::Complete(Vec::new())
        }
        Err(e) => {
            log::warn!(
                "session {}: {}: the container log is not available ({e}): announcing a gap",
                t.session,
                t.container
            );
            Recovered::Unavailable
        }
    };
    if !io.holds(hold) {
        log::debug!(
            "session {}: {}: a newer attach took over while the log was read",
            t.session,
            t.container
        );
    }
    io.release(hold, recovered, main_stream(tty));
}
