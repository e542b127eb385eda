//! Bearer-token authentication (docs/api.md#authentication): tokens are compared as
//! SHA-256 digests in constant time against every configured principal (no
//! early exit, so timing tells nothing about which digest came close), taken
//! from `Authorization: Bearer T` or, on a WebSocket, from the subprotocol
//! entry `base64url.bearer.authorization.kubegate.dev.<b64url T>`. A token
//! never reaches a log line or an error message. The digests and their
//! comparison are [`crate::token`]'s; the caller it finds is an
//! [`Identity`] (the API's type).
//!
//! A token that is no static principal's and is shaped like a JWT goes to
//! OIDC verification when `[oidc]` has issuers ([`crate::auth::Oidc`]):
//! static tokens are always checked first, against all of them.

use crate::api::{ApiError, Credential, Identity};
use crate::auth::{looks_like_jwt, Oidc};
use crate::config::Principal;
use crate::exec::frames::token_from_protocol;
use crate::http::Request;
use crate::token::{decode_digest, digest, same_digest, TokenDigest};
use std::sync::Arc;

/// The principals of the configuration, by token digest, and its OIDC
/// verifier (when `[oidc]` has issuers).
#[derive(Debug, Default)]
pub struct Principals {
    entries: Vec<(TokenDigest, Arc<Identity>)>,
    oidc: Option<Arc<Oidc>>,
}

impl Principals {
    /// From validated configuration (digests are 64 hex digits there; an
    /// entry that is not is skipped: it can match nothing).
    pub fn new(config: &[Principal]) -> Principals {
        let entries = config
            .iter()
            .filter_map(|p| {
                let d = decode_digest(&p.token_sha256)?;
                Some((
                    d,
                    Arc::new(Identity {
                        name: p.name.clone(),
                        workspaces: p.workspaces.clone(),
                        may_start_sessions: p.may_start_sessions,
                        kube_groups: p.kube_groups.clone(),
                        credential: Credential::Static,
                    }),
                ))
            })
            .collect();
        Principals {
            entries,
            oidc: None,
        }
    }

    /// The static principals and an OIDC verifier.
    pub fn with_oidc(config: &[Principal], oidc: Option<Arc<Oidc>>) -> Principals {
        Principals {
            oidc,
            ..Principals::new(config)
        }
    }

    /// The OIDC verifier, when `[oidc]` has issuers.
    pub fn oidc(&self) -> Option<&Arc<Oidc>> {
        self.oidc.as_ref()
    }

    /// The caller a token names: a static principal (checked first, in
    /// constant time against all), else a verified OIDC identity when the
    /// token is JWT-shaped and issuers are configured. `Err(None)`: not a
    /// valid token (the caller's generic 401); `Err(Some(e))`: an OIDC
    /// refusal with its code. Neither the token nor a claim is logged.
    pub fn identify(&self, token: &str) -> Result<Arc<Identity>, Option<ApiError>> {
        if let Some(who) = self.authenticate(token) {
            return Ok(who);
        }
        match &self.oidc {
            Some(o) if looks_like_jwt(token) => o.verify(token).map(Arc::new).map_err(|e| {
                log::debug!("OIDC token refused: {}", e.code);
                Some(e)
            }),
            _ => Err(None),
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The principal whose digest matches `token`'s, comparing against all.
    pub fn authenticate(&self, token: &str) -> Option<Arc<Identity>> {
        let digest = digest(token);
        let mut found = None;
        for (d, who) in &self.entries {
            if same_digest(d, &digest) {
                found = Some(who.clone());
            }
        }
        found
    }
}

/// The token a request carries: the `Authorization: Bearer` header, else
/// (WebSocket upgrades only) the token subprotocol entry.
pub fn request_token(req: &Request) -> Option<String> {
    if let Some(t) = req.bearer_token() {
        return Some(t.to_string());
    }
    if req.is_websocket_upgrade() {
        return req
            .websocket_protocols()
            .iter()
            .find_map(|p| token_from_protocol(p));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::api::Workspace;

    fn principal(name: &str, token: &str, ws: &[&str]) -> Principal {
        Principal {
            name: name.into(),
            token_sha256: crate::token::digest_hex(token),
            workspaces: ws.iter().map(|w| Workspace::parse(w).unwrap()).collect(),
            may_start_sessions: false,
            kube_groups: vec![],
        }
    }

    #[test]
    fn tokens_match_their_principal_only() {
        let ps = Principals::new(&[
            principal("a", "token-a", &["p/one"]),
            principal("b", "token-b", &["p/two"]),
        ]);
        assert_eq!(ps.len(), 2);
        assert_eq!(ps.authenticate("token-a").unwrap().name, "a");
        assert_eq!(ps.authenticate("token-b").unwrap().name, "b");
        assert!(ps.authenticate("token-c").is_none());
        assert!(ps.authenticate("").is_none());
        assert!(ps.authenticate("token-a ").is_none());
        let a = ps.authenticate("token-a").unwrap();
        assert!(a.holds("p", "one"));
        assert!(!a.holds("p", "two"));
    }

    #[test]
    fn the_demo_digest_is_the_demo_token() {
        let d = "d53fa4ceb5e3b6f776103045182f6b4fbdfdea415d83039a16017381c567f997";
        let ps = Principals::new(&[Principal {
            name: "demo".into(),
            token_sha256: d.into(),
            workspaces: vec![],
            may_start_sessions: true,
            kube_groups: vec![],
        }]);
        assert!(ps.authenticate("kubegate-demo-token").is_some());
    }
}
