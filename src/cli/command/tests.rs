//! The top-level command line: the command word, `--config`, and the
//! sim's flags and credential rules.

use super::*;

fn v(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// The sim's range rule, as far as these tests need it.
fn range(s: &str) -> Result<(u32, u32), String> {
    match s.split_once('-') {
        Some((a, b)) => Ok((
            a.parse().map_err(|_| format!("{a:?} is not an id"))?,
            b.parse().map_err(|_| format!("{b:?} is not an id"))?,
        )),
        None => Err(format!("{s:?} is not FIRST-LAST")),
    }
}

fn parse_v(args: &[String]) -> Result<Command<'_>, UsageError> {
    parse(args, &range)
}

fn sim(args: &[&str]) -> Result<SimArgs, UsageError> {
    let mut all = v(&["sim"]);
    all.extend(v(args));
    match parse_v(&all)? {
        Command::Sim(a) => Ok(a),
        other => panic!("{args:?}: {other:?}"),
    }
}

fn sim_err(args: &[&str]) -> String {
    sim(args).expect_err(&format!("{args:?}")).0
}

#[test]
fn the_command_word() {
    let a = v(&["exec", "-it", "d"]);
    assert_eq!(parse_v(&a), Ok(Command::Client(Client::Exec, &a[1..])));
    for (word, c) in [
        ("workspaces", Client::Workspaces),
        ("sessions", Client::Sessions),
        ("attach", Client::Attach),
        ("port-forward", Client::PortForward),
        ("dev", Client::Dev),
    ] {
        let a = v(&[word, "--help"]);
        assert_eq!(parse_v(&a), Ok(Command::Client(c, &a[1..])));
    }
    let a = v(&["app-runner", "--", "sh"]);
    assert_eq!(parse_v(&a), Ok(Command::AppRunner(&a[1..])));
    let a = v(&["install-self", "/x"]);
    assert_eq!(parse_v(&a), Ok(Command::InstallSelf(&a[1..])));
    let a = v(&["workspace-agent", "--root", "/w"]);
    assert_eq!(parse_v(&a), Ok(Command::WorkspaceAgent(&a[1..])));
    for h in ["-h", "--help", "help"] {
        assert_eq!(parse_v(&v(&[h])), Ok(Command::Help));
    }
    for w in ["--version", "version"] {
        assert_eq!(parse_v(&v(&[w])), Ok(Command::Version));
    }
    assert_eq!(parse_v(&[]), Err(UsageError("missing command".into())));
    assert_eq!(
        parse_v(&v(&["frob"])),
        Err(UsageError("unknown command \"frob\"".into()))
    );
    assert!(USAGE.starts_with("usage: kubegate "));
    assert!(USAGE.contains("kubegate serve --config FILE"));
}

#[test]
fn serve_and_check_config_take_one_config_flag() {
    for word in ["serve", "check-config"] {
        let want = PathBuf::from("/etc/kubegate.toml");
        for args in [
            v(&[word, "--config", "/etc/kubegate.toml"]),
            v(&[word, "--config=/etc/kubegate.toml"]),
        ] {
            match parse_v(&args) {
                Ok(Command::Serve(p)) | Ok(Command::CheckConfig(p)) => assert_eq!(p, want),
                other => panic!("{args:?}: {other:?}"),
            }
        }
        for (args, said) in [
            (v(&[word]), "--config FILE is required"),
            (v(&[word, "--config"]), "--config needs a value"),
            (v(&[word, "--config="]), "--config must not be empty"),
            (v(&[word, "--bogus"]), "unknown option --bogus"),
            (v(&[word, "x"]), "unexpected argument \"x\""),
        ] {
            match parse_v(&args) {
                Err(e) => assert!(e.0.contains(said), "{args:?}: {e}"),
                other => panic!("{args:?}: {other:?}"),
            }
        }
    }
}

#[test]
fn sim_flags() {
    let a = sim(&[
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
    assert_eq!(a.listen, "127.0.0.1:6443".parse().expect("addr"));
    assert_eq!(a.kubeconfig_out, Some(PathBuf::from("/tmp/kc")));
    assert_eq!(a.state_dir, Some(PathBuf::from("/s")));
    assert_eq!(a.namespaces, v(&["a", "b"]));
    assert_eq!(a.fail_images, v(&["bad:*"]));
    assert_eq!(a.request_log, Some(PathBuf::from("/r.log")));
    assert_eq!(a.uid_range, Some(Some((300_000, 300_010))));
    assert_eq!(a.pods_dir, Some(PathBuf::from("/p")));
    assert!(a.allow_remote);
    // No credential flag: a random token, hence TLS.
    let t = a.token.as_deref().expect("a random token");
    assert_eq!(t.len(), 64);
    assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(a.tls && !a.deprecated_token);
    assert!(a.warnings().is_empty());
    assert!(!format!("{a:?}").contains(t), "the token leaked");

    let a = sim(&["--no-auth", "--uid-range", "off"]).expect("ok");
    assert_eq!((a.token.as_deref(), a.tls), (None, false));
    assert_eq!(a.uid_range, Some(None));
    assert_eq!(a.listen, SIM_DEFAULT_LISTEN);
    assert!(a.warnings()[0].starts_with("--no-auth: anyone who reaches 127.0.0.1:0"));

    let a = sim(&["--token", "t"]).expect("ok");
    assert_eq!(a.token.as_deref(), Some("t"));
    assert!(a.tls && a.deprecated_token);
    assert!(a.warnings()[0].starts_with("--token is deprecated"));

    // The client certificate is the credential: no token.
    let a = sim(&["--client-ca", "--kubeconfig-out", "/kc"]).expect("ok");
    assert_eq!((a.token.as_deref(), a.tls), (None, true));
    assert!(a.warnings().is_empty());
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
    let a = sim(&["--token-file", path]).expect("ok");
    assert_eq!(a.token.as_deref(), Some("s3cr3t"));
    assert!(a.tls && !a.deprecated_token);
    std::fs::write(&f, "\n").expect("write");
    assert!(sim_err(&["--token-file", path]).contains("the file is empty"));
    std::fs::write(&f, "two words").expect("write");
    assert!(sim_err(&["--token-file", path]).contains("one line without spaces"));
    let missing = dir.join("missing.token");
    assert!(sim_err(&["--token-file", missing.to_str().expect("utf-8")]).contains("missing.token"));
    let _ = std::fs::remove_dir_all(&dir);
}
