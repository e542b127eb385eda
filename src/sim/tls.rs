//! Certificates for `kubegate sim --tls` and `--client-ca`: a throwaway CA
//! generated at start, a server certificate for loopback names, and an
//! optional client certificate the sim accepts as authentication. Nothing is
//! written to disk here; the kubeconfig embeds what a client needs.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
};

/// Certificates could not be made (rcgen's error: a key or a signature
/// failed); the sim does not start.
#[derive(Debug)]
pub struct CertError(rcgen::Error);

impl std::fmt::Display for CertError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "generating certificates: {}", self.0)
    }
}

impl std::error::Error for CertError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// PEM material for one sim run.
pub struct SimCerts {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
    /// Present when a client certificate was asked for.
    pub client: Option<ClientCert>,
}

pub struct ClientCert {
    pub cert_pem: String,
    pub key_pem: String,
    /// The user name the sim logs for this certificate (its CN).
    pub common_name: String,
}

/// Generates the CA, a server certificate valid for `localhost`, 127.0.0.1,
/// ::1 and `extra_hosts`, and (when `client` is true) a client certificate.
pub fn generate(extra_hosts: &[String], client: bool) -> Result<SimCerts, CertError> {
    let err = CertError;
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.distinguished_name = dn("kubegate-sim-ca", None);
    let ca_key = KeyPair::generate().map_err(err)?;
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).map_err(err)?;

    let mut names = vec![
        "localhost".to_string(),
        "127.0.0.1".to_string(),
        "::1".to_string(),
    ];
    for h in extra_hosts {
        if !names.contains(h) {
            names.push(h.clone());
        }
    }
    let mut server_params = CertificateParams::new(names).map_err(err)?;
    server_params.distinguished_name = dn("kubegate-sim", None);
    server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    server_params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let server_key = KeyPair::generate().map_err(err)?;
    let server_cert = server_params.signed_by(&server_key, &ca).map_err(err)?;

    let client = if client {
        // The identity `sim::reviews` reports for the certificate.
        let common_name = super::reviews::ADMIN_USER.to_string();
        let mut p = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
        p.distinguished_name = dn(&common_name, Some(super::reviews::ADMIN_GROUP));
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate().map_err(err)?;
        let cert = p.signed_by(&key, &ca).map_err(err)?;
        Some(ClientCert {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
            common_name,
        })
    } else {
        None
    };

    Ok(SimCerts {
        ca_pem: ca.pem(),
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
        client,
    })
}

fn dn(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    d.push(DnType::CommonName, cn);
    if let Some(o) = org {
        d.push(DnType::OrganizationName, o);
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_pem_material() {
        let c = generate(&["10.1.2.3".into()], true).expect("certs");
        assert!(c.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.server_cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(c.server_key_pem.contains("PRIVATE KEY"));
        let client = c.client.expect("client cert");
        assert!(client.key_pem.contains("PRIVATE KEY"));
        assert_ne!(client.cert_pem, c.server_cert_pem);
    }
}
