//! How to reach one cluster: the server URL, the TLS material, and the
//! credentials, as every part of the client (REST, watch, exec/attach, pod
//! proxy) needs them. Loaded from a kubeconfig, the in-cluster service
//! account, or handed over by the embedded sim (`kube::config`); consumed by
//! `kube::client` and `kube::remote`. Plain data plus one trait: building a
//! ureq agent or a rustls `ClientConfig` from it is the consumer's job.

use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::sync::Arc;

/// Where the cluster is and how to talk to it.
#[derive(Clone)]
pub struct Connection {
    /// `https://host:port` or `http://host:port`, without a trailing slash
    /// (a path prefix, e.g. behind a proxy, is kept).
    pub server: String,
    pub tls: TlsMaterial,
    pub credentials: Arc<dyn Credentials>,
    /// The namespace of the kubeconfig context (or the service account's).
    pub namespace: String,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print credentials.
        f.debug_struct("Connection")
            .field("server", &self.server)
            .field("tls", &self.tls)
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// TLS settings from the kubeconfig cluster and user entries.
#[derive(Clone, Default)]
pub struct TlsMaterial {
    /// Trust these roots (certificate-authority[-data]); empty: the
    /// platform's web PKI roots.
    pub ca_certs: Vec<CertificateDer<'static>>,
    /// insecure-skip-tls-verify.
    pub insecure_skip_verify: bool,
    /// tls-server-name: the name checked against the server's certificate
    /// instead of the URL's host.
    pub server_name: Option<String>,
    /// A client certificate chain and its key (client-certificate[-data] and
    /// client-key[-data], or an exec plugin's).
    pub client_cert: Option<ClientCert>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_certs", &self.ca_certs.len())
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("server_name", &self.server_name)
            .field("client_cert", &self.client_cert.is_some())
            .finish()
    }
}

pub struct ClientCert {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
}

impl Clone for ClientCert {
    fn clone(&self) -> Self {
        ClientCert {
            chain: self.chain.clone(),
            key: self.key.clone_key(),
        }
    }
}

/// Why credentials could not be produced (an exec plugin failed, a token
/// file is unreadable). The message names the file or command at fault and
/// never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialsError(pub String);

impl fmt::Display for CredentialsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CredentialsError {}

/// A source of bearer tokens. Implementations cache, and re-read or re-run
/// on expiry (token files: at least every minute; exec plugins: at
/// `expirationTimestamp`) and after `invalidate` (a 401).
pub trait Credentials: Send + Sync {
    /// The `Authorization: Bearer` token to send now, if any.
    fn bearer(&self) -> Result<Option<String>, CredentialsError>;
    /// The server answered 401 with the last token: drop any cache.
    fn invalidate(&self) {}
    /// A client certificate produced by an exec plugin, when it gives one
    /// instead of a token (rare; kubeconfig certificates live in
    /// `TlsMaterial`).
    fn client_cert(&self) -> Result<Option<ClientCert>, CredentialsError> {
        Ok(None)
    }
}

/// No credentials (anonymous, or a client certificate in `TlsMaterial`).
pub struct Anonymous;

impl Credentials for Anonymous {
    fn bearer(&self) -> Result<Option<String>, CredentialsError> {
        Ok(None)
    }
}

/// A fixed token (kubeconfig `token`, or a test).
pub struct StaticToken(pub String);

impl Credentials for StaticToken {
    fn bearer(&self) -> Result<Option<String>, CredentialsError> {
        Ok(Some(self.0.clone()))
    }
}

impl fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StaticToken(<redacted>)")
    }
}

impl Connection {
    /// A plain-HTTP connection without credentials (the sim on loopback).
    pub fn plain(server: &str) -> Connection {
        Connection {
            server: server.trim_end_matches('/').to_string(),
            tls: TlsMaterial::default(),
            credentials: Arc::new(Anonymous),
            namespace: "default".into(),
        }
    }

    pub fn is_tls(&self) -> bool {
        self.server.starts_with("https://")
    }
}
