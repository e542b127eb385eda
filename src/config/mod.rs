//! The daemon's configuration file (`kubegate serve --config F`,
//! `kubegate check-config --config F`): TOML, snake_case keys, `_secs`
//! durations, `_bytes` sizes; relative paths resolve against the config
//! file's folder (docs/config.md#rules-for-every-key).
//!
//! Loading is two steps: serde with `deny_unknown_fields` (so a misspelt key
//! is an error, never ignored), then the checks serde cannot express
//! (`validate.rs`, one function per section). Every error names the key at
//! fault ([`KeyError::key`]; a TOML syntax error's key is found by
//! `key_at.rs`), e.g. `server.listen` or `principal[0].workspaces[1]`, and
//! never echoes a secret; [`Config::load`] adds the file ([`ConfigError`]).
//! `config.example.toml` documents every key with its default.
//!
//! This module holds the types and their defaults; the principal's
//! [`Workspace`] type is the API's ([`crate::api::identity`]). The parts
//! the daemon drives take their own settings, built from these by the
//! server (`server::settings`, `session::pod::PodSettings`).

mod key_at;
pub mod oidc;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::api::Workspace;
pub use crate::kube::labels::DEFAULT_WORKSPACE_UID_LABEL;
use key_at::key_at;

/// Default front-door address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7443";
/// Default state directory (the example config points at `./state`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/kubegate";
/// Default managed-by label value (docs/exec.md#who-may-exec-where).
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

/// Smallest `exec.audit_max_bytes`: the audit log's own minimum
/// (`exec::audit::MIN_MAX_BYTES`; `server::settings` tests they agree).
pub const MIN_AUDIT_MAX_BYTES: u64 = 4096;
/// Smallest `exec.recording_max_bytes`: a recording's header and closing
/// events (`exec::record::MIN_MAX_BYTES`; `server::settings` tests they
/// agree).
pub const MIN_RECORDING_MAX_BYTES: u64 = 4096;

/// A configuration problem: the file, the key at fault and what is wrong.
/// Displayed as `FILE: KEY: what is wrong` (docs/config.md#rules-for-every-key).
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

/// A problem of the configuration's text: the key at fault and what is
/// wrong ([`Config::parse`]; [`Config::load`] adds the file to make a
/// [`ConfigError`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyError {
    /// Dotted key path (`server.listen`, `principal[0].name`); empty when
    /// the TOML parser could not place the problem.
    pub key: String,
    pub message: String,
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.key.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.key, self.message)
        }
    }
}

impl std::error::Error for KeyError {}

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

/// How the daemon opens connections to a session pod
/// (docs/sessions.md#reaching-the-pod).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PodAccessMode {
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
    /// OpenID Connect principals (`[oidc]`, [`oidc::OidcSection`]).
    #[serde(default)]
    pub oidc: oidc::OidcSection,
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
    /// TCP tunnels (`…/tunnels/{port}`, `/v1/exec/tunnel`) one principal
    /// holds open (0: derived).
    pub max_tunnels_per_principal: u64,
    /// A tunnel with no byte either way for this long is closed.
    pub tunnel_idle_timeout_secs: u64,
    /// A tunnel is closed after this long whatever it does.
    pub tunnel_max_duration_secs: u64,
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
            max_tunnels_per_principal: 0,
            tunnel_idle_timeout_secs: 3600,
            tunnel_max_duration_secs: 24 * 3600,
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
    pub pod_access: Option<PodAccessMode>,
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
    /// Which layer routes session endpoints (docs/config.md#routing):
    /// `auto` decides from the other keys ([`ClusterSection::routing`]).
    #[serde(default)]
    pub routing: RoutingMode,
    /// Session endpoints get `<port>-<sessionId>.<domain>`, routed by an
    /// Ingress or by HTTPRoutes; without it, Service only (endpoints have
    /// no host).
    #[serde(default)]
    pub base_domain: Option<String>,
    /// The older name of `base_domain` (kept as an alias; both set is an
    /// error). Use [`ClusterSection::base_domain`].
    #[serde(default)]
    pub ingress_base_domain: Option<String>,
    /// The Gateway session HTTPRoutes attach to, `namespace/name`
    /// (gateway routing).
    #[serde(default)]
    pub gateway: Option<String>,
    /// The Gateway listener (`sectionName`) the routes attach to.
    #[serde(default)]
    pub gateway_section: Option<String>,
    /// `spec.ingressClassName` of session Ingresses (ingress routing).
    #[serde(default)]
    pub ingress_class: Option<String>,
    /// TLS Secret of session Ingresses (ingress routing).
    #[serde(default)]
    pub ingress_tls_secret: Option<String>,
    /// Per-container ceilings (Kubernetes quantities); requests = limits.
    #[serde(default = "default_max_cpu")]
    pub max_cpu: String,
    #[serde(default = "default_max_memory")]
    pub max_memory: String,
    #[serde(default = "default_max_ephemeral_storage")]
    pub max_ephemeral_storage: String,
    /// Calls that reach into a workspace for a principal (exec, its target
    /// resolution, Deployment tunnels, the workspace listing) carry
    /// `Impersonate-User`/`Impersonate-Group`, so the cluster's RBAC and
    /// audit log judge the person (docs/SECURITY.md#impersonation).
    #[serde(default)]
    pub impersonate: bool,
    #[serde(default)]
    pub sim: SimSection,
}

/// `[cluster] routing` as written (docs/config.md#routing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RoutingMode {
    /// Decided from the configuration alone: a `gateway` -> gateway; a base
    /// domain without one -> ingress; neither -> none; a `gateway` beside
    /// Ingress keys -> refused (naming `cluster.routing`).
    #[default]
    Auto,
    Ingress,
    Gateway,
    None,
}

/// The routing layer a validated configuration resolved to
/// ([`ClusterSection::routing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoutingLayer {
    /// A Service only: endpoints have no host.
    None,
    /// One Ingress per session, a rule per tcp port.
    Ingress,
    /// One `gateway.networking.k8s.io/v1` HTTPRoute per tcp port.
    Gateway,
}

impl ClusterSection {
    /// The base domain, under either of its names (validated: at most one
    /// is set).
    pub fn base_domain(&self) -> Option<&str> {
        self.base_domain
            .as_deref()
            .or(self.ingress_base_domain.as_deref())
    }

    /// The routing layer `routing` resolves to (validated at load: `auto`
    /// with both layers' keys is refused there).
    pub fn routing(&self) -> RoutingLayer {
        match self.routing {
            RoutingMode::Ingress => RoutingLayer::Ingress,
            RoutingMode::Gateway => RoutingLayer::Gateway,
            RoutingMode::None => RoutingLayer::None,
            RoutingMode::Auto if self.gateway.is_some() => RoutingLayer::Gateway,
            RoutingMode::Auto if self.base_domain().is_some() => RoutingLayer::Ingress,
            RoutingMode::Auto => RoutingLayer::None,
        }
    }

    /// `gateway` split into (namespace, name) (validated at load).
    pub fn gateway_ref(&self) -> Option<(&str, &str)> {
        self.gateway.as_deref().and_then(|g| g.split_once('/'))
    }

    /// `pod_access`, or its default: `direct` in-cluster, `api-proxy`
    /// otherwise (sim and kubeconfig: the daemon is outside the pod network).
    pub fn pod_access(&self) -> PodAccessMode {
        self.pod_access.unwrap_or(match self.mode {
            ClusterMode::InCluster => PodAccessMode::Direct,
            ClusterMode::Sim | ClusterMode::Kubeconfig => PodAccessMode::ApiProxy,
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

/// `[sessions]`: limits and timings of watch sessions (docs/config.md#sessions-watch-sessions).
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

/// `[exec]`: the limits of docs/config.md#exec-the-exec-gateway, the
/// workspace-uid label, the audit log.
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

/// `[[principal]]`: one caller identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    pub name: String,
    /// Lower-case hex SHA-256 of the bearer token.
    pub token_sha256: String,
    pub workspaces: Vec<Workspace>,
    pub may_start_sessions: bool,
    /// `Impersonate-Group` values under `[cluster] impersonate` (the user
    /// is `name`); `system:` groups are refused at load.
    pub kube_groups: Vec<String>,
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
    #[serde(default)]
    kube_groups: Vec<String>,
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
            kube_groups: raw.kube_groups,
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
        Config::parse(&text, &base).map_err(|KeyError { key, message }| ConfigError {
            file: path.to_path_buf(),
            key,
            message,
        })
    }

    /// Parses and validates TOML text; relative paths resolve against `base`.
    pub fn parse(text: &str, base: &Path) -> Result<Config, KeyError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| KeyError {
            key: e.span().map(|s| key_at(text, s.start)).unwrap_or_default(),
            message: e.message().trim().to_string(),
        })?;
        cfg.validate(base)?;
        Ok(cfg)
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

#[cfg(test)]
mod tests;
