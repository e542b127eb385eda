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
    let mut body = vec![0u8; len];
    let got = read_full(r, &mut body);
    body.truncate(got);
    (head, body)
}

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> usize {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) | Err(_) => break,
            Ok(k) => n += k,
        }
    }
    n
}
