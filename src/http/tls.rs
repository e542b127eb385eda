//! Building a rustls server configuration from PEM: certificate chain, key,
//! and an optional client CA whose certificates are verified, either
//! optional ([`server_config_from_pem`]) or required
//! ([`server_config_requiring_client_cert`]).
//!
//! Owns only configuration; the handshake itself runs on each connection's
//! thread (see `stream::TlsStream`). Always uses the ring provider
//! explicitly, so a second provider linked in by another crate can never make
//! the builder panic; PEM goes through rustls-pki-types (`PemObject`), not the
//! unmaintained rustls-pemfile.

use std::fmt;
use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a TLS configuration could not be built; each carries the
/// library's reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsConfigError {
    /// The certificate PEM does not parse.
    CertificatePem(String),
    /// The PEM holds no certificate.
    NoCertificate,
    /// The private key PEM does not parse.
    KeyPem(String),
    /// rustls refused the protocol versions.
    Versions(String),
    /// A client CA certificate is not a usable trust anchor.
    ClientCa(String),
    /// The client certificate verifier could not be built.
    Verifier(String),
    /// The certificate and the key do not belong together.
    Mismatch(String),
}

impl fmt::Display for TlsConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsConfigError::CertificatePem(e) => write!(f, "invalid certificate PEM: {e}"),
            TlsConfigError::NoCertificate => f.write_str("no certificate found in PEM"),
            TlsConfigError::KeyPem(e) => write!(f, "invalid private key PEM: {e}"),
            TlsConfigError::Versions(e) => write!(f, "TLS protocol versions: {e}"),
            TlsConfigError::ClientCa(e) => write!(f, "invalid client CA certificate: {e}"),
            TlsConfigError::Verifier(e) => write!(f, "client certificate verifier: {e}"),
            TlsConfigError::Mismatch(e) => write!(f, "certificate and key do not fit: {e}"),
        }
    }
}

impl std::error::Error for TlsConfigError {}

/// Parses every certificate in a PEM blob.
pub fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsConfigError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsConfigError::CertificatePem(e.to_string()))?;
    if certs.is_empty() {
        return Err(TlsConfigError::NoCertificate);
    }
    Ok(certs)
}

/// Whether a TLS client must present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    /// No certificate is asked for.
    None,
    /// One may be presented; it must chain to the CA.
    Optional,
    /// One must be presented and chain to the CA: without it the
    /// handshake fails.
    Required,
}

/// A server config serving `cert_chain_pem` (leaf first) with `key_pem`
/// (PKCS#8, PKCS#1 or SEC1). With `client_ca_pem`, clients MAY present a
/// certificate; one that is presented must chain to that CA, and its leaf
/// reaches handlers as `Request::client_cert_der`. ALPN offers `http/1.1`.
pub fn server_config_from_pem(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    match client_ca_pem {
        None => build(cert_chain_pem, key_pem, None, ClientAuth::None),
        Some(ca) => build(cert_chain_pem, key_pem, Some(ca), ClientAuth::Optional),
    }
}

/// As [`server_config_from_pem`], but every client MUST present a
/// certificate chaining to `client_ca_pem` (and to nothing else): a
/// connection without one, or with one from another CA, fails its TLS
/// handshake and never reaches a handler.
pub fn server_config_requiring_client_cert(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: &[u8],
) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    build(
        cert_chain_pem,
        key_pem,
        Some(client_ca_pem),
        ClientAuth::Required,
    )
}

fn build(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
    auth: ClientAuth,
) -> Result<Arc<rustls::ServerConfig>, TlsConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certs_from_pem(cert_chain_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| TlsConfigError::KeyPem(e.to_string()))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsConfigError::Versions(e.to_string()))?;
    let builder = match (client_ca_pem, auth) {
        (None, _) | (_, ClientAuth::None) => builder.with_no_client_auth(),
        (Some(ca), _) => {
            let mut roots = RootCertStore::empty();
            for cert in certs_from_pem(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| TlsConfigError::ClientCa(e.to_string()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = if auth == ClientAuth::Optional {
                verifier.allow_unauthenticated()
            } else {
                verifier
            };
            let verifier = verifier
                .build()
                .map_err(|e| TlsConfigError::Verifier(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| TlsConfigError::Mismatch(e.to_string()))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}
