//! The start request (`POST /v1/sessions`) and the app set (`PUT …/apps`):
//! strict serde types for the shapes of docs/api.md#sessions, and their validation into a
//! [`SessionSpec`] the pod builder and the state machine trust. Sans-IO.
//!
//! Parsing is strict, as everywhere in the API (docs/api.md): malformed
//! JSON, wrong types and unknown fields are 400 `BAD_REQUEST` naming the
//! problem. Then, in this order (the first problem wins; every message names
//! the field, e.g. `apps[1].ports[0]`):
//! - apps: at least one, at most [`MAX_APPS`]; names are DNS labels of at
//!   most 59 characters so `app-<name>` is a valid container name
//!   (`INVALID_APP_NAME`), not `workspace` (`RESERVED_APP_NAME`), unique
//!   (`DUPLICATE_APP_NAME`); commands, images and env are well formed
//!   (`BAD_REQUEST`); ports are 1..65535 (`BAD_REQUEST`: a malformed value,
//!   not a conflict), never twice the same protocol/port in the session nor
//!   a port kubegate itself uses in the pod (`PORT_CONFLICT`: tcp 8099, the
//!   workspace agent, and tcp 9230 + i, app i's debug stream);
//! - paths (entries and bundle files): relative, normalised, inside the
//!   workspace (`INVALID_PATH`, see [`check_canonical_path`]);
//! - the bundle: valid base64, at most `sessions.max_files` files,
//!   `sessions.max_file_bytes` per decoded file and `sessions.max_bundle_bytes`
//!   in all, no path twice, no path that is both a file and a folder, and
//!   every app's entry present (`INVALID_BUNDLE`). The entry rule is a
//!   choice: an app container waits for its entry file before starting, so
//!   an entry missing from the bundle would leave it waiting silently
//!   forever; a 400 at once says what is wrong. `PUT …/apps` has no bundle
//!   and checks entry paths only (the files are already in the workspace).

use crate::agent::wire::paths::{MAX_NAME_BYTES, MAX_PATH_BYTES};
use crate::api::{ApiError, Code};
use crate::kube::image::check_image;
use crate::kube::names::{check_dns_label, NameError};
use base64::Engine;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Most apps in one session (each is a container of one pod).
pub const MAX_APPS: usize = 32;
/// Longest app name: `app-<name>` must stay a 63-character DNS label.
pub const MAX_APP_NAME: usize = 59;
/// The name no app may take: the workspace container's.
pub const RESERVED_APP_NAME: &str = "workspace";
/// The workspace agent's port in the pod (tcp).
pub const AGENT_PORT: u16 = 8099;
/// App i's debug stream listens on tcp `INSPECT_BASE_PORT + i`.
pub const INSPECT_BASE_PORT: u16 = 9230;
/// Most session env entries.
pub const MAX_ENV: usize = 256;

// ------------------------------------------------------------ wire types

/// `POST /v1/sessions` body (docs/api.md#sessions). Serialize too: `kubegate dev`
/// builds its start request from these types, so client and daemon share
/// one shape.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StartRequest {
    pub apps: Vec<AppRequest>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    pub bundle: BundleRequest,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
}

/// `PUT /v1/sessions/{id}/apps` body.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetAppsRequest {
    pub apps: Vec<AppRequest>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AppRequest {
    pub name: String,
    pub entry: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<PortRequest>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io: Option<Io>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner: Option<bool>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PortRequest {
    /// Wider than a port so an out-of-range number gets our message.
    pub port: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BundleRequest {
    pub files: Vec<FileRequest>,
}

#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FileRequest {
    pub path: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<Encoding>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    Utf8,
    Base64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    Tcp,
    Udp,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }

    /// The Kubernetes spelling (`TCP`, `UDP`).
    pub fn kube(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Io {
    #[default]
    Tty,
    Streams,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PullPolicy {
    Missing,
    Always,
    Never,
}

impl PullPolicy {
    /// `imagePullPolicy`.
    pub fn kube(self) -> &'static str {
        match self {
            PullPolicy::Missing => "IfNotPresent",
            PullPolicy::Always => "Always",
            PullPolicy::Never => "Never",
        }
    }
}

// ------------------------------------------------------- validated types

/// A declared port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Port {
    pub port: u16,
    pub protocol: Protocol,
}

impl Port {
    pub fn tcp(port: u16) -> Port {
        Port {
            port,
            protocol: Protocol::Tcp,
        }
    }

    /// `tcp/8080`: the key ports are compared by.
    pub fn key(self) -> String {
        format!("{}/{}", self.protocol.as_str(), self.port)
    }
}

/// One validated app.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppSpec {
    pub name: String,
    /// Normalised path relative to the workspace root.
    pub entry: String,
    pub command: Option<Vec<String>>,
    pub image: Option<String>,
    /// In the order declared, no duplicates.
    pub ports: Vec<Port>,
    pub io: Io,
    /// Run under `kubegate app-runner` (when the engine enables it).
    pub runner: bool,
}

impl AppSpec {
    /// The container's name.
    pub fn container(&self) -> String {
        format!("app-{}", self.name)
    }
}

/// A validated session: everything but the bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSpec {
    pub apps: Vec<AppSpec>,
    /// Sorted by name (JSON objects carry no order).
    pub env: Vec<(String, String)>,
    pub image: Option<String>,
    pub pull_policy: Option<PullPolicy>,
}

/// One decoded bundle file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    pub path: String,
    pub data: Vec<u8>,
}

/// The decoded, checked bundle.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bundle {
    pub files: Vec<BundleFile>,
    pub total_bytes: u64,
}

/// The bundle limits (the engine builds them from the config's
/// `[sessions]`; `kubegate dev` checks its bundle against the defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BundleLimits {
    /// All files, decoded (`max_bundle_bytes`).
    pub max_bundle_bytes: u64,
    /// One file, decoded (`max_file_bytes`).
    pub max_file_bytes: u64,
    /// Files in a bundle (`max_files`).
    pub max_files: u64,
}

impl Default for BundleLimits {
    /// The daemon's defaults: 64 MiB in all, 8 MiB per file, 10,000 files
    /// (a test in `session::engine::settings` keeps them equal to the
    /// config's).
    fn default() -> Self {
        BundleLimits {
            max_bundle_bytes: 64 << 20,
            max_file_bytes: 8 << 20,
            max_files: 10_000,
        }
    }
}

// ------------------------------------------------------------ validation

fn bad(code: Code, msg: String) -> ApiError {
    ApiError::new(code, msg)
}

/// Parses and validates a `POST /v1/sessions` body.
pub fn parse_start(body: &[u8], limits: BundleLimits) -> Result<(SessionSpec, Bundle), ApiError> {
    let req: StartRequest = serde_json::from_slice(body)
        .map_err(|e| bad(Code::BadRequest, format!("invalid start request: {e}")))?;
    validate_start(req, limits)
}

/// Parses and validates a `PUT …/apps` body.
pub fn parse_set_apps(body: &[u8]) -> Result<Vec<AppSpec>, ApiError> {
    let req: SetAppsRequest = serde_json::from_slice(body)
        .map_err(|e| bad(Code::BadRequest, format!("invalid apps request: {e}")))?;
    validate_apps(req.apps)
}

/// Validates a parsed start request.
pub fn validate_start(
    req: StartRequest,
    limits: BundleLimits,
) -> Result<(SessionSpec, Bundle), ApiError> {
    let apps = validate_apps(req.apps)?;
    validate_env_and_image(&req.env, req.image.as_deref())?;
    let bundle = validate_bundle(req.bundle, limits)?;
    let present: BTreeSet<&str> = bundle.files.iter().map(|f| f.path.as_str()).collect();
    for (i, a) in apps.iter().enumerate() {
        if !present.contains(a.entry.as_str()) {
            return Err(bad(
                Code::InvalidBundle,
                format!(
                    "apps[{i}].entry: {:?} is not in the bundle (the app would wait for it forever)",
                    a.entry
                ),
            ));
        }
    }
    Ok((
        SessionSpec {
            apps,
            env: req.env.into_iter().collect(),
            image: req.image,
            pull_policy: req.pull_policy,
        },
        bundle,
    ))
}

/// Validates a start request's session env and image (`kubegate dev`
/// checks its manifest with this before sending anything).
pub fn validate_env_and_image(
    env: &BTreeMap<String, String>,
    image: Option<&str>,
) -> Result<(), ApiError> {
    if env.len() > MAX_ENV {
        return Err(bad(
            Code::BadRequest,
            format!("env: more than {MAX_ENV} variables"),
        ));
    }
    for (k, v) in env {
        check_env_name(k).map_err(|m| bad(Code::BadRequest, format!("env.{k}: {m}")))?;
        if v.contains('\0') {
            return Err(bad(
                Code::BadRequest,
                format!("env.{k}: the value contains NUL"),
            ));
        }
    }
    if let Some(i) = image {
        check_image(i).map_err(|m| bad(Code::BadRequest, format!("image: {m}")))?;
    }
    Ok(())
}

/// Validates an app set (start or `PUT …/apps`).
pub fn validate_apps(apps: Vec<AppRequest>) -> Result<Vec<AppSpec>, ApiError> {
    if apps.is_empty() {
        return Err(bad(Code::BadRequest, "apps: at least one app".into()));
    }
    if apps.len() > MAX_APPS {
        return Err(bad(
            Code::BadRequest,
            format!("apps: more than {MAX_APPS} apps"),
        ));
    }
    let mut names = BTreeSet::new();
    let mut owners: BTreeMap<Port, String> = BTreeMap::new();
    let mut out = Vec::with_capacity(apps.len());
    let n = apps.len();
    for (i, a) in apps.into_iter().enumerate() {
        let at = |f: &str| format!("apps[{i}].{f}");
        check_app_name(&a.name)
            .map_err(|e| bad(e.code(), format!("{}: {:?}: {e}", at("name"), a.name)))?;
        if !names.insert(a.name.clone()) {
            return Err(bad(
                Code::DuplicateAppName,
                format!("{}: {:?} is used by another app", at("name"), a.name),
            ));
        }
        check_canonical_path(&a.entry)
            .map_err(|m| bad(Code::InvalidPath, format!("{}: {m}", at("entry"))))?;
        if let Some(cmd) = &a.command {
            if cmd.first().is_none_or(|c| c.is_empty()) {
                return Err(bad(
                    Code::BadRequest,
                    format!(
                        "{}: must name a program (a non-empty first element)",
                        at("command")
                    ),
                ));
            }
            if cmd.iter().any(|c| c.contains('\0')) {
                return Err(bad(
                    Code::BadRequest,
                    format!("{}: an argument contains NUL", at("command")),
                ));
            }
        }
        if let Some(img) = &a.image {
            check_image(img).map_err(|m| bad(Code::BadRequest, format!("{}: {m}", at("image"))))?;
        }
        let mut ports = Vec::new();
        for (j, p) in a.ports.unwrap_or_default().into_iter().enumerate() {
            let pat = at(&format!("ports[{j}]"));
            let num = u16::try_from(p.port)
                .ok()
                .filter(|&x| x >= 1)
                .ok_or_else(|| {
                    bad(
                        Code::BadRequest,
                        format!("{pat}.port: {} is not a port (1..65535)", p.port),
                    )
                })?;
            let port = Port {
                port: num,
                protocol: p.protocol.unwrap_or(Protocol::Tcp),
            };
            if port.protocol == Protocol::Tcp {
                if num == AGENT_PORT {
                    return Err(bad(
                        Code::PortConflict,
                        format!("{pat}: tcp port {num} is the workspace agent's"),
                    ));
                }
                if (INSPECT_BASE_PORT..INSPECT_BASE_PORT + n as u16).contains(&num) {
                    return Err(bad(
                        Code::PortConflict,
                        format!(
                            "{pat}: tcp port {num} carries app {}'s debug stream",
                            num - INSPECT_BASE_PORT
                        ),
                    ));
                }
            }
            if let Some(owner) = owners.get(&port) {
                let who = if *owner == a.name {
                    "this app already".to_string()
                } else {
                    format!("app {owner:?}")
                };
                return Err(bad(
                    Code::PortConflict,
                    format!(
                        "{pat}: {} port {num} is already declared by {who}",
                        port.protocol.as_str()
                    ),
                ));
            }
            owners.insert(port, a.name.clone());
            ports.push(port);
        }
        out.push(AppSpec {
            name: a.name,
            entry: a.entry,
            command: a.command,
            image: a.image,
            ports,
            io: a.io.unwrap_or_default(),
            runner: a.runner.unwrap_or(true),
        });
    }
    Ok(out)
}

fn validate_bundle(b: BundleRequest, limits: BundleLimits) -> Result<Bundle, ApiError> {
    if b.files.len() as u64 > limits.max_files {
        return Err(bad(
            Code::InvalidBundle,
            format!(
                "bundle.files: {} files, more than the limit of {}",
                b.files.len(),
                limits.max_files
            ),
        ));
    }
    let mut files = Vec::with_capacity(b.files.len());
    let mut total: u64 = 0;
    let mut seen = BTreeSet::new();
    for (i, f) in b.files.into_iter().enumerate() {
        let at = format!("bundle.files[{i}]");
        check_canonical_path(&f.path)
            .map_err(|m| bad(Code::InvalidPath, format!("{at}.path: {m}")))?;
        if !seen.insert(f.path.clone()) {
            return Err(bad(
                Code::InvalidBundle,
                format!("{at}.path: {:?} appears twice", f.path),
            ));
        }
        let data = match f.encoding.unwrap_or(Encoding::Utf8) {
            Encoding::Utf8 => f.content.into_bytes(),
            Encoding::Base64 => base64::engine::general_purpose::STANDARD
                .decode(f.content.as_bytes())
                .map_err(|e| {
                    bad(
                        Code::InvalidBundle,
                        format!("{at}.content: not valid base64 ({e})"),
                    )
                })?,
        };
        let size = data.len() as u64;
        if size > limits.max_file_bytes {
            return Err(bad(
                Code::InvalidBundle,
                format!(
                    "{at}: {:?} is {size} bytes, more than the limit of {} per file",
                    f.path, limits.max_file_bytes
                ),
            ));
        }
        total += size;
        if total > limits.max_bundle_bytes {
            return Err(bad(
                Code::InvalidBundle,
                format!(
                    "bundle: more than the limit of {} bytes in all",
                    limits.max_bundle_bytes
                ),
            ));
        }
        files.push(BundleFile { path: f.path, data });
    }
    // A path that is also another path's folder cannot be written.
    for p in &seen {
        let mut folder = p.as_str();
        while let Some((parent, _)) = folder.rsplit_once('/') {
            if seen.contains(parent) {
                return Err(bad(
                    Code::InvalidBundle,
                    format!("bundle: {parent:?} is both a file and the folder of {p:?}"),
                ));
            }
            folder = parent;
        }
    }
    Ok(Bundle {
        files,
        total_bytes: total,
    })
}

/// Why an app name is refused ([`check_app_name`]); `Display` is the
/// message after the field, [`AppNameError::code`] the API code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppNameError {
    /// Not a DNS label.
    Label(NameError),
    /// Longer than [`MAX_APP_NAME`].
    TooLong,
    /// [`RESERVED_APP_NAME`].
    Reserved,
}

impl AppNameError {
    /// `INVALID_APP_NAME`, or `RESERVED_APP_NAME`.
    pub fn code(&self) -> Code {
        match self {
            AppNameError::Label(_) | AppNameError::TooLong => Code::InvalidAppName,
            AppNameError::Reserved => Code::ReservedAppName,
        }
    }
}

impl fmt::Display for AppNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppNameError::Label(e) => write!(f, "{e}"),
            AppNameError::TooLong => write!(
                f,
                "longer than {MAX_APP_NAME} characters (the container is named app-<name>)"
            ),
            AppNameError::Reserved => f.write_str("is reserved for the workspace container"),
        }
    }
}

impl std::error::Error for AppNameError {}

/// An app name: a DNS label of at most [`MAX_APP_NAME`] characters, not
/// [`RESERVED_APP_NAME`].
pub fn check_app_name(name: &str) -> Result<(), AppNameError> {
    check_dns_label(name).map_err(AppNameError::Label)?;
    if name.len() > MAX_APP_NAME {
        return Err(AppNameError::TooLong);
    }
    if name == RESERVED_APP_NAME {
        return Err(AppNameError::Reserved);
    }
    Ok(())
}

/// Why a start or app-set request's path (an entry, a bundle file) is
/// refused ([`check_canonical_path`]): the path (when it is worth showing)
/// and the rule; `Display` is the message after the field.
///
/// Not the workspace agent's
/// [`WorkspacePathError`](crate::agent::wire::paths::WorkspacePathError):
/// that one is `paths::normalize`'s, which takes a client's loose path
/// (`./a//b/`, `a/../b`) and normalises it, while a path here must already
/// be in normal form (the spec compares entries with bundle paths as
/// strings). Both share the length limits
/// ([`MAX_PATH_BYTES`], [`MAX_NAME_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CanonicalPathError {
    Empty,
    /// Longer than [`MAX_PATH_BYTES`].
    TooLong,
    Nul(String),
    Absolute(String),
    /// An empty component (`a//b`, a trailing `/`).
    EmptyComponent(String),
    /// A `.` component.
    DotComponent(String),
    /// A `..` component.
    Leaves(String),
    /// A component longer than [`MAX_NAME_BYTES`].
    LongComponent(String),
}

impl fmt::Display for CanonicalPathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CanonicalPathError::Empty => f.write_str("the path is empty"),
            CanonicalPathError::TooLong => {
                write!(f, "the path is longer than {MAX_PATH_BYTES} bytes")
            }
            CanonicalPathError::Nul(p) => write!(f, "{p:?} contains NUL"),
            CanonicalPathError::Absolute(p) => {
                write!(f, "{p:?} is absolute (paths are relative to the workspace)")
            }
            CanonicalPathError::EmptyComponent(p) => {
                write!(f, "{p:?} is not normalised (an empty component)")
            }
            CanonicalPathError::DotComponent(p) => {
                write!(f, "{p:?} is not normalised (a `.` component)")
            }
            CanonicalPathError::Leaves(p) => write!(f, "{p:?} leaves the workspace (`..`)"),
            CanonicalPathError::LongComponent(p) => {
                write!(
                    f,
                    "{p:?} has a component longer than {MAX_NAME_BYTES} bytes"
                )
            }
        }
    }
}

impl std::error::Error for CanonicalPathError {}

/// A start or app-set request's workspace path, already in normal form:
/// not empty, at most [`MAX_PATH_BYTES`], no NUL, not absolute, normalised
/// (no empty, `.` or `..` component, no trailing `/`), each component at
/// most [`MAX_NAME_BYTES`]. So it always stays inside the workspace root
/// (symlinks are the agent's concern).
///
/// Every path `agent::wire::paths::normalize` returns passes this check;
/// the converse does not hold: the agent also refuses backslashes, names
/// starting with `.kubegate-tmp-` and paths deeper than 128 components,
/// which this check lets through (a bundle file so named is refused by the
/// agent when the workspace is seeded).
pub fn check_canonical_path(p: &str) -> Result<(), CanonicalPathError> {
    if p.is_empty() {
        return Err(CanonicalPathError::Empty);
    }
    if p.len() > MAX_PATH_BYTES {
        return Err(CanonicalPathError::TooLong);
    }
    let path = || p.to_string();
    if p.contains('\0') {
        return Err(CanonicalPathError::Nul(path()));
    }
    if p.starts_with('/') {
        return Err(CanonicalPathError::Absolute(path()));
    }
    for c in p.split('/') {
        match c {
            "" => return Err(CanonicalPathError::EmptyComponent(path())),
            "." => return Err(CanonicalPathError::DotComponent(path())),
            ".." => return Err(CanonicalPathError::Leaves(path())),
            _ if c.len() > MAX_NAME_BYTES => return Err(CanonicalPathError::LongComponent(path())),
            _ => {}
        }
    }
    Ok(())
}

/// Why a session env name is refused (`Display`: the message after
/// `env.NAME: `).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EnvNameError {
    /// Not `[A-Za-z_][A-Za-z0-9_]*` of at most 256 bytes.
    NotAName,
    /// `POD_IP` or `KUBEGATE_*`.
    SetByKubegate,
}

impl fmt::Display for EnvNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EnvNameError::NotAName => "not a variable name ([A-Za-z_][A-Za-z0-9_]*)",
            EnvNameError::SetByKubegate => "is set by kubegate",
        })
    }
}

/// An env name: a C identifier, not one kubegate sets (`POD_IP`,
/// `KUBEGATE_*`).
fn check_env_name(k: &str) -> Result<(), EnvNameError> {
    let b = k.as_bytes();
    let ok = !b.is_empty()
        && k.len() <= 256
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if !ok {
        return Err(EnvNameError::NotAName);
    }
    if k == "POD_IP" || k.starts_with("KUBEGATE_") {
        return Err(EnvNameError::SetByKubegate);
    }
    Ok(())
}

#[cfg(test)]
#[path = "spec_tests.rs"]
mod tests;
