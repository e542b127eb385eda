//! The sans-IO half of OIDC verification: a token split into its parts,
//! the registered claims checked (`iss`, `aud`, `exp`, `nbf`, `iat`, the
//! lifetime cap, `azp`), the issuer's `claim_validation_rules`, the claim
//! mappings (name and groups, `system:` refused) and the rules that give an
//! identity its workspaces. No clock and no network: `now` is an argument,
//! the keys are `keys.rs`'s. Every refusal is an [`ApiError`] whose message
//! names claims, never their values.

use std::collections::HashSet;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::api::{ApiError, Code, Credential, Identity, Workspace};
use crate::config::oidc::{
    parse_template, ClaimMapping, ClaimValidationRule, IssuerConfig, RuleConfig, TemplatePart,
    SYSTEM_PREFIX,
};

/// Longest token considered (a JWT of a few KiB is usual).
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Most groups one token may carry.
pub const MAX_GROUPS: usize = 256;

/// The unverified JOSE header: what the token claims about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub alg: String,
    pub kid: Option<String>,
}

/// A token split: header, claims (not yet trusted), the signing input and
/// the signature (base64url).
#[derive(Debug, Clone)]
pub struct Parts<'t> {
    pub header: Header,
    pub claims: Map<String, Value>,
    pub signing_input: &'t str,
    pub signature: &'t str,
}

fn invalid(m: impl Into<String>) -> ApiError {
    ApiError::new(Code::TokenInvalid, m)
}

fn refused(m: impl Into<String>) -> ApiError {
    ApiError::new(Code::IdentityRefused, m)
}

fn b64_segment(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Whether a bearer token is shaped like a JWS compact serialization
/// (three base64url segments, the first a JSON object): only those go to
/// OIDC verification (the signature may be empty: `alg: none` is refused
/// with its own code, not as "not a token").
pub fn looks_like_jwt(token: &str) -> bool {
    let mut it = token.split('.');
    let (Some(h), Some(p), Some(s), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return false;
    };
    h.starts_with("eyJ") && b64_segment(h) && b64_segment(p) && (s.is_empty() || b64_segment(s))
}

fn decode_json(seg: &str, what: &str) -> Result<Map<String, Value>, ApiError> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(seg)
        .map_err(|_| invalid(format!("the token's {what} is not base64url")))?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(invalid(format!("the token's {what} is not a JSON object"))),
    }
}

/// Splits a token; refuses `alg: none`, HMAC and unknown algorithms
/// (`TOKEN_ALGORITHM`) and anything malformed (`TOKEN_INVALID`).
pub fn split(token: &str) -> Result<Parts<'_>, ApiError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(invalid(format!(
            "the token is longer than {MAX_TOKEN_BYTES} bytes"
        )));
    }
    if !looks_like_jwt(token) {
        return Err(invalid("not a JWT"));
    }
    let (signing_input, signature) = token.rsplit_once('.').unwrap_or((token, ""));
    let (h, p) = signing_input.split_once('.').unwrap_or((signing_input, ""));
    let header = decode_json(h, "header")?;
    if header.contains_key("crit") {
        return Err(invalid("the token's header has crit parameters"));
    }
    let Some(alg) = header.get("alg").and_then(Value::as_str) else {
        return Err(ApiError::new(
            Code::TokenAlgorithm,
            "the token names no alg",
        ));
    };
    if alg.eq_ignore_ascii_case("none") || alg.starts_with("HS") || alg.is_empty() {
        return Err(ApiError::new(
            Code::TokenAlgorithm,
            format!("alg {alg:?} is refused: only the issuer's public-key algorithms are accepted"),
        ));
    }
    if signature.is_empty() {
        return Err(invalid("the token has no signature"));
    }
    let kid = match header.get("kid") {
        None => None,
        Some(Value::String(k)) => Some(k.clone()),
        Some(_) => return Err(invalid("the token's kid is not a string")),
    };
    let claims = decode_json(p, "payload")?;
    Ok(Parts {
        header: Header {
            alg: alg.to_string(),
            kid,
        },
        claims,
        signing_input,
        signature,
    })
}

/// The `iss` claim, when it is a string.
pub fn issuer_of(claims: &Map<String, Value>) -> Option<&str> {
    claims.get("iss").and_then(Value::as_str)
}

/// An issuer's checks and mappings (from its `[[oidc.issuer]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub url: String,
    pub audiences: Vec<String>,
    pub leeway_secs: u64,
    pub max_lifetime_secs: u64,
    pub claim_rules: Vec<ClaimValidationRule>,
    pub username: ClaimMapping,
    pub groups: Option<ClaimMapping>,
}

impl Policy {
    pub fn new(c: &IssuerConfig) -> Policy {
        Policy {
            url: c.url.clone(),
            audiences: c.audiences.clone(),
            leeway_secs: c.leeway_secs,
            max_lifetime_secs: c.max_lifetime_secs,
            claim_rules: c.claim_validation_rules.clone(),
            username: c.claim_mappings.username.clone(),
            groups: c.claim_mappings.groups.clone(),
        }
    }
}

/// A NumericDate claim (seconds; a fraction is dropped).
fn seconds(claims: &Map<String, Value>, name: &str) -> Result<Option<i64>, ApiError> {
    match claims.get(name) {
        None => Ok(None),
        Some(v) => match v.as_i64().or_else(|| {
            v.as_f64()
                .filter(|f| f.is_finite() && f.abs() < 1e15)
                .map(|f| f as i64)
        }) {
            Some(s) => Ok(Some(s)),
            None => Err(invalid(format!("the {name} claim is not a number"))),
        },
    }
}

/// Whether a claim is `value` or an array holding it.
fn holds(v: Option<&Value>, value: &str) -> bool {
    match v {
        Some(Value::String(s)) => s == value,
        Some(Value::Array(a)) => a.iter().any(|x| x.as_str() == Some(value)),
        _ => false,
    }
}

/// The registered claims and the issuer's `claim_validation_rules`, at
/// `now` (Unix seconds). `iss` was matched to this policy by the caller;
/// it is checked again here.
pub fn check_claims(p: &Policy, claims: &Map<String, Value>, now: i64) -> Result<(), ApiError> {
    if issuer_of(claims) != Some(p.url.as_str()) {
        return Err(ApiError::new(
            Code::TokenIssuer,
            "the token's iss is not this issuer",
        ));
    }
    let leeway = p.leeway_secs as i64;
    let exp = seconds(claims, "exp")?.ok_or_else(|| invalid("the token has no exp claim"))?;
    let iat = seconds(claims, "iat")?.ok_or_else(|| invalid("the token has no iat claim"))?;
    if now > exp.saturating_add(leeway) {
        return Err(ApiError::new(Code::TokenExpired, "the token has expired"));
    }
    if let Some(nbf) = seconds(claims, "nbf")? {
        if now.saturating_add(leeway) < nbf {
            return Err(ApiError::new(
                Code::TokenNotYetValid,
                "the token is not valid yet (nbf)",
            ));
        }
    }
    if now.saturating_add(leeway) < iat {
        return Err(ApiError::new(
            Code::TokenNotYetValid,
            "the token was issued in the future (iat)",
        ));
    }
    if exp < iat || (exp - iat) as u64 > p.max_lifetime_secs {
        return Err(invalid(format!(
            "the token's lifetime (exp - iat) is over this issuer's cap of {} s",
            p.max_lifetime_secs
        )));
    }
    let aud_ok = p.audiences.iter().any(|a| holds(claims.get("aud"), a));
    if !aud_ok {
        return Err(ApiError::new(
            Code::TokenAudience,
            "the token's aud names none of this issuer's configured audiences",
        ));
    }
    if let Some(azp) = claims.get("azp") {
        let ok = azp
            .as_str()
            .is_some_and(|a| p.audiences.iter().any(|x| x == a));
        if !ok {
            return Err(ApiError::new(
                Code::TokenAudience,
                "the token's azp is not one of this issuer's configured audiences",
            ));
        }
    }
    for r in &p.claim_rules {
        if !holds(claims.get(&r.claim), &r.required_value) {
            return Err(refused(format!(
                "the {} claim does not hold its required value (claim_validation_rules)",
                r.claim
            )));
        }
    }
    Ok(())
}

/// A mapped name or group: printable, at most 128 characters.
fn printable(s: &str) -> bool {
    !s.trim().is_empty() && s.chars().count() <= 128 && !s.chars().any(char::is_control)
}

/// The verified claims mapped to a name and groups; `static_names` are the
/// static principals' names (a mapped name equal to one is refused).
pub fn map_names(
    p: &Policy,
    claims: &Map<String, Value>,
    static_names: &HashSet<String>,
) -> Result<(String, Vec<String>), ApiError> {
    let u = &p.username;
    let Some(value) = claims.get(&u.claim).and_then(Value::as_str) else {
        return Err(refused(format!(
            "the token has no string {} claim to name its principal",
            u.claim
        )));
    };
    if u.claim == "email" && claims.get("email_verified") != Some(&Value::Bool(true)) {
        return Err(refused(
            "the email claim names the principal only when email_verified is true",
        ));
    }
    let name = format!("{}{value}", u.prefix());
    if !printable(&name) {
        return Err(refused(
            "the mapped name must be 1 to 128 printable characters",
        ));
    }
    if name.starts_with(SYSTEM_PREFIX) {
        return Err(refused(format!(
            "mapped names starting with {SYSTEM_PREFIX:?} are refused"
        )));
    }
    if static_names.contains(&name) {
        return Err(refused(
            "the mapped name is a static principal's name: refused, it would inherit that principal's sessions",
        ));
    }
    let mut groups = Vec::new();
    if let Some(g) = &p.groups {
        let raw: Vec<&Value> = match claims.get(&g.claim) {
            None | Some(Value::Null) => Vec::new(),
            Some(v @ Value::String(_)) => vec![v],
            Some(Value::Array(a)) => a.iter().collect(),
            Some(_) => {
                return Err(refused(format!(
                    "the {} claim is neither a string nor an array",
                    g.claim
                )))
            }
        };
        if raw.len() > MAX_GROUPS {
            return Err(refused(format!(
                "the token carries more than {MAX_GROUPS} groups"
            )));
        }
        for v in raw {
            let Some(s) = v.as_str() else {
                return Err(refused(format!(
                    "the {} claim holds a value that is not a string",
                    g.claim
                )));
            };
            let group = format!("{}{s}", g.prefix());
            if !printable(&group) {
                return Err(refused(
                    "a mapped group must be 1 to 128 printable characters",
                ));
            }
            if group.starts_with(SYSTEM_PREFIX) {
                return Err(refused(format!(
                    "mapped groups starting with {SYSTEM_PREFIX:?} are refused"
                )));
            }
            if !groups.contains(&group) {
                groups.push(group);
            }
        }
    }
    Ok((name, groups))
}

/// A `[[oidc.rule]]` with its templates parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    issuer: Option<String>,
    group: Option<String>,
    claim: Option<(String, String)>,
    workspaces: Vec<Vec<TemplatePart>>,
    may_start_sessions: bool,
    kube_groups: Vec<String>,
}

impl Rule {
    /// From validated configuration (a template that does not parse, which
    /// validation refuses, gives nothing).
    pub fn new(r: &RuleConfig) -> Rule {
        Rule {
            issuer: r.issuer.clone(),
            group: r.group.clone(),
            claim: r.claim.clone().zip(r.value.clone()),
            workspaces: r
                .workspaces
                .iter()
                .filter_map(|w| parse_template(w).ok())
                .collect(),
            may_start_sessions: r.may_start_sessions,
            kube_groups: r.kube_groups.clone(),
        }
    }

    fn matches(&self, issuer: &str, groups: &[String], claims: &Map<String, Value>) -> bool {
        self.issuer.as_deref().is_none_or(|i| i == issuer)
            && (self.group.is_some() || self.claim.is_some())
            && self.group.as_ref().is_none_or(|g| groups.contains(g))
            && self
                .claim
                .as_ref()
                .is_none_or(|(c, v)| holds(claims.get(c), v))
    }
}

/// A template filled from the claims: `None` when a claim is missing, not
/// a string, or holds a `/` or a control character (a claim must never
/// move the project/uid boundary), or the result is not a workspace.
fn fill(t: &[TemplatePart], claims: &Map<String, Value>) -> Option<Workspace> {
    let mut s = String::new();
    for part in t {
        match part {
            TemplatePart::Literal(l) => s.push_str(l),
            TemplatePart::Claim(c) => {
                let v = claims.get(c)?.as_str()?;
                if v.is_empty() || v.contains('/') || v.chars().any(char::is_control) {
                    return None;
                }
                s.push_str(v);
            }
        }
    }
    Workspace::parse(&s).ok()
}

/// The identity the matching rules give (their union), or
/// `NO_MATCHING_RULE`.
pub fn apply_rules(
    rules: &[Rule],
    issuer: &str,
    name: String,
    groups: Vec<String>,
    claims: &Map<String, Value>,
    expires_unix: u64,
) -> Result<Identity, ApiError> {
    let mut matched = false;
    let mut workspaces: Vec<Workspace> = Vec::new();
    let mut kube_groups: Vec<String> = Vec::new();
    let mut may_start_sessions = false;
    for r in rules.iter().filter(|r| r.matches(issuer, &groups, claims)) {
        matched = true;
        may_start_sessions |= r.may_start_sessions;
        for w in r.workspaces.iter().filter_map(|t| fill(t, claims)) {
            if !workspaces.contains(&w) {
                workspaces.push(w);
            }
        }
        for g in &r.kube_groups {
            if !kube_groups.contains(g) {
                kube_groups.push(g.clone());
            }
        }
    }
    if !matched {
        return Err(ApiError::new(
            Code::NoMatchingRule,
            "the token is valid but no [[oidc.rule]] matches this identity",
        ));
    }
    Ok(Identity {
        name,
        workspaces,
        may_start_sessions,
        kube_groups,
        credential: Credential::Oidc {
            issuer: issuer.to_string(),
            groups,
            expires_unix,
        },
    })
}

/// The token's `exp` as Unix seconds (checked present by
/// [`check_claims`]).
pub fn expires_unix(claims: &Map<String, Value>) -> u64 {
    seconds(claims, "exp")
        .ok()
        .flatten()
        .map_or(0, |s| s.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn policy() -> Policy {
        Policy {
            url: "https://idp".into(),
            audiences: vec!["kubegate".into(), "cli".into()],
            leeway_secs: 60,
            max_lifetime_secs: 3600,
            claim_rules: vec![],
            username: ClaimMapping {
                claim: "email".into(),
                prefix: Some("oidc:".into()),
            },
            groups: Some(ClaimMapping {
                claim: "groups".into(),
                prefix: Some("oidc:".into()),
            }),
        }
    }

    fn claims(extra: Value) -> Map<String, Value> {
        let mut c = json!({
            "iss": "https://idp", "aud": "kubegate", "sub": "ann",
            "exp": NOW + 600, "iat": NOW - 60,
            "email": "ann@example.com", "email_verified": true,
            "groups": ["dev"],
        });
        for (k, v) in extra.as_object().unwrap() {
            if v.is_null() {
                c.as_object_mut().unwrap().remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c.as_object().unwrap().clone()
    }

    fn code(r: Result<(), ApiError>) -> Code {
        r.expect_err("refused").code
    }

    fn b64(v: &Value) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
    }

    #[test]
    fn shapes_and_algorithms() {
        let h = |alg: &str| b64(&json!({"alg": alg, "kid": "k"}));
        let p = b64(&json!({"iss": "x"}));
        assert!(looks_like_jwt(&format!("{}.{p}.c2ln", h("RS256"))));
        assert!(!looks_like_jwt("kubegate-demo-token"));
        assert!(!looks_like_jwt("eyJ.a.b.c"));
        assert!(!looks_like_jwt("eyJhbGc.a+b.c"));
        let t = format!("{}.{p}.c2ln", h("RS256"));
        let ok = split(&t).unwrap();
        assert_eq!(ok.header.alg, "RS256");
        assert_eq!(ok.header.kid.as_deref(), Some("k"));
        assert_eq!(issuer_of(&ok.claims), Some("x"));
        for alg in ["none", "None", "HS256", "HS512"] {
            let e = split(&format!("{}.{p}.", h(alg))).unwrap_err();
            assert_eq!(e.code, Code::TokenAlgorithm, "{alg}");
        }
        let e = split(&format!("{}.{p}.", h("RS256"))).unwrap_err();
        assert_eq!(e.code, Code::TokenInvalid);
        let not_json = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("[1]");
        let e = split(&format!("{}.{not_json}.c2ln", h("RS256"))).unwrap_err();
        assert_eq!(e.code, Code::TokenInvalid);
        let long = format!("{}.{}.c2ln", h("RS256"), "A".repeat(MAX_TOKEN_BYTES));
        assert_eq!(split(&long).unwrap_err().code, Code::TokenInvalid);
    }

    #[test]
    fn registered_claims() {
        let p = policy();
        assert!(check_claims(&p, &claims(json!({})), NOW).is_ok());
        assert!(check_claims(&p, &claims(json!({"aud": ["x", "cli"]})), NOW).is_ok());
        let cases = [
            (json!({"exp": NOW - 61}), Code::TokenExpired),
            (json!({"exp": null}), Code::TokenInvalid),
            (json!({"iat": null}), Code::TokenInvalid),
            (json!({"exp": "soon"}), Code::TokenInvalid),
            (json!({"nbf": NOW + 61}), Code::TokenNotYetValid),
            (
                json!({"iat": NOW + 61, "exp": NOW + 600}),
                Code::TokenNotYetValid,
            ),
            (
                json!({"iat": NOW - 3000, "exp": NOW + 601}),
                Code::TokenInvalid,
            ),
            (json!({"aud": "other"}), Code::TokenAudience),
            (json!({"aud": ["a", "b"]}), Code::TokenAudience),
            (json!({"aud": null}), Code::TokenAudience),
            (json!({"azp": "other"}), Code::TokenAudience),
            (json!({"iss": "https://idp/"}), Code::TokenIssuer),
        ];
        for (extra, want) in cases {
            assert_eq!(
                code(check_claims(&p, &claims(extra.clone()), NOW)),
                want,
                "{extra}"
            );
        }
        // Within the leeway.
        assert!(check_claims(&p, &claims(json!({"exp": NOW - 59})), NOW).is_ok());
        assert!(check_claims(&p, &claims(json!({"nbf": NOW + 59})), NOW).is_ok());
        assert!(check_claims(&p, &claims(json!({"azp": "cli"})), NOW).is_ok());
        let mut strict = policy();
        strict.claim_rules.push(ClaimValidationRule {
            claim: "hd".into(),
            required_value: "example.com".into(),
        });
        assert_eq!(
            code(check_claims(&strict, &claims(json!({})), NOW)),
            Code::IdentityRefused
        );
        assert!(check_claims(&strict, &claims(json!({"hd": "example.com"})), NOW).is_ok());
    }

    #[test]
    fn names_and_groups() {
        let p = policy();
        let none = HashSet::new();
        let (name, groups) = map_names(&p, &claims(json!({})), &none).unwrap();
        assert_eq!(name, "oidc:ann@example.com");
        assert_eq!(groups, vec!["oidc:dev".to_string()]);
        let (_, g) = map_names(&p, &claims(json!({"groups": "ops"})), &none).unwrap();
        assert_eq!(g, vec!["oidc:ops".to_string()]);
        let (_, g) = map_names(&p, &claims(json!({"groups": null})), &none).unwrap();
        assert!(g.is_empty());
        let refused = |extra: Value, statics: &HashSet<String>, p: &Policy| {
            map_names(p, &claims(extra), statics).unwrap_err().code
        };
        assert_eq!(
            refused(json!({"email_verified": false}), &none, &p),
            Code::IdentityRefused
        );
        assert_eq!(
            refused(json!({"email_verified": "true"}), &none, &p),
            Code::IdentityRefused
        );
        assert_eq!(
            refused(json!({"email": null}), &none, &p),
            Code::IdentityRefused
        );
        assert_eq!(
            refused(json!({"groups": [1]}), &none, &p),
            Code::IdentityRefused
        );
        let statics: HashSet<String> = ["oidc:ann@example.com".to_string()].into();
        assert_eq!(refused(json!({}), &statics, &p), Code::IdentityRefused);
        let mut bare = policy();
        bare.username = ClaimMapping {
            claim: "sub".into(),
            prefix: Some(String::new()),
        };
        bare.groups = Some(ClaimMapping {
            claim: "groups".into(),
            prefix: Some(String::new()),
        });
        assert_eq!(
            refused(json!({"sub": "system:admin"}), &none, &bare),
            Code::IdentityRefused
        );
        assert_eq!(
            refused(json!({"groups": ["dev", "system:masters"]}), &none, &bare),
            Code::IdentityRefused
        );
        let many: Vec<String> = (0..=MAX_GROUPS).map(|i| format!("g{i}")).collect();
        assert_eq!(
            refused(json!({"groups": many}), &none, &p),
            Code::IdentityRefused
        );
    }

    fn rule(body: Value) -> Rule {
        let r: RuleConfig = serde_json::from_value(body).unwrap();
        Rule::new(&r)
    }

    #[test]
    fn rules_give_the_union_and_templates_stay_in_their_place() {
        let rules = vec![
            rule(
                json!({"group": "oidc:dev", "workspaces": ["team-a/{claim:sub}", "shared/tools"],
                        "kube_groups": ["kubegate:dev"]}),
            ),
            rule(
                json!({"claim": "sub", "value": "ann", "may_start_sessions": true,
                        "workspaces": ["shared/tools", "{claim:dept}/x"], "kube_groups": ["kubegate:dev", "k:ann"]}),
            ),
            rule(
                json!({"issuer": "https://other", "group": "oidc:dev", "workspaces": ["other/x"]}),
            ),
        ];
        let c = claims(json!({"dept": "team-b"}));
        let id = apply_rules(
            &rules,
            "https://idp",
            "n".into(),
            vec!["oidc:dev".into()],
            &c,
            9,
        )
        .unwrap();
        let ws: Vec<String> = id.workspaces.iter().map(|w| w.to_string()).collect();
        assert_eq!(ws, ["team-a/ann", "shared/tools", "team-b/x"]);
        assert_eq!(id.kube_groups, ["kubegate:dev", "k:ann"]);
        assert!(id.may_start_sessions);
        assert_eq!(
            id.credential,
            Credential::Oidc {
                issuer: "https://idp".into(),
                groups: vec!["oidc:dev".into()],
                expires_unix: 9
            }
        );
        // A claim holding a '/' or an invalid project gives no workspace.
        let c = claims(json!({"sub": "x/y", "dept": "Not_A_Label"}));
        let id = apply_rules(
            &rules,
            "https://idp",
            "n".into(),
            vec!["oidc:dev".into()],
            &c,
            9,
        )
        .unwrap();
        let ws: Vec<String> = id.workspaces.iter().map(|w| w.to_string()).collect();
        assert_eq!(ws, ["shared/tools"]);
        let e = apply_rules(&rules, "https://idp", "n".into(), vec![], &c, 9).unwrap_err();
        assert_eq!(e.code, Code::NoMatchingRule);
    }
}
