//! The OAuth and OpenID Connect messages of `kubegate login`, sans I/O
//! (docs/cli.md, "kubegate login"): the daemon's `/v1/auth/config`, which
//! URLs are trusted, the issuer's discovery document, the device
//! authorization answer (RFC 8628 §3.2), token answers and errors (RFC 6749
//! §5), the poll schedule (RFC 8628 §3.5: the server's interval, 5 s more
//! per `slow_down`, ending at the code's expiry) and an ID token's `exp`.
//! Nothing here opens a socket or reads a clock: `login` does both.

use super::CliError;
use crate::exit::codes;
use base64::Engine as _;
use serde::Deserialize;
use std::time::Duration;

/// The login was refused by the person (RFC 8628 `access_denied`).
pub const ACCESS_DENIED: &str = "ACCESS_DENIED";
/// The device code expired before the person finished (`expired_token`).
pub const LOGIN_EXPIRED: &str = "LOGIN_EXPIRED";
/// The stored login cannot be used or refreshed: `kubegate login` again.
pub const LOGIN_REQUIRED: &str = "LOGIN_REQUIRED";
/// The issuer refused or answered what OAuth does not allow.
pub const ISSUER: &str = "ISSUER";

/// RFC 8628 §3.2: the interval when the server gives none.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(5);
/// Cap on a device code's lifetime and on the interval we honour (a
/// server's `expires_in` of a year must not make a poll loop of a year).
pub const MAX_EXPIRES_IN: Duration = Duration::from_secs(30 * 60);
const MAX_INTERVAL: Duration = Duration::from_secs(60);

fn issuer_error(m: impl Into<String>) -> CliError {
    CliError::new(ISSUER, m)
}

/// `GET /v1/auth/config`'s `oidc` (docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct AuthConfig {
    pub issuer: String,
    pub client_id: String,
    #[serde(default)]
    pub scopes: Vec<String>,
}

#[derive(Deserialize)]
struct AuthConfigBody {
    oidc: Option<AuthConfig>,
}

/// The daemon's answer: `None` when it has no OIDC login configured.
pub fn parse_auth_config(body: &[u8]) -> Result<Option<AuthConfig>, CliError> {
    let b: AuthConfigBody = serde_json::from_slice(body).map_err(|e| {
        CliError::new(
            codes::PROTOCOL,
            format!("/v1/auth/config: not the expected JSON: {e}"),
        )
    })?;
    if let Some(c) = &b.oidc {
        if c.client_id.is_empty() || c.issuer.is_empty() {
            return Err(CliError::new(
                codes::PROTOCOL,
                "/v1/auth/config: an empty issuer or client_id",
            ));
        }
    }
    Ok(b.oidc)
}

/// Whether `url` is https, or http to a loopback host (127.0.0.0/8, ::1,
/// `localhost`).
pub fn https_or_loopback(url: &str) -> bool {
    if url.starts_with("https://") {
        return true;
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return false;
    }
    let host = if let Some(v6) = authority.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// Refuses a daemon URL whose `/v1/auth/config` could be forged on the
/// way: plain HTTP off loopback could point us at a rogue issuer.
pub fn check_daemon_url(server: &str) -> Result<(), CliError> {
    if https_or_loopback(server) {
        return Ok(());
    }
    Err(CliError::new(
        codes::CONFIG,
        format!(
            "refusing to log in through {server}: the daemon's login settings are trusted only over https or on loopback (anyone on the path of plain HTTP could point kubegate at their own issuer); use the daemon's https URL"
        ),
    ))
}

/// The discovery document's fields we use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Discovery {
    pub issuer: String,
    pub device_authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    #[serde(default)]
    pub revocation_endpoint: Option<String>,
}

/// The two endpoints of the device flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    pub device: String,
    pub token: String,
}

/// Where the discovery document of `issuer` is (OpenID Connect Discovery
/// §4: the issuer, its trailing slash dropped, + the well-known path).
pub fn discovery_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// Reads the discovery document: its `issuer` must be `issuer` exactly,
/// and the token endpoint (and the device endpoint when `need_device`)
/// present, https or loopback.
pub fn parse_discovery(
    issuer: &str,
    body: &[u8],
    need_device: bool,
) -> Result<Endpoints, CliError> {
    let d: Discovery = serde_json::from_slice(body).map_err(|e| {
        issuer_error(format!(
            "{issuer}: the discovery document does not decode: {e}"
        ))
    })?;
    if d.issuer != issuer {
        return Err(issuer_error(format!(
            "the discovery document of {issuer} names another issuer, {:?}: refused (OpenID Connect Discovery §4.3)",
            d.issuer
        )));
    }
    let check = |name: &str, v: Option<String>| -> Result<String, CliError> {
        let v = v.ok_or_else(|| {
            issuer_error(format!(
                "{issuer} has no {name} in its discovery document (does it support the device flow?)"
            ))
        })?;
        if !https_or_loopback(&v) {
            return Err(issuer_error(format!(
                "{issuer}: its {name} {v} is neither https nor loopback"
            )));
        }
        Ok(v)
    };
    let token = check("token_endpoint", d.token_endpoint)?;
    let device = if need_device {
        check(
            "device_authorization_endpoint",
            d.device_authorization_endpoint,
        )?
    } else {
        String::new()
    };
    Ok(Endpoints { device, token })
}

/// The device authorization answer (RFC 8628 §3.2).
#[derive(Clone, PartialEq, Eq, Deserialize)]
pub struct DeviceAuth {
    pub device_code: String,
    pub user_code: String,
    pub verification_uri: String,
    #[serde(default)]
    pub verification_uri_complete: Option<String>,
    pub expires_in: u64,
    #[serde(default)]
    pub interval: Option<u64>,
}

impl std::fmt::Debug for DeviceAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The device code is a credential until it expires.
        f.debug_struct("DeviceAuth")
            .field("user_code", &self.user_code)
            .field("verification_uri", &self.verification_uri)
            .finish_non_exhaustive()
    }
}

/// An OAuth error answer (RFC 6749 §5.2).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct OAuthError {
    pub error: String,
    #[serde(default)]
    pub error_description: Option<String>,
}

impl OAuthError {
    /// The error and its description for a message, control characters
    /// (a terminal's escape sequences) replaced.
    fn said(&self) -> String {
        let said = match &self.error_description {
            Some(d) if !d.is_empty() => format!("{} ({d})", self.error),
            _ => self.error.clone(),
        };
        printable(&said)
    }
}

/// `s` with control characters replaced by `?`: what an issuer sends is
/// printed on the person's terminal.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

/// The device endpoint's answer, by status.
pub fn parse_device_auth(status: u16, body: &[u8]) -> Result<DeviceAuth, CliError> {
    if !(200..300).contains(&status) {
        return Err(match serde_json::from_slice::<OAuthError>(body) {
            Ok(e) => issuer_error(format!(
                "the issuer refused the device authorization request: {}",
                e.said()
            )),
            Err(_) => issuer_error(format!(
                "the issuer answered the device authorization request with HTTP {status}"
            )),
        });
    }
    let d: DeviceAuth = serde_json::from_slice(body).map_err(|e| {
        issuer_error(format!(
            "the device authorization answer does not decode: {e}"
        ))
    })?;
    if d.device_code.is_empty() || d.user_code.is_empty() || !https_or_loopback(&d.verification_uri)
    {
        return Err(issuer_error(
            "the device authorization answer has an empty code or a verification URL that is neither https nor loopback",
        ));
    }
    // Printed on the person's terminal: no escape sequences.
    let shown = [
        Some(&d.user_code),
        Some(&d.verification_uri),
        d.verification_uri_complete.as_ref(),
    ];
    if shown
        .into_iter()
        .flatten()
        .any(|v| v.chars().any(char::is_control))
    {
        return Err(issuer_error(
            "the device authorization answer has control characters in its code or URLs",
        ));
    }
    Ok(d)
}

/// A token endpoint's successful answer (RFC 6749 §5.1 + OpenID's
/// `id_token`).
#[derive(Clone, Deserialize)]
pub struct TokenAnswer {
    #[serde(default)]
    pub id_token: Option<String>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
}

impl std::fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenAnswer(<redacted>)")
    }
}

/// What one token request came back with.
#[derive(Debug)]
pub enum TokenResult {
    Tokens(TokenAnswer),
    Error(OAuthError),
}

/// The token endpoint's answer: tokens (2xx) or an OAuth error (400/401
/// with `error`); anything else is an issuer failure.
pub fn parse_token_answer(status: u16, body: &[u8]) -> Result<TokenResult, CliError> {
    if (200..300).contains(&status) {
        return serde_json::from_slice(body)
            .map(TokenResult::Tokens)
            .map_err(|e| issuer_error(format!("the token answer does not decode: {e}")));
    }
    match serde_json::from_slice::<OAuthError>(body) {
        Ok(e) => Ok(TokenResult::Error(e)),
        Err(_) => Err(issuer_error(format!(
            "the token endpoint answered HTTP {status} without an OAuth error"
        ))),
    }
}

/// The device flow's poll schedule (RFC 8628 §3.4, §3.5): the interval
/// (the server's, else 5 s), 5 s more per `slow_down`, and the code's
/// lifetime, measured from when the code was issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollSchedule {
    pub interval: Duration,
    /// Time since the code was issued (advanced by [`PollSchedule::wait`]).
    elapsed: Duration,
    expires_in: Duration,
}

/// What to do after one poll's answer.
#[derive(Debug, PartialEq, Eq)]
pub enum PollStep {
    /// Wait this long, then poll again.
    Wait(Duration),
    /// Stop with this error (denied, expired, refused).
    Fail(CliError),
}

impl PollSchedule {
    pub fn new(d: &DeviceAuth) -> PollSchedule {
        let interval = d
            .interval
            .map_or(DEFAULT_INTERVAL, Duration::from_secs)
            .clamp(Duration::from_secs(1), MAX_INTERVAL);
        PollSchedule {
            interval,
            elapsed: Duration::ZERO,
            expires_in: Duration::from_secs(d.expires_in).min(MAX_EXPIRES_IN),
        }
    }

    /// The first wait (RFC 8628 §3.4: poll no more often than the interval),
    /// or the expiry if the code would expire first.
    pub fn first(&mut self) -> PollStep {
        self.wait()
    }

    fn wait(&mut self) -> PollStep {
        if self.elapsed + self.interval > self.expires_in {
            return PollStep::Fail(expired());
        }
        self.elapsed += self.interval;
        PollStep::Wait(self.interval)
    }

    /// After an error answer (a success ends the loop before this).
    /// `took` is how long the request itself took: it counts against the
    /// code's lifetime.
    pub fn on_error(&mut self, e: &OAuthError, took: Duration) -> PollStep {
        self.elapsed += took;
        match e.error.as_str() {
            "authorization_pending" => self.wait(),
            "slow_down" => {
                self.interval = (self.interval + Duration::from_secs(5)).min(MAX_INTERVAL);
                self.wait()
            }
            "access_denied" => PollStep::Fail(CliError::new(
                ACCESS_DENIED,
                "the sign-in was denied at the issuer (access_denied): nothing was stored",
            )),
            "expired_token" => PollStep::Fail(expired()),
            _ => PollStep::Fail(issuer_error(format!(
                "the issuer refused the login: {}",
                e.said()
            ))),
        }
    }
}

fn expired() -> CliError {
    CliError::new(
        LOGIN_EXPIRED,
        "the code expired before the sign-in was finished (expired_token): run kubegate login again",
    )
}

/// An ID token's `exp` (seconds since the epoch), read from its payload
/// without verifying it: the daemon verifies; the CLI only needs to know
/// when to refresh.
pub fn id_token_expiry(id_token: &str) -> Option<u64> {
    #[derive(Deserialize)]
    struct Claims {
        exp: u64,
    }
    let payload = id_token.split('.').nth(1)?;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice::<Claims>(&raw).ok().map(|c| c.exp)
}

/// `application/x-www-form-urlencoded` of `pairs`.
pub fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
    let enc = |s: &str| {
        let mut o = String::new();
        for b in s.bytes() {
            match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    o.push(char::from(b));
                }
                b' ' => o.push('+'),
                _ => o.push_str(&format!("%{b:02X}")),
            }
        }
        o
    };
    pairs
        .iter()
        .map(|(k, v)| format!("{}={}", enc(k), enc(v)))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(interval: Option<u64>, expires_in: u64) -> DeviceAuth {
        DeviceAuth {
            device_code: "d".into(),
            user_code: "U".into(),
            verification_uri: "https://idp/device".into(),
            verification_uri_complete: None,
            expires_in,
            interval,
        }
    }

    fn err(e: &str) -> OAuthError {
        OAuthError {
            error: e.into(),
            error_description: None,
        }
    }

    #[test]
    fn polls_at_the_interval_slow_down_adds_five_seconds() {
        let mut p = PollSchedule::new(&device(None, 600));
        assert_eq!(p.first(), PollStep::Wait(Duration::from_secs(5)));
        let z = Duration::ZERO;
        assert_eq!(
            p.on_error(&err("authorization_pending"), z),
            PollStep::Wait(Duration::from_secs(5))
        );
        assert_eq!(
            p.on_error(&err("slow_down"), z),
            PollStep::Wait(Duration::from_secs(10))
        );
        assert_eq!(
            p.on_error(&err("slow_down"), z),
            PollStep::Wait(Duration::from_secs(15))
        );
        // The interval stays raised.
        assert_eq!(
            p.on_error(&err("authorization_pending"), z),
            PollStep::Wait(Duration::from_secs(15))
        );
        let mut p = PollSchedule::new(&device(Some(2), 600));
        assert_eq!(p.first(), PollStep::Wait(Duration::from_secs(2)));
        // A zero interval is one second; a huge one is capped.
        assert_eq!(
            PollSchedule::new(&device(Some(0), 600)).interval,
            Duration::from_secs(1)
        );
        assert_eq!(
            PollSchedule::new(&device(Some(9999), 600)).interval,
            MAX_INTERVAL
        );
    }

    #[test]
    fn the_loop_ends_at_the_codes_expiry() {
        let mut p = PollSchedule::new(&device(Some(4), 10));
        assert_eq!(p.first(), PollStep::Wait(Duration::from_secs(4)));
        // 4 + 1 (the request) + 4 = 9 <= 10
        assert_eq!(
            p.on_error(&err("authorization_pending"), Duration::from_secs(1)),
            PollStep::Wait(Duration::from_secs(4))
        );
        // 9 + 4 > 10: expired without another request.
        let PollStep::Fail(e) = p.on_error(&err("authorization_pending"), Duration::ZERO) else {
            panic!("expected the end")
        };
        assert_eq!(e.code, LOGIN_EXPIRED);
        // A server's lifetime of a year is capped.
        let p = PollSchedule::new(&device(None, 365 * 86400));
        assert_eq!(p.expires_in, MAX_EXPIRES_IN);
    }

    #[test]
    fn denied_expired_and_other_errors_end_the_loop() {
        let mut p = PollSchedule::new(&device(None, 600));
        let code = |s: PollStep| match s {
            PollStep::Fail(e) => e.code,
            PollStep::Wait(_) => "wait".into(),
        };
        assert_eq!(
            code(p.on_error(&err("access_denied"), Duration::ZERO)),
            ACCESS_DENIED
        );
        assert_eq!(
            code(p.on_error(&err("expired_token"), Duration::ZERO)),
            LOGIN_EXPIRED
        );
        assert_eq!(
            code(p.on_error(&err("invalid_client"), Duration::ZERO)),
            ISSUER
        );
    }

    #[test]
    fn what_the_issuer_says_reaches_the_terminal_without_control_characters() {
        let e = parse_device_auth(
            200,
            br#"{"device_code":"d","user_code":"AB\u001b[2J","verification_uri":"https://idp/d","expires_in":60}"#,
        )
        .unwrap_err();
        assert!(e.message.contains("control characters"), "{e}");
        let ok = parse_device_auth(
            200,
            br#"{"device_code":"d","user_code":"AB-CD","verification_uri":"https://idp/d","expires_in":60}"#,
        )
        .unwrap();
        assert_eq!(ok.interval, None);
        let mut p = PollSchedule::new(&ok);
        let said = OAuthError {
            error: "invalid_client".into(),
            error_description: Some("bad\u{1b}[31m".into()),
        };
        let PollStep::Fail(e) = p.on_error(&said, Duration::ZERO) else {
            panic!()
        };
        assert!(
            !e.message.contains('\u{1b}') && e.message.contains("bad?[31m"),
            "{e}"
        );
    }

    #[test]
    fn trusted_urls_are_https_or_loopback() {
        for ok in [
            "https://gw.example",
            "http://127.0.0.1:7443",
            "http://127.8.0.1",
            "http://[::1]:80/x",
            "http://localhost:1/p",
        ] {
            assert!(https_or_loopback(ok), "{ok}");
        }
        for bad in [
            "http://gw.example",
            "http://10.0.0.1:7443",
            "http://127.0.0.1.evil.example",
            "http://localhost.evil.example/",
            "http://127.0.0.1@evil.example",
            "ftp://127.0.0.1",
        ] {
            assert!(!https_or_loopback(bad), "{bad}");
        }
        let e = check_daemon_url("http://gw.example:7443").unwrap_err();
        assert!(e.is_config() && e.message.contains("https"), "{e}");
    }

    #[test]
    fn discovery_must_name_the_same_issuer_and_the_endpoints() {
        let doc = |iss: &str| {
            format!(
                r#"{{"issuer":"{iss}","token_endpoint":"https://idp/token","device_authorization_endpoint":"https://idp/device"}}"#
            )
        };
        let ep = parse_discovery("https://idp", doc("https://idp").as_bytes(), true).unwrap();
        assert_eq!(ep.token, "https://idp/token");
        assert_eq!(ep.device, "https://idp/device");
        let e = parse_discovery("https://idp", doc("https://evil").as_bytes(), true).unwrap_err();
        assert!(e.message.contains("another issuer"), "{e}");
        let e = parse_discovery(
            "https://idp",
            br#"{"issuer":"https://idp","token_endpoint":"https://idp/t"}"#,
            true,
        )
        .unwrap_err();
        assert!(e.message.contains("device_authorization_endpoint"), "{e}");
        let e = parse_discovery(
            "https://idp",
            br#"{"issuer":"https://idp","token_endpoint":"http://idp/t","device_authorization_endpoint":"https://idp/d"}"#,
            true,
        )
        .unwrap_err();
        assert!(e.message.contains("neither https"), "{e}");
        assert_eq!(
            discovery_url("https://idp/"),
            "https://idp/.well-known/openid-configuration"
        );
    }

    #[test]
    fn token_answers_and_id_token_expiry() {
        let TokenResult::Error(e) =
            parse_token_answer(400, br#"{"error":"authorization_pending"}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(e.error, "authorization_pending");
        assert!(parse_token_answer(502, b"<html>").is_err());
        let TokenResult::Tokens(t) =
            parse_token_answer(200, br#"{"id_token":"a.b.c","refresh_token":"r"}"#).unwrap()
        else {
            panic!()
        };
        assert_eq!(t.refresh_token.as_deref(), Some("r"));
        assert_eq!(format!("{t:?}"), "TokenAnswer(<redacted>)");
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"exp":1700000000,"sub":"x"}"#);
        assert_eq!(
            id_token_expiry(&format!("h.{payload}.s")),
            Some(1_700_000_000)
        );
        assert_eq!(id_token_expiry("nope"), None);
        assert_eq!(parse_auth_config(br#"{"oidc":null}"#).unwrap(), None);
        let c = parse_auth_config(
            br#"{"oidc":{"issuer":"https://i","client_id":"k","scopes":["openid"]}}"#,
        )
        .unwrap()
        .unwrap();
        assert_eq!(c.client_id, "k");
        assert_eq!(form(&[("a b", "c&d=é")]), b"a+b=c%26d%3D%C3%A9".to_vec());
    }
}
