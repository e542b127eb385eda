//! The acceptance path end to end: panva's oidc-provider on loopback
//! (tests/common/oidc_provider.rs), a real `kubegate serve` on the embedded
//! sim whose `[oidc]` names it, `kubegate login` (the device flow, the user
//! step through the provider's own pages), then `kubegate whoami` and
//! `kubegate exec` with the stored ID token; the provider restarts with a
//! rotated key set and a new login's token is taken without a daemon
//! restart. Skipped (a line on stderr) when oidc-provider is not installed,
//! outside CI.

mod common;

use std::time::Duration;

use common::daemon::DaemonProc;
use common::issuer::oidc_toml;
use common::oidc_provider::{kg, login, OidcProvider, ProviderOptions};
use common::{run_with_timeout, temp_dir, wait_for};

const RULES: &str = r#"
[[oidc.rule]]
group = "oidc:developers"
workspaces = ["demo/demo-uid"]
kube_groups = ["kubegate:developers"]
"#;

/// `kubegate exec … -- printf ok` with the stored token: exit code and
/// stdout.
fn exec(home: &std::path::Path, url: &str, workspace: &str) -> (Option<i32>, String, String) {
    let c = kg(
        home,
        &[
            "exec",
            "--server",
            url,
            "--workspace",
            workspace,
            "hello",
            "--",
            "printf",
            "ok",
        ],
    );
    let out = run_with_timeout(c, None, Duration::from_secs(60));
    (out.code, out.stdout_str(), out.stderr_str())
}

#[test]
fn login_then_exec_and_a_rotated_provider_key_without_a_daemon_restart() {
    let Some(mut idp) = OidcProvider::start(&ProviderOptions::default()) else {
        return;
    };
    let extra = oidc_toml(&idp.issuer, RULES);
    let d = DaemonProc::start_with(move |c| format!("{c}\n{extra}"), "info");
    let home = temp_dir("oidc-login");

    let out = login(&home, &d.url, |uri, code| idp.approve(uri, code, "ann"));
    assert_eq!(out.code, Some(0), "login: {}", out.stderr_str());

    // whoami: the daemon's view of the stored ID token.
    let who = wait_for("whoami as ann", Duration::from_secs(30), || {
        let c = kg(&home, &["whoami", "--server", &d.url, "--output", "json"]);
        let out = run_with_timeout(c, None, Duration::from_secs(30));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        (out.code == Some(0)).then_some(v)
    });
    assert_eq!(who["principal"], "oidc:ann@example.com", "{who}");
    assert_eq!(who["credential"], "oidc");
    assert_eq!(who["issuer"], idp.issuer.as_str());
    assert_eq!(who["groups"], serde_json::json!(["oidc:developers"]));
    assert_eq!(who["workspaces"], serde_json::json!(["demo/demo-uid"]));

    // exec in the rule's workspace; refused outside it.
    let (code, stdout, stderr) = exec(&home, &d.url, "demo/demo-uid");
    assert_eq!((code, stdout.as_str()), (Some(0), "ok"), "{stderr}");
    let (code, _, stderr) = exec(&home, &d.url, "demo/other");
    assert_ne!(
        code,
        Some(0),
        "an exec outside the rule's workspace: {stderr}"
    );

    // The provider rotates its signing key (same issuer URL); a new login
    // gets a token under the new kid, which the daemon takes once its
    // rate-limited refresh has run: no restart.
    idp.rotate("k2");
    let home2 = temp_dir("oidc-login");
    let out = login(&home2, &d.url, |uri, code| idp.approve(uri, code, "ann"));
    assert_eq!(
        out.code,
        Some(0),
        "login after rotation: {}",
        out.stderr_str()
    );
    wait_for(
        "an exec with the rotated key's token",
        Duration::from_secs(60),
        || {
            let (code, stdout, _) = exec(&home2, &d.url, "demo/demo-uid");
            (code == Some(0) && stdout == "ok").then_some(())
        },
    );
    let log = d.log_text();
    assert!(log.contains("signing keys of"), "{log}");
    for dir in [&home, &home2] {
        for f in std::fs::read_dir(dir.join("state").join("kubegate").join("tokens"))
            .map(|r| r.flatten().collect::<Vec<_>>())
            .unwrap_or_default()
        {
            let text = std::fs::read_to_string(f.path()).unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if let Some(t) = v["id_token"].as_str() {
                let sig = t.rsplit('.').next().unwrap_or(t);
                assert!(!log.contains(sig), "an ID token in the daemon's log");
            }
        }
    }
}
