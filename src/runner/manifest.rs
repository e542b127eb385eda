//! The app's ports in the workspace's `kubegate.toml`, sans-IO
//! (docs/dev.md#the-manifest): `[[app]]` tables with `name` and
//! `ports = [8080]` or `ports = [{port = 8080, protocol = "udp"}]`
//! (protocol `tcp` unless said). Parsed with the `toml` crate, as the
//! daemon's config is; only what the runner needs is read, the rest of the
//! manifest (and unknown keys) is left alone.
//!
//! [`PortsTracker`] decides when `Kernel.PortsResolved` is due: once at
//! start when the manifest declares ports for the app, then whenever the
//! declared list changes (compared as a set: order and duplicates do not
//! count). A manifest that is missing, unreadable or malformed, or that no
//! longer names the app, changes nothing: an editor's half-written save
//! must not re-route the app to nothing.
//!
//! [`parse_manifest`] reads the whole manifest, strictly, for `kubegate
//! dev` (which turns it into a start request): every key docs/dev.md#the-manifest names
//! and no other, so a typo (`port = 8080`) is an error before anything
//! starts rather than a silently missing port. Ports go through the same
//! `port` reading as [`app_ports`], so both spellings mean the same to
//! both readers.

use crate::session::spec::{Io, Port, Protocol};
use serde::Deserialize;
use std::collections::BTreeMap;
use toml::Value;

/// The manifest's file name, at the workspace root.
pub const MANIFEST: &str = "kubegate.toml";
/// A manifest larger than this is not read.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// What is wrong with a manifest; `Display` says where, for people (the
/// runner logs it and keeps the ports it had; `kubegate dev` refuses to
/// start with a `MANIFEST` error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// Not TOML, or (the strict reading) a key or a type the manifest does
    /// not have: the `toml` crate's message.
    Toml(String),
    /// TOML, but an `app` or `ports` entry is not shaped as the manifest
    /// says.
    Shape(String),
    /// The file could not be read, or is larger than
    /// [`MAX_MANIFEST_BYTES`].
    Read(String),
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ManifestError::Toml(m) | ManifestError::Shape(m) | ManifestError::Read(m) => {
                f.write_str(m)
            }
        }
    }
}

impl std::error::Error for ManifestError {}

fn shape(m: impl Into<String>) -> ManifestError {
    ManifestError::Shape(m.into())
}

/// The ports `app` declares: `Ok(None)` when no `[[app]]` table names it,
/// `Ok(Some(list))` (sorted, without duplicates; `[]` without `ports`), or
/// what is wrong.
pub fn app_ports(text: &str, app: &str) -> Result<Option<Vec<Port>>, ManifestError> {
    let doc: toml::Table =
        toml::from_str(text).map_err(|e| ManifestError::Toml(e.message().trim().to_string()))?;
    let Some(apps) = doc.get("app") else {
        return Ok(None);
    };
    let apps = apps
        .as_array()
        .ok_or_else(|| shape("`app` must be an array of tables ([[app]])"))?;
    for (i, a) in apps.iter().enumerate() {
        let t = a
            .as_table()
            .ok_or_else(|| shape(format!("app[{i}] must be a table")))?;
        if t.get("name").and_then(Value::as_str) != Some(app) {
            continue;
        }
        let mut out = Vec::new();
        if let Some(ports) = t.get("ports") {
            let list = ports
                .as_array()
                .ok_or_else(|| shape(format!("app {app:?}: `ports` must be an array")))?;
            for p in list {
                out.push(port(p).map_err(|m| shape(format!("app {app:?}: ports: {m}")))?);
            }
        }
        out.sort();
        out.dedup();
        return Ok(Some(out));
    }
    Ok(None)
}

/// One `ports` entry; the error says what is wrong with it (the callers
/// say where).
fn port(v: &Value) -> Result<Port, ManifestError> {
    let (num, proto) = match v {
        Value::Integer(n) => (*n, None),
        Value::Table(t) => {
            let n = t
                .get("port")
                .and_then(Value::as_integer)
                .ok_or_else(|| shape("an entry has no integer `port`"))?;
            (n, t.get("protocol"))
        }
        _ => {
            return Err(shape(
                "an entry is neither a port number nor a {port, protocol} table",
            ))
        }
    };
    let port = u16::try_from(num)
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| shape(format!("{num} is not a port (1-65535)")))?;
    let protocol = match proto {
        None => Protocol::Tcp,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("tcp") => Protocol::Tcp,
        Some(Value::String(s)) if s.eq_ignore_ascii_case("udp") => Protocol::Udp,
        Some(other) => {
            return Err(shape(format!(
                "protocol {other} is neither \"tcp\" nor \"udp\""
            )))
        }
    };
    Ok(Port { port, protocol })
}

/// The whole manifest, as `kubegate dev` reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Top-level `image`: the session's default image.
    pub image: Option<String>,
    /// Top-level `[env]`: the session's env (string values).
    pub env: BTreeMap<String, String>,
    pub apps: Vec<ManifestApp>,
}

/// One `[[app]]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestApp {
    pub name: String,
    pub entry: String,
    pub command: Option<Vec<String>>,
    /// Sorted, without duplicates.
    pub ports: Vec<Port>,
    pub io: Option<Io>,
    pub runner: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ManifestToml {
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    app: Vec<AppToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AppToml {
    name: String,
    entry: String,
    #[serde(default)]
    command: Option<Vec<String>>,
    #[serde(default)]
    ports: Vec<Value>,
    #[serde(default)]
    io: Option<Io>,
    #[serde(default)]
    runner: Option<bool>,
}

/// Parses the whole manifest strictly: unknown keys, wrong types and a
/// manifest without any `[[app]]` are errors (the message says where).
/// Names, paths and the rest are the start request's validation's
/// business (`session::spec`), not this parser's.
pub fn parse_manifest(text: &str) -> Result<Manifest, ManifestError> {
    let m: ManifestToml =
        toml::from_str(text).map_err(|e| ManifestError::Toml(e.to_string().trim().to_string()))?;
    if m.app.is_empty() {
        return Err(shape(
            "no [[app]] table: declare at least one app (name, entry, command)",
        ));
    }
    let mut apps = Vec::with_capacity(m.app.len());
    for (i, a) in m.app.into_iter().enumerate() {
        let mut ports = Vec::with_capacity(a.ports.len());
        for p in &a.ports {
            ports.push(port(p).map_err(|e| shape(format!("app[{i}] ({:?}): ports: {e}", a.name)))?);
        }
        ports.sort();
        ports.dedup();
        apps.push(ManifestApp {
            name: a.name,
            entry: a.entry,
            command: a.command,
            ports,
            io: a.io,
            runner: a.runner,
        });
    }
    Ok(Manifest {
        image: m.image,
        env: m.env,
        apps,
    })
}

/// The last ports announced, and when to announce again.
#[derive(Debug, Clone, Default)]
pub struct PortsTracker {
    current: Vec<Port>,
}

impl PortsTracker {
    /// The tracker from the manifest at start, and the ports to announce at
    /// once (only a non-empty declaration is announced).
    pub fn start(
        read: &Result<Option<Vec<Port>>, ManifestError>,
    ) -> (PortsTracker, Option<Vec<Port>>) {
        match read {
            Ok(Some(ports)) if !ports.is_empty() => (
                PortsTracker {
                    current: ports.clone(),
                },
                Some(ports.clone()),
            ),
            _ => (PortsTracker::default(), None),
        }
    }

    /// The manifest was read again: the new list when it differs from the
    /// last one announced (or from none at all), else None.
    pub fn update(&mut self, read: &Result<Option<Vec<Port>>, ManifestError>) -> Option<Vec<Port>> {
        match read {
            Ok(Some(ports)) if *ports != self.current => {
                self.current = ports.clone();
                Some(ports.clone())
            }
            _ => None,
        }
    }

    pub fn current(&self) -> &[Port] {
        &self.current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(p: u16) -> Port {
        Port::tcp(p)
    }

    fn udp(p: u16) -> Port {
        Port {
            port: p,
            protocol: Protocol::Udp,
        }
    }

    const MANIFEST_TEXT: &str = r#"
image = "node:22"
[env]
A = "b"

[[app]]
name = "web"
entry = "server.js"
ports = [8080, { port = 9000, protocol = "udp" }, { port = 8080 }]
unknown_key = true

[[app]]
name = "worker"
entry = "worker.js"
"#;

    #[test]
    fn reads_the_apps_ports_in_both_spellings() {
        assert_eq!(
            app_ports(MANIFEST_TEXT, "web"),
            Ok(Some(vec![tcp(8080), udp(9000)]))
        );
        assert_eq!(app_ports(MANIFEST_TEXT, "worker"), Ok(Some(vec![])));
        assert_eq!(app_ports(MANIFEST_TEXT, "other"), Ok(None));
        assert_eq!(app_ports("image = \"x\"\n", "web"), Ok(None));
        assert_eq!(app_ports("", "web"), Ok(None));
        assert_eq!(
            app_ports(
                "[[app]]\nname = \"web\"\nports = [{port = 53, protocol = \"UDP\"}]\n",
                "web"
            ),
            Ok(Some(vec![udp(53)]))
        );
    }

    #[test]
    fn malformed_declarations_are_errors() {
        for (text, needle) in [
            ("[[app]\nname=", ""),
            ("app = 3\n", "array of tables"),
            ("app = [3]\n", "must be a table"),
            (
                "[[app]]\nname = \"web\"\nports = 8080\n",
                "must be an array",
            ),
            ("[[app]]\nname = \"web\"\nports = [0]\n", "not a port"),
            ("[[app]]\nname = \"web\"\nports = [70000]\n", "not a port"),
            (
                "[[app]]\nname = \"web\"\nports = [\"80\"]\n",
                "neither a port",
            ),
            (
                "[[app]]\nname = \"web\"\nports = [{protocol = \"tcp\"}]\n",
                "no integer",
            ),
            (
                "[[app]]\nname = \"web\"\nports = [{port = 1, protocol = \"sctp\"}]\n",
                "neither",
            ),
        ] {
            let e = app_ports(text, "web").expect_err(text);
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
        }
        // Another app's mistakes are not this app's business... but a
        // broken document is.
        assert!(app_ports("[[app]]\nname = \"x\"\nports = [0]\n", "web").is_ok());
    }

    #[test]
    fn the_whole_manifest_parses_strictly() {
        let m = parse_manifest(
            r#"
image = "python:3.12"
[env]
GREETING = "hi"

[[app]]
name = "web"
entry = "web.py"
command = ["python3", "-u", "web.py"]
ports = [8080, { port = 9000, protocol = "udp" }, 8080]
io = "streams"

[[app]]
name = "worker"
entry = "worker.py"
runner = false
"#,
        )
        .expect("parses");
        assert_eq!(m.image.as_deref(), Some("python:3.12"));
        assert_eq!(m.env.get("GREETING").map(String::as_str), Some("hi"));
        assert_eq!(m.apps.len(), 2);
        let web = &m.apps[0];
        assert_eq!(web.ports, vec![tcp(8080), udp(9000)]);
        assert_eq!(web.io, Some(Io::Streams));
        assert_eq!(
            web.command.as_deref(),
            Some(&["python3".to_string(), "-u".into(), "web.py".into()][..])
        );
        let worker = &m.apps[1];
        assert_eq!(
            (worker.command.as_ref(), worker.io, worker.runner),
            (None, None, Some(false))
        );
        assert!(worker.ports.is_empty());

        for (text, needle) in [
            ("", "no [[app]]"),
            ("image = \"x\"\n", "no [[app]]"),
            ("[[app]\nname=", "TOML parse error"),
            ("[[app]]\nname = \"web\"\n", "missing field `entry`"),
            (
                "[[app]]\nname = \"web\"\nentry = \"a\"\nport = 8080\n",
                "unknown field `port`",
            ),
            (
                "colour = 1\n[[app]]\nname = \"w\"\nentry = \"a\"\n",
                "unknown field `colour`",
            ),
            (
                "[[app]]\nname = \"web\"\nentry = \"a\"\nio = \"pty\"\n",
                "unknown variant",
            ),
            (
                "[[app]]\nname = \"web\"\nentry = \"a\"\nports = [0]\n",
                "not a port",
            ),
            (
                "[[app]]\nname = \"web\"\nentry = \"a\"\ncommand = \"sh a\"\n",
                "invalid type",
            ),
            (
                "[env]\nN = 3\n[[app]]\nname = \"w\"\nentry = \"a\"\n",
                "invalid type",
            ),
        ] {
            let e = parse_manifest(text).expect_err(text);
            assert!(e.to_string().contains(needle), "{text:?}: {e}");
        }
    }

    #[test]
    fn announces_at_start_only_a_declaration() {
        let (_, first) = PortsTracker::start(&Ok(Some(vec![tcp(8080)])));
        assert_eq!(first, Some(vec![tcp(8080)]));
        for read in [
            Ok(Some(vec![])),
            Ok(None),
            Err(ManifestError::Read("bad".to_string())),
        ] {
            let (t, first) = PortsTracker::start(&read);
            assert_eq!(first, None);
            assert!(t.current().is_empty());
        }
    }

    #[test]
    fn announces_changes_only() {
        let (mut t, _) = PortsTracker::start(&Ok(Some(vec![tcp(8080)])));
        // The same set (the parser sorts and dedups): nothing.
        assert_eq!(t.update(&Ok(Some(vec![tcp(8080)]))), None);
        // Broken or missing: nothing, and the current set stays.
        assert_eq!(
            t.update(&Err(ManifestError::Toml("half-written".into()))),
            None
        );
        assert_eq!(t.update(&Ok(None)), None);
        assert_eq!(t.current(), &[tcp(8080)]);
        // A change, then the same again.
        let two = vec![tcp(8080), udp(9000)];
        assert_eq!(t.update(&Ok(Some(two.clone()))), Some(two.clone()));
        assert_eq!(t.update(&Ok(Some(two.clone()))), None);
        // Down to none is a change too.
        assert_eq!(t.update(&Ok(Some(vec![]))), Some(vec![]));
        assert_eq!(t.update(&Ok(Some(vec![]))), None);
        // From nothing declared at start, a first declaration.
        let (mut t, _) = PortsTracker::start(&Ok(None));
        assert_eq!(t.update(&Ok(Some(vec![]))), None, "none is what we had");
        assert_eq!(t.update(&Ok(Some(vec![tcp(3000)]))), Some(vec![tcp(3000)]));
    }
}
