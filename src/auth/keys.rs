//! An issuer's signing keys, read from its JWK set, and the one key a
//! token may be verified with. The algorithm is the key's: its `alg`, or,
//! when it has none, the one its type implies (RSA: RS256, the OIDC
//! default; EC P-256: ES256; P-384: ES384; Ed25519: EdDSA). A token whose
//! header names another algorithm is refused, never tried: the header is
//! the attacker's, the key set the issuer's. Symmetric (`oct`) keys,
//! encryption keys (`use: enc`) and keys this build cannot use are left
//! out.

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::checks::Header;

/// Most keys kept of one set.
pub const MAX_KEYS: usize = 32;

/// A usable verification key.
#[derive(Clone)]
pub struct Key {
    pub kid: Option<String>,
    pub alg: Algorithm,
    pub key: DecodingKey,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

/// The signature algorithm a JWK is for, when it is a public signing key.
fn algorithm_of(jwk: &Jwk) -> Option<Algorithm> {
    if matches!(jwk.common.public_key_use, Some(PublicKeyUse::Encryption)) {
        return None;
    }
    let implied = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => Algorithm::RS256,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => Algorithm::ES256,
            EllipticCurve::P384 => Algorithm::ES384,
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            EllipticCurve::Ed25519 => Algorithm::EdDSA,
            _ => return None,
        },
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let Some(named) = jwk.common.key_algorithm else {
        return Some(implied);
    };
    let alg = match named {
        KeyAlgorithm::RS256 => Algorithm::RS256,
        KeyAlgorithm::RS384 => Algorithm::RS384,
        KeyAlgorithm::RS512 => Algorithm::RS512,
        KeyAlgorithm::PS256 => Algorithm::PS256,
        KeyAlgorithm::PS384 => Algorithm::PS384,
        KeyAlgorithm::PS512 => Algorithm::PS512,
        KeyAlgorithm::ES256 => Algorithm::ES256,
        KeyAlgorithm::ES384 => Algorithm::ES384,
        KeyAlgorithm::EdDSA => Algorithm::EdDSA,
        _ => return None,
    };
    // The named algorithm must fit the key's type (and an EC key's curve).
    (family(alg) == family(implied) && (family(implied) != Family::Ec || alg == implied))
        .then_some(alg)
}

/// An algorithm's family (jsonwebtoken keeps its own `family()` private).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    Hmac,
    Rsa,
    Ec,
    Ed,
}

fn family(a: Algorithm) -> Family {
    match a {
        Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512 => Family::Hmac,
        Algorithm::ES256 | Algorithm::ES384 => Family::Ec,
        Algorithm::EdDSA => Family::Ed,
        Algorithm::RS256
        | Algorithm::RS384
        | Algorithm::RS512
        | Algorithm::PS256
        | Algorithm::PS384
        | Algorithm::PS512 => Family::Rsa,
    }
}

/// The usable keys of a JWK set document (`{"keys": [...]}`); a key this
/// build cannot use is skipped, not an error. `Err` when the document is
/// not a key set.
pub fn parse_jwks(doc: &Value) -> Result<Vec<Key>, String> {
    let Some(keys) = doc.get("keys").and_then(Value::as_array) else {
        return Err("the JWK set has no \"keys\" array".into());
    };
    let mut out = Vec::new();
    for k in keys {
        if out.len() == MAX_KEYS {
            break;
        }
        let Ok(jwk) = serde_json::from_value::<Jwk>(k.clone()) else {
            continue;
        };
        let Some(alg) = algorithm_of(&jwk) else {
            continue;
        };
        let Ok(key) = DecodingKey::from_jwk(&jwk) else {
            continue;
        };
        out.push(Key {
            kid: jwk.common.key_id.clone(),
            alg,
            key,
        });
    }
    Ok(out)
}

/// The header's algorithm, when it is one this build verifies.
pub fn header_algorithm(h: &Header) -> Option<Algorithm> {
    let a: Algorithm = h.alg.parse().ok()?;
    (family(a) != Family::Hmac).then_some(a)
}

/// What a token's header finds among the keys.
#[derive(Debug)]
pub enum Pick<'k> {
    /// The keys to try (one with a `kid`; without one, every key of the
    /// header's algorithm).
    Keys(Vec<&'k Key>),
    /// A key has the token's `kid` but another algorithm, or no key is of
    /// the header's algorithm at all.
    WrongAlgorithm,
    /// No key with that `kid` (or none at all): the set may be stale.
    Unknown,
}

/// The keys a token may be verified with.
pub fn pick<'k>(keys: &'k [Key], h: &Header) -> Pick<'k> {
    let alg = header_algorithm(h);
    match &h.kid {
        Some(kid) => match keys.iter().find(|k| k.kid.as_deref() == Some(kid.as_str())) {
            Some(k) if Some(k.alg) == alg => Pick::Keys(vec![k]),
            Some(_) => Pick::WrongAlgorithm,
            None => Pick::Unknown,
        },
        None => {
            if keys.is_empty() {
                return Pick::Unknown;
            }
            let same: Vec<&Key> = keys.iter().filter(|k| Some(k.alg) == alg).collect();
            if same.is_empty() {
                Pick::WrongAlgorithm
            } else {
                Pick::Keys(same)
            }
        }
    }
}

/// Whether `signature` (base64url) signs `input` under `key` with the
/// key's own algorithm. Never with another: jsonwebtoken's EC verifier
/// reaches `unreachable!()` when handed an RSA key, and [`parse_jwks`]
/// keeps only algorithms that fit their key's type.
pub fn verifies(key: &Key, input: &str, signature: &str) -> bool {
    jsonwebtoken::crypto::verify(signature, input.as_bytes(), &key.key, key.alg).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A 2048-bit RSA modulus is long; any valid base64url works for parsing.
    const N: &str = "sXchDaQebHnPiGvyDOAT4saGEUetSyo9MKLOoWFsueri23bOdgWp4Dy1WlUzewbgBHod5pcM9H95GQRV3JDXboIRROSBigeC5yjU1hGzHHyXss8UDprecbAYxknTcQkhslANGRUZmdTOQ5qTRsLAt6BTYuyvVRdhS8exSZEy_c4gs_7svlJJQ4H9_NxsiIoLwAEk7-Q3UXERGYw_75IDrGA84-lA_-Ct4eTlXHBIY2EaV7t7LjJaynVJCpkv4LKjTTAumiGUIuQhrNhZLuF_RJLqHpM2kgWFLU7-VTdL1VbC2tejvcI2BlMkEpk1BzBZI0KQB0GaDWFLN-aEAw3vRw";

    fn kid(k: &str, alg: &str) -> Header {
        Header {
            alg: alg.into(),
            kid: (!k.is_empty()).then(|| k.to_string()),
        }
    }

    #[test]
    fn algorithms_come_from_the_keys() {
        let set = json!({"keys": [
            {"kty": "RSA", "kid": "r1", "n": N, "e": "AQAB"},
            {"kty": "RSA", "kid": "p1", "alg": "PS256", "n": N, "e": "AQAB"},
            {"kty": "RSA", "kid": "enc", "use": "enc", "n": N, "e": "AQAB"},
            {"kty": "oct", "kid": "h1", "k": "c2VjcmV0"},
            {"kty": "RSA", "kid": "bad", "alg": "ES256", "n": N, "e": "AQAB"},
            {"kty": "nonsense"},
        ]});
        let keys = parse_jwks(&set).unwrap();
        let kids: Vec<_> = keys
            .iter()
            .map(|k| (k.kid.clone().unwrap(), k.alg))
            .collect();
        assert_eq!(
            kids,
            [
                ("r1".to_string(), Algorithm::RS256),
                ("p1".to_string(), Algorithm::PS256)
            ]
        );
        assert!(matches!(pick(&keys, &kid("r1", "RS256")), Pick::Keys(v) if v.len() == 1));
        assert!(matches!(
            pick(&keys, &kid("r1", "PS256")),
            Pick::WrongAlgorithm
        ));
        assert!(matches!(
            pick(&keys, &kid("r1", "HS256")),
            Pick::WrongAlgorithm
        ));
        assert!(matches!(pick(&keys, &kid("h1", "HS256")), Pick::Unknown));
        assert!(matches!(pick(&keys, &kid("r9", "RS256")), Pick::Unknown));
        assert!(matches!(pick(&keys, &kid("", "RS256")), Pick::Keys(v) if v.len() == 1));
        assert!(matches!(
            pick(&keys, &kid("", "ES256")),
            Pick::WrongAlgorithm
        ));
        assert!(matches!(pick(&[], &kid("", "RS256")), Pick::Unknown));
        assert!(parse_jwks(&json!({"nokeys": []})).is_err());
    }
}
