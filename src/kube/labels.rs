//! The labels kubegate puts on the cluster's objects and selects by: part of
//! the outside contract (docs/api.md), so an operator's selectors and RBAC
//! can name them.

/// The managed-by label key (not configurable; its value is
/// `[cluster] managed_by`).
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Default workspace-uid label key (`[exec] workspace_uid_label`).
pub const DEFAULT_WORKSPACE_UID_LABEL: &str = "kubegate.dev/workspace-uid";
/// Label: the session a pod, Service or Ingress belongs to.
pub const SESSION_ID_LABEL: &str = "kubegate.dev/session-id";
/// Label `kubegate.dev/mode: watch`: a session pod (never an exec target).
pub const MODE_LABEL: &str = "kubegate.dev/mode";
/// The value of [`MODE_LABEL`] on session pods.
pub const MODE_WATCH: &str = "watch";
/// Label (sanitised) and annotation (verbatim): the owning principal.
pub const PRINCIPAL_LABEL: &str = "kubegate.dev/principal";
