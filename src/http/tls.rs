//! Building a rustls server configuration from PEM: certificate chain, key,
//! and an optional client CA whose certificates are verified but optional.
//!
//! Owns only configuration; the handshake itself runs on each connection's
//! thread (see `stream::TlsStream`). Always uses the ring provider
//! explicitly, so a second provider linked in by another crate can never make
//! the builder panic; PEM goes through rustls-pki-types (`PemObject`), not the
//! unmaintained rustls-pemfile.

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Parses every certificate in a PEM blob.
pub fn certs_from_pem(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("invalid certificate PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no certificate found in PEM".into());
    }
    Ok(certs)
}

/// A server config serving `cert_chain_pem` (leaf first) with `key_pem`
/// (PKCS#8, PKCS#1 or SEC1). With `client_ca_pem`, clients MAY present a
/// certificate; one that is presented must chain to that CA, and its leaf
/// reaches handlers as `Request::client_cert_der`. ALPN offers `http/1.1`.
pub fn server_config_from_pem(
    cert_chain_pem: &[u8],
    key_pem: &[u8],
    client_ca_pem: Option<&[u8]>,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs = certs_from_pem(cert_chain_pem)?;
    let key = PrivateKeyDer::from_pem_slice(key_pem)
        .map_err(|e| format!("invalid private key PEM: {e}"))?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS protocol versions: {e}"))?;
    let builder = match client_ca_pem {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let mut roots = RootCertStore::empty();
            for cert in certs_from_pem(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| format!("invalid client CA certificate: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .allow_unauthenticated()
                .build()
                .map_err(|e| format!("client certificate verifier: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("certificate and key do not fit: {e}"))?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}
