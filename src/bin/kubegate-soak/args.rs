//! The driver's command line (lexopt): where the daemon and the sim are,
//! how long, how many sessions and exec streams, the seed.

pub(crate) const USAGE: &str = "usage: kubegate-soak --daemon HOST:PORT [--token T (or KUBEGATE_SOAK_TOKEN)] \
(--sim URL | --real-kubeconfig FILE --proxy URL) --daemon-pid PID \
--duration DUR [--sessions N] [--execs M] [--seed S] [--project P --uid U --deployment D] [--session-namespace NS]";

use crate::SoakError;
use std::collections::BTreeMap;
use std::time::Duration;

/// The cluster under the daemon, and how its faults are injected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cluster {
    /// A `kubegate sim` (its URL): faults through `/sim/faults`.
    Sim(String),
    /// A real control plane with the sim as its node: the admin's
    /// kubeconfig, and the control URL of the loopback TCP proxy between
    /// the daemon and the API server (docs/RELIABILITY.md, "On a real
    /// control plane").
    Real {
        kubeconfig: std::path::PathBuf,
        proxy: String,
    },
}

pub(crate) struct Args {
    pub(crate) daemon: String,
    pub(crate) token: String,
    pub(crate) cluster: Cluster,
    /// Where the daemon makes session pods (`[cluster] session_namespace`).
    pub(crate) session_namespace: String,
    pub(crate) daemon_pid: u32,
    pub(crate) duration: Duration,
    pub(crate) sessions: usize,
    pub(crate) execs: usize,
    pub(crate) seed: u64,
    pub(crate) project: String,
    pub(crate) uid: String,
    pub(crate) deployment: String,
}

/// `90s`, `30m`, `1h`, `45` (seconds).
pub(crate) fn parse_duration(s: &str) -> Result<Duration, SoakError> {
    let (num, mult) = match s.as_bytes().last() {
        Some(b's') => (&s[..s.len() - 1], 1),
        Some(b'm') => (&s[..s.len() - 1], 60),
        Some(b'h') => (&s[..s.len() - 1], 3600),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| SoakError::Usage(format!("duration {s:?}: expected e.g. 90s, 30m, 1h")))?;
    if n == 0 {
        return Err(SoakError::Usage(format!("duration {s:?} must be positive")));
    }
    Ok(Duration::from_secs(n * mult))
}

/// The flags every one of which takes a value (`--flag V` or `--flag=V`).
const FLAGS: [&str; 14] = [
    "daemon",
    "token",
    "sim",
    "real-kubeconfig",
    "proxy",
    "session-namespace",
    "daemon-pid",
    "duration",
    "sessions",
    "execs",
    "seed",
    "project",
    "uid",
    "deployment",
];

fn usage(m: impl Into<String>) -> SoakError {
    SoakError::Usage(m.into())
}

impl From<lexopt::Error> for SoakError {
    fn from(e: lexopt::Error) -> SoakError {
        usage(kubegate::exit::usage_text(e))
    }
}

/// Reads the words after the program name (as OsStrings: one that is not
/// UTF-8 is a usage error in lexopt's words, not a panic).
pub(crate) fn parse_args<I>(argv: I) -> Result<Args, SoakError>
where
    I: IntoIterator,
    I::Item: Into<std::ffi::OsString>,
{
    use lexopt::prelude::*;
    let mut m: BTreeMap<&str, String> = BTreeMap::new();
    let mut p = lexopt::Parser::from_args(argv);
    while let Some(arg) = p.next()? {
        let key = match arg {
            Long(key) => key.to_string(),
            Value(v) => return Err(usage(format!("unexpected argument {v:?}"))),
            Short(c) => return Err(usage(format!("unknown flag -{c}"))),
        };
        let Some(k) = FLAGS.iter().find(|k| **k == key) else {
            return Err(usage(format!("unknown flag --{key}")));
        };
        m.insert(k, p.value()?.string()?);
    }
    let need = |k: &str| {
        m.get(k)
            .cloned()
            .ok_or_else(|| usage(format!("--{k} is required")))
    };
    let num = |k: &str, d: u64| -> Result<u64, SoakError> {
        m.get(k).map_or(Ok(d), |v| {
            v.parse()
                .map_err(|_| usage(format!("--{k} {v:?}: expected a number")))
        })
    };
    let too_large = |k: &str| usage(format!("--{k} too large"));
    Ok(Args {
        daemon: need("daemon")?,
        token: match m.get("token") {
            Some(t) => t.clone(),
            None => std::env::var("KUBEGATE_SOAK_TOKEN")
                .map_err(|_| usage("--token or KUBEGATE_SOAK_TOKEN is required"))?,
        },
        cluster: match (m.get("sim"), m.get("real-kubeconfig"), m.get("proxy")) {
            (Some(sim), None, None) => Cluster::Sim(sim.trim_end_matches('/').to_string()),
            (None, Some(k), Some(p)) => Cluster::Real {
                kubeconfig: k.into(),
                proxy: p.trim_end_matches('/').to_string(),
            },
            _ => {
                return Err(usage(
                    "give --sim URL, or --real-kubeconfig FILE with --proxy URL",
                ))
            }
        },
        session_namespace: m
            .get("session-namespace")
            .cloned()
            .unwrap_or_else(|| "default".into()),
        daemon_pid: u32::try_from(num("daemon-pid", 0)?).map_err(|_| too_large("daemon-pid"))?,
        duration: parse_duration(&need("duration")?)?,
        sessions: usize::try_from(num("sessions", 20)?).map_err(|_| too_large("sessions"))?,
        execs: usize::try_from(num("execs", 10)?).map_err(|_| too_large("execs"))?,
        seed: num("seed", 1)?,
        project: m.get("project").cloned().unwrap_or_else(|| "soak".into()),
        uid: m.get("uid").cloned().unwrap_or_else(|| "soak-uid".into()),
        deployment: m
            .get("deployment")
            .cloned()
            .unwrap_or_else(|| "soak-target".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
    }

    #[test]
    fn flags_take_values_either_way() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let a = parse_args(v(&[
            "--daemon",
            "127.0.0.1:1",
            "--token=t",
            "--sim",
            "http://127.0.0.1:2/",
            "--duration=30s",
            "--sessions",
            "5",
        ]))
        .expect("ok");
        assert_eq!((a.daemon.as_str(), a.token.as_str()), ("127.0.0.1:1", "t"));
        assert_eq!(a.cluster, Cluster::Sim("http://127.0.0.1:2".into()));
        assert_eq!(
            (a.duration, a.sessions, a.execs),
            (Duration::from_secs(30), 5, 10)
        );
        for (args, said) in [
            (&["--bogus", "x"][..], "unknown flag --bogus"),
            (&["--daemon"], "--daemon needs a value"),
            (&["x"], "unexpected argument"),
            (
                &["--token", "t", "--sim", "s", "--duration", "1s"],
                "--daemon is required",
            ),
        ] {
            let e = parse_args(v(args)).err().expect("an error");
            assert!(
                matches!(&e, SoakError::Usage(m) if m.contains(said)),
                "{args:?}: {e}"
            );
        }
    }

    #[test]
    fn a_value_that_is_not_text_is_a_usage_error() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        let argv = [OsStr::new("--daemon"), OsStr::from_bytes(b"127.0.0.1:\xff")];
        let e = parse_args(argv).err().expect("an error");
        assert!(
            matches!(&e, SoakError::Usage(m) if m.ends_with("is not UTF-8 text")),
            "{e}"
        );
    }
}
