//! Where a [`Connection`] comes from: kubeconfig files (loaded, merged and
//! resolved for one context), the in-cluster service account, or a
//! kubeconfig handed over as a string (the embedded sim). Also the
//! [`Credentials`](super::connection::Credentials) implementations that
//! need refreshing: token files ([`TokenFile`]) and exec credential plugins
//! ([`ExecPlugin`]).
//!
//! What it owns: reading and merging kubeconfig YAML (KUBECONFIG order,
//! first wins), resolving relative paths against the file that named them,
//! decoding and validating certificates and keys up front (a key that does
//! not match its certificate is a load error here, not a panic in ureq
//! later), and error messages that name the file and key at fault.
//!
//! What it never does: read the process environment or home folder on its
//! own (everything comes through [`Env`], so tests inject it), open network
//! connections, log or print secrets (every `Debug` here redacts, and error
//! messages never quote token, key or certificate bytes), or support the
//! deliberately rejected settings: `proxy-url`, basic auth
//! (`username`/`password`), `auth-provider`, impersonation (`as`…), and
//! interactive exec plugins. Each of those is a clear
//! [`KubeconfigErrorKind::Unsupported`] error rather than a silent downgrade.
//!
//! Everything here is synchronous; an exec plugin runs on the calling
//! thread, bounded by a timeout.

mod error;
mod exec;
mod in_cluster;
mod kubeconfig;
mod pem;
mod token_file;
mod yaml;

pub use error::{KubeconfigError, KubeconfigErrorKind};
pub use exec::{ExecApiVersion, ExecPlugin, ExecSpec, DEFAULT_EXEC_TIMEOUT};
pub use in_cluster::{in_cluster, SERVICE_ACCOUNT_DIR};
pub use token_file::{TokenFile, TOKEN_FILE_MAX_AGE};

use super::connection::Connection;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment the loader sees: variables (`KUBECONFIG`, `HOME`,
/// `KUBERNETES_SERVICE_HOST`, `PATH` for exec plugins…) and, through them,
/// the home folder. Exec plugins inherit exactly these variables (plus their
/// own `env`), so a test controls the plugin's `PATH` too.
#[derive(Clone, Default)]
pub struct Env {
    vars: BTreeMap<OsString, OsString>,
}

impl Env {
    /// A snapshot of this process's environment.
    pub fn process() -> Env {
        Env {
            vars: std::env::vars_os().collect(),
        }
    }

    /// No variables at all.
    pub fn empty() -> Env {
        Env::default()
    }

    /// Sets one variable (builder style).
    pub fn with(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Env {
        self.set(key, value);
        self
    }

    pub fn set(&mut self, key: impl Into<OsString>, value: impl Into<OsString>) {
        self.vars.insert(key.into(), value.into());
    }

    pub fn remove(&mut self, key: &str) {
        self.vars.remove(OsStr::new(key));
    }

    pub fn get(&self, key: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(key)).map(OsString::as_os_str)
    }

    /// The variable when it is set, non-empty and UTF-8.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key)
            .and_then(OsStr::to_str)
            .filter(|s| !s.is_empty())
    }

    /// `$HOME`, when set and non-empty.
    pub fn home(&self) -> Option<PathBuf> {
        self.get("HOME")
            .filter(|h| !h.is_empty())
            .map(PathBuf::from)
    }

    pub fn vars(&self) -> impl Iterator<Item = (&OsStr, &OsStr)> {
        self.vars
            .iter()
            .map(|(k, v)| (k.as_os_str(), v.as_os_str()))
    }
}

impl fmt::Debug for Env {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only: values may be secrets (AWS keys, tokens).
        f.debug_struct("Env")
            .field("vars", &self.vars.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// What [`load`] and [`auto`] read.
#[derive(Clone, Debug)]
pub struct LoadOptions {
    /// An explicit kubeconfig file (like `kubectl --kubeconfig`): it must
    /// exist, and `KUBECONFIG` is then ignored. `None`: the `KUBECONFIG`
    /// path list (merged, first wins per entry name and for
    /// current-context; missing files skipped), else `$HOME/.kube/config`.
    pub kubeconfig: Option<PathBuf>,
    /// The context to use instead of `current-context`.
    pub context: Option<String>,
    /// Variables and home folder. `LoadOptions::default()` snapshots the
    /// process environment; tests set their own.
    pub env: Env,
    /// The service-account folder for in-cluster configuration.
    pub service_account_dir: PathBuf,
    /// How long an exec credential plugin may run before it is killed.
    pub exec_timeout: Duration,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions::with_env(Env::process())
    }
}

impl LoadOptions {
    /// Defaults, with the given environment instead of the process's.
    pub fn with_env(env: Env) -> LoadOptions {
        LoadOptions {
            kubeconfig: None,
            context: None,
            env,
            service_account_dir: PathBuf::from(SERVICE_ACCOUNT_DIR),
            exec_timeout: DEFAULT_EXEC_TIMEOUT,
        }
    }
}

/// Loads the kubeconfig files `opts` points at and resolves the chosen
/// context into a [`Connection`].
pub fn load(opts: &LoadOptions) -> Result<Connection, KubeconfigError> {
    let files = kubeconfig::read_files(opts)?;
    kubeconfig::resolve(
        &files,
        opts.context.as_deref(),
        &opts.env,
        opts.exec_timeout,
    )
}

/// Resolves a kubeconfig given as text (the embedded sim hands its own over
/// this way). Relative paths resolve against `dir`; exec plugins, if any,
/// inherit this process's environment.
pub fn from_kubeconfig_str(
    yaml: &str,
    dir: &Path,
    context: Option<&str>,
) -> Result<Connection, KubeconfigError> {
    from_kubeconfig_str_with(yaml, dir, context, &LoadOptions::default())
}

/// [`from_kubeconfig_str`] with an explicit environment and exec timeout
/// (`opts.kubeconfig` is ignored; `context` wins over `opts.context`).
pub fn from_kubeconfig_str_with(
    yaml: &str,
    dir: &Path,
    context: Option<&str>,
    opts: &LoadOptions,
) -> Result<Connection, KubeconfigError> {
    let file = kubeconfig::parse_file(yaml, kubeconfig::INLINE_LABEL, dir)?;
    let context = context.or(opts.context.as_deref());
    kubeconfig::resolve(&[file], context, &opts.env, opts.exec_timeout)
}

/// True when the in-cluster variables `KUBERNETES_SERVICE_HOST` and
/// `KUBERNETES_SERVICE_PORT` are both set.
pub fn is_in_cluster(env: &Env) -> bool {
    env.get_str("KUBERNETES_SERVICE_HOST").is_some()
        && env.get_str("KUBERNETES_SERVICE_PORT").is_some()
}

/// The in-cluster service account when running in a pod, else the
/// kubeconfig. An explicit `opts.kubeconfig` or `opts.context` means the
/// caller asked for a kubeconfig, so those always load one.
pub fn auto(opts: &LoadOptions) -> Result<Connection, KubeconfigError> {
    if opts.kubeconfig.is_none() && opts.context.is_none() && is_in_cluster(&opts.env) {
        in_cluster(&opts.env, &opts.service_account_dir)
    } else {
        load(opts)
    }
}
