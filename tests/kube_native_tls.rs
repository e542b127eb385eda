//! The client with the `native-tls` cargo feature (OpenSSL instead of
//! rustls for every client connection) against `kubegate sim --tls`: REST
//! create/get/list, a watch event, exec (stdin EOF, exit code 3, output
//! large enough to leave decrypted bytes inside OpenSSL), a client
//! certificate (`--client-ca`), and a PKCS#1 key refused with a clear error.
//! The connection comes from the sim's kubeconfig through the real loader.
//! REST and watch also run on the real control plane (`two_backends!`,
//! docs/control-plane.md): OpenSSL against kube-apiserver's TLS and token
//! auth.
//! Compiled only with the feature:
//! `cargo test --features native-tls --test kube_native_tls`.
#![cfg(feature = "native-tls")]

mod common;

use common::backend::Backend;
use common::SimProc;
use kubegate::kube::client::{
    Api, Client, ConfigMap, DeleteParams, KubeError, ListParams, Pod, WatchEvent, WatchParams,
};
use kubegate::kube::connection::{Anonymous, Connection};
use kubegate::kube::meta::ObjectMeta;
use kubegate::kube::remote::{exec, ExecOptions, Output, RemoteError};
use rustls_pki_types::{PrivateKeyDer, PrivatePkcs1KeyDer};
use serde_json::json;
use std::sync::mpsc::{channel, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

/// Aborts the test binary if the guard is not dropped within `secs`.
fn watchdog(secs: u64) -> crossbeam_channel::Sender<()> {
    let (tx, rx) = crossbeam_channel::bounded::<()>(0);
    std::thread::spawn(move || {
        if let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
            rx.recv_timeout(Duration::from_secs(secs))
        {
            eprintln!("watchdog: kube_native_tls test hung for {secs} s");
            std::process::abort();
        }
    });
    tx
}

fn connection(sim: &SimProc) -> Connection {
    let yaml = std::fs::read_to_string(&sim.kubeconfig).expect("kubeconfig");
    let conn = kubegate::kube::config::from_kubeconfig_str(&yaml, &sim.dir, None)
        .expect("load kubeconfig");
    assert!(conn.is_tls(), "{}", conn.server);
    assert!(!conn.tls.ca_certs.is_empty(), "the sim's CA");
    conn
}

fn cm(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("k".to_string(), "v".to_string())].into_iter().collect()),
        ..ConfigMap::default()
    }
}

fn box_pod() -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "box"},
        "spec": {"containers": [{"name": "main", "image": "busybox",
            "command": ["sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"]}]}
    }))
    .expect("pod")
}

fn wait_running(pods: &Api<Pod>, name: &str) {
    common::wait_for(&format!("{name} running"), Duration::from_secs(60), || {
        let p = pods.get(name).ok()?;
        let phase = serde_json::to_value(&p).ok()?["status"]["phase"].clone();
        (phase == "Running").then_some(())
    });
}

fn sh(script: &str) -> Vec<String> {
    ["sh", "-c", script].iter().map(|s| s.to_string()).collect()
}

two_backends!(rest_and_watch_over_native_tls, 120);
fn rest_and_watch_over_native_tls(b: &Backend) {
    let conn = || b.client.connection().clone();
    assert!(conn().is_tls(), "{}", conn().server);
    let client = Client::new(conn()).expect("client");
    let cms = Api::<ConfigMap>::namespaced(&client, &b.ns);

    // A watch from now on, on its own thread (a stream agent: native-tls too).
    let w = cms.watch(WatchParams::default());
    let stopper = w.stopper();
    let (tx, rx) = channel();
    let t = std::thread::spawn(move || {
        for item in w {
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    // The initial snapshot, then our create.
    match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(Ok(WatchEvent::Resynced { .. })) => {}
        other => panic!("initial watch item: {other:?}"),
    }

    let created = cms.create(&cm("n1")).expect("create");
    assert_eq!(created.metadata.name(), "n1");
    let got = cms.get("n1").expect("get");
    assert_eq!(
        got.data
            .as_ref()
            .and_then(|d| d.get("k"))
            .map(String::as_str),
        Some("v")
    );
    let list = cms.list(&ListParams::default()).expect("list");
    assert!(list.items.iter().any(|c| c.metadata.name() == "n1"));

    let ev = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Ok(WatchEvent::Added(c))) if c.metadata.name() == "n1" => break c,
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => panic!("watch error: {e:?}"),
            Err(RecvTimeoutError::Timeout) => panic!("no ADDED event"),
            Err(RecvTimeoutError::Disconnected) => panic!("the watch ended"),
        }
    };
    assert_eq!(ev.metadata.name(), "n1");
    stopper.stop();
    let _ = t.join();

    // A wrong token is the server's 401, not a TLS failure.
    let mut bad = conn();
    bad.credentials = Arc::new(kubegate::kube::connection::StaticToken("wrong".into()));
    let e = Api::<ConfigMap>::namespaced(&Client::new(bad).expect("client"), &b.ns)
        .list(&ListParams::default())
        .expect_err("wrong token");
    assert!(matches!(e, KubeError::Unauthorized(_)), "{e:?}");

    // A CA that did not sign the server's certificate: a transport error.
    let mut other = conn();
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("ca");
    other.tls.ca_certs = vec![ca.cert.der().clone()];
    let e = Api::<ConfigMap>::namespaced(&Client::new(other).expect("client"), &b.ns)
        .list(&ListParams::default())
        .expect_err("untrusted server");
    // OpenSSL's wording (rustls says "invalid peer certificate"): proof
    // that REST really went through native-tls.
    match &e {
        KubeError::Transport(m) => assert!(m.contains("certificate verify failed"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn exec_over_native_tls() {
    let _w = watchdog(240);
    let sim = SimProc::start(&["--tls", "--token", "t"]);
    let conn = connection(&sim);
    let client = Client::new(conn.clone()).expect("client");
    let pods = Api::<Pod>::namespaced(&client, "default");
    pods.create(&box_pod()).expect("create pod");
    wait_running(&pods, "box");

    // stdin to EOF, then exit 3; the output after the EOF arrives whole
    // (100k lines: many TLS records, short reads leave plaintext in OpenSSL).
    let opts = ExecOptions {
        stdin: true,
        ..ExecOptions::default()
    };
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("wc -c; seq 100000; echo err >&2; exit 3"),
        opts,
    )
    .expect("exec");
    let rx = p.output();
    let reader = std::thread::spawn(move || {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        for chunk in rx.iter() {
            match chunk {
                Output::Stdout(b) => out.extend_from_slice(&b),
                Output::Stderr(b) => err.extend_from_slice(&b),
                Output::Frame(f) => panic!("raw frames were not asked for: {f:?}"),
            }
        }
        (out, err)
    });
    let mut stdin = p.stdin();
    stdin.write(&vec![b'x'; 50_000]).expect("stdin");
    stdin.write(b"tail").expect("stdin");
    stdin.close().expect("close stdin");
    assert_eq!(p.wait().map(|s| s.code), Ok(3));
    let (out, err) = reader.join().expect("reader");
    assert_eq!(String::from_utf8_lossy(&err), "err\n");
    let text = String::from_utf8(out).expect("utf8");
    let mut lines = text.lines();
    assert_eq!(lines.next().map(str::trim), Some("50004"));
    let mut n = 0u64;
    for l in lines {
        n += 1;
        assert_eq!(l, n.to_string(), "line {n}");
    }
    assert_eq!(n, 100_000);

    // An untrusted server fails in OpenSSL (its wording: the exec path
    // really is native-tls).
    let mut other = conn.clone();
    let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("ca");
    other.tls.ca_certs = vec![ca.cert.der().clone()];
    match exec(
        &other,
        "default",
        "box",
        None,
        &sh("true"),
        ExecOptions::default(),
    ) {
        Err(e) => assert!(e.to_string().contains("certificate verify failed"), "{e}"),
        Ok(_) => panic!("an untrusted server was accepted"),
    }
    // insecure-skip-tls-verify accepts it (and the name is not checked).
    other.tls.insecure_skip_verify = true;
    other.tls.server_name = Some("not-the-sim.example".into());
    let p = exec(
        &other,
        "default",
        "box",
        None,
        &sh("exit 3"),
        ExecOptions::default(),
    )
    .expect("insecure exec");
    assert_eq!(p.wait().map(|s| s.code), Ok(3));
    // A wrong tls-server-name with verification on fails the handshake.
    let mut named = conn.clone();
    named.tls.server_name = Some("not-the-sim.example".into());
    assert!(exec(
        &named,
        "default",
        "box",
        None,
        &sh("true"),
        ExecOptions::default()
    )
    .is_err());
    let e = Api::<Pod>::namespaced(&Client::new(named).expect("client"), "default")
        .list(&ListParams::default())
        .expect_err("wrong server name");
    assert!(matches!(e, KubeError::Transport(_)), "{e:?}");

    // The server's answer before the upgrade still comes through.
    match exec(
        &conn,
        "default",
        "nope",
        None,
        &sh("true"),
        ExecOptions::default(),
    ) {
        Err(RemoteError::Api { code, .. }) => assert_eq!(code, 404),
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("exec into a missing pod succeeded"),
    }
}

#[test]
fn client_certificate_over_native_tls() {
    let _w = watchdog(180);
    let sim = SimProc::start(&["--tls", "--client-ca"]);
    let conn = connection(&sim);
    assert!(conn.tls.client_cert.is_some(), "the sim's client cert");
    let mut conn = conn;
    conn.credentials = Arc::new(Anonymous);

    let client = Client::new(conn.clone()).expect("client");
    let pods = Api::<Pod>::namespaced(&client, "default");
    pods.create(&box_pod()).expect("create with a client cert");
    assert_eq!(pods.get("box").expect("get").metadata.name(), "box");
    wait_running(&pods, "box");
    let p = exec(
        &conn,
        "default",
        "box",
        None,
        &sh("exit 3"),
        ExecOptions::default(),
    )
    .expect("exec with a client cert");
    assert_eq!(p.wait().map(|s| s.code), Ok(3));
    pods.delete(
        "box",
        &DeleteParams {
            grace_period: Some(0),
            ..DeleteParams::default()
        },
    )
    .expect("delete");

    // Without the certificate the sim refuses us.
    let mut anon = conn.clone();
    anon.tls.client_cert = None;
    let e = Api::<Pod>::namespaced(&Client::new(anon).expect("client"), "default")
        .list(&ListParams::default())
        .expect_err("no cert");
    assert!(matches!(e, KubeError::Unauthorized(_)), "{e:?}");

    // A PKCS#1 key: refused when the client is built, naming the fix.
    let mut pkcs1 = conn.clone();
    if let Some(cc) = pkcs1.tls.client_cert.as_mut() {
        cc.key = PrivateKeyDer::Pkcs1(PrivatePkcs1KeyDer::from(vec![0x30, 0x00]));
    }
    match Client::new(pkcs1.clone()) {
        Err(KubeError::Config(m)) => {
            assert!(m.contains("PKCS#8") && m.contains("openssl pkcs8"), "{m}")
        }
        Err(e) => panic!("{e:?}"),
        Ok(_) => panic!("a PKCS#1 key was accepted by native-tls"),
    }
    match exec(
        &pkcs1,
        "default",
        "box",
        None,
        &sh("true"),
        ExecOptions::default(),
    ) {
        Err(e) => assert!(e.to_string().contains("PKCS#8"), "{e}"),
        Ok(_) => panic!("a PKCS#1 key was accepted by native-tls"),
    }
}
