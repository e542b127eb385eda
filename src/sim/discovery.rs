//! Discovery documents (docs/kubernetes.md#discovery-what-kubectl-needs):
//! `/api`, `/apis`, `/api/v1`,
//! `/apis/{group}[/{version}]` and `/version`, built from the one resource
//! table in `resources.rs`, so what is advertised is exactly what is served.
//! Plain JSON only: kubectl falls back from aggregated discovery on its own.

use super::resources::{ResourceInfo, ALL};
use serde_json::{json, Value};

/// `/version`: kubectl's dispatcher wrapper picks its binary by `minor`
/// (docs/kubernetes.md#observed-against-kubectl-132-and-the-python-client-37:
/// the sim reports the minor of the real control plane it is held to,
/// 1.36 (docs/control-plane.md); a dispatcher without that binary runs its
/// default, 1.32 here, whose exec speaks WebSocket v5).
pub fn version() -> Value {
    json!({
        "major": "1",
        "minor": "36",
        "gitVersion": "v1.36.0-kubegate",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}

/// `/api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ]
    })
}

fn groups() -> Vec<&'static str> {
    let mut g: Vec<&'static str> = ALL
        .iter()
        .map(|r| r.group)
        .filter(|g| !g.is_empty())
        .collect();
    g.sort_unstable();
    g.dedup();
    g
}

fn group_json(name: &str) -> Value {
    let gv = format!("{name}/v1");
    json!({
        "name": name,
        "versions": [{"groupVersion": gv, "version": "v1"}],
        "preferredVersion": {"groupVersion": gv, "version": "v1"}
    })
}

/// `/apis`.
pub fn api_group_list() -> Value {
    let groups: Vec<Value> = groups().into_iter().map(group_json).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}`, or None for an unknown group.
/// True when some served resource is in API group `group`.
pub fn serves_group(group: &str) -> bool {
    groups().contains(&group)
}

pub fn api_group(group: &str) -> Option<Value> {
    if !groups().contains(&group) {
        return None;
    }
    let mut g = group_json(group);
    if let Value::Object(m) = &mut g {
        m.insert("kind".into(), json!("APIGroup"));
        m.insert("apiVersion".into(), json!("v1"));
    }
    Some(g)
}

fn subresource_entry(r: &ResourceInfo, sub: &str) -> Value {
    let (kind, verbs): (&str, &[&str]) = match sub {
        "status" => (r.kind, &["get", "patch", "update"]),
        "scale" => ("Scale", &["get", "patch", "update"]),
        "exec" => ("PodExecOptions", &["create", "get"]),
        "attach" => ("PodAttachOptions", &["create", "get"]),
        "portforward" => ("PodPortForwardOptions", &["create", "get"]),
        "log" => ("Pod", &["get"]),
        "proxy" => (
            "PodProxyOptions",
            &["create", "delete", "get", "patch", "update"],
        ),
        _ => (r.kind, &["get"]),
    };
    let mut e = json!({
        "name": format!("{}/{}", r.plural, sub),
        "singularName": "",
        "namespaced": r.namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if sub == "scale" {
        if let Value::Object(m) = &mut e {
            m.insert("group".into(), json!("autoscaling"));
            m.insert("version".into(), json!("v1"));
        }
    }
    e
}

/// `/api/v1` (group "") or `/apis/{group}/v1`, or None when unknown.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    if version != "v1" || (!group.is_empty() && !groups().contains(&group)) {
        return None;
    }
    let mut resources = Vec::new();
    for r in ALL.iter().filter(|r| r.group == group) {
        let mut e = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs(),
        });
        if !r.short_names.is_empty() {
            if let Value::Object(m) = &mut e {
                m.insert("shortNames".into(), json!(r.short_names));
            }
        }
        if r.group == "apps" {
            if let Value::Object(m) = &mut e {
                m.insert("categories".into(), json!(["all"]));
            }
        }
        if r.plural == "pods" || r.plural == "services" {
            if let Value::Object(m) = &mut e {
                m.insert("categories".into(), json!(["all"]));
            }
        }
        // The Gateway API CRDs put every kind in the `gateway-api`
        // category (`kubectl get gateway-api`).
        if r.group == "gateway.networking.k8s.io" {
            if let Value::Object(m) = &mut e {
                m.insert("categories".into(), json!(["gateway-api"]));
            }
        }
        resources.push(e);
        for sub in r.subresources {
            resources.push(subresource_entry(r, sub));
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": gv,
        "resources": resources
    }))
}

/// `/openapi/v3`: the index of per-group-version documents. kubectl reads
/// it before `apply`/`create` to decide whether the server validates fields
/// itself (`fieldValidation`); see [`openapi_v3_doc`].
pub fn openapi_v3_index() -> Value {
    let mut paths = serde_json::Map::new();
    paths.insert(
        "api/v1".into(),
        json!({"serverRelativeURL": "/openapi/v3/api/v1?hash=kubegate-sim"}),
    );
    for g in groups() {
        paths.insert(
            format!("apis/{g}/v1"),
            json!({"serverRelativeURL": format!("/openapi/v3/apis/{g}/v1?hash=kubegate-sim")}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/v1`: a minimal
/// OpenAPI 3 document. It holds, for each kind, the PATCH operation with its
/// `x-kubernetes-group-version-kind` and the `fieldValidation` query
/// parameter — exactly what kubectl's query-parameter verifier looks for, so
/// kubectl leaves validation to the server instead of needing full schemas.
/// The sim accepts `fieldValidation` and does not reject unknown fields
/// (documented in docs/sim.md).
pub fn openapi_v3_doc(group: &str) -> Option<Value> {
    if !group.is_empty() && !groups().contains(&group) {
        return None;
    }
    let mut paths = serde_json::Map::new();
    for r in ALL.iter().filter(|r| r.group == group) {
        let base = if group.is_empty() {
            "/api/v1".to_string()
        } else {
            format!("/apis/{group}/v1")
        };
        let path = if r.namespaced {
            format!("{base}/namespaces/{{namespace}}/{}/{{name}}", r.plural)
        } else {
            format!("{base}/{}/{{name}}", r.plural)
        };
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let params = json!([
            {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
            {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
            {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
        ]);
        let op = json!({
            "operationId": format!("patch{}", r.kind),
            "x-kubernetes-action": "patch",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
        });
        let put = json!({
            "operationId": format!("replace{}", r.kind),
            "x-kubernetes-action": "put",
            "x-kubernetes-group-version-kind": gvk,
            "parameters": params,
            "responses": {"200": {"description": "OK"}},
        });
        paths.insert(path, json!({"patch": op, "put": put}));
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.36.0-kubegate"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertises_every_served_resource() {
        let core = resource_list("", "v1").expect("core");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for n in [
            "pods",
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "pods/status",
            "pods/log",
            "services",
            "configmaps",
            "secrets",
            "namespaces",
        ] {
            assert!(names.contains(&n), "{n} missing");
        }
        let apps = resource_list("apps", "v1").expect("apps");
        assert_eq!(apps["groupVersion"], "apps/v1");
        assert!(resource_list("batch", "v1").is_none());
        assert!(resource_list("", "v2").is_none());
        let groups = api_group_list();
        let g: Vec<&str> = groups["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert_eq!(
            g,
            vec![
                "apps",
                "authentication.k8s.io",
                "authorization.k8s.io",
                "coordination.k8s.io",
                "events.k8s.io",
                "gateway.networking.k8s.io",
                "networking.k8s.io",
                "rbac.authorization.k8s.io",
            ]
        );
        let gw = resource_list("gateway.networking.k8s.io", "v1").expect("gateway api");
        let names: Vec<&str> = gw["resources"]
            .as_array()
            .expect("array")
            .iter()
            .filter_map(|r| r["name"].as_str())
            .collect();
        for n in [
            "gatewayclasses",
            "gateways",
            "httproutes",
            "httproutes/status",
        ] {
            assert!(names.contains(&n), "{n} missing");
        }
        assert_eq!(version()["minor"], "36");
    }
}
