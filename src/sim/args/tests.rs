//! `kubegate sim`'s flags and credential rules.

use super::*;
use crate::sim::cluster::DEFAULT_LISTEN;

fn v(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn sim(args: &[&str]) -> Result<SimCommand, UsageError> {
    parse(&v(args))
}

fn sim_err(args: &[&str]) -> String {
    sim(args).expect_err(&format!("{args:?}")).0
}

#[test]
fn sim_flags() {
    let c = sim(&[
        "--listen=127.0.0.1:6443",
        "--kubeconfig-out",
        "/tmp/kc",
        "--state-dir",
        "/s",
        "--namespace",
        "a",
        "--namespace=b",
        "--fail-image",
        "bad:*",
        "--request-log",
        "/r.log",
        "--uid-range",
        "300000-300010",
        "--pods-dir",
        "/p",
        "--allow-remote",
    ])
    .expect("ok");
    let a = &c.opts;
    assert_eq!(a.listen, "127.0.0.1:6443".parse().expect("addr"));
    assert_eq!(a.kubeconfig_out, Some(PathBuf::from("/tmp/kc")));
    assert_eq!(a.state_dir, Some(PathBuf::from("/s")));
    assert_eq!(a.namespaces, v(&["a", "b"]));
    assert_eq!(a.fail_images, v(&["bad:*"]));
    assert_eq!(a.request_log, Some(PathBuf::from("/r.log")));
    assert_eq!(a.uid_range, Some((300_000, 300_010)));
    assert_eq!(a.pods_dir, Some(PathBuf::from("/p")));
    assert!(a.allow_remote);
    // No credential flag: a random token, hence TLS.
    let t = a.token.as_deref().expect("a random token");
    assert_eq!(t.len(), 64);
    assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(a.tls && !c.deprecated_token);
    assert!(c.warnings().is_empty());
    assert!(!format!("{c:?}").contains(t), "the token leaked");

    // Without --uid-range: the sim's default range.
    let c = sim(&["--no-auth"]).expect("ok");
    assert_eq!(c.opts.uid_range, Some(pod_users::DEFAULT_UID_RANGE));

    let c = sim(&["--no-auth", "--uid-range", "off"]).expect("ok");
    assert_eq!((c.opts.token.as_deref(), c.opts.tls), (None, false));
    assert_eq!(c.opts.uid_range, None);
    assert_eq!(c.opts.listen, DEFAULT_LISTEN);
    assert!(c.warnings()[0].starts_with("--no-auth: anyone who reaches 127.0.0.1:0"));

    let c = sim(&["--token", "t"]).expect("ok");
    assert_eq!(c.opts.token.as_deref(), Some("t"));
    assert!(c.opts.tls && c.deprecated_token);
    assert!(c.warnings()[0].starts_with("--token is deprecated"));

    // The client certificate is the credential: no token.
    let c = sim(&["--client-ca", "--kubeconfig-out", "/kc"]).expect("ok");
    assert_eq!((c.opts.token.as_deref(), c.opts.tls), (None, true));
    assert!(c.warnings().is_empty());
}

#[test]
fn sim_usage_errors() {
    for (args, said) in [
        (
            &["--no-auth", "--token", "t"][..],
            "--token and --no-auth exclude each other",
        ),
        (&["--token-file", "f", "--token", "t"], "exclude each other"),
        (
            &["--no-auth", "--client-ca"],
            "--no-auth and --client-ca exclude each other",
        ),
        (
            &["--no-auth", "--allow-remote"],
            "would run anyone's commands",
        ),
        (&[], "written only into the kubeconfig"),
        (&["--token="], "--token must not be empty"),
        (&["--token-file="], "--token-file must not be empty"),
        (&["--listen", "nowhere"], "expected IP:PORT"),
        (&["--listen"], "--listen needs a value"),
        (
            &["--no-auth", "--uid-range", "x"],
            "--uid-range: \"x\" is not FIRST-LAST",
        ),
        (&["--no-auth", "--bogus"], "unknown option --bogus"),
        (&["--no-auth", "--tls=yes"], "--tls takes no value"),
    ] {
        let e = sim_err(args);
        assert!(e.contains(said), "{args:?}: {e}");
    }
}

#[test]
fn sim_token_files() {
    let dir = std::env::temp_dir().join(format!("kubegate-sim-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let f = dir.join("token");
    let path = f.to_str().expect("utf-8");
    std::fs::write(&f, "  s3cr3t\n").expect("write");
    let c = sim(&["--token-file", path]).expect("ok");
    assert_eq!(c.opts.token.as_deref(), Some("s3cr3t"));
    assert!(c.opts.tls && !c.deprecated_token);
    std::fs::write(&f, "\n").expect("write");
    assert!(sim_err(&["--token-file", path]).contains("the file is empty"));
    std::fs::write(&f, "two words").expect("write");
    assert!(sim_err(&["--token-file", path]).contains("one line without spaces"));
    let missing = dir.join("missing.token");
    assert!(sim_err(&["--token-file", missing.to_str().expect("utf-8")]).contains("missing.token"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn identity_flags() {
    let dir = std::env::temp_dir().join(format!("kubegate-args-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let csv = dir.join("tokens.csv");
    std::fs::write(&csv, "t1,alice,uid-a,\"devs\"\n").expect("write");
    let csv = csv.to_str().expect("utf-8");
    // The file's users alone: no kubeconfig needed, TLS implied, no admin.
    let c = sim(&["--token-auth-file", csv, "--audit-log", "/a.log"]).expect("ok");
    assert_eq!(c.opts.token_users.len(), 1);
    assert!(c.opts.tls && c.opts.token.is_none());
    assert_eq!(c.opts.audit_log.as_deref(), Some(Path::new("/a.log")));
    assert!(c.warnings().is_empty());
    // With a kubeconfig the admin token is made as well.
    let c = sim(&["--token-auth-file", csv, "--kubeconfig-out", "/kc"]).expect("ok");
    assert!(c.opts.token.is_some());
    assert!(sim_err(&["--token-auth-file", csv, "--no-auth"]).contains("--no-auth excludes"));
    std::fs::write(dir.join("bad.csv"), "a,b,c\nx,y\n").expect("write");
    let bad = dir.join("bad.csv");
    let e = sim_err(&["--token-auth-file", bad.to_str().expect("utf-8")]);
    assert!(
        e.contains(": line 2: a record must have at least 3 columns"),
        "{e}"
    );
    std::fs::write(dir.join("ca.pem"), "not a certificate").expect("write");
    let ca = dir.join("ca.pem");
    let e = sim_err(&["--client-ca-file", ca.to_str().expect("utf-8"), "--no-auth"]);
    assert!(e.contains("no PEM certificate"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}
