//! A pty pair for terminal tests: the master (what a terminal emulator
//! holds) with everything it reads collected, and the slave for the
//! program's stdin/stdout/stderr.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long [`Pty::wait_text`] waits.
pub const WAIT: Duration = Duration::from_secs(60);

pub struct Pty {
    pub master: OwnedFd,
    pub slave: OwnedFd,
    /// Everything read from the master so far.
    pub seen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    /// A new pair sized `rows` x `cols`.
    pub fn open(rows: u16, cols: u16) -> Pty {
        use rustix::fs::{Mode, OFlags};
        use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
        let master =
            openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC).expect("openpt");
        grantpt(&master).expect("grantpt");
        unlockpt(&master).expect("unlockpt");
        let name = ptsname(&master, Vec::new()).expect("ptsname");
        let slave = rustix::fs::open(
            name.as_c_str(),
            OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .expect("open the pty slave");
        let pty = Pty {
            master,
            slave,
            seen: Arc::new(Mutex::new(Vec::new())),
        };
        pty.resize(rows, cols);
        let mut reader = std::fs::File::from(pty.master.try_clone().expect("dup master"));
        let seen = pty.seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut s) = seen.lock() {
                    s.extend_from_slice(&buf[..n]);
                }
            }
        });
        pty
    }

    pub fn resize(&self, rows: u16, cols: u16) {
        let ws = rustix::termios::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        rustix::termios::tcsetwinsize(&self.slave, ws).expect("set the window size");
    }

    /// The slave, for a child's stdin, stdout or stderr.
    pub fn stdio(&self) -> Stdio {
        Stdio::from(self.slave.try_clone().expect("dup slave"))
    }

    /// `stty -g` of the slave: every termios setting, comparable.
    pub fn settings(&self) -> String {
        let out = Command::new("stty")
            .arg("-g")
            .stdin(self.stdio())
            .output()
            .expect("stty -g");
        assert!(out.status.success(), "stty -g failed");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Types `b` as a user at the terminal would.
    pub fn type_bytes(&self, b: &[u8]) {
        let mut w = std::fs::File::from(self.master.try_clone().expect("dup master"));
        w.write_all(b).expect("write to the pty master");
    }

    pub fn text(&self) -> String {
        let s = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        String::from_utf8_lossy(&s).into_owned()
    }

    /// Waits (up to [`WAIT`]) until the output holds `what` after byte
    /// `from`; returns the offset just past it.
    pub fn wait_text(&self, what: &str, from: usize) -> usize {
        let deadline = Instant::now() + WAIT;
        loop {
            let t = self.text();
            if let Some(i) = t.get(from..).and_then(|rest| rest.find(what)) {
                return from + i + what.len();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what:?} on the terminal after byte {from}; it shows {t:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// A terminal's text without ANSI escape sequences (CSI: ESC [ ... letter)
/// nor carriage returns.
#[allow(dead_code)]
pub fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else if c != '\r' {
            out.push(c);
        }
    }
    out
}
