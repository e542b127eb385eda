//! Start-up and shutdown of the daemon ([`Daemon`]).
//!
//! Order (docs/cli.md#kubegate-serve-and-kubegate-check-config): config
//! validated, state directory opened, cluster
//! reachable (`/version` answered; with `mode = "sim"` the embedded sim is
//! started first and the demo workspace created in it, [`super::demo`]),
//! the recorded sessions restored (re-adopted or recreated, docs/sessions.md
//! "Re-adoption after a restart"; a failed pod list fails the start),
//! listener bound, the orphan reaper started; the caller then announces
//! readiness ([`super::systemd::announce_ready`]). [`Daemon::shutdown`]
//! ends interactive execs, persists the sessions, stops the listener, then
//! the sim (its processes die with it), within the configured bound.
//!
//! Threads: the caller's (start-up), the front door's `door-*` threads
//! (`http::Server`), a `daemon-stop` thread bounding the shutdown, and
//! with the sim its own (docs/ARCHITECTURE.md).

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use super::demo::{
    seed_demo, sim_refusal, sim_unconfined_reason, start_sim, warn_demo_token, DEMO_DEPLOYMENT,
    DEMO_PROJECT, DEMO_UID,
};
use super::routes::{check_writable, cluster_version, test_hooks, FrontDoor};
use super::settings::{exec_settings, size};
use crate::auth::Oidc;
use crate::config::{ClusterMode, Config, ConfigError, RoutingLayer};
use crate::exec::audit::Audit;
use crate::exec::gateway::Gateway;
use crate::http::{Server, ServerConfig};
use crate::kube::client::{Client, ClientOptions, RetryPolicy};
use crate::kube::config::{Env, LoadOptions};
use crate::kube::connection::Connection;
use crate::metrics::Metrics;
use crate::server::auth::Principals;
use crate::server::limits::{Budget, Caps, FrontDoorLimits, Kind};
use crate::session::engine::{Engine, EngineSettings};
use crate::sim::cluster::Sim;

/// Deadline of one `/readyz` probe of the cluster.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a finished session stays visible before the engine forgets it
/// ([`EngineSettings::keep_finished`]).
const KEEP_FINISHED: Duration = Duration::from_secs(3600);

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

impl std::error::Error for StartError {}

impl StartError {
    pub fn exit_code(&self) -> i32 {
        match self {
            StartError::Config(_) | StartError::Refused(_) => 2,
            StartError::Failed(_) => 1,
        }
    }
}

pub(super) fn failed(m: impl Into<String>) -> StartError {
    StartError::Failed(m.into())
}

/// A reload refused: the current principals (and OIDC issuers and rules)
/// stay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadRefused {
    /// Principals in the new file, in sim mode without pod users.
    Principals(usize),
    /// The new `[oidc]` cannot be put to work (a CA file, a thread).
    Oidc(String),
}

impl std::fmt::Display for ReloadRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReloadRefused::Principals(n) => write!(
                f,
                "{n} principals in sim mode without pod users: one at most (docs/sim.md, \"Pod users\")"
            ),
            ReloadRefused::Oidc(e) => write!(f, "[oidc]: {e}"),
        }
    }
}

impl std::error::Error for ReloadRefused {}

/// A running daemon: the front door and, with `mode = "sim"`, the sim.
pub struct Daemon {
    server: Server,
    sim: Option<Sim>,
    url: String,
    grace: Duration,
    gateway: Arc<Gateway>,
    principals: Arc<RwLock<Arc<Principals>>>,
    engine: Arc<Engine>,
    /// Sim mode whose pods cannot run as their own users: one principal at
    /// most, also after a reload.
    sim_unconfined: bool,
    /// `[cluster] impersonate` as started (a reload does not change it):
    /// OIDC names must be sendable as `Impersonate-User`.
    impersonate: bool,
}

/// The cluster the daemon talks to: its connection, and the embedded sim
/// when it is one.
struct Cluster {
    sim: Option<Sim>,
    conn: Connection,
    /// The sim's pods cannot run as their own users.
    sim_unconfined: bool,
}

impl Daemon {
    /// Starts everything up to a bound listener; the caller announces
    /// readiness ([`super::systemd::announce_ready`]).
    pub fn start(cfg: &Config) -> Result<Daemon, StartError> {
        warn_demo_token(cfg);
        let state_dir = &cfg.server.state_dir;
        open_state_dir(state_dir)?;
        log::info!("state directory {}", state_dir.display());

        let Cluster {
            sim,
            conn,
            sim_unconfined,
        } = connect(cfg)?;
        let server_url = conn.server.clone();
        let client = Client::new(conn.clone())
            .map_err(|e| failed(format!("cluster client for {server_url}: {e}")))?;
        let probe = Client::with_options(
            conn.clone(),
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
        check_routing_layer(&client, cfg)?;

        if sim.is_some() {
            seed_demo(&client, cfg)
                .map_err(|e| failed(format!("creating the demo workspace in the sim: {e}")))?;
            log::info!(
                "demo workspace {DEMO_PROJECT}/{DEMO_UID} ready (deployment {DEMO_DEPLOYMENT})"
            );
        }

        let limits = FrontDoorLimits::from_config(cfg);
        let server_cfg = server_config(cfg, &limits)?;
        let scheme = if server_cfg.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let metrics = Arc::new(Metrics::new());
        cluster_metrics(&metrics, &client);
        let gateway = exec_gateway(cfg, &client, &conn, &metrics)?;
        let oidc = Oidc::new(&cfg.oidc, &cfg.principals, cfg.cluster.impersonate, None)
            .map_err(|e| failed(format!("[oidc]: {e}")))?;
        if let Some(o) = &oidc {
            log::info!("OIDC issuers: {}", o.issuer_urls().join(", "));
        }
        let principals = Arc::new(RwLock::new(Arc::new(Principals::with_oidc(
            &cfg.principals,
            oidc.map(Arc::new),
        ))));
        let engine = session_engine(cfg, &client, &conn);
        // Gateway routing: the Gateway read now and every 5 s after, its
        // state bounding every session endpoint's (from the first read).
        engine.start_gateway_reader();
        let handler = Arc::new(front_door(
            cfg,
            &limits,
            Parts {
                probe,
                principals: principals.clone(),
                gateway: gateway.clone(),
                metrics: metrics.clone(),
                engine: engine.clone(),
            },
        ));
        // Sessions recorded before the restart come back before the
        // listener takes requests (a reconnecting viewer finds them).
        restore(&engine)?;
        let listen = cfg.server.listen_addr();
        let server = Server::bind(listen, server_cfg, handler)
            .map_err(|e| failed(format!("binding the front door to {listen}: {e}")))?;
        server_metrics(&metrics, &server);
        engine.forget_persisted_rings();
        engine.start_reaper(Duration::from_secs(cfg.sessions.orphan_grace_secs));
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
            impersonate: cfg.cluster.impersonate,
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
    pub fn reload_principals(&self, cfg: &Config) -> Result<(), ReloadRefused> {
        if self.sim_unconfined && cfg.principals.len() > 1 {
            return Err(ReloadRefused::Principals(cfg.principals.len()));
        }
        // The issuers keep their cached keys when configured the same.
        let current = self.principals.read().clone();
        let oidc = Oidc::new(
            &cfg.oidc,
            &cfg.principals,
            self.impersonate,
            current.oidc().map(|o| &**o),
        )
        .map_err(ReloadRefused::Oidc)?;
        *self.principals.write() =
            Arc::new(Principals::with_oidc(&cfg.principals, oidc.map(Arc::new)));
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

/// The cluster of `[cluster] mode`: the embedded sim (refused when its
/// pods could not run as their own users and the daemon serves more than
/// one principal or beyond loopback), a kubeconfig, or the pod's service
/// account.
fn connect(cfg: &Config) -> Result<Cluster, StartError> {
    match cfg.cluster.mode {
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
            let (sim, conn) = start_sim(cfg)?;
            Ok(Cluster {
                sim: Some(sim),
                conn,
                sim_unconfined: unconfined.is_some(),
            })
        }
        ClusterMode::Kubeconfig => {
            let opts = LoadOptions {
                kubeconfig: cfg.cluster.kubeconfig.clone(),
                context: cfg.cluster.context.clone(),
                ..LoadOptions::default()
            };
            let conn = crate::kube::config::load(&opts)
                .map_err(|e| failed(format!("loading the kubeconfig: {e}")))?;
            Ok(Cluster {
                sim: None,
                conn,
                sim_unconfined: false,
            })
        }
        ClusterMode::InCluster => {
            let conn = crate::kube::config::in_cluster(
                &Env::process(),
                Path::new(crate::kube::config::SERVICE_ACCOUNT_DIR),
            )
            .map_err(|e| failed(format!("in-cluster configuration: {e}")))?;
            Ok(Cluster {
                sim: None,
                conn,
                sim_unconfined: false,
            })
        }
    }
}

/// The front door's server settings from `[server]` (TLS when both files
/// are configured).
/// The configured routing layer, validated against the cluster's discovery
/// (docs/config.md#routing): the kind it creates must be served, or the
/// start is refused naming `cluster.routing`. The Gateway of gateway
/// routing is the engine's reader's (`session::engine::gateway_reader`):
/// absent or unreadable is a warning it logs, not a refusal.
fn check_routing_layer(client: &Client, cfg: &Config) -> Result<(), StartError> {
    use crate::kube::client::rest::Request as KubeRequest;
    use crate::kube::client::KubeError;
    let (group_version, plural, kind) = match cfg.cluster.routing() {
        RoutingLayer::None => return Ok(()),
        RoutingLayer::Ingress => ("networking.k8s.io/v1", "ingresses", "Ingress"),
        RoutingLayer::Gateway => ("gateway.networking.k8s.io/v1", "httproutes", "HTTPRoute"),
    };
    let path = format!("/apis/{group_version}");
    let served = match client.send_json::<serde_json::Value>(&KubeRequest::get(&path)) {
        Ok(v) => v["resources"]
            .as_array()
            .is_some_and(|rs| rs.iter().any(|r| r["name"] == plural)),
        Err(KubeError::NotFound(_)) => false,
        Err(e) => return Err(failed(format!("reading the cluster's {path}: {e}"))),
    };
    if !served {
        return Err(StartError::Refused(format!(
            "cluster.routing: the routing layer needs {group_version} {kind}, which the cluster does not serve ({path} does not list {plural})"
        )));
    }
    if let Some((ns, name)) = cfg.cluster.gateway_ref() {
        if cfg.cluster.routing() == RoutingLayer::Gateway {
            log::info!("routing: HTTPRoutes attach to Gateway {ns}/{name}");
        }
    }
    log::info!("routing: {group_version} {kind} served");
    Ok(())
}

fn server_config(cfg: &Config, limits: &FrontDoorLimits) -> Result<ServerConfig, StartError> {
    let tls = match (&cfg.server.tls_cert, &cfg.server.tls_key) {
        (Some(c), Some(k)) => {
            let cert =
                std::fs::read(c).map_err(|e| failed(format!("reading {}: {e}", c.display())))?;
            let key =
                std::fs::read(k).map_err(|e| failed(format!("reading {}: {e}", k.display())))?;
            Some(
                crate::http::tls::server_config_from_pem(&cert, &key, None)
                    .map_err(|e| failed(format!("front-door TLS: {e}")))?,
            )
        }
        _ => None,
    };
    let s = &cfg.server;
    Ok(ServerConfig {
        max_connections: size(s.max_connections),
        max_connections_per_peer: limits.per_peer,
        head_grace: Duration::from_secs(s.head_grace_secs),
        min_head_bytes_per_sec: size(s.min_head_bytes_per_sec),
        keep_alive_idle: Duration::from_secs(s.keep_alive_idle_secs),
        request_read_timeout: Duration::from_secs(s.request_read_timeout_secs),
        max_header_bytes: size(s.max_header_bytes),
        // A session's bundle travels base64 in JSON: room for it here;
        // the admission gives every other route `server.max_body_bytes`.
        max_body_bytes: limits.start_body,
        tls,
        name: "door",
        ..ServerConfig::default()
    })
}

/// A counter read when `/metrics` is rendered, as a gauge value.
fn gauge(n: impl TryInto<i64>) -> i64 {
    n.try_into().unwrap_or(i64::MAX)
}

/// The cluster client's counters on `/metrics`.
fn cluster_metrics(metrics: &Metrics, client: &Client) {
    let c = client.clone();
    metrics.probe("kubegate_api_retries_total", move || {
        gauge(c.retries() + crate::kube::remote::connect::retries_total())
    });
    metrics.probe("kubegate_watch_restarts_total", || {
        gauge(crate::kube::client::watch::restarts_total())
    });
}

/// The front door's own counters on `/metrics`.
fn server_metrics(metrics: &Metrics, server: &Server) {
    let st = server.stats();
    metrics.probe("kubegate_body_bytes_buffered", move || {
        gauge(st.body_bytes_buffered())
    });
    let st = server.stats();
    metrics.probe("kubegate_peer_connections_max", move || {
        gauge(st.max_connections_of_a_peer())
    });
}

/// The exec gateway: its audit log opened, its recording folder made
/// (0700).
fn exec_gateway(
    cfg: &Config,
    client: &Client,
    conn: &Connection,
    metrics: &Arc<Metrics>,
) -> Result<Arc<Gateway>, StartError> {
    let x = &cfg.exec;
    let audit = match &x.audit_log {
        Some(p) => Some(
            Audit::open(p, x.audit_max_bytes)
                .map_err(|e| failed(format!("opening the audit log {}: {e}", p.display())))?,
        ),
        None => None,
    };
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
    Ok(Gateway::new(
        client.clone(),
        conn.clone(),
        exec_settings(cfg),
        audit,
        metrics.clone(),
    ))
}

/// The session engine, with its settings from `[sessions]` and
/// `[cluster]`.
fn session_engine(cfg: &Config, client: &Client, conn: &Connection) -> Arc<Engine> {
    let ss = &cfg.sessions;
    let access = crate::session::access::from_config(cfg.cluster.pod_access(), client);
    Engine::new(
        client.clone(),
        conn.clone(),
        access,
        EngineSettings {
            pod: Arc::new(crate::session::pod::PodSettings::from(cfg)),
            timings: crate::session::machine::Timings::from(ss),
            state_dir: cfg.server.state_dir.clone(),
            max_sessions: size(ss.max_sessions),
            max_sessions_per_principal: size(ss.max_sessions_per_principal),
            sse_history: size(ss.sse_history_events),
            io_ring_bytes: size(ss.io_ring_bytes),
            ping_interval: Duration::from_secs(cfg.exec.ping_interval_secs),
            keep_finished: KEEP_FINISHED,
        },
    )
}

/// What the front door serves, made before it.
struct Parts {
    probe: Client,
    principals: Arc<RwLock<Arc<Principals>>>,
    gateway: Arc<Gateway>,
    metrics: Arc<Metrics>,
    engine: Arc<Engine>,
}

/// The front door's handler: the parts, the body budget and the
/// per-principal connection caps (each cap's count on `/metrics`).
fn front_door(cfg: &Config, limits: &FrontDoorLimits, p: Parts) -> FrontDoor {
    let budget = Budget::new(limits.budget_total, limits.budget_share);
    {
        let b = budget.clone();
        p.metrics
            .probe("kubegate_body_budget_bytes", move || gauge(b.used()));
    }
    let caps = {
        let m = p.metrics.clone();
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
                    gauge(n),
                )
            })),
        )
    };
    FrontDoor {
        probe: p.probe,
        state_dir: cfg.server.state_dir.clone(),
        principals: p.principals,
        gateway: p.gateway,
        metrics: p.metrics,
        engine: p.engine,
        bundle_limits: crate::session::spec::BundleLimits::from(&cfg.sessions),
        max_body: limits.body,
        start_body: limits.start_body,
        budget,
        caps,
        tunnel_limits: super::routes::TunnelLimits {
            idle: Duration::from_secs(cfg.server.tunnel_idle_timeout_secs),
            max_duration: Duration::from_secs(cfg.server.tunnel_max_duration_secs),
        },
        ready_cache: parking_lot::Mutex::new(None),
        test_hooks: test_hooks(),
    }
}

/// The sessions recorded before a restart, back in the engine.
fn restore(engine: &Arc<Engine>) -> Result<(), StartError> {
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
    let (real, fixed) =
        super::state_dir::open_state_dir(dir, &exclude).map_err(|e| failed(e.to_string()))?;
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
