//! The pod-access client's HTTP/1.1 answer reading: the response head
//! (interim 1xx skipped) and the body's framing (`Content-Length`,
//! chunked, close-delimited), over a blocking socket with a deadline or a
//! non-blocking one under the relay's poll loop. Kept in this one file so
//! the crate's shared parser in `http` can replace it.

use super::api_proxy::from_read_error;
use super::*;

/// A non-blocking socket under a [`BodyReader`]: reads pass through,
/// `WouldBlock` included.
pub(super) struct Nb<S>(pub(super) S);

impl<S: Read> Read for Nb<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl<S: PollStream + 'static> PollBody for BodyReader<Nb<S>> {
    fn fd(&self) -> BorrowedFd<'_> {
        self.src.0.as_fd()
    }
    fn has_buffered_input(&self) -> bool {
        self.pos < self.leftover.len()
            || self.out_pos < self.out.len()
            || self.src.0.has_buffered_input()
    }
}

/// A [`ClientSocket`] read with socket timeouts from a deadline (a
/// missed deadline is `TimedOut`).
pub(super) struct TimedClient {
    pub(super) sock: ClientSocket,
    pub(super) deadline: Instant,
}

impl Read for TimedClient {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        self.sock.set_read_timeout(Some(left))?;
        match self.sock.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Err(io::Error::new(io::ErrorKind::TimedOut, "no data in time"))
            }
            r => r,
        }
    }
}

pub(super) enum RawError {
    /// Nothing came back: the request may not have reached the server.
    Io(io::Error),
    Access(AccessError),
}

/// Writes `req` on `sock` and reads the answer's head before `deadline`.
pub(super) fn raw_exchange(
    mut sock: ClientSocket,
    req: &str,
    deadline: Instant,
) -> Result<(ClientSocket, Head, Vec<u8>), RawError> {
    raw::write_all(&mut sock, req.as_bytes(), deadline).map_err(RawError::Io)?;
    let mut timed = TimedClient { sock, deadline };
    let (head, rest) = read_head(&mut timed).map_err(RawError::Access)?;
    Ok((timed.sock, head, rest))
}

/// A parsed response head.
#[derive(Debug)]
pub(super) struct Head {
    pub(super) status: u16,
    pub(super) headers: Vec<(String, String)>,
}

/// Reads a response head (skipping interim 1xx answers); returns it and
/// the bytes read past it.
pub(super) fn read_head(r: &mut dyn Read) -> Result<(Head, Vec<u8>), AccessError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8 * 1024];
    loop {
        // Parse what there is before reading more (leftover after a 1xx).
        if !buf.is_empty() {
            let mut hs = [httparse::EMPTY_HEADER; 96];
            let mut resp = httparse::Response::new(&mut hs);
            match resp.parse(&buf) {
                Ok(httparse::Status::Complete(n)) => {
                    let status = resp.code.unwrap_or(0);
                    let headers = resp
                        .headers
                        .iter()
                        .map(|h| {
                            (
                                h.name.to_string(),
                                String::from_utf8_lossy(h.value).trim().to_string(),
                            )
                        })
                        .collect();
                    let rest = buf.split_off(n);
                    if (100..200).contains(&status) && status != 101 {
                        buf = rest;
                        continue;
                    }
                    return Ok((Head { status, headers }, rest));
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => {
                    return Err(AccessError::Http {
                        message: format!("malformed response head: {e}"),
                    })
                }
            }
        }
        if buf.len() > MAX_HEAD_BYTES {
            return Err(AccessError::Http {
                message: format!("response head larger than {MAX_HEAD_BYTES} bytes"),
            });
        }
        let n = match r.read(&mut chunk) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(from_read_error(e, "waiting for the response head")),
        };
        if n == 0 {
            return Err(AccessError::Http {
                message: "the connection closed before a complete response head".into(),
            });
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

pub(super) enum Framing {
    /// Bytes still to come.
    Length(u64),
    Chunked(Box<ChunkedDecoder>),
    /// Until the connection closes.
    Close,
    Done,
}

/// The body of a response, de-framed, as a `Read`.
pub(super) struct BodyReader<R> {
    pub(super) src: R,
    /// Bytes read with the head, consumed before `src`.
    pub(super) leftover: Vec<u8>,
    pub(super) pos: usize,
    pub(super) framing: Framing,
    /// Decoded bytes not yet handed out (chunked).
    pub(super) out: Vec<u8>,
    pub(super) out_pos: usize,
}

impl<R: Read> BodyReader<R> {
    pub(super) fn new(src: R, leftover: Vec<u8>, framing: Framing) -> BodyReader<R> {
        BodyReader {
            src,
            leftover,
            pos: 0,
            framing,
            out: Vec::new(),
            out_pos: 0,
        }
    }

    /// The framing a response head announces (RFC 9112 section 6.3).
    pub(super) fn framing(method: &Method, head: &Head) -> Result<Framing, AccessError> {
        if *method == Method::HEAD || head.status == 204 || head.status == 304 {
            return Ok(Framing::Done);
        }
        if let Some(te) = find_header(&head.headers, "transfer-encoding") {
            let last = te.rsplit(',').next().unwrap_or("").trim();
            return Ok(if last.eq_ignore_ascii_case("chunked") {
                Framing::Chunked(Box::new(ChunkedDecoder::new(usize::MAX, 16 * 1024)))
            } else {
                Framing::Close
            });
        }
        let lengths: Vec<&str> = head
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map(|(_, v)| v.as_str())
            .collect();
        match lengths.first() {
            None => Ok(Framing::Close),
            Some(first) => {
                let n: u64 = first
                    .parse()
                    .ok()
                    .filter(|_| lengths.iter().all(|l| l == first))
                    .ok_or_else(|| AccessError::Http {
                        message: format!("bad Content-Length {lengths:?}"),
                    })?;
                Ok(if n == 0 {
                    Framing::Done
                } else {
                    Framing::Length(n)
                })
            }
        }
    }

    /// Raw bytes: the leftover first, then the socket.
    pub(super) fn fill(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.pos < self.leftover.len() {
            let n = buf.len().min(self.leftover.len() - self.pos);
            buf[..n].copy_from_slice(&self.leftover[self.pos..self.pos + n]);
            self.pos += n;
            return Ok(n);
        }
        self.src.read(buf)
    }
}

pub(super) fn cut_short() -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the connection closed inside the body",
    )
}

impl<R: Read> Read for BodyReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.out_pos < self.out.len() {
                let n = buf.len().min(self.out.len() - self.out_pos);
                buf[..n].copy_from_slice(&self.out[self.out_pos..self.out_pos + n]);
                self.out_pos += n;
                return Ok(n);
            }
            match self.framing {
                Framing::Done => return Ok(0),
                Framing::Close => return self.fill(buf),
                Framing::Length(left) => {
                    let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
                    let n = self.fill(&mut buf[..want])?;
                    if n == 0 {
                        return Err(cut_short());
                    }
                    let left = left - n as u64;
                    self.framing = if left == 0 {
                        Framing::Done
                    } else {
                        Framing::Length(left)
                    };
                    return Ok(n);
                }
                Framing::Chunked(_) => {
                    let mut raw = [0u8; 16 * 1024];
                    let n = self.fill(&mut raw)?;
                    if n == 0 {
                        return Err(cut_short());
                    }
                    self.out.clear();
                    self.out_pos = 0;
                    let Framing::Chunked(dec) = &mut self.framing else {
                        continue;
                    };
                    dec.feed(&raw[..n], &mut self.out).map_err(|e| {
                        let m = match e {
                            HttpError::BadRequest(m) => m,
                            other => format!("{other:?}"),
                        };
                        io::Error::new(io::ErrorKind::InvalidData, format!("chunked body: {m}"))
                    })?;
                    if dec.is_done() {
                        self.framing = Framing::Done;
                    }
                }
            }
        }
    }
}
