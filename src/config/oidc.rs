//! `[oidc]`: OpenID Connect principals (docs/config.md#oidc-single-sign-on),
//! modelled on Kubernetes' structured authentication configuration
//! (`[[oidc.issuer]]` with `claim_validation_rules` and `claim_mappings`),
//! plus `[[oidc.rule]]`, which maps a verified identity to what it may do.
//! The types and their checks at load; the verification itself is
//! `crate::auth`'s.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::validate::{check_kube_group, err, resolve};
use super::{KeyError, Principal};
use crate::api::Workspace;

/// Names and groups starting with this are refused, always (Kubernetes
/// reserves them: a mapped `system:masters` would be cluster-admin under
/// impersonation).
pub const SYSTEM_PREFIX: &str = "system:";
/// Default `leeway_secs`.
pub const DEFAULT_LEEWAY_SECS: u64 = 60;
/// Default `max_lifetime_secs` (24 h).
pub const DEFAULT_MAX_LIFETIME_SECS: u64 = 86_400;
/// Largest `leeway_secs` (5 min): clock skew, not a grace period.
pub const MAX_LEEWAY_SECS: u64 = 300;

/// `[oidc]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OidcSection {
    /// The issuer `kubegate login` uses (one of `issuer`'s urls).
    pub login_issuer: Option<String>,
    /// The client id `kubegate login` uses (one of that issuer's audiences).
    pub login_client_id: Option<String>,
    /// The scopes `kubegate login` asks for.
    pub login_scopes: Vec<String>,
    #[serde(rename = "issuer")]
    pub issuers: Vec<IssuerConfig>,
    #[serde(rename = "rule")]
    pub rules: Vec<RuleConfig>,
}

impl Default for OidcSection {
    fn default() -> Self {
        OidcSection {
            login_issuer: None,
            login_client_id: None,
            login_scopes: ["openid", "offline_access", "profile", "email", "groups"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            issuers: Vec::new(),
            rules: Vec::new(),
        }
    }
}

/// `[[oidc.issuer]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer identifier: tokens' `iss` must equal it exactly.
    pub url: String,
    /// Accepted `aud` values (any one of them).
    pub audiences: Vec<String>,
    /// Where the discovery document is, when not under `url`.
    #[serde(default)]
    pub discovery_url: Option<String>,
    /// PEM roots to trust for discovery and JWKS (absolute after load).
    #[serde(default)]
    pub certificate_authority: Option<PathBuf>,
    #[serde(default = "default_leeway")]
    pub leeway_secs: u64,
    #[serde(default = "default_max_lifetime")]
    pub max_lifetime_secs: u64,
    #[serde(default)]
    pub claim_validation_rules: Vec<ClaimValidationRule>,
    pub claim_mappings: ClaimMappings,
}

fn default_leeway() -> u64 {
    DEFAULT_LEEWAY_SECS
}
fn default_max_lifetime() -> u64 {
    DEFAULT_MAX_LIFETIME_SECS
}

impl IssuerConfig {
    /// The discovery document's URL: `discovery_url`, else
    /// `{url}/.well-known/openid-configuration`.
    pub fn discovery(&self) -> String {
        match &self.discovery_url {
            Some(d) => d.clone(),
            None => format!(
                "{}/.well-known/openid-configuration",
                self.url.trim_end_matches('/')
            ),
        }
    }
}

/// `[[oidc.issuer.claim_validation_rules]]`: the claim must hold this
/// value (a string claim equal to it, or an array of strings holding it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimValidationRule {
    pub claim: String,
    pub required_value: String,
}

/// `[oidc.issuer.claim_mappings]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimMappings {
    pub username: ClaimMapping,
    #[serde(default)]
    pub groups: Option<ClaimMapping>,
}

/// A claim and the prefix put before its value. The prefix is required
/// (an explicit `""` for none), as Kubernetes requires it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimMapping {
    pub claim: String,
    pub prefix: Option<String>,
}

impl ClaimMapping {
    /// The prefix (validated present at load).
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or("")
    }
}

/// `[[oidc.rule]]`: a verified identity that matches (`group`, and/or
/// `claim` = `value`; all that are given; only tokens of `issuer` when
/// given) gets these workspaces, `may_start_sessions` and Kubernetes
/// groups. An identity gets the union of every rule it matches.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    #[serde(default)]
    pub issuer: Option<String>,
    /// A mapped group (prefix included).
    #[serde(default)]
    pub group: Option<String>,
    #[serde(default)]
    pub claim: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
    /// `project/uid`, literal or with `{claim:NAME}` placeholders.
    #[serde(default)]
    pub workspaces: Vec<String>,
    #[serde(default)]
    pub may_start_sessions: bool,
    #[serde(default)]
    pub kube_groups: Vec<String>,
}

/// One piece of a workspace template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    Literal(String),
    Claim(String),
}

/// Splits a workspace template into literals and `{claim:NAME}`
/// placeholders; any other brace is an error.
pub fn parse_template(t: &str) -> Result<Vec<TemplatePart>, String> {
    let mut parts = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(format!("{t:?}: a '}}' without its '{{'"));
        }
        if open > 0 {
            parts.push(TemplatePart::Literal(rest[..open].to_string()));
        }
        let after = &rest[open + 1..];
        let Some(close) = after.find('}') else {
            return Err(format!("{t:?}: a '{{' without its '}}'"));
        };
        let inner = &after[..close];
        let Some(name) = inner.strip_prefix("claim:") else {
            return Err(format!(
                "{t:?}: only {{claim:NAME}} placeholders are allowed, not {{{inner}}}"
            ));
        };
        if name.is_empty() || name.contains(['{', ' ']) {
            return Err(format!("{t:?}: {{claim:NAME}} needs a claim name"));
        }
        parts.push(TemplatePart::Claim(name.to_string()));
        rest = &after[close + 1..];
    }
    if !rest.is_empty() {
        parts.push(TemplatePart::Literal(rest.to_string()));
    }
    Ok(parts)
}

/// What is wrong with an issuer, discovery or JWKS URL, if anything: it
/// must be `https://`, or `http://` to a loopback host (tests); no query,
/// fragment or user info.
pub fn url_problem(u: &str) -> Option<String> {
    let rest = if let Some(r) = u.strip_prefix("https://") {
        r
    } else if let Some(r) = u.strip_prefix("http://") {
        let host = r.split('/').next().unwrap_or("");
        let host = host
            .rsplit_once(':')
            .filter(|(h, p)| !h.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
            .map_or(host, |(h, _)| h);
        let loopback = host == "localhost"
            || host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return Some(format!(
                "{u:?} must be https (plain http only to a loopback address, for tests)"
            ));
        }
        r
    } else {
        return Some(format!("{u:?} must be an https:// URL"));
    };
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty()
        || rest.contains(['?', '#', '@'])
        || u.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        return Some(format!(
            "{u:?} is not a URL with a host and no query, fragment or user info"
        ));
    }
    None
}

/// [`url_problem`] as a key's error.
fn check_url(key: &str, u: &str) -> Result<(), KeyError> {
    match url_problem(u) {
        Some(m) => err(key, m),
        None => Ok(()),
    }
}

/// A name or group a mapping or rule gives: printable, at most 128
/// characters (the static principals' rule).
fn printable(s: &str) -> bool {
    !s.trim().is_empty() && s.chars().count() <= 128 && !s.chars().any(char::is_control)
}

/// All of `[oidc]`, against the static principals (a mapped name must never
/// be able to equal one of theirs).
pub(super) fn check_oidc(
    o: &mut OidcSection,
    principals: &[Principal],
    base: &Path,
) -> Result<(), KeyError> {
    let mut urls = HashSet::new();
    for (i, is) in o.issuers.iter_mut().enumerate() {
        let k = |f: &str| format!("oidc.issuer[{i}].{f}");
        check_url(&k("url"), &is.url)?;
        if !urls.insert(is.url.clone()) {
            return err(&k("url"), format!("{:?} is configured twice", is.url));
        }
        if let Some(d) = &is.discovery_url {
            check_url(&k("discovery_url"), d)?;
        }
        if is.audiences.is_empty() {
            return err(&k("audiences"), "needs at least one audience".into());
        }
        for (j, a) in is.audiences.iter().enumerate() {
            if !printable(a) {
                return err(
                    &k(&format!("audiences[{j}]")),
                    "must be 1 to 128 printable characters".into(),
                );
            }
        }
        if let Some(ca) = &mut is.certificate_authority {
            resolve(base, ca);
        }
        if is.leeway_secs > MAX_LEEWAY_SECS {
            return err(
                &k("leeway_secs"),
                format!("at most {MAX_LEEWAY_SECS} (clock skew, not a grace period)"),
            );
        }
        if is.max_lifetime_secs == 0 {
            return err(&k("max_lifetime_secs"), "must be a positive integer".into());
        }
        for (j, r) in is.claim_validation_rules.iter().enumerate() {
            if r.claim.is_empty() {
                return err(
                    &k(&format!("claim_validation_rules[{j}].claim")),
                    "needs a claim name".into(),
                );
            }
        }
        let u = &is.claim_mappings.username;
        if u.claim.is_empty() {
            return err(
                &k("claim_mappings.username.claim"),
                "needs a claim name".into(),
            );
        }
        let Some(prefix) = &u.prefix else {
            return err(
                &k("claim_mappings.username.prefix"),
                "is required: a prefix such as \"oidc:\", or \"\" for none (written out, so no one maps names without meaning to)".into(),
            );
        };
        if prefix.starts_with(SYSTEM_PREFIX) {
            return err(
                &k("claim_mappings.username.prefix"),
                format!("{prefix:?}: names starting with {SYSTEM_PREFIX:?} are always refused"),
            );
        }
        // A mapped name is prefix + the claim's value, which the issuer
        // chooses: it can equal a static principal's name exactly when
        // that name starts with the prefix.
        if let Some(p) = principals
            .iter()
            .find(|p| p.name.starts_with(prefix.as_str()))
        {
            return err(
                &k("claim_mappings.username.prefix"),
                format!(
                    "{prefix:?}: a mapped name could equal the static principal {:?} and inherit its sessions; choose a prefix no static principal's name starts with",
                    p.name
                ),
            );
        }
        if let Some(g) = &is.claim_mappings.groups {
            if g.claim.is_empty() {
                return err(
                    &k("claim_mappings.groups.claim"),
                    "needs a claim name".into(),
                );
            }
            match &g.prefix {
                None => {
                    return err(
                        &k("claim_mappings.groups.prefix"),
                        "is required: a prefix such as \"oidc:\", or \"\" for none".into(),
                    )
                }
                Some(p) if p.starts_with(SYSTEM_PREFIX) => {
                    return err(
                        &k("claim_mappings.groups.prefix"),
                        format!("{p:?}: groups starting with {SYSTEM_PREFIX:?} are always refused"),
                    )
                }
                Some(_) => {}
            }
        }
    }
    check_login(o)?;
    check_rules(o)
}

/// `login_issuer`, `login_client_id`, `login_scopes`.
fn check_login(o: &OidcSection) -> Result<(), KeyError> {
    match (&o.login_issuer, &o.login_client_id) {
        (None, None) => {}
        (None, Some(_)) => {
            return err("oidc.login_client_id", "only with oidc.login_issuer".into())
        }
        (Some(_), None) => {
            return err(
                "oidc.login_client_id",
                "is required with oidc.login_issuer".into(),
            )
        }
        (Some(iss), Some(id)) => {
            let Some(is) = o.issuers.iter().find(|is| &is.url == iss) else {
                return err(
                    "oidc.login_issuer",
                    format!("{iss:?} is not the url of any [[oidc.issuer]]"),
                );
            };
            if !is.audiences.contains(id) {
                return err(
                    "oidc.login_client_id",
                    format!("{id:?} is not among the audiences of {iss:?}: its ID tokens would be refused"),
                );
            }
        }
    }
    if o.login_issuer.is_some() && !o.login_scopes.iter().any(|s| s == "openid") {
        return err(
            "oidc.login_scopes",
            "must include \"openid\" (no ID token without it)".into(),
        );
    }
    for (j, s) in o.login_scopes.iter().enumerate() {
        if s.is_empty() || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return err(
                &format!("oidc.login_scopes[{j}]"),
                "must be a non-empty word".into(),
            );
        }
    }
    Ok(())
}

/// Every `[[oidc.rule]]`.
fn check_rules(o: &OidcSection) -> Result<(), KeyError> {
    if !o.rules.is_empty() && o.issuers.is_empty() {
        return err("oidc.rule", "rules without any [[oidc.issuer]]".into());
    }
    for (i, r) in o.rules.iter().enumerate() {
        let k = |f: &str| format!("oidc.rule[{i}].{f}");
        if let Some(iss) = &r.issuer {
            if !o.issuers.iter().any(|is| &is.url == iss) {
                return err(
                    &k("issuer"),
                    format!("{iss:?} is not the url of any [[oidc.issuer]]"),
                );
            }
        }
        match (&r.claim, &r.value) {
            (Some(c), Some(_)) if !c.is_empty() => {}
            (Some(_), Some(_)) => return err(&k("claim"), "needs a claim name".into()),
            (Some(_), None) => return err(&k("value"), "is required with claim".into()),
            (None, Some(_)) => return err(&k("claim"), "is required with value".into()),
            (None, None) => {
                if r.group.is_none() {
                    return err(
                        &format!("oidc.rule[{i}]"),
                        "matches nothing: give group, or claim and value".into(),
                    );
                }
            }
        }
        if let Some(g) = &r.group {
            if !printable(g) {
                return err(&k("group"), "must be 1 to 128 printable characters".into());
            }
        }
        for (j, w) in r.workspaces.iter().enumerate() {
            let key = k(&format!("workspaces[{j}]"));
            let parts = parse_template(w).map_err(|m| KeyError {
                key: key.clone(),
                message: m,
            })?;
            if parts.iter().all(|p| matches!(p, TemplatePart::Literal(_))) {
                Workspace::parse(w).map_err(|e| KeyError {
                    key: key.clone(),
                    message: e.to_string(),
                })?;
            } else if !parts
                .iter()
                .any(|p| matches!(p, TemplatePart::Literal(l) if l.contains('/')))
            {
                return err(
                    &key,
                    format!("{w:?}: a template needs a literal '/' between project and uid"),
                );
            }
        }
        for (j, g) in r.kube_groups.iter().enumerate() {
            // The static principals' rule: never system:, sendable as a
            // header unchanged.
            check_kube_group(&k(&format!("kube_groups[{j}]")), g)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    const ISSUER: &str = r#"
[[oidc.issuer]]
url = "https://idp.example.com"
audiences = ["kubegate"]
[oidc.issuer.claim_mappings.username]
claim = "email"
prefix = "oidc:"
[oidc.issuer.claim_mappings.groups]
claim = "groups"
prefix = "oidc:"
"#;

    fn parse(extra: &str) -> Result<Config, KeyError> {
        let text = format!("[cluster]\nmode = \"sim\"\n{extra}");
        Config::parse(&text, Path::new("/etc/kubegate"))
    }

    fn fails(extra: &str, key: &str, says: &str) {
        let e = parse(extra).expect_err("must fail");
        assert_eq!(e.key, key, "{e:?}");
        assert!(e.message.contains(says), "{e:?}");
    }

    #[test]
    fn a_full_section_loads_with_its_defaults() {
        let c = parse(&format!(
            "[oidc]\nlogin_issuer = \"https://idp.example.com\"\nlogin_client_id = \"kubegate\"\n{}\
             [[oidc.rule]]\ngroup = \"oidc:dev\"\nworkspaces = [\"team-a/{{claim:sub}}\", \"shared/tools\"]\n\
             kube_groups = [\"kubegate:dev\"]\n",
            ISSUER.replace(
                "audiences = [\"kubegate\"]\n",
                "audiences = [\"kubegate\"]\ncertificate_authority = \"ca.pem\"\n"
            )
        ))
        .unwrap();
        let is = &c.oidc.issuers[0];
        assert_eq!(
            is.certificate_authority.as_deref(),
            Some(Path::new("/etc/kubegate/ca.pem"))
        );
        assert_eq!(is.leeway_secs, DEFAULT_LEEWAY_SECS);
        assert_eq!(is.max_lifetime_secs, DEFAULT_MAX_LIFETIME_SECS);
        assert_eq!(
            is.discovery(),
            "https://idp.example.com/.well-known/openid-configuration"
        );
        assert_eq!(c.oidc.login_scopes[0], "openid");
        assert_eq!(c.oidc.rules.len(), 1);
        assert!(parse("").unwrap().oidc.issuers.is_empty());
    }

    #[test]
    fn issuer_urls_are_https_or_loopback_http() {
        let with = |u: &str| ISSUER.replace("https://idp.example.com", u);
        fails(
            &with("http://idp.example.com"),
            "oidc.issuer[0].url",
            "https",
        );
        fails(&with("ftp://x"), "oidc.issuer[0].url", "https");
        fails(&with("https://"), "oidc.issuer[0].url", "host");
        fails(&with("https://a?b=c"), "oidc.issuer[0].url", "query");
        assert!(parse(&with("http://127.0.0.1:8080")).is_ok());
        assert!(parse(&with("http://[::1]:8080/x")).is_ok());
        assert!(parse(&with("http://localhost")).is_ok());
        let twice = format!("{ISSUER}{ISSUER}");
        fails(&twice, "oidc.issuer[1].url", "twice");
    }

    #[test]
    fn prefixes_are_required_and_never_system() {
        fails(
            &ISSUER.replacen("prefix = \"oidc:\"\n", "", 1),
            "oidc.issuer[0].claim_mappings.username.prefix",
            "required",
        );
        fails(
            &ISSUER.replacen("prefix = \"oidc:\"", "prefix = \"system:x\"", 1),
            "oidc.issuer[0].claim_mappings.username.prefix",
            "system:",
        );
        let groups_last = ISSUER.rfind("prefix").unwrap();
        let mut no_group_prefix = ISSUER.to_string();
        no_group_prefix.replace_range(groups_last.., "\n");
        fails(
            &no_group_prefix,
            "oidc.issuer[0].claim_mappings.groups.prefix",
            "required",
        );
        assert!(parse(&ISSUER.replace("\"oidc:\"", "\"\"")).is_ok());
    }

    #[test]
    fn a_prefix_that_could_map_onto_a_static_principal_is_refused() {
        let p = |name: &str| {
            format!(
                "[[principal]]\nname = \"{name}\"\ntoken_sha256 = \"{}\"\n",
                "ab".repeat(32)
            )
        };
        fails(
            &format!("{}{}", p("ci"), ISSUER.replace("\"oidc:\"", "\"\"")),
            "oidc.issuer[0].claim_mappings.username.prefix",
            "\"ci\"",
        );
        fails(
            &format!("{}{ISSUER}", p("oidc:bot")),
            "oidc.issuer[0].claim_mappings.username.prefix",
            "oidc:bot",
        );
        assert!(parse(&format!("{}{ISSUER}", p("ci"))).is_ok());
    }

    #[test]
    fn login_settings_must_fit_an_issuer() {
        fails(
            &format!("[oidc]\nlogin_issuer = \"https://other\"\nlogin_client_id = \"kubegate\"\n{ISSUER}"),
            "oidc.login_issuer",
            "not the url",
        );
        fails(
            &format!("[oidc]\nlogin_issuer = \"https://idp.example.com\"\n{ISSUER}"),
            "oidc.login_client_id",
            "required",
        );
        fails(
            &format!("[oidc]\nlogin_client_id = \"kubegate\"\n{ISSUER}"),
            "oidc.login_client_id",
            "only with",
        );
        fails(
            &format!("[oidc]\nlogin_issuer = \"https://idp.example.com\"\nlogin_client_id = \"cli\"\n{ISSUER}"),
            "oidc.login_client_id",
            "audiences",
        );
        fails(
            &format!("[oidc]\nlogin_issuer = \"https://idp.example.com\"\nlogin_client_id = \"kubegate\"\nlogin_scopes = [\"email\"]\n{ISSUER}"),
            "oidc.login_scopes",
            "openid",
        );
    }

    #[test]
    fn rules_are_checked() {
        let rule = |body: &str| format!("{ISSUER}[[oidc.rule]]\n{body}\n");
        fails(
            &rule("workspaces = [\"a/b\"]"),
            "oidc.rule[0]",
            "matches nothing",
        );
        fails(&rule("claim = \"sub\""), "oidc.rule[0].value", "required");
        fails(&rule("value = \"x\""), "oidc.rule[0].claim", "required");
        fails(
            &rule("group = \"g\"\nissuer = \"https://nope\""),
            "oidc.rule[0].issuer",
            "not the url",
        );
        fails(
            &rule("group = \"g\"\nkube_groups = [\"system:masters\"]"),
            "oidc.rule[0].kube_groups[0]",
            "system:",
        );
        fails(
            &rule("group = \"g\"\nworkspaces = [\"a/{env:HOME}\"]"),
            "oidc.rule[0].workspaces[0]",
            "only {claim:NAME}",
        );
        fails(
            &rule("group = \"g\"\nworkspaces = [\"a/{claim:sub\"]"),
            "oidc.rule[0].workspaces[0]",
            "without",
        );
        fails(
            &rule("group = \"g\"\nworkspaces = [\"{claim:sub}\"]"),
            "oidc.rule[0].workspaces[0]",
            "'/'",
        );
        fails(
            &rule("group = \"g\"\nworkspaces = [\"Not_A_Label/x\"]"),
            "oidc.rule[0].workspaces[0]",
            "project",
        );
        fails("[[oidc.rule]]\ngroup = \"g\"\n", "oidc.rule", "without any");
        assert!(parse(&rule(
            "claim = \"sub\"\nvalue = \"ann\"\nworkspaces = [\"{claim:dept}/x\"]"
        ))
        .is_ok());
    }

    #[test]
    fn templates_split_into_literals_and_claims() {
        assert_eq!(
            parse_template("team-{claim:dept}/{claim:sub}").unwrap(),
            vec![
                TemplatePart::Literal("team-".into()),
                TemplatePart::Claim("dept".into()),
                TemplatePart::Literal("/".into()),
                TemplatePart::Claim("sub".into()),
            ]
        );
        assert!(parse_template("a/}").is_err());
        assert!(parse_template("a/{claim:}").is_err());
    }
}
