//! Attach streams lost while running (the stream cut: an API server
//! restart, a network blip), made again with the container log's recovery
//! of the output written meanwhile, with backoff; and what an attach
//! failure says on the app's own channel (it never fails the session).

use super::*;

/// A lost attach being made again (see [`Session::attach_lost`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reattach {
    /// When the next attempt goes out; `None` while one is in flight.
    due: Option<Millis>,
    attempts: u32,
}

/// Attempts to attach again before an app's output is given up on (about
/// a minute of waits in all: a blip, not an outage, is what it rides out).
pub(super) const REATTACH_ATTEMPTS: u32 = 8;
/// The wait before the first attempt, doubling up to [`REATTACH_MAX_MS`]
/// (soon enough that a viewer misses little; the recovery fills the gap).
pub(super) const REATTACH_FIRST_MS: Millis = 500;
/// The longest wait between two attempts.
pub(super) const REATTACH_MAX_MS: Millis = 10_000;

impl Session {
    /// [`Input::AttachOk`].
    ///
    /// The stream's end is a message of its own, sent from the stream's
    /// thread, and can come first: a stream cut within a moment of being
    /// made (while its recovery reads the container log) reports its loss
    /// before the worker reports the attach made. The re-attach that loss
    /// scheduled (`due` set; one in flight has none) then stays: dropping
    /// it left the app unattached for good.
    pub(super) fn attach_ok(&mut self, pod: &str, app: &str, now: Millis, out: &mut Vec<Command>) {
        if self.is_current(pod) {
            if self.pod.reattach.get(app).is_none_or(|r| r.due.is_none()) {
                self.pod.reattach.remove(app);
            }
            self.attach_answered(app, now, out);
        }
    }

    /// [`Input::AttachFailed`]: while running, the attach was lost; during
    /// the bring-up, it answered (the failure is said on the app's channel).
    pub(super) fn attach_failed(
        &mut self,
        pod: &str,
        app: &str,
        message: String,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if !self.is_current(pod) {
            return;
        }
        if self.pod.phase == Phase::Up {
            self.attach_lost(app, Some(message), now, out);
        } else {
            self.attach_answered(app, now, out);
            let text = format!("\r\n[kubegate] failed to attach: {message}\r\n");
            out.extend(self.app_output(app, text));
        }
    }

    /// [`Input::AttachEnded`].
    pub(super) fn attach_ended(
        &mut self,
        pod: &str,
        app: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if self.is_current(pod) && self.pod.phase == Phase::Up {
            self.attach_lost(app, None, now, out);
        }
    }

    /// An app's attach ended while running. Unless its container ended
    /// (the pod watch says so, or a re-attach finds it gone), it is made
    /// again with recovery (the container log since the app's last output,
    /// or a gap notice), after 0.5 s doubling to 10 s, 8 attempts at most.
    /// A clean end says nothing (a container exiting ends its attach too);
    /// a failure says once, on the app's channel, that it reattaches, and
    /// the last one that it gave up.
    pub(super) fn attach_lost(
        &mut self,
        app: &str,
        message: Option<String>,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if self.app(app).is_none() {
            return;
        }
        if self.pod.ended.contains(app) {
            self.pod.reattach.remove(app);
            return;
        }
        let r = self
            .pod
            .reattach
            .entry(app.to_string())
            .or_insert(Reattach {
                due: None,
                attempts: 0,
            });
        r.attempts += 1;
        let attempts = r.attempts;
        if attempts > REATTACH_ATTEMPTS {
            self.pod.reattach.remove(app);
            let why = message.unwrap_or_else(|| "the stream ended".into());
            let text = format!(
                "\r\n[kubegate] failed to attach again after {REATTACH_ATTEMPTS} attempts: {why}\r\n"
            );
            out.extend(self.app_output(app, text));
            return;
        }
        let wait = REATTACH_FIRST_MS
            .saturating_mul(1 << (attempts - 1).min(8))
            .min(REATTACH_MAX_MS);
        r.due = Some(now + wait);
        if let (1, Some(m)) = (attempts, message) {
            let text = format!("\r\n[kubegate] attach lost: {m}; attaching again\r\n");
            out.extend(self.app_output(app, text));
        }
    }

    /// The re-attaches that are due (while running; dropped otherwise).
    pub(super) fn reattach_due(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.pod.phase != Phase::Up {
            self.pod.reattach.clear();
            return;
        }
        let pod = self.pod_name();
        let ended = &self.pod.ended;
        self.pod.reattach.retain(|app, _| !ended.contains(app));
        for (name, r) in self.pod.reattach.iter_mut() {
            if r.due.is_some_and(|d| now >= d) {
                let Some(a) = self.apps.list.iter().find(|a| &a.spec.name == name) else {
                    continue;
                };
                r.due = None;
                out.push(Session::attach_command(&pod, a, true));
            }
        }
    }
}
