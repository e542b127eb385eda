//! Where an exec/attach request goes: the request path with its query
//! (`command=` repeated, `container=`, and only the true stream flags, as
//! kubectl sends them), every value percent-encoded by
//! [`crate::http::endpoint::pct`]. The server URL itself is split by
//! [`crate::http::endpoint::parse_server`].
//!
//! Pure string work, no I/O, so every case is unit-tested.

use crate::http::endpoint::pct;

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
