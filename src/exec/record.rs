//! Recording of interactive exec output in the asciinema v2 format
//! (`exec.recording_dir`): a header line (the initial size, else 80x24), then one `[seconds, "o", text]`
//! event per output frame and `[seconds, "r", "COLSxROWS"]` per resize, so
//! `asciinema play FILE` replays the session. stdin is never recorded.
//!
//! Output is bytes; events carry text: a UTF-8 sequence split across two
//! frames is carried over to the next event, and invalid bytes are replaced.
//!
//! Bounds (docs/api.md "Recordings"): a file never grows past
//! `exec.recording_max_bytes`, and a recording stops when the free space of
//! its file system falls below `exec.recording_min_free_bytes` (looked at
//! every [`SPACE_CHECK_BYTES`] written). Either way the recording ends,
//! never the exec: the last two events are a visible notice (`"o"`, for
//! players that skip markers) and a marker (`"m"`) saying why, written
//! whole, so the file stays valid JSON lines. Of the output event that
//! does not fit, the part that does goes in, cut on a character boundary
//! of its text (never inside a UTF-8 sequence); a carried-over partial
//! sequence is dropped, never written as a replacement character.

use serde_json::json;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Instant;

/// Room kept for the closing notice and marker: both lines together are
/// shorter than this whatever the numbers in them (tested).
pub const STOP_RESERVE: u64 = 512;
/// Smallest `exec.recording_max_bytes`: a header and the closing events.
pub const MIN_MAX_BYTES: u64 = 4096;
/// The free space is looked at again after this many bytes written.
pub const SPACE_CHECK_BYTES: u64 = 1 << 20;

/// A recording's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The file's largest size, header and closing events included.
    pub max_bytes: u64,
    /// Below this many bytes free on its file system the recording stops
    /// (0: no floor).
    pub min_free_bytes: u64,
}

/// Why a recording stopped before the exec ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// `exec.recording_max_bytes` reached.
    MaxBytes(u64),
    /// The file system's free space fell below the floor.
    FreeSpace { free: u64, floor: u64 },
}

impl Stop {
    /// The metric label (`kubegate_exec_recordings_truncated_total`).
    pub fn reason(&self) -> &'static str {
        match self {
            Stop::MaxBytes(_) => "max_bytes",
            Stop::FreeSpace { .. } => "free_space",
        }
    }
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stop::MaxBytes(n) => write!(
                f,
                "recording stopped at {n} bytes (exec.recording_max_bytes)"
            ),
            Stop::FreeSpace { free, floor } => write!(
                f,
                "recording stopped: free space {} below the floor {} (exec.recording_min_free_bytes)",
                human_bytes(*free),
                human_bytes(*floor)
            ),
        }
    }
}

/// Bytes available to an unprivileged writer on the file system of `path`.
pub fn free_space(path: &Path) -> io::Result<u64> {
    let s = rustix::fs::statvfs(path)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

fn free_space_of(f: &File) -> io::Result<u64> {
    let s = rustix::fs::fstatvfs(f)?;
    Ok(s.f_bavail.saturating_mul(s.f_frsize))
}

/// `512 MiB`, `1 GiB`, `1.5 GiB`, `300 bytes`: for messages.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} bytes");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let text = format!("{v:.1}");
    let text = text.strip_suffix(".0").unwrap_or(&text);
    format!("{text} {}", UNITS[unit])
}

/// How the free space is measured (a test fakes it).
type SpaceProbe = Box<dyn FnMut(&File) -> io::Result<u64> + Send>;

pub struct Recorder {
    out: BufWriter<File>,
    started: Instant,
    /// The start of a UTF-8 sequence the last frame ended in.
    carry: Vec<u8>,
    bounds: Bounds,
    /// Bytes in the file so far (header included).
    written: u64,
    /// `written` at which the free space is looked at next.
    next_space_check: u64,
    space: SpaceProbe,
    /// Set once the recording stopped early: nothing more is written.
    stopped: Option<Stop>,
}

impl Recorder {
    /// Creates `path` (mode 0600, never overwriting) and writes the header.
    pub fn create(
        path: &Path,
        command: &[String],
        size: (u16, u16),
        timestamp: u64,
        bounds: Bounds,
    ) -> io::Result<Recorder> {
        Recorder::create_with(
            path,
            command,
            size,
            timestamp,
            bounds,
            Box::new(free_space_of),
        )
    }

    fn create_with(
        path: &Path,
        command: &[String],
        size: (u16, u16),
        timestamp: u64,
        bounds: Bounds,
        space: SpaceProbe,
    ) -> io::Result<Recorder> {
        let f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        let mut r = Recorder {
            out: BufWriter::new(f),
            started: Instant::now(),
            carry: Vec::new(),
            bounds,
            written: 0,
            next_space_check: SPACE_CHECK_BYTES,
            space,
            stopped: None,
        };
        let header = json!({
            "version": 2,
            "width": size.0,
            "height": size.1,
            "timestamp": timestamp,
            "command": command.join(" "),
        });
        // The header is written whole even past the cap (a cast needs
        // one); the cap then stops the recording right after it.
        r.put(&format!("{header}\n"))?;
        if r.written + STOP_RESERVE > r.bounds.max_bytes {
            r.stop(Stop::MaxBytes(r.bounds.max_bytes))?;
        }
        Ok(r)
    }

    /// Why the recording stopped before the exec ended, if it did.
    pub fn stopped(&self) -> Option<&Stop> {
        self.stopped.as_ref()
    }

    fn line(&self, kind: &str, data: &str) -> String {
        let t = self.started.elapsed().as_secs_f64();
        format!("{}\n", json!([(t * 1e6).round() / 1e6, kind, data]))
    }

    /// The longest `"o"` event of a prefix of `data` (cut on a character
    /// boundary) whose line takes at most `room` bytes: a binary search
    /// over the boundaries, the line's length growing with the prefix.
    fn fitting_line(&self, data: &str, room: u64) -> Option<String> {
        let room = usize::try_from(room).unwrap_or(usize::MAX);
        let cuts: Vec<usize> = data
            .char_indices()
            .map(|(i, _)| i)
            .skip(1)
            .chain([data.len()])
            .take_while(|&i| i <= room)
            .collect();
        let fits = cuts.partition_point(|&n| self.line("o", &data[..n]).len() <= room);
        let n = *cuts.get(fits.checked_sub(1)?)?;
        Some(self.line("o", &data[..n]))
    }

    fn put(&mut self, line: &str) -> io::Result<()> {
        self.out.write_all(line.as_bytes())?;
        self.written += line.len() as u64;
        Ok(())
    }

    /// Writes the closing notice and marker and flushes: the file is
    /// complete from here on, whatever happens to the exec.
    fn stop(&mut self, why: Stop) -> io::Result<()> {
        let text = format!("kubegate: {why}");
        let notice = self.line("o", &format!("\r\n\x1b[0m[{text}; the exec goes on]\r\n"));
        let marker = self.line("m", &text);
        self.carry.clear();
        self.stopped = Some(why);
        self.put(&notice)?;
        self.put(&marker)?;
        self.out.flush()
    }

    fn event(&mut self, kind: &str, data: &str) -> io::Result<()> {
        if self.stopped.is_some() {
            return Ok(());
        }
        let line = self.line(kind, data);
        let after = self.written + line.len() as u64;
        if after + STOP_RESERVE > self.bounds.max_bytes {
            // What fits of an output event goes in, cut on a character
            // boundary; then the closing events.
            let room = self
                .bounds
                .max_bytes
                .saturating_sub(self.written + STOP_RESERVE);
            if kind == "o" {
                if let Some(part) = self.fitting_line(data, room) {
                    self.put(&part)?;
                }
            }
            return self.stop(Stop::MaxBytes(self.bounds.max_bytes));
        }
        if self.bounds.min_free_bytes > 0 && after >= self.next_space_check {
            self.next_space_check = after + SPACE_CHECK_BYTES;
            self.out.flush()?;
            let free = (self.space)(self.out.get_ref())?;
            if free < self.bounds.min_free_bytes {
                return self.stop(Stop::FreeSpace {
                    free,
                    floor: self.bounds.min_free_bytes,
                });
            }
        }
        self.put(&line)
    }

    /// One output frame.
    pub fn output(&mut self, data: &[u8]) -> io::Result<()> {
        if self.stopped.is_some() {
            return Ok(());
        }
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

    /// Flushes the file; why the recording stopped early, if it did.
    pub fn finish(mut self) -> io::Result<Option<Stop>> {
        if !self.carry.is_empty() {
            let text = String::from_utf8_lossy(&self.carry).into_owned();
            self.carry.clear();
            self.event("o", &text)?;
        }
        self.out.flush()?;
        Ok(self.stopped)
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
    use serde_json::Value;

    const UNBOUNDED: Bounds = Bounds {
        max_bytes: u64::MAX,
        min_free_bytes: 0,
    };

    fn temp(tag: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("kubegate-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Every line parsed (each must be JSON); the file's size.
    fn read_cast(path: &Path) -> (Vec<Value>, u64) {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.ends_with('\n'), "the last line is whole");
        let lines = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect();
        (lines, text.len() as u64)
    }

    /// The text of the "o" events before the closing notice and marker.
    fn recorded_output(events: &[Value]) -> String {
        events[1..events.len() - 2]
            .iter()
            .filter(|e| e[1] == "o")
            .map(|e| e[2].as_str().unwrap().to_string())
            .collect()
    }

    fn assert_closed_with(events: &[Value], want: &str) {
        let marker = events.last().unwrap();
        assert_eq!(marker[1], "m", "the marker is the last event: {marker}");
        let text = marker[2].as_str().unwrap();
        assert!(
            text.starts_with("kubegate: ") && text.contains(want),
            "{text}"
        );
        let notice = &events[events.len() - 2];
        assert_eq!(notice[1], "o");
        assert!(notice[2].as_str().unwrap().contains(want), "{notice}");
    }

    #[test]
    fn the_cap_ends_the_recording_with_a_marker_and_the_file_stays_valid() {
        let dir = temp("cast-cap");
        let path = dir.join("cap.cast");
        let cap = 10_000;
        let bounds = Bounds {
            max_bytes: cap,
            min_free_bytes: 0,
        };
        let mut r = Recorder::create(&path, &["yes".into()], (80, 24), 0, bounds).unwrap();
        let frame = b"y\n".repeat(100);
        for _ in 0..1000 {
            r.output(&frame).unwrap();
        }
        r.resize(100, 30).unwrap();
        assert_eq!(r.stopped(), Some(&Stop::MaxBytes(cap)));
        assert_eq!(r.finish().unwrap(), Some(Stop::MaxBytes(cap)));
        let (events, size) = read_cast(&path);
        assert!(size <= cap, "{size} bytes over the {cap} cap");
        assert!(size > cap - STOP_RESERVE, "the room was used: {size}");
        assert_eq!(events[0]["version"], 2);
        assert_closed_with(
            &events,
            "recording stopped at 10000 bytes (exec.recording_max_bytes)",
        );
        let out = recorded_output(&events);
        assert!(!out.is_empty());
        assert!(out
            .bytes()
            .eq(frame.iter().copied().cycle().take(out.len())));
        assert!(
            !events.iter().any(|e| e[1] == "r"),
            "nothing after the marker"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_utf8_sequence_carried_over_at_the_cap_is_not_written_as_garbage() {
        let dir = temp("cast-utf8");
        let path = dir.join("u.cast");
        let bounds = Bounds {
            max_bytes: 8192,
            min_free_bytes: 0,
        };
        let mut r = Recorder::create(&path, &["x".into()], (80, 24), 0, bounds).unwrap();
        // Every frame ends inside a "€" (3 bytes) and the next one
        // completes it: a carry is pending whenever the cap strikes.
        let euro = "€".as_bytes();
        let mut frame = euro[1..].to_vec();
        frame.extend_from_slice(&b"uro-".repeat(20));
        frame.push(euro[0]);
        let text = format!("€{}", "uro-".repeat(20)).repeat(200);
        r.output(&euro[..1]).unwrap();
        for _ in 0..200 {
            r.output(&frame).unwrap();
        }
        assert!(matches!(r.stopped(), Some(Stop::MaxBytes(8192))));
        r.finish().unwrap();
        let (events, size) = read_cast(&path);
        assert!(size <= 8192);
        assert_closed_with(&events, "recording stopped at 8192 bytes");
        let out = recorded_output(&events);
        assert!(
            !out.contains('\u{FFFD}'),
            "no replacement characters: {out:?}"
        );
        assert!(
            text.starts_with(&out),
            "the recording is a prefix of the output"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_frame_larger_than_the_room_left_is_cut_on_a_character_boundary() {
        let dir = temp("cast-big");
        let path = dir.join("b.cast");
        let cap = 8192;
        let bounds = Bounds {
            max_bytes: cap,
            min_free_bytes: 0,
        };
        let mut r = Recorder::create(&path, &["x".into()], (80, 24), 0, bounds).unwrap();
        // Multi-byte characters and control bytes JSON escapes six times
        // longer, in one frame far larger than the cap.
        let text = "é\u{1}€x\"".repeat(20_000);
        r.output(text.as_bytes()).unwrap();
        assert_eq!(r.finish().unwrap(), Some(Stop::MaxBytes(cap)));
        let (events, size) = read_cast(&path);
        assert!(size <= cap && size > cap - STOP_RESERVE, "{size}");
        assert_closed_with(&events, "recording stopped at 8192 bytes");
        let out = recorded_output(&events);
        assert!(out.len() > 1000, "{}", out.len());
        assert!(!out.contains('\u{FFFD}'));
        assert!(text.starts_with(&out));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_header_larger_than_the_cap_is_followed_by_the_marker_at_once() {
        let dir = temp("cast-header");
        let path = dir.join("h.cast");
        let bounds = Bounds {
            max_bytes: MIN_MAX_BYTES,
            min_free_bytes: 0,
        };
        let long = "a".repeat(5000);
        let mut r = Recorder::create(&path, &[long], (80, 24), 0, bounds).unwrap();
        r.output(b"more").unwrap();
        r.finish().unwrap();
        let (events, _) = read_cast(&path);
        assert_eq!(events.len(), 3, "header, notice, marker");
        assert_closed_with(&events, "exec.recording_max_bytes");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_recording_stops_when_free_space_falls_below_the_floor() {
        let dir = temp("cast-space");
        let path = dir.join("s.cast");
        let bounds = Bounds {
            max_bytes: u64::MAX,
            min_free_bytes: 1 << 30,
        };
        let mut free = [3u64 << 30, 512 << 20].into_iter();
        let probe: SpaceProbe = Box::new(move |_| Ok(free.next().unwrap_or(0)));
        let mut r =
            Recorder::create_with(&path, &["x".into()], (80, 24), 0, bounds, probe).unwrap();
        let frame = vec![b'z'; 32 * 1024];
        let mut frames = 0;
        while r.stopped().is_none() {
            r.output(&frame).unwrap();
            frames += 1;
            assert!(frames < 1000, "never stopped");
        }
        // The first look (after 1 MiB) saw 3 GiB, the second 512 MiB.
        assert!(
            frames > 2 * SPACE_CHECK_BYTES as usize / frame.len() - 2,
            "{frames}"
        );
        assert_eq!(
            r.stopped(),
            Some(&Stop::FreeSpace {
                free: 512 << 20,
                floor: 1 << 30
            })
        );
        r.output(&frame).unwrap();
        r.finish().unwrap();
        let (events, _) = read_cast(&path);
        assert_closed_with(
            &events,
            "free space 512 MiB below the floor 1 GiB (exec.recording_min_free_bytes)",
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_closing_events_fit_in_the_reserve_whatever_the_numbers() {
        let dir = temp("cast-reserve");
        let path = dir.join("r.cast");
        let r = Recorder::create(&path, &[], (80, 24), 0, UNBOUNDED).unwrap();
        for why in [
            Stop::MaxBytes(u64::MAX),
            Stop::FreeSpace {
                free: u64::MAX - 1,
                floor: u64::MAX,
            },
        ] {
            let text = format!("kubegate: {why}");
            let n = r.line("o", &format!("\r\n\x1b[0m[{text}; the exec goes on]\r\n")).len()
                + r.line("m", &text).len()
                // a timestamp of a whole year in seconds is longer
                + 2 * 8;
            assert!((n as u64) < STOP_RESERVE, "{n}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_bytes(300), "300 bytes");
        assert_eq!(human_bytes(512 << 20), "512 MiB");
        assert_eq!(human_bytes(1 << 30), "1 GiB");
        assert_eq!(human_bytes(3 << 29), "1.5 GiB");
        assert_eq!(human_bytes(u64::MAX), "16 EiB");
    }

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
            UNBOUNDED,
        )
        .unwrap();
        let euro = "€".as_bytes();
        r.output(b"hello ").unwrap();
        r.output(&euro[..1]).unwrap();
        r.output(&euro[1..]).unwrap();
        r.resize(100, 30).unwrap();
        assert_eq!(r.finish().unwrap(), None, "not cut");
        assert!(
            Recorder::create(&path, &[], (80, 24), 0, UNBOUNDED).is_err(),
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
