//! The daemon's configuration file (`kubegate serve --config F`,
//! `kubegate check-config --config F`): TOML, snake_case keys, `_secs`
//! durations, `_bytes` sizes; relative paths resolve against the config
//! file's folder (contract.md).
//!
//! Loading is two steps: serde with `deny_unknown_fields` (so a misspelt key
//! is an error, never ignored), then [`Config::validate`]-style checks that
//! serde cannot express. Every error names the key at fault
//! ([`ConfigError::key`]), e.g. `server.listen` or `principal[0].workspaces[1]`,
//! and never echoes a secret. `config.example.toml` documents every key with
//! its default.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use crate::kube::labels::DEFAULT_WORKSPACE_UID_LABEL;
use crate::kube::labels::MANAGED_BY_LABEL;
use crate::kube::names::{
    check_dns_label, check_dns_subdomain, check_label_key, check_label_value,
};

/// Default front-door address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7443";
/// Default state directory (the example config points at `./state`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/kubegate";
/// Default managed-by label value (exec.md).
pub const DEFAULT_MANAGED_BY: &str = "kubegate";
/// Default namespace of session pods.
pub const DEFAULT_SESSION_NAMESPACE: &str = "default";
/// Default image of the workspace container (and of the init container that
/// carries the binary into app containers): this release of kubegate.
pub const DEFAULT_WORKSPACE_IMAGE: &str =
    concat!("ghcr.io/kubegate/kubegate:", env!("CARGO_PKG_VERSION"));
/// Default image of an app container when neither the app nor the session
/// names one.
pub const DEFAULT_APP_IMAGE: &str = "docker.io/library/busybox:1.37";
/// SHA-256 hex digest of `kubegate-demo-token`, the demo principal's token
/// published in `config.example.toml` and the README: anyone who read them
/// holds it. [`Config::parse`] refuses it outside sim mode, on a front door
/// that is not loopback, or beside another principal; the daemon warns at
/// every start while it is configured (docs/deploy.md, "Principals").
pub const DEMO_TOKEN_SHA256: &str =
    "d53fa4ceb5e3b6f776103045182f6b4fbdfdea415d83039a16017381c567f997";
/// Default command of an app container when the app names none: runs the
/// entry file with `sh`. `$(KUBEGATE_ENTRY)` is expanded by Kubernetes from
/// the container's env (the entry's absolute path).
pub const DEFAULT_APP_COMMAND: [&str; 2] = ["sh", "$(KUBEGATE_ENTRY)"];

/// A configuration problem: the file, the key at fault and what is wrong.
/// Displayed as `FILE: KEY: what is wrong` (contract.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub file: PathBuf,
    /// Dotted key path (`server.listen`, `principal[0].name`); empty when the
    /// problem is the file itself (unreadable, not TOML).
    pub key: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.file.display(), self.message)
        } else {
            write!(f, "{}: {}: {}", self.file.display(), self.key, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

/// How the daemon reaches a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ClusterMode {
    /// The embedded simulated cluster, started in-process.
    Sim,
    /// A kubeconfig file (`cluster.kubeconfig`, else `KUBECONFIG`/`~/.kube/config`).
    Kubeconfig,
    /// The pod's service account.
    InCluster,
}

/// How the daemon opens connections to a session pod (sessions.md,
/// "Reaching the pod").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PodAccess {
    /// Through the API server's pod proxy (works from outside the pod network).
    ApiProxy,
    /// TCP to `podIP:port` (the daemon runs inside the pod network).
    Direct,
}

/// The whole validated configuration; every path is absolute (resolved
/// against the config file's folder).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub server: ServerSection,
    pub cluster: ClusterSection,
    #[serde(default)]
    pub exec: ExecSection,
    #[serde(default)]
    pub sessions: SessionsSection,
    #[serde(default, rename = "principal")]
    pub principals: Vec<Principal>,
}

/// `[server]`: the front door.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSection {
    /// `IP:PORT` (port 0 picks a free one).
    pub listen: String,
    /// PEM certificate chain; with `tls_key` the front door serves HTTPS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub max_connections: u64,
    pub keep_alive_idle_secs: u64,
    pub request_read_timeout_secs: u64,
    pub shutdown_grace_secs: u64,
    pub state_dir: PathBuf,
    /// Largest request head (request line + headers).
    pub max_header_bytes: u64,
    /// Largest request body.
    pub max_body_bytes: u64,
    /// Connections from one address that have not authenticated yet.
    pub max_connections_per_peer: u64,
    /// Keep-alive connections one principal holds open.
    pub max_connections_per_principal: u64,
    /// Session io WebSockets one principal holds (0: derived).
    pub max_io_sockets_per_principal: u64,
    /// Session event streams one principal holds (0: derived).
    pub max_event_streams_per_principal: u64,
    /// Port-proxy requests in flight for one principal (WebSockets and
    /// streamed answers included; 0: derived).
    pub max_port_streams_per_principal: u64,
    /// Body bytes the daemon holds at once (0: derived).
    pub body_budget_bytes: u64,
    /// The most of `body_budget_bytes` one principal holds (0: derived).
    pub body_budget_per_principal_bytes: u64,
    /// TLS handshake and first head bytes of a new connection.
    pub head_grace_secs: u64,
    /// The rate a head must keep up past `head_grace_secs`.
    pub min_head_bytes_per_sec: u64,
}

impl Default for ServerSection {
    fn default() -> Self {
        ServerSection {
            listen: DEFAULT_LISTEN.into(),
            tls_cert: None,
            tls_key: None,
            max_connections: 1024,
            keep_alive_idle_secs: 90,
            request_read_timeout_secs: 30,
            shutdown_grace_secs: 10,
            state_dir: PathBuf::from(DEFAULT_STATE_DIR),
            max_header_bytes: 64 * 1024,
            max_body_bytes: 1 << 20,
            max_connections_per_peer: 64,
            max_connections_per_principal: 64,
            max_io_sockets_per_principal: 0,
            max_event_streams_per_principal: 0,
            max_port_streams_per_principal: 0,
            body_budget_bytes: 0,
            body_budget_per_principal_bytes: 0,
            head_grace_secs: 5,
            min_head_bytes_per_sec: 1024,
        }
    }
}

impl ServerSection {
    /// The parsed listen address (checked at load).
    pub fn listen_addr(&self) -> SocketAddr {
        self.listen.parse().expect("validated at load")
    }
}

/// `[cluster]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterSection {
    pub mode: ClusterMode,
    /// Only with `mode = "kubeconfig"`.
    #[serde(default)]
    pub kubeconfig: Option<PathBuf>,
    /// Only with `mode = "kubeconfig"`.
    #[serde(default)]
    pub context: Option<String>,
    /// Value of the `app.kubernetes.io/managed-by` label.
    #[serde(default = "default_managed_by")]
    pub managed_by: String,
    /// As written; [`ClusterSection::pod_access`] resolves the default
    /// (api-proxy, or direct in-cluster).
    #[serde(default)]
    pub pod_access: Option<PodAccess>,
    /// Namespace of session pods, Services and Ingresses.
    #[serde(default = "default_session_namespace")]
    pub session_namespace: String,
    /// Image of the workspace container and of the binary-carrying init
    /// container.
    #[serde(default = "default_workspace_image")]
    pub workspace_image: String,
    /// Image of an app container when neither app nor session names one.
    #[serde(default = "default_app_image")]
    pub default_app_image: String,
    /// Argv of an app container whose app names no command.
    #[serde(default = "default_app_command")]
    pub default_app_command: Vec<String>,
    /// Session endpoints get `<port>-<sessionId>.<domain>` and an Ingress;
    /// without it, Service only (endpoints have no host).
    #[serde(default)]
    pub ingress_base_domain: Option<String>,
    /// `spec.ingressClassName` of session Ingresses (needs a base domain).
    #[serde(default)]
    pub ingress_class: Option<String>,
    /// TLS Secret of session Ingresses (needs a base domain).
    #[serde(default)]
    pub ingress_tls_secret: Option<String>,
    /// Per-container ceilings (Kubernetes quantities); requests = limits.
    #[serde(default = "default_max_cpu")]
    pub max_cpu: String,
    #[serde(default = "default_max_memory")]
    pub max_memory: String,
    #[serde(default = "default_max_ephemeral_storage")]
    pub max_ephemeral_storage: String,
    #[serde(default)]
    pub sim: SimSection,
}

impl ClusterSection {
    /// `pod_access`, or its default: `direct` in-cluster, `api-proxy`
    /// otherwise (sim and kubeconfig: the daemon is outside the pod network).
    pub fn pod_access(&self) -> PodAccess {
        self.pod_access.unwrap_or(match self.mode {
            ClusterMode::InCluster => PodAccess::Direct,
            ClusterMode::Sim | ClusterMode::Kubeconfig => PodAccess::ApiProxy,
        })
    }
}

fn default_managed_by() -> String {
    DEFAULT_MANAGED_BY.into()
}
fn default_session_namespace() -> String {
    DEFAULT_SESSION_NAMESPACE.into()
}
fn default_workspace_image() -> String {
    DEFAULT_WORKSPACE_IMAGE.into()
}
fn default_app_image() -> String {
    DEFAULT_APP_IMAGE.into()
}
fn default_app_command() -> Vec<String> {
    DEFAULT_APP_COMMAND.iter().map(|s| s.to_string()).collect()
}
fn default_max_cpu() -> String {
    "1".into()
}
fn default_max_memory() -> String {
    "1Gi".into()
}
fn default_max_ephemeral_storage() -> String {
    "2Gi".into()
}

/// `[sessions]`: limits and timings of watch sessions (sessions.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsSection {
    /// Sessions that hold resources (starting, running, suspended) overall.
    pub max_sessions: u64,
    pub max_sessions_per_principal: u64,
    /// No subscriber for this long: checkpoint and suspend.
    pub idle_secs: u64,
    /// A session's whole life (its pods' `activeDeadlineSeconds`).
    pub max_life_secs: u64,
    /// A suspended session is forgotten after this long.
    pub suspended_ttl_secs: u64,
    /// Checkpoint period while running.
    pub checkpoint_interval_secs: u64,
    /// `POST …/reload` per session per minute.
    pub reloads_per_minute: u64,
    /// Bundle limits: all files, one file (decoded), file count.
    pub max_bundle_bytes: u64,
    pub max_file_bytes: u64,
    pub max_files: u64,
    /// Output replay ring per app.
    pub io_ring_bytes: u64,
    /// Events kept per session for `Last-Event-ID` replay.
    pub sse_history_events: u64,
    /// A watch pod no session record knows is reaped after this long.
    pub orphan_grace_secs: u64,
    /// Pod created -> Running with a podIP.
    pub start_deadline_secs: u64,
    /// Pod running -> workspace agent answering.
    pub agent_deadline_secs: u64,
    /// Run apps (those whose `runner` is not false) under `kubegate
    /// app-runner`, brought into the pod by the `install-kubegate` init
    /// container. False: every app runs its command directly.
    pub app_runner: bool,
}

impl Default for SessionsSection {
    fn default() -> Self {
        SessionsSection {
            max_sessions: 64,
            max_sessions_per_principal: 8,
            idle_secs: 300,
            max_life_secs: 6 * 3600,
            suspended_ttl_secs: 24 * 3600,
            checkpoint_interval_secs: 30,
            reloads_per_minute: 30,
            max_bundle_bytes: 64 << 20,
            max_file_bytes: 8 << 20,
            max_files: 10_000,
            io_ring_bytes: 1 << 20,
            sse_history_events: 1000,
            orphan_grace_secs: 600,
            start_deadline_secs: 180,
            agent_deadline_secs: 120,
            app_runner: true,
        }
    }
}

/// `[cluster.sim]`: the embedded sim (only read with `mode = "sim"`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SimSection {
    /// Extra namespaces created at start (besides `default` and `demo`).
    pub namespaces: Vec<String>,
    /// Shell globs: matching images stay in ErrImagePull.
    pub fail_images: Vec<String>,
    /// The embedded sim's request log (`kubegate sim --request-log`, one
    /// JSON line per API request, docs/sim.md); off by default. Tests read
    /// it to see what the daemon sent the cluster.
    pub request_log: Option<PathBuf>,
    /// Host ids for pods, `FIRST-LAST`, or `off` (docs/sim.md, "Pod
    /// users"); unset: 200000-265535. Used when the daemon can switch users.
    pub uid_range: Option<String>,
    /// Where the sim's pods' folders live; unset: beside the state
    /// directory, `<state_dir>-pods` (pods must reach their folders, and
    /// the state directory is the daemon's alone).
    pub pods_dir: Option<PathBuf>,
}

impl SimSection {
    /// The configured id range; `None` for `off`. Validated at load.
    pub fn uid_range(&self) -> Option<(u32, u32)> {
        match self.uid_range.as_deref() {
            None => Some(crate::sim::pod_users::DEFAULT_UID_RANGE),
            Some("off") => None,
            Some(r) => crate::sim::pod_users::parse_range(r).ok(),
        }
    }
}

/// `[exec]`: the limits of exec.md, the workspace-uid label, the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ExecSection {
    pub max_command_args: u64,
    pub max_arg_bytes: u64,
    pub max_command_bytes: u64,
    /// Output cap per stream when the request names none.
    pub default_output_bytes: u64,
    /// Largest output cap a request may ask for.
    pub max_output_bytes: u64,
    pub max_stdin_frame_bytes: u64,
    /// Interactive output channel capacity, in frames.
    pub output_channel_frames: u64,
    pub workspace_uid_label: String,
    /// One JSON line per exec; none when absent.
    pub audit_log: Option<PathBuf>,
    /// The audit log rotates itself to `FILE.1` before it grows past this.
    pub audit_max_bytes: u64,
    /// An interactive exec with no frame either way for this long is ended.
    pub idle_timeout_secs: u64,
    /// An interactive exec is ended after this long, busy or not.
    pub max_duration_secs: u64,
    /// A WebSocket ping after this long without sending anything.
    pub ping_interval_secs: u64,
    /// Concurrent execs (one-shot and interactive) overall.
    pub max_sessions: u64,
    /// Concurrent execs per principal.
    pub max_sessions_per_principal: u64,
    /// Record every interactive exec's output here (asciinema v2); none
    /// when absent.
    pub recording_dir: Option<PathBuf>,
    /// A recording ends (never the exec) before its file grows past this.
    pub recording_max_bytes: u64,
    /// No recording starts, and a running one stops, while the recording
    /// folder's file system has less free space than this (0: no floor).
    pub recording_min_free_bytes: u64,
}

impl Default for ExecSection {
    fn default() -> Self {
        ExecSection {
            max_command_args: 64,
            max_arg_bytes: 8 * 1024,
            max_command_bytes: 32 * 1024,
            default_output_bytes: 1 << 20,
            max_output_bytes: 1 << 20,
            max_stdin_frame_bytes: 64 * 1024,
            output_channel_frames: 128,
            workspace_uid_label: DEFAULT_WORKSPACE_UID_LABEL.into(),
            audit_log: None,
            idle_timeout_secs: 900,
            max_duration_secs: 8 * 3600,
            ping_interval_secs: 30,
            max_sessions: 256,
            max_sessions_per_principal: 16,
            recording_dir: None,
            audit_max_bytes: 256 << 20,
            recording_max_bytes: 64 << 20,
            recording_min_free_bytes: 1 << 30,
        }
    }
}

/// A workspace: `project` is the namespace, `uid` its identity (exec.md).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Workspace {
    pub project: String,
    pub uid: String,
}

impl fmt::Display for Workspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project, self.uid)
    }
}

impl Workspace {
    /// Parses `project/uid` (project: DNS label; uid: not blank, at most 256
    /// characters).
    pub fn parse(s: &str) -> Result<Workspace, String> {
        let (project, uid) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not \"project/uid\""))?;
        check_dns_label(project).map_err(|m| format!("project {project:?}: {m}"))?;
        if uid.trim().is_empty() {
            return Err(format!("{s:?}: the uid is blank"));
        }
        if uid.chars().count() > 256 {
            return Err(format!("{s:?}: the uid is longer than 256 characters"));
        }
        if uid.chars().any(char::is_control) {
            return Err(format!("{s:?}: the uid contains control characters"));
        }
        Ok(Workspace {
            project: project.into(),
            uid: uid.into(),
        })
    }
}

/// `[[principal]]`: one caller identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    /// Lower-case hex SHA-256 of the bearer token.
    pub token_sha256: String,
    pub workspaces: Vec<Workspace>,
    pub may_start_sessions: bool,
}

/// What a `[[principal]]` table may hold; `token` is accepted by serde only
/// so that a clear-text token gets a clear refusal.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrincipal {
    name: String,
    #[serde(default)]
    token_sha256: Option<String>,
    /// Never accepted: deserializing it fails, so the error points at it.
    #[serde(default, deserialize_with = "refuse_clear_token")]
    #[allow(dead_code)]
    token: Option<()>,
    #[serde(default)]
    workspaces: Vec<String>,
    #[serde(default)]
    may_start_sessions: bool,
}

fn refuse_clear_token<'de, D: serde::Deserializer<'de>>(_: D) -> Result<Option<()>, D::Error> {
    Err(serde::de::Error::custom(
        "a clear-text token is not accepted: store its SHA-256 hex digest as `token_sha256`",
    ))
}

/// Workspaces are carried as their raw strings (in `uid`) until
/// `Config::validate` parses them, where the principal's index is known;
/// only configurations from [`Config::parse`]/[`Config::load`] are valid.
impl<'de> Deserialize<'de> for Principal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = RawPrincipal::deserialize(d)?;
        // The rest is checked in `validate`, where the index is known.
        Ok(Principal {
            name: raw.name,
            token_sha256: raw.token_sha256.unwrap_or_default(),
            workspaces: raw
                .workspaces
                .into_iter()
                .map(|w| Workspace {
                    project: String::new(),
                    uid: w,
                })
                .collect(),
            may_start_sessions: raw.may_start_sessions,
        })
    }
}

impl Config {
    /// Reads, parses and validates `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_path_buf(),
            key: String::new(),
            message: format!("cannot read: {e}"),
        })?;
        let base = path
            .parent()
            .map(|p| {
                if p.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    p.to_path_buf()
                }
            })
            .unwrap_or_else(|| PathBuf::from("."));
        let base = std::path::absolute(&base).unwrap_or(base);
        Config::parse(&text, &base).map_err(|(key, message)| ConfigError {
            file: path.to_path_buf(),
            key,
            message,
        })
    }

    /// Parses and validates TOML text; relative paths resolve against `base`.
    /// Errors are `(key, message)`.
    pub fn parse(text: &str, base: &Path) -> Result<Config, (String, String)> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let key = e.span().map(|s| key_at(text, s.start)).unwrap_or_default();
            (key, e.message().trim().to_string())
        })?;
        cfg.validate(base)?;
        Ok(cfg)
    }

    fn validate(&mut self, base: &Path) -> Result<(), (String, String)> {
        let err = |k: &str, m: String| Err((k.to_string(), m));
        let resolve = |p: &mut PathBuf| {
            if p.is_relative() {
                // Drop `.` components: `./state` reads better in logs as `state`.
                *p = base.join(
                    p.components()
                        .filter(|c| *c != std::path::Component::CurDir)
                        .collect::<PathBuf>(),
                );
            }
        };
        // [server]
        let s = &mut self.server;
        if let Err(e) = s.listen.parse::<SocketAddr>() {
            return err(
                "server.listen",
                format!("{:?} is not an IP:PORT address ({e})", s.listen),
            );
        }
        match (&mut s.tls_cert, &mut s.tls_key) {
            (Some(c), Some(k)) => {
                resolve(c);
                resolve(k);
                for (key, p) in [("server.tls_cert", &*c), ("server.tls_key", &*k)] {
                    if let Err(e) = std::fs::metadata(p) {
                        return err(key, format!("cannot read {}: {e}", p.display()));
                    }
                }
            }
            (None, None) => {}
            (Some(_), None) => {
                return err("server.tls_key", "missing: tls_cert needs tls_key".into())
            }
            (None, Some(_)) => {
                return err("server.tls_cert", "missing: tls_key needs tls_cert".into())
            }
        }
        for (key, v) in [
            ("server.max_connections", s.max_connections),
            ("server.keep_alive_idle_secs", s.keep_alive_idle_secs),
            (
                "server.request_read_timeout_secs",
                s.request_read_timeout_secs,
            ),
            ("server.shutdown_grace_secs", s.shutdown_grace_secs),
            ("server.max_header_bytes", s.max_header_bytes),
            ("server.max_body_bytes", s.max_body_bytes),
            (
                "server.max_connections_per_peer",
                s.max_connections_per_peer,
            ),
            (
                "server.max_connections_per_principal",
                s.max_connections_per_principal,
            ),
            ("server.head_grace_secs", s.head_grace_secs),
            ("server.min_head_bytes_per_sec", s.min_head_bytes_per_sec),
        ] {
            positive(key, v)?;
        }
        if s.state_dir.as_os_str().is_empty() {
            return err("server.state_dir", "must not be empty".into());
        }
        resolve(&mut s.state_dir);

        // [cluster]
        let c = &mut self.cluster;
        if c.mode != ClusterMode::Kubeconfig {
            if c.kubeconfig.is_some() {
                return err(
                    "cluster.kubeconfig",
                    "only allowed with mode = \"kubeconfig\"".into(),
                );
            }
            if c.context.is_some() {
                return err(
                    "cluster.context",
                    "only allowed with mode = \"kubeconfig\"".into(),
                );
            }
        }
        if let Some(p) = &mut c.kubeconfig {
            if p.as_os_str().is_empty() {
                return err("cluster.kubeconfig", "must not be empty".into());
            }
            resolve(p);
        }
        if c.context.as_deref().is_some_and(|x| x.trim().is_empty()) {
            return err("cluster.context", "must not be empty".into());
        }
        check_label_value(&c.managed_by).or_else(|m| err("cluster.managed_by", m.into()))?;
        for (i, ns) in c.sim.namespaces.iter().enumerate() {
            check_dns_label(ns).or_else(|m| {
                err(
                    &format!("cluster.sim.namespaces[{i}]"),
                    format!("{ns:?}: {m}"),
                )
            })?;
        }
        if let Some(r) = c.sim.uid_range.as_deref() {
            if r != "off" {
                if let Err(m) = crate::sim::pod_users::parse_range(r) {
                    return err("cluster.sim.uid_range", format!("{m}, or \"off\""));
                }
            }
        }
        if let Some(p) = &mut c.sim.pods_dir {
            if p.as_os_str().is_empty() {
                return err("cluster.sim.pods_dir", "must not be empty".into());
            }
            resolve(p);
        }
        for (i, g) in c.sim.fail_images.iter().enumerate() {
            if g.trim().is_empty() {
                return err(
                    &format!("cluster.sim.fail_images[{i}]"),
                    "must not be empty".into(),
                );
            }
        }
        if let Some(p) = &mut c.sim.request_log {
            if p.as_os_str().is_empty() {
                return err("cluster.sim.request_log", "must not be empty".into());
            }
            resolve(p);
        }
        check_dns_label(&c.session_namespace).or_else(|m| {
            err(
                "cluster.session_namespace",
                format!("{:?}: {m}", c.session_namespace),
            )
        })?;
        check_image(&c.workspace_image).or_else(|m| err("cluster.workspace_image", m))?;
        check_image(&c.default_app_image).or_else(|m| err("cluster.default_app_image", m))?;
        if c.default_app_command
            .first()
            .is_none_or(|a| a.trim().is_empty())
        {
            return err(
                "cluster.default_app_command",
                "must name a program (a non-empty first element)".into(),
            );
        }
        if let Some(d) = &c.ingress_base_domain {
            check_dns_subdomain(d)
                .or_else(|m| err("cluster.ingress_base_domain", format!("{d:?}: {m}")))?;
            // `<port>-<sessionId>.<domain>` must stay a valid host name.
            if d.len() > 253 - 64 {
                return err(
                    "cluster.ingress_base_domain",
                    "longer than 189 characters: session hosts would exceed 253".into(),
                );
            }
        }
        for (key, v) in [
            ("cluster.ingress_class", &c.ingress_class),
            ("cluster.ingress_tls_secret", &c.ingress_tls_secret),
        ] {
            if let Some(v) = v {
                if c.ingress_base_domain.is_none() {
                    return err(key, "only allowed with cluster.ingress_base_domain".into());
                }
                check_dns_subdomain(v).or_else(|m| err(key, format!("{v:?}: {m}")))?;
            }
        }
        for (key, v) in [
            ("cluster.max_cpu", &c.max_cpu),
            ("cluster.max_memory", &c.max_memory),
            ("cluster.max_ephemeral_storage", &c.max_ephemeral_storage),
        ] {
            match crate::kube::quantity::Quantity::parse(v) {
                Ok(q) if q.is_positive() => {}
                Ok(_) => return err(key, format!("{v:?} must be positive")),
                Err(m) => return err(key, m.to_string()),
            }
        }

        // [sessions]
        let ss = &self.sessions;
        for (key, v) in [
            ("sessions.max_sessions", ss.max_sessions),
            (
                "sessions.max_sessions_per_principal",
                ss.max_sessions_per_principal,
            ),
            ("sessions.idle_secs", ss.idle_secs),
            ("sessions.max_life_secs", ss.max_life_secs),
            ("sessions.suspended_ttl_secs", ss.suspended_ttl_secs),
            (
                "sessions.checkpoint_interval_secs",
                ss.checkpoint_interval_secs,
            ),
            ("sessions.reloads_per_minute", ss.reloads_per_minute),
            ("sessions.max_bundle_bytes", ss.max_bundle_bytes),
            ("sessions.max_file_bytes", ss.max_file_bytes),
            ("sessions.max_files", ss.max_files),
            ("sessions.io_ring_bytes", ss.io_ring_bytes),
            ("sessions.sse_history_events", ss.sse_history_events),
            ("sessions.orphan_grace_secs", ss.orphan_grace_secs),
            ("sessions.start_deadline_secs", ss.start_deadline_secs),
            ("sessions.agent_deadline_secs", ss.agent_deadline_secs),
        ] {
            positive(key, v)?;
        }
        if ss.max_sessions_per_principal > ss.max_sessions {
            return err(
                "sessions.max_sessions_per_principal",
                format!(
                    "{} exceeds sessions.max_sessions ({})",
                    ss.max_sessions_per_principal, ss.max_sessions
                ),
            );
        }
        if ss.max_file_bytes > ss.max_bundle_bytes {
            return err(
                "sessions.max_file_bytes",
                format!(
                    "{} exceeds sessions.max_bundle_bytes ({})",
                    ss.max_file_bytes, ss.max_bundle_bytes
                ),
            );
        }
        // activeDeadlineSeconds is an int64 and a pod's life in seconds;
        // anything beyond ten years is a typo.
        if ss.max_life_secs > 10 * 365 * 86_400 {
            return err("sessions.max_life_secs", "longer than ten years".into());
        }

        // [exec]
        let x = &mut self.exec;
        for (key, v) in [
            ("exec.max_command_args", x.max_command_args),
            ("exec.max_arg_bytes", x.max_arg_bytes),
            ("exec.max_command_bytes", x.max_command_bytes),
            ("exec.default_output_bytes", x.default_output_bytes),
            ("exec.max_output_bytes", x.max_output_bytes),
            ("exec.max_stdin_frame_bytes", x.max_stdin_frame_bytes),
            ("exec.output_channel_frames", x.output_channel_frames),
            ("exec.idle_timeout_secs", x.idle_timeout_secs),
            ("exec.max_duration_secs", x.max_duration_secs),
            ("exec.ping_interval_secs", x.ping_interval_secs),
            ("exec.max_sessions", x.max_sessions),
            (
                "exec.max_sessions_per_principal",
                x.max_sessions_per_principal,
            ),
        ] {
            positive(key, v)?;
        }
        if x.default_output_bytes > x.max_output_bytes {
            return err(
                "exec.default_output_bytes",
                format!(
                    "{} exceeds exec.max_output_bytes ({})",
                    x.default_output_bytes, x.max_output_bytes
                ),
            );
        }
        check_label_key(&x.workspace_uid_label)
            .or_else(|m| err("exec.workspace_uid_label", m.into()))?;
        if x.workspace_uid_label == MANAGED_BY_LABEL {
            return err(
                "exec.workspace_uid_label",
                format!("must differ from {MANAGED_BY_LABEL}"),
            );
        }
        for (key, v, min) in [
            (
                "exec.audit_max_bytes",
                x.audit_max_bytes,
                crate::exec::audit::MIN_MAX_BYTES,
            ),
            (
                "exec.recording_max_bytes",
                x.recording_max_bytes,
                crate::exec::record::MIN_MAX_BYTES,
            ),
        ] {
            if v < min {
                return err(key, format!("must be at least {min} (bytes), got {v}"));
            }
        }
        if let Some(p) = &mut x.audit_log {
            if p.as_os_str().is_empty() {
                return err("exec.audit_log", "must not be empty".into());
            }
            resolve(p);
        }
        if let Some(p) = &mut x.recording_dir {
            if p.as_os_str().is_empty() {
                return err("exec.recording_dir", "must not be empty".into());
            }
            resolve(p);
        }

        // [[principal]]
        let mut names = std::collections::HashSet::new();
        let mut digests = std::collections::HashSet::new();
        for (i, p) in self.principals.iter_mut().enumerate() {
            let k = |f: &str| format!("principal[{i}].{f}");
            if p.name.trim().is_empty()
                || p.name.len() > 128
                || p.name.chars().any(char::is_control)
            {
                return err(&k("name"), "must be 1 to 128 printable characters".into());
            }
            if !names.insert(p.name.clone()) {
                return err(&k("name"), format!("{:?} is defined twice", p.name));
            }
            if p.token_sha256.is_empty() {
                return err(
                    &k("token_sha256"),
                    "missing (the SHA-256 hex digest of the token)".into(),
                );
            }
            if p.token_sha256.len() != 64 || !p.token_sha256.bytes().all(|b| b.is_ascii_hexdigit())
            {
                return err(
                    &k("token_sha256"),
                    "must be 64 hex digits (a SHA-256 digest)".into(),
                );
            }
            p.token_sha256.make_ascii_lowercase();
            if !digests.insert(p.token_sha256.clone()) {
                return err(
                    &k("token_sha256"),
                    "the same token digest is used by another principal".into(),
                );
            }
            let mut seen = std::collections::HashSet::new();
            for (j, w) in p.workspaces.iter_mut().enumerate() {
                let parsed =
                    Workspace::parse(&w.uid).map_err(|m| (k(&format!("workspaces[{j}]")), m))?;
                if !seen.insert(parsed.clone()) {
                    return err(
                        &k(&format!("workspaces[{j}]")),
                        format!("{parsed} is listed twice"),
                    );
                }
                *w = parsed;
            }
        }
        self.check_demo_token()
    }

    /// The published demo token is for the demo only: the embedded sim,
    /// one principal, a loopback front door (a local user can reach it
    /// anyway; nobody else can).
    fn check_demo_token(&self) -> Result<(), (String, String)> {
        let Some(i) = self
            .principals
            .iter()
            .position(|p| p.token_sha256 == DEMO_TOKEN_SHA256)
        else {
            return Ok(());
        };
        let why = if self.cluster.mode != ClusterMode::Sim {
            "only allowed with [cluster] mode = \"sim\""
        } else if !self.server.listen_addr().ip().is_loopback() {
            "only allowed on a loopback front door (server.listen)"
        } else if self.principals.len() > 1 {
            "only allowed as the one principal"
        } else {
            return Ok(());
        };
        Err((
            format!("principal[{i}].token_sha256"),
            format!(
                "is the digest of the published demo token (config.example.toml), which anyone can read: {why}; make a token of your own and put its digest here (docs/deploy.md, \"Principals\")"
            ),
        ))
    }

    /// The name of the principal holding the published demo token, if any
    /// (the daemon warns about it at every start).
    pub fn demo_token_principal(&self) -> Option<&str> {
        self.principals
            .iter()
            .find(|p| p.token_sha256 == DEMO_TOKEN_SHA256)
            .map(|p| p.name.as_str())
    }
}

/// An image reference: not blank, no whitespace or control characters, at
/// most 512 characters (the registry checks the rest).
fn check_image(s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err("must not be empty".into());
    }
    if s.len() > 512 || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "{s:?} is not an image reference (no spaces, at most 512 characters)"
        ));
    }
    Ok(())
}

fn positive(key: &str, v: u64) -> Result<(), (String, String)> {
    if v == 0 {
        return Err((key.into(), "must be a positive integer".into()));
    }
    Ok(())
}

/// The dotted key path at byte `offset` of a TOML document, from the last
/// table header before it and the key on its line (array-of-tables entries
/// get their index: `principal[1].name`). Good enough to point a person at
/// the key; inline tables are reported by their outer key.
fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let mut section = String::new();
    let mut counts: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    let mut line_start = 0;
    for line in text[..offset].split_inclusive('\n') {
        let end = line_start + line.len();
        let t = line.trim();
        // Only whole lines before the offset's line change the section;
        // the offset's own line is handled below.
        if end <= offset || !line.ends_with('\n') {
            if let Some(h) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
                let h = h.trim().to_string();
                let n = counts.entry(h.clone()).or_insert(0);
                section = format!("{h}[{n}]");
                *n += 1;
            } else if let Some(h) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
                section = h.trim().to_string();
            }
        }
        line_start = end;
    }
    // The line holding the offset.
    let ls = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let le = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[ls..le].trim();
    if line.starts_with('[') {
        // The error is about the header itself (e.g. an unknown section).
        let h = line.trim_matches(|c| c == '[' || c == ']').trim();
        return h.to_string();
    }
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string())
        .unwrap_or_default();
    match (section.is_empty(), key.is_empty()) {
        (true, _) => key,
        (false, true) => section,
        (false, false) => format!("{section}.{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEMO_DIGEST: &str = "0000000000000000000000000000000000000000000000000000000000000000";

    fn minimal() -> String {
        "[cluster]\nmode = \"sim\"\n".to_string()
    }

    fn parse(text: &str) -> Result<Config, (String, String)> {
        Config::parse(text, Path::new("/etc/kubegate"))
    }

    fn key_of(text: &str) -> String {
        let e = parse(text).expect_err("must fail");
        e.0
    }

    fn with_principal(body: &str) -> String {
        format!("{}\n[[principal]]\n{body}\n", minimal())
    }

    #[test]
    fn defaults() {
        let c = parse(&minimal()).unwrap();
        assert_eq!(c.server.listen_addr(), "127.0.0.1:7443".parse().unwrap());
        assert_eq!(c.server.max_connections, 1024);
        assert_eq!(c.server.state_dir, PathBuf::from("/var/lib/kubegate"));
        assert_eq!(c.server.shutdown_grace_secs, 10);
        assert_eq!(c.cluster.mode, ClusterMode::Sim);
        assert_eq!(c.cluster.managed_by, "kubegate");
        assert_eq!(c.exec, ExecSection::default());
        assert_eq!(c.exec.max_command_args, 64);
        assert_eq!(c.exec.max_arg_bytes, 8192);
        assert_eq!(c.exec.max_command_bytes, 32768);
        assert_eq!(c.exec.max_output_bytes, 1 << 20);
        assert_eq!(c.exec.default_output_bytes, 1 << 20);
        assert_eq!(c.exec.max_stdin_frame_bytes, 65536);
        assert_eq!(c.exec.workspace_uid_label, "kubegate.dev/workspace-uid");
        assert!(c.principals.is_empty());
    }

    #[test]
    fn cluster_section_is_required() {
        let e = parse("").unwrap_err();
        assert!(e.1.contains("cluster"), "{e:?}");
    }

    #[test]
    fn unknown_keys_are_named() {
        assert_eq!(
            key_of(&format!("{}bogus = 1\n", minimal())),
            "cluster.bogus"
        );
        assert_eq!(
            key_of(&format!("[server]\nlisten_addr = \"x\"\n{}", minimal())),
            "server.listen_addr"
        );
        assert_eq!(key_of(&format!("{}[nope]\na = 1\n", minimal())), "nope");
        assert_eq!(
            key_of(&format!("{}[cluster.sim]\nnamespace = []\n", minimal())),
            "cluster.sim.namespace"
        );
        assert_eq!(
            key_of(&format!("{}[exec]\nmax_args = 3\n", minimal())),
            "exec.max_args"
        );
        let e = parse(&with_principal(&format!(
            "name = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nquota = 1"
        )))
        .unwrap_err();
        assert_eq!(e.0, "principal[0].quota", "{e:?}");
    }

    #[test]
    fn bad_types_are_named() {
        assert_eq!(
            key_of(&format!(
                "[server]\nmax_connections = \"many\"\n{}",
                minimal()
            )),
            "server.max_connections"
        );
        assert_eq!(
            key_of(&format!("[server]\nmax_connections = -1\n{}", minimal())),
            "server.max_connections"
        );
        assert_eq!(key_of("[cluster]\nmode = \"cloud\"\n"), "cluster.mode");
    }

    #[test]
    fn listen_address() {
        let e = parse(&format!("[server]\nlisten = \"localhost\"\n{}", minimal())).unwrap_err();
        assert_eq!(e.0, "server.listen");
        assert!(e.1.contains("IP:PORT"), "{e:?}");
        let c = parse(&format!("[server]\nlisten = \"[::1]:0\"\n{}", minimal())).unwrap();
        assert_eq!(c.server.listen_addr().port(), 0);
    }

    #[test]
    fn positive_integers() {
        for k in [
            "max_connections",
            "keep_alive_idle_secs",
            "request_read_timeout_secs",
            "shutdown_grace_secs",
        ] {
            assert_eq!(
                key_of(&format!("[server]\n{k} = 0\n{}", minimal())),
                format!("server.{k}")
            );
        }
        for k in [
            "max_command_args",
            "max_arg_bytes",
            "max_command_bytes",
            "default_output_bytes",
            "max_output_bytes",
            "max_stdin_frame_bytes",
            "output_channel_frames",
        ] {
            assert_eq!(
                key_of(&format!("{}[exec]\n{k} = 0\n", minimal())),
                format!("exec.{k}")
            );
        }
    }

    #[test]
    fn disk_bounds_of_recordings_and_the_audit_log() {
        let c = parse(&minimal()).unwrap();
        assert_eq!(c.exec.recording_max_bytes, 64 << 20);
        assert_eq!(c.exec.recording_min_free_bytes, 1 << 30);
        assert_eq!(c.exec.audit_max_bytes, 256 << 20);
        for k in ["recording_max_bytes", "audit_max_bytes"] {
            for v in [0, 4095] {
                let e = parse(&format!("{}[exec]\n{k} = {v}\n", minimal())).unwrap_err();
                assert_eq!(e.0, format!("exec.{k}"));
                assert!(e.1.contains("at least 4096"), "{e:?}");
            }
        }
        let c = parse(&format!(
            "{}[exec]\nrecording_max_bytes = 4096\naudit_max_bytes = 4096\nrecording_min_free_bytes = 0\n",
            minimal()
        ))
        .unwrap();
        assert_eq!(c.exec.recording_max_bytes, 4096);
        assert_eq!(c.exec.recording_min_free_bytes, 0, "0: no floor");
        assert_eq!(
            key_of(&format!(
                "{}[exec]\nrecording_min_free_bytes = -1\n",
                minimal()
            )),
            "exec.recording_min_free_bytes"
        );
    }

    #[test]
    fn output_default_within_maximum() {
        let e = parse(&format!(
            "{}[exec]\ndefault_output_bytes = 2048\nmax_output_bytes = 1024\n",
            minimal()
        ))
        .unwrap_err();
        assert_eq!(e.0, "exec.default_output_bytes");
    }

    #[test]
    fn tls_needs_both_files_and_they_must_exist() {
        assert_eq!(
            key_of(&format!("[server]\ntls_cert = \"c.pem\"\n{}", minimal())),
            "server.tls_key"
        );
        assert_eq!(
            key_of(&format!("[server]\ntls_key = \"k.pem\"\n{}", minimal())),
            "server.tls_cert"
        );
        let e = parse(&format!(
            "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n{}",
            minimal()
        ))
        .unwrap_err();
        assert_eq!(e.0, "server.tls_cert");
        assert!(e.1.contains("/etc/kubegate/c.pem"), "{e:?}");
    }

    #[test]
    fn relative_paths_resolve_against_the_config_folder() {
        let text = "[server]\nstate_dir = \"./state\"\n[cluster]\nmode = \"kubeconfig\"\nkubeconfig = \"kc.yaml\"\ncontext = \"x\"\n[exec]\naudit_log = \"/var/log/a.jsonl\"\n";
        let c = parse(text).unwrap();
        assert_eq!(c.server.state_dir, PathBuf::from("/etc/kubegate/state"));
        assert_eq!(
            c.cluster.kubeconfig,
            Some(PathBuf::from("/etc/kubegate/kc.yaml"))
        );
        assert_eq!(c.cluster.context.as_deref(), Some("x"));
        assert_eq!(c.exec.audit_log, Some(PathBuf::from("/var/log/a.jsonl")));
        let c = parse("[cluster]\nmode = \"sim\"\n[exec]\naudit_log = \"audit.jsonl\"\n").unwrap();
        assert_eq!(
            c.exec.audit_log,
            Some(PathBuf::from("/etc/kubegate/audit.jsonl"))
        );
        assert_eq!(
            key_of("[server]\nstate_dir = \"\"\n[cluster]\nmode = \"sim\"\n"),
            "server.state_dir"
        );
    }

    #[test]
    fn kubeconfig_keys_only_in_kubeconfig_mode() {
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\nkubeconfig = \"x\"\n"),
            "cluster.kubeconfig"
        );
        assert_eq!(
            key_of("[cluster]\nmode = \"in-cluster\"\ncontext = \"x\"\n"),
            "cluster.context"
        );
        assert!(parse("[cluster]\nmode = \"in-cluster\"\n").is_ok());
        assert!(parse("[cluster]\nmode = \"kubeconfig\"\n").is_ok());
        assert_eq!(
            key_of("[cluster]\nmode = \"kubeconfig\"\ncontext = \" \"\n"),
            "cluster.context"
        );
    }

    #[test]
    fn managed_by_and_label_key() {
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\nmanaged_by = \"\"\n"),
            "cluster.managed_by"
        );
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\nmanaged_by = \"a b\"\n"),
            "cluster.managed_by"
        );
        assert_eq!(
            key_of(&format!(
                "[cluster]\nmode = \"sim\"\nmanaged_by = \"{}\"\n",
                "x".repeat(64)
            )),
            "cluster.managed_by"
        );
        assert!(parse("[cluster]\nmode = \"sim\"\nmanaged_by = \"My.Tool_1\"\n").is_ok());
        assert_eq!(
            key_of(&format!(
                "{}[exec]\nworkspace_uid_label = \"Bad_Prefix/x\"\n",
                minimal()
            )),
            "exec.workspace_uid_label"
        );
        assert_eq!(
            key_of(&format!(
                "{}[exec]\nworkspace_uid_label = \"x/\"\n",
                minimal()
            )),
            "exec.workspace_uid_label"
        );
        assert_eq!(
            key_of(&format!(
                "{}[exec]\nworkspace_uid_label = \"app.kubernetes.io/managed-by\"\n",
                minimal()
            )),
            "exec.workspace_uid_label"
        );
        let c = parse(&format!(
            "{}[exec]\nworkspace_uid_label = \"example.com/ws\"\n",
            minimal()
        ))
        .unwrap();
        assert_eq!(c.exec.workspace_uid_label, "example.com/ws");
    }

    #[test]
    fn sim_section() {
        let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nnamespaces = [\"a\", \"b-2\"]\nfail_images = [\"bad/*\"]\n").unwrap();
        assert_eq!(c.cluster.sim.namespaces, vec!["a", "b-2"]);
        assert_eq!(c.cluster.sim.fail_images, vec!["bad/*"]);
        assert_eq!(c.cluster.sim.request_log, None);
        let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nrequest_log = \"req.jsonl\"\n")
            .unwrap();
        assert!(c
            .cluster
            .sim
            .request_log
            .as_ref()
            .is_some_and(|p| p.is_absolute() && p.ends_with("req.jsonl")));
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nrequest_log = \"\"\n"),
            "cluster.sim.request_log"
        );
        assert_eq!(
            c.cluster.sim.uid_range(),
            Some(crate::sim::pod_users::DEFAULT_UID_RANGE)
        );
        let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"1000-1999\"\npods_dir = \"/srv/pods\"\n").unwrap();
        assert_eq!(c.cluster.sim.uid_range(), Some((1000, 1999)));
        assert_eq!(c.cluster.sim.pods_dir, Some(PathBuf::from("/srv/pods")));
        let c = parse("[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"off\"\n").unwrap();
        assert_eq!(c.cluster.sim.uid_range(), None);
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nuid_range = \"9-1\"\n"),
            "cluster.sim.uid_range"
        );
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nnamespaces = [\"ok\", \"Not_OK\"]\n"),
            "cluster.sim.namespaces[1]"
        );
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\n[cluster.sim]\nfail_images = [\"\"]\n"),
            "cluster.sim.fail_images[0]"
        );
    }

    #[test]
    fn principals() {
        let text = with_principal(&format!(
            "name = \"demo\"\ntoken_sha256 = \"{}\"\nworkspaces = [\"demo/demo-uid\", \"p2/u/with/slashes\"]\nmay_start_sessions = true",
            "AB".repeat(32)
        ));
        let c = parse(&text).unwrap();
        let p = &c.principals[0];
        assert_eq!(p.name, "demo");
        assert_eq!(p.token_sha256, "ab".repeat(32));
        assert!(p.may_start_sessions);
        assert_eq!(
            p.workspaces[0],
            Workspace {
                project: "demo".into(),
                uid: "demo-uid".into()
            }
        );
        assert_eq!(p.workspaces[1].uid, "u/with/slashes");
        let c = parse(&with_principal(&format!(
            "name = \"x\"\ntoken_sha256 = \"{DEMO_DIGEST}\""
        )))
        .unwrap();
        assert!(!c.principals[0].may_start_sessions);
        assert!(c.principals[0].workspaces.is_empty());
    }

    #[test]
    fn clear_text_tokens_are_refused() {
        let e = parse(&with_principal(
            "name = \"a\"\ntoken = \"kubegate-demo-token\"",
        ))
        .unwrap_err();
        assert_eq!(e.0, "principal[0].token", "{e:?}");
        assert!(e.1.contains("token_sha256"), "{e:?}");
        assert!(
            !e.1.contains("kubegate-demo-token"),
            "the secret is echoed: {e:?}"
        );
    }

    #[test]
    fn token_digest_rules() {
        assert_eq!(
            key_of(&with_principal("name = \"a\"")),
            "principal[0].token_sha256"
        );
        assert_eq!(
            key_of(&with_principal("name = \"a\"\ntoken_sha256 = \"abc\"")),
            "principal[0].token_sha256"
        );
        assert_eq!(
            key_of(&with_principal(&format!(
                "name = \"a\"\ntoken_sha256 = \"{}\"",
                "g".repeat(64)
            ))),
            "principal[0].token_sha256"
        );
        let two = format!(
            "{}[[principal]]\nname = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n[[principal]]\nname = \"b\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n",
            minimal()
        );
        assert_eq!(key_of(&two), "principal[1].token_sha256");
    }

    #[test]
    fn principal_names() {
        assert_eq!(
            key_of(&with_principal(&format!(
                "name = \"\"\ntoken_sha256 = \"{DEMO_DIGEST}\""
            ))),
            "principal[0].name"
        );
        let two = format!(
            "{}[[principal]]\nname = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\n[[principal]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n",
            minimal(),
            "1".repeat(64)
        );
        assert_eq!(key_of(&two), "principal[1].name");
        let e = parse(&with_principal(&format!(
            "token_sha256 = \"{DEMO_DIGEST}\""
        )))
        .unwrap_err();
        assert!(e.1.contains("name"), "{e:?}");
    }

    #[test]
    fn workspace_strings() {
        for bad in ["demo", "Demo/x", "demo/", "demo/  ", "-x/u", "/u"] {
            let e = parse(&with_principal(&format!(
                "name = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nworkspaces = [\"ok/u\", \"{bad}\"]"
            )))
            .unwrap_err();
            assert_eq!(e.0, "principal[0].workspaces[1]", "{bad}: {e:?}");
        }
        let long = format!("p/{}", "u".repeat(257));
        assert!(Workspace::parse(&long).is_err());
        assert!(Workspace::parse(&format!("p/{}", "u".repeat(256))).is_ok());
        assert!(Workspace::parse(&format!("{}/u", "p".repeat(64))).is_err());
        let dup = with_principal(&format!(
            "name = \"a\"\ntoken_sha256 = \"{DEMO_DIGEST}\"\nworkspaces = [\"p/u\", \"p/u\"]"
        ));
        assert_eq!(key_of(&dup), "principal[0].workspaces[1]");
    }

    fn demo_principal(extra: &str) -> String {
        format!("[[principal]]\nname = \"demo\"\ntoken_sha256 = \"{DEMO_TOKEN_SHA256}\"\n{extra}")
    }

    #[test]
    fn the_demo_token_is_allowed_alone_in_sim_mode_on_loopback() {
        let c = parse(&format!("{}{}", minimal(), demo_principal(""))).unwrap();
        assert_eq!(c.demo_token_principal(), Some("demo"));
        let upper = format!(
            "{}[[principal]]\nname = \"d\"\ntoken_sha256 = \"{}\"\n",
            minimal(),
            DEMO_TOKEN_SHA256.to_ascii_uppercase()
        );
        assert_eq!(parse(&upper).unwrap().demo_token_principal(), Some("d"));
        let v6 = format!(
            "[server]\nlisten = \"[::1]:0\"\n{}{}",
            minimal(),
            demo_principal("")
        );
        assert!(parse(&v6).is_ok());
        let own = with_principal(&format!(
            "name = \"a\"\ntoken_sha256 = \"{}\"",
            "1".repeat(64)
        ));
        assert_eq!(parse(&own).unwrap().demo_token_principal(), None);
    }

    #[test]
    fn the_demo_token_is_refused_outside_sim_mode() {
        for mode in ["kubeconfig", "in-cluster"] {
            let text = format!("[cluster]\nmode = \"{mode}\"\n{}", demo_principal(""));
            let e = parse(&text).unwrap_err();
            assert_eq!(e.0, "principal[0].token_sha256", "{e:?}");
            assert!(e.1.contains("demo token"), "{e:?}");
            assert!(e.1.contains("mode = \"sim\""), "{e:?}");
            assert!(!e.1.contains("kubegate-demo-token"), "{e:?}");
        }
    }

    #[test]
    fn the_demo_token_is_refused_on_a_front_door_beyond_loopback() {
        for listen in ["0.0.0.0:7443", "192.0.2.1:7443", "[::]:7443"] {
            let text = format!(
                "[server]\nlisten = \"{listen}\"\n{}{}",
                minimal(),
                demo_principal("")
            );
            let e = parse(&text).unwrap_err();
            assert_eq!(e.0, "principal[0].token_sha256", "{listen}: {e:?}");
            assert!(e.1.contains("loopback"), "{e:?}");
        }
    }

    #[test]
    fn the_demo_token_is_refused_beside_another_principal() {
        let other = format!(
            "[[principal]]\nname = \"b\"\ntoken_sha256 = \"{}\"\n",
            "2".repeat(64)
        );
        for text in [
            format!("{}{}{other}", minimal(), demo_principal("")),
            format!("{}{other}{}", minimal(), demo_principal("")),
        ] {
            let e = parse(&text).unwrap_err();
            assert!(e.0.ends_with("].token_sha256"), "{e:?}");
            assert!(e.1.contains("one principal"), "{e:?}");
        }
        let e = parse(&format!("{}{other}{}", minimal(), demo_principal(""))).unwrap_err();
        assert_eq!(e.0, "principal[1].token_sha256");
    }

    #[test]
    fn key_at_finds_sections_and_indices() {
        let t = "[a]\nx = 1\n[[p]]\ny = 2\n[[p]]\nz = 3\n";
        assert_eq!(key_at(t, t.find("x").unwrap()), "a.x");
        assert_eq!(key_at(t, t.find("y").unwrap()), "p[0].y");
        assert_eq!(key_at(t, t.find("z").unwrap()), "p[1].z");
        assert_eq!(key_at(t, t.find("3").unwrap()), "p[1].z");
        assert_eq!(key_at("top = 1\n", 0), "top");
    }

    #[test]
    fn session_defaults() {
        let c = parse(&minimal()).unwrap();
        assert_eq!(c.sessions, SessionsSection::default());
        let ss = &c.sessions;
        assert_eq!(ss.idle_secs, 300);
        assert_eq!(ss.max_life_secs, 21600);
        assert_eq!(ss.suspended_ttl_secs, 86400);
        assert_eq!(ss.checkpoint_interval_secs, 30);
        assert_eq!(ss.reloads_per_minute, 30);
        assert_eq!(ss.max_bundle_bytes, 64 << 20);
        assert_eq!(ss.max_file_bytes, 8 << 20);
        assert_eq!(ss.max_files, 10_000);
        assert_eq!(ss.io_ring_bytes, 1 << 20);
        assert_eq!(ss.sse_history_events, 1000);
        assert_eq!(ss.orphan_grace_secs, 600);
        assert_eq!(ss.start_deadline_secs, 180);
        assert_eq!(ss.agent_deadline_secs, 120);
        assert!(ss.app_runner);
        let k = &c.cluster;
        assert_eq!(k.session_namespace, "default");
        assert!(k.workspace_image.starts_with("ghcr.io/kubegate/kubegate:"));
        assert!(k.workspace_image.ends_with(env!("CARGO_PKG_VERSION")));
        assert_eq!(k.default_app_image, DEFAULT_APP_IMAGE);
        assert_eq!(k.default_app_command, vec!["sh", "$(KUBEGATE_ENTRY)"]);
        assert_eq!(k.ingress_base_domain, None);
        assert_eq!(k.ingress_class, None);
        assert_eq!(k.ingress_tls_secret, None);
        assert_eq!((k.max_cpu.as_str(), k.max_memory.as_str()), ("1", "1Gi"));
        assert_eq!(k.max_ephemeral_storage, "2Gi");
    }

    #[test]
    fn pod_access_defaults_by_mode() {
        let access = |t: &str| parse(t).unwrap().cluster.pod_access();
        assert_eq!(access("[cluster]\nmode = \"sim\"\n"), PodAccess::ApiProxy);
        assert_eq!(
            access("[cluster]\nmode = \"kubeconfig\"\n"),
            PodAccess::ApiProxy
        );
        assert_eq!(
            access("[cluster]\nmode = \"in-cluster\"\n"),
            PodAccess::Direct
        );
        assert_eq!(
            access("[cluster]\nmode = \"in-cluster\"\npod_access = \"api-proxy\"\n"),
            PodAccess::ApiProxy
        );
        assert_eq!(
            access("[cluster]\nmode = \"sim\"\npod_access = \"direct\"\n"),
            PodAccess::Direct
        );
        assert_eq!(
            key_of("[cluster]\nmode = \"sim\"\npod_access = \"tunnel\"\n"),
            "cluster.pod_access"
        );
    }

    #[test]
    fn session_cluster_keys() {
        let bad = |line: &str| key_of(&format!("{}{line}\n", minimal()));
        assert_eq!(
            bad("session_namespace = \"Bad_NS\""),
            "cluster.session_namespace"
        );
        assert_eq!(bad("session_namespace = \"\""), "cluster.session_namespace");
        assert_eq!(bad("workspace_image = \"\""), "cluster.workspace_image");
        assert_eq!(bad("workspace_image = \"a b\""), "cluster.workspace_image");
        assert_eq!(
            bad("default_app_image = \"x\ty\""),
            "cluster.default_app_image"
        );
        assert_eq!(
            bad("default_app_command = []"),
            "cluster.default_app_command"
        );
        assert_eq!(
            bad("default_app_command = [\" \"]"),
            "cluster.default_app_command"
        );
        assert_eq!(
            bad("ingress_base_domain = \"Example.COM\""),
            "cluster.ingress_base_domain"
        );
        assert_eq!(
            bad("ingress_base_domain = \"a..b\""),
            "cluster.ingress_base_domain"
        );
        // Class and TLS secret only make sense with a base domain.
        assert_eq!(bad("ingress_class = \"nginx\""), "cluster.ingress_class");
        assert_eq!(
            bad("ingress_tls_secret = \"tls\""),
            "cluster.ingress_tls_secret"
        );
        assert_eq!(
            bad("ingress_base_domain = \"dev.example.com\"\ningress_class = \"Nginx\""),
            "cluster.ingress_class"
        );
        for k in ["max_cpu", "max_memory", "max_ephemeral_storage"] {
            assert_eq!(bad(&format!("{k} = \"lots\"")), format!("cluster.{k}"));
            assert_eq!(bad(&format!("{k} = \"0\"")), format!("cluster.{k}"));
            assert_eq!(bad(&format!("{k} = \"-1\"")), format!("cluster.{k}"));
        }
        let c = parse(&format!(
            "{}session_namespace = \"dev\"\nworkspace_image = \"reg.local/kg:1\"\ndefault_app_image = \"node:22\"\ndefault_app_command = [\"node\", \"--watch\", \"$(KUBEGATE_ENTRY)\"]\ningress_base_domain = \"dev.example.com\"\ningress_class = \"nginx\"\ningress_tls_secret = \"wildcard-tls\"\nmax_cpu = \"500m\"\nmax_memory = \"512Mi\"\nmax_ephemeral_storage = \"1G\"\n",
            minimal()
        ))
        .unwrap();
        let k = &c.cluster;
        assert_eq!(k.session_namespace, "dev");
        assert_eq!(k.workspace_image, "reg.local/kg:1");
        assert_eq!(k.default_app_command[1], "--watch");
        assert_eq!(k.ingress_base_domain.as_deref(), Some("dev.example.com"));
        assert_eq!(k.ingress_class.as_deref(), Some("nginx"));
        assert_eq!(k.ingress_tls_secret.as_deref(), Some("wildcard-tls"));
        assert_eq!(k.max_cpu, "500m");
    }

    #[test]
    fn sessions_section() {
        assert_eq!(
            key_of(&format!("{}[sessions]\nidle = 3\n", minimal())),
            "sessions.idle"
        );
        assert_eq!(
            key_of(&format!("{}[sessions]\nidle_secs = \"5m\"\n", minimal())),
            "sessions.idle_secs"
        );
        for k in [
            "max_sessions",
            "max_sessions_per_principal",
            "idle_secs",
            "max_life_secs",
            "suspended_ttl_secs",
            "checkpoint_interval_secs",
            "reloads_per_minute",
            "max_bundle_bytes",
            "max_file_bytes",
            "max_files",
            "io_ring_bytes",
            "sse_history_events",
            "orphan_grace_secs",
            "start_deadline_secs",
            "agent_deadline_secs",
        ] {
            assert_eq!(
                key_of(&format!("{}[sessions]\n{k} = 0\n", minimal())),
                format!("sessions.{k}")
            );
        }
        assert_eq!(
            key_of(&format!(
                "{}[sessions]\nmax_sessions = 4\nmax_sessions_per_principal = 5\n",
                minimal()
            )),
            "sessions.max_sessions_per_principal"
        );
        assert_eq!(
            key_of(&format!(
                "{}[sessions]\nmax_bundle_bytes = 1024\nmax_file_bytes = 2048\n",
                minimal()
            )),
            "sessions.max_file_bytes"
        );
        assert_eq!(
            key_of(&format!(
                "{}[sessions]\nmax_life_secs = 400000000\n",
                minimal()
            )),
            "sessions.max_life_secs"
        );
        let c = parse(&format!(
            "{}[sessions]\nidle_secs = 60\nmax_files = 5\n",
            minimal()
        ))
        .unwrap();
        assert_eq!(c.sessions.idle_secs, 60);
        assert_eq!(c.sessions.max_files, 5);
        assert_eq!(c.sessions.max_life_secs, 21600);
    }

    #[test]
    fn the_app_runner_is_on_unless_turned_off() {
        assert!(parse(&minimal()).unwrap().sessions.app_runner);
        let c = parse(&format!("{}[sessions]\napp_runner = false\n", minimal())).unwrap();
        assert!(!c.sessions.app_runner);
        assert_eq!(
            key_of(&format!("{}[sessions]\napp_runner = 1\n", minimal())),
            "sessions.app_runner"
        );
    }

    #[test]
    fn error_display_names_file_and_key() {
        let e = ConfigError {
            file: "/x/k.toml".into(),
            key: "server.listen".into(),
            message: "bad".into(),
        };
        assert_eq!(e.to_string(), "/x/k.toml: server.listen: bad");
    }
}
