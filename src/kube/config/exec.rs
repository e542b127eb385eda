//! Exec credential plugins (`users[].exec`, `client.authentication.k8s.io`
//! `v1` and `v1beta1`): run the command with its args and env (on top of
//! the loader's [`Env`]), `KUBERNETES_EXEC_INFO` set to the ExecCredential
//! request, and read an ExecCredential from its stdout: a token, or a client
//! certificate and key, and an optional expiry. The result is cached until
//! shortly before it expires, or until [`Credentials::invalidate`] (a 401).
//!
//! The plugin never gets a terminal (stdin is `/dev/null`, `interactive:
//! false`), runs in its own process group, and is killed with that group
//! when it outlives its timeout. It is reaped with `Child::wait` on its own
//! pid only, never `waitpid(-1)`. Errors carry the plugin's stderr tail (its
//! diagnostics) but never its stdout (the credential).

use super::error::{KubeconfigError, KubeconfigErrorKind as Kind};
use super::pem::{self, PairError};
use super::yaml::{FieldError, Node};
use super::Env;
use crate::kube::connection::{ClientCert, Credentials, CredentialsError};
use parking_lot::Mutex;
use std::fmt;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime};

/// How long a plugin may run (cloud CLIs can be slow on a cold start).
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(60);

/// A credential is renewed this long before it expires (or after three
/// quarters of its lifetime, when that is shorter).
const REFRESH_MARGIN: Duration = Duration::from_secs(30);

const MAX_STDOUT: usize = 1 << 20;
const MAX_STDERR: usize = 64 << 10;
/// How much of stderr an error shows (its end: the last words matter).
const STDERR_SHOWN: usize = 2048;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecApiVersion {
    V1,
    V1Beta1,
}

impl ExecApiVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            ExecApiVersion::V1 => "client.authentication.k8s.io/v1",
            ExecApiVersion::V1Beta1 => "client.authentication.k8s.io/v1beta1",
        }
    }
}

/// One `users[].exec` entry, resolved.
#[derive(Clone)]
pub struct ExecSpec {
    pub api_version: ExecApiVersion,
    /// As written: a bare name is looked up in `PATH`; a relative path with
    /// a `/` resolves against `dir`.
    pub command: String,
    pub args: Vec<String>,
    /// `env` entries, added to the loader's environment.
    pub env: Vec<(String, String)>,
    pub install_hint: Option<String>,
    /// `spec.cluster` of the request, when `provideClusterInfo` is true.
    pub cluster_info: Option<serde_json::Value>,
    /// The kubeconfig's folder.
    pub dir: PathBuf,
    /// `FILE: users[NAME].exec`, the prefix of every error.
    pub label: String,
    pub timeout: Duration,
}

impl fmt::Debug for ExecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Args and env values can hold secrets (`--token`, AWS keys).
        f.debug_struct("ExecSpec")
            .field("api_version", &self.api_version)
            .field("command", &self.command)
            .field("args", &self.args.len())
            .field(
                "env",
                &self.env.iter().map(|(k, _)| k.as_str()).collect::<Vec<_>>(),
            )
            .field("provide_cluster_info", &self.cluster_info.is_some())
            .field("label", &self.label)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl ExecSpec {
    /// Reads a `users[].exec` mapping.
    pub(crate) fn from_yaml(
        n: &Node<'_>,
        file_label: &str,
        key: &str,
        dir: &Path,
        cluster_info: &serde_json::Value,
    ) -> Result<ExecSpec, KubeconfigError> {
        let fe = |e: FieldError| KubeconfigError::at(Kind::Invalid, file_label, e.key, e.message);
        let k = |s: &str| format!("{key}.{s}");
        n.expect_map(key).map_err(fe)?;
        let api_version = match n.opt_str("apiVersion", &k("apiVersion")).map_err(fe)? {
            Some("client.authentication.k8s.io/v1") => ExecApiVersion::V1,
            Some("client.authentication.k8s.io/v1beta1") => ExecApiVersion::V1Beta1,
            Some("client.authentication.k8s.io/v1alpha1") => {
                return Err(KubeconfigError::at(
                    Kind::Unsupported,
                    file_label,
                    k("apiVersion"),
                    "client.authentication.k8s.io/v1alpha1 was removed in Kubernetes 1.24; \
                     use v1 or v1beta1",
                ))
            }
            Some(other) => {
                return Err(KubeconfigError::at(
                    Kind::Invalid,
                    file_label,
                    k("apiVersion"),
                    format!(
                        "{other:?} is not an exec credential version (expected \
                         client.authentication.k8s.io/v1 or /v1beta1)"
                    ),
                ))
            }
            None => {
                return Err(KubeconfigError::at(
                    Kind::Invalid,
                    file_label,
                    k("apiVersion"),
                    "missing",
                ))
            }
        };
        let command = n
            .opt_str("command", &k("command"))
            .map_err(fe)?
            .ok_or_else(|| KubeconfigError::at(Kind::Invalid, file_label, k("command"), "missing"))?
            .to_string();
        let args = n.opt_str_list("args", &k("args")).map_err(fe)?;
        let mut env = Vec::new();
        for (i, e) in n.opt_seq("env", &k("env")).map_err(fe)?.iter().enumerate() {
            let ek = format!("{key}.env[{i}]");
            e.expect_map(&ek).map_err(fe)?;
            let name = e
                .opt_str("name", &format!("{ek}.name"))
                .map_err(fe)?
                .ok_or_else(|| {
                    KubeconfigError::at(Kind::Invalid, file_label, format!("{ek}.name"), "missing")
                })?;
            let value = e
                .opt_str("value", &format!("{ek}.value"))
                .map_err(fe)?
                .unwrap_or("");
            env.push((name.to_string(), value.to_string()));
        }
        match n
            .opt_str("interactiveMode", &k("interactiveMode"))
            .map_err(fe)?
        {
            None | Some("Never") | Some("IfAvailable") => {}
            Some("Always") => {
                return Err(KubeconfigError::at(
                    Kind::Unsupported,
                    file_label,
                    k("interactiveMode"),
                    "the plugin needs a terminal (Always), but kubegate runs plugins \
                     without one; log in with the plugin first, or use IfAvailable",
                ))
            }
            Some(other) => {
                return Err(KubeconfigError::at(
                    Kind::Invalid,
                    file_label,
                    k("interactiveMode"),
                    format!("{other:?} is not Never, IfAvailable or Always"),
                ))
            }
        }
        let install_hint = n
            .opt_str("installHint", &k("installHint"))
            .map_err(fe)?
            .map(str::to_string);
        let provide = n
            .opt_bool("provideClusterInfo", &k("provideClusterInfo"))
            .map_err(fe)?
            .unwrap_or(false);
        Ok(ExecSpec {
            api_version,
            command,
            args,
            env,
            install_hint,
            cluster_info: provide.then(|| cluster_info.clone()),
            dir: dir.to_path_buf(),
            label: format!("{file_label}: {key}"),
            timeout: DEFAULT_EXEC_TIMEOUT,
        })
    }

    /// The `KUBERNETES_EXEC_INFO` value.
    pub fn exec_info(&self) -> String {
        let mut spec = serde_json::json!({ "interactive": false });
        if let Some(c) = &self.cluster_info {
            spec["cluster"] = c.clone();
        }
        serde_json::json!({
            "apiVersion": self.api_version.as_str(),
            "kind": "ExecCredential",
            "spec": spec,
        })
        .to_string()
    }
}

/// What one successful run produced.
struct Cached {
    token: Option<String>,
    cert: Option<ClientCert>,
    /// When to run the plugin again; `None`: no expiry given.
    refresh_at: Option<SystemTime>,
}

impl Cached {
    fn fresh(&self, now: SystemTime) -> bool {
        self.refresh_at.is_none_or(|t| now < t)
    }
}

/// [`Credentials`] from an exec plugin. One run at a time: concurrent
/// callers wait for the run in progress and share its result.
pub struct ExecPlugin {
    spec: ExecSpec,
    env: Env,
    cache: Mutex<Option<Cached>>,
}

impl fmt::Debug for ExecPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecPlugin")
            .field("spec", &self.spec)
            .field("cached", &self.cache.lock().is_some())
            .finish_non_exhaustive()
    }
}

impl ExecPlugin {
    /// `env` is the environment the plugin inherits (its `PATH` is also
    /// where a bare command name is looked up).
    pub fn new(spec: ExecSpec, env: Env) -> ExecPlugin {
        ExecPlugin {
            spec,
            env,
            cache: Mutex::new(None),
        }
    }

    pub fn spec(&self) -> &ExecSpec {
        &self.spec
    }

    fn err(&self, msg: impl fmt::Display) -> CredentialsError {
        CredentialsError(format!(
            "{}: exec plugin {:?}: {msg}",
            self.spec.label, self.spec.command
        ))
    }

    fn not_found(&self, what: &str) -> CredentialsError {
        let hint = match &self.spec.install_hint {
            Some(h) => format!("\n{}", h.trim_end()),
            None => String::new(),
        };
        self.err(format!("{what}{hint}"))
    }

    /// Finds the executable: a path with a `/` (relative to the
    /// kubeconfig's folder), else the first match in the env's `PATH`.
    pub fn resolve_command(&self) -> Result<PathBuf, CredentialsError> {
        let cmd = &self.spec.command;
        if cmd.contains('/') {
            let p = super::kubeconfig::resolve_path(&self.spec.dir, cmd);
            return if is_executable(&p) {
                Ok(p)
            } else if p.exists() {
                Err(self.err(format!("{} is not an executable file", p.display())))
            } else {
                Err(self.not_found(&format!("{} does not exist", p.display())))
            };
        }
        if let Some(path) = self.env.get("PATH") {
            for dir in std::env::split_paths(path) {
                let dir = if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                };
                let p = dir.join(cmd);
                if is_executable(&p) {
                    return Ok(p);
                }
            }
        }
        Err(self.not_found("not found in PATH"))
    }

    /// The cached credential if fresh, else a new run's.
    fn current(&self) -> Result<(Option<String>, Option<ClientCert>), CredentialsError> {
        let mut cache = self.cache.lock();
        if let Some(c) = cache.as_ref() {
            if c.fresh(SystemTime::now()) {
                return Ok((c.token.clone(), c.cert.clone()));
            }
        }
        let c = self.run()?;
        let out = (c.token.clone(), c.cert.clone());
        *cache = Some(c);
        Ok(out)
    }

    /// Runs the plugin once and parses its answer.
    fn run(&self) -> Result<Cached, CredentialsError> {
        let program = self.resolve_command()?;
        let mut cmd = Command::new(&program);
        cmd.args(&self.spec.args)
            .env_clear()
            .envs(self.env.vars())
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)))
            .env("KUBERNETES_EXEC_INFO", self.spec.exec_info())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let started = Instant::now();
        let mut child = spawn(&mut cmd).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => self.not_found("not found"),
            _ => self.err(format!("cannot start {}: {e}", program.display())),
        })?;
        let out = run_to_end(&mut child, started + self.spec.timeout);
        let stderr_tail = tail(&out.stderr);
        let with_stderr = |msg: String| {
            if stderr_tail.is_empty() {
                self.err(msg)
            } else {
                self.err(format!("{msg}; stderr: {stderr_tail}"))
            }
        };
        match out.end {
            End::TimedOut => {
                return Err(with_stderr(format!(
                    "did not finish within {:?} and was killed",
                    self.spec.timeout
                )))
            }
            End::WaitFailed(e) => return Err(self.err(format!("waiting for it failed: {e}"))),
            End::Exited(status) if !status.success() => {
                let how = match (status.code(), status.signal()) {
                    (Some(c), _) => format!("exited with status {c}"),
                    (None, Some(s)) => format!("was killed by signal {s}"),
                    _ => format!("failed ({status})"),
                };
                return Err(with_stderr(how));
            }
            End::Exited(_) => {}
        }
        if out.stdout_overflow {
            return Err(self.err("printed more than 1 MiB on stdout"));
        }
        parse_exec_credential(&out.stdout, self.spec.api_version, SystemTime::now())
            .map_err(|e| with_stderr(e.to_string()))
    }
}

/// `Command::spawn`, retried briefly on ETXTBSY: a freshly written plugin
/// can look busy while another thread's fork still holds its write fd
/// (the child closes it at exec). Seen with tests and installers alike.
fn spawn(cmd: &mut Command) -> std::io::Result<Child> {
    let mut pause = Duration::from_millis(5);
    for _ in 0..6 {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(pause);
                pause *= 2;
            }
            r => return r,
        }
    }
    cmd.spawn()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

impl Credentials for ExecPlugin {
    fn bearer(&self) -> Result<Option<String>, CredentialsError> {
        self.current().map(|(t, _)| t)
    }

    fn invalidate(&self) {
        *self.cache.lock() = None;
    }

    fn client_cert(&self) -> Result<Option<ClientCert>, CredentialsError> {
        self.current().map(|(_, c)| c)
    }
}

enum End {
    Exited(std::process::ExitStatus),
    TimedOut,
    WaitFailed(std::io::Error),
}

struct RunOutput {
    end: End,
    stdout: Vec<u8>,
    stdout_overflow: bool,
    stderr: Vec<u8>,
}

/// A pipe's bytes so far, and whether some were dropped (over the cap).
type Captured = Arc<Mutex<(Vec<u8>, bool)>>;

/// Collects a pipe into a shared buffer (at most `cap` bytes kept; the rest
/// is drained so the child never blocks on a full pipe).
fn collect(
    mut r: impl Read + Send + 'static,
    cap: usize,
    done: mpsc::Sender<()>,
    name: &str,
) -> Captured {
    let buf = Arc::new(Mutex::new((Vec::new(), false)));
    let b = buf.clone();
    // If the thread cannot start, `done` is dropped with the closure: the
    // caller sees the channel disconnect and still bounds the run.
    let _ = std::thread::Builder::new()
        .name(format!("kube-exec-{name}"))
        .spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match r.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => {
                        let mut g = b.lock();
                        let room = cap.saturating_sub(g.0.len());
                        g.0.extend_from_slice(&chunk[..n.min(room)]);
                        if n > room {
                            g.1 = true;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
            let _ = done.send(());
        });
    buf
}

/// Waits for both pipes to close and the child to exit, killing its
/// process group at `deadline`.
fn run_to_end(child: &mut Child, deadline: Instant) -> RunOutput {
    let (tx, rx) = mpsc::channel();
    let stdout = child
        .stdout
        .take()
        .map(|p| collect(p, MAX_STDOUT, tx.clone(), "out"));
    let stderr = child
        .stderr
        .take()
        .map(|p| collect(p, MAX_STDERR, tx.clone(), "err"));
    drop(tx);
    let pipes = stdout.is_some() as usize + stderr.is_some() as usize;
    let mut closed = 0;
    let mut timed_out = false;
    while closed < pipes {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(()) => closed += 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                timed_out = true;
                break;
            }
            // A reader thread could not start: fall through to waiting.
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let end = if timed_out {
        kill(child);
        End::TimedOut
    } else {
        // Both pipes closed: the child has almost always exited. Poll
        // briefly in case it closed them and lives on.
        let mut pause = Duration::from_millis(1);
        loop {
            match child.try_wait() {
                Ok(Some(st)) => break End::Exited(st),
                Ok(None) if Instant::now() >= deadline => {
                    kill(child);
                    break End::TimedOut;
                }
                Ok(None) => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(50));
                }
                Err(e) => break End::WaitFailed(e),
            }
        }
    };
    let take = |b: Option<Captured>| {
        b.map(|b| std::mem::take(&mut *b.lock()))
            .unwrap_or_default()
    };
    let (stdout, stdout_overflow) = take(stdout);
    let (stderr, _) = take(stderr);
    RunOutput {
        end,
        stdout,
        stdout_overflow,
        stderr,
    }
}

/// SIGKILL to the plugin's process group (it leads it), then reap it.
fn kill(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The end of stderr, one line, lossy UTF-8, without control characters.
fn tail(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    let s = s.trim();
    let start = s.len().saturating_sub(STDERR_SHOWN);
    let start = (start..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    let mut out: String = s[start..]
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if start > 0 {
        out.insert(0, '…');
    }
    out
}

fn clip(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

/// What is wrong with a plugin's ExecCredential output, in words that
/// never include the token or key (the caller adds the plugin's stderr).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CredentialOutputError(String);

impl fmt::Display for CredentialOutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<String> for CredentialOutputError {
    fn from(m: String) -> Self {
        CredentialOutputError(m)
    }
}

impl From<&str> for CredentialOutputError {
    fn from(m: &str) -> Self {
        CredentialOutputError(m.to_string())
    }
}

/// Parses an ExecCredential response. Error messages never include the
/// token or key.
fn parse_exec_credential(
    stdout: &[u8],
    want: ExecApiVersion,
    now: SystemTime,
) -> Result<Cached, CredentialOutputError> {
    if stdout.iter().all(u8::is_ascii_whitespace) {
        return Err("printed nothing on stdout (expected an ExecCredential)".into());
    }
    let v: serde_json::Value = serde_json::from_slice(stdout).map_err(|e| {
        format!(
            "stdout is not an ExecCredential JSON object (invalid JSON at line {} column {})",
            e.line(),
            e.column()
        )
    })?;
    let obj = v
        .as_object()
        .ok_or("stdout is not an ExecCredential JSON object")?;
    match obj.get("kind").and_then(|k| k.as_str()) {
        Some("ExecCredential") => {}
        Some(other) => {
            return Err(format!("kind is {:?}, expected ExecCredential", clip(other)).into())
        }
        None => return Err("kind is missing, expected ExecCredential".into()),
    }
    match obj.get("apiVersion").and_then(|k| k.as_str()) {
        Some(a) if a == want.as_str() => {}
        Some(a) => {
            return Err(format!(
                "apiVersion {:?} does not match the kubeconfig's {}",
                clip(a),
                want.as_str()
            )
            .into())
        }
        None => return Err(format!("apiVersion is missing, expected {}", want.as_str()).into()),
    }
    let status = obj
        .get("status")
        .and_then(|s| s.as_object())
        .ok_or("the ExecCredential has no status")?;
    let string = |k: &str| -> Result<Option<&str>, String> {
        match status.get(k) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) if s.is_empty() => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(format!("status.{k} is not a string")),
        }
    };
    let token = string("token")?.map(str::to_string);
    if token
        .as_deref()
        .is_some_and(|t| !super::kubeconfig::valid_token(t))
    {
        return Err("status.token contains spaces or control characters".into());
    }
    let cert = match (string("clientCertificateData")?, string("clientKeyData")?) {
        (None, None) => None,
        (Some(_), None) => return Err("status.clientKeyData is missing".into()),
        (None, Some(_)) => return Err("status.clientCertificateData is missing".into()),
        (Some(c), Some(k)) => {
            let chain = pem::certificates(c.as_bytes())
                .map_err(|m| format!("status.clientCertificateData: {m}"))?;
            let key =
                pem::private_key(k.as_bytes()).map_err(|m| format!("status.clientKeyData: {m}"))?;
            pem::check_pair(&chain, &key).map_err(|e| match e {
                PairError::Key(m) => format!("status.clientKeyData: {m}"),
                PairError::Cert(m) => format!("status.clientCertificateData: {m}"),
                PairError::Mismatch => {
                    "status.clientKeyData does not match status.clientCertificateData".into()
                }
            })?;
            Some(ClientCert { chain, key })
        }
    };
    if token.is_none() && cert.is_none() {
        return Err(
            "status has neither a token nor clientCertificateData and clientKeyData".into(),
        );
    }
    let refresh_at = match string("expirationTimestamp")? {
        None => None,
        Some(ts) => {
            let exp = crate::kube::time::parse_rfc3339(ts).ok_or_else(|| {
                format!(
                    "status.expirationTimestamp {:?} is not an RFC 3339 time",
                    clip(ts)
                )
            })?;
            let life = exp.duration_since(now).unwrap_or(Duration::ZERO);
            Some(exp - REFRESH_MARGIN.min(life / 4))
        }
    };
    Ok(Cached {
        token,
        cert,
        refresh_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1B1: ExecApiVersion = ExecApiVersion::V1Beta1;

    fn parse(s: &str) -> Result<Cached, CredentialOutputError> {
        parse_exec_credential(s.as_bytes(), V1B1, SystemTime::now())
    }

    #[test]
    fn parses_the_eks_fixture() {
        let text = include_str!(
            "../../../tests/fixtures/kube/kubeconfig/exec-credential-aws-eks-get-token.json"
        );
        let c = parse(text).expect("fixture");
        assert_eq!(
            c.token.as_deref(),
            Some("k8s-aws-v1.EXAMPLE_TOKEN_DATA_STRING...")
        );
        // Expired in 2024: not fresh now.
        assert!(!c.fresh(SystemTime::now()));
        let e = parse_exec_credential(text.as_bytes(), ExecApiVersion::V1, SystemTime::now())
            .err()
            .expect("wrong version");
        assert!(e.to_string().contains("does not match"), "{e}");
    }

    #[test]
    fn refresh_margin() {
        let now = SystemTime::now();
        let exp = now + Duration::from_secs(3600);
        let ts = crate::kube::time::rfc3339(exp);
        let c = parse_exec_credential(
            format!(r#"{{"kind":"ExecCredential","apiVersion":"{}","status":{{"token":"t","expirationTimestamp":"{ts}"}}}}"#, V1B1.as_str()).as_bytes(),
            V1B1,
            now,
        )
        .expect("ok");
        let at = c.refresh_at.expect("expiry");
        let before = exp.duration_since(at).expect("before expiry");
        assert!(before <= Duration::from_secs(31) && before >= Duration::from_secs(29));
        assert!(c.fresh(now));
    }

    #[test]
    fn bad_answers_never_echo_the_token() {
        let cases = [
            "",
            "not json s3cr3t",
            "[1,2]",
            r#"{"apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"s3cr3t"}}"#,
            r#"{"kind":"ExecCredential","status":{"token":"s3cr3t"}}"#,
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1"}"#,
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{}}"#,
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":5}}"#,
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"s3cr3t","expirationTimestamp":"soon"}}"#,
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"clientKeyData":"s3cr3t"}}"#,
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"clientKeyData":"-----BEGIN PRIVATE KEY-----\ns3cr3t\n-----END PRIVATE KEY-----\n","clientCertificateData":"x"}}"#,
        ];
        for c in cases {
            let e = parse(c).err().unwrap_or_else(|| panic!("accepted {c:?}"));
            assert!(!e.to_string().contains("s3cr3t"), "{c:?} -> {e}");
        }
    }

    #[test]
    fn tail_keeps_the_end() {
        let long = "x".repeat(5000) + "\nthe real error";
        let t = tail(long.as_bytes());
        assert!(t.starts_with('…') && t.ends_with("the real error"));
        assert!(t.len() <= STDERR_SHOWN + 4);
        assert_eq!(tail(b"  oops\n"), "oops");
    }
}
