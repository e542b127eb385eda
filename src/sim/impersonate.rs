//! `Impersonate-*` headers (docs/sim.md#impersonation), as kube-apiserver
//! 1.36 reads them: constrained impersonation (KEP 5284) with legacy
//! impersonation behind it. `Impersonate-User` (a node or a
//! `system:serviceaccount:NS:NAME` user has modes of its own),
//! `Impersonate-Group` (repeated), `Impersonate-Extra-KEY` (the key
//! percent-decoded, lower-cased) and `Impersonate-Uid`. Each mode checks
//! `impersonate-on:MODE:VERB` on the request itself, then
//! `impersonate:MODE` on the user (`users`, `nodes`, `serviceaccounts`),
//! the uid, each group and each extra; legacy checks `impersonate` on
//! `users`/`serviceaccounts`, `uids`, `groups`, `userextras/KEY`. The first
//! mode that allows wins; otherwise the first refusal met is the answer,
//! trying first the mode that last worked for this requestor, as upstream
//! does. Groups, extras or a uid without a user are upstream's 400.

use super::authn::{UserInfo, AUTHENTICATED, UNAUTHENTICATED};
use super::rbac::{self, Attributes};
use super::store::Store;
use crate::http::Request;
use crate::kube::status::{go_quote, Status};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};

/// Why an impersonation was refused.
#[derive(Debug)]
pub enum Refusal {
    /// 403 with upstream's Forbidden status.
    Forbidden(Box<Status>),
    /// 400: groups, a uid or extras without a user.
    BadRequest(Box<Status>),
}

/// What the `Impersonate-*` headers ask for (`processImpersonationHeaders`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Wanted {
    /// Go's `%#v` of the `*user.DefaultInfo` upstream builds.
    fn go_value(&self) -> String {
        let groups = if self.groups.is_empty() {
            "[]string(nil)".to_string()
        } else {
            let g: Vec<String> = self.groups.iter().map(|g| go_quote(g)).collect();
            format!("[]string{{{}}}", g.join(", "))
        };
        let extra = if self.extra.is_empty() {
            "map[string][]string(nil)".to_string()
        } else {
            let e: Vec<String> = self
                .extra
                .iter()
                .map(|(k, v)| {
                    let v: Vec<String> = v.iter().map(|x| go_quote(x)).collect();
                    format!("{}:[]string{{{}}}", go_quote(k), v.join(", "))
                })
                .collect();
            format!("map[string][]string{{{}}}", e.join(", "))
        };
        format!(
            "&user.DefaultInfo{{Name:{}, UID:{}, Groups:{groups}, Extra:{extra}}}",
            go_quote(&self.name),
            go_quote(&self.uid)
        )
    }

    fn only_name(&self) -> bool {
        self.uid.is_empty() && self.groups.is_empty() && self.extra.is_empty()
    }
}

/// The `Impersonate-*` headers read; `Ok(None)` when there are none.
pub fn wanted(req: &Request) -> Result<Option<Wanted>, Box<Status>> {
    let mut w = Wanted {
        name: req.header("impersonate-user").unwrap_or("").to_string(),
        uid: req.header("impersonate-uid").unwrap_or("").to_string(),
        ..Wanted::default()
    };
    for (k, v) in &req.headers {
        let lower = k.to_ascii_lowercase();
        if lower == "impersonate-group" {
            w.groups.push(v.clone());
        } else if let Some(key) = lower.strip_prefix("impersonate-extra-") {
            let key = crate::http::parse::percent_decode(key, false).unwrap_or_else(|| key.into());
            w.extra.entry(key).or_default().push(v.clone());
        }
    }
    if w.name.is_empty() {
        if !w.uid.is_empty() || !w.groups.is_empty() || !w.extra.is_empty() {
            return Err(Box::new(Status::bad_request(&format!(
                "requested {} without impersonating a user name",
                w.go_value()
            ))));
        }
        return Ok(None);
    }
    Ok(Some(w))
}

/// The impersonation modes upstream tries, in its order
/// (`allImpersonationModes`; `associated-node` needs a service-account
/// requestor bound to a node, which the sim never authenticates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    ArbitraryNode,
    ServiceAccount,
    UserInfo,
    Legacy,
}

const MODES: [Mode; 4] = [
    Mode::ArbitraryNode,
    Mode::ServiceAccount,
    Mode::UserInfo,
    Mode::Legacy,
];

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::ArbitraryNode => "arbitrary-node",
            Mode::ServiceAccount => "serviceaccount",
            Mode::UserInfo => "user-info",
            Mode::Legacy => "",
        }
    }
}

fn node_name(user: &str) -> Option<&str> {
    let n = user.strip_prefix("system:node:")?;
    crate::sim::rules::check_dns1123_subdomain(n)
        .is_ok()
        .then_some(n)
}

fn service_account(user: &str) -> Option<(&str, &str)> {
    let rest = user.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then_some((ns, name))
}

/// Remembers, per requestor, the mode that last succeeded, and tries it
/// first (upstream's `modeIndexCache`; bounded at 10,000 names).
#[derive(Default)]
pub struct Impersonator {
    last: Mutex<HashMap<String, usize>>,
}

fn record(verb: &str, group: &str, resource: &str, name: &str) -> Attributes {
    Attributes {
        verb: verb.into(),
        resource_request: true,
        path: String::new(),
        api_group: group.into(),
        api_version: "v1".into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: String::new(),
        name: name.into(),
    }
}

impl Impersonator {
    /// The user `requestor` acts as for a request asking `attrs`, or the
    /// first error met (`getImpersonatedUser`).
    pub fn impersonate(
        &self,
        store: &Store,
        requestor: &UserInfo,
        wanted: &Wanted,
        attrs: &Attributes,
    ) -> Result<UserInfo, Refusal> {
        let first = self.last.lock().get(&requestor.name).copied();
        let mut first_err: Option<Box<Status>> = None;
        let order = first
            .into_iter()
            .chain((0..MODES.len()).filter(|i| Some(*i) != first));
        for i in order {
            match check(MODES[i], store, requestor, wanted, attrs) {
                Ok(Some(u)) => {
                    let mut last = self.last.lock();
                    if last.len() >= 10_000 {
                        last.clear();
                    }
                    last.insert(requestor.name.clone(), i);
                    return Ok(u);
                }
                Ok(None) => {}
                Err(e) => {
                    if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        Err(Refusal::Forbidden(first_err.unwrap_or_else(|| {
            Box::new(Status::forbidden_message_only(
                "all impersonation modes failed",
            ))
        })))
    }
}

fn check_one(store: &Store, requestor: &UserInfo, a: &Attributes) -> Result<(), Box<Status>> {
    let d = rbac::authorize(store, requestor, a);
    if d.allowed {
        return Ok(());
    }
    Err(Box::new(rbac::forbidden(&requestor.name, a, &d.reason)))
}

/// One mode's checks (`constrainedImpersonationModeState.check`, or
/// `impersonationModeState.check` for legacy); `Ok(None)`: the mode does
/// not apply to this user.
fn check(
    mode: Mode,
    store: &Store,
    requestor: &UserInfo,
    w: &Wanted,
    attrs: &Attributes,
) -> Result<Option<UserInfo>, Box<Status>> {
    let constrained = mode != Mode::Legacy;
    let applies = match mode {
        Mode::ArbitraryNode => w.only_name() && node_name(&w.name).is_some(),
        Mode::ServiceAccount => w.only_name() && service_account(&w.name).is_some(),
        Mode::UserInfo => node_name(&w.name).is_none() && service_account(&w.name).is_none(),
        Mode::Legacy => true,
    };
    if !applies {
        return Ok(None);
    }
    let verb = if constrained {
        format!("impersonate:{}", mode.name())
    } else {
        "impersonate".to_string()
    };
    if constrained {
        let mut on = attrs.clone();
        on.verb = format!("impersonate-on:{}:{}", mode.name(), attrs.verb);
        check_one(store, requestor, &on)?;
    }
    let user_group = if constrained {
        "authentication.k8s.io"
    } else {
        ""
    };
    let mut actual = UserInfo {
        name: w.name.clone(),
        uid: w.uid.clone(),
        groups: w.groups.clone(),
        extra: w.extra.clone(),
    };
    // The user name.
    let mut ua = record(&verb, user_group, "users", &w.name);
    if let Some(n) = node_name(&w.name).filter(|_| constrained) {
        ua.resource = "nodes".into();
        ua.name = n.into();
        actual.groups = vec!["system:nodes".into()];
    }
    if let Some((ns, n)) = service_account(&w.name) {
        ua.resource = "serviceaccounts".into();
        ua.namespace = ns.into();
        ua.name = n.into();
        if w.groups.is_empty() {
            actual.groups = vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
            ];
        }
    }
    check_one(store, requestor, &ua)?;
    if !w.uid.is_empty() {
        let a = record(&verb, "authentication.k8s.io", "uids", &w.uid);
        check_one(store, requestor, &a)?;
    }
    if !w.groups.is_empty() {
        let mut a = record(&verb, user_group, "groups", "");
        if constrained {
            if w.groups.iter().any(String::is_empty) {
                return Err(Box::new(rbac::forbidden(
                    &requestor.name,
                    &a,
                    "impersonating the empty string group is not allowed",
                )));
            }
            if w.groups.iter().any(|g| g == super::authn::MASTERS) {
                a.name = super::authn::MASTERS.into();
                return Err(Box::new(rbac::forbidden(
                    &requestor.name,
                    &a,
                    "impersonating the system:masters group is not allowed",
                )));
            }
        }
        for g in &w.groups {
            a.name = g.clone();
            check_one(store, requestor, &a)?;
        }
    }
    for (k, vs) in &w.extra {
        let mut a = record(&verb, "authentication.k8s.io", "userextras", "");
        a.subresource = k.clone();
        for v in vs {
            a.name = v.clone();
            check_one(store, requestor, &a)?;
        }
    }
    if actual.name == "system:anonymous" {
        if !actual.in_group(UNAUTHENTICATED) {
            actual.groups.push(UNAUTHENTICATED.into());
        }
    } else if !actual.in_group(UNAUTHENTICATED) && !actual.in_group(AUTHENTICATED) {
        actual.groups.push(AUTHENTICATED.into());
    }
    Ok(Some(actual))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request {
        Request::for_test("GET", "/api/v1/pods", headers)
    }

    #[test]
    fn groups_without_a_user_are_upstreams_bad_request() {
        let e = wanted(&req(&[
            ("impersonate-group", "g"),
            ("impersonate-uid", "7"),
        ]))
        .unwrap_err();
        assert_eq!(
            e.message,
            "requested &user.DefaultInfo{Name:\"\", UID:\"7\", Groups:[]string{\"g\"}, Extra:map[string][]string(nil)} without impersonating a user name"
        );
        assert_eq!(e.code, 400);
        let w = wanted(&req(&[
            ("impersonate-user", "system:serviceaccount:ns:sa"),
            ("impersonate-extra-scopes%2Fx", "v"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(w.extra["scopes/x"], vec!["v"]);
        assert_eq!(service_account(&w.name), Some(("ns", "sa")));
        assert!(wanted(&req(&[])).unwrap().is_none());
    }
}
