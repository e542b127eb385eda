//! Leases (`coordination.k8s.io/v1`): upstream's `leaseStrategy` and
//! `ValidateLeaseSpec` (`pkg/registry/coordination/lease`,
//! `pkg/apis/coordination/validation`). The field types and MicroTimes are
//! decoded before this (`sim::decode`).

use super::{obj_field, Causes};
use crate::sim::store::{FieldCause, Obj};
use serde_json::Value;

/// `PrepareForCreate`/`PrepareForUpdate` with the CoordinatedLeaderElection
/// feature off (its default in 1.36): `strategy` and `preferredHolder` are
/// dropped, unless an update's old Lease already had them. `spec` is always
/// written (a struct, not a pointer).
pub(super) fn lease_defaults(obj: &mut Obj, old: Option<&Obj>) {
    let Some(m) = obj.as_object_mut() else { return };
    let spec = obj_field(m, "spec");
    for f in ["strategy", "preferredHolder"] {
        let kept = old.is_some_and(|o| o.pointer(&format!("/spec/{f}")).is_some());
        if !kept {
            spec.remove(f);
        }
    }
}

/// `ValidateLeaseSpec`: a duration set must be above 0, transitions not
/// negative. (`strategy` is dropped before validation while the feature is
/// off.)
pub(super) fn validate_lease(obj: &Obj, causes: &mut Causes) {
    let num = |f: &str| obj.pointer(&format!("/spec/{f}")).and_then(Value::as_i64);
    if let Some(d) = num("leaseDurationSeconds").filter(|d| *d <= 0) {
        causes.push(FieldCause::invalid_raw(
            "spec.leaseDurationSeconds",
            d.to_string(),
            "must be greater than 0",
        ));
    }
    if let Some(t) = num("leaseTransitions").filter(|t| *t < 0) {
        causes.push(FieldCause::invalid_raw(
            "spec.leaseTransitions",
            t.to_string(),
            "must be greater than or equal to 0",
        ));
    }
}
