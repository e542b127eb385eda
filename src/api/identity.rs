//! Who is asking: the authenticated principal ([`Identity`]) and the
//! workspaces it holds ([`Workspace`], `project/uid`). The front door makes
//! an `Identity` from a token (`server::auth`); the exec gateway and the
//! session routes decide with it. The configuration's `[[principal]]`
//! tables are read into these types.

use std::fmt;

use crate::kube::names::{check_dns_label, NameError};

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub name: String,
    pub workspaces: Vec<Workspace>,
    pub may_start_sessions: bool,
    /// The Kubernetes groups the daemon names in `Impersonate-Group` when it
    /// acts for this caller with `[cluster] impersonate` on (the user is
    /// `name`); the API server adds `system:authenticated` itself.
    pub kube_groups: Vec<String>,
    /// How the caller proved who it is.
    pub credential: Credential,
}

/// How a caller authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// A `[[principal]]`'s bearer token.
    Static,
    /// A verified OpenID Connect token (an ID token or a JWT access token).
    Oidc {
        /// The issuer that signed it (`iss`).
        issuer: String,
        /// The groups the issuer's `claim_mappings` gave (prefixed).
        groups: Vec<String>,
        /// The token's `exp`, seconds since the Unix epoch.
        expires_unix: u64,
    },
}

impl Identity {
    /// Whether this principal may act on `project/uid`.
    pub fn holds(&self, project: &str, uid: &str) -> bool {
        self.workspaces
            .iter()
            .any(|w| w.project == project && w.uid == uid)
    }
}

/// A workspace: `project` is the namespace, `uid` its identity (docs/exec.md#who-may-exec-where).
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

/// Longest workspace uid, in characters.
pub const MAX_UID_CHARS: usize = 256;

/// Why a string is not a workspace (`project/uid`); the display quotes the
/// string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceError {
    /// No `/`.
    NotProjectUid(String),
    /// The project is not a DNS label.
    Project { project: String, error: NameError },
    /// The uid is empty or white space.
    BlankUid(String),
    /// The uid is longer than [`MAX_UID_CHARS`].
    LongUid(String),
    /// The uid holds control characters.
    ControlInUid(String),
}

impl fmt::Display for WorkspaceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkspaceError::NotProjectUid(s) => write!(f, "{s:?} is not \"project/uid\""),
            WorkspaceError::Project { project, error } => {
                write!(f, "project {project:?}: {error}")
            }
            WorkspaceError::BlankUid(s) => write!(f, "{s:?}: the uid is blank"),
            WorkspaceError::LongUid(s) => {
                write!(
                    f,
                    "{s:?}: the uid is longer than {MAX_UID_CHARS} characters"
                )
            }
            WorkspaceError::ControlInUid(s) => {
                write!(f, "{s:?}: the uid contains control characters")
            }
        }
    }
}

impl std::error::Error for WorkspaceError {}

impl Workspace {
    /// Parses `project/uid` (project: DNS label; uid: not blank, at most
    /// [`MAX_UID_CHARS`] characters, no control characters).
    pub fn parse(s: &str) -> Result<Workspace, WorkspaceError> {
        let (project, uid) = s
            .split_once('/')
            .ok_or_else(|| WorkspaceError::NotProjectUid(s.into()))?;
        check_dns_label(project).map_err(|error| WorkspaceError::Project {
            project: project.into(),
            error,
        })?;
        if uid.trim().is_empty() {
            return Err(WorkspaceError::BlankUid(s.into()));
        }
        if uid.chars().count() > MAX_UID_CHARS {
            return Err(WorkspaceError::LongUid(s.into()));
        }
        if uid.chars().any(char::is_control) {
            return Err(WorkspaceError::ControlInUid(s.into()));
        }
        Ok(Workspace {
            project: project.into(),
            uid: uid.into(),
        })
    }
}
