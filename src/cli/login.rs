//! `kubegate login`, `kubegate logout`, `kubegate whoami`, and the stored
//! ID token every client command sends when given no token
//! (docs/cli.md, "kubegate login").
//!
//! The HTTP requests (the daemon's `/v1/auth/config`, the issuer's
//! discovery, device and token endpoints) go through the CLI's own client
//! ([`Client`], `http::client`: one deadline, a capped body), not the
//! `oauth2` crate: the two OAuth requests are two form posts, and the
//! messages are read in `oidc`, sans I/O.

use super::args::{LoginArgs, LogoutArgs, OutputFormat, WhoamiArgs};
use super::net::Client;
use super::oidc::{self, AuthConfig, Endpoints, PollStep, TokenAnswer, TokenResult};
use super::token_store::{self, Lock, Store, TokenSet};
use super::CliError;
use crate::exit::{self, codes};
use std::path::Path;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// A stored ID token is refreshed when it expires within this.
pub const REFRESH_BEFORE: u64 = 60;

const DEVICE_CODE_GRANT: &str = "urn:ietf:params:oauth:grant-type:device_code";
const DEFAULT_SCOPES: &[&str] = &["openid", "offline_access", "profile", "email", "groups"];

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A client for the URL of one of the issuer's endpoints, trusting the
/// certificates of `ca` (`--issuer-ca-file`) or else the web PKI roots.
fn issuer_client(url: &str, ca: Option<&Path>) -> Result<Client, CliError> {
    Client::issuer(url, ca).map_err(|e| {
        if e.is_config() {
            // The CA file: the message names the flag and the file.
            return e;
        }
        CliError::new(
            oidc::ISSUER,
            format!("the issuer's URL {url} cannot be used: {}", e.message),
        )
    })
}

/// GET the issuer's discovery document: its endpoints.
fn discover(issuer: &str, ca: Option<&Path>, need_device: bool) -> Result<Endpoints, CliError> {
    let url = oidc::discovery_url(issuer);
    let (status, body) = issuer_client(&url, ca)?.exchange("GET", "", None)?;
    if status != 200 {
        return Err(CliError::new(
            oidc::ISSUER,
            format!("{url} answered HTTP {status}"),
        ));
    }
    oidc::parse_discovery(issuer, &body, need_device)
}

/// POST a form to an endpoint URL: status and body.
fn post_form(
    url: &str,
    ca: Option<&Path>,
    pairs: &[(&str, &str)],
) -> Result<(u16, Vec<u8>), CliError> {
    let body = oidc::form(pairs);
    issuer_client(url, ca)?.exchange(
        "POST",
        "",
        Some(("application/x-www-form-urlencoded", &body)),
    )
}

/// The daemon's login settings (`GET /v1/auth/config`), trusted only over
/// https or loopback (checked before any request).
fn auth_config(server: &str, ca_file: Option<&Path>) -> Result<AuthConfig, CliError> {
    oidc::check_daemon_url(server)?;
    let daemon = Client::anonymous(server, ca_file)?;
    let (status, body) = daemon.exchange("GET", "/v1/auth/config", None)?;
    if status == 404 {
        return Err(CliError::new(
            codes::CONFIG,
            format!("{server} has no /v1/auth/config: a kubegate daemon without OIDC login; use a token (--token, --token-file, KUBEGATE_TOKEN)"),
        ));
    }
    if !(200..300).contains(&status) {
        let e = crate::api::ApiError::from_body(status, &body);
        return Err(CliError::new(e.code.as_str(), e.message));
    }
    oidc::parse_auth_config(&body)?.ok_or_else(|| {
        CliError::new(
            codes::CONFIG,
            format!("{server} has no OIDC login configured ([oidc] login_issuer): use a token (--token, --token-file, KUBEGATE_TOKEN)"),
        )
    })
}

/// `kubegate login`: exit code 0, or the error (mapped by
/// [`login_exit_code`]).
pub fn run_login(a: &LoginArgs) -> Result<i32, CliError> {
    let server = token_store::normal_url(&a.server).to_string();
    let store = Store::locate()?;
    // Stored absolute: the refreshes of later commands run from anywhere.
    let issuer_ca = match &a.issuer_ca_file {
        Some(f) => Some(std::path::absolute(f).map_err(|e| {
            CliError::new(
                codes::CONFIG,
                format!("--issuer-ca-file {}: {e}", f.display()),
            )
        })?),
        None => None,
    };
    let ca = issuer_ca.as_deref();
    let cfg = auth_config(&server, a.ca_file.as_deref())?;
    if !oidc::https_or_loopback(&cfg.issuer) {
        return Err(CliError::new(
            oidc::ISSUER,
            format!(
                "the daemon names the issuer {}, which is neither https nor loopback: refused",
                cfg.issuer
            ),
        ));
    }
    let ep = discover(&cfg.issuer, ca, true)?;
    let scopes = if cfg.scopes.is_empty() {
        DEFAULT_SCOPES.join(" ")
    } else {
        cfg.scopes.join(" ")
    };
    let (status, body) = post_form(
        &ep.device,
        ca,
        &[("client_id", &cfg.client_id), ("scope", &scopes)],
    )?;
    let device = oidc::parse_device_auth(status, &body)?;
    eprintln!(
        "To sign in, open {} and enter the code {}",
        device.verification_uri, device.user_code
    );
    if let Some(c) = &device.verification_uri_complete {
        eprintln!("(or open {c}, which carries the code)");
    }
    if a.browser {
        let url = device
            .verification_uri_complete
            .as_deref()
            .unwrap_or(&device.verification_uri);
        if let Err(e) = std::process::Command::new("xdg-open")
            .arg(url)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            eprintln!(
                "kubegate: warning: could not open a browser (xdg-open: {e}); open the URL above"
            );
        }
    }
    eprintln!("Waiting for the sign-in (until the code expires)...");
    let answer = poll(&ep, ca, &cfg, &device)?;
    let mut set = token_set(&server, &cfg.issuer, &cfg.client_id, answer, None)?;
    set.issuer_ca_file = issuer_ca;
    // A new login for this daemon replaces its earlier sets (another
    // issuer or client id after the daemon's settings changed).
    store.remove(&server)?;
    let path = store.write(&set)?;
    println!(
        "Logged in to {server} through {} (the ID token expires in {}); tokens in {}",
        cfg.issuer,
        human(set.expires_at.saturating_sub(now_unix())),
        path.display()
    );
    Ok(exit::SUCCESS)
}

/// Polls the token endpoint until a token set, a refusal or the code's
/// expiry.
fn poll(
    ep: &Endpoints,
    ca: Option<&Path>,
    cfg: &AuthConfig,
    device: &oidc::DeviceAuth,
) -> Result<TokenAnswer, CliError> {
    let mut schedule = oidc::PollSchedule::new(device);
    let mut step = schedule.first();
    loop {
        match step {
            PollStep::Fail(e) => return Err(e),
            PollStep::Wait(d) => std::thread::sleep(d),
        }
        let started = Instant::now();
        let (status, body) = post_form(
            &ep.token,
            ca,
            &[
                ("grant_type", DEVICE_CODE_GRANT),
                ("device_code", &device.device_code),
                ("client_id", &cfg.client_id),
            ],
        )?;
        match oidc::parse_token_answer(status, &body)? {
            TokenResult::Tokens(t) => return Ok(t),
            TokenResult::Error(e) => step = schedule.on_error(&e, started.elapsed()),
        }
    }
}

/// The set to store from a token answer; `previous` (a refresh) keeps its
/// refresh token when the answer brings none, and its issuer CA file.
fn token_set(
    server: &str,
    issuer: &str,
    client_id: &str,
    t: TokenAnswer,
    previous: Option<&TokenSet>,
) -> Result<TokenSet, CliError> {
    let Some(id_token) = t.id_token.filter(|s| !s.is_empty()) else {
        return Err(CliError::new(
            oidc::LOGIN_REQUIRED,
            format!("the issuer {issuer} answered without an ID token, which the daemon needs: log in again with kubegate login --server {server}"),
        ));
    };
    let expires_at = oidc::id_token_expiry(&id_token).ok_or_else(|| {
        CliError::new(
            oidc::ISSUER,
            "the issuer's ID token is not a JWT with an exp claim",
        )
    })?;
    Ok(TokenSet {
        daemon_url: server.to_string(),
        issuer: issuer.to_string(),
        client_id: client_id.to_string(),
        id_token,
        refresh_token: t
            .refresh_token
            .or_else(|| previous.and_then(|p| p.refresh_token.clone())),
        access_token: t.access_token,
        expires_at,
        obtained_at: now_unix(),
        issuer_ca_file: previous.and_then(|p| p.issuer_ca_file.clone()),
    })
}

fn human(secs: u64) -> String {
    match secs {
        0..=119 => format!("{secs} s"),
        120..=7199 => format!("{} min", secs / 60),
        _ => format!("{} h", secs / 3600),
    }
}

/// The exit code of a login failure: 3 denied, 4 expired, 2 usage or
/// configuration, 1 the rest.
pub fn login_exit_code(code: &str) -> i32 {
    match code {
        oidc::ACCESS_DENIED => 3,
        oidc::LOGIN_EXPIRED => 4,
        other => exit::for_code(other),
    }
}

/// `kubegate logout`: removes the daemon URL's sets.
pub fn run_logout(a: &LogoutArgs) -> Result<i32, CliError> {
    let server = token_store::normal_url(&a.server);
    let n = Store::locate()?.remove(server)?;
    if n == 0 {
        println!("Not logged in to {server}: nothing to remove");
    } else {
        println!("Logged out of {server}: its stored tokens are removed");
    }
    Ok(exit::SUCCESS)
}

/// The stored ID token for `server`, refreshed first when it expires
/// within [`REFRESH_BEFORE`] s (under the set's lock, the file re-read
/// once the lock is held: another command may have refreshed it).
pub fn stored_token(server: &str) -> Result<String, CliError> {
    let server = token_store::normal_url(server);
    let store = Store::locate()?;
    let Some((path, set)) = store.find(server)? else {
        return Err(CliError::new(
            codes::CONFIG,
            format!("no token: pass --token T or --token-file F, set KUBEGATE_TOKEN, or sign in with kubegate login --server {server}"),
        ));
    };
    if set.expires_at > now_unix() + REFRESH_BEFORE {
        return Ok(set.id_token);
    }
    let _lock = Lock::take(&path)?;
    let Some(set) = token_store::read(&path)? else {
        return Err(login_required(
            server,
            "the stored login was removed meanwhile",
        ));
    };
    if set.expires_at > now_unix() + REFRESH_BEFORE {
        return Ok(set.id_token);
    }
    let refreshed = refresh(&set)?;
    store.write(&refreshed)?;
    Ok(refreshed.id_token)
}

fn login_required(server: &str, why: &str) -> CliError {
    CliError::new(
        oidc::LOGIN_REQUIRED,
        format!("{why}: log in again with kubegate login --server {server}"),
    )
}

/// One refresh-token grant (RFC 6749 §6).
fn refresh(set: &TokenSet) -> Result<TokenSet, CliError> {
    let server = &set.daemon_url;
    let Some(rt) = set.refresh_token.as_deref() else {
        return Err(login_required(
            server,
            "the stored ID token has expired and there is no refresh token",
        ));
    };
    let ca = issuer_ca_at_refresh(set)?;
    let ep = discover(&set.issuer, ca, false)?;
    let (status, body) = post_form(
        &ep.token,
        ca,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", rt),
            ("client_id", &set.client_id),
        ],
    )?;
    match oidc::parse_token_answer(status, &body)? {
        TokenResult::Tokens(t) => token_set(server, &set.issuer, &set.client_id, t, Some(set)),
        TokenResult::Error(e) if e.error == "invalid_grant" => Err(login_required(
            server,
            "the issuer no longer accepts the stored refresh token (invalid_grant)",
        )),
        TokenResult::Error(e) => Err(CliError::new(
            oidc::ISSUER,
            format!("refreshing the login at {} failed: {}", set.issuer, e.error),
        )),
    }
}

/// The CA file the login recorded for the issuer, checked readable: a
/// file gone or unreadable is said plainly (no falling back to the web
/// PKI roots, which an issuer behind a private CA does not chain to).
fn issuer_ca_at_refresh(set: &TokenSet) -> Result<Option<&Path>, CliError> {
    let Some(f) = set.issuer_ca_file.as_deref() else {
        return Ok(None);
    };
    std::fs::File::open(f).map_err(|e| issuer_ca_unreadable(&set.daemon_url, f, &e))?;
    Ok(Some(f))
}

fn issuer_ca_unreadable(server: &str, f: &Path, e: &std::io::Error) -> CliError {
    CliError::new(
        codes::CONFIG,
        format!(
            "the issuer's CA file {} (given to kubegate login --issuer-ca-file) cannot be read ({e}), so the stored login cannot be refreshed: put the file back, or log in again with kubegate login --server {server} --issuer-ca-file F",
            f.display()
        ),
    )
}

/// `GET /v1/auth/whoami`'s answer (docs/api.md).
#[derive(serde::Deserialize)]
struct Whoami {
    principal: String,
    credential: String,
    #[serde(default)]
    issuer: Option<String>,
    // Lists read leniently: null or missing is empty.
    #[serde(default)]
    groups: Option<Vec<String>>,
    #[serde(default)]
    kube_groups: Option<Vec<String>>,
    #[serde(default)]
    workspaces: Option<Vec<String>>,
    #[serde(default)]
    may_start_sessions: bool,
    #[serde(default)]
    expires_at: Option<String>,
}

/// `kubegate whoami`.
pub fn run_whoami(a: &WhoamiArgs) -> Result<i32, CliError> {
    let client = Client::new(&a.common)?;
    let body = client.get("/v1/auth/whoami")?;
    let w: Whoami = serde_json::from_slice(&body).map_err(|e| {
        CliError::new(
            codes::PROTOCOL,
            format!("/v1/auth/whoami: not the expected JSON: {e}"),
        )
    })?;
    if a.output == OutputFormat::Json {
        println!("{}", String::from_utf8_lossy(&body).trim_end());
        return Ok(exit::SUCCESS);
    }
    print!("{}", whoami_text(&w, client.server()));
    Ok(exit::SUCCESS)
}

fn whoami_text(w: &Whoami, server: &str) -> String {
    let list = |v: &Option<Vec<String>>| match v.as_deref() {
        None | Some([]) => "-".to_string(),
        Some(v) => v.join(", "),
    };
    let credential = match &w.issuer {
        Some(i) => format!("{} ({i})", w.credential),
        None => w.credential.clone(),
    };
    format!(
        "principal:          {}\ncredential:         {credential}\ngroups:             {}\nkube groups:        {}\nworkspaces:         {}\nmay start sessions: {}\nexpires:            {}\ndaemon:             {server}\n",
        w.principal,
        list(&w.groups),
        list(&w.kube_groups),
        list(&w.workspaces),
        if w.may_start_sessions { "yes" } else { "no" },
        w.expires_at.as_deref().unwrap_or("never (a static token)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whoami_prints_every_field_and_no_token() {
        let w: Whoami = serde_json::from_slice(
            br#"{"principal":"oidc:ann@example.com","credential":"oidc","issuer":"https://idp","groups":["oidc:dev"],"kube_groups":["kubegate:developers"],"workspaces":["team-a/ann"],"may_start_sessions":true,"expires_at":"2026-12-04T16:00:00Z"}"#,
        )
        .unwrap();
        let t = whoami_text(&w, "https://gw");
        for want in [
            "oidc:ann@example.com",
            "oidc (https://idp)",
            "oidc:dev",
            "kubegate:developers",
            "team-a/ann",
            "yes",
            "2026-12-04T16:00:00Z",
            "https://gw",
        ] {
            assert!(t.contains(want), "{want}: {t}");
        }
        let w: Whoami = serde_json::from_slice(
            br#"{"principal":"ci","credential":"static","issuer":null,"groups":[],"kube_groups":[],"workspaces":[],"may_start_sessions":false,"expires_at":null}"#,
        )
        .unwrap();
        let t = whoami_text(&w, "http://127.0.0.1:7443");
        assert!(
            t.contains("never (a static token)") && t.contains("groups:             -"),
            "{t}"
        );
    }

    #[test]
    fn a_refresh_keeps_the_issuer_ca_and_says_plainly_when_it_is_gone() {
        let t: TokenAnswer = serde_json::from_slice(
            br#"{"id_token":"e30.eyJleHAiOjk5OTk5OTk5OTl9.c2ln","refresh_token":"r2"}"#,
        )
        .unwrap();
        let dir = std::env::temp_dir().join(format!("kubegate-login-ca-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("idp-ca.pem");
        std::fs::write(&ca, "pem").unwrap();
        let mut before = token_set("https://gw", "https://idp", "k", t.clone(), None).unwrap();
        assert_eq!(before.issuer_ca_file, None);
        assert_eq!(issuer_ca_at_refresh(&before).unwrap(), None);
        before.issuer_ca_file = Some(ca.clone());
        let after = token_set("https://gw", "https://idp", "k", t, Some(&before)).unwrap();
        assert_eq!(after.issuer_ca_file.as_deref(), Some(ca.as_path()));
        assert_eq!(issuer_ca_at_refresh(&after).unwrap(), Some(ca.as_path()));
        std::fs::remove_file(&ca).unwrap();
        let e = issuer_ca_at_refresh(&after).unwrap_err();
        assert!(e.is_config(), "{e}");
        for want in [
            ca.to_str().unwrap(),
            "cannot be read",
            "kubegate login --server https://gw --issuer-ca-file",
        ] {
            assert!(e.message.contains(want), "{want}: {e}");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_refresh_without_an_id_token_means_logging_in_again() {
        let t: TokenAnswer =
            serde_json::from_slice(br#"{"access_token":"a","refresh_token":"r2"}"#).unwrap();
        let e = token_set("https://gw", "https://idp", "k", t, None).unwrap_err();
        assert_eq!(e.code, oidc::LOGIN_REQUIRED);
        assert!(e.message.contains("kubegate login"), "{e}");
        assert_eq!(login_exit_code(oidc::ACCESS_DENIED), 3);
        assert_eq!(login_exit_code(oidc::LOGIN_EXPIRED), 4);
        assert_eq!(login_exit_code(codes::CONFIG), 2);
        assert_eq!(login_exit_code(oidc::ISSUER), 1);
    }
}
