//! The client commands' argument parsing: every flag, fallback and usage
//! error.

use super::*;
use std::collections::HashMap;

fn v(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| m.get(k).cloned()
}

fn exec(args: &[&str], env: &[(&str, &str)]) -> Result<Parsed<ExecArgs>, CliError> {
    parse_exec(&v(args), &env_of(env))
}

fn exec_ok(args: &[&str], env: &[(&str, &str)]) -> ExecArgs {
    match exec(args, env) {
        Ok(Parsed::Run(a)) => a,
        other => panic!("{args:?}: {other:?}"),
    }
}

fn exec_err(args: &[&str], env: &[(&str, &str)]) -> CliError {
    match exec(args, env) {
        Err(e) => e,
        other => panic!("{args:?}: expected an error, got {other:?}"),
    }
}

const TOKEN: (&str, &str) = ("KUBEGATE_TOKEN", "tok");

#[test]
fn exec_full_command_line() {
    let a = exec_ok(
        &[
            "-i",
            "-t",
            "-c",
            "main",
            "--workspace",
            "demo/demo-uid",
            "--server=https://gw.example:8443/prefix",
            "--token",
            "secret",
            "--ca-file",
            "/etc/ca.pem",
            "hello",
            "--",
            "sh",
            "-c",
            "echo hi; exit 3",
        ],
        &[],
    );
    assert!(a.stdin && a.tty);
    assert_eq!(a.container.as_deref(), Some("main"));
    assert_eq!((a.project.as_str(), a.uid.as_str()), ("demo", "demo-uid"));
    assert_eq!(a.deployment, "hello");
    assert_eq!(a.command, v(&["sh", "-c", "echo hi; exit 3"]));
    assert_eq!(a.common.server, "https://gw.example:8443/prefix");
    assert_eq!(a.common.token, TokenSource::Value("secret".into()));
    assert_eq!(a.common.ca_file, Some(PathBuf::from("/etc/ca.pem")));
}

#[test]
fn exec_defaults_and_env_fallbacks() {
    let a = exec_ok(
        &["hello", "--", "ls"],
        &[TOKEN, ("KUBEGATE_WORKSPACE", "p/u")],
    );
    assert!(!a.stdin && !a.tty);
    assert_eq!(a.container, None);
    assert_eq!(a.common.server, DEFAULT_SERVER);
    assert_eq!(a.common.token, TokenSource::Value("tok".into()));
    assert_eq!((a.project.as_str(), a.uid.as_str()), ("p", "u"));
    let a = exec_ok(
        &["hello", "--", "ls"],
        &[
            TOKEN,
            ("KUBEGATE_WORKSPACE", "p/u"),
            ("KUBEGATE_SERVER", "http://10.0.0.1:7000"),
        ],
    );
    assert_eq!(a.common.server, "http://10.0.0.1:7000");
    // Flags win over the environment.
    let a = exec_ok(
        &[
            "--server",
            "http://127.0.0.1:1",
            "--token=flag",
            "-w",
            "a/b",
            "hello",
            "--",
            "ls",
        ],
        &[
            TOKEN,
            ("KUBEGATE_WORKSPACE", "p/u"),
            ("KUBEGATE_SERVER", "http://10.0.0.1:7000"),
        ],
    );
    assert_eq!(a.common.server, "http://127.0.0.1:1");
    assert_eq!(a.common.token, TokenSource::Value("flag".into()));
    assert_eq!((a.project.as_str(), a.uid.as_str()), ("a", "b"));
    // --token-file instead of the env token.
    let a = exec_ok(
        &["--token-file", "/run/tok", "-w", "a/b", "hello", "--", "ls"],
        &[TOKEN],
    );
    assert_eq!(a.common.token, TokenSource::File("/run/tok".into()));
}

#[test]
fn exec_short_clusters_and_positions() {
    for args in [
        &["-it", "-w", "p/u", "d", "--", "sh"][..],
        &["-ti", "-wp/u", "d", "--", "sh"],
        &["d", "-i", "--tty", "--workspace=p/u", "--", "sh"],
        &["--stdin", "-t", "d", "-w=p/u", "--", "sh"],
    ] {
        let a = exec_ok(args, &[TOKEN]);
        assert!(a.stdin && a.tty, "{args:?}");
        assert_eq!(a.deployment, "d");
        assert_eq!(a.command, v(&["sh"]));
    }
    let a = exec_ok(&["-itc", "side", "-w", "p/u", "d", "--", "sh"], &[TOKEN]);
    assert_eq!(a.container.as_deref(), Some("side"));
    let a = exec_ok(&["-cside", "-w", "p/u", "d", "--", "sh"], &[TOKEN]);
    assert_eq!(a.container.as_deref(), Some("side"));
    let a = exec_ok(&["--container=x", "-w", "p/u", "d", "--", "sh"], &[TOKEN]);
    assert_eq!(a.container.as_deref(), Some("x"));
}

#[test]
fn everything_after_the_double_dash_is_the_command() {
    let a = exec_ok(
        &[
            "-w", "p/u", "d", "--", "ls", "-la", "--", "-i", "--help", "--token", "x",
        ],
        &[TOKEN],
    );
    assert_eq!(
        a.command,
        v(&["ls", "-la", "--", "-i", "--help", "--token", "x"])
    );
    assert!(!a.stdin);
    assert_eq!(a.common.token, TokenSource::Value("tok".into()));
}

#[test]
fn exec_usage_errors() {
    let cases: &[(&[&str], &str)] = &[
        (&["-w", "p/u", "--", "ls"], "missing DEPLOYMENT"),
        (&["-w", "p/u", "d"], "missing the command"),
        (&["-w", "p/u", "d", "--"], "missing the command after --"),
        (&["-w", "p/u", "d", "--", ""], "empty string"),
        (&["-w", "p/u", "d", "ls"], "put the command after --"),
        (&["d", "--", "ls"], "missing --workspace"),
        (&["-w", "demo", "d", "--", "ls"], "not PROJECT/UID"),
        (&["-w", "/u", "d", "--", "ls"], "not PROJECT/UID"),
        (&["-w", "p/", "d", "--", "ls"], "not PROJECT/UID"),
        (&["-w", "p/u/x", "d", "--", "ls"], "not PROJECT/UID"),
        (&["-x", "-w", "p/u", "d", "--", "ls"], "unknown option -x"),
        (&["--frob", "-w", "p/u", "d", "--", "ls"], "unknown option"),
        (&["-w", "p/u", "-c"], "-c needs a value"),
        (
            &["-w", "p/u", "d", "--container"],
            "--container needs a value",
        ),
        (
            &["-w", "p/u", "--container=", "d", "--", "ls"],
            "must not be empty",
        ),
        (
            &["-w", "p/u", "--server", "ftp://x", "d", "--", "ls"],
            "--server",
        ),
        (
            &[
                "-w",
                "p/u",
                "--token",
                "a",
                "--token-file",
                "f",
                "d",
                "--",
                "ls",
            ],
            "not both",
        ),
    ];
    for (args, want) in cases {
        let e = exec_err(args, &[TOKEN]);
        assert!(e.is_usage(), "{args:?}: {e}");
        assert!(e.message.contains(want), "{args:?}: {e}");
    }
}

#[test]
fn exec_without_any_token_uses_the_stored_one() {
    let a = exec_ok(&["-w", "p/u", "d", "--", "ls"], &[]);
    assert_eq!(a.common.token, TokenSource::Stored);
    // A blank env token counts as none.
    let a = exec_ok(
        &["-w", "p/u", "d", "--", "ls"],
        &[("KUBEGATE_TOKEN", " \n")],
    );
    assert_eq!(a.common.token, TokenSource::Stored);
}

#[test]
fn help_anywhere_before_the_command() {
    assert_eq!(exec(&["--help"], &[]), Ok(Parsed::Help));
    assert_eq!(exec(&["-w", "p/u", "-h"], &[]), Ok(Parsed::Help));
    assert_eq!(exec(&["-ih"], &[]), Ok(Parsed::Help));
    // After `--` it belongs to the command.
    assert!(matches!(
        exec(&["-w", "p/u", "d", "--", "ls", "--help"], &[TOKEN]),
        Ok(Parsed::Run(_))
    ));
    assert_eq!(
        parse_workspaces(&v(&["-h"]), &env_of(&[])),
        Ok(Parsed::Help)
    );
}

#[test]
fn workspaces_arguments() {
    let ok = |args: &[&str], env: &[(&str, &str)]| match parse_workspaces(&v(args), &env_of(env)) {
        Ok(Parsed::Run(a)) => a,
        other => panic!("{args:?}: {other:?}"),
    };
    let a = ok(&[], &[TOKEN]);
    assert_eq!(a.output, OutputFormat::Table);
    assert_eq!(a.common.server, DEFAULT_SERVER);
    let a = ok(&["-o", "json", "--server", "http://h:1"], &[TOKEN]);
    assert_eq!(a.output, OutputFormat::Json);
    assert_eq!(a.common.server, "http://h:1");
    let a = ok(&["--output=table", "--token-file=/t"], &[]);
    assert_eq!(a.output, OutputFormat::Table);
    assert_eq!(a.common.token, TokenSource::File("/t".into()));
    for (args, want) in [
        (&["--output", "yaml"][..], "expected table or json"),
        (&["-o"], "-o needs a value"),
        (&["extra"], "unexpected argument"),
        (&["--token"], "--token needs a value"),
    ] {
        match parse_workspaces(&v(args), &env_of(&[TOKEN])) {
            Err(e) => {
                assert!(e.is_usage(), "{args:?}: {e}");
                assert!(e.message.contains(want), "{args:?}: {e}");
            }
            other => panic!("{args:?}: {other:?}"),
        }
    }
    // No token given: the stored login's, looked up when the command runs.
    match parse_workspaces(&v(&[]), &env_of(&[])) {
        Ok(Parsed::Run(a)) => assert_eq!(a.common.token, TokenSource::Stored),
        other => panic!("{other:?}"),
    }
}

#[test]
fn login_logout_and_whoami_arguments() {
    let run = |r: Result<Parsed<LoginArgs>, CliError>| match r {
        Ok(Parsed::Run(a)) => a,
        other => panic!("{other:?}"),
    };
    let a = run(parse_login(&v(&["--browser"]), &env_of(&[TOKEN])));
    assert!(a.browser);
    assert_eq!(a.server, DEFAULT_SERVER);
    let a = run(parse_login(
        &v(&["--server", "https://gw", "--ca-file", "/ca.pem"]),
        &env_of(&[]),
    ));
    assert_eq!((a.server.as_str(), a.browser), ("https://gw", false));
    assert_eq!(a.ca_file, Some(PathBuf::from("/ca.pem")));
    assert_eq!(a.issuer_ca_file, None);
    // The issuer's CA is its own flag, apart from the daemon's --ca-file.
    let a = run(parse_login(
        &v(&["--issuer-ca-file", "idp.pem", "--ca-file", "/ca.pem"]),
        &env_of(&[]),
    ));
    assert_eq!(a.issuer_ca_file, Some(PathBuf::from("idp.pem")));
    assert_eq!(a.ca_file, Some(PathBuf::from("/ca.pem")));
    let e = parse_login(&v(&["--issuer-ca-file", ""]), &env_of(&[])).unwrap_err();
    assert!(
        e.is_usage() && e.message.contains("--issuer-ca-file must not be empty"),
        "{e}"
    );
    assert!(parse_login(&v(&["--issuer-ca-file"]), &env_of(&[]))
        .unwrap_err()
        .is_usage());
    // The environment's token is not the login's business; a flag is an error.
    let e = parse_login(&v(&["--token", "t"]), &env_of(&[])).unwrap_err();
    assert!(e.is_usage() && e.message.contains("login takes no"), "{e}");
    assert!(parse_login(&v(&["x"]), &env_of(&[]))
        .unwrap_err()
        .is_usage());
    assert_eq!(parse_login(&v(&["-h"]), &env_of(&[])), Ok(Parsed::Help));
    match parse_logout(&v(&[]), &env_of(&[("KUBEGATE_SERVER", "https://e")])) {
        Ok(Parsed::Run(a)) => assert_eq!(a.server, "https://e"),
        other => panic!("{other:?}"),
    }
    match parse_whoami(&v(&["-o", "json"]), &env_of(&[])) {
        Ok(Parsed::Run(a)) => {
            assert_eq!(a.output, OutputFormat::Json);
            assert_eq!(a.common.token, TokenSource::Stored);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn token_file_contents_are_trimmed_and_checked() {
    let dir = std::env::temp_dir().join(format!("kubegate-cli-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("token");
    std::fs::write(&f, "  kubegate-demo-token\n").unwrap();
    assert_eq!(read_token_file(&f).unwrap(), "kubegate-demo-token");
    let common = CommonArgs {
        server: DEFAULT_SERVER.into(),
        token: TokenSource::File(f.clone()),
        ca_file: None,
    };
    assert_eq!(common.token().unwrap(), "kubegate-demo-token");

    std::fs::write(&f, "\n\n").unwrap();
    let e = read_token_file(&f).unwrap_err();
    assert!(e.is_config() && e.message.contains("empty"), "{e}");

    std::fs::write(&f, "two\nlines\n").unwrap();
    let e = read_token_file(&f).unwrap_err();
    assert!(e.message.contains("one line"), "{e}");
    assert!(!e.message.contains("two"), "the token leaked: {e}");

    std::fs::write(&f, vec![b'a'; (MAX_TOKEN_FILE + 1) as usize]).unwrap();
    assert!(read_token_file(&f).unwrap_err().message.contains("larger"));

    let e = read_token_file(&dir.join("missing")).unwrap_err();
    assert!(e.is_config() && e.message.contains("missing"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn debug_output_never_shows_the_token() {
    let a = exec_ok(&["--token", "s3cr3t", "-w", "p/u", "d", "--", "ls"], &[]);
    assert!(!format!("{a:?}").contains("s3cr3t"));
}
#[test]
fn session_command_arguments() {
    let e = env_of(&[TOKEN]);
    let run = |r: Result<Parsed<SessionsArgs>, CliError>| match r {
        Ok(Parsed::Run(a)) => a,
        other => panic!("{other:?}"),
    };
    assert_eq!(run(parse_sessions(&v(&[]), &e)).op, SessionsOp::List);
    let a = run(parse_sessions(&v(&["list", "-o", "json"]), &e));
    assert_eq!((a.op, a.output), (SessionsOp::List, OutputFormat::Json));
    assert_eq!(
        run(parse_sessions(&v(&["stop", "abc123"]), &e)).op,
        SessionsOp::Stop("abc123".into())
    );
    assert_eq!(
        run(parse_sessions(
            &v(&["--server=http://h:1", "resume", "x1"]),
            &e
        ))
        .op,
        SessionsOp::Resume("x1".into())
    );
    for (args, want) in [
        (&["stop"][..], "missing the session ID"),
        (&["resume"], "missing the session ID"),
        (&["frob"], "unknown sessions command"),
        (&["stop", "a", "b"], "unexpected argument"),
        (&["stop", "../x"], "not a session id"),
        (&["stop", "a", "-o", "json"], "list only"),
    ] {
        match parse_sessions(&v(args), &e) {
            Err(err) => assert!(
                err.is_usage() && err.message.contains(want),
                "{args:?}: {err}"
            ),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    match parse_attach(&v(&["--from-start", "s1", "web"]), &e) {
        Ok(Parsed::Run(a)) => {
            assert!(a.from_start);
            assert_eq!((a.session.as_str(), a.app.as_str()), ("s1", "web"));
        }
        other => panic!("{other:?}"),
    }
    for (args, want) in [
        (&["s1"][..], "missing APP"),
        (&[], "missing SESSION"),
        (&["s1", "a", "b"], "unexpected"),
        (&["--bogus", "s1", "a"], "unknown option"),
    ] {
        match parse_attach(&v(args), &e) {
            Err(err) => assert!(
                err.is_usage() && err.message.contains(want),
                "{args:?}: {err}"
            ),
            other => panic!("{args:?}: {other:?}"),
        }
    }

    let pair = |local, remote| PortPair { local, remote };
    match parse_port_forward(&v(&["s1", "8080"]), &e) {
        Ok(Parsed::Run(a)) => {
            assert_eq!(a.target, ForwardTarget::Session("s1".into()));
            assert_eq!(a.ports, [pair(8080, 8080)]);
            assert_eq!(a.addresses, ["localhost"]);
            assert!(!a.deprecated_local);
        }
        other => panic!("{other:?}"),
    }
    // The old third positional LOCAL: still read, with a deprecation line.
    match parse_port_forward(&v(&["s1", "8080", "0"]), &e) {
        Ok(Parsed::Run(a)) => {
            assert_eq!(a.ports, [pair(0, 8080)]);
            assert!(a.deprecated_local);
        }
        other => panic!("{other:?}"),
    }
    match parse_port_forward(
        &v(&[
            "--address",
            "127.0.0.1,::1",
            "s1",
            "5000:80",
            ":5432",
            "0:22",
            "9229",
        ]),
        &e,
    ) {
        Ok(Parsed::Run(a)) => {
            assert_eq!(
                a.ports,
                [pair(5000, 80), pair(0, 5432), pair(0, 22), pair(9229, 9229)]
            );
            assert_eq!(a.addresses, ["127.0.0.1", "::1"]);
        }
        other => panic!("{other:?}"),
    }
    match parse_port_forward(
        &v(&["--workspace", "demo/demo-uid", "hello", "80", "81"]),
        &e,
    ) {
        Ok(Parsed::Run(a)) => {
            assert_eq!(
                a.target,
                ForwardTarget::Deployment {
                    project: "demo".into(),
                    uid: "demo-uid".into(),
                    deployment: "hello".into()
                }
            );
            // Two ports with --workspace: never the old form.
            assert_eq!(a.ports, [pair(80, 80), pair(81, 81)]);
            assert!(!a.deprecated_local);
        }
        other => panic!("{other:?}"),
    }
    for (args, want) in [
        (&["s1"][..], "missing a port"),
        (&[][..], "missing SESSION"),
        (&["-w", "p/u"][..], "missing DEPLOYMENT"),
        (&["s1", "0"], "not 0"),
        (&["s1", "http"], "not a port"),
        (&["s1", "80", "70000"], "not a port"),
        (&["s1", "80:"], "remote port is missing"),
        (&["s1", "x:80"], "not a port"),
        (&["s1", ":0"], "not 0"),
        (&["--address", "", "s1", "80"], "empty address"),
        (&["-w", "nouid", "d", "80"], "PROJECT/UID"),
        (&["s/1", "80"], "not a session id"),
    ] {
        match parse_port_forward(&v(args), &e) {
            Err(err) => assert!(
                err.is_usage() && err.message.contains(want),
                "{args:?}: {err}"
            ),
            other => panic!("{args:?}: {other:?}"),
        }
    }
    assert_eq!(parse_port_forward(&v(&["-h"]), &e), Ok(Parsed::Help));
}

#[test]
fn dev_arguments() {
    let e = env_of(&[TOKEN]);
    let run = |args: &[&str]| match parse_dev(&v(args), &e) {
        Ok(Parsed::Run(a)) => a,
        other => panic!("{args:?}: {other:?}"),
    };
    let a = run(&[]);
    assert_eq!((a.dir, a.stdin), (PathBuf::from("."), None));
    let a = run(&["--stdin", "worker", "examples/x"]);
    assert_eq!(
        (a.dir, a.stdin.as_deref()),
        (PathBuf::from("examples/x"), Some("worker"))
    );
    let a = run(&["proj", "--stdin=web", "--server", "http://h:1"]);
    assert_eq!(
        (a.dir, a.stdin.as_deref(), a.common.server.as_str()),
        (PathBuf::from("proj"), Some("web"), "http://h:1")
    );
    for (args, want) in [
        (&["a", "b"][..], "unexpected argument"),
        (&["--stdin"], "--stdin needs a value"),
        (&["--stdin="], "must not be empty"),
        (&["--frob"], "unknown option"),
        (&[""], "DIR must not be empty"),
    ] {
        match parse_dev(&v(args), &e) {
            Err(err) => assert!(
                err.is_usage() && err.message.contains(want),
                "{args:?}: {err}"
            ),
            other => panic!("{args:?}: {other:?}"),
        }
    }
    assert_eq!(parse_dev(&v(&["--help"]), &e), Ok(Parsed::Help));
}
