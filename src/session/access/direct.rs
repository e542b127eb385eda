//! [`DirectAccess`] (`direct`): TCP to `podIP:port`, one connection per
//! call (`Connection: close`), the whole call bounded by its timeout.

use super::api_proxy::{read_bounded, status_error};
use super::http1::{http_error, read_head, Nb};
use super::*;
use crate::http::response::{checked_framing, BodyReader, Framing, Head};

/// TCP to `podIP:port`.
#[derive(Debug, Clone, Default)]
pub struct DirectAccess {}

impl DirectAccess {
    pub fn new() -> DirectAccess {
        DirectAccess {}
    }
}

pub(super) fn socket_addr(t: &PodTarget, port: u16) -> Result<SocketAddr, AccessError> {
    let ip: IpAddr =
        t.ip.parse()
            .map_err(|_| AccessError::Invalid(format!("pod {}: IP address {:?}", t.name, t.ip)))?;
    Ok(SocketAddr::new(ip, port))
}

pub(super) fn check_path(path: &str) -> Result<(), AccessError> {
    if !path.starts_with('/') || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(AccessError::Invalid(format!(
            "path {path:?}: expected an absolute path without spaces or control characters"
        )));
    }
    Ok(())
}

pub(super) fn check_headers(headers: &[(String, String)]) -> Result<(), AccessError> {
    for (k, v) in headers {
        let name_ok = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let value_ok = v.bytes().all(|b| b == b'\t' || (b >= b' ' && b != 0x7f));
        if !name_ok || !value_ok {
            return Err(AccessError::Invalid(format!(
                "header {k:?}: not a valid header"
            )));
        }
    }
    Ok(())
}

/// Connects within `timeout`.
pub(super) fn connect(addr: SocketAddr, timeout: Duration) -> Result<TcpStream, AccessError> {
    let timeout = timeout.max(Duration::from_millis(1));
    match TcpStream::connect_timeout(&addr, timeout) {
        Ok(s) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
        Err(e) => Err(match e.kind() {
            io::ErrorKind::ConnectionRefused => AccessError::Refused {
                message: format!("connect {addr}: connection refused"),
            },
            io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => AccessError::Timeout {
                message: format!("connect {addr}: no answer within {timeout:?}"),
            },
            _ => AccessError::Unreachable {
                message: format!("connect {addr}: {e}"),
            },
        }),
    }
}

/// A socket whose reads are bounded by a deadline (whole call) and/or an
/// idle time (each read); either may be absent.
pub(super) struct TimedSocket {
    sock: TcpStream,
    deadline: Option<Instant>,
    idle: Option<Duration>,
}

impl Read for TimedSocket {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(Instant::now()));
        if left == Some(Duration::ZERO) {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "deadline passed"));
        }
        let wait = match (left, self.idle) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self.sock.set_read_timeout(wait)?;
        match self.sock.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Err(io::Error::new(io::ErrorKind::TimedOut, "no data in time"))
            }
            r => r,
        }
    }
}

/// What [`DirectAccess::exchange`] got: the head, and what reads the body.
struct Exchanged {
    head: Head,
    sock: TimedSocket,
    rest: Vec<u8>,
    framing: Framing,
    handle: TcpStream,
}

impl Exchanged {
    /// The head, the body reader (deadline still armed) and the handle.
    fn into_body(self) -> (Head, BodyReader<TimedSocket>, TcpStream) {
        let body = BodyReader::new(self.sock, self.rest, self.framing);
        (self.head, body, self.handle)
    }
}

impl DirectAccess {
    /// Connects, writes the request, reads the head. Returns the head,
    /// the socket (deadline still armed), the bytes read past the head,
    /// the body's framing and a handle on the socket.
    fn exchange(
        &self,
        t: &PodTarget,
        port: u16,
        req: &PodRequest,
        deadline: Instant,
    ) -> Result<Exchanged, AccessError> {
        let (method, path, headers) = (&req.method, req.path.as_str(), &req.headers);
        check_path(path)?;
        check_headers(headers)?;
        let addr = socket_addr(t, port)?;
        let sock = connect(addr, deadline.saturating_duration_since(Instant::now()))?;
        let handle = sock.try_clone().map_err(|e| AccessError::Unreachable {
            message: format!("{addr}: {e}"),
        })?;
        let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
        for (k, v) in headers {
            if k.eq_ignore_ascii_case("host")
                || k.eq_ignore_ascii_case("connection")
                || k.eq_ignore_ascii_case("content-length")
                || k.eq_ignore_ascii_case("transfer-encoding")
            {
                continue;
            }
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let body = req.body.as_deref().unwrap_or_default();
        if !body.is_empty() || *method == Method::POST || *method == Method::PUT {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(AccessError::Timeout {
                message: format!("{addr}: before the request was sent"),
            });
        }
        let _ = sock.set_write_timeout(Some(left));
        let mut w = &sock;
        if let Err(e) = w.write_all(head.as_bytes()).and_then(|_| w.write_all(body)) {
            return Err(match e.kind() {
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => AccessError::Timeout {
                    message: format!("{addr}: sending the request"),
                },
                _ => AccessError::Http {
                    message: format!("{addr}: sending the request: {e}"),
                },
            });
        }
        let mut timed = TimedSocket {
            sock,
            deadline: Some(deadline),
            idle: None,
        };
        let (head, rest) = read_head(&mut timed)?;
        let framing =
            checked_framing(&head, *method == Method::HEAD).map_err(|e| http_error(&e))?;
        Ok(Exchanged {
            head,
            sock: timed,
            rest,
            framing,
            handle,
        })
    }
}

impl PodAccess for DirectAccess {
    fn mode(&self) -> PodAccessMode {
        PodAccessMode::Direct
    }

    fn request(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PodResponse> {
        let deadline = Instant::now() + req.timeout;
        let (head, mut body, _sock) = self.exchange(t, port, req, deadline)?.into_body();
        let body = read_bounded(&mut body, req.max_response_bytes, None)?;
        Ok(PodResponse {
            status: head.code,
            headers: head.headers,
            body,
        })
    }

    fn stream(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<StreamHandle> {
        let mut s = self.open(t, port, req)?;
        if !(200..300).contains(&s.status) {
            return Err(status_error(s.status, &mut s));
        }
        Ok(s)
    }

    fn stream_polled(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PolledStream> {
        let deadline = Instant::now() + req.timeout.max(Duration::from_millis(1));
        let ex = self.exchange(t, port, req, deadline)?;
        if !(200..300).contains(&ex.head.code) {
            let (head, mut body, _) = ex.into_body();
            return Err(status_error(head.code, &mut body));
        }
        let Exchanged {
            head,
            rest,
            framing,
            handle: sock,
            ..
        } = ex;
        sock.set_nonblocking(true)
            .map_err(|e| AccessError::Unreachable {
                message: format!("configuring the socket: {e}"),
            })?;
        // Nothing of the body was read yet: what came with the head, and
        // the framing, go to the non-blocking reader.
        Ok(PolledStream {
            status: head.code,
            headers: head.headers,
            body: Box::new(BodyReader::new(Nb(sock), rest, framing)),
        })
    }

    fn open(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<StreamHandle> {
        let idle = req.idle.unwrap_or(req.timeout);
        let deadline = Instant::now() + req.timeout.max(Duration::from_millis(1));
        let mut ex = self.exchange(t, port, req, deadline)?;
        ex.sock.deadline = None;
        ex.sock.idle = Some(idle.max(Duration::from_millis(1)));
        let (head, body, sock) = ex.into_body();
        Ok(StreamHandle {
            status: head.code,
            headers: head.headers,
            body: Box::new(body),
            canceller: StreamCanceller(Arc::new(move || {
                let _ = sock.shutdown(Shutdown::Both);
            })),
        })
    }

    fn websocket(&self, t: &PodTarget, port: u16, req: &PodRequest) -> Result<PodWebSocket> {
        check_path(&req.path)?;
        check_headers(&req.headers)?;
        let deadline = Instant::now() + req.timeout.max(Duration::from_millis(1));
        let addr = socket_addr(t, port)?;
        let tcp = connect(addr, req.timeout)?;
        let (offer, headers) = websocket_headers(req);
        let sock = ClientSocket::Socket(crate::http::Socket::Plain(tcp));
        let url = format!("ws://{addr}{}", req.path);
        let left = deadline.saturating_duration_since(Instant::now());
        let (ws, protocol) =
            crate::kube::remote::upgrade_on(sock, &url, &headers, None, offer, left)
                .map_err(from_remote)?;
        Ok(PodWebSocket { ws, protocol })
    }

    fn with_client(&self, _client: &Client) -> Arc<dyn PodAccess> {
        Arc::new(DirectAccess::new())
    }

    fn tunnel(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<Duplex> {
        let addr = socket_addr(t, port)?;
        let sock = connect(addr, timeout)?;
        Duplex::tcp(sock).map_err(|e| AccessError::Unreachable {
            message: format!("{addr}: {e}"),
        })
    }

    fn probe_tcp(&self, t: &PodTarget, port: u16, timeout: Duration) -> Result<bool> {
        let addr = socket_addr(t, port)?;
        match connect(addr, timeout) {
            Ok(s) => {
                let _ = s.shutdown(Shutdown::Both);
                Ok(true)
            }
            Err(AccessError::Refused { .. })
            | Err(AccessError::Timeout { .. })
            | Err(AccessError::Unreachable { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
