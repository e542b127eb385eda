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
    /// Act as someone else: every request (REST, watch, exec/attach/
    /// port-forward upgrades, pod proxy) carries `Impersonate-User` and
    /// `Impersonate-Group` (docs/SECURITY.md#impersonation).
    pub impersonate: Option<Impersonation>,
}

/// Who a connection acts as (Kubernetes user impersonation): the API
/// server authorizes the request as `user` in `groups` (plus
/// `system:authenticated`, which it adds itself) after checking that the
/// connection's own identity may `impersonate` them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Impersonation {
    user: String,
    groups: Vec<String>,
}

/// Why a name cannot be impersonated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImpersonationError(pub String);

impl fmt::Display for ImpersonationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ImpersonationError {}

/// Longest user or group name sent in an impersonation header.
pub const MAX_IMPERSONATED_NAME: usize = 1024;

impl Impersonation {
    /// `user` in `groups`. Each name must be a usable header value that
    /// means to the API server exactly what it means here: not empty, at
    /// most [`MAX_IMPERSONATED_NAME`] bytes, printable ASCII only (no
    /// control characters, no line breaks, no bytes a proxy might
    /// re-encode), and no leading or trailing space (HTTP trims it).
    pub fn new(user: &str, groups: &[String]) -> Result<Impersonation, ImpersonationError> {
        check_name("user", user)?;
        for g in groups {
            check_name("group", g)?;
        }
        Ok(Impersonation {
            user: user.to_string(),
            groups: groups.to_vec(),
        })
    }

    pub fn user(&self) -> &str {
        &self.user
    }

    pub fn groups(&self) -> &[String] {
        &self.groups
    }

    /// The request headers: one `Impersonate-User`, one `Impersonate-Group`
    /// per group (repeated, never comma-joined: the API server reads each
    /// header value as one group).
    pub fn headers(&self) -> Vec<(String, String)> {
        let mut h = vec![("Impersonate-User".to_string(), self.user.clone())];
        for g in &self.groups {
            h.push(("Impersonate-Group".to_string(), g.clone()));
        }
        h
    }
}

fn check_name(what: &str, name: &str) -> Result<(), ImpersonationError> {
    if name.is_empty() {
        return Err(ImpersonationError(format!(
            "an empty {what} name cannot be impersonated"
        )));
    }
    if name.len() > MAX_IMPERSONATED_NAME {
        return Err(ImpersonationError(format!(
            "a {what} name longer than {MAX_IMPERSONATED_NAME} bytes cannot be impersonated"
        )));
    }
    if !name.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(ImpersonationError(format!(
            "the {what} name {name:?} holds a byte that is not printable ASCII: it cannot be sent as an impersonation header"
        )));
    }
    if name.starts_with(' ') || name.ends_with(' ') {
        return Err(ImpersonationError(format!(
            "the {what} name {name:?} starts or ends with a space, which HTTP drops"
        )));
    }
    Ok(())
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
            impersonate: None,
        }
    }

    pub fn is_tls(&self) -> bool {
        self.server.starts_with("https://")
    }

    /// This connection acting as `who`.
    pub fn impersonating(&self, who: Impersonation) -> Connection {
        Connection {
            impersonate: Some(who),
            ..self.clone()
        }
    }

    /// The impersonation headers of every request (none without one).
    pub fn impersonation_headers(&self) -> Vec<(String, String)> {
        self.impersonate
            .as_ref()
            .map(Impersonation::headers)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod impersonation_tests {
    use super::*;

    #[test]
    fn headers_repeat_one_group_each() {
        let i = Impersonation::new("oidc:ann", &["dev,ops".into(), "team-a".into()]).unwrap();
        assert_eq!(
            i.headers(),
            vec![
                ("Impersonate-User".to_string(), "oidc:ann".to_string()),
                ("Impersonate-Group".to_string(), "dev,ops".to_string()),
                ("Impersonate-Group".to_string(), "team-a".to_string()),
            ]
        );
        let c = Connection::plain("http://127.0.0.1:1").impersonating(i);
        assert_eq!(c.impersonation_headers().len(), 3);
        assert!(Connection::plain("http://127.0.0.1:1")
            .impersonation_headers()
            .is_empty());
    }

    #[test]
    fn names_that_would_mean_more_upstream_are_refused() {
        for bad in [
            "",
            "ann\r\nImpersonate-Group: system:masters",
            "ann\n",
            "tab\there",
            " ann",
            "ann ",
            "ünïcode",
            "del\u{7f}",
        ] {
            assert!(Impersonation::new(bad, &[]).is_err(), "{bad:?}");
            assert!(
                Impersonation::new("ann", &[bad.to_string()]).is_err(),
                "{bad:?}"
            );
        }
        let long = "a".repeat(MAX_IMPERSONATED_NAME + 1);
        assert!(Impersonation::new(&long, &[]).is_err());
        assert!(Impersonation::new("oidc:ann@example.com", &["oidc:dev team".into()]).is_ok());
    }
}
