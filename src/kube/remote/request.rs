//! Where an exec/attach request goes: the server URL split into what a
//! socket needs (host, port, TLS or not, the `Host` header, a path prefix),
//! and the request path with its query (`command=` repeated, `container=`,
//! and only the true stream flags, as kubectl sends them).
//!
//! Pure string work, no I/O, so every case is unit-tested. Percent-encoding
//! is our own: only RFC 3986 unreserved bytes pass through, so arguments
//! with spaces, `&`, `=`, `+`, `;` or non-ASCII reach the server unchanged
//! whatever decoder it uses (`+` is always sent as `%2B`, space as `%20`).

/// exec runs a new process; attach joins the container's main process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Exec,
    Attach,
}

impl Kind {
    pub fn subresource(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Attach => "attach",
        }
    }
}

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

/// Splits a Connection's server URL. Userinfo is refused (credentials do not
/// belong in the URL); a query or fragment is refused too.
pub fn parse_server(server: &str) -> Result<Endpoint, String> {
    let (tls, rest) = if let Some(r) = server.strip_prefix("https://") {
        (true, r)
    } else if let Some(r) = server.strip_prefix("http://") {
        (false, r)
    } else {
        return Err(format!(
            "server URL {server:?} must start with https:// or http://"
        ));
    };
    if rest.contains(['?', '#']) {
        return Err(format!(
            "server URL {server:?} must not have a query or fragment"
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err(format!("server URL {server:?} must not carry userinfo"));
    }
    let default_port = if tls { 443 } else { 80 };
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("server URL {server:?}: unclosed IPv6 bracket"))?;
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
        return Err(format!("server URL {server:?} has no host"));
    }
    Ok(Endpoint {
        tls,
        host,
        port,
        authority: authority.to_string(),
        prefix: path.trim_end_matches('/').to_string(),
    })
}

fn parse_port(p: &str, server: &str) -> Result<u16, String> {
    p.parse::<u16>()
        .ok()
        .filter(|&p| p != 0)
        .ok_or_else(|| format!("server URL {server:?}: bad port {p:?}"))
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

/// Which streams a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Streams {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// `{prefix}/api/v1/namespaces/{ns}/pods/{pod}/{exec|attach}?…`: every
/// command word as its own `command=`, then `container=` when given, then
/// only the flags that are true (`stdin`, `stdout`, `stderr`, `tty`). With a
/// tty, stderr is not requested: the server merges it into stdout anyway
/// and the kubelet drops the flag (kubectl `-t` sends no `stderr=true`).
pub fn path_and_query(
    prefix: &str,
    kind: Kind,
    namespace: &str,
    pod: &str,
    container: Option<&str>,
    command: &[String],
    s: Streams,
) -> String {
    let mut q: Vec<String> = Vec::new();
    if kind == Kind::Exec {
        q.extend(command.iter().map(|c| format!("command={}", pct(c))));
    }
    if let Some(c) = container.filter(|c| !c.is_empty()) {
        q.push(format!("container={}", pct(c)));
    }
    let flags = [
        ("stdin", s.stdin),
        ("stdout", s.stdout),
        ("stderr", s.stderr && !s.tty),
        ("tty", s.tty),
    ];
    q.extend(
        flags
            .iter()
            .filter(|(_, on)| *on)
            .map(|(name, _)| format!("{name}=true")),
    );
    format!(
        "{prefix}/api/v1/namespaces/{}/pods/{}/{}?{}",
        pct(namespace),
        pct(pod),
        kind.subresource(),
        q.join("&")
    )
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
    }

    #[test]
    fn percent_encoding() {
        assert_eq!(pct("abc-._~XYZ09"), "abc-._~XYZ09");
        assert_eq!(pct("a b+c&d=e;f/g"), "a%20b%2Bc%26d%3De%3Bf%2Fg");
        assert_eq!(pct("é"), "%C3%A9");
        assert_eq!(pct(""), "");
    }

    fn words(w: &[&str]) -> Vec<String> {
        w.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn exec_paths_carry_only_true_flags() {
        let s = Streams {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        assert_eq!(
            path_and_query(
                "",
                Kind::Exec,
                "default",
                "web",
                Some("main"),
                &words(&["sh", "-c", "echo a b; exit 3"]),
                s
            ),
            "/api/v1/namespaces/default/pods/web/exec?command=sh&command=-c&command=echo%20a%20b%3B%20exit%203&container=main&stdin=true&stdout=true&stderr=true"
        );
        // tty: no stderr; no container; a prefix.
        let s = Streams {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: true,
        };
        assert_eq!(
            path_and_query("/p", Kind::Exec, "ns", "x", None, &words(&["bash"]), s),
            "/p/api/v1/namespaces/ns/pods/x/exec?command=bash&stdin=true&stdout=true&tty=true"
        );
        let s = Streams {
            stdout: true,
            ..Streams::default()
        };
        assert_eq!(
            path_and_query("", Kind::Exec, "ns", "x", Some(""), &words(&["ls"]), s),
            "/api/v1/namespaces/ns/pods/x/exec?command=ls&stdout=true"
        );
    }

    #[test]
    fn attach_paths_have_no_command() {
        let s = Streams {
            stdin: true,
            stdout: true,
            ..Streams::default()
        };
        assert_eq!(
            path_and_query(
                "",
                Kind::Attach,
                "ns",
                "x",
                Some("c"),
                &words(&["ignored"]),
                s
            ),
            "/api/v1/namespaces/ns/pods/x/attach?container=c&stdin=true&stdout=true"
        );
    }
}
