//! What the session tests' little HTTP servers share: reading a request.

use std::io::{BufRead, Read};

/// Reads one request's head and its `Content-Length` body from `r`; the
/// head as received (up to and with its empty line) and the body. A
/// connection that ends early gives what arrived.
pub fn read_request(r: &mut impl BufRead) -> (String, Vec<u8>) {
    let mut head = String::new();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
        head.push_str(&line);
        if line == "\r\n" {
            break;
        }
    }
    let mut body = Vec::with_capacity(len);
    let _ = r.take(len as u64).read_to_end(&mut body);
    (head, body)
}
