//! The apps' runs: `run` events (started, ended) once per generation and
//! phase, from the app runner's debug frames (`Runner.RunStarted`,
//! `Runner.RunEnded`) and from container ends the pod watch reports; and
//! the apps' generations, which only grow across pods.

use super::*;
use crate::session::pod::ended_apps;

/// An app's `run` events and its runner's generations.
///
/// Run events are ordered per app: started(g) < ended(g) < started(g+1).
/// `reported` is the position of the last one emitted (`2g` for started,
/// `2g+1` for ended), so an event at or before it is a duplicate: a
/// replayed `Runner.RunStarted`/`RunEnded` after a relay reconnect, the
/// runner's first start (already announced when the session went
/// running), or a container end after the runner reported the run's end.
/// Session generations only grow, so this needs no reset across pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RunTrack {
    /// The app's session generation before the current pod started it:
    /// the runner's generation `n` (from 1 in every container) is the
    /// session's `base + n`.
    pub(super) base: u64,
    pub(super) reported: u64,
}

pub(super) fn started_pos(generation: u64) -> u64 {
    generation.saturating_mul(2)
}

pub(super) fn ended_pos(generation: u64) -> u64 {
    generation.saturating_mul(2).saturating_add(1)
}

/// What an app runner's debug frame says about its runs (docs/runner.md
/// "The debug stream").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunnerEvent {
    /// `Runner.RunStarted {generation}`.
    Started { generation: u64 },
    /// `Runner.RunEnded {generation, exitCode, signal?, error?}`.
    Ended {
        generation: u64,
        exit_code: Option<i32>,
        signal: Option<String>,
        error: Option<String>,
    },
}

/// Reads `Runner.RunStarted`/`Runner.RunEnded` from a debug frame; `None`
/// for any other frame or one without a generation of at least 1.
pub fn runner_event_from(frame: &Value) -> Option<RunnerEvent> {
    let event = frame.get("event").and_then(Value::as_str)?;
    let payload = frame.get("payload")?;
    let generation = payload
        .get("generation")
        .and_then(Value::as_u64)
        .filter(|&g| g >= 1)?;
    let text = |k: &str| {
        payload
            .get(k)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
            .map(|v| v.chars().take(512).collect::<String>())
    };
    match event {
        "Runner.RunStarted" => Some(RunnerEvent::Started { generation }),
        "Runner.RunEnded" => Some(RunnerEvent::Ended {
            generation,
            exit_code: payload
                .get("exitCode")
                .and_then(Value::as_i64)
                .and_then(|c| i32::try_from(c).ok()),
            signal: text("signal"),
            error: text("error"),
        }),
        _ => None,
    }
}

/// The `reason` of a run the app runner reported ended.
pub(super) fn runner_end_reason(
    exit_code: Option<i32>,
    signal: Option<&str>,
    error: Option<&str>,
) -> String {
    match (error, signal, exit_code) {
        (Some(e), _, _) => format!("program could not start: {e}"),
        (None, Some(s), Some(c)) => format!("program killed by {s} (exit code {c})"),
        (None, Some(s), None) => format!("program killed by {s}"),
        (None, None, Some(c)) => format!("program exited (code {c})"),
        (None, None, None) => "program ended".to_string(),
    }
}

impl Session {
    /// Whether the app's container runs it under `kubegate app-runner`
    /// (the pod builder's rule), so its runner events count.
    pub(super) fn runs_under_runner(&self, app: &str) -> bool {
        self.settings.app_runner && self.app(app).is_some_and(|a| a.spec.runner)
    }

    /// A `Runner.RunStarted`/`RunEnded` of the current pod: the app's
    /// `run` event, once per generation and phase, and its generation.
    pub(super) fn runner_run(
        &mut self,
        app: &str,
        run: RunnerEvent,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        let Some(idx) = self.apps.list.iter().position(|a| a.spec.name == app) else {
            return;
        };
        let track = self.runs.entry(app.to_string()).or_default();
        let (generation, pos, ended) = match run {
            RunnerEvent::Started { generation } => {
                let g = track.base.saturating_add(generation);
                (g, started_pos(g), None)
            }
            RunnerEvent::Ended {
                generation,
                exit_code,
                signal,
                error,
            } => {
                let g = track.base.saturating_add(generation);
                let reason = runner_end_reason(exit_code, signal.as_deref(), error.as_deref());
                let end = RunEnd {
                    exit_code,
                    reason,
                    signal,
                };
                (g, ended_pos(g), Some(end))
            }
        };
        if pos <= track.reported {
            return;
        }
        track.reported = pos;
        let a = &mut self.apps.list[idx];
        let new_generation = generation > a.generation;
        if new_generation {
            a.generation = generation;
        }
        out.push(Command::Emit(Event::Run {
            app: app.to_string(),
            generation,
            ended,
        }));
        if new_generation {
            // The view's generation changed: the record keeps it.
            self.touch(now, out);
        }
    }

    /// The current pod's app containers started (they wait for their
    /// entry): a new generation of every app. An app runner there counts
    /// its runs from 1 again.
    pub(super) fn new_generation(&mut self) {
        for a in &mut self.apps.list {
            self.runs.entry(a.spec.name.clone()).or_default().base = a.generation;
            a.generation += 1;
        }
    }

    /// The `run` starts of the current generation not yet announced (the
    /// session went running).
    pub(super) fn announce_starts(&mut self, out: &mut Vec<Command>) {
        for a in &self.apps.list {
            let track = self.runs.entry(a.spec.name.clone()).or_default();
            if track.reported >= started_pos(a.generation) {
                continue;
            }
            track.reported = started_pos(a.generation);
            out.push(Command::Emit(Event::Run {
                app: a.spec.name.clone(),
                generation: a.generation,
                ended: None,
            }));
        }
    }

    /// App containers of `pod` that ended: once per app per pod, unless the
    /// app runner reported the run's end already. With restartPolicy Never
    /// the pod stays Running when an app dies.
    pub(super) fn containers_ended(&mut self, pod: &Pod, out: &mut Vec<Command>) {
        for e in ended_apps(pod) {
            if self.pod.phase == Phase::Creating || self.pod.ended.contains(&e.app) {
                continue;
            }
            let Some(generation) = self.app(&e.app).map(|a| a.generation) else {
                continue;
            };
            self.pod.ended.insert(e.app.clone());
            let track = self.runs.entry(e.app.clone()).or_default();
            if track.reported >= ended_pos(generation) {
                continue;
            }
            track.reported = ended_pos(generation);
            out.push(Command::Emit(Event::Run {
                app: e.app,
                generation,
                ended: Some(RunEnd {
                    exit_code: Some(e.exit_code),
                    reason: e.message,
                    signal: None,
                }),
            }));
        }
    }
}
