//! scripts/rbac.yaml read the way the API server's RBAC authorizer reads
//! it, for the two tests that hold the daemon to it: tests/rbac.rs (the
//! sim's request log) and tests/rbac_real.rs (the real control plane's
//! audit log). Also the file adapted to other namespaces as its own
//! comments say (docs/deploy.md#rbac, "Adapting"), for applying it to a
//! real cluster.

use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

pub const RBAC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/rbac.yaml");

/// The namespaces rbac.yaml is written for: the default session namespace,
/// the example workspace's project (config.example.toml) and the Gateway's
/// namespace of its gateway Role.
pub const FILE_SESSION_NS: &str = "default";
pub const FILE_WORKSPACE_NS: &str = "demo";
pub const FILE_GATEWAY_NS: &str = "infra";

/// One authorization check: (namespace or "" for cluster scope, apiGroup,
/// resource or resource/subresource, verb).
pub type Check = (String, String, String, String);

/// (apiGroup, resource[/sub], verb): what a rule grants.
pub type Triple = (String, String, String);

/// Per namespace ("" = cluster-wide), the (group, resource, verb) triples
/// granted to the daemon's identity, and every triple any role in the file
/// grants (used or not).
pub struct Grants {
    pub by_ns: BTreeMap<String, BTreeSet<Triple>>,
    pub all: BTreeSet<Triple>,
}

impl Grants {
    /// Whether the check is granted, in its namespace or cluster-wide.
    pub fn grants(&self, c: &Check) -> bool {
        let t = (c.1.clone(), c.2.clone(), c.3.clone());
        let cluster = self.by_ns.get("").is_some_and(|s| s.contains(&t));
        let here = !c.0.is_empty() && self.by_ns.get(&c.0).is_some_and(|s| s.contains(&t));
        cluster || here
    }
}

/// The file's YAML documents, as JSON values (empty documents left out).
pub fn documents(text: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    for d in yaml_serde::Deserializer::from_str(text) {
        let v = Value::deserialize(d).expect("rbac.yaml is valid YAML");
        if !v.is_null() {
            docs.push(v);
        }
    }
    docs
}

fn kind(d: &Value) -> String {
    d["kind"].as_str().unwrap_or("").to_string()
}

fn name(d: &Value) -> String {
    d["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn namespace(d: &Value) -> String {
    d["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// Reads the grants of the file's one ServiceAccount, checking the shape
/// both tests rely on: rules of apiGroups/resources/verbs only, no
/// wildcards, bindings that name that ServiceAccount only.
pub fn parse_rbac(text: &str) -> (Grants, Vec<Value>) {
    let docs = documents(text);
    let sa: Vec<&Value> = docs
        .iter()
        .filter(|d| kind(d) == "ServiceAccount")
        .collect();
    assert_eq!(sa.len(), 1, "one ServiceAccount, the daemon's identity");
    let (sa_name, sa_ns) = (name(sa[0]), namespace(sa[0]));
    // By (kind, namespace or "" for a ClusterRole, name).
    let mut roles: BTreeMap<(String, String, String), BTreeSet<Triple>> = BTreeMap::new();
    let mut all = BTreeSet::new();
    for d in docs
        .iter()
        .filter(|d| kind(d) == "Role" || kind(d) == "ClusterRole")
    {
        let mut set = BTreeSet::new();
        for r in d["rules"].as_array().expect("rules") {
            assert!(
                r.get("nonResourceURLs").is_none() && r.get("resourceNames").is_none(),
                "keep rules to apiGroups/resources/verbs: {r}"
            );
            let list = |k: &str| -> Vec<String> {
                r[k].as_array()
                    .unwrap_or_else(|| panic!("{k} in {r}"))
                    .iter()
                    .map(|x| x.as_str().expect("strings").to_string())
                    .collect()
            };
            for g in list("apiGroups") {
                for res in list("resources") {
                    for v in list("verbs") {
                        assert!(
                            g != "*" && res != "*" && v != "*",
                            "no wildcards in rbac.yaml: {r}"
                        );
                        set.insert((g.clone(), res.clone(), v.clone()));
                    }
                }
            }
        }
        all.extend(set.iter().cloned());
        let scope = if kind(d) == "Role" {
            namespace(d)
        } else {
            String::new()
        };
        roles.insert((kind(d), scope, name(d)), set);
    }
    let mut by_ns: BTreeMap<String, BTreeSet<Triple>> = BTreeMap::new();
    for b in docs
        .iter()
        .filter(|d| kind(d) == "RoleBinding" || kind(d) == "ClusterRoleBinding")
    {
        let subjects = b["subjects"].as_array().expect("subjects");
        assert!(
            subjects.iter().all(|s| s["kind"] == "ServiceAccount"
                && s["name"] == sa_name.as_str()
                && s["namespace"] == sa_ns.as_str()),
            "bindings name the daemon's ServiceAccount only: {b}"
        );
        let rk = b["roleRef"]["kind"]
            .as_str()
            .expect("roleRef.kind")
            .to_string();
        let rn = b["roleRef"]["name"]
            .as_str()
            .expect("roleRef.name")
            .to_string();
        let bound_ns = if kind(b) == "RoleBinding" {
            namespace(b)
        } else {
            String::new()
        };
        let scope = if rk == "Role" {
            bound_ns.clone()
        } else {
            String::new()
        };
        let rules = roles
            .get(&(rk.clone(), scope, rn.clone()))
            .unwrap_or_else(|| panic!("binding {} refers to a missing {rk} {rn}", name(b)));
        by_ns
            .entry(bound_ns)
            .or_default()
            .extend(rules.iter().cloned());
    }
    (Grants { by_ns, all }, docs)
}

/// The file's documents with their namespaces moved as its comments say
/// (the session namespace: the ServiceAccount, the sessions Role, its
/// binding and every subject; a project: the exec binding; the Gateway's:
/// the gateway Role and binding), `map` giving the new name of each of
/// the file's namespaces. Nothing else changes; a namespace the map does
/// not name fails.
pub fn adapted(docs: &[Value], map: &[(&str, &str)]) -> Vec<Value> {
    let to = |ns: &str| -> String {
        map.iter()
            .find(|(from, _)| *from == ns)
            .map(|(_, to)| to.to_string())
            .unwrap_or_else(|| panic!("rbac.yaml names namespace {ns:?}, which the map lacks"))
    };
    docs.iter()
        .map(|d| {
            let mut d = d.clone();
            if let Some(ns) = d["metadata"]["namespace"].as_str().map(str::to_string) {
                d["metadata"]["namespace"] = Value::String(to(&ns));
            }
            if let Some(subjects) = d.get_mut("subjects").and_then(Value::as_array_mut) {
                for s in subjects {
                    if let Some(ns) = s["namespace"].as_str().map(str::to_string) {
                        s["namespace"] = Value::String(to(&ns));
                    }
                }
            }
            d
        })
        .collect()
}
