use super::*;
use serde_json::{json, Value};

const LIMITS: BundleLimits = BundleLimits {
    max_bundle_bytes: 100,
    max_file_bytes: 40,
    max_files: 4,
};

fn base() -> Value {
    json!({
        "apps": [
            {"name": "web", "entry": "src/main.js", "ports": [{"port": 8080}]},
            {"name": "worker", "entry": "worker.sh", "io": "streams", "command": ["sh", "worker.sh"],
             "ports": [{"port": 8080, "protocol": "udp"}], "runner": false, "image": "alpine:3"}
        ],
        "env": {"MODE": "dev", "A_1": "$(x)"},
        "bundle": {"files": [
            {"path": "src/main.js", "content": "console.log(1)"},
            {"path": "worker.sh", "content": "ZWNobyBoaQ==", "encoding": "base64"}
        ]},
        "image": "node:22",
        "pullPolicy": "always"
    })
}

fn start(v: &Value) -> Result<(SessionSpec, Bundle), ApiError> {
    parse_start(v.to_string().as_bytes(), LIMITS)
}

fn code(v: &Value) -> (Code, String) {
    let e = start(v).expect_err("must fail");
    (e.code, e.message)
}

#[test]
fn a_valid_request() {
    let (s, b) = start(&base()).unwrap();
    assert_eq!(s.apps.len(), 2);
    let web = &s.apps[0];
    assert_eq!(web.name, "web");
    assert_eq!(web.container(), "app-web");
    assert_eq!(web.io, Io::Tty);
    assert!(web.runner);
    assert_eq!(web.ports, vec![Port::tcp(8080)]);
    let w = &s.apps[1];
    assert_eq!(w.io, Io::Streams);
    assert!(!w.runner);
    assert_eq!(
        w.ports,
        vec![Port {
            port: 8080,
            protocol: Protocol::Udp
        }]
    );
    assert_eq!(
        w.command.as_deref(),
        Some(&["sh".to_string(), "worker.sh".into()][..])
    );
    assert_eq!(
        s.env,
        vec![("A_1".into(), "$(x)".into()), ("MODE".into(), "dev".into())]
    );
    assert_eq!(s.image.as_deref(), Some("node:22"));
    assert_eq!(s.pull_policy, Some(PullPolicy::Always));
    assert_eq!(b.files[1].data, b"echo hi");
    assert_eq!(b.total_bytes, 14 + 7);
}

#[test]
fn malformed_shapes_are_bad_request() {
    let cases: Vec<Value> = vec![
        json!({"apps": [], "bundle": {"files": []}}),
        json!({"bundle": {"files": []}}),
        json!({"apps": [{"name": "a", "entry": "a"}]}),
        {
            let mut v = base();
            v["extra"] = json!(1);
            v
        },
        {
            let mut v = base();
            v["apps"][0]["entrypoint"] = json!("x");
            v
        },
        {
            let mut v = base();
            v["apps"][0]["io"] = json!("pty");
            v
        },
        {
            let mut v = base();
            v["pullPolicy"] = json!("sometimes");
            v
        },
        {
            let mut v = base();
            v["bundle"]["files"][0]["encoding"] = json!("hex");
            v
        },
        {
            let mut v = base();
            v["apps"][0]["ports"] = json!([8080]);
            v
        },
        {
            let mut v = base();
            v["apps"][0]["ports"][0]["port"] = json!(0);
            v
        },
        {
            let mut v = base();
            v["apps"][0]["ports"][0]["port"] = json!(65536);
            v
        },
        {
            let mut v = base();
            v["apps"][0]["command"] = json!([]);
            v
        },
        {
            let mut v = base();
            v["apps"][0]["command"] = json!(["", "x"]);
            v
        },
        {
            let mut v = base();
            v["apps"][0]["image"] = json!("a b");
            v
        },
        {
            let mut v = base();
            v["image"] = json!("");
            v
        },
        {
            let mut v = base();
            v["env"] = json!({"1X": "a"});
            v
        },
        {
            let mut v = base();
            v["env"] = json!({"KUBEGATE_ENTRY": "a"});
            v
        },
        {
            let mut v = base();
            v["env"] = json!({"POD_IP": "a"});
            v
        },
        {
            let mut v = base();
            v["env"] = json!({"X": 3});
            v
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        assert_eq!(code(c).0, Code::BadRequest, "case {i}: {c}");
    }
    let e = parse_start(b"{not json", LIMITS).unwrap_err();
    assert_eq!(e.code, Code::BadRequest);
    let mut v = base();
    v["apps"][0]["ports"][0]["port"] = json!(70000);
    assert!(
        code(&v).1.contains("apps[0].ports[0].port"),
        "{:?}",
        code(&v)
    );
    let mut v = base();
    v["apps"] = json!((0..33)
        .map(|i| json!({"name": format!("a{i}"), "entry": "x"}))
        .collect::<Vec<_>>());
    assert_eq!(code(&v).0, Code::BadRequest);
}

#[test]
fn app_names() {
    let with_name = |n: &str| {
        let mut v = base();
        v["apps"][0]["name"] = json!(n);
        v
    };
    for n in ["Web", "-web", "web-", "we_b", "", "a.b", &"a".repeat(60)] {
        assert_eq!(code(&with_name(n)).0, Code::InvalidAppName, "{n:?}");
    }
    assert!(start(&with_name(&"a".repeat(59))).is_ok());
    let (c, m) = code(&with_name("workspace"));
    assert_eq!(c, Code::ReservedAppName);
    assert!(m.contains("apps[0].name"), "{m}");
    let (c, m) = code(&with_name("worker"));
    assert_eq!(c, Code::DuplicateAppName);
    assert!(m.contains("apps[1].name"), "{m}");
}

#[test]
fn port_conflicts() {
    let mut v = base();
    v["apps"][1]["ports"][0]["protocol"] = json!("tcp");
    let (c, m) = code(&v);
    assert_eq!(c, Code::PortConflict);
    assert!(m.contains("app \"web\""), "{m}");
    let mut v = base();
    v["apps"][0]["ports"] = json!([{"port": 3000}, {"port": 3000, "protocol": "tcp"}]);
    assert_eq!(code(&v).0, Code::PortConflict);
    // Same number, different protocols: fine (the base request has it).
    assert!(start(&base()).is_ok());
    // Ports kubegate uses inside the pod.
    for p in [8099, 9230, 9231] {
        let mut v = base();
        v["apps"][0]["ports"] = json!([{"port": p}]);
        assert_eq!(code(&v).0, Code::PortConflict, "{p}");
    }
    // 9232 would be a third app's debug port; with two apps it is free,
    // and udp 8099 does not clash with the agent.
    let mut v = base();
    v["apps"][0]["ports"] = json!([{"port": 9232}, {"port": 8099, "protocol": "udp"}]);
    assert!(start(&v).is_ok());
}

#[test]
fn paths() {
    for p in [
        "",
        "/etc/passwd",
        "../x",
        "a/../b",
        "a/./b",
        "./a",
        "a//b",
        "a/",
        "a\0b",
        "..",
        ".",
    ] {
        let mut v = base();
        v["bundle"]["files"][0]["path"] = json!(p);
        assert_eq!(code(&v).0, Code::InvalidPath, "{p:?}");
        let mut v = base();
        v["apps"][0]["entry"] = json!(p);
        assert_eq!(code(&v).0, Code::InvalidPath, "entry {p:?}");
    }
    let long = "a".repeat(256);
    assert!(check_canonical_path(&long).is_err());
    assert!(check_canonical_path(&"a/".repeat(2100)).is_err());
    for ok in [
        "a",
        "a/b/c.js",
        ".hidden/x",
        "a..b",
        "with space/ü.txt",
        "a\\b",
    ] {
        assert!(check_canonical_path(ok).is_ok(), "{ok:?}");
    }
}

/// The relation `CanonicalPathError`'s doc states: what the agent's
/// `normalize` returns is canonical, and a loose path the agent would
/// normalise is not.
#[test]
fn canonical_paths_are_what_the_agent_normalises_to() {
    use crate::agent::wire::paths::normalize;
    for loose in [
        "./a",
        "a//b/",
        "a/./b",
        "x/../a/b",
        &format!("{}/", "n".repeat(255)),
    ] {
        let n = normalize(loose).unwrap();
        assert!(check_canonical_path(&n).is_ok(), "{loose:?} -> {n:?}");
        assert!(check_canonical_path(loose).is_err(), "{loose:?}");
    }
    for p in ["a", "a/b/c.js", ".hidden/x", "a..b"] {
        assert_eq!(normalize(p).as_deref(), Ok(p));
    }
}

#[test]
fn bundle_limits() {
    // Bad base64.
    let mut v = base();
    v["bundle"]["files"][1]["content"] = json!("not base64!");
    assert_eq!(code(&v).0, Code::InvalidBundle);
    // One file over max_file_bytes (decoded size counts).
    let mut v = base();
    v["bundle"]["files"][0]["content"] = json!("x".repeat(41));
    let (c, m) = code(&v);
    assert_eq!(c, Code::InvalidBundle);
    assert!(m.contains("bundle.files[0]"), "{m}");
    let mut v = base();
    v["bundle"]["files"][0]["content"] = json!("x".repeat(40));
    assert!(start(&v).is_ok());
    // Total over max_bundle_bytes.
    let mut v = base();
    v["bundle"]["files"] = json!([
        {"path": "src/main.js", "content": "x".repeat(40)},
        {"path": "worker.sh", "content": "x".repeat(40)},
        {"path": "c", "content": "x".repeat(21)},
    ]);
    assert_eq!(code(&v).0, Code::InvalidBundle);
    // Too many files.
    let mut v = base();
    v["bundle"]["files"] = json!((0..5)
        .map(|i| json!({"path": format!("f{i}"), "content": ""}))
        .collect::<Vec<_>>());
    assert_eq!(code(&v).0, Code::InvalidBundle);
    // Twice the same path; a file that is another's folder.
    let mut v = base();
    v["bundle"]["files"][1]["path"] = json!("src/main.js");
    assert_eq!(code(&v).0, Code::InvalidBundle);
    let mut v = base();
    v["bundle"]["files"][1] = json!({"path": "src", "content": ""});
    v["apps"][1]["entry"] = json!("src");
    let (c, m) = code(&v);
    assert_eq!(c, Code::InvalidBundle);
    assert!(m.contains("both a file and the folder"), "{m}");
    // The entry must be in the bundle.
    let mut v = base();
    v["apps"][0]["entry"] = json!("src/other.js");
    let (c, m) = code(&v);
    assert_eq!(c, Code::InvalidBundle);
    assert!(m.contains("apps[0].entry"), "{m}");
}

#[test]
fn set_apps_checks_apps_only() {
    let body = json!({"apps": [{"name": "api", "entry": "not/in/any/bundle.js", "ports": [{"port": 80}]}]});
    let apps = parse_set_apps(body.to_string().as_bytes()).unwrap();
    assert_eq!(apps[0].entry, "not/in/any/bundle.js");
    let e = parse_set_apps(br#"{"apps": [{"name": "workspace", "entry": "a"}]}"#).unwrap_err();
    assert_eq!(e.code, Code::ReservedAppName);
    let e = parse_set_apps(br#"{"apps": [], "x": 1}"#).unwrap_err();
    assert_eq!(e.code, Code::BadRequest);
    let e = parse_set_apps(br#"{"apps": [{"name": "a", "entry": "/abs"}]}"#).unwrap_err();
    assert_eq!(e.code, Code::InvalidPath);
}
