//! Bearer tokens and their digests, for the whole crate: random tokens
//! (32 bytes from the thread's CSPRNG, as 64 lower-case hex digits), the
//! SHA-256 digest a configuration stores instead of a token
//! (`token_sha256`), and the constant-time comparison of digests.
//!
//! In scope: making and comparing secrets. Out of scope: where a token
//! travels (`server::auth`, the agent, the sim) and never logging one
//! (each caller's rule).

use rand::Rng;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// A token's digest: SHA-256 of its bytes.
pub type TokenDigest = [u8; 32];

/// Bytes of randomness in a token from [`random_hex`] (256 bits: nobody
/// guesses it, and its hex form fits a header or a kubeconfig).
pub const TOKEN_BYTES: usize = 32;

/// A fresh random token: [`TOKEN_BYTES`] random bytes as lower-case hex.
pub fn random_hex() -> String {
    let bytes: [u8; TOKEN_BYTES] = rand::rng().random();
    hex(&bytes)
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The SHA-256 digest of `token`.
pub fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

/// The digest of `token` as 64 lower-case hex digits (what `token_sha256`
/// holds).
pub fn digest_hex(token: &str) -> String {
    hex(&digest(token))
}

/// A digest from its 64 hex digits (either case); `None` for anything else.
pub fn decode_digest(s: &str) -> Option<TokenDigest> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let hi = (pair[0] as char).to_digit(16)?;
        let lo = (pair[1] as char).to_digit(16)?;
        out[i] = u8::try_from(hi * 16 + lo).ok()?;
    }
    Some(out)
}

/// Whether two digests are equal, in time that does not depend on where
/// they differ.
pub fn same_digest(a: &TokenDigest, b: &TokenDigest) -> bool {
    bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex() {
        let a = random_hex();
        assert_eq!(a.len(), 64);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(a, random_hex());
    }

    #[test]
    fn the_demo_digest_is_the_demo_token() {
        assert_eq!(
            digest_hex("kubegate-demo-token"),
            "d53fa4ceb5e3b6f776103045182f6b4fbdfdea415d83039a16017381c567f997"
        );
    }

    #[test]
    fn hex_digests_decode_strictly() {
        assert!(decode_digest(&"ab".repeat(32)).is_some());
        assert!(decode_digest(&"AB".repeat(32)).is_some());
        assert!(decode_digest(&"ab".repeat(31)).is_none());
        assert!(decode_digest(&"zz".repeat(32)).is_none());
        let d = digest("t");
        assert_eq!(decode_digest(&digest_hex("t")), Some(d));
    }

    #[test]
    fn digests_compare_whole() {
        let a = digest("a");
        assert!(same_digest(&a, &digest("a")));
        assert!(!same_digest(&a, &digest("b")));
    }
}
