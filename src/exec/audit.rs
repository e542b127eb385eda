//! The exec audit log (docs/exec.md#beyond-the-basic-gateway): one JSON line per exec,
//! appended and flushed to the kernel before the result is returned. stdin
//! is never recorded, nor is any token.
//!
//! Rotation (docs/api.md "Audit log"): [`Audit::reopen`] opens the path
//! again (SIGHUP, after logrotate renamed the file; `copytruncate` needs
//! nothing: the file is opened with `O_APPEND`). At `exec.audit_max_bytes`
//! the log rotates itself: the file is renamed to `FILE.1` (replacing an
//! older one: at most one old file is kept) and a new `FILE` started, with
//! one log line; a line is never dropped for the cap. Only when that fails
//! (the folder gone, no space) is a line dropped: counted, and logged once
//! until writing works again.

use super::frames::Target;
use parking_lot::Mutex;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Smallest `exec.audit_max_bytes`.
pub const MIN_MAX_BYTES: u64 = 4096;

/// One audit line.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Record<'a> {
    pub time: String,
    pub principal: &'a str,
    /// `project/uid`.
    pub workspace: String,
    /// `oneshot` or `interactive`.
    pub kind: &'static str,
    pub target: Option<&'a Target>,
    pub argv: &'a [String],
    pub tty: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The error code when the exec did not end with an exit code, or
    /// `CLOSED` when the client closed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a str>,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub duration_ms: u64,
    /// The asciinema recording of an interactive exec, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording: Option<String>,
    /// Why the recording stopped before the exec ended (its cap, the
    /// free-space floor, a write error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_truncated: Option<String>,
    /// Why no recording was started (the free-space floor, the file
    /// could not be created).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording_skipped: Option<String>,
}

/// One audit line of a TCP tunnel (docs/api.md#tunnels): a session's
/// (`session`) or a workspace Deployment's (`workspace`, `target`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TunnelRecord<'a> {
    pub time: String,
    pub principal: &'a str,
    /// Always `tunnel`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<&'a str>,
    /// `project/uid`, for a Deployment's tunnel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workspace: Option<String>,
    /// The Deployment's resolved pod.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<&'a Target>,
    /// The pod's name (absent when the Deployment never resolved to one).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub pod: &'a str,
    pub port: u16,
    /// How it ended: `closed` (both sides' eof, or the client's Close),
    /// `idle`, `max_duration`, `shutdown`, `far_error`, `protocol`,
    /// `peer_closed`, `socket`; or the error code when it never opened.
    pub end: &'a str,
    /// Client to pod.
    pub bytes_in: u64,
    /// Pod to client.
    pub bytes_out: u64,
    pub duration_ms: u64,
}

/// What the metrics read (`kubegate_audit_*`).
#[derive(Debug, Default)]
pub struct Counters {
    rotations: AtomicU64,
    dropped: AtomicU64,
}

impl Counters {
    /// Rotations to `FILE.1` at the size cap.
    pub fn rotations(&self) -> u64 {
        self.rotations.load(Ordering::Relaxed)
    }

    /// Lines that could not be written.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

struct Writer {
    file: File,
    /// The last line failed: the error was logged, the next success is.
    failing: bool,
}

pub struct Audit {
    path: PathBuf,
    /// `FILE.1`.
    old: PathBuf,
    max_bytes: u64,
    writer: Mutex<Writer>,
    counters: Arc<Counters>,
}

fn open_log(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

impl Audit {
    /// Opens (creates, mode 0600) the log for appending; it rotates itself
    /// before a line would take it past `max_bytes`.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<Audit> {
        let file = open_log(path)?;
        let mut old = path.as_os_str().to_owned();
        old.push(".1");
        Ok(Audit {
            path: path.to_path_buf(),
            old: PathBuf::from(old),
            max_bytes,
            writer: Mutex::new(Writer {
                file,
                failing: false,
            }),
            counters: Arc::new(Counters::default()),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Opens the path again (created if missing); further lines go there.
    /// On an error the current file is kept.
    pub fn reopen(&self) -> io::Result<()> {
        let file = open_log(&self.path)?;
        self.writer.lock().file = file;
        Ok(())
    }

    /// Appends one line in a single write (lines never interleave) and
    /// flushes it, rotating first at the cap. A failure is logged here
    /// (once until a line is written again) and counted.
    pub fn record<R: Serialize>(&self, r: &R) -> io::Result<()> {
        let mut line = serde_json::to_vec(r).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut w = self.writer.lock();
        let result = self.make_room(&mut w, line.len() as u64).and_then(|()| {
            w.file.write_all(&line)?;
            w.file.flush()
        });
        match &result {
            Ok(()) if w.failing => {
                w.failing = false;
                log::info!("audit log {}: writing again", self.path.display());
            }
            Ok(()) => {}
            Err(e) => {
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                if !w.failing {
                    w.failing = true;
                    log::error!(
                        "audit log {}: {e}; the line is dropped, as are the next ones until writing works again (kubegate_audit_lines_dropped_total)",
                        self.path.display()
                    );
                }
            }
        }
        result
    }

    /// Rotates when `need` more bytes would take the file past the cap. A
    /// file that is no longer at the path (logrotate renamed it, no SIGHUP
    /// yet) is never renamed: the path is opened again instead.
    fn make_room(&self, w: &mut Writer, need: u64) -> io::Result<()> {
        for _ in 0..2 {
            let ours = w.file.metadata()?;
            if ours.len() == 0 || ours.len().saturating_add(need) <= self.max_bytes {
                return Ok(());
            }
            let at_path = std::fs::metadata(&self.path)
                .is_ok_and(|m| m.dev() == ours.dev() && m.ino() == ours.ino());
            if at_path {
                std::fs::rename(&self.path, &self.old)?;
                self.counters.rotations.fetch_add(1, Ordering::Relaxed);
                log::warn!(
                    "audit log {} reached its cap of {} bytes (exec.audit_max_bytes): renamed to {} (replacing the one before), a new file started",
                    self.path.display(),
                    self.max_bytes,
                    self.old.display()
                );
            }
            w.file = open_log(&self.path)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_one_json_line_per_record() {
        let dir = std::env::temp_dir().join(format!("kubegate-audit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let a = Audit::open(&path, u64::MAX).unwrap();
        let argv = vec!["echo".to_string(), "hi".to_string()];
        for code in [0, 3] {
            a.record(&oneshot(&argv, code, None)).unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["exitCode"], 3);
        assert_eq!(lines[0]["argv"][1], "hi");
        assert!(lines[0].get("error").is_none());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kubegate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// A one-shot exec's line for `demo` that exited with `code`.
    fn oneshot(argv: &[String], code: i32, skipped: Option<String>) -> Record<'_> {
        Record {
            time: "2026-11-30T00:00:00Z".into(),
            principal: "demo",
            workspace: "demo/demo-uid".into(),
            kind: "oneshot",
            target: None,
            argv,
            tty: false,
            exit_code: Some(code),
            error: None,
            bytes_in: 0,
            bytes_out: 3,
            duration_ms: 5,
            recording: None,
            recording_truncated: None,
            recording_skipped: skipped,
        }
    }

    fn line(a: &Audit, n: usize) -> io::Result<()> {
        let argv = vec!["echo".to_string(), format!("line-{n}")];
        a.record(&oneshot(
            &argv,
            0,
            Some("free space 1 GiB below the floor 2 GiB".into()),
        ))
    }

    /// A fresh folder `tag` with an audit log capped at `cap` holding line 1.
    fn audit_with_one_line(tag: &str, cap: u64) -> (PathBuf, PathBuf, Audit) {
        let dir = temp(tag);
        let path = dir.join("audit.jsonl");
        let a = Audit::open(&path, cap).unwrap();
        line(&a, 1).unwrap();
        (dir, path, a)
    }

    /// The `n` of every line, in order (each line must be JSON).
    fn numbers(path: &Path) -> Vec<usize> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                v["argv"][1].as_str().unwrap()[5..].parse().unwrap()
            })
            .collect()
    }

    #[test]
    fn reopen_moves_writing_to_a_fresh_file_at_the_path() {
        let (dir, path, a) = audit_with_one_line("audit-reopen", u64::MAX);
        let rotated = dir.join("audit.jsonl.1");
        std::fs::rename(&path, &rotated).unwrap();
        line(&a, 2).unwrap();
        assert!(
            !path.exists(),
            "until reopened, lines go to the renamed file"
        );
        a.reopen().unwrap();
        line(&a, 3).unwrap();
        assert_eq!(numbers(&rotated), [1, 2]);
        assert_eq!(numbers(&path), [3]);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        // copytruncate: emptied in place, the next line starts at 0.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .unwrap()
            .set_len(0)
            .unwrap();
        line(&a, 4).unwrap();
        assert_eq!(numbers(&path), [4]);
        // A failed reopen keeps the current file.
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(a.reopen().is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_cap_rotates_to_dot_1_keeping_one_old_file_and_every_line() {
        let dir = temp("audit-cap");
        let path = dir.join("audit.jsonl");
        let old = dir.join("audit.jsonl.1");
        let cap = 2000;
        let a = Audit::open(&path, cap).unwrap();
        let mut rotated_at = Vec::new();
        for n in 1..=40 {
            line(&a, n).unwrap();
            if a.counters().rotations() > rotated_at.len() as u64 {
                rotated_at.push(n);
            }
        }
        assert!(rotated_at.len() >= 3, "{rotated_at:?}");
        assert_eq!(a.counters().dropped(), 0);
        for p in [&path, &old] {
            let size = std::fs::metadata(p).unwrap().len();
            assert!(size <= cap, "{}: {size}", p.display());
        }
        // The current file holds every line since the last rotation, the
        // old one every line of the rotation before: nothing lost between.
        let last = *rotated_at.last().unwrap();
        let before = rotated_at[rotated_at.len() - 2];
        assert_eq!(numbers(&path), (last..=40).collect::<Vec<_>>());
        assert_eq!(numbers(&old), (before..last).collect::<Vec<_>>());
        let files = std::fs::read_dir(&dir).unwrap().count();
        assert_eq!(files, 2, "at most one old file");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_file_logrotate_already_renamed_is_never_rotated_over_its_copy() {
        let (dir, path, a) = audit_with_one_line("audit-moved", 1000);
        line(&a, 2).unwrap();
        // logrotate renamed the file and created a new one; no SIGHUP yet.
        let theirs = dir.join("audit.jsonl.1");
        std::fs::rename(&path, &theirs).unwrap();
        open_log(&path).unwrap();
        for n in 3..=6 {
            line(&a, n).unwrap();
        }
        // At the cap the daemon reopened the path instead of renaming
        // logrotate's file away.
        assert_eq!(a.counters().rotations(), 0);
        let (t, p) = (numbers(&theirs), numbers(&path));
        assert_eq!(t[..2], [1, 2]);
        assert!(!p.is_empty(), "the new lines went to the new file");
        let mut all = [t, p].concat();
        all.sort_unstable();
        assert_eq!(all, (1..=6).collect::<Vec<_>>());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn lines_that_cannot_be_written_are_counted_and_writing_resumes() {
        let (dir, path, a) = audit_with_one_line("audit-drop", 600);
        std::fs::remove_dir_all(&dir).unwrap();
        // The open file still takes lines until the cap; then neither the
        // rename nor a new file can happen.
        let mut n = 1;
        while a.counters().dropped() == 0 {
            n += 1;
            assert!(n < 20, "never dropped");
            let _ = line(&a, n);
        }
        assert!(line(&a, n + 1).is_err());
        assert_eq!(a.counters().dropped(), 2);
        std::fs::create_dir_all(&dir).unwrap();
        line(&a, n + 2).unwrap();
        assert_eq!(numbers(&path), [n + 2]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
