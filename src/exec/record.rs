//! Recording of interactive exec output in the asciinema v2 format
//! (`exec.recording_dir`): a header line (the initial size, else 80x24), then one `[seconds, "o", text]`
//! event per output frame and `[seconds, "r", "COLSxROWS"]` per resize, so
//! `asciinema play FILE` replays the session. stdin is never recorded.
//!
//! Output is bytes; events carry text: a UTF-8 sequence split across two
//! frames is carried over to the next event, and invalid bytes are replaced.

use serde_json::json;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

pub struct Recorder {
    out: BufWriter<File>,
    started: Instant,
    /// The start of a UTF-8 sequence the last frame ended in.
    carry: Vec<u8>,
}

impl Recorder {
    /// Creates `path` (mode 0600, never overwriting) and writes the header.
    pub fn create(
        path: &Path,
        command: &[String],
        size: (u16, u16),
        timestamp: u64,
    ) -> io::Result<Recorder> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mut out = BufWriter::new(f);
        let header = json!({
            "version": 2,
            "width": size.0,
            "height": size.1,
            "timestamp": timestamp,
            "command": command.join(" "),
        });
        writeln!(out, "{header}")?;
        Ok(Recorder {
            out,
            started: Instant::now(),
            carry: Vec::new(),
        })
    }

    fn event(&mut self, kind: &str, data: &str) -> io::Result<()> {
        let t = self.started.elapsed().as_secs_f64();
        writeln!(self.out, "{}", json!([(t * 1e6).round() / 1e6, kind, data]))
    }

    /// One output frame.
    pub fn output(&mut self, data: &[u8]) -> io::Result<()> {
        let mut bytes = std::mem::take(&mut self.carry);
        bytes.extend_from_slice(data);
        let keep = incomplete_tail(&bytes);
        self.carry = bytes.split_off(bytes.len() - keep);
        if bytes.is_empty() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        self.event("o", &text)
    }

    pub fn resize(&mut self, cols: u16, rows: u16) -> io::Result<()> {
        self.event("r", &format!("{cols}x{rows}"))
    }

    pub fn finish(mut self) -> io::Result<()> {
        if !self.carry.is_empty() {
            let text = String::from_utf8_lossy(&self.carry).into_owned();
            self.carry.clear();
            self.event("o", &text)?;
        }
        self.out.flush()
    }
}

/// How many bytes at the end of `b` start a UTF-8 sequence that is not
/// complete yet (0 when it ends on a boundary or in invalid bytes).
fn incomplete_tail(b: &[u8]) -> usize {
    for back in 1..=3.min(b.len()) {
        let c = b[b.len() - back];
        if c & 0xC0 == 0x80 {
            continue; // a continuation byte: look further back
        }
        let need = match c {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0,
        };
        return if need > back { back } else { 0 };
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_across_frames_is_carried_over() {
        assert_eq!(incomplete_tail(b"abc"), 0);
        assert_eq!(incomplete_tail("é".as_bytes()), 0);
        assert_eq!(incomplete_tail(&"é".as_bytes()[..1]), 1);
        assert_eq!(incomplete_tail(&"€".as_bytes()[..2]), 2);
        assert_eq!(incomplete_tail(&"😀".as_bytes()[..3]), 3);
        assert_eq!(incomplete_tail(b"a\xff"), 0);
    }

    #[test]
    fn writes_a_replayable_cast() {
        let dir = std::env::temp_dir().join(format!("kubegate-cast-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("s.cast");
        let mut r = Recorder::create(
            &path,
            &["sh".into(), "-c".into(), "x".into()],
            (80, 24),
            1700000000,
        )
        .unwrap();
        let euro = "€".as_bytes();
        r.output(b"hello ").unwrap();
        r.output(&euro[..1]).unwrap();
        r.output(&euro[1..]).unwrap();
        r.resize(100, 30).unwrap();
        r.finish().unwrap();
        assert!(
            Recorder::create(&path, &[], (80, 24), 0).is_err(),
            "never overwrites"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["version"], 2);
        assert_eq!(lines[0]["command"], "sh -c x");
        assert_eq!(lines[1][1], "o");
        assert_eq!(lines[1][2], "hello ");
        assert_eq!(lines[2][2], "€");
        assert_eq!(lines[3][1], "r");
        assert_eq!(lines[3][2], "100x30");
        assert_eq!(lines.len(), 4);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
