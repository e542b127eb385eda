//! Discovery and JWK set fetches, through the project's own client stack:
//! a ureq agent on `kube::client::transport`'s connector (our rustls
//! configuration with the issuer's `certificate_authority`, or native-tls
//! under that feature), no proxy, no redirect, a connect and a whole-request
//! timeout, and a bounded body. Called only from an issuer's refresher
//! thread, never on a request's path.

use std::path::Path;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;
use serde_json::Value;

use crate::config::oidc::url_problem;
use crate::kube::client::transport::{connector, TlsParts};
use crate::kube::connection::{Connection, TlsMaterial};

use super::keys::{parse_jwks, Key};

/// Largest discovery document or key set.
pub const MAX_BODY_BYTES: u64 = 256 * 1024;
/// Connecting to the issuer.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A whole fetch (connect, TLS, request, body).
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Where an issuer's keys come from.
#[derive(Debug, Clone)]
pub struct Source {
    /// The issuer identifier the discovery document must name.
    pub issuer: String,
    pub discovery: String,
    pub tls: TlsMaterial,
}

impl Source {
    /// The same issuer, discovery URL and trusted roots.
    pub fn same_as(&self, o: &Source) -> bool {
        self.issuer == o.issuer
            && self.discovery == o.discovery
            && self.tls.ca_certs == o.tls.ca_certs
    }
}

/// The PEM certificates of a `certificate_authority` file.
pub fn read_ca(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: invalid certificate PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: no certificate in it", path.display()));
    }
    Ok(certs)
}

/// `scheme://host[:port]` of a URL.
fn origin(url: &str) -> &str {
    let after = url.find("://").map_or(0, |i| i + 3);
    match url[after..].find('/') {
        Some(i) => &url[..after + i],
        None => url,
    }
}

/// GET `url` as JSON (200 only).
fn get_json(url: &str, tls: &TlsMaterial) -> Result<Value, String> {
    let mut conn = Connection::plain(origin(url));
    conn.tls = tls.clone();
    let parts = if url.starts_with("https://") {
        Some(TlsParts::new(tls, &conn).map_err(|e| format!("TLS for {url}: {e}"))?)
    } else {
        None
    };
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .proxy(None)
        .max_redirects(0)
        .user_agent(concat!("kubegate/", env!("CARGO_PKG_VERSION")))
        .timeout_global(Some(FETCH_TIMEOUT))
        .timeout_connect(Some(CONNECT_TIMEOUT))
        .build();
    let agent = ureq::Agent::with_parts(
        config,
        connector(parts),
        ureq::unversioned::resolver::DefaultResolver::default(),
    );
    let resp = agent
        .get(url)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status().as_u16();
    if status != 200 {
        return Err(format!("GET {url}: HTTP {status}"));
    }
    let body = resp
        .into_body()
        .into_with_config()
        .limit(MAX_BODY_BYTES)
        .read_to_vec()
        .map_err(|e| {
            format!("GET {url}: reading the body (at most {MAX_BODY_BYTES} bytes): {e}")
        })?;
    serde_json::from_slice(&body).map_err(|e| format!("GET {url}: not JSON: {e}"))
}

/// The discovery document's `jwks_uri`, after checking its `issuer`.
pub fn jwks_uri(doc: &Value, issuer: &str) -> Result<String, String> {
    if doc.get("issuer").and_then(Value::as_str) != Some(issuer) {
        return Err(format!(
            "the discovery document's issuer is not {issuer:?}: refused (it must name the configured url exactly)"
        ));
    }
    let Some(uri) = doc.get("jwks_uri").and_then(Value::as_str) else {
        return Err("the discovery document has no jwks_uri".into());
    };
    if let Some(p) = url_problem(uri) {
        return Err(format!("jwks_uri: {p}"));
    }
    Ok(uri.to_string())
}

/// Discovery, then the key set: the usable keys.
pub fn fetch_keys(src: &Source) -> Result<Vec<Key>, String> {
    let doc = get_json(&src.discovery, &src.tls)?;
    let uri = jwks_uri(&doc, &src.issuer)?;
    let set = get_json(&uri, &src.tls)?;
    let keys = parse_jwks(&set).map_err(|e| format!("{uri}: {e}"))?;
    if keys.is_empty() {
        return Err(format!("{uri}: no usable signing key in the set"));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_discovery_document_must_name_the_issuer() {
        let doc = json!({"issuer": "https://idp", "jwks_uri": "https://idp/keys"});
        assert_eq!(jwks_uri(&doc, "https://idp").unwrap(), "https://idp/keys");
        assert!(jwks_uri(&doc, "https://idp/").is_err());
        let plain = json!({"issuer": "https://idp", "jwks_uri": "http://evil.example/keys"});
        assert!(jwks_uri(&plain, "https://idp").is_err());
        assert!(jwks_uri(&json!({"issuer": "https://idp"}), "https://idp").is_err());
        assert_eq!(origin("https://a:1/b/c"), "https://a:1");
        assert_eq!(origin("http://a"), "http://a");
    }
}
