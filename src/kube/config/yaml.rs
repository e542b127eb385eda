//! A typed walk over a parsed YAML document that records the key path of
//! every value, so a type error reads `users[dev].token: expected a string,
//! found a number` and never quotes the value itself (it may be a secret).
//! We parse into `yaml_serde::Value` and walk by hand instead of deriving
//! `Deserialize`: derived errors echo offending values and give list indices
//! where users think in entry names.

use yaml_serde::Value;

/// A type or shape problem at `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FieldError {
    pub key: String,
    pub message: String,
}

pub(crate) type FieldResult<T> = Result<T, FieldError>;

/// A document that is not YAML: the parser's own description (never
/// document text) and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct YamlError {
    /// What is wrong, without scalars from the document.
    pub what: String,
    /// ` at line L column C`, or empty.
    pub at: String,
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not valid YAML: {}{}", self.what, self.at)
    }
}

impl std::error::Error for YamlError {}

/// Parses one YAML document. The error message carries only the parser's
/// own description and position, never document text.
pub(crate) fn parse(text: &str) -> Result<Value, YamlError> {
    yaml_serde::from_str::<Value>(text).map_err(|e| {
        let pos = e
            .location()
            .map(|l| format!(" at line {} column {}", l.line(), l.column()))
            .unwrap_or_default();
        // The parser's messages describe syntax ("mapping values are not
        // allowed in this context", "found duplicate key"); they don't
        // echo scalars. Trim anything after a newline just in case.
        let msg = e.to_string();
        let first = msg.lines().next().unwrap_or("invalid YAML");
        let first = first.split(" at line ").next().unwrap_or(first);
        // "duplicate entry with key \"…\"" quotes the key: keep it generic.
        let first = if first.starts_with("duplicate entry") {
            "a mapping has the same key twice"
        } else {
            first
        };
        YamlError {
            what: first.to_string(),
            at: pos,
        }
    })
}

#[derive(Clone, Copy)]
pub(crate) struct Node<'a> {
    pub value: &'a Value,
}

fn untag(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => untag(&t.value),
        v => v,
    }
}

pub(crate) fn type_name(v: &Value) -> &'static str {
    match untag(v) {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

fn field_err(key: &str, message: impl Into<String>) -> FieldError {
    FieldError {
        key: key.to_string(),
        message: message.into(),
    }
}

impl<'a> Node<'a> {
    pub fn new(value: &'a Value) -> Node<'a> {
        Node {
            value: untag(value),
        }
    }

    pub fn is_null(&self) -> bool {
        matches!(self.value, Value::Null)
    }

    /// A mapping (null counts as an empty one: `user: {}` and `user:` are
    /// the same thing to kubectl).
    pub fn expect_map(&self, key: &str) -> FieldResult<()> {
        match self.value {
            Value::Mapping(_) | Value::Null => Ok(()),
            v => Err(field_err(
                key,
                format!("expected a mapping, found {}", type_name(v)),
            )),
        }
    }

    /// The value under `k`, if this is a mapping holding a non-null one.
    pub fn get(&self, k: &str) -> Option<Node<'a>> {
        match self.value {
            Value::Mapping(m) => m.get(k).map(Node::new).filter(|n| !n.is_null()),
            _ => None,
        }
    }

    /// An optional string field; empty strings count as absent (as in Go).
    pub fn opt_str(&self, k: &str, key: &str) -> FieldResult<Option<&'a str>> {
        match self.get(k) {
            None => Ok(None),
            Some(n) => match n.value {
                Value::String(s) if s.is_empty() => Ok(None),
                Value::String(s) => Ok(Some(s.as_str())),
                v => Err(field_err(
                    key,
                    format!("expected a string, found {}", type_name(v)),
                )),
            },
        }
    }

    pub fn opt_bool(&self, k: &str, key: &str) -> FieldResult<Option<bool>> {
        match self.get(k) {
            None => Ok(None),
            Some(n) => match n.value {
                Value::Bool(b) => Ok(Some(*b)),
                v => Err(field_err(
                    key,
                    format!("expected true or false, found {}", type_name(v)),
                )),
            },
        }
    }

    /// An optional list (absent or null: empty).
    pub fn opt_seq(&self, k: &str, key: &str) -> FieldResult<Vec<Node<'a>>> {
        match self.get(k) {
            None => Ok(Vec::new()),
            Some(n) => match n.value {
                Value::Sequence(s) => Ok(s.iter().map(Node::new).collect()),
                v => Err(field_err(
                    key,
                    format!("expected a list, found {}", type_name(v)),
                )),
            },
        }
    }

    /// A list of strings (exec `args`).
    pub fn opt_str_list(&self, k: &str, key: &str) -> FieldResult<Vec<String>> {
        let mut out = Vec::new();
        for (i, n) in self.opt_seq(k, key)?.into_iter().enumerate() {
            match n.value {
                Value::String(s) => out.push(s.clone()),
                // Go's YAML → JSON → []string accepts only strings.
                v => {
                    return Err(field_err(
                        &format!("{key}[{i}]"),
                        format!("expected a string, found {}", type_name(v)),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Whether `k` is present with a non-empty value (for keys we reject:
    /// `auth-provider`, `username`, `proxy-url`, `as`).
    pub fn has(&self, k: &str) -> bool {
        match self.get(k) {
            None => false,
            Some(n) => match n.value {
                Value::String(s) => !s.is_empty(),
                Value::Sequence(s) => !s.is_empty(),
                Value::Mapping(m) => !m.is_empty(),
                _ => true,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_and_reports_types_without_values() {
        let v = parse("a: s3cr3t\nb: 12345\nc: [x, 1]\nd:\ne: true\n").expect("yaml");
        let n = Node::new(&v);
        assert_eq!(n.opt_str("a", "k.a").expect("a"), Some("s3cr3t"));
        let e = n.opt_str("b", "k.b").expect_err("number");
        assert_eq!(e.key, "k.b");
        assert!(!e.message.contains("12345"), "{}", e.message);
        assert_eq!(n.opt_str("d", "k.d").expect("null"), None);
        assert_eq!(n.opt_bool("e", "k.e").expect("bool"), Some(true));
        let e = n.opt_str_list("c", "k.c").expect_err("mixed list");
        assert_eq!(e.key, "k.c[1]");
        assert!(n.has("a") && !n.has("d") && !n.has("zz"));
    }

    #[test]
    fn syntax_errors_do_not_echo_text() {
        let e = parse("token: \"s3cr3t\nusers: [")
            .expect_err("bad")
            .to_string();
        assert!(e.starts_with("not valid YAML"), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        let e = parse("a: 1\na: 2\n").expect_err("dup").to_string();
        assert!(e.contains("duplicate") || e.contains("YAML"), "{e}");
    }
}
