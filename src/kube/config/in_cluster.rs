//! In-cluster configuration: the API server from `KUBERNETES_SERVICE_HOST`
//! and `KUBERNETES_SERVICE_PORT`, and the pod's service account from its
//! mounted folder (`token`, re-read as it rotates; `ca.crt`; `namespace`).
//! The folder is a parameter so tests can point it at a temp dir.

use super::error::{KubeconfigError, KubeconfigErrorKind as Kind};
use super::pem;
use super::token_file::TokenFile;
use super::Env;
use crate::kube::connection::{Connection, TlsMaterial};
use std::path::Path;
use std::sync::Arc;

/// Where the kubelet mounts the service account.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// The connection a pod's service account gives. The namespace is
/// `POD_NAMESPACE` when set, else the account's `namespace` file, else
/// `default` (as kubectl does).
pub fn in_cluster(env: &Env, sa_dir: &Path) -> Result<Connection, KubeconfigError> {
    let var = |k: &str| -> Result<&str, KubeconfigError> {
        env.get_str(k).map(str::trim).ok_or_else(|| {
            KubeconfigError::at(
                Kind::NoConfig,
                "in-cluster configuration",
                k,
                "not set (not running in a pod?)",
            )
        })
    };
    let host = var("KUBERNETES_SERVICE_HOST")?;
    let port = var("KUBERNETES_SERVICE_PORT")?;
    let bad =
        |k: &str, m: &str| KubeconfigError::at(Kind::Invalid, "in-cluster configuration", k, m);
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(bad("KUBERNETES_SERVICE_PORT", "not a port number"));
    }
    if host.is_empty()
        || host
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "/?#@".contains(c))
    {
        return Err(bad("KUBERNETES_SERVICE_HOST", "not a host name or address"));
    }
    // An IPv6 address needs brackets in a URL.
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    let server = format!("https://{host}:{port}");

    let label = sa_dir.display().to_string();
    let ca_path = sa_dir.join("ca.crt");
    let ca_bytes = std::fs::read(&ca_path).map_err(|e| {
        KubeconfigError::at(Kind::Io, &label, "ca.crt", format!("cannot read: {e}"))
    })?;
    let ca_certs = pem::certificates(&ca_bytes)
        .map_err(|m| KubeconfigError::at(Kind::Invalid, &label, "ca.crt", m.to_string()))?;
    pem::check_ca(&ca_certs)
        .map_err(|m| KubeconfigError::at(Kind::Invalid, &label, "ca.crt", m.to_string()))?;

    let token = TokenFile::new(sa_dir.join("token"));
    token
        .prime()
        .map_err(|e| KubeconfigError::at(Kind::Credentials, &label, "token", e.0))?;

    let namespace = match env.get_str("POD_NAMESPACE") {
        Some(ns) => ns.trim().to_string(),
        None => std::fs::read_to_string(sa_dir.join("namespace"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "default".to_string()),
    };
    Ok(Connection {
        server,
        tls: TlsMaterial {
            ca_certs,
            ..TlsMaterial::default()
        },
        credentials: Arc::new(token),
        namespace,
        impersonate: None,
    })
}
