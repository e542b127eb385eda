//! Daemon start: every session recorded in the state directory brought
//! back ([`Engine::restore`]): its pod re-adopted or recreated from its
//! checkpoint, its output rings reloaded; records of ended sessions
//! removed with their files. Also the state directory's inventory the
//! reaper reads ([`Engine::known_session_ids`]).

use super::{e_path, now_ms, watch_selector, Engine};
use crate::kube::client::{Api, KubeError, ListParams, Pod};
use crate::session::io::persist::decode_ring;
use crate::session::io::ring::AppIo;
use crate::session::machine::Session;
use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

/// What [`Engine::restore`] found in the state directory.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Restored {
    /// Running sessions whose pod is being re-adopted.
    pub adopting: usize,
    /// Sessions brought up again from their checkpoint (pod gone or
    /// terminating, or a start cut by the restart).
    pub recreating: usize,
    pub suspended: usize,
    /// Sessions that could not be brought back (failed, with the reason on
    /// their stream).
    pub failed: usize,
    /// Records of sessions that had ended, removed with their files.
    pub removed: usize,
    /// Record files that could not be read (left in place, logged).
    pub unreadable: usize,
}

/// Why [`Engine::restore`] failed: the daemon does not start (nothing was
/// changed).
#[derive(Debug)]
pub enum RestoreError {
    /// The sessions folder of the state directory could not be read.
    ReadDir {
        dir: PathBuf,
        reason: std::io::Error,
    },
    /// The session pods could not be listed.
    ListPods(KubeError),
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RestoreError::ReadDir { dir, reason } => {
                write!(f, "reading {}: {reason}", dir.display())
            }
            RestoreError::ListPods(e) => {
                write!(f, "listing the session pods to re-adopt them: {e}")
            }
        }
    }
}

impl std::error::Error for RestoreError {}

impl Engine {
    /// Daemon start: brings back every session recorded in the state
    /// directory (docs/sessions.md#operations; the decisions are
    /// [`Session::restore`]'s): lists the session pods once, restores each
    /// app's output ring from `<id>.io/<app>.ring` (the seqs go on), and
    /// starts an owner per session, which re-adopts its pod (attach with
    /// log recovery, watch, Service and Ingress reconciled, relays and
    /// probes) or recreates it from its checkpoint. Records of ended
    /// sessions are removed with their files. Returns before the owners
    /// are done; an error (the pods cannot be listed) fails the start
    /// with nothing changed.
    pub fn restore(self: &Arc<Self>) -> Result<Restored, RestoreError> {
        let dir = self.settings.state_dir.join("sessions");
        let mut out = Restored::default();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(RestoreError::ReadDir { dir, reason: e }),
        };
        let mut records = Vec::new();
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".json") else {
                continue;
            };
            // Checkpoints (`<id>.checkpoint.json`) and temporary files
            // are not records.
            if !crate::session::is_session_id(id) {
                continue;
            }
            let rec = std::fs::read(e.path())
                .map_err(|e| e.to_string())
                .and_then(|b| crate::session::machine::Record::parse(&b).map_err(|e| e.to_string()))
                .and_then(|r| {
                    if r.session_id == id {
                        Ok(r)
                    } else {
                        Err(format!("it is the record of {}", r.session_id))
                    }
                });
            match rec {
                Ok(r) if r.status.is_terminal() => {
                    self.remove_session_files(id);
                    out.removed += 1;
                }
                Ok(r) => records.push(r),
                Err(e) => {
                    log::error!("session record {}: {e}; left as it is", e_path(&dir, &name));
                    out.unreadable += 1;
                }
            }
        }
        if records.is_empty() {
            return Ok(out);
        }
        let api = Api::<Pod>::namespaced(&self.client, &self.settings.pod.namespace);
        let listed = api
            .list_all(&ListParams::labels(&watch_selector(
                &self.settings.pod.managed_by,
            )))
            .map_err(RestoreError::ListPods)?;
        let mut by_session: HashMap<String, Vec<Pod>> = HashMap::new();
        for p in listed.items {
            let id = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(crate::session::pod::SESSION_ID_LABEL))
                .cloned();
            if let Some(id) = id {
                by_session.entry(id).or_default().push(p);
            }
        }
        records.sort_by_key(|r| r.created_at);
        let mut sessions = self.sessions.write();
        for rec in records {
            let id = rec.session_id.clone();
            let ios = self.load_rings(&id, &rec.apps);
            let pods = by_session.remove(&id).unwrap_or_default();
            let (session, first) = Session::restore(
                rec,
                self.settings.pod.clone(),
                self.settings.timings,
                pods,
                now_ms(),
            );
            match session.status() {
                crate::session::machine::Status::Starting {
                    stage: crate::session::machine::Stage::Run,
                } => out.adopting += 1,
                crate::session::machine::Status::Starting { .. } => out.recreating += 1,
                crate::session::machine::Status::Suspended => out.suspended += 1,
                _ => out.failed += 1,
            }
            match self.spawn_owner(session, first, None, ios) {
                Ok(h) => {
                    sessions.insert(id, h);
                }
                Err(e) => log::error!("session {id}: {}", e.message),
            }
        }
        Ok(out)
    }

    /// Each app's IO from its persisted ring; an app whose ring is missing
    /// starts afresh, with a gap notice when the daemon did not stop in
    /// order (no `.io` folder at all: the output before is lost).
    fn load_rings(
        &self,
        id: &str,
        apps: &[crate::session::machine::App],
    ) -> HashMap<String, Arc<AppIo>> {
        let dir = self.io_dir(id);
        let persisted = dir.is_dir();
        let mut ios = HashMap::new();
        for a in apps {
            let name = &a.spec.name;
            let path = dir.join(format!("{name}.ring"));
            let io = match std::fs::read(&path) {
                Ok(b) => match decode_ring(&b) {
                    Ok(img) => Some(AppIo::restore(self.settings.io_ring_bytes, img)),
                    Err(e) => {
                        log::error!("session {id}: {}: {e}", path.display());
                        None
                    }
                },
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => {
                    log::error!("session {id}: {}: {e}", path.display());
                    None
                }
            };
            let io = io.unwrap_or_else(|| {
                let io = AppIo::new(self.settings.io_ring_bytes);
                if !persisted {
                    io.push_gap();
                }
                io
            });
            ios.insert(name.clone(), Arc::new(io));
        }
        if persisted {
            self.loaded_rings.lock().push(dir);
        }
        ios
    }

    /// Removes the persisted rings [`Engine::restore`] loaded (their
    /// frames live in memory now, and the next stop writes them again): a
    /// later start that finds none knows the daemon did not stop in
    /// order. Called once the daemon serves, so a start that fails after
    /// the restore loses nothing.
    pub fn forget_persisted_rings(&self) {
        for dir in self.loaded_rings.lock().drain(..) {
            if let Err(e) = std::fs::remove_dir_all(&dir) {
                log::warn!("removing {}: {e}", dir.display());
            }
        }
    }

    /// A session's record, checkpoint and persisted rings.
    pub(super) fn remove_session_files(&self, id: &str) {
        let _ = std::fs::remove_file(self.record_path(id));
        let _ = std::fs::remove_file(self.checkpoint_path(id));
        let _ = std::fs::remove_dir_all(self.io_dir(id));
    }

    /// Session ids the daemon knows: its sessions (finished ones stay for
    /// an hour) and every record in the state directory (one it could not
    /// read included: the reaper never takes the pod of a session that
    /// may still be someone's).
    pub fn known_session_ids(&self) -> std::collections::HashSet<String> {
        let mut ids: std::collections::HashSet<String> =
            self.sessions.read().keys().cloned().collect();
        let dir = self.settings.state_dir.join("sessions");
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(id) = name.strip_suffix(".json") {
                if crate::session::is_session_id(id) {
                    ids.insert(id.to_string());
                }
            }
        }
        ids
    }
}
