//! Splits a byte stream into top-level JSON values (objects or arrays),
//! wherever the chunk boundaries fall.
//!
//! It owns only framing: it finds where each value ends by tracking nesting
//! depth and string/escape state, carrying that state across pushes so each
//! byte is scanned once (no re-parsing from the start when a large value
//! arrives in many small chunks). It never parses values (serde_json does that
//! on the complete slice) and never does I/O. Watch streams and the exec
//! resize channel are both "a stream of JSON values, newlines optional", so
//! both use this.

use std::fmt;

/// Why the stream cannot be split further. Both are fatal: after one, the
/// splitter returns the same error forever (the caller should drop the
/// connection); there is no reliable way to resynchronise inside JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SplitError {
    /// A value grew beyond the limit before it was complete.
    TooLarge { limit: usize },
    /// A top-level byte that cannot start an object or array.
    UnexpectedByte { byte: u8, offset: u64 },
    /// Brackets closed that were never opened (`}` with nothing open, or a
    /// mismatched `]`).
    Unbalanced { offset: u64 },
}

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SplitError::TooLarge { limit } => {
                write!(f, "JSON value larger than the {limit}-byte limit")
            }
            SplitError::UnexpectedByte { byte, offset } => write!(
                f,
                "unexpected byte 0x{byte:02x} at stream offset {offset}: expected a JSON object"
            ),
            SplitError::Unbalanced { offset } => {
                write!(f, "unbalanced brackets at stream offset {offset}")
            }
        }
    }
}

impl std::error::Error for SplitError {}

/// Incremental splitter. Push bytes, then call [`JsonSplitter::next_value`]
/// until it returns `None`.
#[derive(Debug)]
pub struct JsonSplitter {
    buf: Vec<u8>,
    /// Start of the value being scanned (or of unscanned input) in `buf`.
    start: usize,
    /// Next byte of `buf` to scan.
    pos: usize,
    /// Open brackets of the current value, innermost last (`{` or `[`).
    stack: Vec<u8>,
    in_string: bool,
    escape: bool,
    max_value: usize,
    /// Bytes dropped from the front of `buf` so far (for error offsets).
    consumed: u64,
    failed: Option<SplitError>,
}

/// JSON insignificant whitespace, plus a UTF-8 BOM's bytes are not accepted.
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

impl JsonSplitter {
    /// A splitter that refuses values longer than `max_value` bytes.
    pub fn new(max_value: usize) -> JsonSplitter {
        JsonSplitter {
            buf: Vec::new(),
            start: 0,
            pos: 0,
            stack: Vec::new(),
            in_string: false,
            escape: false,
            max_value,
            consumed: 0,
            failed: None,
        }
    }

    /// Appends input. Cheap; all work happens in `next_value`.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// The next complete value's bytes, `None` when more input is needed, or
    /// the (sticky) framing error.
    pub fn next_value(&mut self) -> Option<Result<&[u8], SplitError>> {
        if let Some(e) = &self.failed {
            return Some(Err(e.clone()));
        }
        match self.scan() {
            Ok(Some(end)) => {
                let begin = self.start;
                self.start = end;
                self.pos = end;
                Some(Ok(&self.buf[begin..end]))
            }
            Ok(None) => {
                self.compact();
                if self.buf.len() - self.start > self.max_value {
                    let e = SplitError::TooLarge {
                        limit: self.max_value,
                    };
                    self.fail(e.clone());
                    return Some(Err(e));
                }
                None
            }
            Err(e) => {
                self.fail(e.clone());
                Some(Err(e))
            }
        }
    }

    /// True when no partial value is buffered (only whitespace, if anything):
    /// at a clean end of stream this must hold, otherwise the last value was
    /// truncated.
    pub fn is_idle(&self) -> bool {
        self.failed.is_none()
            && self.stack.is_empty()
            && self.buf[self.start..].iter().all(|b| is_ws(*b))
    }

    /// Bytes buffered but not yet returned.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    fn fail(&mut self, e: SplitError) {
        self.failed = Some(e);
        self.buf = Vec::new();
        self.start = 0;
        self.pos = 0;
    }

    /// Drops returned bytes from the front; called only when the buffer is
    /// exhausted so many small values in one push cost one move, not many.
    fn compact(&mut self) {
        if self.start > 0 {
            self.consumed += self.start as u64;
            self.buf.drain(..self.start);
            self.pos -= self.start;
            self.start = 0;
        }
    }

    /// Scans from `pos`; returns the end (exclusive) of a complete value.
    fn scan(&mut self) -> Result<Option<usize>, SplitError> {
        let buf = &self.buf;
        let mut i = self.pos;
        if self.stack.is_empty() {
            // Between values: skip whitespace, expect an opening bracket.
            while i < buf.len() && is_ws(buf[i]) {
                i += 1;
            }
            self.start = i;
            if i == buf.len() {
                self.pos = i;
                return Ok(None);
            }
            match buf[i] {
                b @ (b'{' | b'[') => {
                    self.stack.push(b);
                    i += 1;
                }
                b => {
                    return Err(SplitError::UnexpectedByte {
                        byte: b,
                        offset: self.consumed + i as u64,
                    })
                }
            }
        }
        while i < buf.len() {
            let b = buf[i];
            i += 1;
            if self.in_string {
                if self.escape {
                    self.escape = false;
                } else if b == b'\\' {
                    self.escape = true;
                } else if b == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.stack.push(b),
                b'}' | b']' => {
                    let open = if b == b'}' { b'{' } else { b'[' };
                    if self.stack.pop() != Some(open) {
                        return Err(SplitError::Unbalanced {
                            offset: self.consumed + (i - 1) as u64,
                        });
                    }
                    if self.stack.is_empty() {
                        self.pos = i;
                        return Ok(Some(i));
                    }
                }
                _ => {}
            }
        }
        self.pos = i;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(s: &mut JsonSplitter) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(r) = s.next_value() {
            out.push(String::from_utf8(r.unwrap().to_vec()).unwrap());
        }
        out
    }

    #[test]
    fn splits_values_with_and_without_separators() {
        let mut s = JsonSplitter::new(1 << 20);
        s.push(br#"{"a":1}{"b":[1,{"c":"}"}]}  [1,2]"#);
        s.push(b"\n\r\t {\"d\":\"\\\"}\\\\\"}\n");
        assert_eq!(
            all(&mut s),
            vec![
                r#"{"a":1}"#,
                r#"{"b":[1,{"c":"}"}]}"#,
                "[1,2]",
                r#"{"d":"\"}\\"}"#
            ]
        );
        assert!(s.is_idle());
    }

    #[test]
    fn byte_by_byte() {
        let input = br#" {"x":"a{b[c\"d"} {"y":[[]]} "#;
        let mut s = JsonSplitter::new(1 << 20);
        let mut got = Vec::new();
        for b in input.iter() {
            s.push(&[*b]);
            got.extend(all(&mut s));
        }
        assert_eq!(got, vec![r#"{"x":"a{b[c\"d"}"#, r#"{"y":[[]]}"#]);
        assert!(s.is_idle());
    }

    #[test]
    fn partial_is_not_idle() {
        let mut s = JsonSplitter::new(100);
        s.push(b"{\"a\":");
        assert!(s.next_value().is_none());
        assert!(!s.is_idle());
        assert_eq!(s.buffered(), 5);
    }

    #[test]
    fn too_large_is_sticky() {
        let mut s = JsonSplitter::new(8);
        s.push(b"{\"abcdefgh\":1");
        assert_eq!(s.next_value(), Some(Err(SplitError::TooLarge { limit: 8 })));
        s.push(b"}");
        assert_eq!(s.next_value(), Some(Err(SplitError::TooLarge { limit: 8 })));
        // Exactly at the limit is fine.
        let mut s = JsonSplitter::new(8);
        s.push(b"{\"a\":12}");
        assert_eq!(all(&mut s), vec!["{\"a\":12}"]);
    }

    #[test]
    fn garbage_and_unbalanced() {
        let mut s = JsonSplitter::new(100);
        s.push(b"{}\nnull");
        assert_eq!(s.next_value(), Some(Ok(&b"{}"[..])));
        assert_eq!(
            s.next_value(),
            Some(Err(SplitError::UnexpectedByte {
                byte: b'n',
                offset: 3
            }))
        );
        let mut s = JsonSplitter::new(100);
        s.push(b"{]");
        assert_eq!(
            s.next_value(),
            Some(Err(SplitError::Unbalanced { offset: 1 }))
        );
    }
}
