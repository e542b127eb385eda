//! A pod from its create to `running` (docs/sessions.md#start, steps 1-8): create,
//! the token Secret, schedule (provisioning progress), the workspace agent,
//! the seed, then publish and attach every app; and what the pod watch
//! says about the current pod on the way and afterwards (its end, its
//! disappearance). Each step has its deadline or failure, named by its
//! stage.

use super::*;
use crate::session::pod::{
    build_pod, deadline_exceeded, failure_detail, inspect_port, provision_message, PodInput,
    Requested,
};
use crate::session::spec::Io;

/// Slack after the agent deadline before the machine gives up on its own
/// (the engine's probe normally reports first, with its last error).
pub(super) const AGENT_DEADLINE_SLACK_MS: u64 = 5_000;

/// Where the current pod's bring-up stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Phase {
    /// No pod.
    Down,
    Creating,
    Scheduling {
        deadline: Millis,
        last_progress: Option<String>,
    },
    Agent {
        deadline: Millis,
    },
    Seeding,
    /// Publishing endpoints (`id`) and attaching every app (`attaching`:
    /// the apps whose attach has not answered yet); `running` once both
    /// are done (docs/sessions.md#start, steps 6-8), so a viewer that connects on
    /// `running` never types into an app that is not attached yet.
    Publishing {
        id: u64,
        published: bool,
        attaching: std::collections::BTreeSet<String>,
        /// Re-adopting a running pod after a daemon restart (no seed:
        /// attach with log recovery, publish, then `running` again).
        adopting: bool,
    },
    Up,
    /// After a daemon restart, the session's pod was found terminating:
    /// wait (until `deadline`) for it to go, then recreate it from the
    /// checkpoint.
    Draining {
        old: String,
        deadline: Millis,
    },
}

impl Phase {
    pub(super) fn stage(&self) -> Stage {
        match self {
            Phase::Down | Phase::Creating => Stage::Create,
            Phase::Scheduling { .. } => Stage::Schedule,
            Phase::Agent { .. } => Stage::Workspace,
            Phase::Seeding => Stage::Seed,
            Phase::Publishing { adopting: true, .. } | Phase::Up => Stage::Run,
            Phase::Publishing { .. } => Stage::Publish,
            Phase::Draining { .. } => Stage::Create,
        }
    }
}

impl Session {
    /// Builds and creates a new pod (new name, remaining life).
    pub(super) fn bring_up(&mut self, now: Millis, seed: SeedSource, out: &mut Vec<Command>) {
        let lived = self.life_used(now);
        if lived >= self.timings.max_life_ms {
            self.end_of_life(now, out);
            return;
        }
        self.life.since = Some(now);
        let remaining_secs = (self.timings.max_life_ms - lived).div_ceil(1000);
        self.pod.seq += 1;
        let name = pod::pod_name(&self.who.id, now, self.pod.seq);
        let built = build_pod(
            &self.settings,
            &PodInput {
                session_id: &self.who.id,
                principal: &self.who.principal,
                spec: &self.apps.spec,
                pod_name: &name,
                remaining_life_secs: remaining_secs,
                requested: &Requested::default(),
            },
        );
        self.pod.current = Some(PodRef {
            name,
            uid: None,
            ip: None,
        });
        self.pod.phase = Phase::Creating;
        self.pod.seed = seed;
        self.pod.ended.clear();
        self.pod.user_stopped = false;
        self.set_stage(Stage::Create);
        self.progress(out, "create", "Creating pod");
        out.push(Command::CreatePod {
            pod: Box::new(built),
        });
    }

    /// [`Input::PodCreated`].
    pub(super) fn pod_created(
        &mut self,
        pod: String,
        uid: String,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if !self.is_current(&pod) {
            // A stop (or a failure) raced the create: the pod exists
            // now and nobody owns it.
            out.push(Command::DeletePod { name: pod });
        } else if self.pod.phase == Phase::Creating {
            // First: the workspace container waits for its token
            // (CreateContainerConfigError) until the Secret exists.
            out.push(Command::CreateSecret {
                pod: pod.clone(),
                uid: uid.clone(),
            });
            if let Some(p) = self.pod.current.as_mut() {
                p.uid = Some(uid);
            }
            self.pod.phase = Phase::Scheduling {
                deadline: now + self.timings.start_deadline_ms,
                last_progress: None,
            };
            self.set_stage(Stage::Schedule);
            out.push(Command::WatchPod { name: pod });
            self.progress(out, "schedule", "Scheduling");
        }
    }

    /// [`Input::PodCreateFailed`].
    pub(super) fn pod_create_failed(
        &mut self,
        pod: &str,
        message: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if self.is_current(pod) && self.pod.phase == Phase::Creating {
            let message = format!("failed to create pod: {message}");
            self.fail(now, Stage::Create, message, out);
        }
    }

    /// [`Input::SecretFailed`].
    pub(super) fn secret_failed(
        &mut self,
        pod: &str,
        message: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        // Until the agent answered, the pod cannot work without it;
        // afterwards (a re-adoption's, or a late answer) the Secret
        // was there when the agent started.
        let before_agent = matches!(
            self.pod.phase,
            Phase::Scheduling { .. } | Phase::Agent { .. }
        );
        if self.is_current(pod) && before_agent && !self.pod.user_stopped {
            let message = format!("failed to create the workspace token Secret: {message}");
            self.fail(now, Stage::Create, message, out);
        }
    }

    /// [`Input::PodGone`].
    pub(super) fn pod_gone(&mut self, pod: &str, now: Millis, out: &mut Vec<Command>) {
        if matches!(&self.pod.phase, Phase::Draining { old, .. } if old == pod) {
            self.drained(now, false, out);
        } else if self.is_current(pod) && !self.pod.user_stopped {
            let stage = self.pod.phase.stage();
            let message = match self.pod.phase {
                Phase::Creating | Phase::Scheduling { .. } => {
                    "pod disappeared before reaching Running".to_string()
                }
                _ => "session pod was deleted".to_string(),
            };
            self.fail(now, stage, message, out);
        }
    }

    /// [`Input::AgentReady`]: seed the workspace.
    pub(super) fn agent_ready(&mut self, pod: String, out: &mut Vec<Command>) {
        if self.is_current(&pod) && matches!(self.pod.phase, Phase::Agent { .. }) {
            self.pod.phase = Phase::Seeding;
            self.set_stage(Stage::Seed);
            self.progress(out, "seed", "Seeding workspace");
            let ip = self.pod_ip();
            out.push(Command::Seed {
                pod,
                ip,
                source: self.pod.seed,
            });
        }
    }

    /// [`Input::AgentFailed`].
    pub(super) fn agent_failed(
        &mut self,
        pod: &str,
        message: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if self.is_current(pod) && matches!(self.pod.phase, Phase::Agent { .. }) {
            let message = format!("workspace agent did not become ready: {message}");
            self.fail(now, Stage::Workspace, message, out);
        }
    }

    /// [`Input::SeedDone`]: attach every app and publish.
    pub(super) fn seed_done(&mut self, pod: String, out: &mut Vec<Command>) {
        if self.is_current(&pod) && self.pod.phase == Phase::Seeding {
            if self.pod.seed == SeedSource::Bundle {
                out.push(Command::DropBundle);
            }
            self.attach_and_publish(&pod, false, out);
            self.set_stage(Stage::Publish);
            self.progress(out, "publish", "Publishing endpoints");
        }
    }

    /// [`Input::SeedFailed`].
    pub(super) fn seed_failed(
        &mut self,
        pod: &str,
        message: &str,
        now: Millis,
        out: &mut Vec<Command>,
    ) {
        if self.is_current(pod) && self.pod.phase == Phase::Seeding {
            let message = format!("seeding the workspace failed: {message}");
            self.fail(now, Stage::Seed, message, out);
        }
    }

    /// The attach of `app` to `pod` (`recover`: with the container log's
    /// recovery of the output written while nobody was attached).
    pub(super) fn attach_command(pod: &str, app: &App, recover: bool) -> Command {
        Command::Attach {
            pod: pod.to_string(),
            app: app.spec.name.clone(),
            container: app.spec.container(),
            tty: app.spec.io == Io::Tty,
            recover,
        }
    }

    /// Attaches every app of `pod` and publishes; `running` follows when
    /// both answered ([`Phase::Publishing`]). `adopting`: a re-adoption's
    /// (with recovery).
    pub(super) fn attach_and_publish(&mut self, pod: &str, adopting: bool, out: &mut Vec<Command>) {
        for a in &self.apps.list {
            out.push(Session::attach_command(pod, a, adopting));
        }
        let id = self.publish(out);
        self.pod.phase = Phase::Publishing {
            id,
            published: false,
            attaching: self.apps.names(),
            adopting,
        };
    }

    /// A watch event or a read of a pod: the current pod's container ends,
    /// its failure, or its progress while scheduling.
    pub(super) fn observe(&mut self, pod: Pod, now: Millis, out: &mut Vec<Command>) {
        let name = pod.metadata.name().to_string();
        if !self.is_current(&name) || self.pod.user_stopped {
            return;
        }
        self.containers_ended(&pod, out);
        let phase = pod.phase();
        if phase == "Failed" || phase == "Succeeded" {
            self.pod_ended(&pod, now, out);
            return;
        }
        if let Phase::Scheduling { last_progress, .. } = &mut self.pod.phase {
            let ip = pod.pod_ip().filter(|ip| !ip.is_empty());
            if let (Some(ip), "Running") = (ip, phase) {
                if let Some(p) = self.pod.current.as_mut() {
                    p.ip = Some(ip.to_string());
                    if p.uid.is_none() {
                        p.uid = pod.metadata.uid.clone();
                    }
                }
                let deadline = now + self.timings.agent_deadline_ms;
                self.pod.phase = Phase::Agent { deadline };
                self.new_generation();
                self.set_stage(Stage::Workspace);
                self.progress(out, "workspace", "Starting workspace");
                out.push(Command::ProbeAgent {
                    pod: name,
                    ip: ip.to_string(),
                    deadline,
                });
            } else {
                let msg = provision_message(&pod);
                if last_progress.as_deref() != Some(msg.as_str()) {
                    *last_progress = Some(msg.clone());
                    out.push(Command::Emit(Event::Progress {
                        phase: "schedule".into(),
                        message: msg,
                        app: None,
                    }));
                }
            }
        }
    }

    /// The current pod reached Failed or Succeeded: a failure of the stage
    /// it was in, or the end of the session's life.
    fn pod_ended(&mut self, pod: &Pod, now: Millis, out: &mut Vec<Command>) {
        let phase = pod.phase();
        let detail = failure_detail(pod);
        if self.pod.phase.stage() != Stage::Run {
            let stage = self.pod.phase.stage();
            let message = format!("pod reached {phase} before serving ({detail})");
            self.fail(now, stage, message, out);
        } else if deadline_exceeded(pod) {
            self.end_of_life(now, out);
        } else {
            let message = format!("session pod reached {phase} ({detail})");
            self.fail(now, Stage::Run, message, out);
        }
    }

    /// An app's attach answered (either way) during the bring-up.
    pub(super) fn attach_answered(&mut self, app: &str, now: Millis, out: &mut Vec<Command>) {
        if let Phase::Publishing {
            published,
            attaching,
            ..
        } = &mut self.pod.phase
        {
            attaching.remove(app);
            if *published && attaching.is_empty() {
                self.go_running(now, out);
            }
        }
    }

    /// The bring-up's publish answered: `running` once every attach did
    /// too. `false` when `id` is not the bring-up's publish.
    pub(super) fn bring_up_published(
        &mut self,
        id: u64,
        now: Millis,
        out: &mut Vec<Command>,
    ) -> bool {
        let all_attached = match &mut self.pod.phase {
            Phase::Publishing {
                id: current,
                published,
                attaching,
                ..
            } if *current == id => {
                *published = true;
                attaching.is_empty()
            }
            _ => return false,
        };
        if all_attached {
            self.go_running(now, out);
        }
        true
    }

    /// Running: the status (with endpoints), the apps' debug relays, the
    /// probes of tcp ports, the apps' `run` starts not yet announced.
    pub(super) fn go_running(&mut self, now: Millis, out: &mut Vec<Command>) {
        self.pod.phase = Phase::Up;
        self.pod.reattach.clear();
        self.checkpoints.last_at = Some(now);
        if self.viewers.count == 0 {
            self.viewers.idle_since = Some(now);
        }
        let (pod, ip) = (self.pod_name(), self.pod_ip());
        self.set_status(now, Status::Running, out);
        for (i, a) in self.apps.list.iter().enumerate() {
            out.push(Command::StartRelay {
                pod: pod.clone(),
                ip: ip.clone(),
                app: a.spec.name.clone(),
                port: inspect_port(i),
            });
        }
        self.start_probes(out);
        self.announce_starts(out);
    }
}
