//! Label and field selectors: parsing the `labelSelector` / `fieldSelector`
//! query strings (and the structured `metav1.LabelSelector` of workloads) and
//! matching them against stored objects.
//!
//! Owns the label key/value syntax rules too, since selectors and metadata
//! validation must agree on them. It never touches the store: a selector is a
//! pure value, cheap to match, because every watch event is matched against
//! every watcher of its kind (thousands of them) while the store's writer
//! waits. Parse errors carry upstream's wording; the API layer turns them into
//! 400s.

use crate::sim::resources::Resource;
use crate::sim::rules::{validate_label_key, validate_label_value};
use crate::sim::store::StoreError;
use serde_json::{Map, Value};

/// A selector the parser refuses, in upstream's wording; the API answers
/// it 400 ([`StoreError::BadRequest`]) with this text as the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorError(String);

impl From<String> for SelectorError {
    fn from(s: String) -> Self {
        SelectorError(s)
    }
}

impl From<&str> for SelectorError {
    fn from(s: &str) -> Self {
        SelectorError(s.to_string())
    }
}

impl std::fmt::Display for SelectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SelectorError {}

impl From<SelectorError> for String {
    fn from(e: SelectorError) -> String {
        e.0
    }
}

impl From<SelectorError> for StoreError {
    fn from(e: SelectorError) -> Self {
        StoreError::BadRequest(e.0)
    }
}

/// Label operator (upstream `selection.Operator`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LabelOp {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One requirement of a label selector, e.g. `app in (a,b)`.
#[derive(Debug, Clone, PartialEq)]
pub struct Requirement {
    pub key: String,
    pub op: LabelOp,
    pub values: Vec<String>,
}

impl Requirement {
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let v = labels
            .and_then(|l| l.get(&self.key))
            .and_then(Value::as_str);
        match self.op {
            LabelOp::Equals | LabelOp::In => v.is_some_and(|v| self.values.iter().any(|x| x == v)),
            LabelOp::NotEquals | LabelOp::NotIn => {
                !v.is_some_and(|v| self.values.iter().any(|x| x == v))
            }
            LabelOp::Exists => v.is_some(),
            LabelOp::DoesNotExist => v.is_none(),
            LabelOp::GreaterThan | LabelOp::LessThan => {
                let (Some(v), Some(want)) = (v, self.values.first()) else {
                    return false;
                };
                let (Ok(have), Ok(want)) = (v.parse::<i64>(), want.parse::<i64>()) else {
                    return false;
                };
                if self.op == LabelOp::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

/// A parsed label selector: requirements ANDed. The default matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    pub requirements: Vec<Requirement>,
}

impl LabelSelector {
    /// Parses the `labelSelector` query syntax (upstream `labels.Parse`).
    pub fn parse(s: &str) -> Result<LabelSelector, SelectorError> {
        Parser::new(s).parse()
    }

    /// Reads a structured `metav1.LabelSelector` (`matchLabels`,
    /// `matchExpressions`), as workloads carry in `spec.selector`.
    pub fn from_struct(v: &Value) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        let Some(m) = v.as_object() else {
            return Err("selector must be an object".into());
        };
        if let Some(ml) = m.get("matchLabels") {
            let Some(ml) = ml.as_object() else {
                return Err("matchLabels must be an object".into());
            };
            for (k, v) in ml {
                let Some(v) = v.as_str() else {
                    return Err(format!("matchLabels[{k}] must be a string").into());
                };
                requirements.push(Requirement {
                    key: k.clone(),
                    op: LabelOp::Equals,
                    values: vec![v.to_string()],
                });
            }
        }
        if let Some(me) = m.get("matchExpressions") {
            let Some(me) = me.as_array() else {
                return Err("matchExpressions must be a list".into());
            };
            for e in me {
                let key = e
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                let values: Vec<String> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                let op = match e.get("operator").and_then(Value::as_str).unwrap_or("") {
                    "In" => LabelOp::In,
                    "NotIn" => LabelOp::NotIn,
                    "Exists" => LabelOp::Exists,
                    "DoesNotExist" => LabelOp::DoesNotExist,
                    other => {
                        return Err(
                            format!("{other:?} is not a valid label selector operator").into()
                        )
                    }
                };
                requirements.push(Requirement { key, op, values });
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// True when the selector selects every object.
    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Matches a `metadata.labels` map (absent = no labels).
    pub fn matches_labels(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// Matches an object's `metadata.labels`.
    pub fn matches(&self, obj: &Value) -> bool {
        self.is_everything() || self.matches_labels(labels_of(obj))
    }
}

/// The `metadata.labels` map of an object, if any.
pub fn labels_of(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.get("labels")?.as_object()
}

// ---- label selector lexer and parser (after apimachinery labels/selector.go)

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Bang,
    Eq,
    DoubleEq,
    NotEq,
    In,
    NotIn,
    Open,
    Close,
    Comma,
    Gt,
    Lt,
    End,
}

impl Tok {
    fn lit(&self) -> String {
        match self {
            Tok::Ident(s) => s.clone(),
            Tok::Bang => "!".into(),
            Tok::Eq => "=".into(),
            Tok::DoubleEq => "==".into(),
            Tok::NotEq => "!=".into(),
            Tok::In => "in".into(),
            Tok::NotIn => "notin".into(),
            Tok::Open => "(".into(),
            Tok::Close => ")".into(),
            Tok::Comma => ",".into(),
            Tok::Gt => ">".into(),
            Tok::Lt => "<".into(),
            Tok::End => String::new(),
        }
    }
}

fn is_special(c: char) -> bool {
    matches!(c, '!' | '=' | '(' | ')' | ',' | '>' | '<')
}

fn lex(s: &str) -> Vec<Tok> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let next = chars.get(i + 1).copied();
        let tok = match c {
            '!' if next == Some('=') => {
                i += 1;
                Tok::NotEq
            }
            '!' => Tok::Bang,
            '=' if next == Some('=') => {
                i += 1;
                Tok::DoubleEq
            }
            '=' => Tok::Eq,
            '(' => Tok::Open,
            ')' => Tok::Close,
            ',' => Tok::Comma,
            '>' => Tok::Gt,
            '<' => Tok::Lt,
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !is_special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
                continue;
            }
        };
        out.push(tok);
        i += 1;
    }
    out
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
}

impl Parser {
    fn new(s: &str) -> Parser {
        Parser {
            toks: lex(s),
            pos: 0,
        }
    }

    /// Looks ahead; in value position `in`/`notin` are plain identifiers.
    fn peek(&self, values: bool) -> Tok {
        let t = self.toks.get(self.pos).cloned().unwrap_or(Tok::End);
        keyword_as_ident(t, values)
    }

    fn next(&mut self, values: bool) -> Tok {
        let t = self.peek(values);
        if self.pos < self.toks.len() {
            self.pos += 1;
        }
        t
    }

    fn parse(mut self) -> Result<LabelSelector, SelectorError> {
        let mut requirements = Vec::new();
        loop {
            match self.peek(true) {
                Tok::Ident(_) | Tok::Bang => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    requirements.push(r);
                    match self.next(true) {
                        Tok::End => break,
                        Tok::Comma => match self.peek(true) {
                            Tok::Ident(_) | Tok::Bang => {}
                            t => {
                                return Err(format!(
                                    "found '{}', expected: identifier after ','",
                                    t.lit()
                                )
                                .into())
                            }
                        },
                        t => {
                            return Err(format!(
                                "found '{}', expected: ',' or 'end of string'",
                                t.lit()
                            )
                            .into())
                        }
                    }
                }
                Tok::End => break,
                t => {
                    return Err(format!(
                        "found '{}', expected: !, identifier, or 'end of string'",
                        t.lit()
                    )
                    .into())
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn requirement(&mut self) -> Result<Requirement, SelectorError> {
        let mut t = self.next(false);
        let mut bang = false;
        if t == Tok::Bang {
            bang = true;
            t = self.next(false);
        }
        let Tok::Ident(key) = t else {
            return Err(format!("found '{}', expected: identifier", t.lit()).into());
        };
        if let Err(e) = validate_label_key(&key) {
            return Err(format!("key: Invalid value: {}: {e}", quote(&key)).into());
        }
        if matches!(self.peek(true), Tok::End | Tok::Comma) {
            let op = if bang {
                LabelOp::DoesNotExist
            } else {
                LabelOp::Exists
            };
            return Ok(Requirement {
                key,
                op,
                values: vec![],
            });
        }
        if bang {
            // `!key` must stand alone.
            let t = self.peek(true);
            return Err(format!("found '{}', expected: ',' or 'end of string'", t.lit()).into());
        }
        let op = match self.next(false) {
            Tok::Eq | Tok::DoubleEq => LabelOp::Equals,
            Tok::NotEq => LabelOp::NotEquals,
            Tok::In => LabelOp::In,
            Tok::NotIn => LabelOp::NotIn,
            Tok::Gt => LabelOp::GreaterThan,
            Tok::Lt => LabelOp::LessThan,
            t => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    t.lit()
                )
                .into())
            }
        };
        let values = if matches!(op, LabelOp::In | LabelOp::NotIn) {
            self.value_set()?
        } else {
            vec![self.exact_value()?]
        };
        for (i, v) in values.iter().enumerate() {
            if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) {
                if v.parse::<i64>().is_err() {
                    return Err(format!(
                        "values[{i}]: Invalid value: {}: for 'Gt', 'Lt' operators, the value must be an integer",
                        quote(v)
                    ).into());
                }
            } else if let Err(e) = validate_label_value(v) {
                return Err(format!("values[{i}][{key}]: Invalid value: {}: {e}", quote(v)).into());
            }
        }
        Ok(Requirement { key, op, values })
    }

    fn exact_value(&mut self) -> Result<String, SelectorError> {
        match self.peek(true) {
            Tok::End | Tok::Comma => Ok(String::new()),
            _ => match self.next(true) {
                Tok::Ident(v) => Ok(v),
                t => Err(format!("found '{}', expected: identifier", t.lit()).into()),
            },
        }
    }

    fn value_set(&mut self) -> Result<Vec<String>, SelectorError> {
        let t = self.next(true);
        if t != Tok::Open {
            return Err(format!("found '{}', expected: '('", t.lit()).into());
        }
        let mut values = Vec::new();
        if self.peek(true) == Tok::Close {
            self.next(true);
            return Ok(vec![String::new()]);
        }
        loop {
            match self.next(true) {
                Tok::Ident(v) => {
                    values.push(v);
                    match self.next(true) {
                        Tok::Comma => continue,
                        Tok::Close => return Ok(values),
                        t => {
                            return Err(format!("found '{}', expected: ',' or ')'", t.lit()).into())
                        }
                    }
                }
                // `(a,,b)` and `(,a)` carry empty values, as upstream.
                Tok::Comma => {
                    values.push(String::new());
                    if self.peek(true) == Tok::Close {
                        self.next(true);
                        values.push(String::new());
                        return Ok(values);
                    }
                }
                t => {
                    return Err(
                        format!("found '{}', expected: ',', ')' or identifier", t.lit()).into(),
                    )
                }
            }
        }
    }
}

fn keyword_as_ident(t: Tok, values: bool) -> Tok {
    if !values {
        return t;
    }
    match t {
        Tok::In => Tok::Ident("in".into()),
        Tok::NotIn => Tok::Ident("notin".into()),
        t => t,
    }
}

fn quote(s: &str) -> String {
    crate::sim::store::error::quote(s)
}

// ---- field selectors

/// One `field=value` / `field!=value` term.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldRequirement {
    pub field: String,
    path: Vec<String>,
    /// Where the value is read when `path` holds none (an Event's
    /// `source`: `source.component`, else `reportingComponent`).
    fallback: Option<Vec<String>>,
    pub negate: bool,
    pub value: String,
}

/// `events.k8s.io/v1`'s selectable fields and the core/v1 field each one
/// is (`AddFieldLabelConversionsForEvent`).
const EVENT_V1_FIELDS: &[(&str, &str)] = &[
    ("reason", "reason"),
    ("regarding.kind", "involvedObject.kind"),
    ("regarding.namespace", "involvedObject.namespace"),
    ("regarding.name", "involvedObject.name"),
    ("regarding.uid", "involvedObject.uid"),
    ("regarding.apiVersion", "involvedObject.apiVersion"),
    (
        "regarding.resourceVersion",
        "involvedObject.resourceVersion",
    ),
    ("regarding.fieldPath", "involvedObject.fieldPath"),
    ("reportingController", "reportingComponent"),
    ("type", "type"),
    ("metadata.namespace", "metadata.namespace"),
    ("metadata.name", "metadata.name"),
];

fn split_path(field: &str) -> Vec<String> {
    field.split('.').map(str::to_string).collect()
}

/// Where a selectable field's value is read in the stored object: the
/// field itself, but an `events.k8s.io/v1` field is read from its core/v1
/// twin (the store keeps core Events), and an Event's `source` from
/// `source.component`, else `reportingComponent` (`ToSelectableFields`).
fn field_paths(res: Resource, field: &str) -> (Vec<String>, Option<Vec<String>>) {
    let core = match res {
        Resource::EventV1 => EVENT_V1_FIELDS
            .iter()
            .find(|(v1, _)| *v1 == field)
            .map_or(field, |(_, c)| c),
        _ => field,
    };
    if matches!(res, Resource::Event | Resource::EventV1) && core == "source" {
        return (
            split_path("source.component"),
            Some(split_path("reportingComponent")),
        );
    }
    (split_path(core), None)
}

/// A parsed field selector: terms ANDed. The default matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    pub requirements: Vec<FieldRequirement>,
}

/// Selectable fields that are booleans upstream: absent reads `false`.
const BOOL_FIELDS: &[&str] = &["spec.hostNetwork", "spec.unschedulable"];

/// The fields each kind may be selected on (upstream field label conversions).
fn supported_fields(res: Resource) -> &'static [&'static str] {
    match res {
        Resource::Pod => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        Resource::Namespace => &["metadata.name", "status.phase"],
        Resource::Node => &["metadata.name", "spec.unschedulable"],
        Resource::Event => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        Resource::EventV1 => &[
            "reason",
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reportingController",
            "type",
            "metadata.namespace",
            "metadata.name",
        ],
        Resource::Secret => &["metadata.name", "metadata.namespace", "type"],
        Resource::Service => &[
            "metadata.name",
            "metadata.namespace",
            "spec.clusterIP",
            "spec.type",
        ],
        Resource::ReplicaSet => &["metadata.name", "metadata.namespace", "status.replicas"],
        Resource::ConfigMap
        | Resource::Deployment
        | Resource::Ingress
        | Resource::GatewayClass
        | Resource::Gateway
        | Resource::HttpRoute
        | Resource::ServiceAccount
        | Resource::Lease
        | Resource::PersistentVolumeClaim
        | Resource::SelfSubjectAccessReview
        | Resource::SelfSubjectReview
        | Resource::Role
        | Resource::ClusterRole
        | Resource::RoleBinding
        | Resource::ClusterRoleBinding => &["metadata.name", "metadata.namespace"],
    }
}

/// Splits on unescaped commas; keeps escapes for the term parser.
fn split_terms(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                cur.push(c);
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            ',' => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            if let Some(n) = chars.next() {
                out.push(n);
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Finds the first unescaped operator in a term: (position, op length, negate).
fn find_op(term: &str) -> Option<(usize, usize, bool)> {
    let b = term.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'!' if b.get(i + 1) == Some(&b'=') => return Some((i, 2, true)),
            b'=' if b.get(i + 1) == Some(&b'=') => return Some((i, 2, false)),
            b'=' => return Some((i, 1, false)),
            _ => i += 1,
        }
    }
    None
}

impl FieldSelector {
    /// Parses a `fieldSelector` for a kind; unknown fields are rejected with
    /// the kind's upstream message.
    pub fn parse(s: &str, res: Resource) -> Result<FieldSelector, SelectorError> {
        let mut requirements = Vec::new();
        if s.trim().is_empty() {
            return Ok(FieldSelector::default());
        }
        for term in split_terms(s) {
            if term.is_empty() {
                continue;
            }
            let Some((at, len, negate)) = find_op(&term) else {
                return Err(format!("invalid selector: '{s}'; can't understand '{term}'").into());
            };
            let field = unescape(term[..at].trim());
            let value = unescape(&term[at + len..]);
            if !supported_fields(res).contains(&field.as_str()) {
                return Err(match res {
                    Resource::ConfigMap
                    | Resource::Deployment
                    | Resource::Ingress
                    | Resource::Lease
                    | Resource::PersistentVolumeClaim => format!(
                        "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
                        quote(&field)
                    ),
                    _ => format!("field label not supported: {field}"),
                }.into());
            }
            let (path, fallback) = field_paths(res, &field);
            requirements.push(FieldRequirement {
                field,
                path,
                fallback,
                negate,
                value,
            });
        }
        Ok(FieldSelector { requirements })
    }

    pub fn is_everything(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements.iter().all(|r| {
            let at = |path: &[String]| {
                let mut cur = Some(obj);
                for p in path {
                    cur = cur.and_then(|c| c.get(p));
                }
                cur
            };
            let mut cur = at(&r.path);
            if let Some(fb) = &r.fallback {
                if cur.is_none_or(|v| v.is_null() || v == "") {
                    cur = at(fb);
                }
            }
            let eq = match cur {
                Some(Value::String(s)) => *s == r.value,
                Some(Value::Bool(b)) => r.value == if *b { "true" } else { "false" },
                Some(Value::Number(n)) => n.to_string() == r.value,
                // Missing booleans read as false, missing strings as "".
                None | Some(Value::Null) => {
                    r.value.is_empty()
                        || (BOOL_FIELDS.contains(&r.field.as_str()) && r.value == "false")
                }
                Some(_) => false,
            };
            eq != r.negate
        })
    }

    /// The name a positive `metadata.name=X` term pins: every object this
    /// selector matches has that name (lets watchers be indexed by name).
    pub fn exact_name(&self) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| !r.negate && r.field == "metadata.name")
            .map(|r| r.value.as_str())
    }
}

/// Both selectors of a list or watch. `Default` selects everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Selectors {
    pub label: LabelSelector,
    pub field: FieldSelector,
}

impl Selectors {
    /// Parses the two query parameters for a kind; absent or empty strings
    /// select everything. Errors are `BadRequest` with upstream's text.
    pub fn parse(
        res: Resource,
        label: Option<&str>,
        field: Option<&str>,
    ) -> Result<Selectors, StoreError> {
        let label = match label {
            Some(s) if !s.trim().is_empty() => LabelSelector::parse(s)?,
            _ => LabelSelector::default(),
        };
        let field = match field {
            Some(s) => FieldSelector::parse(s, res)?,
            None => FieldSelector::default(),
        };
        Ok(Selectors { label, field })
    }

    pub fn is_everything(&self) -> bool {
        self.label.is_everything() && self.field.is_everything()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.label.matches(obj) && self.field.matches(obj)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value) -> Value {
        json!({"metadata": {"name": "p1", "namespace": "ns1", "labels": labels},
               "spec": {"nodeName": "sim-node"}, "status": {"phase": "Running"}})
    }

    fn sel(s: &str) -> LabelSelector {
        LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn equality_selectors() {
        let p = pod(json!({"app": "web", "tier": "fe"}));
        assert!(sel("app=web").matches(&p));
        assert!(sel("app==web").matches(&p));
        assert!(!sel("app!=web").matches(&p));
        assert!(sel("app!=db").matches(&p));
        assert!(sel("missing!=x").matches(&p));
        assert!(sel(" app = web , tier==fe ").matches(&p));
        assert!(!sel("app=web,tier=be").matches(&p));
        assert!(sel("").matches(&p));
        assert!(sel("app=").matches(&pod(json!({"app": ""}))));
        assert!(!sel("app=").matches(&p));
    }

    #[test]
    fn set_selectors() {
        let p = pod(json!({"app": "web", "env": "prod"}));
        assert!(sel("app in (web,db)").matches(&p));
        assert!(sel("app in ( db , web )").matches(&p));
        assert!(!sel("app notin (web)").matches(&p));
        assert!(sel("app notin (db)").matches(&p));
        assert!(sel("missing notin (db)").matches(&p));
        assert!(!sel("missing in (db)").matches(&p));
        assert!(sel("app").matches(&p));
        assert!(!sel("!app").matches(&p));
        assert!(sel("!missing").matches(&p));
        assert!(sel("app,!missing,env in (prod)").matches(&p));
        assert!(sel("env in (in, notin, prod)").matches(&p));
        assert!(sel("example.com/tier").matches(&pod(json!({"example.com/tier": "x"}))));
        let n = pod(json!({"n": "5"}));
        assert!(sel("n>3").matches(&n));
        assert!(!sel("n<3").matches(&n));
        assert!(!pod(json!(null)).is_null() && sel("!app").matches(&pod(json!(null))));
    }

    #[test]
    fn label_parse_errors() {
        for bad in [
            "app=web,",
            "app in web",
            "app in (web",
            "=web",
            "app=web=x",
            "!app=web",
            "a b",
            "Bad Key=1",
            "app=bad value!",
            "app=-x",
            "n>x",
            "app=(",
            ",",
        ] {
            let r = LabelSelector::parse(bad);
            assert!(r.is_err(), "{bad:?} parsed as {r:?}");
        }
        let e = LabelSelector::parse("app in web").unwrap_err().to_string();
        assert_eq!(e, "unable to parse requirement: found 'web', expected: '('");
        let e = LabelSelector::parse("app=web,").unwrap_err().to_string();
        assert_eq!(e, "found '', expected: identifier after ','");
        let e = LabelSelector::parse("app=-x").unwrap_err().to_string();
        assert!(e.starts_with(r#"unable to parse requirement: values[0][app]: Invalid value: "-x": a valid label must be"#), "{e}");
        let e = Selectors::parse(Resource::Pod, Some("a b"), None).unwrap_err();
        assert_eq!(e.code(), 400);
    }

    #[test]
    fn structured_selector() {
        let s = LabelSelector::from_struct(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["a", "b"]},
                                 {"key": "x", "operator": "DoesNotExist"}]
        }))
        .unwrap();
        assert!(s.matches(&pod(json!({"app": "web", "env": "a"}))));
        assert!(!s.matches(&pod(json!({"app": "web", "env": "c"}))));
        assert!(!s.matches(&pod(json!({"app": "web", "env": "a", "x": "1"}))));
        assert!(LabelSelector::from_struct(
            &json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]})
        )
        .is_err());
        assert!(LabelSelector::from_struct(&json!({}))
            .unwrap()
            .is_everything());
    }

    #[test]
    fn field_selectors() {
        let p = pod(json!({}));
        let f = |s: &str| FieldSelector::parse(s, Resource::Pod).unwrap();
        assert!(f("metadata.name=p1").matches(&p));
        assert!(f("metadata.name==p1").matches(&p));
        assert!(!f("metadata.name!=p1").matches(&p));
        assert!(f("metadata.namespace=ns1,status.phase=Running").matches(&p));
        assert!(f("spec.nodeName=sim-node").matches(&p));
        assert!(!f("spec.nodeName=").matches(&p));
        assert!(f("spec.nodeName!=").matches(&p));
        assert!(f("status.podIP=").matches(&p));
        assert!(f("spec.hostNetwork=false").matches(&p));
        assert!(f("").is_everything());
        assert_eq!(f("metadata.name=p1").exact_name(), Some("p1"));
        let esc = FieldSelector::parse(r"metadata.name=a\,b", Resource::ConfigMap).unwrap();
        assert!(esc.matches(&json!({"metadata": {"name": "a,b"}})));
    }

    #[test]
    fn field_selector_errors() {
        let e = FieldSelector::parse("spec.foo=x", Resource::Pod)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "field label not supported: spec.foo");
        let e = FieldSelector::parse("status.phase=x", Resource::ConfigMap)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            r#""status.phase" is not a known field selector: only "metadata.name", "metadata.namespace""#
        );
        let e = FieldSelector::parse("metadata.name", Resource::Pod)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        assert!(FieldSelector::parse("status.phase=Active", Resource::Namespace).is_ok());
        assert!(FieldSelector::parse("type=Opaque", Resource::Secret).is_ok());
        let e = Selectors::parse(Resource::Pod, None, Some("x=y")).unwrap_err();
        assert_eq!(
            e,
            StoreError::BadRequest("field label not supported: x".into())
        );
    }
}
