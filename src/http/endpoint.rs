//! A server URL as a client dials it (`http[s]://host[:port][/prefix]`):
//! split into what a socket needs (host, port, TLS or not), the `Host`
//! header, and a path prefix; and the percent-encoding of query values.
//!
//! Pure string work, no I/O, so every case is unit-tested. Percent-encoding
//! is our own: only RFC 3986 unreserved bytes pass through, so arguments
//! with spaces, `&`, `=`, `+`, `;` or non-ASCII reach the server unchanged
//! whatever decoder it uses (`+` is always sent as `%2B`, space as `%20`).

use std::fmt;

/// The parts of a server URL (`http[s]://host[:port][/prefix]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// Host to resolve, without IPv6 brackets.
    pub host: String,
    pub port: u16,
    /// `Host` header value: the authority as written (brackets kept).
    pub authority: String,
    /// Path prefix without a trailing slash (`""` for none).
    pub prefix: String,
}

/// Why a server URL cannot be dialled; each names the URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointError {
    /// Neither `https://` nor `http://`.
    Scheme { server: String },
    /// A query or a fragment.
    QueryOrFragment { server: String },
    /// `user:password@`: credentials do not belong in the URL.
    Userinfo { server: String },
    /// `[::1` without its `]`, or garbage after it.
    Bracket { server: String },
    /// A port that is not 1..=65535.
    Port { server: String, port: String },
    /// No host at all.
    NoHost { server: String },
}

impl fmt::Display for EndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointError::Scheme { server } => {
                write!(
                    f,
                    "server URL {server:?} must start with https:// or http://"
                )
            }
            EndpointError::QueryOrFragment { server } => {
                write!(f, "server URL {server:?} must not have a query or fragment")
            }
            EndpointError::Userinfo { server } => {
                write!(f, "server URL {server:?} must not carry userinfo")
            }
            EndpointError::Bracket { server } => {
                write!(f, "server URL {server:?}: unclosed IPv6 bracket")
            }
            EndpointError::Port { server, port } => {
                write!(f, "server URL {server:?}: bad port {port:?}")
            }
            EndpointError::NoHost { server } => write!(f, "server URL {server:?} has no host"),
        }
    }
}

impl std::error::Error for EndpointError {}

/// The message, for callers whose errors carry text (a usage line).
impl From<EndpointError> for String {
    fn from(e: EndpointError) -> String {
        e.to_string()
    }
}

/// Splits a server URL. Userinfo is refused (credentials do not belong in
/// the URL); a query or fragment is refused too.
pub fn parse_server(server: &str) -> Result<Endpoint, EndpointError> {
    let s = || server.to_string();
    let (tls, rest) = if let Some(r) = server.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = server.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(EndpointError::Scheme { server: s() });
    };
    if rest.contains(['?', '#']) {
        return Err(EndpointError::QueryOrFragment { server: s() });
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(EndpointError::Userinfo { server: s() });
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| EndpointError::Bracket { server: s() })?;
        let port = match after {
            "" => default_port,
            p => parse_port(p.strip_prefix(':').unwrap_or("x"), server)?,
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), parse_port(p, server)?),
            None => (authority.to_string(), default_port),
        }
    };
    if host.is_empty() {
        return Err(EndpointError::NoHost { server: s() });
    }
    Ok(Endpoint {
        tls,
        host,
        port,
        authority: authority.to_string(),
        prefix: path.trim_end_matches('/').to_string(),
    })
}

fn parse_port(p: &str, server: &str) -> Result<u16, EndpointError> {
    p.parse::<u16>()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| EndpointError::Port {
            server: server.to_string(),
            port: p.to_string(),
        })
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
pub fn pct(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(tls: bool, host: &str, port: u16, authority: &str, prefix: &str) -> Endpoint {
        Endpoint {
            tls,
            host: host.into(),
            port,
            authority: authority.into(),
            prefix: prefix.into(),
        }
    }

    #[test]
    fn server_urls() {
        assert_eq!(
            parse_server("http://127.0.0.1:8001"),
            Ok(ep(false, "127.0.0.1", 8001, "127.0.0.1:8001", ""))
        );
        assert_eq!(
            parse_server("https://api.example.com/k8s/clusters/c-1/"),
            Ok(ep(
                true,
                "api.example.com",
                443,
                "api.example.com",
                "/k8s/clusters/c-1"
            ))
        );
        assert_eq!(
            parse_server("https://[::1]:6443"),
            Ok(ep(true, "::1", 6443, "[::1]:6443", ""))
        );
        assert_eq!(
            parse_server("http://[fe80::1]"),
            Ok(ep(false, "fe80::1", 80, "[fe80::1]", ""))
        );
        for bad in [
            "ftp://x",
            "127.0.0.1:80",
            "https://",
            "https://:6443",
            "https://h:0",
            "https://h:99999",
            "https://h:x",
            "https://u:p@h",
            "https://[::1",
            "https://[::1]x",
            "https://h/?a=b",
        ] {
            assert!(parse_server(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_server("ftp://x").unwrap_err().to_string(),
            "server URL \"ftp://x\" must start with https:// or http://"
        );
    }

    #[test]
    fn percent_encoding() {
        assert_eq!(pct("abc-._~XYZ09"), "abc-._~XYZ09");
        assert_eq!(pct("a b+c&d=e;f/g"), "a%20b%2Bc%26d%3De%3Bf%2Fg");
        assert_eq!(pct("é"), "%C3%A9");
        assert_eq!(pct(""), "");
    }
}
