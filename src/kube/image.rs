//! The image-reference rule kubegate applies before a reference reaches a
//! pod spec: not empty, no whitespace or control characters, at most 512
//! characters. It is deliberately loose (the registry and the kubelet check
//! the rest: a reference that passes may still fail to pull); it refuses
//! what could never be one, so the error names the key or field a person
//! wrote. Used by the daemon's config (`cluster.workspace_image`,
//! `cluster.default_app_image`) and a session's start request (`image`,
//! `apps[i].image`).

use std::fmt;

/// Longest image reference accepted, in bytes (Docker's own references
/// stay far below; it bounds what a request can put into a pod spec).
pub const MAX_IMAGE_LEN: usize = 512;

/// Why a string is not an image reference (`Display`: the message after
/// the key or field, which the caller prefixes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageError {
    Empty,
    /// Spaces, control characters, or longer than [`MAX_IMAGE_LEN`].
    Malformed(String),
}

impl fmt::Display for ImageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageError::Empty => f.write_str("must not be empty"),
            ImageError::Malformed(s) => write!(
                f,
                "{s:?} is not an image reference (no spaces, at most 512 characters)"
            ),
        }
    }
}

impl std::error::Error for ImageError {}

/// Checks `s` against the rule in the module doc.
pub fn check_image(s: &str) -> Result<(), ImageError> {
    if s.is_empty() {
        return Err(ImageError::Empty);
    }
    if s.len() > MAX_IMAGE_LEN || s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(ImageError::Malformed(s.into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references() {
        assert_eq!(check_image("node:22"), Ok(()));
        assert_eq!(check_image("reg.local:5000/a/b@sha256:00ff"), Ok(()));
        assert_eq!(check_image(&"a".repeat(512)), Ok(()));
        assert_eq!(check_image(""), Err(ImageError::Empty));
        for bad in ["a b", "a\tb", "a\u{7}", &"a".repeat(513)] {
            assert_eq!(
                check_image(bad),
                Err(ImageError::Malformed(bad.to_string())),
                "{bad:?}"
            );
        }
        assert_eq!(
            check_image("a b").unwrap_err().to_string(),
            "\"a b\" is not an image reference (no spaces, at most 512 characters)"
        );
        assert_eq!(
            check_image("").unwrap_err().to_string(),
            "must not be empty"
        );
    }
}
