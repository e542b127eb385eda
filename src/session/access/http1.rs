//! The pod-access client's raw-socket glue around the crate's one
//! HTTP/1.1 answer reader ([`crate::http::response`]): the head read
//! under a deadline or an idle timeout, the answer's errors as
//! [`AccessError`]s, and the non-blocking body a relay's poll loop reads.

use super::api_proxy::from_read_error;
use super::*;
use crate::http::response::{self, BodyReader, Head, Limits, ResponseError};

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
        self.get_ref().0.as_fd()
    }
    fn has_buffered_input(&self) -> bool {
        self.has_buffered() || self.get_ref().0.has_buffered_input()
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
    crate::http::client::write_all(&mut sock, req.as_bytes(), deadline).map_err(RawError::Io)?;
    let mut timed = TimedClient { sock, deadline };
    let (head, rest) = read_head(&mut timed).map_err(RawError::Access)?;
    Ok((timed.sock, head, rest))
}

/// The limits pod answers are read with: lenient line ends (apps in pods
/// are not all careful), the seam's own head bound.
const LIMITS: Limits = Limits {
    max_head_bytes: MAX_HEAD_BYTES,
    strict_crlf: false,
};

/// An unreadable answer as the seam's error.
pub(super) fn http_error(e: &ResponseError) -> AccessError {
    AccessError::Http {
        message: e.to_string(),
    }
}

/// Reads a response head (skipping interim 1xx answers); returns it and
/// the bytes read past it.
pub(super) fn read_head(r: &mut dyn Read) -> Result<(Head, Vec<u8>), AccessError> {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 8 * 1024];
    loop {
        if let Some((head, n)) =
            response::parse_final_head(&buf, &LIMITS).map_err(|e| http_error(&e))?
        {
            return Ok((head, buf.split_off(n)));
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
