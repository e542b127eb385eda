//! Every app's output as lines prefixed with the app's name, sans-IO.
//!
//! Output comes in frames cut anywhere; [`Lines`] keeps a partial line per
//! (app, stream) until its end arrives, so lines of two apps never mix.
//! A partial line that stays alone (a prompt) is shown after
//! [`PARTIAL_AFTER`] anyway, as is one that grows past [`MAX_LINE`]. Line
//! ends are `\n`, `\r\n` (a terminal's) or a lone `\r` before more text
//! (progress bars redraw with it: each state becomes a line).
//!
//! The prefix is the name padded to the longest one, then `| `; with
//! colour, the prefix takes one of six colours by the app's position.

use std::time::{Duration, Instant};

/// A partial line is shown after this long without its end.
pub const PARTIAL_AFTER: Duration = Duration::from_millis(200);
/// A line longer than this is shown in pieces.
pub const MAX_LINE: usize = 16 * 1024;

/// ANSI colours of the prefixes, by app position.
const COLOURS: [&str; 6] = ["36", "33", "35", "32", "34", "31"];

/// Whether to colour: our stdout is a terminal, `NO_COLOR` is unset or
/// empty (no-color.org) and `TERM` is not `dumb`.
pub fn use_colour(stdout_is_terminal: bool, no_color: Option<&str>, term: Option<&str>) -> bool {
    stdout_is_terminal && no_color.is_none_or(str::is_empty) && term != Some("dumb")
}

/// The prefixes of the apps.
#[derive(Debug, Clone)]
pub struct Prefixes {
    prefixes: Vec<String>,
    width: usize,
}

impl Prefixes {
    pub fn new(names: &[String], colour: bool) -> Prefixes {
        let width = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
        let prefixes = names
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let pad = " ".repeat(width - n.chars().count());
                if colour {
                    format!("\x1b[{}m{n}{pad} |\x1b[0m ", COLOURS[i % COLOURS.len()])
                } else {
                    format!("{n}{pad} | ")
                }
            })
            .collect();
        Prefixes { prefixes, width }
    }

    /// App `i`'s prefix.
    pub fn of(&self, i: usize) -> &str {
        self.prefixes.get(i).map_or("", String::as_str)
    }

    /// Columns a prefix takes on the terminal.
    pub fn columns(&self) -> usize {
        self.width + 3
    }
}

/// The partial line of one (app, stream).
#[derive(Debug, Default)]
pub struct Lines {
    partial: Vec<u8>,
    /// When the partial line began waiting.
    since: Option<Instant>,
    /// The last byte taken was a `\r` that ended a line (a `\n` right
    /// after it belongs to that line end).
    after_cr: bool,
}

impl Lines {
    /// Takes a frame; the complete lines in it (without their ends).
    pub fn push(&mut self, mut data: &[u8], now: Instant) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        while !data.is_empty() {
            if self.after_cr {
                self.after_cr = false;
                if data[0] == b'\n' {
                    data = &data[1..];
                    continue;
                }
            }
            match data.iter().position(|&b| b == b'\n' || b == b'\r') {
                Some(i) => {
                    self.partial.extend_from_slice(&data[..i]);
                    self.after_cr = data[i] == b'\r';
                    out.push(std::mem::take(&mut self.partial));
                    self.since = None;
                    data = &data[i + 1..];
                }
                None => {
                    self.partial.extend_from_slice(data);
                    data = &[];
                }
            }
            while self.partial.len() > MAX_LINE {
                let rest = self.partial.split_off(cut_at(&self.partial, MAX_LINE));
                out.push(std::mem::replace(&mut self.partial, rest));
            }
        }
        if self.partial.is_empty() {
            self.since = None;
        } else {
            self.since.get_or_insert(now);
        }
        out
    }

    /// When the partial line is due to be shown anyway.
    pub fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + PARTIAL_AFTER)
    }

    /// The partial line when it is due at `now` (or `force`d: the end).
    pub fn take_partial(&mut self, now: Instant, force: bool) -> Option<Vec<u8>> {
        let due = self.due()?;
        if !force && now < due {
            return None;
        }
        self.since = None;
        Some(std::mem::take(&mut self.partial))
    }
}

/// Where to cut a line of more than `max` bytes: at `max`, moved back to
/// the start of a UTF-8 character.
fn cut_at(b: &[u8], max: usize) -> usize {
    let mut i = max.min(b.len());
    while i > 0 && i < b.len() && (b[i] & 0xc0) == 0x80 {
        i -= 1;
    }
    if i == 0 {
        max.min(b.len())
    } else {
        i
    }
}

/// One line ready to write: the prefix, the line, `\n`. With colour, a
/// reset follows the line so an app's unfinished colour does not leak into
/// the next prefix.
pub fn render(prefix: &str, line: &[u8], colour: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + line.len() + 8);
    out.extend_from_slice(prefix.as_bytes());
    out.extend_from_slice(line);
    if colour && line.contains(&0x1b) {
        out.extend_from_slice(b"\x1b[0m");
    }
    out.push(b'\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_split_whatever_the_framing() {
        let t = Instant::now();
        let mut l = Lines::default();
        assert!(l.push(b"hel", t).is_empty());
        assert_eq!(l.due(), Some(t + PARTIAL_AFTER));
        assert_eq!(l.push(b"lo\nwor", t), vec![b"hello".to_vec()]);
        assert_eq!(
            l.push(b"ld\r\nthree\r", t),
            vec![b"world".to_vec(), b"three".to_vec()]
        );
        // The \n of a \r\n cut between frames ends nothing more.
        assert!(l.push(b"\n", t).is_empty());
        assert_eq!(l.due(), None);
        // A lone \r (a progress bar) ends a line too.
        assert_eq!(
            l.push(b"10%\r20%\r", t),
            vec![b"10%".to_vec(), b"20%".to_vec()]
        );
        assert_eq!(l.push(b"\n\n", t), vec![Vec::<u8>::new()]);
    }

    #[test]
    fn partial_lines_wait_then_show() {
        let t = Instant::now();
        let mut l = Lines::default();
        l.push(b"> ", t);
        assert_eq!(l.take_partial(t, false), None);
        assert_eq!(
            l.take_partial(t + PARTIAL_AFTER, false),
            Some(b"> ".to_vec())
        );
        assert_eq!(l.due(), None);
        assert_eq!(l.take_partial(t, true), None, "nothing left");
        l.push(b"x", t);
        assert_eq!(l.take_partial(t, true), Some(b"x".to_vec()));
        // Long lines come in pieces cut between characters.
        let long = "é".repeat(MAX_LINE);
        let got = l.push(long.as_bytes(), t);
        assert_eq!(got.len(), 1);
        assert!(std::str::from_utf8(&got[0]).is_ok());
        assert!(got[0].len() <= MAX_LINE);
    }

    #[test]
    fn prefixes_align_and_colour() {
        let names = vec!["web".to_string(), "worker".to_string()];
        let p = Prefixes::new(&names, false);
        assert_eq!(p.of(0), "web    | ");
        assert_eq!(p.of(1), "worker | ");
        assert_eq!(p.columns(), 9);
        let c = Prefixes::new(&names, true);
        assert_eq!(c.of(0), "\x1b[36mweb    |\x1b[0m ");
        assert_eq!(c.of(1), "\x1b[33mworker |\x1b[0m ");
        assert_eq!(render(p.of(0), b"hi", false), b"web    | hi\n");
        assert_eq!(
            render(c.of(1), b"\x1b[1mbold", true),
            b"\x1b[33mworker |\x1b[0m \x1b[1mbold\x1b[0m\n"
        );
        assert!(use_colour(true, None, Some("xterm")));
        assert!(use_colour(true, Some(""), None));
        assert!(!use_colour(true, Some("1"), None));
        assert!(!use_colour(false, None, None));
        assert!(!use_colour(true, None, Some("dumb")));
    }
}
