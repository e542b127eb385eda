//! The store's error type and the field causes of `Invalid`, with the exact
//! message texts an upstream API server would put in its `Status`.
//!
//! This file only describes failures; turning one into an HTTP `Status` is the
//! API layer's job (it reads `code()`, `reason()`, `message()` and, for
//! `Invalid`, each cause's `reason()`/`body()`/`field`).

use crate::sim::resources::Resource;
use std::fmt;

/// Why a field was rejected (upstream `field.ErrorType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseKind {
    Required,
    Invalid,
    Forbidden,
    NotSupported,
    Duplicate,
    TooLong,
    /// A reference to something that does not exist (e.g. a volumeMount
    /// naming no volume). Not in the original contract; upstream has it.
    NotFound,
}

impl CauseKind {
    /// The `details.causes[].reason` value (`metav1.CauseType`).
    pub fn reason(self) -> &'static str {
        match self {
            CauseKind::Required => "FieldValueRequired",
            CauseKind::Invalid => "FieldValueInvalid",
            CauseKind::Forbidden => "FieldValueForbidden",
            CauseKind::NotSupported => "FieldValueNotSupported",
            CauseKind::Duplicate => "FieldValueDuplicate",
            CauseKind::TooLong => "FieldValueTooLong",
            CauseKind::NotFound => "FieldValueNotFound",
        }
    }

    /// The leading words of the message (`field.ErrorType.String()`).
    pub fn label(self) -> &'static str {
        match self {
            CauseKind::Required => "Required value",
            CauseKind::Invalid => "Invalid value",
            CauseKind::Forbidden => "Forbidden",
            CauseKind::NotSupported => "Unsupported value",
            CauseKind::Duplicate => "Duplicate value",
            CauseKind::TooLong => "Too long",
            CauseKind::NotFound => "Not found",
        }
    }
}

/// One rejected field (upstream `field.Error`).
#[derive(Debug, Clone, PartialEq)]
pub struct FieldCause {
    pub kind: CauseKind,
    /// The field path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// The offending value already rendered the Go way: strings quoted
    /// (`"abc"`), numbers bare (`0`), maps as `map[string]string{"a":"b"}`.
    pub value: Option<String>,
    /// Free text after the value, may be empty.
    pub detail: String,
}

impl FieldCause {
    pub fn new(
        kind: CauseKind,
        field: impl Into<String>,
        value: Option<String>,
        detail: impl Into<String>,
    ) -> Self {
        FieldCause {
            kind,
            field: field.into(),
            value,
            detail: detail.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(CauseKind::Required, field, None, detail)
    }

    /// An `Invalid value` cause for a string value (quoted in the message).
    pub fn invalid(field: impl Into<String>, value: &str, detail: impl Into<String>) -> Self {
        Self::new(CauseKind::Invalid, field, Some(quote(value)), detail)
    }

    /// An `Invalid value` cause with a value rendered by the caller.
    pub fn invalid_raw(
        field: impl Into<String>,
        value: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(CauseKind::Invalid, field, Some(value.into()), detail)
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::new(CauseKind::Forbidden, field, None, detail)
    }

    pub fn duplicate(field: impl Into<String>, value: &str) -> Self {
        Self::new(CauseKind::Duplicate, field, Some(quote(value)), "")
    }

    /// `Unsupported value: "x": supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> Self {
        let list: Vec<String> = supported.iter().map(|s| quote(s)).collect();
        Self::new(
            CauseKind::NotSupported,
            field,
            Some(quote(value)),
            format!("supported values: {}", list.join(", ")),
        )
    }

    /// The message without the field (upstream `ErrorBody`), which is what
    /// goes into `details.causes[].message`.
    pub fn body(&self) -> String {
        let mut s = self.kind.label().to_string();
        match self.kind {
            CauseKind::Required | CauseKind::Forbidden | CauseKind::TooLong => {}
            _ => {
                if let Some(v) = &self.value {
                    s.push_str(": ");
                    s.push_str(v);
                }
            }
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }

    /// `field: body`, as in the top-level Status message.
    pub fn message(&self) -> String {
        if self.field.is_empty() {
            self.body()
        } else {
            format!("{}: {}", self.field, self.body())
        }
    }
}

/// Quotes a string the way Go's `%q` does (close enough: JSON escaping).
pub fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

/// Every way a store call can fail; each maps to one upstream Status reason.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreError {
    /// 404. Also for a missing namespace (resource `Namespace`).
    NotFound { resource: Resource, name: String },
    /// 409 AlreadyExists.
    AlreadyExists { resource: Resource, name: String },
    /// 409 Conflict: stale resourceVersion or a failed precondition.
    /// `message` is the part after `Operation cannot be fulfilled on …: `.
    Conflict {
        resource: Resource,
        name: String,
        message: String,
    },
    /// 409 Conflict: a DELETE's failed precondition. Upstream's
    /// `rest.BeforeDelete` qualifies it by kind, not resource:
    /// `Operation cannot be fulfilled on ConfigMap "a": …`, and
    /// `details.kind` is the kind.
    PreconditionFailed {
        resource: Resource,
        name: String,
        message: String,
    },
    /// 409 Conflict of a server-side apply: upstream's whole message, and
    /// a `FieldManagerConflict` cause per field and manager
    /// (`sim::managed`); no name or kind in the details.
    ApplyConflict {
        resource: Resource,
        message: String,
        causes: Vec<serde_json::Value>,
    },
    /// 422 with field causes.
    Invalid {
        resource: Resource,
        name: String,
        causes: Vec<FieldCause>,
    },
    /// 400 with the full message.
    BadRequest(String),
    /// 422 Invalid: a JSON patch operation that does not apply. Upstream
    /// answers `NewGenericServerResponse(422, …)`: the generic message, empty
    /// details; the operation's own error (kept here) is not shown.
    PatchNotApplicable(String),
    /// 410 Expired (watch resourceVersion older than the history window).
    Expired(String),
    /// 403; `message` is the part after `… is forbidden: `.
    Forbidden {
        resource: Resource,
        name: String,
        message: String,
    },
    /// 422: a PUT without `metadata.resourceVersion` to a kind that allows
    /// no unconditional update ([`Resource::allows_unconditional_update`]).
    /// Upstream builds this `Invalid` from the resource, not the kind
    /// (`leases.coordination.k8s.io "x" is invalid: …`, `details.kind`
    /// `leases`), so it has a variant of its own.
    ResourceVersionRequired { resource: Resource, name: String },
}

/// The one field cause of [`StoreError::ResourceVersionRequired`].
pub fn resource_version_required() -> FieldCause {
    FieldCause::invalid_raw(
        "metadata.resourceVersion",
        "0",
        "must be specified for an update",
    )
}

/// The message a stale resourceVersion gets (upstream `OptimisticLockErrorMsg`).
pub const MODIFIED_MSG: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

impl StoreError {
    /// HTTP status code (repeated as `code` inside the Status).
    pub fn code(&self) -> u16 {
        match self {
            StoreError::NotFound { .. } => 404,
            StoreError::AlreadyExists { .. }
            | StoreError::Conflict { .. }
            | StoreError::PreconditionFailed { .. }
            | StoreError::ApplyConflict { .. } => 409,
            StoreError::Invalid { .. }
            | StoreError::PatchNotApplicable(_)
            | StoreError::ResourceVersionRequired { .. } => 422,
            StoreError::BadRequest(_) => 400,
            StoreError::Expired(_) => 410,
            StoreError::Forbidden { .. } => 403,
        }
    }

    /// The Status `reason`.
    pub fn reason(&self) -> &'static str {
        match self {
            StoreError::NotFound { .. } => "NotFound",
            StoreError::AlreadyExists { .. } => "AlreadyExists",
            StoreError::Conflict { .. }
            | StoreError::PreconditionFailed { .. }
            | StoreError::ApplyConflict { .. } => "Conflict",
            StoreError::Invalid { .. }
            | StoreError::PatchNotApplicable(_)
            | StoreError::ResourceVersionRequired { .. } => "Invalid",
            StoreError::BadRequest(_) => "BadRequest",
            StoreError::Expired(_) => "Expired",
            StoreError::Forbidden { .. } => "Forbidden",
        }
    }

    /// The kind and name for `details{name, group, kind}`, when there is one.
    pub fn subject(&self) -> Option<(Resource, &str)> {
        match self {
            StoreError::NotFound { resource, name }
            | StoreError::AlreadyExists { resource, name }
            | StoreError::Conflict { resource, name, .. }
            | StoreError::PreconditionFailed { resource, name, .. }
            | StoreError::Invalid { resource, name, .. }
            | StoreError::Forbidden { resource, name, .. }
            | StoreError::ResourceVersionRequired { resource, name } => Some((*resource, name)),
            StoreError::BadRequest(_)
            | StoreError::Expired(_)
            | StoreError::PatchNotApplicable(_)
            | StoreError::ApplyConflict { .. } => None,
        }
    }

    /// The full Status `message`, worded as upstream words it.
    pub fn message(&self) -> String {
        match self {
            StoreError::NotFound { resource, name } => {
                format!(
                    "{} {} not found",
                    resource.qualified_resource(),
                    quote(name)
                )
            }
            StoreError::AlreadyExists { resource, name } => {
                format!(
                    "{} {} already exists",
                    resource.qualified_resource(),
                    quote(name)
                )
            }
            StoreError::Conflict {
                resource,
                name,
                message,
            } => format!(
                "Operation cannot be fulfilled on {} {}: {}",
                resource.qualified_resource(),
                quote(name),
                message
            ),
            StoreError::PreconditionFailed {
                resource,
                name,
                message,
            } => format!(
                "Operation cannot be fulfilled on {} {}: {}",
                resource.qualified_kind(),
                quote(name),
                message
            ),
            StoreError::Invalid {
                resource,
                name,
                causes,
            } => {
                let errs: Vec<String> = causes.iter().map(FieldCause::message).collect();
                let joined = if errs.len() == 1 {
                    errs[0].clone()
                } else {
                    format!("[{}]", errs.join(", "))
                };
                format!(
                    "{} {} is invalid: {}",
                    resource.qualified_kind(),
                    quote(name),
                    joined
                )
            }
            StoreError::ResourceVersionRequired { resource, name } => format!(
                "{} {} is invalid: {}",
                resource.qualified_resource(),
                quote(name),
                resource_version_required().message()
            ),
            StoreError::BadRequest(m) | StoreError::Expired(m) => m.clone(),
            StoreError::ApplyConflict { message, .. } => message.clone(),
            StoreError::PatchNotApplicable(_) => {
                "the server rejected our request due to an error in our request".into()
            }
            StoreError::Forbidden {
                resource,
                name,
                message,
            } => {
                if name.is_empty() {
                    format!(
                        "{} is forbidden: {}",
                        resource.qualified_resource(),
                        message
                    )
                } else {
                    format!(
                        "{} {} is forbidden: {}",
                        resource.qualified_resource(),
                        quote(name),
                        message
                    )
                }
            }
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for StoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_upstream() {
        let e = StoreError::NotFound {
            resource: Resource::Pod,
            name: "x".into(),
        };
        assert_eq!(e.message(), r#"pods "x" not found"#);
        assert_eq!(e.code(), 404);
        let e = StoreError::AlreadyExists {
            resource: Resource::Deployment,
            name: "web".into(),
        };
        assert_eq!(e.message(), r#"deployments.apps "web" already exists"#);
        let e = StoreError::Conflict {
            resource: Resource::Pod,
            name: "x".into(),
            message: MODIFIED_MSG.into(),
        };
        assert_eq!(
            e.message(),
            r#"Operation cannot be fulfilled on pods "x": the object has been modified; please apply your changes to the latest version and try again"#
        );
        let e = StoreError::Invalid {
            resource: Resource::Pod,
            name: "x".into(),
            causes: vec![FieldCause::required("spec.containers", "")],
        };
        assert_eq!(
            e.message(),
            r#"Pod "x" is invalid: spec.containers: Required value"#
        );
        let e = StoreError::Invalid {
            resource: Resource::Service,
            name: "s".into(),
            causes: vec![
                FieldCause::invalid("spec.clusterIP", "10.96.0.9", "field is immutable"),
                FieldCause::not_supported("spec.type", "Foo", &["ClusterIP", "NodePort"]),
            ],
        };
        assert_eq!(
            e.message(),
            r#"Service "s" is invalid: [spec.clusterIP: Invalid value: "10.96.0.9": field is immutable, spec.type: Unsupported value: "Foo": supported values: "ClusterIP", "NodePort"]"#
        );
        let e = StoreError::Forbidden {
            resource: Resource::Pod,
            name: String::new(),
            message: "m".into(),
        };
        assert_eq!(e.message(), "pods is forbidden: m");
        assert_eq!(FieldCause::forbidden("spec", "no").body(), "Forbidden: no");
        assert_eq!(
            FieldCause::duplicate("a", "b").body(),
            r#"Duplicate value: "b""#
        );
    }
}
