//! Base64 and PEM decoding of kubeconfig certificate and key material, and
//! up-front validation: CA certificates must parse as trust anchors, and a
//! client key must load and match its certificate. Validating here matters
//! because ureq's rustls path panics on an invalid client key (docs/crates.md#ureq),
//! and because an error at load time can name the kubeconfig key at fault.
//! Error strings are our own: decoder messages can quote the input.

use base64::Engine;
use rustls::crypto::CryptoProvider;
use rustls::sign::CertifiedKey;
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;

/// What is wrong with base64 or PEM material, in our own words (decoder
/// messages can quote the input).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PemError {
    /// A `*-data` field is not base64.
    Base64,
    /// No `-----BEGIN ` line at all; what was expected.
    NotPem(Expected),
    /// A PEM section is malformed (the reason, e.g. no END line).
    Section(&'static str),
    /// PEM, but no `CERTIFICATE` block.
    NoCertificate,
    /// PEM, but no private key block.
    NoKey,
    /// An encrypted private key (no passphrase can be given).
    Encrypted,
    /// A CA certificate that cannot be a trust anchor: its position
    /// (1-based) and how many there are.
    BadCa { index: usize, of: usize },
}

/// The PEM block a [`PemError::NotPem`] expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expected {
    Certificate,
    PrivateKey,
}

impl fmt::Display for PemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PemError::Base64 => f.write_str("not valid base64"),
            PemError::NotPem(Expected::Certificate) => {
                f.write_str("does not contain PEM data (expected -----BEGIN CERTIFICATE-----)")
            }
            PemError::NotPem(Expected::PrivateKey) => {
                f.write_str("does not contain PEM data (expected -----BEGIN … PRIVATE KEY-----)")
            }
            PemError::Section(m) => f.write_str(m),
            PemError::NoCertificate => f.write_str("contains no PEM CERTIFICATE block"),
            PemError::NoKey => f.write_str(
                "contains no private key (expected an RSA PRIVATE KEY, \
                 PRIVATE KEY or EC PRIVATE KEY block)",
            ),
            PemError::Encrypted => f.write_str("encrypted private keys are not supported"),
            PemError::BadCa { of: 1, .. } => {
                f.write_str("the certificate is not a valid X.509 certificate")
            }
            PemError::BadCa { index, .. } => {
                write!(f, "certificate #{index} is not a valid X.509 certificate")
            }
        }
    }
}

impl std::error::Error for PemError {}

/// Decodes a kubeconfig `*-data` field: standard base64, padding optional,
/// line breaks and spaces ignored (Go's decoder skips `\r` and `\n`).
pub(crate) fn decode_base64(s: &str) -> Result<Vec<u8>, PemError> {
    let compact: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT
        .decode(&compact)
        .map_err(|_| PemError::Base64)
}

pub(crate) fn encode_base64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn pem_error(e: &pem::Error) -> PemError {
    // Never include the error's own text: it can carry input bytes.
    PemError::Section(match e {
        pem::Error::MissingSectionEnd { .. } => "a PEM section has no END line",
        pem::Error::IllegalSectionStart { .. } => "a PEM BEGIN line is malformed",
        pem::Error::Base64Decode(_) => "a PEM section's body is not valid base64",
        pem::Error::SectionTooLarge => "a PEM section is too large",
        pem::Error::NoItemsFound => "no PEM item of the expected type",
        _ => "not valid PEM",
    })
}

fn looks_like_pem(b: &[u8]) -> bool {
    b.windows(11).any(|w| w == b"-----BEGIN ")
}

/// Every `CERTIFICATE` block of a PEM bundle (at least one).
pub(crate) fn certificates(bytes: &[u8]) -> Result<Vec<CertificateDer<'static>>, PemError> {
    if !looks_like_pem(bytes) {
        return Err(PemError::NotPem(Expected::Certificate));
    }
    let mut out = Vec::new();
    for item in CertificateDer::pem_slice_iter(bytes) {
        out.push(item.map_err(|e| pem_error(&e))?);
    }
    if out.is_empty() {
        return Err(PemError::NoCertificate);
    }
    Ok(out)
}

/// The private key of a PEM file: PKCS#1 `RSA PRIVATE KEY`, PKCS#8
/// `PRIVATE KEY` or SEC1 `EC PRIVATE KEY`.
pub(crate) fn private_key(bytes: &[u8]) -> Result<PrivateKeyDer<'static>, PemError> {
    if !looks_like_pem(bytes) {
        return Err(PemError::NotPem(Expected::PrivateKey));
    }
    let encrypted = |needle: &[u8]| bytes.windows(needle.len()).any(|w| w == needle);
    if encrypted(b"ENCRYPTED PRIVATE KEY") || encrypted(b"Proc-Type: 4,ENCRYPTED") {
        return Err(PemError::Encrypted);
    }
    PrivateKeyDer::from_pem_slice(bytes).map_err(|e| match e {
        pem::Error::NoItemsFound => PemError::NoKey,
        e => pem_error(&e),
    })
}

/// Checks that every CA certificate can serve as a trust anchor.
pub(crate) fn check_ca(certs: &[CertificateDer<'static>]) -> Result<(), PemError> {
    for (i, c) in certs.iter().enumerate() {
        let mut store = rustls::RootCertStore::empty();
        if store.add(c.clone()).is_err() {
            return Err(PemError::BadCa {
                index: i + 1,
                of: certs.len(),
            });
        }
    }
    Ok(())
}

/// What is wrong with a client certificate and key pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PairError {
    /// The key does not load (not RSA/ECDSA/Ed25519, or corrupt).
    Key(String),
    /// The end-entity certificate does not parse.
    Cert(String),
    /// The key is not the certificate's.
    Mismatch,
}

/// Loads the key with the `ring` provider (the one `tls_client` uses) and
/// compares its public key with the certificate's.
pub(crate) fn check_pair(
    chain: &[CertificateDer<'static>],
    key: &PrivateKeyDer<'static>,
) -> Result<(), PairError> {
    let provider: CryptoProvider = rustls::crypto::ring::default_provider();
    let signing = provider
        .key_provider
        .load_private_key(key.clone_key())
        .map_err(|_| {
            PairError::Key(
                "not a usable private key (corrupt, or not an RSA, ECDSA P-256/P-384 or \
                 Ed25519 key)"
                    .into(),
            )
        })?;
    let ck = CertifiedKey::new(chain.to_vec(), signing);
    match ck.keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(PairError::Mismatch)
        }
        Err(rustls::Error::InconsistentKeys(_)) => Ok(()),
        Err(_) => Err(PairError::Cert(
            "the certificate is not a valid X.509 certificate".into(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let c = rcgen::generate_simple_self_signed(vec!["client".to_string()]).expect("cert");
        (c.cert.pem(), c.signing_key.serialize_pem())
    }

    #[test]
    fn base64_lenient_on_whitespace_and_padding() {
        assert_eq!(decode_base64("aGk=").expect("b64"), b"hi");
        assert_eq!(decode_base64("aGk").expect("b64"), b"hi");
        assert_eq!(decode_base64("aG\nk=\r\n").expect("b64"), b"hi");
        assert_eq!(
            decode_base64("a$b").expect_err("bad").to_string(),
            "not valid base64"
        );
    }

    #[test]
    fn certs_and_keys() {
        let (cert, key) = pair();
        let chain = certificates(cert.as_bytes()).expect("cert");
        assert_eq!(chain.len(), 1);
        let k = private_key(key.as_bytes()).expect("key");
        check_ca(&chain).expect("ca");
        check_pair(&chain, &k).expect("pair");
        let (cert2, _) = pair();
        let other = certificates(cert2.as_bytes()).expect("cert2");
        assert_eq!(check_pair(&other, &k), Err(PairError::Mismatch));
        assert!(certificates(key.as_bytes()).is_err());
        assert!(private_key(cert.as_bytes()).is_err());
        assert!(certificates(b"\x00\x01binary").is_err());
    }

    #[test]
    fn garbage_pem_bodies_give_errors_not_panics() {
        let fake = "-----BEGIN CERTIFICATE-----\nRkFLRUNFUlQ=\n-----END CERTIFICATE-----\n";
        let c = certificates(fake.as_bytes()).expect("decodes as PEM");
        assert!(check_ca(&c).is_err());
        let fake_key =
            "-----BEGIN RSA PRIVATE KEY-----\nRkFLRUtFWQ==\n-----END RSA PRIVATE KEY-----\n";
        let k = private_key(fake_key.as_bytes()).expect("decodes as PEM");
        assert!(matches!(check_pair(&c, &k), Err(PairError::Key(_))));
        let enc =
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n";
        assert!(private_key(enc.as_bytes())
            .expect_err("encrypted")
            .to_string()
            .contains("encrypted"));
        let unterminated = "-----BEGIN CERTIFICATE-----\nAAAA\n";
        assert!(certificates(unterminated.as_bytes()).is_err());
    }
}
