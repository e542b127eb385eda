//! One running simulated cluster: the store, the controllers, the kubelet
//! and the API server, started together and stopped together. Used by
//! `kubegate sim` and (later) embedded in the daemon.

use super::api::{ApiConfig, ApiServer, Auth, PodStreams};
use super::controllers::Controllers;
use super::faults::Faults;
use super::kubeconfig::{self, KubeconfigSpec};
use super::resources::Resource;
use super::store::{Store, StoreConfig};
use crate::http::{Server, ServerConfig};
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Where a sim listens unless told otherwise (`--listen`): loopback, any
/// free port (the URL is printed and written into the kubeconfig).
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);

/// How a sim is started: `kubegate sim`'s flags (`super::args`) or the
/// daemon's embedded sim. `Debug` never prints the token.
#[derive(Clone)]
pub struct SimOptions {
    /// `--listen IP:PORT` (default [`DEFAULT_LISTEN`]).
    pub listen: SocketAddr,
    /// `--kubeconfig-out PATH`: where the sim writes a kubeconfig for it.
    pub kubeconfig_out: Option<PathBuf>,
    /// `--tls`, and implied by any credential: kubectl (client-go) sends no
    /// token or client certificate to a plain-HTTP server.
    pub tls: bool,
    /// The bearer token; `None` with `--no-auth` or `--client-ca` alone.
    pub token: Option<String>,
    /// `--client-ca`: clients authenticate with a certificate.
    pub client_ca: bool,
    /// `--token-auth-file F`: kube-apiserver's static token users
    /// (`sim::authn`), beside the admin token.
    pub token_users: Vec<super::authn::TokenUser>,
    /// `--client-ca-file F`: PEM of CAs whose client certificates
    /// authenticate as their CommonName in their Organizations.
    pub client_ca_pem: Option<String>,
    /// `--audit-log FILE`: one `audit.k8s.io/v1` Event per request.
    pub audit_log: Option<PathBuf>,
    /// `--state-dir DIR`: the sim's objects survive a restart there.
    pub state_dir: Option<PathBuf>,
    /// `--namespace NAME`, repeated: namespaces created at start.
    pub namespaces: Vec<String>,
    /// `--fail-image GLOB`, repeated: images whose pulls fail.
    pub fail_images: Vec<String>,
    /// `--allow-remote`: listen beyond loopback.
    pub allow_remote: bool,
    /// `--request-log FILE`: one JSON line per API request (docs/sim.md).
    pub request_log: Option<PathBuf>,
    /// Where pods' folders live (`--pods-dir`): refused at start when pod
    /// users cannot reach it. `None`: `default_pods_dir`.
    pub pods_dir: Option<PathBuf>,
    /// The default (`None`: `<state_dir>/pods`); when pod users cannot
    /// reach it, a fresh folder under the system's temporary folder.
    pub default_pods_dir: Option<PathBuf>,
    /// Host ids for pods when the sim can switch users (docs/sim.md, "Pod
    /// users"); `None` (`--uid-range off`): never switch.
    pub uid_range: Option<(u32, u32)>,
}

impl Default for SimOptions {
    fn default() -> Self {
        SimOptions {
            listen: DEFAULT_LISTEN,
            kubeconfig_out: None,
            tls: false,
            token: None,
            client_ca: false,
            token_users: Vec::new(),
            client_ca_pem: None,
            audit_log: None,
            state_dir: None,
            namespaces: Vec::new(),
            fail_images: Vec::new(),
            allow_remote: false,
            request_log: None,
            pods_dir: None,
            default_pods_dir: None,
            uid_range: Some(super::pod_users::DEFAULT_UID_RANGE),
        }
    }
}

impl std::fmt::Debug for SimOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print a token, not even in a debug dump.
        f.debug_struct("SimOptions")
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("client_ca", &self.client_ca)
            .field("token_users", &self.token_users.len())
            .field("client_ca_file", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub enum SimError {
    /// A usage or configuration problem (exit code 2).
    Usage(String),
    /// Anything else (exit code 1).
    Failed(String),
}

impl std::fmt::Display for SimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SimError::Usage(m) | SimError::Failed(m) => f.write_str(m),
        }
    }
}

pub struct Sim {
    pub url: String,
    pub kubeconfig: String,
    pub store: Arc<Store>,
    pub faults: Arc<Faults>,
    server: Option<Arc<Server>>,
    controllers: Option<Controllers>,
    kubelet: Option<Arc<super::kubelet::Kubelet>>,
    /// The temporary state folder to remove at shutdown, when we made it.
    temp_dir: Option<PathBuf>,
}

impl Sim {
    /// Starts every part. The API server is an `http::Server` named
    /// `sim-http` with 4,096 connection threads at most (watches hold one
    /// each) and the API server's own 3 MB body limit.
    pub fn start(opts: SimOptions) -> Result<Sim, SimError> {
        if !opts.listen.ip().is_loopback() && !opts.allow_remote {
            return Err(SimError::Usage(format!(
                "refusing to listen on {}: the sim runs arbitrary commands on this host as the current user; use a loopback address or pass --allow-remote",
                opts.listen
            )));
        }
        if (opts.client_ca || opts.client_ca_pem.is_some() || !opts.token_users.is_empty())
            && !opts.tls
        {
            return Err(SimError::Usage(
                "--client-ca, --client-ca-file and --token-auth-file need --tls".into(),
            ));
        }
        let (state_dir, temp_dir) = match &opts.state_dir {
            Some(d) => (d.clone(), None),
            None => {
                let d = std::env::temp_dir().join(format!(
                    "kubegate-sim-{}-{:08x}",
                    std::process::id(),
                    rand::random::<u32>()
                ));
                (d.clone(), Some(d))
            }
        };
        std::fs::create_dir_all(&state_dir).map_err(|e| {
            SimError::Failed(format!(
                "creating state folder {}: {e}",
                state_dir.display()
            ))
        })?;

        let store = Store::new(StoreConfig::default());
        for ns in &opts.namespaces {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            match store.create(Resource::Namespace, "", obj) {
                Ok(_) | Err(super::store::StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(SimError::Usage(format!("--namespace {ns}: {e:?}"))),
            }
        }
        super::rbac::bootstrap(&store).map_err(SimError::Failed)?;
        let faults = Faults::new();

        let certs = if opts.tls {
            let mut hosts = Vec::new();
            if !opts.listen.ip().is_unspecified() {
                hosts.push(opts.listen.ip().to_string());
            }
            Some(
                super::tls::generate(&hosts, opts.client_ca)
                    .map_err(|e| SimError::Failed(e.to_string()))?,
            )
        } else {
            None
        };
        let verify_clients = opts.client_ca || opts.client_ca_pem.is_some();
        let tls_config = tls_config(certs.as_ref(), &opts)?;

        let kubelet = super::kubelet::Kubelet::start(super::kubelet::KubeletConfig {
            store: store.clone(),
            faults: faults.clone(),
            state_dir: state_dir.clone(),
            fail_images: opts.fail_images.clone(),
            pods_dir: opts.pods_dir.clone(),
            default_pods_dir: opts.default_pods_dir.clone(),
            uid_range: opts.uid_range,
            role: super::kubelet::NodeRole::embedded(),
        })
        .map_err(|e| SimError::Failed(format!("starting the kubelet: {e}")))?;
        let controllers = Controllers::start(store.clone())
            .map_err(|e| SimError::Failed(format!("starting controllers: {e}")))?;

        let auth = Auth {
            admin_token: opts.token.as_deref().map(crate::token::digest),
            token_users: opts.token_users.clone(),
            accept_client_cert: verify_clients,
        };
        let mut api = ApiServer::new(
            store.clone(),
            Some(kubelet.clone() as Arc<dyn PodStreams>),
            faults.clone(),
            auth,
            ApiConfig::default(),
        );
        if let Some(path) = &opts.request_log {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    SimError::Failed(format!("opening the request log {}: {e}", path.display()))
                })?;
            api = api.with_request_log(file);
        }
        if let Some(path) = &opts.audit_log {
            let log = super::audit::AuditLog::open(path).map_err(|e| {
                SimError::Failed(format!("opening the audit log {}: {e}", path.display()))
            })?;
            api = api.with_audit_log(log);
        }
        let api = Arc::new(api);
        let server_cfg = ServerConfig {
            max_connections: 4096,
            // The API server's own request body limit (3 MB, `MaxRequestBodyBytes`).
            max_body_bytes: 3 << 20,
            tls: tls_config,
            name: "sim-http",
            // Go's server (net/textproto) takes a bare LF as a line end,
            // and so does the API server the sim stands for (docs/sim.md).
            strict_crlf: false,
            ..ServerConfig::default()
        };
        let server = Server::bind(opts.listen, server_cfg, api.clone())
            .map_err(|e| SimError::Failed(format!("listening on {}: {e}", opts.listen)))?;
        let server = Arc::new(server);
        let weak = Arc::downgrade(&server);
        faults.set_outage(Box::new(move |d| {
            if let Some(s) = weak.upgrade() {
                s.refuse_for(d);
            }
        }));
        let addr = server.local_addr();
        api.set_server_address(addr.to_string());
        kubelet.register_node(addr.port());
        let scheme = if opts.tls { "https" } else { "http" };
        let host = if addr.ip().is_unspecified() {
            "127.0.0.1".to_string()
        } else if addr.is_ipv6() {
            format!("[{}]", addr.ip())
        } else {
            addr.ip().to_string()
        };
        let url = format!("{scheme}://{host}:{}", addr.port());
        let client = certs.as_ref().and_then(|c| c.client.as_ref());
        let kubeconfig = kubeconfig::render(&KubeconfigSpec {
            server_url: &url,
            ca_pem: certs.as_ref().map(|c| c.ca_pem.as_str()),
            token: opts.token.as_deref(),
            client_cert_pem: client.map(|c| c.cert_pem.as_str()),
            client_key_pem: client.map(|c| c.key_pem.as_str()),
            namespace: "default",
        });
        if let Some(path) = &opts.kubeconfig_out {
            kubeconfig::write(path, &kubeconfig).map_err(|e| {
                SimError::Failed(format!("writing kubeconfig {}: {e}", path.display()))
            })?;
        }
        Ok(Sim {
            url,
            kubeconfig,
            store,
            faults,
            server: Some(server),
            controllers: Some(controllers),
            kubelet: Some(kubelet),
            temp_dir,
        })
    }

    /// The kubelet running this sim's pods (`None` once shut down): what
    /// the kubelet API (`sim::kubelet_api`) serves.
    pub fn kubelet(&self) -> Option<Arc<super::kubelet::Kubelet>> {
        self.kubelet.clone()
    }

    /// Stops accepting, stops the controllers, kills every container
    /// process and removes the temporary state folder.
    pub fn shutdown(mut self) {
        self.stop_all();
    }

    fn stop_all(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        if let Some(c) = self.controllers.take() {
            c.stop();
        }
        if let Some(k) = self.kubelet.take() {
            k.shutdown();
        }
        if let Some(d) = self.temp_dir.take() {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The server's TLS: its certificate, and the CAs whose client
/// certificates authenticate (the sim's own with `--client-ca`, plus
/// `--client-ca-file`'s).
fn tls_config(
    certs: Option<&super::tls::SimCerts>,
    opts: &SimOptions,
) -> Result<Option<Arc<rustls::ServerConfig>>, SimError> {
    let Some(c) = certs else { return Ok(None) };
    let verify_clients = opts.client_ca || opts.client_ca_pem.is_some();
    let mut roots = c.ca_pem.clone();
    if let Some(extra) = &opts.client_ca_pem {
        roots.push('\n');
        roots.push_str(extra);
    }
    crate::http::tls::server_config_from_pem(
        c.server_cert_pem.as_bytes(),
        c.server_key_pem.as_bytes(),
        verify_clients.then_some(roots.as_bytes()),
    )
    .map(Some)
    .map_err(|e| SimError::Failed(e.to_string()))
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop_all();
    }
}
