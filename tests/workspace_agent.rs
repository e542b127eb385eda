//! `kubegate workspace-agent` as a real process over real sockets
//! (docs/agent.md): the tree/apply/file/snapshot round trip with binary
//! content, atomic replacement under a concurrent reader, path traversal
//! and symlink escapes refused with nothing outside the root touched,
//! limits, tokens, malformed bodies, unknown routes, the protocol header,
//! and a clean exit on SIGTERM.
//!
//! Conditions are waited on with deadlines; every spawned agent is stopped
//! (SIGTERM, then SIGKILL) by its guard.

mod common;

use base64::Engine as _;
use common::{run_with_timeout, temp_dir, terminate, KUBEGATE};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "agent-test-token-0123456789";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

fn unb64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

struct AgentProc {
    child: Child,
    addr: String,
    /// The workspace root.
    root: PathBuf,
    /// A sibling of the root that no request may change.
    outside: PathBuf,
    http: ureq::Agent,
}

struct Resp {
    status: u16,
    protocol: Option<String>,
    body: Value,
}

impl Resp {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or("")
    }
    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or("")
    }
}

impl AgentProc {
    fn start(tag: &str, listen: &str, extra: &[&str]) -> AgentProc {
        let dir = temp_dir(tag);
        let root = dir.join("root");
        let outside = dir.join("outside");
        std::fs::create_dir_all(&root).expect("root");
        std::fs::create_dir_all(&outside).expect("outside");
        std::fs::write(outside.join("secret.txt"), b"outside").expect("secret");
        let mut child = Command::new(KUBEGATE)
            .arg("workspace-agent")
            .arg("--listen")
            .arg(listen)
            .arg("--root")
            .arg(&root)
            .args(extra)
            .env("KUBEGATE_WORKSPACE_TOKEN", TOKEN)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn kubegate workspace-agent");
        let Some(line) = common::first_line(&mut child, Duration::from_secs(30)) else {
            panic!("the agent did not print its listening line within 30 s");
        };
        let Some(url) = line
            .trim()
            .strip_prefix("kubegate workspace-agent listening on http://")
        else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("unexpected first line {line:?}");
        };
        // A wildcard listen address is reached through loopback.
        let addr = url.replace("0.0.0.0", "127.0.0.1");
        let http = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();
        AgentProc {
            child,
            addr,
            root,
            outside,
            http,
        }
    }

    fn request(&self, method: &str, target: &str, token: Option<&str>, body: &[u8]) -> Resp {
        let mut b = ureq::http::Request::builder()
            .method(method)
            .uri(format!("http://{}{target}", self.addr))
            .header("Content-Type", "application/json");
        if let Some(t) = token {
            b = b.header("Authorization", format!("Bearer {t}"));
        }
        let req = b.body(body.to_vec()).expect("request");
        let mut resp = self.http.run(req).expect("http");
        let status = resp.status().as_u16();
        let protocol = resp
            .headers()
            .get("x-kubegate-agent-protocol")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = resp
            .body_mut()
            .with_config()
            .limit(512 << 20)
            .read_to_string()
            .unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        assert_eq!(
            protocol.as_deref(),
            Some("1"),
            "{method} {target}: no protocol header"
        );
        Resp {
            status,
            protocol,
            body,
        }
    }

    fn get(&self, target: &str) -> Resp {
        self.request("GET", target, Some(TOKEN), b"")
    }

    fn post(&self, body: &Value) -> Resp {
        self.request(
            "POST",
            "/workspace",
            Some(TOKEN),
            body.to_string().as_bytes(),
        )
    }

    fn tree(&self) -> Vec<(String, String)> {
        let r = self.get("/workspace");
        assert_eq!(r.status, 200, "{:?}", r.body);
        r.body["files"]
            .as_array()
            .expect("files")
            .iter()
            .map(|f| {
                (
                    f["path"].as_str().expect("path").to_string(),
                    f["hash"].as_str().expect("hash").to_string(),
                )
            })
            .collect()
    }

    /// Every file and folder under the root and under the outside folder,
    /// with contents: the "nothing changed" witness.
    fn state(&self) -> Vec<(String, Option<Vec<u8>>)> {
        let mut out = Vec::new();
        list(&self.root, "root", &mut out);
        list(&self.outside, "outside", &mut out);
        out.sort();
        out
    }
}

fn list(dir: &Path, prefix: &str, out: &mut Vec<(String, Option<Vec<u8>>)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = format!("{prefix}/{}", e.file_name().to_string_lossy());
        let ft = e.file_type().expect("file type");
        if ft.is_symlink() {
            let target = std::fs::read_link(e.path()).expect("readlink");
            out.push((name, Some(target.to_string_lossy().as_bytes().to_vec())));
        } else if ft.is_dir() {
            out.push((name.clone(), None));
            list(&e.path(), &name, out);
        } else {
            out.push((name, Some(std::fs::read(e.path()).expect("read"))));
        }
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            terminate(&mut self.child, Duration::from_secs(10));
        }
    }
}

#[test]
fn round_trip_tree_apply_file_snapshot() {
    let a = AgentProc::start("agent-rt", "127.0.0.1:0", &[]);
    assert!(a.tree().is_empty());
    let binary: Vec<u8> = (0..=255u8).chain([0xff, 0xfe, 0, 0x80]).collect();
    let r = a.post(&json!({
        "write": [
            {"path": "src/main.js", "content": "console.log('hi')\n"},
            {"path": "./assets//logo.bin", "content": b64(&binary), "encoding": "base64"},
            {"path": "README.md", "content": "# hé\n", "encoding": "utf8"},
        ]
    }));
    assert_eq!(
        (r.status, &r.body),
        (200, &json!({"written": 3, "deleted": 0}))
    );
    assert_eq!(
        std::fs::read(a.root.join("assets/logo.bin")).expect("written"),
        binary
    );
    assert_eq!(
        a.tree(),
        vec![
            ("README.md".to_string(), sha("# hé\n".as_bytes())),
            ("assets/logo.bin".to_string(), sha(&binary)),
            ("src/main.js".to_string(), sha(b"console.log('hi')\n")),
        ]
    );
    // Files the app wrote are listed; excluded folders are not.
    std::fs::create_dir_all(a.root.join("node_modules/x")).expect("mkdir");
    std::fs::write(a.root.join("node_modules/x/index.js"), b"x").expect("write");
    std::fs::create_dir_all(a.root.join("src/.git")).expect("mkdir");
    std::fs::write(a.root.join("src/.git/HEAD"), b"ref").expect("write");
    std::fs::write(a.root.join("src/app.log"), b"log").expect("write");
    let paths: Vec<String> = a.tree().into_iter().map(|(p, _)| p).collect();
    assert_eq!(
        paths,
        ["README.md", "assets/logo.bin", "src/app.log", "src/main.js"]
    );

    // One file, both encodings.
    let r = a.get("/workspace/file?path=README.md");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, json!({"content": "# hé\n", "size": 6}));
    let r = a.get("/workspace/file?path=assets%2Flogo.bin&encoding=base64");
    assert_eq!(r.status, 200);
    assert_eq!(unb64(r.body["content"].as_str().expect("content")), binary);
    assert_eq!(r.body["size"], binary.len());
    let r = a.get("/workspace/file?path=assets/logo.bin&encoding=utf8");
    assert_eq!((r.status, r.code()), (400, "BAD_REQUEST"));
    assert!(r.message().contains("encoding=base64"), "{}", r.message());
    let r = a.get("/workspace/file?path=nope.txt");
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
    let r = a.get("/workspace/file?path=src");
    assert_eq!((r.status, r.code()), (400, "INVALID_PATH"));
    let r = a.get("/workspace/file?path=a&encoding=latin1");
    assert_eq!((r.status, r.code()), (400, "BAD_REQUEST"));
    let r = a.get("/workspace/file");
    assert_eq!((r.status, r.code()), (400, "BAD_REQUEST"));

    // Snapshot: every listed file, base64, with its hash.
    let r = a.get("/workspace/snapshot");
    assert_eq!(r.status, 200);
    let files = r.body["files"].as_array().expect("files");
    assert_eq!(files.len(), 4);
    for f in files {
        assert_eq!(f["encoding"], "base64");
        let content = unb64(f["content"].as_str().expect("content"));
        assert_eq!(f["hash"].as_str(), Some(sha(&content).as_str()));
        let on_disk = std::fs::read(a.root.join(f["path"].as_str().expect("path"))).expect("read");
        assert_eq!(content, on_disk);
    }

    // Deletes: a file, a folder with everything in it, a missing path
    // (not an error, not counted). Writes in the same request.
    let r = a.post(&json!({
        "write": [{"path": "src/main.js", "content": "v2"}],
        "delete": ["README.md", "assets", "never/existed.txt"],
    }));
    assert_eq!(
        (r.status, &r.body),
        (200, &json!({"written": 1, "deleted": 2}))
    );
    let paths: Vec<String> = a.tree().into_iter().map(|(p, _)| p).collect();
    assert_eq!(paths, ["src/app.log", "src/main.js"]);
    assert!(!a.root.join("assets").exists());

    // The snapshot restores into another workspace as it was.
    let snap = a.get("/workspace/snapshot").body;
    let b = AgentProc::start("agent-rt2", "127.0.0.1:0", &[]);
    let r = b.post(
        &json!({"write": snap["files"].as_array().expect("files").iter()
        .map(|f| json!({"path": f["path"], "content": f["content"], "encoding": f["encoding"]}))
        .collect::<Vec<_>>()}),
    );
    assert_eq!(r.status, 200, "{:?}", r.body);
    assert_eq!(b.tree(), a.tree());
    assert_eq!(b.post(&json!({})).body, json!({"written": 0, "deleted": 0}));
}

#[test]
fn writes_are_atomic_under_a_concurrent_reader() {
    let a = AgentProc::start("agent-atomic", "127.0.0.1:0", &[]);
    let one = "a".repeat(1 << 20);
    let two = "b".repeat(1 << 20);
    let r = a.post(&json!({"write": [{"path": "big/file.txt", "content": one}]}));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let path = a.root.join("big/file.txt");
    let stop = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = {
        let (stop, reads, path) = (stop.clone(), reads.clone(), path.clone());
        let (one, two) = (one.clone(), two.clone());
        std::thread::spawn(move || -> Result<(), String> {
            while !stop.load(Ordering::Acquire) {
                let got = std::fs::read(&path).map_err(|e| format!("read: {e}"))?;
                if got != one.as_bytes() && got != two.as_bytes() {
                    return Err(format!("a partial file: {} bytes", got.len()));
                }
                reads.fetch_add(1, Ordering::Relaxed);
            }
            Ok(())
        })
    };
    // Both bodies serialised once: the client's own JSON work would
    // otherwise dominate the test.
    let bodies = [&two, &one]
        .map(|c| json!({"write": [{"path": "big/file.txt", "content": c}]}).to_string());
    for i in 0..200 {
        let r = a.request("POST", "/workspace", Some(TOKEN), bodies[i % 2].as_bytes());
        assert_eq!(r.status, 200, "rewrite {i}: {:?}", r.body);
    }
    stop.store(true, Ordering::Release);
    let result = reader.join().expect("reader thread");
    assert_eq!(result, Ok(()));
    assert!(reads.load(Ordering::Relaxed) > 0, "the reader never read");
    // No temporary file is left beside it.
    let names: Vec<_> = std::fs::read_dir(a.root.join("big"))
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, vec![std::ffi::OsString::from("file.txt")]);
}

#[test]
fn bad_paths_are_refused_and_nothing_changes() {
    let a = AgentProc::start("agent-paths", "127.0.0.1:0", &[]);
    std::os::unix::fs::symlink(&a.outside, a.root.join("escape")).expect("symlink");
    std::os::unix::fs::symlink(a.outside.join("secret.txt"), a.root.join("secret"))
        .expect("symlink");
    std::fs::create_dir_all(a.root.join("sub")).expect("mkdir");
    std::os::unix::fs::symlink("../../outside", a.root.join("sub/up")).expect("symlink");
    let before = a.state();
    let bad = [
        "../outside/secret.txt",
        "a/../../x",
        "..",
        "/etc/passwd",
        &format!("{}/secret.txt", a.outside.display()),
        "a\u{0}b",
        "",
        ".",
        "escape/secret.txt",
        "escape/new.txt",
        "escape/deep/new.txt",
        "sub/up/secret.txt",
        "secret",
    ];
    for p in bad {
        // Alone, and beside a good write (all or nothing).
        for body in [
            json!({"write": [{"path": p, "content": "pwned"}]}),
            json!({"write": [{"path": "good.txt", "content": "ok"}, {"path": p, "content": "pwned"}]}),
            json!({"delete": [p]}),
            json!({"write": [{"path": "good.txt", "content": "ok"}], "delete": [p]}),
        ] {
            let r = a.post(&body);
            assert_eq!(
                (r.status, r.code()),
                (400, "INVALID_PATH"),
                "{p:?}: {:?}",
                r.body
            );
            assert!(
                r.message().contains(&format!("{p:?}")),
                "the reason names {p:?}: {}",
                r.message()
            );
        }
        let q: String = p.bytes().map(|b| format!("%{b:02X}")).collect();
        let r = a.get(&format!("/workspace/file?path={q}"));
        assert_eq!((r.status, r.code()), (400, "INVALID_PATH"), "read {p:?}");
    }
    assert_eq!(a.state(), before, "a refused request changed something");
    // The links' contents never appear in the tree or the snapshot.
    assert!(a.tree().is_empty());
    let r = a.get("/workspace/snapshot");
    assert_eq!(r.body, json!({"files": []}));
}

#[test]
fn limits_tokens_and_malformed_requests() {
    let a = AgentProc::start(
        "agent-limits",
        "0.0.0.0:0",
        &[
            "--max-file-bytes",
            "1000",
            "--max-files",
            "3",
            "--max-total-bytes",
            "2500",
        ],
    );
    let k = "x".repeat(1000);
    // Per file.
    let r = a.post(&json!({"write": [{"path": "big", "content": "x".repeat(1001)}]}));
    assert_eq!(
        (r.status, r.code()),
        (413, "WORKSPACE_LIMIT"),
        "{:?}",
        r.body
    );
    let r = a.post(
        &json!({"write": [{"path": "big", "content": b64(&[7; 1001]), "encoding": "base64"}]}),
    );
    assert_eq!(
        (r.status, r.code()),
        (413, "WORKSPACE_LIMIT"),
        "{:?}",
        r.body
    );
    // Total, then count.
    let r = a.post(&json!({"write": [
        {"path": "a", "content": k}, {"path": "b", "content": k}, {"path": "c", "content": "x".repeat(501)}
    ]}));
    assert_eq!(
        (r.status, r.code()),
        (413, "WORKSPACE_LIMIT"),
        "{:?}",
        r.body
    );
    assert!(a.tree().is_empty(), "a refused apply wrote something");
    let r = a.post(&json!({"write": [{"path": "a", "content": k}, {"path": "b", "content": k}, {"path": "c", "content": "c"}]}));
    assert_eq!(r.status, 200, "{:?}", r.body);
    let r = a.post(&json!({"write": [{"path": "d", "content": ""}]}));
    assert_eq!((r.status, r.code()), (413, "WORKSPACE_LIMIT"));
    assert!(r.message().contains("file limit"), "{}", r.message());
    // The request body cap (total as base64 + per-file overhead + 1 MiB):
    // a head announcing more is answered at once.
    let mut s = TcpStream::connect(&a.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        s,
        "POST /workspace HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        8 << 20
    )
    .expect("write");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
    assert!(text.contains("\"BODY_TOO_LARGE\""), "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("x-kubegate-agent-protocol: 1"),
        "{text}"
    );

    // Tokens: missing or wrong -> 401 and no change, on every route but
    // /healthz (unknown routes too).
    let before = a.state();
    let write = json!({"write": [{"path": "a", "content": "changed"}], "delete": ["b"]});
    for token in [None, Some("wrong"), Some(&TOKEN[..TOKEN.len() - 1])] {
        for (m, t) in [
            ("POST", "/workspace"),
            ("GET", "/workspace"),
            ("GET", "/workspace/file?path=a"),
            ("GET", "/workspace/snapshot"),
            ("GET", "/version"),
            ("GET", "/nope"),
        ] {
            let r = a.request(m, t, token, write.to_string().as_bytes());
            assert_eq!(
                (r.status, r.code()),
                (401, "UNAUTHORIZED"),
                "{m} {t} {token:?}"
            );
            assert!(!r.message().contains(TOKEN));
        }
    }
    assert_eq!(
        a.state(),
        before,
        "an unauthenticated request changed something"
    );
    let r = a.request("GET", "/healthz", None, b"");
    assert_eq!((r.status, &r.body), (200, &json!({"status": "ok"})));
    assert_eq!(r.protocol.as_deref(), Some("1"));

    // Version.
    let r = a.get("/version");
    assert_eq!(
        (r.status, &r.body),
        (
            200,
            &json!({"protocol": 1, "version": env!("CARGO_PKG_VERSION")})
        )
    );

    // Malformed and wrongly typed bodies, unknown fields and encodings.
    for body in [
        &b"{not json"[..],
        b"",
        b"[]",
        br#"{"write": "a"}"#,
        br#"{"write": [{"path": "a"}]}"#,
        br#"{"write": [{"path": "a", "content": 5}]}"#,
        br#"{"write": [{"path": "a", "content": "x", "encoding": "hex"}]}"#,
        br#"{"write": [{"path": "a", "content": "***", "encoding": "base64"}]}"#,
        br#"{"writes": []}"#,
        br#"{"delete": [1]}"#,
        br#"{"write": [["a", "x"]]}"#,
        b"null",
    ] {
        let r = a.request("POST", "/workspace", Some(TOKEN), body);
        assert_eq!(
            (r.status, r.code()),
            (400, "BAD_REQUEST"),
            "{}: {:?}",
            String::from_utf8_lossy(body),
            r.body
        );
    }
    assert_eq!(a.state(), before, "a malformed request changed something");

    // Routes.
    let r = a.get("/nope");
    assert_eq!((r.status, r.code()), (404, "NOT_FOUND"));
    let r = a.request("DELETE", "/workspace", Some(TOKEN), b"");
    assert_eq!((r.status, r.code()), (405, "METHOD_NOT_ALLOWED"));
    let r = a.request("POST", "/workspace/snapshot", Some(TOKEN), b"{}");
    assert_eq!((r.status, r.code()), (405, "METHOD_NOT_ALLOWED"));

    // A head with a bare LF is refused before any route: a proxy in front
    // could split its headers otherwise than we do.
    let raw = format!("GET /workspace HTTP/1.1\r\nHost: x\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    let mut s = TcpStream::connect(&a.addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(raw.as_bytes()).expect("write");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(text.contains("bare LF"), "{text}");
}

#[test]
fn sigterm_exits_zero_and_a_missing_token_is_refused() {
    let mut a = AgentProc::start("agent-term", "127.0.0.1:0", &[]);
    assert_eq!(a.get("/version").status, 200);
    assert_eq!(terminate(&mut a.child, Duration::from_secs(10)), Some(0));
    // The port is closed once it has exited.
    assert!(TcpStream::connect(&a.addr).is_err());

    let dir = temp_dir("agent-notoken");
    for env in [None, Some(""), Some("  ")] {
        let mut c = Command::new(KUBEGATE);
        c.arg("workspace-agent")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .arg("--root")
            .arg(&dir)
            .env_remove("KUBEGATE_WORKSPACE_TOKEN");
        if let Some(v) = env {
            c.env("KUBEGATE_WORKSPACE_TOKEN", v);
        }
        let out = run_with_timeout(c, None, Duration::from_secs(30));
        assert_eq!(out.code, Some(2), "{}", out.stderr_str());
        assert!(out.stdout_str().is_empty());
        assert!(out.stderr_str().contains("KUBEGATE_WORKSPACE_TOKEN"));
    }
    // Usage errors and a missing root are 2 as well.
    for args in [
        &["--max-files", "0"][..],
        &["--bogus"],
        &["--root", "/definitely/not/here"],
    ] {
        let mut c = Command::new(KUBEGATE);
        c.arg("workspace-agent")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env("KUBEGATE_WORKSPACE_TOKEN", TOKEN);
        let out = run_with_timeout(c, None, Duration::from_secs(30));
        assert_eq!(out.code, Some(2), "{args:?}: {}", out.stderr_str());
    }
    let _ = std::fs::remove_dir_all(&dir);
}
