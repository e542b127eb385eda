//! A test OIDC issuer on loopback: a small HTTP server that serves the
//! discovery document and a JWK set the test can swap (key rotation), that
//! counts the requests it gets (a refused `iss` must cause none), and that
//! the test can stop (an unreachable issuer). The signing keys are RSA
//! 2048, made at test time with `openssl genpkey` in a temporary folder
//! (never committed), and tokens are signed with jsonwebtoken's
//! `EncodingKey` (or forged by hand: `alg: none`, HS256 keyed with the
//! public key's PEM).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use serde_json::{json, Value};

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// Seconds since the Unix epoch.
pub fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

/// An RSA signing key of the test issuer.
pub struct RsaKey {
    pub kid: String,
    /// PKCS#8 PEM of the private key.
    pub pem: Vec<u8>,
    /// SPKI PEM of the public key.
    pub public_pem: Vec<u8>,
    /// The modulus, base64url.
    pub n: String,
}

fn openssl(args: &[&str]) -> Vec<u8> {
    let out = Command::new("openssl")
        .args(args)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

impl RsaKey {
    /// A fresh 2048-bit key, made in `dir`.
    pub fn generate(dir: &Path, kid: &str) -> RsaKey {
        let path = dir.join(format!("{kid}.pem"));
        let p = path.to_str().expect("utf-8 path");
        openssl(&[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            p,
        ]);
        let public_pem = openssl(&["pkey", "-in", p, "-pubout"]);
        let modulus =
            String::from_utf8(openssl(&["rsa", "-in", p, "-noout", "-modulus"])).expect("utf-8");
        let hex = modulus.trim().trim_start_matches("Modulus=");
        let bytes: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
            .collect();
        RsaKey {
            kid: kid.to_string(),
            pem: std::fs::read(&path).expect("read the key"),
            public_pem,
            n: b64(&bytes),
        }
    }

    /// The public JWK (no `alg`: RS256 is implied).
    pub fn jwk(&self) -> Value {
        json!({"kty": "RSA", "use": "sig", "kid": self.kid, "n": self.n, "e": "AQAB"})
    }

    /// `claims` signed RS256 with this key and its kid.
    pub fn sign(&self, claims: &Value) -> String {
        self.sign_with(claims, jsonwebtoken::Algorithm::RS256, Some(&self.kid))
    }

    /// `claims` signed with `alg` (an RSA one) and `kid` in the header.
    pub fn sign_with(
        &self,
        claims: &Value,
        alg: jsonwebtoken::Algorithm,
        kid: Option<&str>,
    ) -> String {
        let mut h = jsonwebtoken::Header::new(alg);
        h.kid = kid.map(str::to_string);
        let key = jsonwebtoken::EncodingKey::from_rsa_pem(&self.pem).expect("RSA PEM");
        jsonwebtoken::encode(&h, claims, &key).expect("sign")
    }

    /// HS256 keyed with this key's public PEM (the algorithm-confusion
    /// attack).
    pub fn forge_hs256(&self, claims: &Value) -> String {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
        h.kid = Some(self.kid.clone());
        let key = jsonwebtoken::EncodingKey::from_secret(&self.public_pem);
        jsonwebtoken::encode(&h, claims, &key).expect("sign")
    }
}

/// An unsigned token (`alg: none`).
pub fn forge_none(kid: &str, claims: &Value) -> String {
    let h = json!({"alg": "none", "typ": "JWT", "kid": kid});
    format!(
        "{}.{}.",
        b64(h.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

struct Shared {
    url: String,
    jwks: Mutex<Value>,
    hits: AtomicUsize,
    stop: AtomicBool,
}

/// The issuer: `url` is `http://127.0.0.1:PORT`.
pub struct TestIssuer {
    pub url: String,
    addr: String,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl TestIssuer {
    /// Serves these keys until stopped (or dropped).
    pub fn start(keys: &[&RsaKey]) -> TestIssuer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the issuer");
        let addr = listener.local_addr().expect("address").to_string();
        let url = format!("http://{addr}");
        let shared = Arc::new(Shared {
            url: url.clone(),
            jwks: Mutex::new(Value::Null),
            hits: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(c) = conn {
                    serve(&s, c);
                }
            }
        });
        let issuer = TestIssuer {
            url,
            addr,
            shared,
            thread: Some(thread),
        };
        issuer.set_keys(keys);
        issuer
    }

    /// Replaces the published key set (a rotation).
    pub fn set_keys(&self, keys: &[&RsaKey]) {
        let set: Vec<Value> = keys.iter().map(|k| k.jwk()).collect();
        *self.shared.jwks.lock().expect("lock") = json!({ "keys": set });
    }

    /// Requests served so far (discovery and key set).
    pub fn hits(&self) -> usize {
        self.shared.hits.load(Ordering::SeqCst)
    }

    /// Stops serving and closes the port: connections are refused.
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop.
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for TestIssuer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(s: &Shared, mut c: TcpStream) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < 16 * 1024 {
        match c.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
    s.hits.fetch_add(1, Ordering::SeqCst);
    let (status, body) = match path.as_str() {
        "/.well-known/openid-configuration" => (
            "200 OK",
            json!({"issuer": s.url, "jwks_uri": format!("{}/keys", s.url),
                   "device_authorization_endpoint": format!("{}/device", s.url),
                   "token_endpoint": format!("{}/token", s.url)})
            .to_string(),
        ),
        "/keys" => ("200 OK", s.jwks.lock().expect("lock").to_string()),
        _ => ("404 Not Found", "{}".to_string()),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = c.write_all(resp.as_bytes());
}

/// The claims of a good token for `sub` (email verified, group `dev`,
/// audience `kubegate`), valid for 10 minutes.
pub fn claims(issuer: &str, sub: &str) -> Value {
    let now = now();
    json!({
        "iss": issuer, "aud": "kubegate", "sub": sub,
        "email": format!("{sub}@example.com"), "email_verified": true,
        "groups": ["dev"], "iat": now - 5, "exp": now + 600,
    })
}

/// `[oidc]` TOML for one issuer at `url` (prefix `oidc:` for names and
/// groups) and `rules` appended as is.
pub fn oidc_toml(url: &str, rules: &str) -> String {
    oidc_toml_with(url, "oidc:", rules)
}

/// [`oidc_toml`] with this groups prefix.
pub fn oidc_toml_with(url: &str, groups_prefix: &str, rules: &str) -> String {
    format!(
        r#"
[oidc]
login_issuer = "{url}"
login_client_id = "kubegate"

[[oidc.issuer]]
url = "{url}"
audiences = ["kubegate"]
max_lifetime_secs = 3600
[oidc.issuer.claim_mappings.username]
claim = "email"
prefix = "oidc:"
[oidc.issuer.claim_mappings.groups]
claim = "groups"
prefix = "{groups_prefix}"
{rules}
"#
    )
}
