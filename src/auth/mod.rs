//! OpenID Connect principals (docs/SECURITY.md#oidc-tokens): a bearer token that
//! is a JWT signed by a configured issuer becomes an [`Identity`] through
//! the issuer's claim mappings and the `[[oidc.rule]]`s.
//!
//! - `checks`: sans-IO: the token split, the claims checked, the names
//!   mapped, the rules applied (unit-tested without a clock or a network);
//! - `keys`: JWK sets read, the key and algorithm a token may use;
//! - `fetch`: discovery and JWK set fetches on the project's client stack.
//!
//! [`Oidc::verify`] never blocks on the network: it runs on the front
//! door's listener thread (a connection's first head is admitted there).
//! Each issuer has a refresher thread of its own that fetches its keys at
//! start, every hour, 30 s after a failure, and when a token names a `kid`
//! the cached set lacks (at most once per [`MIN_REFRESH`] per issuer). A
//! token that needs a fetch is answered `ISSUER_UNAVAILABLE` (503,
//! `Retry-After: 1`) while the fetch runs; when the issuer cannot be
//! reached and no cached key verifies the token, the answer stays 503:
//! never a pass. A token whose `iss` names no configured issuer is refused
//! before anything else is looked at: no fetch.

mod checks;
mod fetch;
mod keys;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{bounded, select, Receiver, Sender};
use parking_lot::Mutex;

use crate::api::{ApiError, Code, Identity};
use crate::config::oidc::OidcSection;
use crate::config::Principal;
use crate::kube::connection::{Impersonation, TlsMaterial};

pub use self::checks::looks_like_jwt;
use self::checks::{apply_rules, check_claims, expires_unix, map_names, split, Policy, Rule};
use self::fetch::{fetch_keys, read_ca, Source};
use self::keys::{pick, verifies, Key, Pick};

/// The shortest time between two fetches of one issuer's keys that a
/// token asked for (an unknown `kid`).
pub const MIN_REFRESH: Duration = Duration::from_secs(10);
/// Keys are fetched again this long after a successful fetch.
pub const REFRESH_EVERY: Duration = Duration::from_secs(3600);
/// A failed fetch is retried after this long.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(30);

/// What `kubegate login` should use (`GET /v1/auth/config`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginSettings {
    pub issuer: String,
    pub client_id: String,
    pub scopes: Vec<String>,
}

/// One issuer's cached keys and the state of their fetches.
#[derive(Debug, Clone, Default)]
struct KeyState {
    keys: Arc<Vec<Key>>,
    /// The last successful fetch.
    fetched: Option<Instant>,
    /// When the last fetch started.
    attempted: Option<Instant>,
    /// A fetch is running now.
    fetching: bool,
    /// The last fetch failed (why).
    failed: Option<String>,
}

/// A configured issuer.
struct Issuer {
    policy: Policy,
    source: Source,
    state: Mutex<KeyState>,
    /// Asks the refresher for a fetch (bounded(1): one pending ask).
    kick: Sender<()>,
}

/// The OIDC verifier of one configuration: its issuers (each with a
/// refresher thread, which ends when this is dropped), rules and login
/// settings.
pub struct Oidc {
    issuers: Vec<Arc<Issuer>>,
    rules: Vec<Rule>,
    static_names: HashSet<String>,
    login: Option<LoginSettings>,
    /// `[cluster] impersonate`: the mapped name and groups must be
    /// sendable as `Impersonate-*` headers.
    impersonate: bool,
    /// Dropped with this: every refresher thread ends.
    _stop: Sender<()>,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field(
                "issuers",
                &self
                    .issuers
                    .iter()
                    .map(|i| &i.policy.url)
                    .collect::<Vec<_>>(),
            )
            .field("rules", &self.rules.len())
            .finish_non_exhaustive()
    }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn unavailable(m: impl Into<String>) -> ApiError {
    ApiError::new(Code::IssuerUnavailable, m)
}

impl Oidc {
    /// The verifier of a validated `[oidc]` (`None` without issuers);
    /// `previous` lends its cached keys to issuers configured the same
    /// (a SIGHUP does not refetch them). `Err` when a
    /// `certificate_authority` file cannot be read.
    pub fn new(
        o: &OidcSection,
        principals: &[Principal],
        impersonate: bool,
        previous: Option<&Oidc>,
    ) -> Result<Option<Oidc>, String> {
        if o.issuers.is_empty() {
            return Ok(None);
        }
        let (stop, stopped) = bounded::<()>(0);
        let mut issuers = Vec::new();
        for (i, c) in o.issuers.iter().enumerate() {
            let mut tls = TlsMaterial::default();
            if let Some(ca) = &c.certificate_authority {
                tls.ca_certs = read_ca(ca)
                    .map_err(|e| format!("oidc.issuer[{i}].certificate_authority: {e}"))?;
            }
            let source = Source {
                issuer: c.url.clone(),
                discovery: c.discovery(),
                tls,
            };
            let inherited = previous
                .and_then(|p| p.issuers.iter().find(|x| x.source.same_as(&source)))
                .map(|x| {
                    let s = x.state.lock().clone();
                    KeyState {
                        fetching: false,
                        ..s
                    }
                })
                .unwrap_or_default();
            let (kick, kicked) = bounded::<()>(1);
            let issuer = Arc::new(Issuer {
                policy: Policy::new(c),
                source,
                state: Mutex::new(inherited),
                kick,
            });
            spawn_refresher(issuer.clone(), kicked, stopped.clone())
                .map_err(|e| format!("starting the key refresher of {}: {e}", c.url))?;
            issuers.push(issuer);
        }
        let login =
            o.login_issuer
                .clone()
                .zip(o.login_client_id.clone())
                .map(|(issuer, client_id)| LoginSettings {
                    issuer,
                    client_id,
                    scopes: o.login_scopes.clone(),
                });
        Ok(Some(Oidc {
            issuers,
            rules: o.rules.iter().map(Rule::new).collect(),
            static_names: principals.iter().map(|p| p.name.clone()).collect(),
            login,
            impersonate,
            _stop: stop,
        }))
    }

    /// What `kubegate login` should use, when configured.
    pub fn login(&self) -> Option<&LoginSettings> {
        self.login.as_ref()
    }

    /// The issuers' urls.
    pub fn issuer_urls(&self) -> Vec<&str> {
        self.issuers.iter().map(|i| i.policy.url.as_str()).collect()
    }

    /// A JWT verified and mapped to an identity, or the refusal with its
    /// code. Never blocks on the network (see the module's doc).
    pub fn verify(&self, token: &str) -> Result<Identity, ApiError> {
        self.verify_at(token, now_unix())
    }

    fn verify_at(&self, token: &str, now: i64) -> Result<Identity, ApiError> {
        let parts = split(token)?;
        let iss = checks::issuer_of(&parts.claims);
        let Some(issuer) = self
            .issuers
            .iter()
            .find(|i| Some(i.policy.url.as_str()) == iss)
        else {
            return Err(ApiError::new(
                Code::TokenIssuer,
                "the token's iss names no configured issuer",
            ));
        };
        let keys = issuer.state.lock().keys.clone();
        let verified = match pick(&keys, &parts.header) {
            Pick::WrongAlgorithm => {
                return Err(ApiError::new(
                    Code::TokenAlgorithm,
                    "the token's alg is not the algorithm of the issuer's key",
                ))
            }
            Pick::Unknown => return Err(issuer.unknown_key()),
            Pick::Keys(ks) => ks
                .iter()
                .any(|k| verifies(k, parts.signing_input, parts.signature)),
        };
        if !verified {
            return Err(ApiError::new(
                Code::TokenInvalid,
                "the token's signature does not verify",
            ));
        }
        check_claims(&issuer.policy, &parts.claims, now)?;
        let (name, groups) = map_names(&issuer.policy, &parts.claims, &self.static_names)?;
        let id = apply_rules(
            &self.rules,
            &issuer.policy.url,
            name,
            groups,
            &parts.claims,
            expires_unix(&parts.claims),
        )?;
        if self.impersonate && Impersonation::new(&id.name, &id.kube_groups).is_err() {
            return Err(ApiError::new(
                Code::IdentityRefused,
                "with cluster.impersonate, the mapped name must be printable ASCII that an Impersonate-User header carries unchanged",
            ));
        }
        Ok(id)
    }
}

impl Issuer {
    /// The answer to a token whose key is not cached: a fetch asked for
    /// (rate-limited), and 503 while it runs or when the issuer cannot be
    /// reached; 401 when the keys were just fetched and lack it.
    fn unknown_key(&self) -> ApiError {
        let st = self.state.lock();
        if st.fetching {
            return unavailable("fetching the issuer's signing keys; retry in a moment");
        }
        let recent = st.attempted.is_some_and(|t| t.elapsed() < MIN_REFRESH);
        if recent {
            return if st.failed.is_some() {
                unavailable("the issuer cannot be reached and no cached key verifies this token")
            } else {
                ApiError::new(
                    Code::TokenInvalid,
                    "no key of the issuer has the token's kid",
                )
            };
        }
        drop(st);
        let _ = self.kick.try_send(());
        unavailable("fetching the issuer's signing keys; retry in a moment")
    }

    /// One fetch, its outcome recorded (and logged: the issuer and why,
    /// nothing of any token).
    fn refresh(&self) {
        {
            let mut st = self.state.lock();
            st.fetching = true;
            st.attempted = Some(Instant::now());
        }
        let outcome = fetch_keys(&self.source);
        let mut st = self.state.lock();
        st.fetching = false;
        match outcome {
            Ok(keys) => {
                log::info!(
                    "oidc: {} signing keys of {} fetched",
                    keys.len(),
                    self.policy.url
                );
                st.keys = Arc::new(keys);
                st.fetched = Some(Instant::now());
                st.failed = None;
            }
            Err(e) => {
                log::warn!(
                    "oidc: fetching the keys of {}: {e}; {} cached keys stay",
                    self.policy.url,
                    st.keys.len()
                );
                st.failed = Some(e);
            }
        }
    }

    /// How long until the scheduled fetch.
    fn next_due(&self) -> Duration {
        let st = self.state.lock();
        let (since, every) = match (&st.failed, st.attempted, st.fetched) {
            (None, _, Some(f)) => (f, REFRESH_EVERY),
            (_, Some(a), _) => (a, RETRY_AFTER_FAILURE),
            _ => return Duration::ZERO,
        };
        every.saturating_sub(since.elapsed())
    }
}

/// The refresher of one issuer: a fetch when due or asked for (no more
/// often than [`MIN_REFRESH`]), until `stopped` disconnects.
fn spawn_refresher(
    issuer: Arc<Issuer>,
    kicked: Receiver<()>,
    stopped: Receiver<()>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("oidc-keys".into())
        .spawn(move || loop {
            let due = issuer.next_due();
            select! {
                recv(stopped) -> _ => return,
                recv(kicked) -> _ => {
                    let recent = issuer
                        .state
                        .lock()
                        .attempted
                        .is_some_and(|t| t.elapsed() < MIN_REFRESH);
                    if !recent {
                        issuer.refresh();
                    }
                }
                default(due) => issuer.refresh(),
            }
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::{json, Value};

    const URL: &str = "https://idp.example";

    /// An EC P-256 key: its PKCS#8 DER (to sign) and its public JWK.
    fn ec_key(kid: &str) -> (Vec<u8>, Value) {
        let kp = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let raw = kp.public_key_raw();
        let b = |s: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s);
        let jwk = json!({"kty": "EC", "crv": "P-256", "kid": kid,
                         "x": b(&raw[1..33]), "y": b(&raw[33..65])});
        (kp.serialize_der(), jwk)
    }

    fn sign(der: &[u8], kid: &str, alg: jsonwebtoken::Algorithm, claims: &Value) -> String {
        let mut h = jsonwebtoken::Header::new(alg);
        h.kid = Some(kid.into());
        jsonwebtoken::encode(&h, claims, &jsonwebtoken::EncodingKey::from_ec_der(der)).unwrap()
    }

    fn claims(now: i64) -> Value {
        json!({"iss": URL, "aud": "kubegate", "sub": "ann", "iat": now - 5, "exp": now + 300,
               "groups": ["dev"]})
    }

    /// An `Oidc` with these keys cached and no refresher thread: the kick
    /// channel's receiver is returned to see whether a fetch was asked for.
    fn oidc(jwks: Value, state: KeyState) -> (Oidc, Receiver<()>) {
        let c: crate::config::oidc::IssuerConfig = serde_json::from_value(json!({
            "url": URL, "audiences": ["kubegate"],
            "claim_mappings": {"username": {"claim": "sub", "prefix": "oidc:"},
                               "groups": {"claim": "groups", "prefix": ""}},
        }))
        .unwrap();
        let rule: crate::config::oidc::RuleConfig =
            serde_json::from_value(json!({"group": "dev", "workspaces": ["demo/{claim:sub}"]}))
                .unwrap();
        let (kick, kicked) = bounded(1);
        let (stop, _) = bounded(0);
        let issuer = Arc::new(Issuer {
            policy: Policy::new(&c),
            source: Source {
                issuer: URL.into(),
                discovery: c.discovery(),
                tls: TlsMaterial::default(),
            },
            state: Mutex::new(KeyState {
                keys: Arc::new(keys::parse_jwks(&jwks).unwrap()),
                ..state
            }),
            kick,
        });
        let o = Oidc {
            issuers: vec![issuer],
            rules: vec![Rule::new(&rule)],
            static_names: HashSet::new(),
            login: None,
            impersonate: true,
            _stop: stop,
        };
        (o, kicked)
    }

    fn fresh() -> KeyState {
        KeyState {
            fetched: Some(Instant::now()),
            attempted: Some(Instant::now()),
            ..KeyState::default()
        }
    }

    #[test]
    fn verification_uses_the_cached_keys_and_never_fetches_for_a_stranger() {
        let (der, jwk) = ec_key("e1");
        let (other, _) = ec_key("e2");
        let now = now_unix();
        let (o, kicked) = oidc(json!({ "keys": [jwk] }), fresh());
        let es256 = jsonwebtoken::Algorithm::ES256;

        let id = o
            .verify_at(&sign(&der, "e1", es256, &claims(now)), now)
            .unwrap();
        assert_eq!(id.name, "oidc:ann");
        assert_eq!(id.workspaces[0].to_string(), "demo/ann");

        let code = |t: &str| o.verify_at(t, now).unwrap_err().code;
        // With impersonation on, a name no header carries unchanged.
        let mut accented = claims(now);
        accented["sub"] = json!("zoë");
        assert_eq!(
            code(&sign(&der, "e1", es256, &accented)),
            Code::IdentityRefused
        );
        let mut stranger = claims(now);
        stranger["iss"] = json!("https://elsewhere");
        assert_eq!(code(&sign(&der, "e1", es256, &stranger)), Code::TokenIssuer);
        // Another key under the same kid; another algorithm than the key's.
        assert_eq!(
            code(&sign(&other, "e1", es256, &claims(now))),
            Code::TokenInvalid
        );
        let good = sign(&der, "e1", es256, &claims(now));
        let relabelled = format!(
            "{}.{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .encode(json!({"alg": "ES384", "kid": "e1"}).to_string()),
            good.split_once('.').unwrap().1
        );
        assert_eq!(code(&relabelled), Code::TokenAlgorithm);
        // An unknown kid right after a good fetch: 401, no new fetch.
        assert_eq!(
            code(&sign(&der, "e9", es256, &claims(now))),
            Code::TokenInvalid
        );
        assert!(kicked.try_recv().is_err(), "a fetch was asked for");
    }

    #[test]
    fn an_unknown_kid_asks_for_one_fetch_and_fails_closed() {
        let (der, jwk) = ec_key("e1");
        let now = now_unix();
        let token = sign(&der, "e2", jsonwebtoken::Algorithm::ES256, &claims(now));
        // Keys older than the rate limit: a fetch is asked for, 503 meanwhile.
        let (o, kicked) = oidc(json!({ "keys": [jwk.clone()] }), KeyState::default());
        assert_eq!(
            o.verify_at(&token, now).unwrap_err().code,
            Code::IssuerUnavailable
        );
        assert!(kicked.try_recv().is_ok());
        // The last fetch failed moments ago: 503, and no new fetch.
        let failed = KeyState {
            failed: Some("refused".into()),
            ..fresh()
        };
        let (o, kicked) = oidc(json!({ "keys": [jwk] }), failed);
        assert_eq!(
            o.verify_at(&token, now).unwrap_err().code,
            Code::IssuerUnavailable
        );
        assert!(kicked.try_recv().is_err());
    }
}
