//! The top-level command line: the command word and `--config` (the
//! sim's flags and credential rules are tested in `sim::args`).

use super::*;

fn v(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn parse_v(args: &[String]) -> Result<Command<'_>, UsageError> {
    parse(args)
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
        ("login", Client::Login),
        ("logout", Client::Logout),
        ("whoami", Client::Whoami),
    ] {
        let a = v(&[word, "--help"]);
        assert_eq!(parse_v(&a), Ok(Command::Client(c, &a[1..])));
    }
    let a = v(&["sim", "--no-auth"]);
    assert_eq!(parse_v(&a), Ok(Command::Sim(&a[1..])));
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
