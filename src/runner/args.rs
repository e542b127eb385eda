//! `kubegate app-runner` argument parsing, pure: the environment comes in as
//! a function (docs/runner.md, "Command line"). Options are read with
//! lexopt (`--flag V` or `--flag=V`); flags win over the environment.

use super::error::RunnerError;
use super::watch::WatchMode;
use crate::exit::Parsed;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

pub const SYNOPSIS: &str =
    "usage: kubegate app-runner [--root DIR] [--inspect-addr HOST:PORT] [--app NAME]
                           [--debounce-ms N] [--grace-ms N] [--watch auto|inotify|poll]
                           [--poll-ms N] -- CMD [ARGS...]
       (kubegate app-runner --help for more)";

pub const HELP: &str = "usage: kubegate app-runner [options] -- CMD [ARGS...]

Runs CMD in the workspace and restarts it when workspace files change;
serves a debug event stream (server-sent events) on GET /events.

options:
      --root DIR            the workspace, CMD's working folder (env
                            KUBEGATE_WORKSPACE; default: the current folder)
      --inspect-addr H:P    serve the debug stream there (env
                            KUBEGATE_INSPECT_ADDR; default: no stream)
      --app NAME            the app's name in kubegate.toml, whose ports are
                            announced (env KUBEGATE_APP)
      --debounce-ms N       quiet time after the last change before a
                            restart (env KUBEGATE_RUNNER_DEBOUNCE_MS; 100)
      --grace-ms N          SIGTERM to SIGKILL (env KUBEGATE_RUNNER_GRACE_MS; 2000)
      --watch MODE          auto (inotify, polling when it fails), inotify
                            or poll (env KUBEGATE_RUNNER_WATCH; auto)
      --poll-ms N           polling interval (env KUBEGATE_RUNNER_POLL_MS; 250)
  -h, --help                this help

Changes under .git, node_modules, runtime cache folders and paths matching
.kubegateignore do not restart CMD. SIGTERM, SIGINT and SIGHUP go to CMD's
process group; the runner exits with CMD's status (128+N for signal N).
Exit 2 for usage and configuration errors (`kubegate: CODE: message`).
";

pub const ENV_ROOT: &str = "KUBEGATE_WORKSPACE";
pub const ENV_INSPECT: &str = "KUBEGATE_INSPECT_ADDR";
pub const ENV_APP: &str = "KUBEGATE_APP";
pub const ENV_DEBOUNCE: &str = "KUBEGATE_RUNNER_DEBOUNCE_MS";
pub const ENV_GRACE: &str = "KUBEGATE_RUNNER_GRACE_MS";
pub const ENV_WATCH: &str = "KUBEGATE_RUNNER_WATCH";
pub const ENV_POLL: &str = "KUBEGATE_RUNNER_POLL_MS";

pub const DEFAULT_DEBOUNCE: Duration = Duration::from_millis(100);
pub const DEFAULT_GRACE: Duration = Duration::from_millis(2000);
pub const DEFAULT_POLL: Duration = Duration::from_millis(250);
/// Upper bound of every millisecond setting (one hour).
const MAX_MS: u64 = 3_600_000;

/// Where the debug stream listens: an IP address, or a name resolved at
/// start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InspectAddr {
    Ip(SocketAddr),
    Name(String, u16),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerArgs {
    pub command: Vec<String>,
    /// None: the current folder.
    pub root: Option<PathBuf>,
    pub inspect: Option<InspectAddr>,
    pub app: Option<String>,
    pub debounce: Duration,
    pub grace: Duration,
    pub watch: WatchMode,
    pub poll: Duration,
}

fn usage(m: impl Into<String>) -> RunnerError {
    RunnerError::usage(m)
}

/// An inspect address that is not `HOST:PORT` (the text as given).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotHostPort(pub String);

impl std::fmt::Display for NotHostPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?} is not HOST:PORT", self.0)
    }
}

impl std::error::Error for NotHostPort {}

/// `HOST:PORT`, `[V6]:PORT`, or a bare IPv6 address with its port after
/// the last colon (what `$(POD_IP):9230` gives on an IPv6 pod network).
pub fn parse_inspect_addr(s: &str) -> Result<InspectAddr, NotHostPort> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(InspectAddr::Ip(a));
    }
    let bad = || NotHostPort(s.to_string());
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(InspectAddr::Ip(SocketAddr::new(ip, port)));
    }
    let name_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if !name_ok {
        return Err(bad());
    }
    Ok(InspectAddr::Name(host.to_string(), port))
}

fn millis(what: &str, v: &str, min: u64) -> Result<Duration, RunnerError> {
    match v.trim().parse::<u64>() {
        Ok(n) if (min..=MAX_MS).contains(&n) => Ok(Duration::from_millis(n)),
        _ => Err(usage(format!(
            "{what} {v:?}: expected milliseconds from {min} to {MAX_MS}"
        ))),
    }
}

/// Parses `argv` (after `app-runner`); `env` reads the environment.
pub fn parse(
    argv: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Parsed<RunnerArgs>, RunnerError> {
    use lexopt::prelude::*;
    let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
    let mut root = env(ENV_ROOT);
    let mut inspect = env(ENV_INSPECT);
    let mut app = env(ENV_APP);
    let mut debounce = env(ENV_DEBOUNCE).map(|v| (ENV_DEBOUNCE, v));
    let mut grace = env(ENV_GRACE).map(|v| (ENV_GRACE, v));
    let mut watch = env(ENV_WATCH).map(|v| (ENV_WATCH, v));
    let mut poll = env(ENV_POLL).map(|v| (ENV_POLL, v));
    let mut command = Vec::new();
    let mut p = lexopt::Parser::from_args(argv);
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Parsed::Help),
            Long("root") => root = Some(p.value()?.string()?),
            Long("inspect-addr") => inspect = Some(p.value()?.string()?),
            Long("app") => app = Some(p.value()?.string()?),
            Long("debounce-ms") => debounce = Some(("--debounce-ms", p.value()?.string()?)),
            Long("grace-ms") => grace = Some(("--grace-ms", p.value()?.string()?)),
            Long("watch") => watch = Some(("--watch", p.value()?.string()?)),
            Long("poll-ms") => poll = Some(("--poll-ms", p.value()?.string()?)),
            // The command starts at the first word that is not an option
            // (as with `env`) or after `--`, and takes the rest untouched.
            Value(first) => {
                command.push(first.string()?);
                for rest in p.raw_args()? {
                    command.push(rest.string()?);
                }
                break;
            }
            other => return Err(other.unexpected().into()),
        }
    }
    if command.is_empty() {
        return Err(usage(
            "missing command: kubegate app-runner [options] -- CMD [ARGS...]",
        ));
    }
    if command[0].is_empty() {
        return Err(usage("the command must not be empty"));
    }
    let root = match root {
        Some(r) if r.is_empty() => return Err(usage("--root must not be empty")),
        r => r.map(PathBuf::from),
    };
    let inspect = match inspect {
        None => None,
        Some(s) => {
            Some(parse_inspect_addr(s.trim()).map_err(|m| usage(format!("inspect address: {m}")))?)
        }
    };
    let watch = match watch {
        None => WatchMode::Auto,
        Some((what, v)) => WatchMode::parse(v.trim())
            .ok_or_else(|| usage(format!("{what} {v:?}: expected auto, inotify or poll")))?,
    };
    Ok(Parsed::Run(RunnerArgs {
        command,
        root,
        inspect,
        app: app.filter(|a| !a.is_empty()),
        debounce: match debounce {
            Some((w, v)) => millis(w, &v, 0)?,
            None => DEFAULT_DEBOUNCE,
        },
        grace: match grace {
            Some((w, v)) => millis(w, &v, 0)?,
            None => DEFAULT_GRACE,
        },
        watch,
        poll: match poll {
            Some((w, v)) => millis(w, &v, 10)?,
            None => DEFAULT_POLL,
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn args(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(v: &[&str], env: &[(&str, &str)]) -> Result<RunnerArgs, RunnerError> {
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        match parse(&args(v), &|k| env.get(k).cloned())? {
            Parsed::Run(a) => Ok(a),
            Parsed::Help => panic!("help"),
        }
    }

    #[test]
    fn defaults_and_the_command() {
        let a = run(&["--", "node", "--inspect", "app.js"], &[]).expect("ok");
        assert_eq!(a.command, args(&["node", "--inspect", "app.js"]));
        assert_eq!(a.root, None);
        assert_eq!(a.inspect, None);
        assert_eq!(a.app, None);
        assert_eq!(a.debounce, DEFAULT_DEBOUNCE);
        assert_eq!(a.grace, DEFAULT_GRACE);
        assert_eq!(a.watch, WatchMode::Auto);
        assert_eq!(a.poll, DEFAULT_POLL);
        // Without `--`, the first non-option starts the command.
        let a = run(&["--app", "web", "python3", "-u", "x.py"], &[]).expect("ok");
        assert_eq!(a.command, args(&["python3", "-u", "x.py"]));
        assert_eq!(a.app.as_deref(), Some("web"));
    }

    #[test]
    fn the_pod_environment() {
        let env = [
            (ENV_ROOT, "/workspace"),
            (ENV_INSPECT, "10.1.2.3:9230"),
            (ENV_APP, "web"),
            (ENV_DEBOUNCE, "50"),
            (ENV_GRACE, "500"),
            (ENV_WATCH, "poll"),
            (ENV_POLL, "100"),
        ];
        let a = run(&["--", "sh"], &env).expect("ok");
        assert_eq!(a.root, Some(PathBuf::from("/workspace")));
        assert_eq!(
            a.inspect,
            Some(InspectAddr::Ip("10.1.2.3:9230".parse().expect("addr")))
        );
        assert_eq!(a.app.as_deref(), Some("web"));
        assert_eq!(a.debounce, Duration::from_millis(50));
        assert_eq!(a.grace, Duration::from_millis(500));
        assert_eq!(a.watch, WatchMode::Poll);
        assert_eq!(a.poll, Duration::from_millis(100));
        // Flags win over the environment; `--flag=value` works.
        let a = run(
            &[
                "--root=/w",
                "--inspect-addr",
                "127.0.0.1:1",
                "--grace-ms=0",
                "--",
                "sh",
            ],
            &env,
        )
        .expect("ok");
        assert_eq!(a.root, Some(PathBuf::from("/w")));
        assert_eq!(a.grace, Duration::ZERO);
        // Blank variables are unset.
        let a = run(&["--", "sh"], &[(ENV_INSPECT, " "), (ENV_APP, "")]).expect("ok");
        assert_eq!((a.inspect, a.app), (None, None));
    }

    #[test]
    fn inspect_addresses() {
        let ip = |s: &str| InspectAddr::Ip(s.parse().expect("addr"));
        assert_eq!(parse_inspect_addr("127.0.0.1:0"), Ok(ip("127.0.0.1:0")));
        assert_eq!(
            parse_inspect_addr("[fd00::1]:9230"),
            Ok(ip("[fd00::1]:9230"))
        );
        assert_eq!(parse_inspect_addr("fd00::1:9230"), Ok(ip("[fd00::1]:9230")));
        assert_eq!(
            parse_inspect_addr("localhost:9230"),
            Ok(InspectAddr::Name("localhost".into(), 9230))
        );
        for bad in ["", "9230", "host:", "host:70000", ":80", "a b:80", "x:y"] {
            assert!(parse_inspect_addr(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn usage_errors() {
        for (v, env, needle) in [
            (&["--app", "x"][..], &[][..], "missing command"),
            (&["--"][..], &[][..], "missing command"),
            (&["--", ""][..], &[][..], "must not be empty"),
            (&["--bogus", "--", "sh"][..], &[][..], "unknown option"),
            (&["--root"][..], &[][..], "needs a value"),
            (
                &["--inspect-addr", "nope", "--", "sh"][..],
                &[][..],
                "inspect address",
            ),
            (
                &["--", "sh"][..],
                &[(ENV_INSPECT, "1.2.3.4")][..],
                "inspect address",
            ),
            (
                &["--debounce-ms", "-1", "--", "sh"][..],
                &[][..],
                "milliseconds",
            ),
            (&["--poll-ms", "1", "--", "sh"][..], &[][..], "milliseconds"),
            (&["--", "sh"][..], &[(ENV_GRACE, "soon")][..], ENV_GRACE),
            (
                &["--watch", "fsevents", "--", "sh"][..],
                &[][..],
                "auto, inotify or poll",
            ),
            (&["--root=", "--", "sh"][..], &[][..], "must not be empty"),
        ] {
            let e = run(v, env).expect_err(&format!("{v:?}"));
            assert!(e.is_usage(), "{v:?}: {e}");
            assert!(e.message.contains(needle), "{v:?}: {e}");
        }
        assert!(matches!(
            parse(&args(&["--help"]), &|_| None),
            Ok(Parsed::Help)
        ));
    }
}
