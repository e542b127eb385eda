//! The exec audit log (exec.md "Beyond the seed"): one JSON line per exec,
//! appended and flushed to the kernel before the result is returned. stdin
//! is never recorded, nor is any token.

use super::Target;
use parking_lot::Mutex;
use serde::Serialize;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

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
}

pub struct Audit {
    file: Mutex<File>,
}

impl Audit {
    /// Opens (creates, mode 0600) the log for appending.
    pub fn open(path: &Path) -> io::Result<Audit> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        Ok(Audit {
            file: Mutex::new(file),
        })
    }

    /// Appends one line in a single write (lines never interleave) and
    /// flushes it.
    pub fn record(&self, r: &Record<'_>) -> io::Result<()> {
        let mut line = serde_json::to_vec(r).map_err(io::Error::other)?;
        line.push(b'\n');
        let mut f = self.file.lock();
        f.write_all(&line)?;
        f.flush()
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
        let a = Audit::open(&path).unwrap();
        let argv = vec!["echo".to_string(), "hi".to_string()];
        for code in [0, 3] {
            a.record(&Record {
                time: "2026-11-30T00:00:00Z".into(),
                principal: "demo",
                workspace: "demo/demo-uid".into(),
                kind: "oneshot",
                target: None,
                argv: &argv,
                tty: false,
                exit_code: Some(code),
                error: None,
                bytes_in: 0,
                bytes_out: 3,
                duration_ms: 5,
                recording: None,
            })
            .unwrap();
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
}
