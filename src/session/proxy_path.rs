//! The port proxy's request, checked and rebuilt before anything leaves
//! the daemon (docs/api.md "Port proxy"), sans-IO: the one parser of a
//! port from a path ([`parse_port`]), the request-target of
//! `…/v1/sessions/{id}/ports/{port}{tail}` turned into the path and query
//! sent to the app ([`parse_target`]), and the request headers that may go
//! with it ([`forward_headers`]).
//!
//! Why: through the API server's pod proxy, the tail becomes part of an
//! API URL sent with the daemon's credentials. Upstream cleans a pod proxy
//! path itself, but a path-normalising proxy in front of the API server
//! would resolve `…/proxy/../../../../api/v1/secrets` to an API call. So
//! the tail is read from the raw request-target (never the decoded path)
//! and refused when any segment, once percent-decoded, is `.` or `..`,
//! holds a `/` (an encoded slash: a documented limit), a `\` (which some
//! servers take for `/`) or a control character (C0 or DEL). What passes
//! is re-encoded canonically (RFC 3986 section 6.2.2: unreserved
//! characters decoded, escapes in upper case, reserved characters as the
//! client wrote them, anything else escaped), so what the daemon sends is
//! what it checked.

use std::fmt;

/// Why a port proxy request-target is refused (400 `INVALID_PROXY_PATH`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyPathError {
    /// Not `/v1/sessions/{id}/ports/` spelled literally (an escape in the
    /// route's own segments).
    Route,
    /// The port segment is not a canonical decimal port.
    Port(String),
    /// A `.` or `..` segment, raw or percent-encoded.
    DotSegment,
    /// `%2F` inside a segment.
    EncodedSlash,
    /// `\`, raw or `%5C`.
    Backslash,
    /// A control character (0x00-0x1F, 0x7F), raw or percent-encoded.
    ControlChar,
    /// `%` not followed by two hex digits.
    BadEscape,
}

impl fmt::Display for ProxyPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyPathError::Route => f.write_str(
                "the port proxy route must be spelled /v1/sessions/{id}/ports/{port} without escapes",
            ),
            ProxyPathError::Port(p) => write!(
                f,
                "port {p:?}: expected a decimal port 1-65535 without sign, spaces or leading zeros"
            ),
            ProxyPathError::DotSegment => {
                f.write_str("the proxied path has a \".\" or \"..\" segment (raw or percent-encoded)")
            }
            ProxyPathError::EncodedSlash => {
                f.write_str("the proxied path has an encoded slash (%2F), which is not supported")
            }
            ProxyPathError::Backslash => f.write_str("the proxied path has a backslash"),
            ProxyPathError::ControlChar => f.write_str(
                "the proxied path has a control character (raw or percent-encoded)",
            ),
            ProxyPathError::BadEscape => f.write_str("the proxied path has a malformed %-escape"),
        }
    }
}

impl std::error::Error for ProxyPathError {}

/// What the daemon sends the app: the port and the path with its query
/// (always starting with `/`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    pub port: u16,
    pub path_and_query: String,
}

/// A port written as the daemon accepts it in a path: decimal digits
/// only, no sign, no spaces, no leading zero, 1 to 65535. `08080`,
/// `+8080`, ` 8080`, `8080.0` and `0` are `None`.
pub fn parse_port(s: &str) -> Option<u16> {
    let b = s.as_bytes();
    if b.is_empty() || b.len() > 5 || b[0] == b'0' || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    s.parse::<u32>()
        .ok()
        .and_then(|n| u16::try_from(n).ok())
        .filter(|n| *n > 0)
}

/// The raw request-target of a port proxy request (origin-form, or
/// absolute-form whose path is looked at) for the session `session_id`:
/// the port and the canonical path and query to send on.
pub fn parse_target(target: &str, session_id: &str) -> Result<Upstream, ProxyPathError> {
    let origin = origin_form(target).ok_or(ProxyPathError::Route)?;
    let (path, query) = match origin.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (origin, None),
    };
    let rest = path
        .strip_prefix("/v1/sessions/")
        .and_then(|r| r.strip_prefix(session_id))
        .and_then(|r| r.strip_prefix("/ports/"))
        .ok_or(ProxyPathError::Route)?;
    let (port, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let port = parse_port(port).ok_or_else(|| ProxyPathError::Port(port.to_string()))?;
    let mut out = canonical_path(tail)?;
    if let Some(q) = query {
        out.push('?');
        out.push_str(&canonical_query(q)?);
    }
    Ok(Upstream {
        port,
        path_and_query: out,
    })
}

/// `target` from its path on: origin-form as is, absolute-form without
/// its scheme and authority. `None` for anything else.
fn origin_form(target: &str) -> Option<&str> {
    if target.starts_with('/') {
        return Some(target);
    }
    let lower = target.get(..8).unwrap_or(target).to_ascii_lowercase();
    let rest = if lower.starts_with("http://") {
        &target[7..]
    } else if lower.starts_with("https://") {
        &target[8..]
    } else {
        return None;
    };
    match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => Some(&rest[i..]),
        Some(_) => None,
        None => Some("/"),
    }
}

/// A proxied path tail (`""` or starting with `/`), checked segment by
/// segment and re-encoded; `""` is `/`.
pub fn canonical_path(tail: &str) -> Result<String, ProxyPathError> {
    let Some(segments) = tail.strip_prefix('/') else {
        return if tail.is_empty() {
            Ok("/".to_string())
        } else {
            Err(ProxyPathError::Route)
        };
    };
    let mut out = String::with_capacity(tail.len() + 8);
    for seg in segments.split('/') {
        out.push('/');
        let octets = decode(seg)?;
        let bytes: Vec<u8> = octets.iter().map(|(b, _)| *b).collect();
        if bytes == b"." || bytes == b".." {
            return Err(ProxyPathError::DotSegment);
        }
        for (b, escaped) in octets {
            match b {
                b'/' => return Err(ProxyPathError::EncodedSlash),
                b'\\' => return Err(ProxyPathError::Backslash),
                0..=0x1f | 0x7f => return Err(ProxyPathError::ControlChar),
                _ if is_unreserved(b) => out.push(char::from(b)),
                _ if is_path_reserved(b) && !escaped => out.push(char::from(b)),
                _ => push_escape(&mut out, b),
            }
        }
    }
    Ok(out)
}

/// A query passed on: escapes kept as the client wrote them (the app may
/// sign its query), characters a query may hold raw kept, anything else
/// escaped. Control characters can only come escaped (the HTTP parser
/// refuses raw ones), and stay escaped: they are data here (a form field
/// with a line break), never part of the request line.
pub fn canonical_query(q: &str) -> Result<String, ProxyPathError> {
    let b = q.as_bytes();
    let mut out = String::with_capacity(q.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                let ok =
                    b.len() > i + 2 && b[i + 1].is_ascii_hexdigit() && b[i + 2].is_ascii_hexdigit();
                if !ok {
                    return Err(ProxyPathError::BadEscape);
                }
                out.push_str(&q[i..i + 3]);
                i += 3;
            }
            c if is_unreserved(c) || is_path_reserved(c) || c == b'/' || c == b'?' => {
                out.push(char::from(c));
                i += 1;
            }
            c => {
                push_escape(&mut out, c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// A segment's octets, each with whether it was written as an escape.
fn decode(seg: &str) -> Result<Vec<(u8, bool)>, ProxyPathError> {
    let b = seg.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hi = b.get(i + 1).and_then(|c| crate::http::parse::hex_val(*c));
            let lo = b.get(i + 2).and_then(|c| crate::http::parse::hex_val(*c));
            match (hi, lo) {
                (Some(h), Some(l)) => out.push((h << 4 | l, true)),
                _ => return Err(ProxyPathError::BadEscape),
            }
            i += 3;
        } else {
            out.push((b[i], false));
            i += 1;
        }
    }
    Ok(out)
}

fn push_escape(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 15)]));
}

/// RFC 3986 unreserved: `A-Z a-z 0-9 - . _ ~`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// The reserved characters a path segment may hold raw (sub-delims, `:`
/// and `@`): kept raw when raw, escaped when escaped, since the two can
/// mean different things to the app.
fn is_path_reserved(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@'
    )
}

/// Request headers the API server, a front proxy's authenticator or the
/// kubelet interpret, besides the hop-by-hop ones: never forwarded from a
/// client. Names lower case; those ending in `-` are prefixes.
pub const INTERPRETED_HEADERS: &[&str] = &[
    // kubegate's own credential; the agent's token header.
    "authorization",
    "x-kubegate-agent-token",
    // User impersonation (Impersonate-User, -Group, -Uid, -Extra-*).
    "impersonate-",
    // The request-header authenticator's usual names (X-Remote-User,
    // -Group, -Extra-*).
    "x-remote-",
    // Proxy credentials and the like (Proxy-Authorization, …).
    "proxy-",
    // Forwarding claims: the API server records X-Forwarded-For as the
    // request's source addresses in its audit log.
    "forwarded",
    "x-forwarded-",
    "x-real-ip",
];

/// Whether `name` (any case) is one of [`INTERPRETED_HEADERS`].
pub fn is_interpreted_header(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    INTERPRETED_HEADERS.iter().any(|h| {
        if h.ends_with('-') {
            n.starts_with(h)
        } else {
            n == *h
        }
    })
}

/// The client's request headers that go on to the app: without the
/// hop-by-hop ones ([`end_to_end_headers`](crate::http::hop::end_to_end_headers)) and without
/// [`INTERPRETED_HEADERS`].
pub fn forward_headers(headers: &[(String, String)]) -> Vec<(String, String)> {
    crate::http::hop::end_to_end_headers(headers, &[])
        .into_iter()
        .filter(|(k, _)| !is_interpreted_header(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "abcdefghijkl";

    fn up(target: &str) -> Result<Upstream, ProxyPathError> {
        parse_target(target, ID)
    }

    fn path(tail: &str) -> Result<String, ProxyPathError> {
        up(&format!("/v1/sessions/{ID}/ports/8080{tail}")).map(|u| u.path_and_query)
    }

    #[test]
    fn canonical_ports_only() {
        for (s, want) in [
            ("1", Some(1)),
            ("80", Some(80)),
            ("8080", Some(8080)),
            ("65535", Some(65535)),
            ("65536", None),
            ("99999", None),
            ("100000", None),
            ("0", None),
            ("00", None),
            ("08080", None),
            ("+8080", None),
            ("-8080", None),
            (" 8080", None),
            ("8080 ", None),
            ("8080.0", None),
            ("0x1f90", None),
            ("8_080", None),
            ("", None),
            ("٨٠٨٠", None),
            ("%38080", None),
            ("18446744073709551617", None),
        ] {
            assert_eq!(parse_port(s), want, "{s:?}");
        }
    }

    #[test]
    fn the_port_comes_from_the_raw_target() {
        assert_eq!(
            up(&format!("/v1/sessions/{ID}/ports/8080/x")),
            Ok(Upstream {
                port: 8080,
                path_and_query: "/x".into()
            })
        );
        for bad in ["08080", "+8080", "%38080", "8080%20", "0", "65536", "x"] {
            assert_eq!(
                up(&format!("/v1/sessions/{ID}/ports/{bad}/x")),
                Err(ProxyPathError::Port(bad.into())),
                "{bad}"
            );
        }
        // The port segment ends at the first slash or the query.
        assert_eq!(
            up(&format!("/v1/sessions/{ID}/ports/8080?a=1")).map(|u| (u.port, u.path_and_query)),
            Ok((8080, "/?a=1".into()))
        );
        assert_eq!(
            up(&format!("/v1/sessions/{ID}/ports/8080")).map(|u| u.path_and_query),
            Ok("/".into())
        );
    }

    #[test]
    fn the_route_must_be_spelled_literally() {
        for t in [
            "/v1/sessions/%61bcdefghijkl/ports/8080/x".to_string(),
            format!("/v1/sessions/{ID}/port%73/8080/x"),
            format!("/v1/%73essions/{ID}/ports/8080/x"),
            format!("/v1/sessions/{ID}x/ports/8080/x"),
            "/v1/sessions/other/ports/8080/x".to_string(),
            format!("/v1/sessions/{ID}/ports"),
            format!("/v1/sessions/{ID}/ports%2F8080/x"),
            format!("//v1/sessions/{ID}/ports/8080/x"),
            format!("v1/sessions/{ID}/ports/8080/x"),
            "*".to_string(),
            format!("ftp://h/v1/sessions/{ID}/ports/8080/x"),
            format!("http://h?/v1/sessions/{ID}/ports/8080/x"),
        ] {
            assert_eq!(up(&t), Err(ProxyPathError::Route), "{t}");
        }
    }

    #[test]
    fn absolute_form_is_read_from_its_path() {
        for t in [
            format!("http://kubegate:7443/v1/sessions/{ID}/ports/8080/a?b=1"),
            format!("HTTPS://kubegate/v1/sessions/{ID}/ports/8080/a?b=1"),
        ] {
            assert_eq!(up(&t).map(|u| u.path_and_query), Ok("/a?b=1".into()), "{t}");
        }
        assert_eq!(
            up(&format!("http://h/v1/sessions/{ID}/ports/8080/../x")),
            Err(ProxyPathError::DotSegment)
        );
        assert_eq!(up("http://h"), Err(ProxyPathError::Route));
    }

    #[test]
    fn dot_segments_raw_or_encoded_are_refused() {
        for tail in [
            "/..",
            "/../x",
            "/a/../../../../version",
            "/a/..",
            "/.",
            "/./x",
            "/a/./b",
            "/%2e",
            "/%2E",
            "/%2e%2e",
            "/%2E%2E",
            "/%2e%2E",
            "/.%2e",
            "/%2e.",
            "/.%2E/x",
            "/x/%2e%2e/%2e%2e/version",
            "/a/b/..?x=1",
            "/../",
        ] {
            assert_eq!(path(tail), Err(ProxyPathError::DotSegment), "{tail}");
        }
    }

    #[test]
    fn dots_that_are_no_dot_segment_pass() {
        for (tail, want) in [
            ("/...", "/..."),
            ("/..a", "/..a"),
            ("/a..", "/a.."),
            ("/.well-known/x", "/.well-known/x"),
            ("/a.b/c..d/.e", "/a.b/c..d/.e"),
            ("/%2e%2e%2e", "/..."),
            ("/%2ea", "/.a"),
        ] {
            assert_eq!(path(tail).as_deref(), Ok(want), "{tail}");
        }
    }

    #[test]
    fn encoded_slashes_and_backslashes_are_refused() {
        for tail in ["/a%2Fb", "/a%2fb", "/..%2F..%2Fversion", "/%2F", "/a%2F"] {
            assert_eq!(path(tail), Err(ProxyPathError::EncodedSlash), "{tail}");
        }
        for tail in ["/a%5Cb", "/a%5cb", "/..%5C..%5Cversion", "/a\\b"] {
            assert_eq!(path(tail), Err(ProxyPathError::Backslash), "{tail}");
        }
    }

    #[test]
    fn control_characters_raw_or_encoded_are_refused() {
        for tail in [
            "/a%00",
            "/a%0D",
            "/a%0d",
            "/a%0A",
            "/a%0a",
            "/x%0D%0AHost:%20evil",
            "/a%09b",
            "/a%1B",
            "/a%1f",
            "/a%7F",
            "/a%7f",
            "/a\u{1}",
            "/a\u{7f}",
            "/a\r\nb",
            "/a\tb",
        ] {
            assert_eq!(path(tail), Err(ProxyPathError::ControlChar), "{tail:?}");
        }
    }

    #[test]
    fn malformed_escapes_are_refused() {
        for tail in ["/a%", "/a%2", "/a%zz", "/a%2g", "/%%41"] {
            assert_eq!(path(tail), Err(ProxyPathError::BadEscape), "{tail}");
        }
        assert_eq!(path("/a?b=%"), Err(ProxyPathError::BadEscape));
        assert_eq!(path("/a?b=%4"), Err(ProxyPathError::BadEscape));
        assert_eq!(path("/a?b=%g0"), Err(ProxyPathError::BadEscape));
    }

    #[test]
    fn segments_are_re_encoded_canonically() {
        for (tail, want) in [
            ("", "/"),
            ("/", "/"),
            ("/a/b/", "/a/b/"),
            ("/a//b", "/a//b"),
            // Unreserved characters decoded.
            ("/%41%7e%2D%5f%30", "/A~-_0"),
            ("/%7euser", "/~user"),
            // Escapes upper-cased.
            ("/sp%20ace", "/sp%20ace"),
            ("/caf%c3%a9", "/caf%C3%A9"),
            // Reserved characters as written.
            ("/a+b%2bc%2Bd", "/a+b%2Bc%2Bd"),
            ("/a:b@c", "/a:b@c"),
            ("/a%3Ab%40c", "/a%3Ab%40c"),
            ("/!$&'()*,;=", "/!$&'()*,;="),
            (
                "/%21%24%26%27%28%29%2A%2C%3B%3D",
                "/%21%24%26%27%28%29%2A%2C%3B%3D",
            ),
            // What a path may not hold raw, escaped.
            ("/a%3Fb", "/a%3Fb"),
            ("/a%23b", "/a%23b"),
            ("/a%25b", "/a%25b"),
            ("/a\"b<c>d", "/a%22b%3Cc%3Ed"),
            ("/a{b}|^`", "/a%7Bb%7D%7C%5E%60"),
            ("/a[b]", "/a%5Bb%5D"),
            ("/é", "/%C3%A9"),
            ("/a#b", "/a%23b"),
        ] {
            assert_eq!(path(tail).as_deref(), Ok(want), "{tail}");
        }
    }

    #[test]
    fn re_encoding_is_idempotent() {
        for tail in [
            "/%7euser/a%2eb/sp%20ace/a%2bb+c/caf%c3%a9/q%3Fmark",
            "/a\"b<c>d{e}",
            "/!$&'()*,;=:@",
        ] {
            let once = path(tail).expect("canonical");
            let twice = path(&once).expect("canonical");
            assert_eq!(once, twice, "{tail}");
        }
    }

    #[test]
    fn the_query_passes_with_its_escapes_as_written() {
        for (tail, want) in [
            ("/a?x=1&y=%20z", "/a?x=1&y=%20z"),
            ("/a?k=%0d%0a&v=a+b", "/a?k=%0d%0a&v=a+b"),
            ("/a?", "/a?"),
            ("/a?p=/b/../c?d", "/a?p=/b/../c?d"),
            ("/a?x=\"<>\\^`{|}", "/a?x=%22%3C%3E%5C%5E%60%7B%7C%7D"),
            ("/a?x=é", "/a?x=%C3%A9"),
            ("/a?x=a b", "/a?x=a%20b"),
            ("/a?x=\r\n", "/a?x=%0D%0A"),
            ("/a?x=#y", "/a?x=%23y"),
            ("?only", "/?only"),
        ] {
            assert_eq!(path(tail).as_deref(), Ok(want), "{tail:?}");
        }
    }

    #[test]
    fn the_upstream_path_always_starts_with_one_segment_of_the_tail() {
        // Whatever passes starts with `/` and holds no raw space, control
        // character, `#` or backslash: the request line cannot be split.
        let alphabet = [
            "a", "/", ".", "..", "%2e", "%2E", "%2F", "%00", "%0d", "%0A", "%5c", "%25", "%", "?",
            "#", "+", " ", "\r", "\n", "é", "%C3%A9", "~", ":", "@",
        ];
        let mut n = 0u32;
        for a in alphabet {
            for b in alphabet {
                for c in alphabet {
                    let tail = format!("/{a}{b}/{c}");
                    if let Ok(p) = path(&tail) {
                        n += 1;
                        assert!(p.starts_with('/'), "{tail:?} -> {p:?}");
                        assert!(
                            !p.bytes()
                                .any(|x| x <= b' ' || x == 0x7f || x == b'#' || x == b'\\'),
                            "{tail:?} -> {p:?}"
                        );
                        let (pp, _) = p.split_once('?').unwrap_or((&p, ""));
                        for seg in pp.split('/').skip(1) {
                            assert!(seg != "." && seg != "..", "{tail:?} -> {p:?}");
                            assert!(!seg.to_ascii_lowercase().contains("%2e%2e"), "{p:?}");
                            assert!(!seg.to_ascii_lowercase().contains("%2f"), "{p:?}");
                        }
                    }
                }
            }
        }
        assert!(n > 1000, "only {n} tails passed");
    }

    #[test]
    fn interpreted_headers_are_not_forwarded() {
        let h = |k: &str, v: &str| (k.to_string(), v.to_string());
        let headers = vec![
            h("Host", "kubegate"),
            h("Authorization", "Bearer t"),
            h("impersonate-user", "admin"),
            h("Impersonate-Group", "system:masters"),
            h("Impersonate-Uid", "1"),
            h("Impersonate-Extra-Scopes", "x"),
            h("X-Remote-User", "admin"),
            h("X-Remote-Group", "g"),
            h("X-Remote-Extra-Foo", "bar"),
            h("X-Kubegate-Agent-Token", "t"),
            h("Proxy-Authorization", "Basic x"),
            h("Proxy-Connection", "keep-alive"),
            h("Proxy-Anything", "x"),
            h("Forwarded", "for=1.2.3.4"),
            h("X-Forwarded-For", "1.2.3.4"),
            h("X-Forwarded-Proto", "https"),
            h("X-Real-IP", "1.2.3.4"),
            h("Connection", "close, X-Named"),
            h("X-Named", "hop"),
            h("Keep-Alive", "5"),
            h("TE", "trailers"),
            h("Content-Type", "text/plain"),
            h("X-Remoteness", "kept"),
            h("Impersonated", "kept"),
            h("Cookie", "a=b"),
            h("Accept", "*/*"),
        ];
        let names: Vec<String> = forward_headers(&headers)
            .into_iter()
            .map(|(k, _)| k.to_ascii_lowercase())
            .collect();
        assert_eq!(
            names,
            [
                "content-type",
                "x-remoteness",
                "impersonated",
                "cookie",
                "accept"
            ]
        );
        assert!(is_interpreted_header("IMPERSONATE-USER"));
        assert!(!is_interpreted_header("x-app"));
    }
}
