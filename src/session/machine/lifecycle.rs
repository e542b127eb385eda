//! What happens to a session between its bring-ups: checkpoints (periodic,
//! and before a suspend or an apps change), suspend and resume, stop, the
//! apps change, reloads and their rate, the maximum life, the idle
//! suspension, the suspended TTL, failures and the teardown of a pod.

use super::*;

/// What waits for the checkpoint in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum AfterCheckpoint {
    Suspend { why: String },
    SetApps(Vec<AppSpec>),
}

impl Session {
    pub(super) fn checkpoint(&mut self, out: &mut Vec<Command>) {
        if self.checkpoints.in_flight {
            // The one in flight serves (it started moments ago).
            return;
        }
        self.checkpoints.in_flight = true;
        out.push(Command::Checkpoint {
            pod: self.pod_name(),
            ip: self.pod_ip(),
        });
    }

    pub(super) fn request_suspend(&mut self, why: String, out: &mut Vec<Command>) {
        self.progress(
            out,
            "suspend",
            &format!("{why}: checkpointing the workspace"),
        );
        self.checkpoints.after = Some(AfterCheckpoint::Suspend { why });
        self.checkpoint(out);
    }

    pub(super) fn suspend_now(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.teardown(now, out);
        self.life.suspended_at = Some(now);
        self.set_status(now, Status::Suspended, out);
    }

    /// Ends everything tied to the current pod: the watch first (so the
    /// delete is not reported as a failure), relays, probes, attach
    /// streams, then the pod itself.
    pub(super) fn teardown(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.life.used_ms = self.life_used(now);
        self.life.since = None;
        self.checkpoints.in_flight = false;
        self.checkpoints.after = None;
        self.routes.changes.clear();
        self.routes.probes.clear();
        self.pod.ended.clear();
        let phase = std::mem::replace(&mut self.pod.phase, Phase::Down);
        if let Phase::Draining { old, .. } = phase {
            out.push(Command::StopWatch { name: old });
            return;
        }
        let Some(p) = self.pod.current.take() else {
            return;
        };
        if phase != Phase::Creating {
            out.push(Command::StopWatch {
                name: p.name.clone(),
            });
        }
        if phase == Phase::Up || matches!(phase, Phase::Publishing { .. }) {
            out.push(Command::StopRelays {
                pod: p.name.clone(),
            });
            out.push(Command::StopProbes {
                pod: p.name.clone(),
            });
            out.push(Command::CloseAttaches {
                pod: p.name.clone(),
            });
        }
        out.push(Command::DeletePod { name: p.name });
    }

    pub(super) fn fail(
        &mut self,
        now: Millis,
        stage: Stage,
        message: String,
        out: &mut Vec<Command>,
    ) {
        if self.status.is_terminal() {
            return;
        }
        self.teardown(now, out);
        self.set_status(now, Status::Failed { stage, message }, out);
        out.push(Command::Finished);
    }

    /// The session's maximum life is reached: it stops.
    pub(super) fn end_of_life(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.pod.user_stopped = true;
        self.teardown(now, out);
        self.progress(
            out,
            "stop",
            &format!(
                "the session reached its maximum life ({} s)",
                self.timings.max_life_ms / 1000
            ),
        );
        if self.checkpoints.exists {
            out.push(Command::DeleteCheckpoint);
            self.checkpoints.exists = false;
        }
        self.set_status(now, Status::Stopped, out);
        out.push(Command::Finished);
    }

    pub(super) fn tick(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.status.is_terminal() {
            return;
        }
        if !self.pod.reattach.is_empty() {
            self.reattach_due(now, out);
        }
        self.poll_routes(now, out);
        if self.life.since.is_some() && self.life_used(now) >= self.timings.max_life_ms {
            self.end_of_life(now, out);
            return;
        }
        match &self.pod.phase {
            Phase::Scheduling {
                deadline,
                last_progress,
            } if now >= *deadline => {
                let last = last_progress.clone().unwrap_or_else(|| "Scheduling".into());
                let secs = self.timings.start_deadline_ms / 1000;
                self.fail(
                    now,
                    Stage::Schedule,
                    format!("pod did not reach Running within {secs} s (last: {last})"),
                    out,
                );
            }
            Phase::Agent { deadline } if now >= deadline + AGENT_DEADLINE_SLACK_MS => {
                let secs = self.timings.agent_deadline_ms / 1000;
                self.fail(
                    now,
                    Stage::Workspace,
                    format!("workspace agent did not answer within {secs} s"),
                    out,
                );
            }
            Phase::Up => {
                let idle = self.viewers.idle_since.is_some_and(|t| {
                    self.viewers.count == 0 && now.saturating_sub(t) >= self.timings.idle_ms
                });
                if idle && self.checkpoints.after.is_none() {
                    let secs = self.timings.idle_ms / 1000;
                    self.request_suspend(format!("no subscriber for {secs} s"), out);
                } else if self
                    .checkpoints
                    .last_at
                    .is_none_or(|t| now.saturating_sub(t) >= self.timings.checkpoint_interval_ms)
                {
                    self.checkpoint(out);
                }
            }
            Phase::Draining { deadline, .. } if now >= *deadline => {
                self.drained(now, true, out);
            }
            Phase::Down if self.status == Status::Suspended => {
                let since = self.life.suspended_at.unwrap_or(self.updated_at);
                if now.saturating_sub(since) >= self.timings.suspended_ttl_ms {
                    self.progress(out, "stop", "the suspended session expired");
                    out.push(Command::DeleteCheckpoint);
                    self.checkpoints.exists = false;
                    self.set_status(now, Status::Stopped, out);
                    out.push(Command::Finished);
                }
            }
            _ => {}
        }
    }
    /// [`Input::CheckpointDone`]: what waited for it goes on.
    pub(super) fn checkpoint_done(&mut self, pod: &str, now: Millis, out: &mut Vec<Command>) {
        if !self.is_current(pod) || !self.checkpoints.in_flight {
            return;
        }
        self.checkpoints.in_flight = false;
        self.checkpoints.last_at = Some(now);
        if !self.checkpoints.exists {
            self.checkpoints.exists = true;
            out.push(Command::WriteRecord);
        }
        match self.checkpoints.after.take() {
            Some(AfterCheckpoint::Suspend { .. }) => self.suspend_now(now, out),
            Some(AfterCheckpoint::SetApps(apps)) => {
                self.teardown(now, out);
                self.replace_apps(apps);
                self.restart_from_checkpoint(now, out);
            }
            None => {}
        }
    }

    /// [`Input::CheckpointFailed`]: what waited for it is given up, and
    /// said.
    pub(super) fn checkpoint_failed(
        &mut self,
        pod: &str,
        message: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if !self.is_current(pod) || !self.checkpoints.in_flight {
            return;
        }
        self.checkpoints.in_flight = false;
        // Try again after a full interval, not at every tick.
        self.checkpoints.last_at = Some(now);
        match self.checkpoints.after.take() {
            Some(AfterCheckpoint::Suspend { .. }) => {
                // Idle or asked: try again after another idle
                // period (a subscriber may come back meanwhile).
                self.viewers.idle_since = (self.viewers.count == 0).then_some(now);
                self.progress(
                    out,
                    "suspend",
                    &format!("suspend failed: the workspace could not be checkpointed: {message}"),
                );
            }
            Some(AfterCheckpoint::SetApps(_)) => self.progress(
                out,
                "apps",
                &format!(
                    "changing the apps failed: the workspace could not be checkpointed: {message}"
                ),
            ),
            None => {}
        }
    }

    /// [`Input::ReloadFailed`]: said on the app's channel.
    pub(super) fn reload_failed(
        &mut self,
        pod: &str,
        app: &str,
        message: &str,
        out: &mut Vec<Command>,
    ) {
        if self.is_current(pod) {
            let text = format!("\r\n[kubegate] reload failed: {message}\r\n");
            out.extend(self.app_output(app, text));
        }
    }

    /// [`Input::Subscribers`]: the idle clock starts when the last one
    /// leaves.
    pub(super) fn subscribers(&mut self, count: usize, now: Millis) {
        if count == 0 {
            if self.viewers.count > 0 || self.viewers.idle_since.is_none() {
                self.viewers.idle_since = Some(now);
            }
        } else {
            self.viewers.idle_since = None;
        }
        self.viewers.count = count;
    }

    /// Starting again (stage create), a new pod seeded from the
    /// checkpoint: a resume, an apps change.
    fn restart_from_checkpoint(&mut self, now: Millis, out: &mut Vec<Command>) {
        let starting = Status::Starting {
            stage: Stage::Create,
        };
        self.set_status(now, starting, out);
        self.bring_up(now, SeedSource::Checkpoint, out);
    }

    /// [`UserOp::Stop`]: idempotent; the checkpoint goes.
    pub(super) fn stop(&mut self, now: Millis, out: &mut Vec<Command>) {
        if self.status.is_terminal() {
            return;
        }
        self.pod.user_stopped = true;
        let was_suspended = self.status == Status::Suspended;
        self.teardown(now, out);
        if was_suspended || self.checkpoints.exists {
            out.push(Command::DeleteCheckpoint);
            self.checkpoints.exists = false;
        }
        self.set_status(now, Status::Stopped, out);
        out.push(Command::Finished);
    }

    /// [`UserOp::Resume`] of a suspended session.
    pub(super) fn resume(&mut self, now: Millis, out: &mut Vec<Command>) -> Result<(), ApiError> {
        if self.status != Status::Suspended {
            return Err(ApiError::new(
                Code::NotSuspended,
                format!(
                    "session {} is {}, not suspended",
                    self.who.id,
                    self.status.as_str()
                ),
            ));
        }
        self.life.suspended_at = None;
        self.restart_from_checkpoint(now, out);
        Ok(())
    }

    /// [`UserOp::Reload`]: the app's entry touched, at most
    /// [`Timings::reloads_per_minute`] in any minute.
    pub(super) fn reload(
        &mut self,
        app: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) -> Result<(), ApiError> {
        self.require_running()?;
        let entry = match self.app(app) {
            Some(a) => a.spec.entry.clone(),
            None => {
                return Err(ApiError::new(
                    Code::NotFound,
                    format!("session {} has no app {app:?}", self.who.id),
                ))
            }
        };
        while self
            .reloads
            .front()
            .is_some_and(|&t| now.saturating_sub(t) >= 60_000)
        {
            self.reloads.pop_front();
        }
        if self.reloads.len() as u64 >= self.timings.reloads_per_minute {
            return Err(ApiError::new(
                Code::ReloadRateLimited,
                format!(
                    "more than {} reloads in a minute",
                    self.timings.reloads_per_minute
                ),
            ));
        }
        self.reloads.push_back(now);
        out.push(Command::Touch {
            pod: self.pod_name(),
            ip: self.pod_ip(),
            path: entry,
        });
        Ok(())
    }

    /// [`UserOp::SetApps`]: a suspended session's set is replaced for the
    /// next resume; a running one checkpoints, then recreates its pod.
    pub(super) fn set_apps(
        &mut self,
        apps: Vec<AppSpec>,
        now: Millis,
        out: &mut Vec<Command>,
    ) -> Result<(), ApiError> {
        if self.status == Status::Suspended {
            self.replace_apps(apps);
            self.touch(now, out);
            return Ok(());
        }
        self.require_running()?;
        self.checkpoints.after = Some(AfterCheckpoint::SetApps(apps));
        self.progress(
            out,
            "apps",
            "Checkpointing the workspace to change the apps",
        );
        self.checkpoint(out);
        Ok(())
    }

    /// User operations other than stop and resume need a running session
    /// with nothing waiting for a checkpoint.
    pub(super) fn require_running(&self) -> Result<(), ApiError> {
        if self.status != Status::Running || self.pod.phase != Phase::Up {
            return Err(ApiError::new(
                Code::NotRunning,
                format!(
                    "session {} is {}, not running",
                    self.who.id,
                    self.status.as_str()
                ),
            ));
        }
        if self.checkpoints.after.is_some() {
            return Err(ApiError::new(
                Code::NotRunning,
                format!("session {} is being suspended or changed", self.who.id),
            ));
        }
        Ok(())
    }
}
