//! ServiceAccounts: the `default` one every namespace has, and the
//! ServiceAccount admission plugin's rule that a pod's account exists
//! (docs/sim.md#serviceaccounts).
//!
//! Upstream, kube-controller-manager's serviceaccount controller creates
//! `default` shortly after a namespace appears (and again whenever it is
//! deleted), and until it has, the API server refuses pods in that
//! namespace. The sim creates `default` in the same store write as the
//! namespace ([`crate::sim::store::Store::create`]), so no pod create can
//! race it; the controllers ([`ensure_default`]) recreate it when deleted.

use super::resources::Resource;
use super::store::{Obj, Store, StoreError};
use serde_json::json;

/// The account pods run as when they name none.
pub const DEFAULT: &str = "default";

/// The `default` ServiceAccount of namespace `ns`, as the controller makes
/// it: a bare object (no `secrets` since 1.24's LegacyServiceAccountTokenNoAutoGeneration).
pub fn default_account(ns: &str) -> Obj {
    json!({
        "kind": "ServiceAccount",
        "apiVersion": "v1",
        "metadata": {"name": DEFAULT, "namespace": ns},
    })
}

/// Creates `default` in `ns` if the namespace is active and lacks it.
pub fn ensure_default(store: &Store, ns: &str) -> Result<(), StoreError> {
    let Ok(nso) = store.get(Resource::Namespace, "", ns) else {
        return Ok(());
    };
    if !nso["metadata"]["deletionTimestamp"].is_null() {
        return Ok(());
    }
    match store.get(Resource::ServiceAccount, ns, DEFAULT) {
        Ok(_) => return Ok(()),
        Err(StoreError::NotFound { .. }) => {}
        Err(e) => return Err(e),
    }
    match store.create(Resource::ServiceAccount, ns, default_account(ns)) {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
        // The namespace began terminating meanwhile.
        Err(StoreError::Forbidden { .. }) | Err(StoreError::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The admission plugin's refusal of a pod naming a ServiceAccount that
/// does not exist (`plugin/pkg/admission/serviceaccount`:
/// `admission.NewForbidden(a, fmt.Errorf("error looking up service account
/// %s/%s: %w", …))` around the lookup's NotFound). `pod_name` is the pod's
/// name or, before one is generated, its `generateName`
/// (`extractResourceName`).
pub fn missing_account(ns: &str, account: &str, pod_name: &str) -> StoreError {
    StoreError::Forbidden {
        resource: Resource::Pod,
        name: pod_name.to_string(),
        message: format!(
            "error looking up service account {ns}/{account}: serviceaccount {} not found",
            super::store::error::quote(account)
        ),
    }
}
