//! `kubegate login`, `logout`, `whoami` and the stored, refreshed ID token,
//! the real binary over real sockets (docs/cli.md, "kubegate login"):
//! against panva's oidc-provider (tests/common/oidc_provider.rs; the user
//! step through its own pages) for the device flow, refresh (a rotating
//! refresh token raced by two commands) and a denial; against a stand-in
//! issuer served here for what the provider does not easily produce
//! (`slow_down`, `expired_token`, a code that runs out, a refresh without
//! an ID token, `invalid_grant`). The daemon is a stand-in too, serving
//! `/v1/auth/config` and a `/v1/auth/whoami` shaped as docs/api.md says
//! (the daemon's own verification is tested with it, tests/oidc*.rs).
//! Every wait has a deadline; every test a watchdog.

mod common;

use base64::Engine as _;
use common::bench::watchdog;
use common::oidc_provider::{kg, login, login_with, OidcProvider, ProviderOptions, ProviderTls};
use common::{run_with_timeout, temp_dir, Output};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const T: Duration = Duration::from_secs(60);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ------------------------------------------------ a tiny HTTP/1.1 server

/// One request as the stand-ins see it.
struct Req {
    method: String,
    path: String,
    bearer: Option<String>,
    body: String,
}

type Handler = Arc<dyn Fn(&Req) -> (u16, String) + Send + Sync>;

/// Serves `handler` on a loopback port (one thread per connection,
/// `Connection: close`); the base URL. Runs until the test process ends.
fn serve(handler: Handler) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            let h = handler.clone();
            std::thread::spawn(move || answer(s, &h));
        }
    });
    format!("http://127.0.0.1:{port}")
}

fn answer(s: TcpStream, h: &Handler) {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut r = BufReader::new(s.try_clone().unwrap());
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut len = 0usize;
    let mut bearer = None;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((&h, ""));
        let v = v.trim();
        match k.to_ascii_lowercase().as_str() {
            "content-length" => len = v.parse().unwrap_or(0),
            "authorization" => bearer = v.strip_prefix("Bearer ").map(String::from),
            _ => {}
        }
    }
    let mut body = vec![0; len.min(1 << 20)];
    let _ = r.read_exact(&mut body);
    let req = Req {
        method,
        path,
        bearer,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let (code, body) = h(&req);
    let mut s = s;
    let _ = write!(
        s,
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
}

fn form_value(body: &str, key: &str) -> Option<String> {
    body.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == key).then(|| v.replace("%3A", ":").replace('+', " "))
    })
}

/// An unsigned JWT with `claims` (the stand-ins never verify signatures;
/// the CLI reads only `exp`).
fn fake_jwt(claims: &Value) -> String {
    let b = |v: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v);
    format!(
        "{}.{}.c2ln",
        b(br#"{"alg":"RS256","kid":"fake"}"#),
        b(claims.to_string().as_bytes())
    )
}

fn jwt_claims(t: &str) -> Option<Value> {
    let p = t.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(p)
        .ok()?;
    serde_json::from_slice(&raw).ok()
}

// ------------------------------------------------ the stand-in daemon

/// `/v1/auth/config` naming `issuer` (or none), and `/v1/auth/whoami`
/// for the static token `static-token` and any unexpired JWT; the bearer
/// tokens it saw.
struct StandInDaemon {
    url: String,
    seen: Arc<Mutex<Vec<String>>>,
}

fn stand_in_daemon(issuer: Option<&str>, client_id: &str) -> StandInDaemon {
    let config = match issuer {
        Some(i) => json!({"oidc": {"issuer": i, "client_id": client_id,
            "scopes": ["openid", "offline_access", "email", "groups"]}}),
        None => json!({"oidc": null}),
    };
    let issuer = issuer.map(String::from);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    let url = serve(Arc::new(move |r: &Req| {
        let path = r.path.split('?').next().unwrap_or("");
        match (r.method.as_str(), path) {
            ("GET", "/v1/auth/config") => (200, config.to_string()),
            ("GET", "/v1/auth/whoami") => {
                let Some(t) = r.bearer.clone() else {
                    return (401, err("UNAUTHORIZED", "no token"));
                };
                seen2.lock().unwrap().push(t.clone());
                if t == "static-token" {
                    return (
                        200,
                        json!({"principal": "ci", "credential": "static", "issuer": null,
                        "groups": [], "kube_groups": [], "workspaces": ["demo/demo-uid"],
                        "may_start_sessions": true, "expires_at": null})
                        .to_string(),
                    );
                }
                let Some(c) = jwt_claims(&t) else {
                    return (401, err("TOKEN_INVALID", "not a JWT"));
                };
                if c["exp"].as_u64().unwrap_or(0) <= now() {
                    return (401, err("TOKEN_EXPIRED", "expired"));
                }
                let who = c["email"].as_str().or(c["sub"].as_str()).unwrap_or("?");
                (200, json!({"principal": format!("oidc:{who}"), "credential": "oidc",
                    "issuer": issuer, "groups": c.get("groups").cloned().unwrap_or(json!([])), "kube_groups": ["kubegate:developers"],
                    "workspaces": ["team-a/a-uid"], "may_start_sessions": false,
                    "expires_at": format!("exp {}", c["exp"])}).to_string())
            }
            _ => (404, err("NOT_FOUND", "no such route")),
        }
    }));
    StandInDaemon { url, seen }
}

fn err(code: &str, m: &str) -> String {
    json!({"error": {"code": code, "message": m}}).to_string()
}

// ------------------------------------------------ the stand-in issuer

/// A discovery document, a device endpoint (interval and lifetime as
/// asked) and a token endpoint answering from a queue (then
/// `authorization_pending`); the times of the token requests and their
/// grant types.
struct StandInIssuer {
    url: String,
    answers: Arc<Mutex<VecDeque<(u16, Value)>>>,
    polls: Arc<Mutex<Vec<(Instant, String)>>>,
}

fn stand_in_issuer(interval: u64, expires_in: u64) -> StandInIssuer {
    let answers: Arc<Mutex<VecDeque<(u16, Value)>>> = Arc::default();
    let polls: Arc<Mutex<Vec<(Instant, String)>>> = Arc::default();
    let (a2, p2) = (answers.clone(), polls.clone());
    let me = Arc::new(Mutex::new(String::new()));
    let me2 = me.clone();
    let url = serve(Arc::new(move |r: &Req| {
        let base = me2.lock().unwrap().clone();
        match r.path.as_str() {
            "/.well-known/openid-configuration" => (
                200,
                json!({
                "issuer": base, "token_endpoint": format!("{base}/token"),
                "device_authorization_endpoint": format!("{base}/device")})
                .to_string(),
            ),
            "/device" => (
                200,
                json!({"device_code": "dev-code", "user_code": "ABCD-EFGH",
                "verification_uri": format!("{base}/verify"), "expires_in": expires_in,
                "interval": interval})
                .to_string(),
            ),
            "/token" => {
                let grant = form_value(&r.body, "grant_type").unwrap_or_default();
                p2.lock().unwrap().push((Instant::now(), grant));
                let (code, v) = a2
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or((400, json!({"error": "authorization_pending"})));
                (code, v.to_string())
            }
            _ => (404, "{}".into()),
        }
    }));
    *me.lock().unwrap() = url.clone();
    StandInIssuer {
        url,
        answers,
        polls,
    }
}

impl StandInIssuer {
    fn push(&self, code: u16, v: Value) {
        self.answers.lock().unwrap().push_back((code, v));
    }

    /// A token answer with an ID token for `sub` expiring in `ttl` s.
    fn push_tokens(&self, sub: &str, ttl: u64) {
        let id = fake_jwt(&json!({"sub": sub, "email": format!("{sub}@example.com"),
            "exp": now() + ttl, "iat": now(), "iss": self.url, "aud": "kubegate"}));
        self.push(
            200,
            json!({"id_token": id, "refresh_token": format!("rt-{sub}"),
            "access_token": "at", "token_type": "Bearer", "expires_in": ttl}),
        );
    }

    fn polls(&self) -> Vec<(Instant, String)> {
        self.polls.lock().unwrap().clone()
    }
}

// ------------------------------------------------ running the CLI

fn run(home: &Path, args: &[&str]) -> Output {
    run_with_timeout(kg(home, args), None, T)
}

fn tokens_dir(home: &Path) -> PathBuf {
    home.join("state").join("kubegate").join("tokens")
}

fn token_files(home: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(tokens_dir(home))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "json"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn stored(home: &Path) -> Value {
    let files = token_files(home);
    assert_eq!(files.len(), 1, "{files:?}");
    serde_json::from_slice(&std::fs::read(&files[0]).unwrap()).unwrap()
}

fn show(o: &Output) -> String {
    format!(
        "code {:?}\nstdout: {}\nstderr: {}",
        o.code,
        o.stdout_str(),
        o.stderr_str()
    )
}

// ------------------------------------------------ against oidc-provider

/// The device flow end to end with the user step done through the
/// provider's pages; the set stored 0600 in a 0700 folder; then two
/// commands at once with an ID token about to expire: both succeed, one
/// refresh reaches the provider (its refresh tokens rotate, and a reused
/// one would be `invalid_grant` and revoke the grant), the second command
/// reads the refreshed set; then logout removes the set.
#[test]
fn device_flow_end_to_end_refresh_race_and_logout() {
    let _w = watchdog("login end to end", 180);
    // ID tokens live 65 s: a fresh one is just outside the 60 s refresh
    // margin, and falls inside it 5 s later.
    let opts = ProviderOptions {
        id_token_ttl_secs: 65,
        groups: vec!["developers".into(), "ops".into()],
        ..ProviderOptions::default()
    };
    let Some(idp) = OidcProvider::start(&opts) else {
        return;
    };
    let d = stand_in_daemon(Some(&idp.issuer), "kubegate");
    let home = temp_dir("login-e2e");
    let o = login(&home, &d.url, |uri, code| idp.approve(uri, code, "ann"));
    assert_eq!(o.code, Some(0), "{}\nprovider:\n{}", show(&o), idp.log());
    assert!(
        o.stdout_str().contains(&format!("Logged in to {}", d.url)),
        "{}",
        show(&o)
    );
    assert!(
        !o.stdout_str().contains("eyJ") && !o.stderr_str().contains("eyJ"),
        "{}",
        show(&o)
    );

    use std::os::unix::fs::PermissionsExt;
    let files = token_files(&home);
    assert_eq!(files.len(), 1, "{files:?}");
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&files[0]), 0o600);
    assert_eq!(mode(&tokens_dir(&home)), 0o700);
    let set = stored(&home);
    assert_eq!(set["issuer"], idp.issuer.as_str());
    assert_eq!(set["client_id"], "kubegate");
    assert_eq!(set["daemon_url"], d.url.as_str());
    assert!(
        set["refresh_token"].is_string(),
        "offline_access gave a refresh token"
    );
    let claims = jwt_claims(set["id_token"].as_str().unwrap()).unwrap();
    assert_eq!(claims["email"], "ann@example.com");
    assert_eq!(claims["groups"], json!(["developers", "ops"]));
    let exp = set["expires_at"].as_u64().unwrap();
    assert_eq!(exp, claims["exp"].as_u64().unwrap());
    assert_eq!(
        idp.stats()["token"]["urn:ietf:params:oauth:grant-type:device_code"],
        1
    );

    // Wait (a condition, bounded by the TTL) until the token is within
    // the refresh margin, then race two commands.
    common::wait_for("the ID token within 60 s of its expiry", T, || {
        (now() + 60 >= exp).then_some(())
    });
    let spawn = || {
        let h = home.clone();
        let url = d.url.clone();
        std::thread::spawn(move || run(&h, &["whoami", "--server", &url]))
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.join().unwrap(), b.join().unwrap());
    for o in [&a, &b] {
        assert_eq!(o.code, Some(0), "{}\nprovider:\n{}", show(o), idp.log());
        assert!(
            o.stdout_str().contains("oidc:ann@example.com"),
            "{}",
            show(o)
        );
        assert!(
            !o.stdout_str().contains("eyJ"),
            "whoami prints no token: {}",
            show(o)
        );
    }
    let stats = idp.stats();
    assert_eq!(stats["token"]["refresh_token"], 1, "{stats}\n{}", idp.log());
    assert!(stats["errors"].get("invalid_grant").is_none(), "{stats}");
    let after = stored(&home);
    assert_ne!(after["id_token"], set["id_token"]);
    assert_ne!(after["refresh_token"], set["refresh_token"], "rotated");
    let seen = d.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter().all(|t| after["id_token"] == t.as_str()),
        "both sent the refreshed token"
    );

    let o = run(&home, &["logout", "--server", &d.url]);
    assert_eq!(o.code, Some(0), "{}", show(&o));
    assert!(token_files(&home).is_empty());
    let o = run(&home, &["whoami", "--server", &d.url]);
    assert_eq!(o.code, Some(2), "{}", show(&o));
    assert!(o.stderr_str().contains("kubegate login"), "{}", show(&o));
}

/// An issuer behind a private CA (oidc-provider over https, its
/// certificate from a CA made here): without `--issuer-ca-file` the login
/// fails at discovery with a certificate error naming the issuer and the
/// flag, nothing stored; with it the device flow succeeds and the set
/// records the file; a later command refreshes through the same CA (the
/// web PKI roots would refuse it); with the file gone, the next refresh
/// says so and names `kubegate login --issuer-ca-file`.
#[test]
fn an_issuer_behind_a_private_ca_with_issuer_ca_file() {
    let _w = watchdog("login issuer ca", 180);
    let certs = temp_dir("login-issuer-ca-certs");
    let tls = ProviderTls::generate(&certs);
    let opts = ProviderOptions {
        // 65 s: fresh tokens fall inside the 60 s refresh margin 5 s later.
        id_token_ttl_secs: 65,
        tls: Some(tls.clone()),
        ..ProviderOptions::default()
    };
    let Some(idp) = OidcProvider::start(&opts) else {
        return;
    };
    assert!(
        idp.issuer.starts_with("https://127.0.0.1:"),
        "{}",
        idp.issuer
    );
    let d = stand_in_daemon(Some(&idp.issuer), "kubegate");
    let home = temp_dir("login-issuer-ca");

    // The web PKI roots do not verify it: no code is ever shown.
    let o = login(&home, &d.url, |_, _| {
        panic!("a code from an untrusted issuer")
    });
    assert_eq!(o.code, Some(1), "{}", show(&o));
    let e = o.stderr_str();
    for want in [
        "UNREACHABLE",
        "cannot reach the issuer at",
        idp.issuer.as_str(),
        "certificate",
        "--issuer-ca-file",
    ] {
        assert!(e.contains(want), "{want}: {}", show(&o));
    }
    assert!(token_files(&home).is_empty());

    // A CA file that is not there: the flag's own configuration error.
    let missing = certs.join("nope.pem");
    let o = login_with(
        &home,
        &d.url,
        &["--issuer-ca-file", missing.to_str().unwrap()],
        |_, _| panic!("a code without a CA file"),
    );
    assert_eq!(o.code, Some(2), "{}", show(&o));
    assert!(
        o.stderr_str()
            .contains(&format!("--issuer-ca-file {}", missing.display())),
        "{}",
        show(&o)
    );

    let ca = tls.ca.to_str().unwrap();
    let o = login_with(&home, &d.url, &["--issuer-ca-file", ca], |uri, code| {
        assert!(uri.starts_with("https://127.0.0.1:"), "{uri}");
        idp.approve(uri, code, "ann");
    });
    assert_eq!(
        o.code,
        Some(0),
        "{}
provider:
{}",
        show(&o),
        idp.log()
    );
    let set = stored(&home);
    assert_eq!(set["issuer"], idp.issuer.as_str());
    assert_eq!(set["issuer_ca_file"], ca);
    assert!(set["refresh_token"].is_string(), "{set}");

    // Near expiry: the refresh goes to the https issuer through the CA.
    let exp = set["expires_at"].as_u64().unwrap();
    common::wait_for("the ID token within 60 s of its expiry", T, || {
        (now() + 60 >= exp).then_some(())
    });
    let o = run(&home, &["whoami", "--server", &d.url]);
    assert_eq!(
        o.code,
        Some(0),
        "{}
provider:
{}",
        show(&o),
        idp.log()
    );
    assert!(
        o.stdout_str().contains("oidc:ann@example.com"),
        "{}",
        show(&o)
    );
    let after = stored(&home);
    assert_ne!(after["id_token"], set["id_token"], "refreshed");
    assert_eq!(after["issuer_ca_file"], ca, "kept across the refresh");
    assert_eq!(
        d.seen.lock().unwrap().last().map(String::as_str),
        after["id_token"].as_str()
    );

    // The CA file gone: the next refresh says so, no web PKI fallback.
    std::fs::remove_file(&tls.ca).unwrap();
    let exp = after["expires_at"].as_u64().unwrap();
    common::wait_for(
        "the refreshed ID token within 60 s of its expiry",
        T,
        || (now() + 60 >= exp).then_some(()),
    );
    let o = run(&home, &["whoami", "--server", &d.url]);
    assert_eq!(o.code, Some(2), "{}", show(&o));
    let e = o.stderr_str();
    for want in [
        "CONFIG",
        ca,
        "cannot be read",
        &format!("kubegate login --server {} --issuer-ca-file", d.url),
    ] {
        assert!(e.contains(want), "{want}: {}", show(&o));
    }
    assert_eq!(stored(&home)["id_token"], after["id_token"], "unchanged");
}

/// The person presses Abort on the provider's confirm page: the next poll
/// gets `access_denied`, said plainly, exit 3, nothing stored.
#[test]
fn a_denied_sign_in_exits_3_and_stores_nothing() {
    let _w = watchdog("login denied", 120);
    let Some(idp) = OidcProvider::start(&ProviderOptions::default()) else {
        return;
    };
    let d = stand_in_daemon(Some(&idp.issuer), "kubegate");
    let home = temp_dir("login-denied");
    let o = login(&home, &d.url, |uri, code| idp.deny(uri, code));
    assert_eq!(o.code, Some(3), "{}", show(&o));
    assert!(
        o.stderr_str().contains("ACCESS_DENIED") && o.stderr_str().contains("denied"),
        "{}",
        show(&o)
    );
    assert!(token_files(&home).is_empty());
}

/// The harness itself: a restart with a rotated key set keeps the issuer
/// URL and publishes only the new key (what the daemon's key-rotation
/// test relies on); its grants are in memory and gone after a restart.
#[test]
fn the_provider_restarts_with_a_rotated_key_set() {
    let _w = watchdog("provider rotation", 90);
    let Some(mut idp) = OidcProvider::start(&ProviderOptions::default()) else {
        return;
    };
    let issuer = idp.issuer.clone();
    assert_eq!(idp.kids(), ["k1"]);
    let doc = idp.get_json("/.well-known/openid-configuration");
    assert_eq!(doc["issuer"], issuer.as_str());
    assert!(doc["device_authorization_endpoint"].is_string(), "{doc}");
    idp.rotate("k2");
    assert_eq!(idp.issuer, issuer);
    assert_eq!(idp.kids(), ["k2"]);
}

// ------------------------------------------------ against the stand-ins

/// `slow_down` adds 5 s to the interval for the rest of the flow
/// (RFC 8628 §3.5); the tokens then come and are stored.
#[test]
fn slow_down_adds_five_seconds_to_the_interval() {
    let _w = watchdog("slow_down", 120);
    let idp = stand_in_issuer(1, 120);
    idp.push(400, json!({"error": "slow_down"}));
    idp.push(400, json!({"error": "authorization_pending"}));
    idp.push_tokens("ann", 3600);
    let d = stand_in_daemon(Some(&idp.url), "kubegate");
    let home = temp_dir("login-slow");
    let start = Instant::now();
    let o = login(&home, &d.url, |_, code| assert_eq!(code, "ABCD-EFGH"));
    assert_eq!(o.code, Some(0), "{}", show(&o));
    let polls = idp.polls();
    assert_eq!(polls.len(), 3, "{polls:?}");
    let gap = |i: usize| polls[i].0 - if i == 0 { start } else { polls[i - 1].0 };
    assert!(gap(0) >= Duration::from_secs(1), "{:?}", gap(0));
    assert!(gap(1) >= Duration::from_secs(6), "{:?}", gap(1));
    assert!(gap(2) >= Duration::from_secs(6), "{:?}", gap(2));
    assert!(polls
        .iter()
        .all(|(_, g)| g == "urn:ietf:params:oauth:grant-type:device_code"));
    assert_eq!(stored(&home)["refresh_token"], "rt-ann");
}

/// `expired_token` ends the flow at once, exit 4; and a code that runs
/// out while pending ends the loop at its `expires_in` without asking
/// past it.
#[test]
fn an_expired_code_exits_4() {
    let _w = watchdog("expired", 120);
    let idp = stand_in_issuer(1, 120);
    idp.push(400, json!({"error": "expired_token"}));
    let d = stand_in_daemon(Some(&idp.url), "kubegate");
    let home = temp_dir("login-expired");
    let o = login(&home, &d.url, |_, _| {});
    assert_eq!(o.code, Some(4), "{}", show(&o));
    assert!(
        o.stderr_str().contains("LOGIN_EXPIRED") && o.stderr_str().contains("expired"),
        "{}",
        show(&o)
    );
    assert_eq!(idp.polls().len(), 1);

    let idp = stand_in_issuer(1, 3);
    let d = stand_in_daemon(Some(&idp.url), "kubegate");
    let start = Instant::now();
    let o = login(&home, &d.url, |_, _| {});
    assert_eq!(o.code, Some(4), "{}", show(&o));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    assert!(idp.polls().len() <= 3, "{:?}", idp.polls());
    assert!(token_files(&home).is_empty());
}

/// Two daemon URLs keep their own sets side by side; each command sends
/// its daemon's ID token; logout of one leaves the other.
#[test]
fn two_daemons_keep_their_own_logins() {
    let _w = watchdog("two daemons", 120);
    let idp = stand_in_issuer(1, 120);
    let a = stand_in_daemon(Some(&idp.url), "kubegate");
    let b = stand_in_daemon(Some(&idp.url), "kubegate");
    let home = temp_dir("login-two");
    idp.push_tokens("ann", 3600);
    assert_eq!(login(&home, &a.url, |_, _| {}).code, Some(0));
    idp.push_tokens("bob", 3600);
    assert_eq!(login(&home, &b.url, |_, _| {}).code, Some(0));
    assert_eq!(token_files(&home).len(), 2);
    let o = run(&home, &["whoami", "--server", &a.url]);
    assert!(
        o.stdout_str().contains("oidc:ann@example.com"),
        "{}",
        show(&o)
    );
    let o = run(&home, &["whoami", "--server", &format!("{}/", b.url)]);
    assert!(
        o.stdout_str().contains("oidc:bob@example.com"),
        "{}",
        show(&o)
    );
    assert!(
        o.stdout_str()
            .contains(&format!("daemon:             {}", b.url)),
        "{}",
        show(&o)
    );

    assert_eq!(run(&home, &["logout", "--server", &a.url]).code, Some(0));
    assert_eq!(token_files(&home).len(), 1);
    assert_eq!(run(&home, &["whoami", "--server", &a.url]).code, Some(2));
    let o = run(&home, &["whoami", "--server", &b.url]);
    assert_eq!(o.code, Some(0), "{}", show(&o));
    // A token given explicitly wins over the stored one.
    let o = run(
        &home,
        &["whoami", "--server", &b.url, "--token", "static-token"],
    );
    assert!(
        o.stdout_str().contains("principal:          ci"),
        "{}",
        show(&o)
    );
    assert!(
        o.stdout_str().contains("never (a static token)"),
        "{}",
        show(&o)
    );
}

/// A refresh answered without an ID token, and one refused with
/// `invalid_grant`, both mean logging in again, said plainly.
#[test]
fn a_refresh_without_an_id_token_or_refused_means_logging_in_again() {
    let _w = watchdog("refresh refused", 120);
    let idp = stand_in_issuer(1, 120);
    let d = stand_in_daemon(Some(&idp.url), "kubegate");
    let home = temp_dir("login-refresh");
    // An ID token inside the refresh margin: the next command refreshes.
    idp.push_tokens("ann", 30);
    assert_eq!(login(&home, &d.url, |_, _| {}).code, Some(0));
    idp.push(
        200,
        json!({"access_token": "at2", "refresh_token": "rt2", "token_type": "Bearer"}),
    );
    let o = run(&home, &["whoami", "--server", &d.url]);
    assert_eq!(o.code, Some(1), "{}", show(&o));
    assert!(
        o.stderr_str().contains("LOGIN_REQUIRED") && o.stderr_str().contains("without an ID token"),
        "{}",
        show(&o)
    );
    assert!(o.stderr_str().contains("kubegate login"), "{}", show(&o));
    idp.push(400, json!({"error": "invalid_grant"}));
    let o = run(&home, &["whoami", "--server", &d.url]);
    assert_eq!(o.code, Some(1), "{}", show(&o));
    assert!(
        o.stderr_str().contains("invalid_grant") && o.stderr_str().contains("log in again"),
        "{}",
        show(&o)
    );
    let polls = idp.polls();
    assert_eq!(
        polls.iter().filter(|(_, g)| g == "refresh_token").count(),
        2,
        "{polls:?}"
    );
    assert!(d.seen.lock().unwrap().is_empty(), "no stale token was sent");
}

/// A plain-HTTP daemon off loopback could point us at a rogue issuer:
/// refused before any request (192.0.2.1 is TEST-NET-1: a request would
/// hang until the 30 s deadline). A daemon without OIDC login says so.
#[test]
fn login_refuses_plain_http_off_loopback_and_a_daemon_without_oidc() {
    let _w = watchdog("refusals", 60);
    let home = temp_dir("login-refused");
    let start = Instant::now();
    let o = run(&home, &["login", "--server", "http://192.0.2.1:7443"]);
    assert_eq!(o.code, Some(2), "{}", show(&o));
    assert!(o.stderr_str().contains("https"), "{}", show(&o));
    assert!(start.elapsed() < Duration::from_secs(10));
    let d = stand_in_daemon(None, "kubegate");
    let o = run(&home, &["login", "--server", &d.url]);
    assert_eq!(o.code, Some(2), "{}", show(&o));
    assert!(o.stderr_str().contains("no OIDC login"), "{}", show(&o));
    let o = run(&home, &["login", "--server", &d.url, "--token", "x"]);
    assert_eq!(o.code, Some(2), "{}", show(&o));
    assert!(token_files(&home).is_empty());
}
