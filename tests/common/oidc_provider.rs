//! panva's oidc-provider as a test's OpenID issuer (tests/peer/oidc/
//! provider.mjs, installed by scripts/oidc-provider.sh): started on
//! loopback by the test, restarted on the same port with another key set
//! (a key rotation), stopped on drop; and the device flow's user step done
//! for real through the provider's own pages ([`OidcProvider::approve`],
//! tests/peer/oidc/approve.mjs).
//!
//! A test signs in as a person would with [`login`] (the real `kubegate
//! login`, its URL and code read from its stderr) and [`OidcProvider::approve`]:
//!
//! ```ignore
//! let Some(mut idp) = OidcProvider::start(&ProviderOptions::default()) else {
//!     return; // not installed, outside CI: skipped with a line on stderr
//! };
//! // issuer: idp.issuer, client id: idp.options.client_id ("kubegate"),
//! // signing keys: idp.jwks (RS256, kid "k1"); accounts: any login name N
//! // (sub N, email N@example.com, email_verified, groups options.groups).
//! idp.approve(&verification_uri, &user_code, "ann");
//! idp.rotate("k2"); // same issuer URL, a new signing key
//! let home = temp_dir("login"); // the CLI's HOME and XDG_STATE_HOME
//! let out = login(&home, &daemon_url, |uri, code| idp.approve(uri, code, "ann"));
//! assert_eq!(out.code, Some(0));
//! // later commands: kg(&home, &["exec", "--server", &daemon_url, …]) send
//! // the stored ID token
//! ```
//!
//! An issuer behind a private CA: `ProviderOptions { tls:
//! Some(ProviderTls::generate(&dir)), .. }` serves https (a fresh CA and a
//! certificate for 127.0.0.1); [`login_with`] passes `--issuer-ca-file`.

use super::{first_line, Output, KUBEGATE};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PROVIDER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer/oidc/provider.mjs");
const APPROVE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer/oidc/approve.mjs");
/// How long the provider may take to print its ready line.
const READY: Duration = Duration::from_secs(20);
/// How long `kubegate login` may take, the user step included.
const LOGIN: Duration = Duration::from_secs(60);

/// Where scripts/oidc-provider.sh installs oidc-provider; `None` (with a
/// skip line) when it is missing outside CI; a failure in CI.
pub fn installed() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
        .expect("HOME or XDG_CACHE_HOME");
    let dir = cache.join("kubegate").join("oidc-provider");
    if dir.join("node_modules/oidc-provider/package.json").exists() {
        return Some(dir);
    }
    let msg = format!(
        "oidc-provider is not installed under {} (run scripts/oidc-provider.sh)",
        dir.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("SKIPPED: {msg}");
    None
}

/// How to set the provider up.
#[derive(Debug, Clone)]
pub struct ProviderOptions {
    pub client_id: String,
    /// ID and access token lifetime.
    pub id_token_ttl_secs: u64,
    pub device_code_ttl_secs: u64,
    /// The `groups` claim of every account.
    pub groups: Vec<String>,
    /// Serve https with this certificate (plain HTTP when `None`).
    pub tls: Option<ProviderTls>,
}

/// PEM files for an https provider: a private CA and a serving
/// certificate (127.0.0.1, ::1, localhost) it signed.
#[derive(Debug, Clone)]
pub struct ProviderTls {
    /// The CA certificate: what a client must trust.
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ProviderTls {
    /// A fresh CA and serving certificate (rcgen, through the sim's
    /// generator), written into `dir`.
    pub fn generate(dir: &Path) -> ProviderTls {
        let c = kubegate::sim::tls::generate(&[], false).expect("certificates");
        std::fs::create_dir_all(dir).expect("tls dir");
        let t = ProviderTls {
            ca: dir.join("idp-ca.pem"),
            cert: dir.join("idp-cert.pem"),
            key: dir.join("idp-key.pem"),
        };
        std::fs::write(&t.ca, c.ca_pem).expect("ca");
        std::fs::write(&t.cert, c.server_cert_pem).expect("cert");
        std::fs::write(&t.key, c.server_key_pem).expect("key");
        t
    }
}

impl Default for ProviderOptions {
    fn default() -> Self {
        ProviderOptions {
            client_id: "kubegate".into(),
            id_token_ttl_secs: 3600,
            device_code_ttl_secs: 600,
            groups: vec!["developers".into()],
            tls: None,
        }
    }
}

/// A running provider.
pub struct OidcProvider {
    child: Option<Child>,
    /// `http://127.0.0.1:PORT` (`https` with [`ProviderOptions::tls`]),
    /// the issuer URL (also its discovery base).
    pub issuer: String,
    pub port: u16,
    pub options: ProviderOptions,
    /// The private JWK set it signs with (RS256).
    pub jwks: PathBuf,
    /// Its folder: the key files and `provider.log` (its stderr).
    pub dir: PathBuf,
    node_dir: PathBuf,
}

impl OidcProvider {
    /// Starts a provider on a free loopback port with a fresh key `k1`;
    /// `None` when oidc-provider is not installed (outside CI).
    pub fn start(options: &ProviderOptions) -> Option<OidcProvider> {
        let node_dir = installed()?;
        let dir = super::temp_dir("oidc-provider");
        let jwks = dir.join("k1.json");
        keygen(&node_dir, &jwks, "k1");
        let mut p = OidcProvider {
            child: None,
            issuer: String::new(),
            port: 0,
            options: options.clone(),
            jwks,
            dir,
            node_dir,
        };
        p.spawn();
        Some(p)
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.dir.join("provider.log")).expect("provider.log");
        let mut c = Command::new("node");
        c.arg(PROVIDER)
            .arg("--port")
            .arg(self.port.to_string())
            .arg("--jwks")
            .arg(&self.jwks)
            .arg("--client-id")
            .arg(&self.options.client_id)
            .arg("--id-token-ttl")
            .arg(self.options.id_token_ttl_secs.to_string())
            .arg("--device-code-ttl")
            .arg(self.options.device_code_ttl_secs.to_string())
            .arg("--groups")
            .arg(self.options.groups.join(","))
            .env("OIDC_PROVIDER_DIR", &self.node_dir)
            // It stops when its stdin closes: when this test process dies.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log);
        if let Some(t) = &self.options.tls {
            c.arg("--tls-cert")
                .arg(&t.cert)
                .arg("--tls-key")
                .arg(&t.key);
        }
        let mut child = c.spawn().expect("spawn node (is Node.js installed?)");
        let line = first_line(&mut child, READY).unwrap_or_else(|| {
            panic!(
                "oidc-provider did not start within {READY:?}:\n{}",
                self.log()
            )
        });
        let issuer = line
            .trim()
            .strip_prefix("oidc-provider listening on ")
            .unwrap_or_else(|| panic!("unexpected ready line {line:?}:\n{}", self.log()))
            .to_string();
        self.port = issuer
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port in the issuer URL");
        self.issuer = issuer;
        self.child = Some(child);
    }

    /// Its stderr so far (for a failing assertion's message).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("provider.log")).unwrap_or_default()
    }

    /// Stops it (SIGTERM, then SIGKILL after 5 s).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            drop(c.stdin.take());
            super::terminate(&mut c, Duration::from_secs(5));
        }
    }

    /// Stops it and starts it again on the same port with `jwks` (a new
    /// key set: the issuer URL stays, the signing key changes). Its
    /// grants and sessions are in memory: they are gone after a restart.
    pub fn restart(&mut self, jwks: &Path) {
        self.stop();
        self.jwks = jwks.to_path_buf();
        // The port was just freed; take it again (bounded retries: it may
        // linger a moment).
        super::wait_for(
            "the provider back on its port",
            Duration::from_secs(20),
            || {
                let free = std::net::TcpListener::bind(("127.0.0.1", self.port)).is_ok();
                free.then_some(())
            },
        );
        self.spawn();
    }

    /// A fresh key set with key id `kid`, and a restart with it.
    pub fn rotate(&mut self, kid: &str) {
        let jwks = self.dir.join(format!("{kid}.json"));
        keygen(&self.node_dir, &jwks, kid);
        self.restart(&jwks);
    }

    /// The device flow's user step, through the provider's own pages:
    /// the verification page, the user code, the login form (as `login`),
    /// the consent form. Panics with the page it stopped at.
    pub fn approve(&self, verification_uri: &str, user_code: &str, login: &str) {
        self.user_step(verification_uri, user_code, login, "approve");
    }

    /// The user step answered with the confirm page's Abort button: the
    /// device's next poll gets `access_denied`.
    pub fn deny(&self, verification_uri: &str, user_code: &str) {
        self.user_step(verification_uri, user_code, "nobody", "deny");
    }

    fn user_step(&self, uri: &str, code: &str, login: &str, decision: &str) {
        let mut c = Command::new("node");
        c.args([APPROVE, uri, code, login, decision]);
        if let Some(t) = &self.options.tls {
            // The browser's side trusts the private CA.
            c.env("NODE_EXTRA_CA_CERTS", &t.ca);
        }
        let out = super::run_with_timeout(c, None, Duration::from_secs(30));
        assert_eq!(
            out.code,
            Some(0),
            "approve.mjs {decision}:\nstdout: {}\nstderr: {}\nprovider:\n{}",
            out.stdout_str(),
            out.stderr_str(),
            self.log()
        );
    }

    /// What it counted: `{"token": {GRANT_TYPE: n}, "errors": {ERROR: n}}`.
    pub fn stats(&self) -> serde_json::Value {
        self.get_json("/test/stats")
    }

    /// The key ids of its published key set (`/jwks`).
    pub fn kids(&self) -> Vec<String> {
        let v = self.get_json("/jwks");
        v["keys"]
            .as_array()
            .map(|ks| {
                ks.iter()
                    .filter_map(|k| k["kid"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `GET path` on the provider, the JSON body (10 s bound). Plain HTTP
    /// only: not for an https provider.
    pub fn get_json(&self, path: &str) -> serde_json::Value {
        use std::io::Write;
        assert!(
            self.options.tls.is_none(),
            "get_json speaks plain HTTP; the provider serves https"
        );
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("write");
        let mut raw = String::new();
        s.read_to_string(&mut raw).expect("read");
        let body = raw.split("\r\n\r\n").nth(1).unwrap_or("");
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{path}: {body:?}: {e}"))
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A private JWK set with one RS256 key `kid`, written to `path`.
pub fn keygen(node_dir: &Path, path: &Path, kid: &str) {
    let mut c = Command::new("node");
    c.arg(PROVIDER)
        .arg("keygen")
        .arg(path)
        .arg(kid)
        .env("OIDC_PROVIDER_DIR", node_dir);
    let out = super::run_with_timeout(c, None, Duration::from_secs(30));
    assert_eq!(out.code, Some(0), "keygen: {}", out.stderr_str());
}

// ------------------------------------------------ the CLI's side

/// `kubegate ARGS` with its state (the token store) in `home`, and no
/// KUBEGATE_* from the test's environment.
pub fn kg(home: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(KUBEGATE);
    c.args(args)
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env_remove("KUBEGATE_SERVER")
        .env_remove("KUBEGATE_TOKEN")
        .env_remove("KUBEGATE_WORKSPACE");
    c
}

/// `kubegate login --server SERVER`: reads the verification URL and user
/// code from its stderr, hands them to `user` (the person's step), and
/// waits for its end. Its exit code, stdout and stderr.
pub fn login(home: &Path, server: &str, user: impl FnOnce(&str, &str)) -> Output {
    login_with(home, server, &[], user)
}

/// [`login`] with more arguments (`--issuer-ca-file F`).
pub fn login_with(
    home: &Path,
    server: &str,
    extra: &[&str],
    user: impl FnOnce(&str, &str),
) -> Output {
    let mut args = vec!["login", "--server", server];
    args.extend_from_slice(extra);
    let mut child = kg(home, &args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut so = child.stdout.take().unwrap();
    let out_t = std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = so.read_to_end(&mut b);
        b
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let se = child.stderr.take().unwrap();
    let err_t = std::thread::spawn(move || {
        let mut all = Vec::new();
        for line in BufReader::new(se).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("To sign in, open ") {
                if let Some((uri, code)) = rest.split_once(" and enter the code ") {
                    let _ = tx.send((uri.to_string(), code.to_string()));
                }
            }
            all.push(line);
        }
        all.join("\n")
    });
    if let Ok((uri, code)) = rx.recv_timeout(LOGIN) {
        user(&uri, &code);
    }
    let deadline = Instant::now() + LOGIN;
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "kubegate login did not end within {LOGIN:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        code: status.code(),
        stdout: out_t.join().unwrap(),
        stderr: err_t.join().unwrap().into_bytes(),
    }
}
