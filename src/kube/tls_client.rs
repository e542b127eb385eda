//! The rustls `ClientConfig` for one cluster, built once from its
//! [`TlsMaterial`] and shared by REST (ureq, through a custom connector) and
//! exec/attach (tungstenite): trusted roots (the kubeconfig CA, else the web
//! PKI roots), an optional client certificate, and — only when the
//! kubeconfig says `insecure-skip-tls-verify` — a verifier that accepts any
//! server certificate. Always the `ring` provider, explicitly: two providers
//! in one process make `ClientConfig::builder()` panic (docs/crates.md#ureq).
//!
//! With the `native-tls` cargo feature, `native_connector` builds the
//! native-tls (OpenSSL) equivalent from the same material, and every client
//! connection uses it instead (docs/tls.md).

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

/// [`client_config`], built once per distinct TLS material and then shared:
/// building one parses every CA certificate, and only a shared config
/// resumes TLS sessions (its session cache), so a caller that opens many
/// short connections to one server (exec streams) does a full handshake
/// once, then cheap resumptions. The material itself is the key (compared
/// whole, never hashed alone); at most 16 configs are kept.
pub fn cached_client_config(tls: &TlsMaterial) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    use parking_lot::Mutex;
    type Key = (
        Vec<Vec<u8>>,
        bool,
        Option<String>,
        Option<(Vec<Vec<u8>>, Vec<u8>)>,
    );
    static CACHE: Mutex<Vec<(Key, Arc<rustls::ClientConfig>)>> = Mutex::new(Vec::new());
    let key: Key = (
        tls.ca_certs.iter().map(|c| c.as_ref().to_vec()).collect(),
        tls.insecure_skip_verify,
        tls.server_name.clone(),
        tls.client_cert.as_ref().map(|cc| {
            (
                cc.chain.iter().map(|c| c.as_ref().to_vec()).collect(),
                cc.key.secret_der().to_vec(),
            )
        }),
    );
    if let Some((_, cfg)) = CACHE.lock().iter().find(|(k, _)| *k == key) {
        return Ok(cfg.clone());
    }
    let cfg = client_config(tls)?;
    let mut cache = CACHE.lock();
    if cache.len() >= 16 {
        cache.remove(0);
    }
    cache.push((key, cfg.clone()));
    Ok(cfg)
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

/// The host name native-tls verifies and sends as SNI (its
/// `connect(domain, ..)`): `tls-server-name` when set, else the URL host
/// (an IP literal is checked against the certificate's IP SANs).
pub fn verify_name(conn: &Connection) -> Result<String, TlsError> {
    match &conn.tls.server_name {
        Some(n) => Ok(n.clone()),
        None => host_of(&conn.server)
            .ok_or_else(|| TlsError(format!("server URL {:?} has no host", conn.server))),
    }
}

/// The native-tls connector for one cluster: the kubeconfig CA as the only
/// roots (the platform's store when none is given), verification off only
/// for `insecure-skip-tls-verify`, the client certificate as an identity,
/// ALPN `http/1.1`. A client key that is not PKCS#8 is refused here, with
/// the conversion command in the message: native-tls only loads PKCS#8.
#[cfg(feature = "native-tls")]
pub fn native_connector(tls: &TlsMaterial) -> Result<native_tls::TlsConnector, TlsError> {
    use rustls::pki_types::PrivateKeyDer;
    let mut b = native_tls::TlsConnector::builder();
    if tls.insecure_skip_verify {
        b.danger_accept_invalid_certs(true);
        b.danger_accept_invalid_hostnames(true);
    }
    if !tls.ca_certs.is_empty() {
        b.disable_built_in_roots(true);
        for c in &tls.ca_certs {
            let cert = native_tls::Certificate::from_der(c.as_ref())
                .map_err(|e| TlsError(format!("certificate-authority: {e}")))?;
            b.add_root_certificate(cert);
        }
    }
    if let Some(cc) = &tls.client_cert {
        let key_pem = match &cc.key {
            PrivateKeyDer::Pkcs8(k) => pem("PRIVATE KEY", k.secret_pkcs8_der()),
            PrivateKeyDer::Pkcs1(_) => return Err(not_pkcs8("PKCS#1 (BEGIN RSA PRIVATE KEY)")),
            PrivateKeyDer::Sec1(_) => return Err(not_pkcs8("SEC1 (BEGIN EC PRIVATE KEY)")),
            _ => return Err(not_pkcs8("of an unknown format")),
        };
        let chain_pem: String = cc
            .chain
            .iter()
            .map(|c| pem("CERTIFICATE", c.as_ref()))
            .collect();
        let id = native_tls::Identity::from_pkcs8(chain_pem.as_bytes(), key_pem.as_bytes())
            .map_err(|e| TlsError(format!("client certificate and key: {e}")))?;
        b.identity(id);
    }
    b.request_alpns(&["http/1.1"]);
    b.build()
        .map_err(|e| TlsError(format!("TLS setup (native-tls): {e}")))
}

#[cfg(feature = "native-tls")]
fn not_pkcs8(what: &str) -> TlsError {
    TlsError(format!(
        "client-key: the key is {what}, but native-tls (the `native-tls` build) \
         only loads PKCS#8 keys (BEGIN PRIVATE KEY); convert it with \
         `openssl pkcs8 -topk8 -nocrypt -in client.key -out client-pkcs8.key` \
         and point client-key at the result, or use a build without the \
         `native-tls` feature (rustls reads it as is)"
    ))
}

/// DER as PEM with 64-column lines.
#[cfg(feature = "native-tls")]
fn pem(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
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
        assert_eq!(verify_name(&conn).expect("name"), "kubernetes.default");
    }

    #[cfg(feature = "native-tls")]
    #[test]
    fn native_connectors() {
        use crate::kube::connection::ClientCert;
        use rustls::pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer};
        let mut t = TlsMaterial::default();
        assert!(native_connector(&t).is_ok());
        t.insecure_skip_verify = true;
        assert!(native_connector(&t).is_ok());
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("cert");
        let mut t = TlsMaterial {
            ca_certs: vec![ca.cert.der().clone()],
            ..TlsMaterial::default()
        };
        assert!(native_connector(&t).is_ok());
        // A PKCS#8 client key works.
        t.client_cert = Some(ClientCert {
            chain: vec![ca.cert.der().clone()],
            key: PrivateKeyDer::Pkcs8(ca.signing_key.serialize_der().into()),
        });
        assert!(native_connector(&t).is_ok(), "pkcs8");
        // A PKCS#1 one is refused with the fix in the message (no panic).
        t.client_cert = Some(ClientCert {
            chain: vec![ca.cert.der().clone()],
            key: PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(vec![0x30, 0x00])),
        });
        let e = native_connector(&t).expect_err("pkcs1");
        assert!(e.0.contains("PKCS#8"), "{e}");
        assert!(e.0.contains("openssl pkcs8 -topk8"), "{e}");
    }
}
