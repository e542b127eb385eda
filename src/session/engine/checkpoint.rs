//! The files the engine keeps in the state directory: a session's
//! workspace checkpoint (`<id>.checkpoint.json`: every file, base64), the
//! seed's file order, and the atomic write (temporary file, then rename)
//! every record, checkpoint and ring goes through.

use super::agent_ops::{AgentOpError, AgentOps, AgentTarget, Files};
use parking_lot::Mutex;
use serde_json::Value;
use std::fmt;

/// The seed's files with the apps' entries last. An app container starts
/// once its entry exists (the wait in its command) and its runner then
/// watches the workspace: files renamed into place after the entry would
/// reach it as an edit and restart the app right after its start.
pub(super) fn entries_last(
    mut files: Vec<(String, Vec<u8>)>,
    entries: &[String],
) -> Vec<(String, Vec<u8>)> {
    let norm = |p: &str| crate::agent::wire::paths::normalize(p).unwrap_or_else(|_| p.to_string());
    let entries: Vec<String> = entries.iter().map(|e| norm(e)).collect();
    // Stable: the other files keep their order, so do the entries.
    files.sort_by_key(|(path, _)| entries.contains(&norm(path)));
    files
}

/// Why a checkpoint could not be taken or read back (the text goes to the
/// machine: `CheckpointFailed`, `SeedFailed`).
#[derive(Debug)]
pub enum CheckpointError {
    /// Listing or snapshotting the workspace failed.
    Agent(AgentOpError),
    /// The checkpoint file could not be written.
    Write(std::io::Error),
    /// The checkpoint file could not be read.
    Read(std::io::Error),
    /// The checkpoint file is not JSON.
    Json(serde_json::Error),
    /// An entry without a string `path` and `content`.
    MalformedEntry,
    /// An entry whose content is not base64.
    Content {
        path: String,
        reason: base64::DecodeError,
    },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckpointError::Agent(e) => e.fmt(f),
            CheckpointError::Write(e) => write!(f, "writing the checkpoint: {e}"),
            CheckpointError::Read(e) => write!(f, "reading the checkpoint: {e}"),
            CheckpointError::Json(e) => write!(f, "the checkpoint: {e}"),
            CheckpointError::MalformedEntry => {
                f.write_str("the checkpoint holds a malformed file entry")
            }
            CheckpointError::Content { path, reason } => {
                write!(f, "the checkpoint: {path}: {reason}")
            }
        }
    }
}

impl std::error::Error for CheckpointError {}

impl From<AgentOpError> for CheckpointError {
    fn from(e: AgentOpError) -> Self {
        CheckpointError::Agent(e)
    }
}

/// Checkpoints the workspace into `path`, unless its listing (every path
/// and content hash) is the one the file already holds: then the file is
/// kept as it is and only the listing was fetched (an idle session's
/// periodic checkpoint costs one small request, not a snapshot and a
/// synced write). The listing is taken before the snapshot, so a change
/// racing with it at worst costs one more snapshot next time.
pub(super) fn checkpoint(
    agent: &dyn AgentOps,
    t: &AgentTarget,
    path: &std::path::Path,
    last: &Mutex<Option<[u8; 32]>>,
) -> Result<(), CheckpointError> {
    use sha2::{Digest, Sha256};
    let mut listing = agent.tree(t)?;
    listing.sort();
    let mut h = Sha256::new();
    for (p, hash) in &listing {
        h.update(p.as_bytes());
        h.update([0]);
        h.update(hash.as_bytes());
        h.update([0]);
    }
    let digest: [u8; 32] = h.finalize().into();
    if *last.lock() == Some(digest) && path.exists() {
        return Ok(());
    }
    let files = agent.snapshot(t)?;
    write_checkpoint(path, &files).map_err(CheckpointError::Write)?;
    *last.lock() = Some(digest);
    Ok(())
}

fn write_checkpoint(path: &std::path::Path, files: &Files) -> std::io::Result<()> {
    use base64::Engine as _;
    let list: Vec<Value> = files
        .iter()
        .map(|(p, d)| {
            serde_json::json!({"path": p, "content": base64::engine::general_purpose::STANDARD.encode(d)})
        })
        .collect();
    write_atomic(
        path,
        serde_json::json!({"version": 1, "files": list})
            .to_string()
            .as_bytes(),
    )
}

pub(super) fn read_checkpoint(path: &std::path::Path) -> Result<Files, CheckpointError> {
    use base64::Engine as _;
    let text = std::fs::read(path).map_err(CheckpointError::Read)?;
    let v: Value = serde_json::from_slice(&text).map_err(CheckpointError::Json)?;
    let mut out = Vec::new();
    for f in v["files"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let (Some(p), Some(c)) = (f["path"].as_str(), f["content"].as_str()) else {
            return Err(CheckpointError::MalformedEntry);
        };
        let data = base64::engine::general_purpose::STANDARD
            .decode(c)
            .map_err(|reason| CheckpointError::Content {
                path: p.to_string(),
                reason,
            })?;
        out.push((p.to_string(), data));
    }
    Ok(out)
}

/// Writes `data` to `path` whole or not at all ([`crate::files::write_atomic`]),
/// mode 0600; missing folders are made 0700 (whatever the umask).
pub fn write_atomic(path: &std::path::Path, data: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("no parent folder"))?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    crate::files::write_atomic(path, data, 0o600)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Instant;

    #[test]
    fn the_seed_writes_the_entries_last_and_keeps_the_rest_in_order() {
        let f = |p: &str| (p.to_string(), Vec::new());
        let files = vec![f("web/main.py"), f("a.txt"), f("./worker.sh"), f("b/c.txt")];
        let got: Vec<String> = entries_last(files, &["worker.sh".into(), "web//main.py".into()])
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(got, ["a.txt", "b/c.txt", "web/main.py", "./worker.sh"]);
    }

    /// An agent over an in-memory workspace that counts snapshots.
    struct FakeAgent {
        files: Mutex<Files>,
        snapshots: AtomicUsize,
    }

    impl AgentOps for FakeAgent {
        fn wait_ready(&self, _: &AgentTarget, _: Instant) -> Result<(), AgentOpError> {
            Ok(())
        }
        fn write_all(&self, _: &AgentTarget, files: Files) -> Result<(), AgentOpError> {
            let mut cur = self.files.lock();
            for (p, d) in files {
                cur.retain(|(q, _)| *q != p);
                cur.push((p, d));
            }
            Ok(())
        }
        fn snapshot(&self, _: &AgentTarget) -> Result<Files, AgentOpError> {
            self.snapshots.fetch_add(1, Ordering::SeqCst);
            Ok(self.files.lock().clone())
        }
        fn tree(&self, _: &AgentTarget) -> Result<Vec<(String, String)>, AgentOpError> {
            use sha2::{Digest, Sha256};
            Ok(self
                .files
                .lock()
                .iter()
                .map(|(p, d)| {
                    let h: [u8; 32] = Sha256::digest(d).into();
                    (p.clone(), h.iter().map(|b| format!("{b:02x}")).collect())
                })
                .collect())
        }
        fn touch(&self, _: &AgentTarget, _: &str) -> Result<(), AgentOpError> {
            Ok(())
        }
    }

    #[test]
    fn an_unchanged_workspace_is_not_snapshotted_again() {
        let dir = std::env::temp_dir().join(format!("kubegate-ckpt2-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("s.checkpoint.json");
        let agent = FakeAgent {
            files: Mutex::new(vec![("a.txt".into(), b"one".to_vec())]),
            snapshots: AtomicUsize::new(0),
        };
        let t = AgentTarget {
            namespace: "ns".into(),
            pod: "p".into(),
            ip: "127.0.0.1".into(),
            token: "t".into(),
        };
        let last = Mutex::new(None);
        let snaps = || agent.snapshots.load(Ordering::SeqCst);
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 1);
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 1, "unchanged: listed, not snapshotted");
        // A changed file, then a new one: each is snapshotted and lands.
        agent
            .write_all(&t, vec![("a.txt".into(), b"two".to_vec())])
            .unwrap();
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 2);
        assert_eq!(
            read_checkpoint(&path).unwrap(),
            vec![("a.txt".to_string(), b"two".to_vec())]
        );
        agent
            .write_all(&t, vec![("b.txt".into(), b"".to_vec())])
            .unwrap();
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 3);
        // The file gone from disk: written again even though unchanged.
        std::fs::remove_file(&path).unwrap();
        checkpoint(&agent, &t, &path, &last).unwrap();
        assert_eq!(snaps(), 4);
        assert_eq!(read_checkpoint(&path).unwrap().len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn checkpoints_round_trip_bytes() {
        let dir = std::env::temp_dir().join(format!("kubegate-ckpt-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let path = dir.join("s.checkpoint.json");
        let files = vec![
            ("a.txt".to_string(), b"hi".to_vec()),
            ("b/c.bin".to_string(), vec![0, 255]),
        ];
        write_checkpoint(&path, &files).unwrap();
        assert_eq!(read_checkpoint(&path).unwrap(), files);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&path, b"{\"files\":[{\"path\":1}]}").unwrap();
        assert!(read_checkpoint(&path).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
