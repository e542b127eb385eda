//! Pushing local changes into the session's workspace, on one thread
//! (`kubegate-dev-sync`).
//!
//! The folder is watched by the app runner's own watcher
//! (`runner::watch`, inotify or polling on its thread, the same ignore
//! rules); a change only wakes this thread. After a short quiet period
//! (`runner::debounce`, [`QUIET`]; at most [`MAX_WAIT`] after the first
//! change of a burst that never pauses) the folder is scanned again and
//! compared with the picture of what the workspace holds (size and mtime
//! per file): what differs is written, what is gone is deleted, through
//! the daemon's `POST /v1/sessions/{id}/workspace` (one request, unless it
//! would pass the daemon's body limit, then several). So the watcher's
//! events need not name every path, a burst is one request, and a change
//! that comes while the session is not running is sent once it runs again.
//!
//! A failed request leaves the picture as it was and is tried again after
//! [`RETRY`] (or at the next change).

use super::project::{self, Picture};
use crate::agent::wire::{ApplyRequest, ApplyResult, WriteItem};
use crate::cli::net::Client;
use crate::cli::CliError;
use crate::exit::codes;
use crate::runner::debounce::Debounce;
use crate::runner::watch::Meta;
use crate::session::spec::BundleLimits;
use crossbeam_channel::{bounded, Receiver, RecvTimeoutError, Sender};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Quiet period after a change before the folder is compared: an editor's
/// save (a temporary file, a rename) is one sync. Short, since the runner
/// in the pod debounces restarts again (100 ms).
pub const QUIET: Duration = Duration::from_millis(15);
/// A burst that never pauses is synced this long after its first change.
pub const MAX_WAIT: Duration = Duration::from_millis(250);
/// A failed request is tried again after this.
pub const RETRY: Duration = Duration::from_secs(2);
/// Largest request body sent: the daemon's default `server.max_body_bytes`
/// (1 MiB) with room for the JSON around the files.
pub const MAX_REQUEST_BYTES: usize = (1 << 20) - 16 * 1024;

/// What the thread is told. Whether the session runs (its workspace can
/// be written) is a shared flag the caller sets before a `Wake`, so the
/// caller never waits on a full inbox.
pub enum SyncMsg {
    /// Something changed in the folder.
    Changed,
    /// The running flag changed.
    Wake,
    /// Sync what is pending now (when running), then answer.
    Flush(Sender<()>),
}

/// The thread's inbox: the watcher's callback and the caller send to it
/// with `try_send` (one pending change is as good as many).
pub fn inbox() -> (Sender<SyncMsg>, Receiver<SyncMsg>) {
    bounded(16)
}

/// What the thread reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Synced {
        written: Vec<String>,
        deleted: Vec<String>,
    },
    /// A file that cannot be synced (too large); it stays as it was in the
    /// workspace.
    Skipped { path: String, why: String },
    /// The request failed; tried again later.
    Failed(CliError),
}

/// Where the thread works and what it starts from.
pub struct Target {
    pub client: Arc<Client>,
    pub session: String,
    pub dir: PathBuf,
    /// What the workspace holds: the bundle as it was read.
    pub picture: Picture,
    pub limits: BundleLimits,
}

/// Starts the thread on its inbox; `running` says whether to send.
pub fn spawn(
    rx: Receiver<SyncMsg>,
    running: Arc<AtomicBool>,
    target: Target,
    report: impl Fn(Outcome) + Send + 'static,
) -> std::io::Result<()> {
    let Target {
        client,
        session,
        dir,
        picture,
        limits,
    } = target;
    let mut s = Syncer {
        client,
        session,
        dir,
        picture,
        limits,
        report: Box::new(report),
        skipped: Picture::new(),
    };
    std::thread::Builder::new()
        .name("kubegate-dev-sync".into())
        .spawn(move || s.run(&rx, &running))?;
    Ok(())
}

struct Syncer {
    client: Arc<Client>,
    session: String,
    dir: PathBuf,
    /// What the workspace holds, as far as we know.
    picture: Picture,
    limits: BundleLimits,
    report: Box<dyn Fn(Outcome) + Send>,
    /// Files skipped, as they were then (reported once per version).
    skipped: Picture,
}

impl Syncer {
    fn run(&mut self, rx: &Receiver<SyncMsg>, running: &AtomicBool) {
        let mut debounce = Debounce::new(QUIET);
        let mut first_change: Option<Instant> = None;
        let mut dirty = false;
        let mut retry_at: Option<Instant> = None;
        loop {
            let active = running.load(Ordering::SeqCst);
            let due = if active && dirty {
                let quiet = debounce.deadline();
                let cap = first_change.map(|t| t + MAX_WAIT);
                [quiet, cap, retry_at].into_iter().flatten().min()
            } else {
                None
            };
            let msg = match due {
                Some(d) => rx.recv_deadline(d),
                None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            let mut now_due = false;
            match msg {
                Ok(SyncMsg::Changed) => {
                    let now = Instant::now();
                    debounce.change(now, true, false);
                    first_change.get_or_insert(now);
                    dirty = true;
                    // A change is as good as a retry.
                    retry_at = None;
                }
                Ok(SyncMsg::Wake) => {
                    // Anything noticed while not running goes now.
                    now_due = running.load(Ordering::SeqCst) && dirty;
                }
                Ok(SyncMsg::Flush(reply)) => {
                    if running.load(Ordering::SeqCst) && dirty {
                        dirty = !self.sync();
                        first_change = None;
                        // The scan saw every change so far.
                        debounce.run_started();
                    }
                    let _ = reply.send(());
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => now_due = true,
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if !now_due {
                continue;
            }
            let now = Instant::now();
            let quiet = debounce.poll(now).is_some();
            let capped = first_change.is_some_and(|t| now >= t + MAX_WAIT);
            let retry = retry_at.is_some_and(|t| now >= t);
            if !(quiet || capped || retry || debounce.deadline().is_none()) {
                continue;
            }
            // The scan below sees every change so far.
            debounce.run_started();
            first_change = None;
            retry_at = None;
            if self.sync() {
                dirty = false;
            } else {
                retry_at = Some(Instant::now() + RETRY);
            }
        }
    }

    /// Compares the folder with the picture and sends what differs; true
    /// when the workspace is up to date (or nothing could be done).
    fn sync(&mut self) -> bool {
        let scan = match project::scan(&self.dir) {
            Ok(s) => s,
            Err(e) => {
                (self.report)(Outcome::Failed(e));
                return false;
            }
        };
        let (changed, gone) = diff(&self.picture, &scan.files);
        if changed.is_empty() && gone.is_empty() {
            return true;
        }
        let mut writes: Vec<(WriteItem, Meta)> = Vec::new();
        let mut deletes = gone;
        for path in changed {
            let Some(&meta) = scan.files.get(&path) else {
                continue;
            };
            if meta.len > self.limits.max_file_bytes {
                self.skip(
                    &path,
                    meta,
                    format!(
                        "{} bytes, more than the {} one workspace file may have",
                        meta.len, self.limits.max_file_bytes
                    ),
                );
                continue;
            }
            match project::read_file(&self.dir, &path, self.limits.max_file_bytes) {
                Ok(Some(bytes)) => {
                    let item = match std::str::from_utf8(&bytes) {
                        Ok(text) => WriteItem::utf8(&path, text),
                        Err(_) => WriteItem::bytes(&path, &bytes),
                    };
                    writes.push((item, meta));
                }
                // Gone since the scan: a delete (when the workspace has it).
                Ok(None) => {
                    if self.picture.contains_key(&path) {
                        deletes.push(path);
                    }
                }
                Err(e) => self.skip(&path, meta, e.message),
            }
        }
        let requests = match plan(writes, deletes, MAX_REQUEST_BYTES) {
            Ok(r) => r,
            Err(too_big) => {
                for (path, meta, size) in too_big.skipped {
                    self.skip(&path, meta, format!(
                        "its write is {size} bytes of JSON, more than a workspace request may carry ({MAX_REQUEST_BYTES}); restart kubegate dev to send it in the bundle"
                    ));
                }
                too_big.requests
            }
        };
        let mut written = Vec::new();
        let mut deleted = Vec::new();
        for r in requests {
            match self.send(&r) {
                Ok(_) => {
                    for (item, meta) in r.writes {
                        self.skipped.remove(&item.path);
                        self.picture.insert(item.path.clone(), meta);
                        written.push(item.path);
                    }
                    for d in r.deletes {
                        self.picture.remove(&d);
                        deleted.push(d);
                    }
                }
                Err(e) => {
                    if !written.is_empty() || !deleted.is_empty() {
                        (self.report)(Outcome::Synced { written, deleted });
                    }
                    (self.report)(Outcome::Failed(e));
                    return false;
                }
            }
        }
        if !written.is_empty() || !deleted.is_empty() {
            (self.report)(Outcome::Synced { written, deleted });
        }
        true
    }

    /// Reports a file that cannot be synced, once per version of it.
    fn skip(&mut self, path: &str, meta: Meta, why: String) {
        if self.skipped.get(path) != Some(&meta) {
            self.skipped.insert(path.to_string(), meta);
            (self.report)(Outcome::Skipped {
                path: path.to_string(),
                why,
            });
        }
    }

    fn send(&self, r: &Request) -> Result<ApplyResult, CliError> {
        let body = ApplyRequest {
            write: (!r.writes.is_empty())
                .then(|| r.writes.iter().map(|(w, _)| w.clone()).collect()),
            delete: (!r.deletes.is_empty()).then(|| r.deletes.clone()),
        };
        let bytes = serde_json::to_vec(&body).map_err(|e| {
            CliError::new(codes::PROTOCOL, format!("encoding a workspace write: {e}"))
        })?;
        let answer = self.client.call(
            "POST",
            &format!("/v1/sessions/{}/workspace", self.session),
            Some(&bytes),
        )?;
        serde_json::from_slice(&answer).map_err(|e| {
            CliError::new(
                codes::PROTOCOL,
                format!("the daemon's answer to a workspace write does not decode: {e}"),
            )
        })
    }
}

/// Files whose scan differs from the picture (new or changed), and files
/// the picture has that the scan does not (gone).
pub fn diff(picture: &Picture, now: &Picture) -> (Vec<String>, Vec<String>) {
    let changed = now
        .iter()
        .filter(|(p, m)| picture.get(*p) != Some(m))
        .map(|(p, _)| p.clone())
        .collect();
    let gone = picture
        .keys()
        .filter(|p| !now.contains_key(*p))
        .cloned()
        .collect();
    (changed, gone)
}

/// One workspace request.
#[derive(Debug, Default)]
pub struct Request {
    pub writes: Vec<(WriteItem, Meta)>,
    pub deletes: Vec<String>,
}

/// A plan with files that fit no request.
#[derive(Debug)]
pub struct TooBig {
    pub requests: Vec<Request>,
    /// (path, what it was, its JSON size)
    pub skipped: Vec<(String, Meta, usize)>,
}

fn within(child: &str, parent: &str) -> bool {
    child
        .strip_prefix(parent)
        .is_some_and(|rest| rest.starts_with('/'))
}

/// Splits writes and deletes into requests of at most `max` bytes of JSON.
/// Deletes go in the first request, unless one of them is a folder a
/// write puts a file in, or a file where a write makes a folder (a folder
/// became a file or the other way round): the workspace agent refuses
/// that in one request, so the deletes then go alone, first.
pub fn plan(
    writes: Vec<(WriteItem, Meta)>,
    deletes: Vec<String>,
    max: usize,
) -> Result<Vec<Request>, TooBig> {
    let mut requests = Vec::new();
    let conflict = deletes.iter().any(|d| {
        writes
            .iter()
            .any(|(w, _)| within(&w.path, d) || within(d, &w.path))
    });
    let mut current = Request {
        writes: Vec::new(),
        deletes,
    };
    if conflict {
        requests.push(std::mem::take(&mut current));
    }
    let mut size: usize = current.deletes.iter().map(|d| d.len() + 8).sum::<usize>() + 64;
    let mut skipped = Vec::new();
    for (w, meta) in writes {
        let n = serde_json::to_string(&w).map_or(usize::MAX, |s| s.len() + 1);
        if n + 64 > max {
            skipped.push((w.path, meta, n));
            continue;
        }
        if size + n > max && !(current.writes.is_empty() && current.deletes.is_empty()) {
            requests.push(std::mem::take(&mut current));
            size = 64;
        }
        size += n;
        current.writes.push((w, meta));
    }
    if !current.writes.is_empty() || !current.deletes.is_empty() {
        requests.push(current);
    }
    if skipped.is_empty() {
        Ok(requests)
    } else {
        Err(TooBig { requests, skipped })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(len: u64, t: i64) -> Meta {
        Meta {
            is_dir: false,
            is_file: true,
            len,
            mtime: (t, 0),
        }
    }

    #[test]
    fn diff_finds_new_changed_and_gone_files() {
        let picture: Picture = [
            ("a".to_string(), meta(1, 1)),
            ("b".into(), meta(1, 1)),
            ("c".into(), meta(1, 1)),
        ]
        .into();
        let now: Picture = [
            ("a".to_string(), meta(1, 1)),
            ("b".into(), meta(1, 2)),
            ("d".into(), meta(5, 1)),
        ]
        .into();
        let (changed, gone) = diff(&picture, &now);
        assert_eq!(changed, ["b", "d"]);
        assert_eq!(gone, ["c"]);
        assert_eq!(diff(&now, &now), (vec![], vec![]));
    }

    #[test]
    fn plans_split_by_size_and_by_folder_conflicts() {
        let w = |p: &str, n: usize| (WriteItem::utf8(p, &"x".repeat(n)), meta(n as u64, 1));
        // Everything fits one request.
        let r = plan(vec![w("a", 10), w("b", 10)], vec!["c".into()], 1000).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!((r[0].writes.len(), r[0].deletes.len()), (2, 1));
        // Split by size, deletes in the first.
        let r = plan(
            vec![w("a", 500), w("b", 500), w("c", 500)],
            vec!["d".into()],
            1000,
        )
        .unwrap();
        assert_eq!(r.len(), 3);
        assert_eq!(r[0].deletes, ["d"]);
        assert!(r.iter().all(|q| !q.writes.is_empty()));
        // A folder became a file: the deletes go alone, first.
        let r = plan(vec![w("x", 1)], vec!["x/a".into()], 1000).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!((r[0].deletes.len(), r[0].writes.len()), (1, 0));
        assert_eq!(r[1].writes[0].0.path, "x");
        let r = plan(vec![w("y/b", 1)], vec!["y".into()], 1000).unwrap();
        assert_eq!(r.len(), 2);
        // "x2" is not under "x".
        let r = plan(vec![w("x2/a", 1)], vec!["x".into()], 1000).unwrap();
        assert_eq!(r.len(), 1);
        // A file larger than any request is skipped, the rest planned.
        let e = plan(vec![w("big", 2000), w("ok", 1)], vec![], 1000).unwrap_err();
        assert_eq!(e.skipped.len(), 1);
        assert_eq!(e.skipped[0].0, "big");
        assert_eq!(e.requests.len(), 1);
        assert_eq!(e.requests[0].writes[0].0.path, "ok");
        assert!(plan(vec![], vec![], 1000).unwrap().is_empty());
    }
}
