//! Sans-IO request parsing: the request head (via httparse), the body framing
//! it announces, chunked request bodies, and percent-decoding of the target.
//!
//! Owns: turning bytes into a [`Head`] and body bytes, and every input limit
//! that can be checked without a socket (head size, body size, chunk-size
//! lines, request smuggling guards). Never touches a socket, never allocates
//! more than the limits allow, never panics on input. Kept free of I/O so it
//! can be tested (and fuzzed) exhaustively on byte slices, however the bytes
//! happen to be split across reads.

use super::types::HttpError;

/// Most headers a request may carry (more is answered 431).
const MAX_HEADERS: usize = 128;
/// Longest chunk-size line (size, extensions, CRLF) in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;

/// How the request body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyKind {
    None,
    Length(u64),
    Chunked,
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub(crate) struct Head {
    pub method: String,
    pub target: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: Vec<(String, String)>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    /// Bytes of the head, including the blank line.
    pub len: usize,
    pub body: BodyKind,
    /// The client asked to keep the connection open after this exchange.
    pub keep_alive: bool,
    /// `Expect: 100-continue` on HTTP/1.1.
    pub expect_continue: bool,
}

#[cfg(test)]
impl Head {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn bad(msg: impl Into<String>) -> HttpError {
    HttpError::BadRequest(msg.into())
}

/// Parses a request head from the start of `buf`. `Ok(None)` means more
/// bytes are needed (and `buf` is still within `max_header_bytes`).
///
/// With `strict_crlf`, a line of the head ended by a bare LF (no CR before
/// it) is a 400: httparse accepts bare LF and has no strict switch, and a
/// proxy in front of us that reads the same bytes by RFC 9112 (lines end in
/// CRLF) could see other headers than we do. The daemon, the workspace agent
/// and the app runner are strict; the sim is lenient, as Go's server (and so
/// the real API server) is (docs/sim.md).
pub(crate) fn parse_head(
    buf: &[u8],
    max_header_bytes: usize,
    strict_crlf: bool,
) -> Result<Option<Head>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => {
            if buf.len() >= max_header_bytes {
                return Err(HttpError::HeadersTooLarge);
            }
            return Ok(None);
        }
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::HeadersTooLarge),
        Err(e) => return Err(bad(format!("malformed request head: {e}"))),
    };
    if len > max_header_bytes {
        return Err(HttpError::HeadersTooLarge);
    }
    if strict_crlf && has_bare_lf(&buf[..len]) {
        return Err(bad(
            "malformed request head: a line ends in a bare LF (lines end in CRLF)",
        ));
    }
    let method = req.method.ok_or_else(|| bad("no method"))?.to_string();
    let target = req
        .path
        .ok_or_else(|| bad("no request target"))?
        .to_string();
    let minor = match req.version {
        Some(0) => 0,
        Some(1) => 1,
        _ => return Err(bad("unsupported HTTP version")),
    };
    let headers: Vec<(String, String)> = req
        .headers
        .iter()
        .map(|h| {
            (
                h.name.to_ascii_lowercase(),
                String::from_utf8_lossy(h.value).trim().to_string(),
            )
        })
        .collect();

    let (path, query) = split_target(&target)?;

    // Body framing, with the request-smuggling guards of RFC 9112 §6.3.
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for (k, v) in &headers {
        if k == "content-length" {
            for part in v.split(',') {
                let part = part.trim();
                if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) || part.len() > 19 {
                    return Err(bad("invalid Content-Length"));
                }
                let n: u64 = part.parse().map_err(|_| bad("invalid Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(bad("conflicting Content-Length"));
                }
                length = Some(n);
            }
        } else if k == "transfer-encoding" {
            if chunked || !v.eq_ignore_ascii_case("chunked") {
                return Err(bad("unsupported Transfer-Encoding"));
            }
            chunked = true;
        }
    }
    let body = match (chunked, length) {
        (true, Some(_)) => return Err(bad("both Content-Length and Transfer-Encoding")),
        (true, None) if minor == 0 => return Err(bad("chunked body on HTTP/1.0")),
        (true, None) => BodyKind::Chunked,
        (false, Some(0)) | (false, None) => BodyKind::None,
        (false, Some(n)) => BodyKind::Length(n),
    };

    let has_token = |name: &str, token: &str| {
        headers
            .iter()
            .filter(|(k, _)| k == name)
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    };
    let keep_alive = if minor == 1 {
        !has_token("connection", "close")
    } else {
        has_token("connection", "keep-alive") && !has_token("connection", "close")
    };
    let expect_continue = minor == 1 && has_token("expect", "100-continue");

    Ok(Some(Head {
        method,
        target,
        path,
        query,
        headers,
        minor,
        len,
        body,
        keep_alive,
        expect_continue,
    }))
}

/// Splits a request-target into its decoded path and query pairs. Accepts
/// origin-form (`/p?q`), absolute-form (`http://h/p?q`) and `*`.
/// True when some LF in `head` has no CR right before it.
pub(crate) fn has_bare_lf(head: &[u8]) -> bool {
    head.iter()
        .enumerate()
        .any(|(i, &b)| b == b'\n' && (i == 0 || head[i - 1] != b'\r'))
}

pub(crate) fn split_target(target: &str) -> Result<(String, Vec<(String, String)>), HttpError> {
    let origin = if target.starts_with('/') || target == "*" {
        target
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        match rest.find('/') {
            Some(i) => &rest[i..],
            None => match rest.find('?') {
                Some(_) => return Err(bad("absolute-form target without a path")),
                None => "/",
            },
        }
    } else {
        return Err(bad("invalid request target"));
    };
    let (raw_path, raw_query) = match origin.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (origin, None),
    };
    let path =
        percent_decode(raw_path, false).ok_or_else(|| bad("invalid percent-encoding in path"))?;
    let mut query = Vec::new();
    if let Some(q) = raw_query {
        for pair in q.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let k =
                percent_decode(k, true).ok_or_else(|| bad("invalid percent-encoding in query"))?;
            let v =
                percent_decode(v, true).ok_or_else(|| bad("invalid percent-encoding in query"))?;
            query.push((k, v));
        }
    }
    Ok((path, query))
}

/// Decodes `%XX` escapes (and `+` as a space when `plus_is_space`). `None`
/// for a malformed escape or a result that is not UTF-8.
pub(crate) fn percent_decode(s: &str, plus_is_space: bool) -> Option<String> {
    let bytes = s.as_bytes();
    if !(bytes.contains(&b'%') || plus_is_space && bytes.contains(&b'+')) {
        return Some(s.to_string());
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hi = hex_val(*bytes.get(i + 1)?)?;
                let lo = hex_val(*bytes.get(i + 2)?)?;
                out.push(hi << 4 | lo);
                i += 3;
            }
            b'+' if plus_is_space => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The value of one hexadecimal digit (either case).
pub(crate) fn hex_val(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// Reading the chunk-size line.
    Size,
    /// Reading chunk data; bytes left.
    Data(u64),
    /// Expecting the CR (0) or LF (1) after chunk data.
    DataEnd(u8),
    /// Reading trailer lines until an empty one.
    Trailer,
    Done,
}

/// Incremental decoder of a chunked body (a request's, or a response's
/// through [`super::response::BodyDecoder`]). Feed it bytes as they
/// arrive; it appends the payload to `out` and says how much input it used.
#[derive(Debug)]
pub(crate) struct ChunkedDecoder {
    state: ChunkState,
    line: Vec<u8>,
    total: u64,
    limit: u64,
    trailer_bytes: usize,
    max_trailer_bytes: usize,
}

impl ChunkedDecoder {
    pub fn new(limit: usize, max_trailer_bytes: usize) -> ChunkedDecoder {
        ChunkedDecoder {
            state: ChunkState::Size,
            line: Vec::new(),
            total: 0,
            limit: limit as u64,
            trailer_bytes: 0,
            max_trailer_bytes,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// The last (zero-size) chunk is in: only trailers, if any, are left.
    pub fn last_chunk_seen(&self) -> bool {
        matches!(self.state, ChunkState::Trailer | ChunkState::Done)
    }

    /// Consumes a prefix of `input` (all of it unless the body ends inside
    /// it: the rest belongs to the next request) and returns its length.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                ChunkState::Done => break,
                ChunkState::Size | ChunkState::Trailer => {
                    let b = input[i];
                    i += 1;
                    self.line.push(b);
                    if self.state == ChunkState::Trailer {
                        self.trailer_bytes += 1;
                        if self.trailer_bytes > self.max_trailer_bytes {
                            return Err(bad("chunked trailers too large"));
                        }
                    } else if self.line.len() > MAX_CHUNK_LINE {
                        return Err(bad("chunk-size line too long"));
                    }
                    if b != b'\n' {
                        continue;
                    }
                    let line = std::mem::take(&mut self.line);
                    let Some(content) = line.strip_suffix(b"\r\n") else {
                        return Err(bad("chunk line not ended by CRLF"));
                    };
                    if self.state == ChunkState::Trailer {
                        if content.is_empty() {
                            self.state = ChunkState::Done;
                        }
                        continue;
                    }
                    let size = parse_chunk_size(content)?;
                    if size == 0 {
                        self.state = ChunkState::Trailer;
                    } else {
                        if size > self.limit.saturating_sub(self.total) {
                            return Err(HttpError::BodyTooLarge {
                                limit: self.limit as usize,
                            });
                        }
                        self.total += size;
                        self.state = ChunkState::Data(size);
                    }
                }
                ChunkState::Data(left) => {
                    let n = (input.len() - i).min(usize::try_from(left).unwrap_or(usize::MAX));
                    out.extend_from_slice(&input[i..i + n]);
                    i += n;
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        ChunkState::DataEnd(0)
                    } else {
                        ChunkState::Data(left)
                    };
                }
                ChunkState::DataEnd(k) => {
                    let want = if k == 0 { b'\r' } else { b'\n' };
                    if input[i] != want {
                        return Err(bad("chunk data not followed by CRLF"));
                    }
                    i += 1;
                    self.state = if k == 0 {
                        ChunkState::DataEnd(1)
                    } else {
                        ChunkState::Size
                    };
                }
            }
        }
        Ok(i)
    }
}

fn parse_chunk_size(line: &[u8]) -> Result<u64, HttpError> {
    let hex_end = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let (hex, rest) = line.split_at(hex_end);
    if hex.is_empty() {
        return Err(bad("missing chunk size"));
    }
    if hex.len() > 15 {
        return Err(bad("chunk size too large"));
    }
    // Whatever follows the size must be whitespace and/or `;extensions`.
    let rest_trimmed: Vec<u8> = rest
        .iter()
        .copied()
        .skip_while(|b| *b == b' ' || *b == b'\t')
        .collect();
    if !(rest_trimmed.is_empty() || rest_trimmed[0] == b';') {
        return Err(bad("invalid chunk size"));
    }
    let mut n: u64 = 0;
    for &b in hex {
        n = n * 16 + u64::from(hex_val(b).unwrap_or(0));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: usize = 64 * 1024;

    fn head(s: &str) -> Head {
        parse_head(s.as_bytes(), MAX, true).unwrap().unwrap()
    }

    #[test]
    fn simple_get() {
        let h =
            head("GET /api/v1/pods?watch=true&x=a%20b+c HTTP/1.1\r\nHost: x\r\nX-A:  v \r\n\r\n");
        assert_eq!(h.method, "GET");
        assert_eq!(h.path, "/api/v1/pods");
        assert_eq!(
            h.query,
            vec![
                ("watch".into(), "true".into()),
                ("x".into(), "a b c".into())
            ]
        );
        assert_eq!(h.header("x-a"), Some("v"));
        assert_eq!(h.headers[0].0, "host");
        assert_eq!(h.body, BodyKind::None);
        assert!(h.keep_alive);
        assert_eq!(h.minor, 1);
    }

    #[test]
    fn bare_lf_is_refused_when_strict_and_accepted_when_lenient() {
        for s in [
            "GET / HTTP/1.1\nHost: x\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\n\r\n",
            "GET / HTTP/1.1\r\nHost: x\r\n\n",
            "GET / HTTP/1.1\n\n",
            "GET / HTTP/1.1\r\nX-A: 1\nTransfer-Encoding: chunked\r\n\r\n",
        ] {
            match parse_head(s.as_bytes(), MAX, true) {
                Err(HttpError::BadRequest(m)) => assert!(m.contains("bare LF"), "{m}"),
                other => panic!("{s:?}: {other:?}"),
            }
            assert!(
                parse_head(s.as_bytes(), MAX, false).unwrap().is_some(),
                "{s:?} lenient"
            );
        }
        // CRLF everywhere, and an LF in the body after the head, are fine.
        let ok = "POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n\n\n";
        assert!(parse_head(ok.as_bytes(), MAX, true).unwrap().is_some());
    }

    #[test]
    fn split_heads_need_more_bytes_at_every_split() {
        let full = b"POST /a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc";
        let head_len = full.len() - 3;
        for cut in 0..head_len {
            assert!(
                parse_head(&full[..cut], MAX, true).unwrap().is_none(),
                "cut {cut}"
            );
        }
        let h = parse_head(full, MAX, true).unwrap().unwrap();
        assert_eq!(h.len, head_len);
        assert_eq!(h.body, BodyKind::Length(3));
    }

    #[test]
    fn pipelined_heads_parse_one_at_a_time() {
        let buf = b"GET /one HTTP/1.1\r\n\r\nGET /two HTTP/1.1\r\n\r\n";
        let h1 = parse_head(buf, MAX, true).unwrap().unwrap();
        assert_eq!(h1.path, "/one");
        let h2 = parse_head(&buf[h1.len..], MAX, true).unwrap().unwrap();
        assert_eq!(h2.path, "/two");
        assert_eq!(h1.len + h2.len, buf.len());
    }

    #[test]
    fn head_limit() {
        let mut s = String::from("GET / HTTP/1.1\r\n");
        while s.len() < 2000 {
            s.push_str("X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n");
        }
        // Incomplete and already at the limit.
        assert_eq!(
            parse_head(s.as_bytes(), 1024, true).unwrap_err(),
            HttpError::HeadersTooLarge
        );
        // Complete but over the limit.
        s.push_str("\r\n");
        assert_eq!(
            parse_head(s.as_bytes(), 1024, true).unwrap_err(),
            HttpError::HeadersTooLarge
        );
        // Too many headers.
        let mut m = String::from("GET / HTTP/1.1\r\n");
        for i in 0..200 {
            m.push_str(&format!("X-{i}: 1\r\n"));
        }
        m.push_str("\r\n");
        assert_eq!(
            parse_head(m.as_bytes(), MAX, true).unwrap_err(),
            HttpError::HeadersTooLarge
        );
    }

    #[test]
    fn keep_alive_rules() {
        assert!(!head("GET / HTTP/1.1\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(!head("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(head("GET / HTTP/1.1\r\nConnection: Upgrade, keep-alive\r\n\r\n").keep_alive);
        assert!(
            head("POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
        assert!(
            !head("POST / HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n")
                .expect_continue
        );
    }

    #[test]
    fn bad_requests() {
        for s in [
            "GARBAGE\r\n\r\n",
            "GET / HTTP/2.0\r\n\r\n",
            "GET nopath HTTP/1.1\r\n\r\n",
            "GET /%zz HTTP/1.1\r\n\r\n",
            "GET /%ff HTTP/1.1\r\n\r\n",
            "GET /?a=%4 HTTP/1.1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
            "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
            "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
            "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
        ] {
            match parse_head(s.as_bytes(), MAX, true) {
                Err(HttpError::BadRequest(_)) => {}
                other => panic!("{s:?} gave {other:?}"),
            }
        }
        // Identical repeated Content-Length is tolerated.
        assert_eq!(
            head("POST / HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n").body,
            BodyKind::Length(2)
        );
    }

    #[test]
    fn targets_and_decoding() {
        assert_eq!(split_target("http://h:1/a%2Fb?q=1").unwrap().0, "/a/b");
        assert_eq!(split_target("http://h:1").unwrap().0, "/");
        assert_eq!(split_target("*").unwrap().0, "*");
        // `+` stays in the path, is a space in the query.
        let (p, q) = split_target("/a+b?k%3D=v+w&flag&=e&&x=%E2%9C%93").unwrap();
        assert_eq!(p, "/a+b");
        assert_eq!(
            q,
            vec![
                ("k=".into(), "v w".into()),
                ("flag".into(), "".into()),
                ("".into(), "e".into()),
                ("x".into(), "✓".into())
            ]
        );
        assert_eq!(percent_decode("%41%62", false).as_deref(), Some("Ab"));
        assert_eq!(percent_decode("%", false), None);
        assert_eq!(percent_decode("%4", true), None);
    }

    fn decode_all(input: &[u8], limit: usize) -> Result<(Vec<u8>, usize), HttpError> {
        let mut d = ChunkedDecoder::new(limit, 1024);
        let mut out = Vec::new();
        let n = d.feed(input, &mut out)?;
        assert!(d.is_done(), "not done");
        Ok((out, n))
    }

    #[test]
    fn chunked_bodies() {
        let body =
            b"5\r\nhello\r\n6;ext=1\r\n world\r\nA \r\n0123456789\r\n0\r\nTrailer: x\r\n\r\nNEXT";
        let (out, n) = decode_all(body, 1 << 20).unwrap();
        assert_eq!(out, b"hello world0123456789");
        assert_eq!(&body[n..], b"NEXT");
        // Byte by byte gives the same result.
        let mut d = ChunkedDecoder::new(1 << 20, 1024);
        let mut out2 = Vec::new();
        let mut used = 0;
        for b in body.iter() {
            if d.is_done() {
                break;
            }
            used += d.feed(std::slice::from_ref(b), &mut out2).unwrap();
        }
        assert_eq!(out2, out);
        assert_eq!(used, n);
    }

    #[test]
    fn bad_chunks() {
        for s in [
            &b"x\r\n"[..],
            b"\r\n",
            b"5\r\nhelloXX",
            b"5 x\r\n",
            b"5\nhello",
            b"ffffffffffffffffff\r\n",
            b"-1\r\n",
            b"0\r\nTrailer\n",
        ] {
            let mut d = ChunkedDecoder::new(1 << 20, 1024);
            match d.feed(s, &mut Vec::new()) {
                Err(HttpError::BadRequest(_)) => {}
                other => panic!("{s:?} gave {other:?}"),
            }
        }
        let long = vec![b'1'; MAX_CHUNK_LINE + 10];
        let mut d = ChunkedDecoder::new(1 << 20, 1024);
        assert!(matches!(
            d.feed(&long, &mut Vec::new()),
            Err(HttpError::BadRequest(_))
        ));
    }

    #[test]
    fn chunked_limit() {
        let mut d = ChunkedDecoder::new(10, 1024);
        let mut out = Vec::new();
        d.feed(b"6\r\nabcdef\r\n", &mut out).unwrap();
        assert_eq!(
            d.feed(b"5\r\n", &mut out).unwrap_err(),
            HttpError::BodyTooLarge { limit: 10 }
        );
        // A size announced past the limit fails before any data is read.
        let mut d = ChunkedDecoder::new(10, 1024);
        assert!(matches!(
            d.feed(b"fffffff\r\n", &mut out),
            Err(HttpError::BodyTooLarge { .. })
        ));
    }
}
