//! Start-up, health routes and shutdown of `kubegate serve`.
//!
//! Order (front-door.md): config validated, state directory opened, cluster
//! reachable (`/version` answered; with `mode = "sim"` the embedded sim is
//! started first and the demo workspace created in it), the recorded
//! sessions restored (re-adopted or recreated, docs/sessions.md
//! "Re-adoption after a restart"; a failed pod list fails the start),
//! listener bound, the orphan reaper started, then ready: the one stdout line `kubegate listening on <URL>` and, under
//! systemd, `READY=1` on `NOTIFY_SOCKET`. SIGINT/SIGTERM stop the listener,
//! then the sim (its processes die with it), within the configured bound.
//! SIGHUP reopens the audit log and reloads the principals; under systemd
//! that reload is framed by `RELOADING=1` and `READY=1`,
//! and a stop starts with `STOPPING=1` (scripts/kubegate.service).
//!
//! Threads: the caller's (start-up, then waiting for a signal), the front
//! door's `door-*` threads (`http::Server`), and with the sim its own
//! (docs/ARCHITECTURE.md).

use std::io::{self, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::api::{ApiError, Code};
use crate::config::{ClusterMode, Config, ConfigError};
use crate::exec::frames::SUBPROTOCOL;
use crate::exec::gateway::{Gateway, InteractiveRequest, OneShotRequest, Settings};
use crate::exec::resolve::Ownership;
use crate::exec::validate::{invalid, ExecSpec, Limits};
use crate::http::{
    Admission, Admit, Context, Handler, HttpError, Reply, Request, Response, Server, ServerConfig,
    Upgrade,
};
use crate::kube::client::rest::Request as KubeRequest;
use crate::kube::client::{
    Api, Client, ClientOptions, Deployment, KubeError, Namespace, RetryPolicy,
};
use crate::kube::config::{Env, LoadOptions};
use crate::kube::connection::Connection;
use crate::kube::labels::MANAGED_BY_LABEL;
use crate::kube::remote::TermSize;
use crate::metrics::Metrics;
use crate::server::auth::{request_token, Identity, Principals};
use crate::server::limits::{Budget, BudgetFull, Caps, FrontDoorLimits, Kind, Permit};
use crate::sim::cluster::{Sim, SimOptions};
use parking_lot::RwLock;

/// The demo workspace the daemon creates in the embedded sim
/// (contract.md, "The example config").
pub const DEMO_PROJECT: &str = "demo";
pub const DEMO_UID: &str = "demo-uid";
pub const DEMO_DEPLOYMENT: &str = "hello";
/// The sim's kubeconfig, inside the state directory (mode 0600).
pub const SIM_KUBECONFIG: &str = "sim.kubeconfig";
/// Deadline of one `/readyz` probe of the cluster.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a `/readyz` result answers for on the overflow path.
const READY_CACHE: Duration = Duration::from_secs(60);

/// Why start-up failed: configuration (exit 2) or anything else (exit 1).
#[derive(Debug)]
pub enum StartError {
    Config(ConfigError),
    /// The configuration asks for something this host cannot give safely
    /// (exit code 2, as a configuration error: restarting will not help).
    Refused(String),
    Failed(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Config(e) => e.fmt(f),
            StartError::Refused(m) | StartError::Failed(m) => f.write_str(m),
        }
    }
}

impl StartError {
    pub fn exit_code(&self) -> i32 {
        match self {
            StartError::Config(_) | StartError::Refused(_) => 2,
            StartError::Failed(_) => 1,
        }
    }
}

fn failed(m: impl Into<String>) -> StartError {
    StartError::Failed(m.into())
}

/// A running daemon: the front door and, with `mode = "sim"`, the sim.
pub struct Daemon {
    server: Server,
    sim: Option<Sim>,
    url: String,
    grace: Duration,
    gateway: Arc<Gateway>,
    principals: Arc<RwLock<Arc<Principals>>>,
    engine: Arc<crate::session::engine::Engine>,
    /// Sim mode whose pods cannot run as their own users: one principal at
    /// most, also after a reload.
    sim_unconfined: bool,
}

impl Daemon {
    /// Starts everything up to a bound listener; the caller announces
    /// readiness ([`announce_ready`]).
    pub fn start(cfg: &Config) -> Result<Daemon, StartError> {
        warn_demo_token(cfg);
        let state_dir = &cfg.server.state_dir;
        open_state_dir(state_dir)?;
        log::info!("state directory {}", state_dir.display());

        let mut sim_unconfined = false;
        let (sim, conn) = match cfg.cluster.mode {
            ClusterMode::Sim => {
                let unconfined = sim_unconfined_reason(cfg);
                if let Some(why) = &unconfined {
                    if let Some(m) = sim_refusal(why, cfg.principals.len(), &cfg.server.listen) {
                        return Err(StartError::Refused(m));
                    }
                    log::warn!(
                        "sim mode without pod users ({why}): the sim's pods run as this daemon's user and can read its state (sessions, the sim's admin kubeconfig, the audit log); allowed because there is one principal at most and the front door is on loopback (docs/sim.md, \"Pod users\")"
                    );
                }
                sim_unconfined = unconfined.is_some();
                let (sim, conn) = start_sim(cfg)?;
                (Some(sim), conn)
            }
            ClusterMode::Kubeconfig => {
                let opts = LoadOptions {
                    kubeconfig: cfg.cluster.kubeconfig.clone(),
                    context: cfg.cluster.context.clone(),
                    ..LoadOptions::default()
                };
                let conn = crate::kube::config::load(&opts)
                    .map_err(|e| failed(format!("loading the kubeconfig: {e}")))?;
                (None, conn)
            }
            ClusterMode::InCluster => {
                let conn = crate::kube::config::in_cluster(
                    &Env::process(),
                    Path::new(crate::kube::config::SERVICE_ACCOUNT_DIR),
                )
                .map_err(|e| failed(format!("in-cluster configuration: {e}")))?;
                (None, conn)
            }
        };
        let server_url = conn.server.clone();
        let exec_conn = conn.clone();
        let client = Client::new(conn.clone())
            .map_err(|e| failed(format!("cluster client for {server_url}: {e}")))?;
        let probe = Client::with_options(
            conn,
            ClientOptions {
                timeout: PROBE_TIMEOUT,
                connect_timeout: PROBE_TIMEOUT,
                retry: RetryPolicy::none(),
            },
        )
        .map_err(|e| failed(format!("cluster client for {server_url}: {e}")))?;
        let version = cluster_version(&client)
            .map_err(|e| failed(format!("cluster at {server_url} is not reachable: {e}")))?;
        log::info!("cluster {server_url} answered /version: {version}");

        if sim.is_some() {
            seed_demo(&client, cfg)
                .map_err(|e| failed(format!("creating the demo workspace in the sim: {e}")))?;
            log::info!(
                "demo workspace {DEMO_PROJECT}/{DEMO_UID} ready (deployment {DEMO_DEPLOYMENT})"
            );
        }

        let tls = match (&cfg.server.tls_cert, &cfg.server.tls_key) {
            (Some(c), Some(k)) => {
                let cert = std::fs::read(c)
                    .map_err(|e| failed(format!("reading {}: {e}", c.display())))?;
                let key = std::fs::read(k)
                    .map_err(|e| failed(format!("reading {}: {e}", k.display())))?;
                Some(
                    crate::http::tls::server_config_from_pem(&cert, &key, None)
                        .map_err(|e| failed(format!("front-door TLS: {e}")))?,
                )
            }
            _ => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let limits = FrontDoorLimits::from_config(cfg);
        let server_cfg = ServerConfig {
            max_connections: usize::try_from(cfg.server.max_connections).unwrap_or(usize::MAX),
            max_connections_per_peer: limits.per_peer,
            head_grace: Duration::from_secs(cfg.server.head_grace_secs),
            min_head_bytes_per_sec: usize::try_from(cfg.server.min_head_bytes_per_sec)
                .unwrap_or(usize::MAX),
            keep_alive_idle: Duration::from_secs(cfg.server.keep_alive_idle_secs),
            request_read_timeout: Duration::from_secs(cfg.server.request_read_timeout_secs),
            max_header_bytes: usize::try_from(cfg.server.max_header_bytes).unwrap_or(usize::MAX),
            // A session's bundle travels base64 in JSON: room for it here;
            // the admission gives every other route `server.max_body_bytes`.
            max_body_bytes: limits.start_body,
            tls,
            name: "door",
            ..ServerConfig::default()
        };
        let metrics = Arc::new(Metrics::new());
        {
            let c = client.clone();
            metrics.probe("kubegate_api_retries_total", move || {
                let n = c.retries() + crate::kube::remote::connect::retries_total();
                i64::try_from(n).unwrap_or(i64::MAX)
            });
            metrics.probe("kubegate_watch_restarts_total", || {
                i64::try_from(crate::kube::client::watch::restarts_total()).unwrap_or(i64::MAX)
            });
        }
        let audit = match &cfg.exec.audit_log {
            Some(p) => Some(
                crate::exec::audit::Audit::open(p, cfg.exec.audit_max_bytes)
                    .map_err(|e| failed(format!("opening the audit log {}: {e}", p.display())))?,
            ),
            None => None,
        };
        let x = &cfg.exec;
        if let Some(dir) = &x.recording_dir {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    failed(format!(
                        "creating the recording folder {}: {e}",
                        dir.display()
                    ))
                })?;
        }
        let gateway = Gateway::new(
            client.clone(),
            exec_conn.clone(),
            Settings {
                limits: Limits::from_config(x),
                ownership: Ownership {
                    managed_by: cfg.cluster.managed_by.clone(),
                    uid_label: x.workspace_uid_label.clone(),
                },
                idle_timeout: Duration::from_secs(x.idle_timeout_secs),
                max_duration: Duration::from_secs(x.max_duration_secs),
                ping_interval: Duration::from_secs(x.ping_interval_secs),
                max_sessions: usize::try_from(x.max_sessions).unwrap_or(usize::MAX),
                max_sessions_per_principal: usize::try_from(x.max_sessions_per_principal)
                    .unwrap_or(usize::MAX),
                recording_dir: x.recording_dir.clone(),
                recording_bounds: crate::exec::record::Bounds {
                    max_bytes: x.recording_max_bytes,
                    min_free_bytes: x.recording_min_free_bytes,
                },
            },
            audit,
            metrics.clone(),
        );
        let principals = Arc::new(RwLock::new(Arc::new(Principals::new(&cfg.principals))));
        let ss = &cfg.sessions;
        let access = crate::session::pod_access(&cfg.cluster, &client);
        let engine = crate::session::engine::Engine::new(
            client.clone(),
            exec_conn.clone(),
            access.clone(),
            crate::session::engine::EngineSettings {
                pod: Arc::new(crate::session::pod::PodSettings::from_config(cfg)),
                timings: crate::session::machine::Timings::from(ss),
                state_dir: state_dir.clone(),
                max_sessions: usize::try_from(ss.max_sessions).unwrap_or(usize::MAX),
                max_sessions_per_principal: usize::try_from(ss.max_sessions_per_principal)
                    .unwrap_or(usize::MAX),
                sse_history: usize::try_from(ss.sse_history_events).unwrap_or(usize::MAX),
                io_ring_bytes: usize::try_from(ss.io_ring_bytes).unwrap_or(usize::MAX),
                ping_interval: Duration::from_secs(cfg.exec.ping_interval_secs),
                keep_finished: Duration::from_secs(3600),
            },
        );
        let max_body = limits.body;
        let budget = Budget::new(limits.budget_total, limits.budget_share);
        {
            let b = budget.clone();
            metrics.probe("kubegate_body_budget_bytes", move || {
                i64::try_from(b.used()).unwrap_or(i64::MAX)
            });
        }
        let caps = {
            let m = metrics.clone();
            Caps::new(
                limits.caps,
                Some(Box::new(move |who: &str, kind: Kind, n: usize| {
                    m.set(
                        "kubegate_principal_connections",
                        format!(
                            "principal=\"{}\",kind=\"{}\"",
                            crate::metrics::label(who),
                            kind.as_str()
                        ),
                        i64::try_from(n).unwrap_or(i64::MAX),
                    )
                })),
            )
        };
        let handler = Arc::new(FrontDoor {
            probe,
            client,
            state_dir: state_dir.clone(),
            principals: principals.clone(),
            gateway: gateway.clone(),
            metrics,
            engine: engine.clone(),
            bundle_limits: crate::session::spec::BundleLimits::from(ss),
            max_body,
            start_body: limits.start_body,
            budget,
            caps,
            ready_cache: parking_lot::Mutex::new(None),
            test_hooks: test_hooks(),
        });
        let metrics = handler.metrics.clone();
        // Sessions recorded before the restart come back before the
        // listener takes requests (a reconnecting viewer finds them).
        let restored = engine
            .restore()
            .map_err(|e| failed(format!("restoring the sessions: {e}")))?;
        log::info!(
            "sessions restored: {} re-adopting, {} recreating from a checkpoint, {} suspended, {} failed, {} ended records removed, {} unreadable records",
            restored.adopting,
            restored.recreating,
            restored.suspended,
            restored.failed,
            restored.removed,
            restored.unreadable
        );
        let listen = cfg.server.listen_addr();
        let server = Server::bind(listen, server_cfg, handler)
            .map_err(|e| failed(format!("binding the front door to {listen}: {e}")))?;
        {
            let st = server.stats();
            metrics.probe("kubegate_body_bytes_buffered", move || {
                i64::try_from(st.body_bytes_buffered()).unwrap_or(i64::MAX)
            });
            let st = server.stats();
            metrics.probe("kubegate_peer_connections_max", move || {
                i64::try_from(st.max_connections_of_a_peer()).unwrap_or(i64::MAX)
            });
        }
        engine.forget_persisted_rings();
        engine.start_reaper(Duration::from_secs(ss.orphan_grace_secs));
        let url = format!("{scheme}://{}", server.local_addr());
        Ok(Daemon {
            server,
            sim,
            url,
            grace: Duration::from_secs(cfg.server.shutdown_grace_secs),
            gateway,
            principals,
            engine,
            sim_unconfined,
        })
    }

    /// The front door's URL (`http://127.0.0.1:7443`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// SIGHUP: the principals of a re-read configuration replace the
    /// current ones (sessions and execs already admitted go on).
    /// Refused (the current ones stay) when the sim's pods cannot run as
    /// their own users and the new file has more than one principal.
    pub fn reload_principals(&self, cfg: &Config) -> Result<(), String> {
        if self.sim_unconfined && cfg.principals.len() > 1 {
            return Err(format!(
                "{} principals in sim mode without pod users: one at most (docs/sim.md, \"Pod users\")",
                cfg.principals.len()
            ));
        }
        *self.principals.write() = Arc::new(Principals::new(&cfg.principals));
        Ok(())
    }

    /// SIGHUP: the audit log is opened again at its path, so a file
    /// logrotate renamed is left alone (docs/deploy.md, "Log rotation").
    pub fn reopen_logs(&self) {
        match self.gateway.reopen_audit() {
            None => {}
            Some((p, Ok(()))) => log::info!("SIGHUP: audit log reopened ({})", p.display()),
            Some((p, Err(e))) => log::error!(
                "SIGHUP: reopening the audit log {}: {e}; still writing to the file open before",
                p.display()
            ),
        }
    }

    /// Ends interactive execs (close reason "server shutting down"), stops
    /// accepting, then stops the sim; gives up waiting after the configured
    /// grace (the sim's processes still die with this process: they carry
    /// a parent-death signal).
    pub fn shutdown(self) {
        let started = std::time::Instant::now();
        self.gateway.shutdown();
        // Half the bound for the sessions to persist, the rest for the
        // listener and the embedded sim: the whole stop stays within it.
        self.engine.shutdown(started + self.grace / 2);
        let grace = self.grace.saturating_sub(started.elapsed());
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        let stopper = std::thread::Builder::new()
            .name("daemon-stop".into())
            .spawn(move || {
                self.server.shutdown();
                if let Some(sim) = self.sim {
                    sim.shutdown();
                }
                let _ = tx.send(());
            });
        match stopper {
            Ok(_) => {
                if rx.recv_timeout(grace).is_err() {
                    log::warn!("shutdown did not finish within {grace:?}; exiting anyway");
                }
            }
            Err(e) => log::error!("starting the shutdown thread: {e}"),
        }
    }
}

/// `kubegate serve --config F`: returns the exit code.
pub fn serve_main(config_path: &Path) -> i32 {
    // Installed before anything starts, so a signal during start-up still
    // leads to a clean stop.
    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kubegate: installing signal handlers: {e}");
            return 1;
        }
    };
    let cfg = match Config::load(config_path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    // What the shipped unit sets (UMask=0077), wherever the daemon runs:
    // everything it and the embedded sim's pods create under the state
    // directory is the daemon's uid's alone (docs/deploy.md, "The state
    // directory").
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    raise_open_file_limit();
    super::memory::limit_malloc_arenas();
    let daemon = match Daemon::start(&cfg) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("kubegate: {e}");
            return e.exit_code();
        }
    };
    if let Err(e) = announce_ready(daemon.url()) {
        log::warn!("announcing readiness: {e}");
    }
    log::info!("ready on {}", daemon.url());
    for sig in signals.forever() {
        if sig == signal_hook::consts::SIGHUP {
            // systemd's reload cycle (sd_notify(3)): RELOADING=1 with the
            // monotonic time, then READY=1 once done, whatever the outcome
            // (a bad file keeps the current principals: still serving).
            let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
            let usec = now.tv_sec * 1_000_000 + now.tv_nsec / 1_000;
            notify_systemd(&format!("RELOADING=1\nMONOTONIC_USEC={usec}"));
            // First, and whatever the config file says now: logrotate's
            // postrotate sends this signal.
            daemon.reopen_logs();
            match Config::load(config_path) {
                Ok(c) => {
                    warn_demo_token(&c);
                    match daemon.reload_principals(&c) {
                        Ok(()) => log::info!("SIGHUP: {} principals reloaded", c.principals.len()),
                        Err(e) => log::error!("SIGHUP: keeping the current principals: {e}"),
                    }
                }
                Err(e) => log::error!("SIGHUP: keeping the current principals: {e}"),
            }
            notify_systemd("READY=1");
            continue;
        }
        log::info!("signal {sig}: stopping");
        break;
    }
    notify_systemd("STOPPING=1");
    daemon.shutdown();
    log::info!("stopped");
    0
}

/// The published demo token is only accepted where it harms nobody (the
/// config refuses it elsewhere: `Config::check_demo_token`); even there,
/// every start says so.
fn warn_demo_token(cfg: &Config) {
    if let Some(name) = cfg.demo_token_principal() {
        log::warn!(
            "principal {name:?} uses the published demo token (config.example.toml): anyone who read the example holds it; it is accepted only in sim mode, as the one principal, on a loopback front door; put the digest of a token of your own in its token_sha256 (docs/deploy.md, \"Principals\")"
        );
    }
}

/// Every exec, watch and connection holds descriptors: the soft limit goes
/// up to the hard one (quality.md), as servers do.
fn raise_open_file_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let lim = getrlimit(Resource::Nofile);
    if let Some(max) = lim.maximum {
        if lim.current != Some(max) {
            match setrlimit(
                Resource::Nofile,
                Rlimit {
                    current: Some(max),
                    maximum: Some(max),
                },
            ) {
                Ok(()) => log::info!("open-file limit raised to {max}"),
                Err(e) => log::warn!("raising the open-file limit to {max}: {e}"),
            }
        }
    }
}

/// Prints the one stdout line and, under systemd, sends `READY=1`.
pub fn announce_ready(url: &str) -> io::Result<()> {
    {
        let mut out = io::stdout().lock();
        writeln!(out, "kubegate listening on {url}")?;
        out.flush()?;
    }
    if let Some(sock) = std::env::var_os("NOTIFY_SOCKET") {
        notify(&sock, b"READY=1")?;
    }
    Ok(())
}

/// Under systemd, one state change on `NOTIFY_SOCKET` (a failure is only
/// logged: the service goes on either way).
fn notify_systemd(msg: &str) {
    if let Some(sock) = std::env::var_os("NOTIFY_SOCKET") {
        if let Err(e) = notify(&sock, msg.as_bytes()) {
            log::warn!("notifying systemd ({msg:?}): {e}");
        }
    }
}

/// One datagram to systemd's notification socket (a path, or an abstract
/// name written `@name`).
fn notify(sock: &std::ffi::OsStr, msg: &[u8]) -> io::Result<()> {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let b = sock.as_bytes();
    let d = UnixDatagram::unbound()?;
    if let Some(name) = b.strip_prefix(b"@") {
        d.send_to_addr(msg, &SocketAddr::from_abstract_name(name)?)?;
    } else {
        d.send_to(msg, Path::new(sock))?;
    }
    Ok(())
}

/// Paths under the state directory whose modes the start leaves alone
/// (`state_dir::fix_state_modes`): a pods' root that pods running as other
/// uids must be able to search belongs here. None today: the embedded sim's
/// pods run as the daemon's uid.
fn state_mode_exclusions(_state_dir: &Path) -> Vec<PathBuf> {
    Vec::new()
}

/// Opens the state directory (`super::state_dir`: created 0700 when
/// missing; refused unless it is the daemon's own directory; modes fixed
/// to umask-077 ones) and checks it is writable.
fn open_state_dir(dir: &Path) -> Result<(), StartError> {
    let exclude = state_mode_exclusions(dir);
    let exclude: Vec<&Path> = exclude.iter().map(PathBuf::as_path).collect();
    let (real, fixed) = super::state_dir::open_state_dir(dir, &exclude).map_err(failed)?;
    if fixed.changed > 0 {
        log::info!(
            "state directory {}: {} modes made private (folders 0700, files without group and other bits)",
            real.display(),
            fixed.changed
        );
    }
    if fixed.foreign > 0 {
        log::warn!(
            "state directory {}: {} entries belong to other users; left as they are",
            real.display(),
            fixed.foreign
        );
    }
    check_writable(dir).map_err(|e| {
        failed(format!(
            "state directory {} is not writable: {e}",
            dir.display()
        ))
    })
}

fn check_writable(dir: &Path) -> io::Result<()> {
    let probe = dir.join(format!(".probe-{}", std::process::id()));
    std::fs::write(&probe, b"")?;
    std::fs::remove_file(&probe)
}

fn random_token() -> String {
    use rand::Rng;
    let bytes: [u8; 32] = rand::rng().random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Why the embedded sim's pods would NOT run as their own host users
/// (`None`: they will): `cluster.sim.uid_range = "off"`, or this process
/// lacks the capabilities (docs/sim.md, "Pod users").
fn sim_unconfined_reason(cfg: &Config) -> Option<String> {
    if cfg.cluster.sim.uid_range().is_none() {
        return Some("cluster.sim.uid_range is \"off\"".into());
    }
    let missing = crate::sim::runtime::missing_capabilities();
    if missing.is_empty() {
        None
    } else {
        Some(format!("this process lacks {}", missing.join(", ")))
    }
}

/// The decision for sim mode whose pods cannot run as their own users
/// (`why`): every pod then runs as the daemon's user and can read its
/// state (every session record and workspace, the sim's admin kubeconfig,
/// the audit log), so such a daemon may serve one principal at most, and
/// only on loopback. `Some(message)`: refuse to start.
pub fn sim_refusal(why: &str, principals: usize, listen: &str) -> Option<String> {
    let loopback = listen
        .parse::<std::net::SocketAddr>()
        .is_ok_and(|a| a.ip().is_loopback());
    let problem = if principals > 1 {
        format!("{principals} principals are configured")
    } else if !loopback {
        format!("server.listen = {listen:?} is not a loopback address")
    } else {
        return None;
    };
    Some(format!(
        "refusing sim mode: its pods cannot run as their own users ({why}), so each would run as this daemon's user and could read every principal's sessions and workspaces, the sim's admin kubeconfig and the audit log; {problem}. Run the daemon as root (or with CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE and CAP_KILL) with cluster.sim.uid_range set, or keep one principal and a loopback server.listen (docs/sim.md, \"Pod users\")"
    ))
}

/// Where the embedded sim's pods' folders go by default: beside the state
/// directory (`/var/lib/kubegate` -> `/var/lib/kubegate-pods`), since pods
/// must reach their folders and the state directory is the daemon's alone.
pub fn default_pods_dir(state_dir: &Path) -> PathBuf {
    match (state_dir.parent(), state_dir.file_name()) {
        (Some(parent), Some(name)) => {
            let mut n = name.to_os_string();
            n.push("-pods");
            parent.join(n)
        }
        _ => state_dir.join("sim").join("pods"),
    }
}

/// Starts the embedded sim on loopback with TLS and a random token; its
/// kubeconfig goes to `<state_dir>/sim.kubeconfig`, its own state to
/// `<state_dir>/sim`, its pods' folders to `cluster.sim.pods_dir`
/// ([`default_pods_dir`]).
fn start_sim(cfg: &Config) -> Result<(Sim, Connection), StartError> {
    let state_dir = &cfg.server.state_dir;
    let opts = SimOptions {
        pods_dir: cfg.cluster.sim.pods_dir.clone(),
        default_pods_dir: Some(default_pods_dir(state_dir)),
        uid_range: cfg.cluster.sim.uid_range(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        kubeconfig_out: Some(state_dir.join(SIM_KUBECONFIG)),
        tls: true,
        token: Some(random_token()),
        state_dir: Some(state_dir.join("sim")),
        namespaces: cfg.cluster.sim.namespaces.clone(),
        fail_images: cfg.cluster.sim.fail_images.clone(),
        request_log: cfg.cluster.sim.request_log.clone(),
        ..SimOptions::default()
    };
    let sim = Sim::start(opts).map_err(|e| failed(format!("starting the embedded sim: {e}")))?;
    log::info!(
        "embedded sim on {} (kubeconfig {})",
        sim.url,
        state_dir.join(SIM_KUBECONFIG).display()
    );
    let conn = crate::kube::config::from_kubeconfig_str(&sim.kubeconfig, state_dir, None)
        .map_err(|e| failed(format!("the sim's kubeconfig: {e}")))?;
    Ok((sim, conn))
}

fn cluster_version(client: &Client) -> Result<String, KubeError> {
    let v: Value = client.send_json(&KubeRequest::get("/version"))?;
    Ok(v.get("gitVersion")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_string())
}

/// The demo Deployment: labelled on the Deployment itself with the
/// managed-by and workspace-uid labels of `demo/demo-uid` (exec.md).
pub fn demo_deployment(managed_by: &str, workspace_uid_label: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": DEMO_DEPLOYMENT,
            "namespace": DEMO_PROJECT,
            "labels": {
                MANAGED_BY_LABEL: managed_by,
                workspace_uid_label: DEMO_UID,
            },
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": DEMO_DEPLOYMENT}},
            "template": {
                "metadata": {"labels": {"app": DEMO_DEPLOYMENT}},
                "spec": {
                    // Non-root, with no uid named: the sim gives the pod
                    // its own host uid (docs/sim.md, "Pod users").
                    "securityContext": {"runAsNonRoot": true},
                    "containers": [{
                        "name": "main",
                        "image": "busybox",
                        "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"],
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                },
            },
        },
    })
}

/// Creates namespace `demo` and Deployment `hello`; AlreadyExists is fine.
fn seed_demo(client: &Client, cfg: &Config) -> Result<(), String> {
    let ns: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": DEMO_PROJECT},
    }))
    .map_err(|e| e.to_string())?;
    match Api::<Namespace>::all(client).create(&ns) {
        Ok(_) | Err(KubeError::AlreadyExists(_)) => {}
        Err(e) => return Err(format!("namespace {DEMO_PROJECT}: {e}")),
    }
    let dep: Deployment = serde_json::from_value(demo_deployment(
        &cfg.cluster.managed_by,
        &cfg.exec.workspace_uid_label,
    ))
    .map_err(|e| e.to_string())?;
    match Api::<Deployment>::namespaced(client, DEMO_PROJECT).create(&dep) {
        Ok(_) | Err(KubeError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(format!("deployment {DEMO_PROJECT}/{DEMO_DEPLOYMENT}: {e}")),
    }
}

/// The JSON error shape of every daemon error (contract.md).
pub fn error_response(status: u16, code: &str, message: &str) -> Response {
    let body = json!({"error": {"code": code, "message": message}});
    Response::json(status, body.to_string().into_bytes())
}

/// An [`ApiError`] as its HTTP answer: the status of its code (one table,
/// `api::Code::status`) and the JSON shape.
pub fn api_error(e: &ApiError) -> Response {
    e.response()
}

/// The front door's handler: routing, authentication, and the exec gateway.
struct FrontDoor {
    /// Short-deadline, no-retry client for `/readyz`.
    probe: Client,
    client: Client,
    state_dir: PathBuf,
    principals: Arc<RwLock<Arc<Principals>>>,
    gateway: Arc<Gateway>,
    metrics: Arc<Metrics>,
    engine: Arc<crate::session::engine::Engine>,
    bundle_limits: crate::session::spec::BundleLimits,
    /// Body limit of every route but `POST /v1/sessions` (whose bundle has
    /// its own limits; the server's own limit is raised to fit it).
    max_body: usize,
    /// Body limit of `POST /v1/sessions`.
    start_body: usize,
    /// Body bytes in flight and bundles not yet seeded.
    budget: Arc<Budget>,
    /// Per-principal counts of long-lived connections.
    caps: Arc<Caps>,
    /// The last `/readyz` answer and when (the overflow path answers it).
    ready_cache: parking_lot::Mutex<Option<(std::time::Instant, bool)>>,
    /// `POST /v1/sessions/{id}/debug/panic` exists ([`test_hooks`]).
    #[cfg_attr(not(debug_assertions), allow(dead_code))]
    test_hooks: bool,
}

/// The environment variable that turns the test hooks on (debug builds).
pub const TEST_HOOKS_ENV: &str = "KUBEGATE_TEST_HOOKS";

/// Whether the test hooks are on: a debug build (release builds compile
/// them out) started with `KUBEGATE_TEST_HOOKS=1`. Today one hook: `POST
/// /v1/sessions/{id}/debug/panic` makes that session's owner thread panic
/// (a panicking session must fail alone).
fn test_hooks() -> bool {
    let on = cfg!(debug_assertions) && std::env::var(TEST_HOOKS_ENV).as_deref() == Ok("1");
    if on {
        log::warn!("{TEST_HOOKS_ENV}=1: the test hooks are on; never in production");
    }
    on
}

/// How long the port proxy waits for a connection to an app.
const PORT_PROXY_CONNECT: Duration = Duration::from_secs(10);
/// How long the port proxy waits for an app's answer to begin.
const PORT_PROXY_HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// Answers up to this long with a Content-Length keep it (read whole).
const PORT_PROXY_SIZED_MAX: u64 = 1 << 20;
/// How long a proxied answer may stay silent before it is ended.
const PORT_PROXY_IDLE: Duration = Duration::from_secs(300);

/// The routes behind authentication, and their methods.
const ROUTES: &[(&str, &str)] = &[
    ("/v1/exec", "POST"),
    ("/v1/exec/interactive", "GET"),
    ("/v1/workspaces", "GET"),
    ("/metrics", "GET"),
];

impl FrontDoor {
    fn readiness(&self) -> Response {
        let r = self.readiness_probe();
        *self.ready_cache.lock() = Some((std::time::Instant::now(), r.status == 200));
        r
    }

    fn readiness_probe(&self) -> Response {
        if let Err(e) = cluster_version(&self.probe) {
            log::warn!("readyz: cluster: {e}");
            return error_response(503, "NOT_READY", "the cluster does not answer");
        }
        if let Err(e) = check_writable(&self.state_dir) {
            log::warn!("readyz: state directory: {e}");
            return error_response(503, "NOT_READY", "the state directory is not writable");
        }
        Response::json(200, br#"{"status":"ready"}"#.to_vec())
    }

    /// `/readyz` on the overflow path: the last probe's result while it is
    /// recent (the probe itself may take `PROBE_TIMEOUT`).
    fn cached_readiness(&self) -> Response {
        match *self.ready_cache.lock() {
            Some((at, true)) if at.elapsed() < READY_CACHE => {
                Response::json(200, br#"{"status":"ready"}"#.to_vec())
            }
            Some((at, false)) if at.elapsed() < READY_CACHE => {
                error_response(503, "NOT_READY", "the cluster does not answer")
            }
            _ => error_response(
                503,
                "NOT_READY",
                "every connection slot is taken and no recent readiness result is known",
            ),
        }
    }

    fn authenticate(&self, req: &Request) -> Result<Arc<Identity>, ApiError> {
        if let Some(a) = req.admitted.get::<Admitted>() {
            return Ok(a.who.clone());
        }
        let principals = self.principals.read().clone();
        request_token(req)
            .and_then(|t| principals.authenticate(&t))
            .ok_or_else(|| {
                ApiError::new(
                    Code::Unauthorized,
                    "a valid bearer token is required (Authorization: Bearer TOKEN)",
                )
            })
    }

    fn route(&self, req: Request) -> Result<Reply, ApiError> {
        let path = req.path.as_str();
        if path == "/v1/sessions" || path.starts_with("/v1/sessions/") {
            let who = self.authenticate(&req)?;
            return self.sessions(&who, &req);
        }
        let Some(&(_, method)) = ROUTES.iter().find(|(p, _)| *p == path) else {
            // Authenticate first: unknown routes tell nothing to strangers.
            self.authenticate(&req)?;
            return Err(ApiError::new(Code::NotFound, format!("no route {path}")));
        };
        let who = self.authenticate(&req)?;
        if req.method != method {
            return Err(ApiError::new(
                Code::MethodNotAllowed,
                format!("{path} accepts {method} only"),
            ));
        }
        match path {
            "/v1/exec" => self.exec_oneshot(&who, &req),
            "/v1/exec/interactive" => self.exec_interactive(&who, &req),
            "/v1/workspaces" => self.workspaces(&who),
            _ => Ok(Response::new(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                self.metrics.render().into_bytes(),
            )
            .into()),
        }
    }

    /// `/v1/sessions[/{id}[/events]]` (contract.md "Sessions").
    fn sessions(&self, who: &Identity, req: &Request) -> Result<Reply, ApiError> {
        let rest = req.path.trim_start_matches("/v1/sessions");
        let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty()).collect();
        let method = req.method.as_str();
        let not_found = || ApiError::new(Code::NotFound, "no such session");
        let wrong = |allowed: &str| {
            ApiError::new(
                Code::MethodNotAllowed,
                format!("{} accepts {allowed} only", req.path),
            )
        };
        match parts.as_slice() {
            [] => match method {
                "POST" => self.session_start(who, req),
                "GET" => {
                    let list: Vec<Value> = self
                        .engine
                        .list(&who.name)
                        .iter()
                        .map(|h| h.view())
                        .collect();
                    Ok(
                        Response::json(200, json!({ "sessions": list }).to_string().into_bytes())
                            .into(),
                    )
                }
                _ => Err(wrong("GET, POST")),
            },
            [id, tail @ ..] => {
                let h = crate::session::is_session_id(id)
                    .then(|| self.engine.get(&who.name, id))
                    .flatten();
                let Some(h) = h else {
                    // The io socket says "unknown session" with its own
                    // close code (contract.md), once upgraded.
                    if tail == ["io"] && req.is_websocket_upgrade() {
                        return Ok(Reply::Upgrade(Upgrade {
                            protocol: Some(crate::session::io::SUBPROTOCOL.to_string()),
                            headers: Vec::new(),
                            max_message_bytes: 1024,
                            on_open: Box::new(|conn| {
                                crate::session::io::refuse(
                                    conn,
                                    crate::session::io::CLOSE_UNKNOWN,
                                    "no such session",
                                )
                            }),
                        }));
                    }
                    return Err(not_found());
                };
                match (tail, method) {
                    ([], "GET") => {
                        Ok(Response::json(200, h.view().to_string().into_bytes()).into())
                    }
                    ([], "DELETE") => {
                        if !h.is_finished() {
                            // Already stopping or stopped: still 204.
                            let _ = h.user(crate::session::machine::UserOp::Stop);
                        }
                        Ok(Response::empty(204).into())
                    }
                    ([], _) => Err(wrong("GET, DELETE")),
                    (["events"], "GET") => Ok(sse_stream(&h, req).into()),
                    (["events"], _) => Err(wrong("GET")),
                    (["ports", ..], _) => self.port_proxy(&h, req),
                    (["io"], "GET") => self.session_io(&h, req),
                    (["io"], _) => Err(wrong("GET")),
                    (["workspace"], "GET" | "POST") | (["workspace", "file"], "GET") => {
                        self.session_workspace(&h, tail, req)
                    }
                    (["workspace"], _) => Err(wrong("GET, POST")),
                    (["workspace", "file"], _) => Err(wrong("GET")),
                    ([op @ ("reload" | "suspend" | "resume")], "POST") | ([op @ "apps"], "PUT") => {
                        use crate::session::machine::UserOp;
                        let op = match *op {
                            "reload" => UserOp::Reload {
                                app: req.query("app").unwrap_or("").to_string(),
                            },
                            "suspend" => UserOp::Suspend,
                            "resume" => UserOp::Resume,
                            _ => {
                                let body: crate::session::spec::SetAppsRequest =
                                    serde_json::from_slice(&req.body).map_err(|e| {
                                        ApiError::new(
                                            Code::BadRequest,
                                            format!("request body: {e}"),
                                        )
                                    })?;
                                UserOp::SetApps {
                                    apps: crate::session::spec::validate_apps(body.apps)?,
                                }
                            }
                        };
                        h.user(op)?;
                        Ok(Response::json(202, br#"{"accepted":true}"#.to_vec()).into())
                    }
                    #[cfg(debug_assertions)]
                    (["debug", "panic"], "POST") if self.test_hooks => {
                        if h.inject_panic() {
                            Ok(Response::json(202, br#"{"accepted":true}"#.to_vec()).into())
                        } else {
                            Err(ApiError::new(Code::NotRunning, "the session has ended"))
                        }
                    }
                    (["reload" | "suspend" | "resume"], _) => Err(wrong("POST")),
                    (["apps"], _) => Err(wrong("PUT")),
                    _ => Err(ApiError::new(
                        Code::NotFound,
                        format!("no route {}", req.path),
                    )),
                }
            }
        }
    }

    /// The workspace routes, through the session's workspace agent; paths
    /// are checked here again before anything is sent (docs/agent.md rules).
    fn session_workspace(
        &self,
        h: &crate::session::engine::Handle,
        tail: &[&str],
        req: &Request,
    ) -> Result<Reply, ApiError> {
        use crate::agent::paths::{check_plan, normalize};
        use crate::agent::wire::{ApplyRequest, Encoding};
        let bad_path =
            |e: crate::agent::paths::PathError| ApiError::new(Code::InvalidPath, e.to_string());
        let agent = self.engine.agent_of(h)?;
        let answer = |v: Result<Value, crate::session::agent_client::AgentError>| match v {
            Ok(v) => Ok(Response::json(200, v.to_string().into_bytes()).into()),
            Err(e) => Err(agent_error(&e)),
        };
        match (tail, req.method.as_str()) {
            (["workspace"], "GET") => answer(
                agent
                    .tree()
                    .map(|t| serde_json::to_value(t).unwrap_or(Value::Null)),
            ),
            (["workspace"], _) => {
                let mut body: ApplyRequest = serde_json::from_slice(&req.body)
                    .map_err(|e| ApiError::new(Code::BadRequest, format!("request body: {e}")))?;
                let mut writes = Vec::new();
                for w in body.write.iter_mut().flatten() {
                    w.path = normalize(&w.path).map_err(bad_path)?;
                    writes.push(w.path.clone());
                }
                let mut deletes = Vec::new();
                for d in body.delete.iter_mut().flatten() {
                    *d = normalize(d).map_err(bad_path)?;
                    deletes.push(d.clone());
                }
                check_plan(&writes, &deletes).map_err(bad_path)?;
                answer(
                    agent
                        .apply(
                            body.write.unwrap_or_default(),
                            body.delete.unwrap_or_default(),
                        )
                        .map(|r| serde_json::to_value(r).unwrap_or(Value::Null)),
                )
            }
            _ => {
                let path = normalize(req.query("path").unwrap_or("")).map_err(bad_path)?;
                let encoding = match req.query("encoding") {
                    None | Some("utf8") => Encoding::Utf8,
                    Some("base64") => Encoding::Base64,
                    Some(other) => {
                        return Err(ApiError::new(
                            Code::BadRequest,
                            format!("encoding must be utf8 or base64, not {other:?}"),
                        ))
                    }
                };
                answer(
                    agent
                        .file(&path, encoding)
                        .map(|f| serde_json::to_value(f).unwrap_or(Value::Null)),
                )
            }
        }
    }

    /// `GET /v1/sessions/{id}/io?app=NAME&lastSeq=N`: the app's output from
    /// its replay ring, then live; stdin and resizes back (contract.md).
    fn session_io(
        &self,
        h: &crate::session::engine::Handle,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        use crate::session::io::{self, SUBPROTOCOL as IO_PROTOCOL};
        if !req.is_websocket_upgrade() {
            return Err(ApiError::new(
                Code::BadRequest,
                "this route needs a WebSocket upgrade (HTTP/1.1 GET with Upgrade: websocket)",
            ));
        }
        if !req.websocket_protocols().iter().any(|p| p == IO_PROTOCOL) {
            return Err(ApiError::new(
                Code::BadRequest,
                format!("offer the WebSocket subprotocol {IO_PROTOCOL}"),
            ));
        }
        let last_seq = match req.query("lastSeq") {
            None | Some("") => None,
            Some(v) => Some(v.parse::<u32>().map_err(|_| {
                ApiError::new(Code::BadRequest, "lastSeq must be a non-negative integer")
            })?),
        };
        let app = req.query("app").unwrap_or("").to_string();
        let ping = self.engine.ping_interval();
        let on_open: Box<dyn FnOnce(crate::http::ws::WsConn) + Send> = match h.app_io(&app) {
            Some(app_io) => Box::new(move |conn| io::serve(app_io, last_seq, conn, ping)),
            None => Box::new(move |conn| {
                io::refuse(
                    conn,
                    io::CLOSE_UNKNOWN,
                    &format!("the session has no app {app:?}"),
                )
            }),
        };
        Ok(Reply::Upgrade(Upgrade {
            protocol: Some(IO_PROTOCOL.to_string()),
            headers: Vec::new(),
            max_message_bytes: self.max_body.max(64 * 1024),
            on_open,
        }))
    }

    /// A WebSocket through the port proxy: the app's side first (offering
    /// what the client offered; in api-proxy mode through the API server's
    /// pod proxy, which passes upgrades on), then the client's, accepted
    /// with the subprotocol the app chose; messages bridged both ways.
    fn port_proxy_websocket(
        &self,
        target: &crate::session::access::PodTarget,
        port: u16,
        path: &str,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        let headers: Vec<(String, String)> =
            crate::session::proxy_path::forward_headers(&req.headers)
                .into_iter()
                .filter(|(k, _)| !crate::http::ws::is_handshake_header(k))
                .collect();
        let offer = req.header("sec-websocket-protocol");
        let unreachable =
            |e: String| ApiError::new(Code::PortUnreachable, format!("port {port}: {e}"));
        let (ws, chosen) = match self.engine.access().mode() {
            crate::config::PodAccess::Direct => {
                let addr: std::net::SocketAddr = format!("{}:{port}", target.ip)
                    .parse()
                    .map_err(|_| unreachable(format!("bad pod address {}", target.ip)))?;
                let tcp = std::net::TcpStream::connect_timeout(&addr, PORT_PROXY_CONNECT)
                    .map_err(|e| unreachable(e.to_string()))?;
                let _ = tcp.set_nodelay(true);
                let sock =
                    crate::http::stream::ClientSocket::Socket(crate::http::Socket::Plain(tcp));
                crate::kube::remote::upgrade_on(
                    sock,
                    &format!("ws://{addr}{path}"),
                    &headers,
                    None,
                    offer,
                    PORT_PROXY_HEAD_TIMEOUT,
                )
                .map_err(|e| unreachable(e.to_string()))?
            }
            crate::config::PodAccess::ApiProxy => crate::kube::remote::dial_websocket(
                self.engine.conn(),
                &format!(
                    "/api/v1/namespaces/{}/pods/{}:{port}/proxy{path}",
                    target.namespace, target.name
                ),
                &headers,
                offer,
                PORT_PROXY_HEAD_TIMEOUT,
            )
            .map_err(|e| unreachable(e.to_string()))?,
        };
        Ok(Reply::Upgrade(crate::http::Upgrade {
            protocol: chosen,
            headers: Vec::new(),
            max_message_bytes: self.max_body.max(16 << 20),
            on_open: Box::new(move |conn| {
                if let Err(e) =
                    crate::http::ws::bridge(conn, ws, crate::http::ws::WsOptions::default())
                {
                    log::warn!("port proxy websocket: {e}");
                }
            }),
        }))
    }

    /// `…/v1/sessions/{id}/ports/{port}/{path}`: HTTP to a declared tcp
    /// port of the session's pod, through the pod-access seam (docs/api.md
    /// "Port proxy"). The port, path and query come from the raw
    /// request-target, checked and re-encoded by `session::proxy_path`
    /// before anything else (400 `INVALID_PROXY_PATH`), for HTTP and
    /// WebSocket alike.
    fn port_proxy(
        &self,
        h: &crate::session::engine::Handle,
        req: &Request,
    ) -> Result<Reply, ApiError> {
        let upstream = crate::session::proxy_path::parse_target(&req.target, &h.id)
            .map_err(|e| ApiError::new(Code::InvalidProxyPath, e.to_string()))?;
        let declared = h.view()["apps"]
            .as_array()
            .map(|apps| {
                apps.iter()
                    .flat_map(|a| a["ports"].as_array().cloned().unwrap_or_default())
                    .filter(|p| p["protocol"] != "udp")
                    .filter_map(|p| p["port"].as_u64())
                    .collect::<Vec<u64>>()
            })
            .unwrap_or_default();
        let port = upstream.port;
        if !declared.contains(&u64::from(port)) {
            return Err(ApiError::new(
                Code::NotFound,
                "the session declares no such tcp port",
            ));
        }
        let (pod, ip) = h
            .pod()
            .ok_or_else(|| ApiError::new(Code::NotRunning, "the session has no pod now"))?;
        let path = upstream.path_and_query;
        let method = ureq::http::Method::from_bytes(req.method.as_bytes())
            .map_err(|_| ApiError::new(Code::BadRequest, "unsupported method"))?;
        let target = crate::session::access::PodTarget {
            namespace: self.engine.namespace().to_string(),
            name: pod,
            ip,
        };
        if req.method == "GET" && crate::http::ws::wants_websocket(&req.headers) {
            return self.port_proxy_websocket(&target, port, &path, req);
        }
        let body = (!req.body.is_empty()).then(|| req.body.clone());
        let preq = crate::session::access::PodRequest {
            method,
            path,
            headers: crate::session::proxy_path::forward_headers(&req.headers),
            body,
            timeout: PORT_PROXY_HEAD_TIMEOUT,
            max_response_bytes: 0,
        };
        let mut resp = self
            .engine
            .access()
            .open(&target, port, &preq, PORT_PROXY_IDLE)
            .map_err(|e| ApiError::new(Code::PortUnreachable, format!("port {port}: {e}")))?;
        let headers = crate::session::relay::end_to_end_headers(&resp.headers, &[]);
        let status = resp.status;
        if req.method == "HEAD" || status == 204 || status == 304 || status < 200 {
            let mut r = Response::empty(status);
            for (k, v) in headers {
                r = r.with_header(&k, &v);
            }
            return Ok(r.into());
        }
        // A small answer of known length keeps its length (read whole);
        // others stream as the app produces them (server-sent events, long
        // downloads), re-framed as chunked; a client that goes away cuts
        // the app's stream.
        let length = resp
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.trim().parse::<u64>().ok())
            .filter(|n| *n <= PORT_PROXY_SIZED_MAX);
        if let Some(n) = length {
            let mut body = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
            std::io::Read::read_to_end(&mut std::io::Read::take(&mut resp, n), &mut body)
                .map_err(|e| ApiError::new(Code::PortUnreachable, format!("port {port}: {e}")))?;
            let mut r = Response {
                status,
                headers: Vec::new(),
                body: crate::http::Body::Bytes(body),
            };
            for (k, v) in headers {
                r = r.with_header(&k, &v);
            }
            return Ok(r.into());
        }
        let mut r = Response::stream(
            status,
            "application/octet-stream",
            Box::new(move |sink: &mut dyn crate::http::ChunkSink| {
                let cancel = resp.canceller();
                let mut buf = vec![0u8; 16 * 1024];
                let out = loop {
                    let n = match std::io::Read::read(&mut resp, &mut buf) {
                        Ok(0) => break Ok(()),
                        Ok(n) => n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        // The app's stream broke or went idle past the
                        // bound: end the chunked answer where it is.
                        Err(_) => break Ok(()),
                    };
                    if let Err(e) = sink.send(&buf[..n]) {
                        break Err(e);
                    }
                    if sink.peer_closed() {
                        break Ok(());
                    }
                };
                cancel.cancel();
                out
            }),
        );
        // Only the app's own content type, if it sent one.
        r.headers
            .retain(|(k, _)| !k.eq_ignore_ascii_case("content-type"));
        for (k, v) in headers {
            r = r.with_header(&k, &v);
        }
        Ok(r.into())
    }

    fn session_start(&self, who: &Identity, req: &Request) -> Result<Reply, ApiError> {
        if !who.may_start_sessions {
            return Err(ApiError::new(
                Code::Forbidden,
                "this token may not start sessions (may_start_sessions)",
            ));
        }
        let body: crate::session::spec::StartRequest = serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::new(Code::BadRequest, format!("request body: {e}")))?;
        let (spec, bundle) = crate::session::spec::validate_start(body, self.bundle_limits)?;
        // The body's reservation stays with the decoded bundle until the
        // workspace is seeded (or the start fails).
        let permit = req
            .admitted
            .get::<Admitted>()
            .and_then(|a| a.permit.clone())
            .map(|p| Box::new(p) as Box<dyn std::any::Any + Send>);
        let h = self.engine.start(&who.name, spec, bundle, permit)?;
        let v = h.view();
        let id = h.id.clone();
        let body = json!({
            "sessionId": id,
            "streamUrl": format!("/v1/sessions/{id}/events"),
            "ioUrl": format!("/v1/sessions/{id}/io"),
            "createdAt": v["createdAt"],
        });
        Ok(Response::json(201, body.to_string().into_bytes()).into())
    }

    fn exec_oneshot(&self, who: &Identity, req: &Request) -> Result<Reply, ApiError> {
        let body: OneShotRequest = serde_json::from_slice(&req.body)
            .map_err(|e| ApiError::new(Code::BadRequest, format!("request body: {e}")))?;
        let r = self.gateway.oneshot(who, body, &req.probe)?;
        let body = serde_json::to_vec(&r)
            .map_err(|e| ApiError::new(Code::Internal, format!("encoding the result: {e}")))?;
        Ok(Response::json(200, body).into())
    }

    fn exec_interactive(&self, who: &Arc<Identity>, req: &Request) -> Result<Reply, ApiError> {
        if !req.is_websocket_upgrade() {
            return Err(ApiError::new(
                Code::BadRequest,
                "this route needs a WebSocket upgrade (HTTP/1.1 GET with Upgrade: websocket)",
            ));
        }
        if !req.websocket_protocols().iter().any(|p| p == SUBPROTOCOL) {
            return Err(ApiError::new(
                Code::BadRequest,
                format!("offer the WebSocket subprotocol {SUBPROTOCOL}"),
            ));
        }
        let flag = |k: &str, default: bool| -> Result<bool, ApiError> {
            match req.query(k) {
                None => Ok(default),
                Some("true") | Some("1") => Ok(true),
                Some("false") | Some("0") => Ok(false),
                Some(v) => Err(invalid(format!("{k} must be true or false, not {v:?}"))),
            }
        };
        let text = |k: &str| req.query(k).unwrap_or("").to_string();
        let spec = ExecSpec {
            project: text("project"),
            uid: text("uid"),
            deployment: text("deployment"),
            container: req
                .query("container")
                .filter(|c| !c.is_empty())
                .map(str::to_string),
            command: req
                .query_all("command")
                .into_iter()
                .map(str::to_string)
                .collect(),
        };
        let dim = |k: &str| -> Result<Option<u16>, ApiError> {
            match req.query(k) {
                None => Ok(None),
                Some(v) => v
                    .parse::<u16>()
                    .ok()
                    .filter(|n| *n >= 1)
                    .map(Some)
                    .ok_or_else(|| invalid(format!("{k} must be an integer between 1 and 65535"))),
            }
        };
        let initial_size = match (dim("cols")?, dim("rows")?) {
            (Some(width), Some(height)) => Some(TermSize { width, height }),
            (None, None) => None,
            _ => return Err(invalid("cols and rows go together")),
        };
        let ir = InteractiveRequest {
            spec,
            tty: flag("tty", true)?,
            stdin: flag("stdin", true)?,
            initial_size,
        };
        let session = self.gateway.open_interactive(who, ir)?;
        let max_stdin = self.gateway.settings().limits.max_stdin_frame_bytes;
        Ok(Reply::Upgrade(Upgrade {
            protocol: Some(SUBPROTOCOL.to_string()),
            headers: Vec::new(),
            // A text stdin frame carries JSON-escaped data: room for it.
            max_message_bytes: max_stdin.saturating_mul(6).saturating_add(4096),
            on_open: Box::new(move |conn| session.run(conn)),
        }))
    }

    fn workspaces(&self, who: &Identity) -> Result<Reply, ApiError> {
        let own = &self.gateway.settings().ownership;
        let selector = format!("{MANAGED_BY_LABEL}={}", own.managed_by);
        let mut out = Vec::new();
        for w in &who.workspaces {
            let list = match Api::<Deployment>::namespaced(&self.client, &w.project)
                .list(&crate::kube::client::ListParams::labels(&selector))
            {
                Ok(l) => l.items,
                Err(KubeError::NotFound(_)) => Vec::new(),
                Err(e) => {
                    return Err(ApiError::new(
                        Code::ExecFailed,
                        format!("listing deployments in {}: {e}", w.project),
                    ))
                }
            };
            let mut deployments: Vec<Value> = list
                .iter()
                .filter(|d| {
                    d.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(&own.uid_label))
                        == Some(&w.uid)
                })
                .map(|d| {
                    let spec = d.spec.clone().unwrap_or_default();
                    let containers: Vec<String> = spec
                        .template
                        .spec
                        .map(|s| s.containers.into_iter().map(|c| c.name).collect())
                        .unwrap_or_default();
                    let status = d.status.clone().unwrap_or_default();
                    json!({
                        "name": d.metadata.name(),
                        "containers": containers,
                        "replicas": spec.replicas.unwrap_or(1),
                        "readyReplicas": status.ready_replicas.unwrap_or(0),
                    })
                })
                .collect();
            deployments.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
            out.push(json!({"project": w.project, "uid": w.uid, "deployments": deployments}));
        }
        Ok(Response::json(200, json!({ "workspaces": out }).to_string().into_bytes()).into())
    }
}

/// An agent's answer as the daemon's error: the agent's own codes (bad
/// paths, limits, a missing file) pass through with their status; a
/// transport or protocol problem is the session's, 502.
fn agent_error(e: &crate::session::agent_client::AgentError) -> ApiError {
    use crate::session::agent_client::AgentError;
    match e {
        AgentError::Agent { code, message, .. } => match Code::parse(code) {
            Some(c) => ApiError::new(c, message.clone()),
            None => ApiError::new(
                Code::WorkspaceUnavailable,
                format!("workspace agent: {code}: {message}"),
            ),
        },
        other => ApiError::new(
            Code::WorkspaceUnavailable,
            format!("workspace agent: {other}"),
        ),
    }
}

/// Heartbeat comment period on an idle event stream (contract.md).
const SSE_HEARTBEAT: Duration = Duration::from_secs(20);

/// `GET /v1/sessions/{id}/events`: Server-Sent Events from the session's
/// log, after `Last-Event-ID` when given (a `gap` event when the history no
/// longer holds what was asked), a heartbeat comment every 20 s, ending
/// after a terminal status.
fn sse_stream(h: &Arc<crate::session::engine::Handle>, req: &Request) -> Response {
    let mut after: u64 = req
        .header("last-event-id")
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let events = h.events.clone();
    let handle = h.clone();
    Response::stream(
        200,
        "text/event-stream",
        Box::new(move |sink| {
            // Counted as a subscriber while attached (the idle rule).
            struct Reader(Arc<crate::session::engine::Handle>);
            impl Drop for Reader {
                fn drop(&mut self) {
                    self.0
                        .sse_readers
                        .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
            handle
                .sse_readers
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let _reader = Reader(handle);
            let mut last_beat = std::time::Instant::now();
            loop {
                let s = events.since(after, Duration::from_secs(1));
                let mut out = String::new();
                if let Some((from, to)) = s.gap {
                    out.push_str(&format!(
                        "event: gap\ndata: {}\n\n",
                        json!({"from": from, "to": to})
                    ));
                }
                for e in &s.events {
                    out.push_str(&format!(
                        "id: {}\nevent: {}\ndata: {}\n\n",
                        e.id, e.kind, e.data
                    ));
                    after = e.id;
                }
                if out.is_empty() && last_beat.elapsed() >= SSE_HEARTBEAT {
                    out.push_str(": heartbeat\n\n");
                }
                if !out.is_empty() {
                    sink.send(out.as_bytes())?;
                    last_beat = std::time::Instant::now();
                }
                if s.closed && after >= events.last_id() {
                    return Ok(());
                }
                if sink.peer_closed() {
                    return Ok(());
                }
            }
        }),
    )
    .with_header("Cache-Control", "no-cache")
}

/// What the front door's admission learned from a request's head, handed
/// back with the request (`Request::admitted`).
struct Admitted {
    who: Arc<Identity>,
    /// The body's reservation in the budget (requests with a body).
    permit: Option<Arc<Permit>>,
}

/// The body a head announces: its Content-Length, `None` for chunked, 0
/// for none.
fn announced_body(head: &Request) -> Option<u64> {
    if head.header("transfer-encoding").is_some() {
        return None;
    }
    Some(
        head.header("content-length")
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0),
    )
}

impl FrontDoor {
    fn refuse(&self, reason: &str, e: &ApiError) -> Admission {
        self.metrics
            .inc("kubegate_refusals_total", format!("reason=\"{reason}\""));
        self.metrics
            .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
        let r = api_error(e);
        self.metrics.inc(
            "kubegate_http_requests_total",
            format!("status=\"{}\"", r.status),
        );
        Admission::Refuse(r)
    }

    fn too_many(&self, kind: Kind) -> Admission {
        let what = match kind {
            Kind::Io => "session io sockets",
            Kind::Events => "session event streams",
            Kind::Ports => "port-proxy requests in flight",
            Kind::KeepAlive => "keep-alive connections",
        };
        let e = ApiError::new(
            Code::TooManyConnections,
            format!(
                "you hold {} {what}, the most allowed per principal; close one and retry",
                self.caps.limit(kind)
            ),
        );
        match self.refuse(kind.as_str(), &e) {
            Admission::Refuse(r) => Admission::Refuse(r.with_header("Retry-After", "1")),
            a => a,
        }
    }

    /// Everything the head decides (docs/api.md "Admission"): who is
    /// asking, whether they may, whether the session is theirs, the body
    /// limit, the body's place in the budget, and the connection's place
    /// among the principal's long-lived ones.
    fn admission(&self, head: &Request) -> Admission {
        let path = head.path.as_str();
        if matches!(path, "/healthz" | "/readyz") && head.method == "GET" {
            return Admission::Admit(Admit::with_limit(0));
        }
        let principals = self.principals.read().clone();
        let Some(who) = request_token(head).and_then(|t| principals.authenticate(&t)) else {
            return self.refuse(
                "unauthenticated",
                &ApiError::new(
                    Code::Unauthorized,
                    "a valid bearer token is required (Authorization: Bearer TOKEN)",
                ),
            );
        };
        let mut limit = self.max_body;
        let mut kind = Kind::KeepAlive;
        if path == "/v1/sessions" || path.starts_with("/v1/sessions/") {
            let parts: Vec<&str> = path["/v1/sessions".len()..]
                .split('/')
                .filter(|p| !p.is_empty())
                .collect();
            match parts.as_slice() {
                [] if head.method == "POST" => {
                    if !who.may_start_sessions {
                        return self.refuse(
                            "forbidden",
                            &ApiError::new(
                                Code::Forbidden,
                                "this token may not start sessions (may_start_sessions)",
                            ),
                        );
                    }
                    limit = self.start_body;
                }
                [] => {}
                [id, tail @ ..] => {
                    let mine = crate::session::is_session_id(id)
                        && self.engine.get(&who.name, id).is_some();
                    // An unknown io socket is told so once upgraded (its
                    // own close code): the handler answers it.
                    let io_upgrade = tail == ["io"] && head.is_websocket_upgrade();
                    if !mine && !io_upgrade {
                        return self.refuse(
                            "not_found",
                            &ApiError::new(Code::NotFound, "no such session"),
                        );
                    }
                    if mine {
                        kind = match tail {
                            ["io"] => Kind::Io,
                            ["events"] => Kind::Events,
                            ["ports", ..] => Kind::Ports,
                            _ => Kind::KeepAlive,
                        };
                    }
                }
            }
        }
        let mut admit = Admit::with_limit(limit);
        admit.known = true;
        let hold = self.caps.acquire(&who.name, kind);
        // A keep-alive place is held while the connection waits for its
        // next request; a stream's place only while the stream lasts.
        admit.keep_hold = kind == Kind::KeepAlive;
        match hold {
            Some(g) => admit.hold = Some(Box::new(g) as Box<dyn std::any::Any + Send>),
            // No keep-alive slot left: served, then closed.
            None if kind == Kind::KeepAlive => {
                self.metrics
                    .inc("kubegate_refusals_total", "reason=\"keepalive\"");
                admit.close_after = true;
            }
            None => return self.too_many(kind),
        }
        let mut permit = None;
        match announced_body(head) {
            Some(0) => {}
            // The server answers 413 without reading it.
            Some(n) if n > limit as u64 => {}
            announced => {
                let n = announced.map_or(0, |n| usize::try_from(n).unwrap_or(usize::MAX));
                match self.budget.reserve(&who.name, n) {
                    Ok(p) => permit = Some(Arc::new(p)),
                    Err(full) => {
                        let (reason, msg) = match full {
                            BudgetFull::Share => (
                                "budget_share",
                                "your requests hold your share of the daemon's body budget \
                                 (server.body_budget_per_principal_bytes); retry when they are done",
                            ),
                            BudgetFull::Total => (
                                "budget",
                                "the daemon holds as many request bodies as it allows \
                                 (server.body_budget_bytes); retry later",
                            ),
                        };
                        return match self.refuse(reason, &ApiError::new(Code::Overloaded, msg)) {
                            Admission::Refuse(r) => {
                                Admission::Refuse(r.with_header("Retry-After", "1"))
                            }
                            a => a,
                        };
                    }
                }
            }
        }
        admit.charge = permit
            .clone()
            .map(|p| p as Arc<dyn crate::http::BodyCharge>);
        admit.context = Context(Some(Arc::new(Admitted { who, permit })));
        Admission::Admit(admit)
    }
}

impl Handler for FrontDoor {
    fn admit(&self, head: &Request) -> Admission {
        self.admission(head)
    }

    fn overflow(&self, head: &Request, _err: &HttpError) -> Option<Response> {
        match (head.method.as_str(), head.path.as_str()) {
            ("GET", "/healthz") => Some(Response::json(200, br#"{"status":"ok"}"#.to_vec())),
            ("GET", "/readyz") => Some(self.cached_readiness()),
            _ => None,
        }
    }

    fn handle(&self, req: Request) -> Reply {
        let reply = match (req.method.as_str(), req.path.as_str()) {
            ("GET", "/healthz") => Response::json(200, br#"{"status":"ok"}"#.to_vec()).into(),
            ("GET", "/readyz") => self.readiness().into(),
            _ => match self.route(req) {
                Ok(r) => r,
                Err(e) => {
                    self.metrics
                        .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
                    api_error(&e).into()
                }
            },
        };
        let status = match &reply {
            Reply::Response(r) => r.status,
            Reply::Upgrade(_) => 101,
        };
        self.metrics.inc(
            "kubegate_http_requests_total",
            format!("status=\"{status}\""),
        );
        reply
    }

    fn error_response(&self, err: &HttpError) -> Response {
        let e = ApiError::from_http(err);
        self.metrics
            .inc("kubegate_api_errors_total", format!("code=\"{}\"", e.code));
        ApiError::http_response(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unconfined_sim_serves_one_local_principal_at_most() {
        let why = "cluster.sim.uid_range is \"off\"";
        assert_eq!(sim_refusal(why, 0, "127.0.0.1:7443"), None);
        assert_eq!(sim_refusal(why, 1, "127.0.0.1:0"), None);
        assert_eq!(sim_refusal(why, 1, "[::1]:7443"), None);
        let m = sim_refusal(why, 2, "127.0.0.1:7443").expect("refused");
        assert!(
            m.contains("2 principals are configured") && m.contains(why),
            "{m}"
        );
        for listen in ["0.0.0.0:7443", "10.0.0.5:7443", "[::]:7443", "nonsense"] {
            let m = sim_refusal(why, 1, listen).expect("refused");
            assert!(m.contains("is not a loopback address"), "{listen}: {m}");
        }
    }

    #[test]
    fn pods_live_beside_the_state_directory() {
        assert_eq!(
            default_pods_dir(Path::new("/var/lib/kubegate")),
            PathBuf::from("/var/lib/kubegate-pods")
        );
        assert_eq!(
            default_pods_dir(Path::new("/etc/kubegate/state")),
            PathBuf::from("/etc/kubegate/state-pods")
        );
    }

    #[test]
    fn the_demo_runs_as_non_root_without_naming_a_uid() {
        let d = demo_deployment("kubegate", "kubegate.dev/workspace-uid");
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
        assert!(spec["securityContext"].get("runAsUser").is_none());
        let c = &spec["containers"][0]["securityContext"];
        assert_eq!(c["allowPrivilegeEscalation"], false);
        assert!(c.get("runAsUser").is_none());
    }

    #[test]
    fn demo_deployment_is_labelled_for_the_demo_workspace() {
        let d = demo_deployment("kubegate", "kubegate.dev/workspace-uid");
        let labels = &d["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/managed-by"], "kubegate");
        assert_eq!(labels["kubegate.dev/workspace-uid"], "demo-uid");
        assert_eq!(d["metadata"]["namespace"], "demo");
        assert_eq!(d["spec"]["replicas"], 1);
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["name"], "main");
        assert_eq!(c["command"][0], "sh");
        let _: Deployment = serde_json::from_value(d).unwrap();
    }

    #[test]
    fn error_shape() {
        let r = error_response(404, "NOT_FOUND", "no such route");
        assert_eq!(r.status, 404);
        let crate::http::Body::Bytes(b) = r.body else {
            panic!("bytes")
        };
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(
            v,
            json!({"error": {"code": "NOT_FOUND", "message": "no such route"}})
        );
    }

    #[test]
    fn tokens_are_random_hex() {
        let a = random_token();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_token());
    }

    #[test]
    fn notify_sends_ready_to_a_path_socket() {
        let dir = std::env::temp_dir().join(format!("kubegate-notify-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("notify.sock");
        let rx = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        notify(path.as_os_str(), b"READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
