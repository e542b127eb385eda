//! The rustls `ClientConfig` for one cluster, built once from its
//! [`TlsMaterial`] and shared by REST (ureq, through a custom connector) and
//! exec/attach (tungstenite): trusted roots (the kubeconfig CA, else the web
//! PKI roots), an optional client certificate, and — only when the
//! kubeconfig says `insecure-skip-tls-verify` — a verifier that accepts any
//! server certificate. Always the `ring` provider, explicitly: two providers
//! in one process make `ClientConfig::builder()` panic (crates.md).

use super::connection::{Connection, TlsMaterial};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::fmt;
use std::sync::Arc;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsError(pub String);

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TlsError {}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Builds the client configuration. ALPN offers only `http/1.1`: the
/// client speaks HTTP/1.1 and WebSocket upgrades need it.
pub fn client_config(tls: &TlsMaterial) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError(format!("TLS setup: {e}")))?;
    let builder = if tls.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyServerCert(provider())))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        if tls.ca_certs.is_empty() {
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        } else {
            for c in &tls.ca_certs {
                roots
                    .add(c.clone())
                    .map_err(|e| TlsError(format!("certificate-authority: {e}")))?;
            }
        }
        builder.with_root_certificates(roots)
    };
    let mut cfg = match &tls.client_cert {
        Some(cc) => builder
            .with_client_auth_cert(cc.chain.clone(), cc.key.clone_key())
            .map_err(|e| TlsError(format!("client certificate and key: {e}")))?,
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

/// The name to verify the server's certificate against: `tls-server-name`
/// when set, else the host of the server URL.
pub fn server_name(conn: &Connection) -> Result<ServerName<'static>, TlsError> {
    let host = match &conn.tls.server_name {
        Some(n) => n.clone(),
        None => host_of(&conn.server)
            .ok_or_else(|| TlsError(format!("server URL {:?} has no host", conn.server)))?,
    };
    ServerName::try_from(host.clone())
        .map_err(|_| TlsError(format!("{host:?} is not a valid TLS server name")))
}

/// The host of `scheme://host[:port][/path]`, without IPv6 brackets.
pub fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    let authority = rest.split('/').next()?;
    let authority = authority
        .rsplit_once('@')
        .map(|(_, a)| a)
        .unwrap_or(authority);
    if let Some(v6) = authority.strip_prefix('[') {
        return v6.split(']').next().map(str::to_string);
    }
    let host = match authority.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => authority,
    };
    (!host.is_empty()).then(|| host.to_string())
}

/// `insecure-skip-tls-verify: true`: the handshake still happens and its
/// signatures are checked, but the certificate chain and name are not.
#[derive(Debug)]
struct AcceptAnyServerCert(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAnyServerCert {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts() {
        assert_eq!(
            host_of("https://127.0.0.1:6443").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            host_of("https://api.example.com/prefix").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(host_of("https://[::1]:6443").as_deref(), Some("::1"));
        assert_eq!(host_of("http://h").as_deref(), Some("h"));
        assert_eq!(host_of("https://:6443"), None);
    }

    #[test]
    fn builds_configs() {
        let mut t = TlsMaterial::default();
        assert!(client_config(&t).is_ok());
        t.insecure_skip_verify = true;
        assert!(client_config(&t).is_ok());
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let t = TlsMaterial {
            ca_certs: vec![ca.cert.der().clone()],
            ..TlsMaterial::default()
        };
        assert!(client_config(&t).is_ok());
        let mut conn = Connection::plain("https://127.0.0.1:1");
        assert_eq!(server_name(&conn).expect("name").to_str(), "127.0.0.1");
        conn.tls.server_name = Some("kubernetes.default".into());
        assert_eq!(
            server_name(&conn).expect("name").to_str(),
            "kubernetes.default"
        );
    }
}
