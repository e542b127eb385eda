//! Kubernetes' name rules (RFC 1123 labels and subdomains, label keys and
//! values), as the API server applies them: the daemon checks names it will
//! send before the cluster sees them, so the error names the key a person
//! wrote rather than an API server's field path.

use std::fmt;

/// Why a name breaks Kubernetes' rules: a sentence for a person, naming the
/// rule (the caller prefixes the key or field it came from).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameError(pub String);

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NameError {}

impl From<NameError> for String {
    fn from(e: NameError) -> String {
        e.0
    }
}

/// A DNS label (RFC 1123): lowercase `[a-z0-9-]`, alphanumeric at both
/// ends, at most 63 characters.
pub fn check_dns_label(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError("must not be empty".into()));
    }
    if s.len() > 63 {
        return Err(NameError("longer than 63 characters".into()));
    }
    let b = s.as_bytes();
    let ok = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if !b.iter().all(|&c| ok(c) || c == b'-') || !ok(b[0]) || !ok(b[b.len() - 1]) {
        return Err(NameError("must be a DNS label (lowercase letters, digits and '-', starting and ending with a letter or digit)".into()));
    }
    Ok(())
}

/// A DNS subdomain: dot-separated DNS labels, at most 253 characters.
pub fn check_dns_subdomain(s: &str) -> Result<(), NameError> {
    if s.len() > 253 {
        return Err(NameError("longer than 253 characters".into()));
    }
    s.split('.').try_for_each(check_dns_label)
}

/// A label value: empty, or at most 63 of `[A-Za-z0-9._-]` with
/// alphanumeric ends. (Empty is refused here: a label must say something.)
pub fn check_label_value(s: &str) -> Result<(), NameError> {
    if s.is_empty() {
        return Err(NameError("must not be empty".into()));
    }
    check_label_name(s)
}

fn check_label_name(s: &str) -> Result<(), NameError> {
    if s.len() > 63 {
        return Err(NameError(format!("{s:?} is longer than 63 characters")));
    }
    let b = s.as_bytes();
    let alnum = |c: u8| c.is_ascii_alphanumeric();
    if b.is_empty()
        || !b
            .iter()
            .all(|&c| alnum(c) || matches!(c, b'-' | b'_' | b'.'))
        || !alnum(b[0])
        || !alnum(b[b.len() - 1])
    {
        return Err(NameError(format!(
            "{s:?} is not a valid label value (letters, digits, '-', '_', '.', starting and ending with a letter or digit)"
        )));
    }
    Ok(())
}

/// A label key: optional DNS-subdomain prefix and `/`, then a name.
pub fn check_label_key(s: &str) -> Result<(), NameError> {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    if let Some(p) = prefix {
        check_dns_subdomain(p).map_err(|m| NameError(format!("{s:?}: prefix {p:?}: {m}")))?;
    }
    check_label_name(name).map_err(|m| NameError(format!("{s:?}: {m}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_kubernetes_rules() {
        assert!(check_dns_label("a").is_ok());
        assert!(check_dns_label(&"a".repeat(63)).is_ok());
        assert!(check_dns_label(&"a".repeat(64)).is_err());
        assert!(check_dns_label("a-").is_err());
        assert!(check_dns_subdomain("a.b-c.d").is_ok());
        assert!(check_dns_subdomain("a..b").is_err());
        assert!(check_label_key("kubegate.dev/workspace-uid").is_ok());
        assert!(check_label_key("plain").is_ok());
        assert!(check_label_key("/x").is_err());
    }
}
