//! The syntax rules on values the sim's API checks in more than one place:
//! object names (RFC 1123 labels and subdomains, RFC 1035 labels), label
//! and annotation keys and label values, port names and numbers, and the
//! data keys of ConfigMaps and Secrets. Admission applies them to objects,
//! the selector parser to label selectors.
//!
//! Each rule returns upstream's detail text (`apimachinery`'s
//! `validation.Is*` messages, without the `field: Invalid value` prefix) as
//! a [`RuleError`]; the caller wraps it in a field cause or a 400. Sans-IO,
//! no allocation on success.

use std::borrow::Cow;
use std::fmt;

/// A value a rule refuses: upstream's detail text for it, which the caller
/// puts into a field cause (422) or a selector's parse error (400)
/// unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError(Cow<'static, str>);

impl RuleError {
    /// The detail text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&'static str> for RuleError {
    fn from(s: &'static str) -> Self {
        RuleError(Cow::Borrowed(s))
    }
}

impl From<String> for RuleError {
    fn from(s: String) -> Self {
        RuleError(Cow::Owned(s))
    }
}

impl From<RuleError> for String {
    fn from(e: RuleError) -> String {
        e.0.into_owned()
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RuleError {}

// ---- names

const DNS1123_SUBDOMAIN_MSG: &str = r"a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// RFC 1123 label (`[a-z0-9]([-a-z0-9]*[a-z0-9])?`, at most 63).
pub fn check_dns1123_label(s: &str) -> Result<(), RuleError> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !is_label_chars(s) {
        return Err(DNS1123_LABEL_MSG.into());
    }
    Ok(())
}

/// RFC 1123 subdomain (dot-separated labels, at most 253).
pub fn check_dns1123_subdomain(s: &str) -> Result<(), RuleError> {
    if s.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if s.is_empty() || !s.split('.').all(is_label_chars) {
        return Err(DNS1123_SUBDOMAIN_MSG.into());
    }
    Ok(())
}

/// RFC 1035 label: like 1123 but starting with a letter (Service names).
pub fn check_dns1035_label(s: &str) -> Result<(), RuleError> {
    if s.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !is_label_chars(s) || !s.as_bytes()[0].is_ascii_lowercase() {
        return Err(DNS1035_LABEL_MSG.into());
    }
    Ok(())
}

/// IANA service name (a named port): at most 15, lowercase alphanumerics
/// and '-', at least one letter, no leading/trailing or double '-'.
pub fn check_port_name(s: &str) -> Result<(), RuleError> {
    if s.len() > 15 {
        return Err("must be no more than 15 characters".into());
    }
    let b = s.as_bytes();
    if b.is_empty()
        || !b
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
    {
        return Err(
            "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into(),
        );
    }
    if !b.iter().any(u8::is_ascii_lowercase) {
        return Err("must contain at least one letter (a-z)".into());
    }
    if s.contains("--") {
        return Err("must not contain consecutive hyphens".into());
    }
    if b[0] == b'-' || b[b.len() - 1] == b'-' {
        return Err("must not begin or end with a hyphen".into());
    }
    Ok(())
}

/// A port number: 1 to 65535.
pub fn check_port_number(n: i64) -> Result<(), RuleError> {
    if (1..=65535).contains(&n) {
        Ok(())
    } else {
        Err("must be between 1 and 65535, inclusive".into())
    }
}

// ---- label keys and values

const NAME_FMT_MSG: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`, non-empty.
fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Validates a label/annotation key (`prefix/name` qualified name); the error
/// text is upstream's (without the `key: Invalid value` prefix).
pub fn validate_label_key(key: &str) -> Result<(), RuleError> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            return Err("prefix part must be non-empty".into());
        }
        if let Err(e) = check_dns1123_subdomain(p) {
            return Err(format!("prefix part {e}").into());
        }
        if name.contains('/') {
            return Err(format!("a qualified name {NAME_FMT_MSG}").into());
        }
    }
    if name.is_empty() {
        return Err("name part must be non-empty".into());
    }
    if name.len() > 63 {
        return Err("name part must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(name) {
        return Err(NAME_FMT_MSG.into());
    }
    Ok(())
}

/// Every refusal `IsQualifiedName` gives (it does not stop at the first:
/// an empty name is both "must be non-empty" and the format's text), for
/// the fields upstream checks with `ValidateQualifiedName`.
pub fn qualified_name_errors(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let mut errs = Vec::new();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if let Err(e) = check_dns1123_subdomain(prefix) {
                errs.push(format!("prefix part {e}"));
            }
            *name
        }
        _ => {
            let regex = NAME_FMT_MSG.trim_start_matches("name part ");
            return vec![format!(
                "a qualified name {regex} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".into());
    }
    if !is_qualified_name_part(name) {
        errs.push(NAME_FMT_MSG.to_string());
    }
    errs
}

/// Validates a label value (may be empty).
pub fn validate_label_value(v: &str) -> Result<(), RuleError> {
    if v.len() > 63 {
        return Err("must be no more than 63 characters".into());
    }
    if !v.is_empty() && !is_qualified_name_part(v) {
        return Err(LABEL_VALUE_MSG.into());
    }
    Ok(())
}

// ---- configmap and secret keys

const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

/// A ConfigMap or Secret data key (`[-._a-zA-Z0-9]+`, at most 253, not
/// `.`, `..` or starting with `..`).
pub fn check_config_key(k: &str) -> Result<(), RuleError> {
    if k.len() > 253 {
        return Err("must be no more than 253 characters".into());
    }
    if k.is_empty()
        || !k
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err(CONFIG_KEY_MSG.into());
    }
    if k == "." {
        return Err("must not be '.'".into());
    }
    if k == ".." {
        return Err("must not be '..'".into());
    }
    if k.starts_with("..") {
        return Err("must not start with '..'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules() {
        assert!(check_dns1123_label("a-1").is_ok());
        assert!(check_dns1123_label("-a").is_err());
        assert!(check_dns1123_label("a.b").is_err());
        assert!(check_dns1123_subdomain("a.b-c.d").is_ok());
        assert!(check_dns1123_subdomain("a..b").is_err());
        assert!(check_dns1123_subdomain("").is_err());
        assert!(check_dns1035_label("a1").is_ok());
        assert!(check_dns1035_label("1a").is_err());
        assert!(check_port_name("http").is_ok());
        assert!(check_port_name("8080").is_err());
        assert!(check_port_name("a--b").is_err());
        assert!(check_port_name("abcdefghijklmnop").is_err());
    }

    #[test]
    fn label_key_rules() {
        assert!(validate_label_key("app").is_ok());
        assert!(validate_label_key("app.kubernetes.io/name").is_ok());
        assert!(validate_label_key("/x").is_err());
        assert!(validate_label_key("Foo_bar.1").is_ok());
        assert!(validate_label_key("_x").is_err());
        assert!(validate_label_key(&"a".repeat(64)).is_err());
        assert!(validate_label_key("UPPER.com/x").is_err());
        assert!(validate_label_value("").is_ok());
        assert!(validate_label_value("a b").is_err());
    }
}
