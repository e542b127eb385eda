//! OIDC principals end to end: a real `kubegate serve` on the embedded sim
//! and a test issuer on loopback (tests/common/issuer.rs) whose tokens the
//! tests sign themselves. Hostile tokens first, each refused with its code;
//! then a good token's mapping, an exec inside and outside its rule's
//! workspace, key rotation without a restart (the refresh rate-limited),
//! an unreachable issuer (503, never a pass) and SIGHUP reloads. The
//! daemon's log never holds a token.

mod common;

use std::time::Duration;

use common::daemon::DaemonProc;
use common::issuer::{claims, forge_none, now, oidc_toml, oidc_toml_with, RsaKey, TestIssuer};
use common::{temp_dir, wait_for};
use serde_json::{json, Value};

/// A rule that gives `oidc:dev` the workspace `demo/{sub}`, sessions and
/// a Kubernetes group.
const RULES: &str = r#"
[[oidc.rule]]
group = "oidc:dev"
workspaces = ["demo/{claim:sub}"]
may_start_sessions = true
kube_groups = ["kubegate:developers"]
"#;

fn start(url: &str, rules: &str) -> DaemonProc {
    let extra = oidc_toml(url, rules);
    DaemonProc::start_with(move |c| format!("{c}\n{extra}"), "info")
}

/// GET with a bearer token: status and JSON body.
fn get(d: &DaemonProc, path: &str, token: &str) -> (u16, Value) {
    let (st, body) = d.request("GET", path, Some(token), None);
    (st, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

/// whoami with `token` once the daemon has the issuer's keys (a 503 while
/// they are fetched is retried).
fn whoami_ready(d: &DaemonProc, token: &str) -> (u16, Value) {
    wait_for("an answer other than 503", Duration::from_secs(30), || {
        let (st, v) = get(d, "/v1/auth/whoami", token);
        (st != 503).then_some((st, v))
    })
}

fn exec_body(uid: &str) -> Value {
    json!({"workspace": {"project": "demo", "uid": uid}, "deployment": "hello",
           "command": ["sh", "-c", "printf ok"]})
}

fn assert_no_token_in_log(d: &DaemonProc, tokens: &[&str]) {
    let log = d.log_text();
    for t in tokens {
        // Any of the three parts would do: the signature is the secret one.
        let sig = t.rsplit('.').next().unwrap_or(t);
        assert!(sig.is_empty() || !log.contains(sig), "a token in the log");
        assert!(!log.contains(t), "a token in the log");
    }
}

#[test]
fn hostile_tokens_are_refused_with_their_codes() {
    let dir = temp_dir("oidc-keys");
    let key = RsaKey::generate(&dir, "k1");
    let other = RsaKey::generate(&dir, "k1-impostor");
    let issuer = TestIssuer::start(&[&key]);
    // Groups unprefixed here, so a group can be mapped to system:.
    let extra = oidc_toml_with(&issuer.url, "", &RULES.replace("oidc:dev", "dev"));
    // At debug, so every log line the daemon has is in the file.
    let d = DaemonProc::start_with(move |c| format!("{c}\n{extra}"), "debug");
    let good = key.sign(&claims(&issuer.url, "demo-uid"));
    let (st, v) = whoami_ready(&d, &good);
    assert_eq!(st, 200, "{v}");

    let with = |edit: Value| {
        let mut c = claims(&issuer.url, "demo-uid");
        for (k, v) in edit.as_object().expect("object") {
            if v.is_null() {
                c.as_object_mut().expect("object").remove(k);
            } else {
                c[k] = v.clone();
            }
        }
        c
    };
    let t = now();
    let mut sent = vec![good.clone()];
    let mut cases: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            key.sign(&with(json!({"iat": t - 1000, "exp": t - 120}))),
            "TOKEN_EXPIRED",
        ),
        (
            "not yet valid",
            key.sign(&with(json!({"nbf": t + 600}))),
            "TOKEN_NOT_YET_VALID",
        ),
        (
            "wrong audience",
            key.sign(&with(json!({"aud": "someone-else"}))),
            "TOKEN_AUDIENCE",
        ),
        (
            "azp not an audience",
            key.sign(&with(json!({"azp": "someone-else"}))),
            "TOKEN_AUDIENCE",
        ),
        (
            "alg none",
            forge_none("k1", &claims(&issuer.url, "demo-uid")),
            "TOKEN_ALGORITHM",
        ),
        (
            "HS256 keyed with the public key",
            key.forge_hs256(&claims(&issuer.url, "demo-uid")),
            "TOKEN_ALGORITHM",
        ),
        (
            "header alg other than the key's",
            key.sign_with(
                &claims(&issuer.url, "demo-uid"),
                jsonwebtoken::Algorithm::PS256,
                Some("k1"),
            ),
            "TOKEN_ALGORITHM",
        ),
        (
            "signed by another key under the same kid",
            other.sign_with(
                &claims(&issuer.url, "demo-uid"),
                jsonwebtoken::Algorithm::RS256,
                Some("k1"),
            ),
            "TOKEN_INVALID",
        ),
        (
            "lifetime over the cap",
            key.sign(&with(json!({"iat": t - 10, "exp": t + 7200}))),
            "TOKEN_INVALID",
        ),
        (
            "no iat",
            key.sign(&with(json!({"iat": null}))),
            "TOKEN_INVALID",
        ),
        (
            "email not verified",
            key.sign(&with(json!({"email_verified": false}))),
            "IDENTITY_REFUSED",
        ),
        (
            "system: group",
            key.sign(&with(json!({"groups": ["dev", "system:masters"]}))),
            "IDENTITY_REFUSED",
        ),
    ];
    // A name mapped to system: needs an empty name prefix, which the
    // static principal beside it forbids at load (the check-config test
    // below); the unit tests of auth::checks cover the refusal.
    for (what, token, want) in cases.drain(..) {
        let (st, v) = get(&d, "/v1/auth/whoami", &token);
        assert_eq!(code(&v), want, "{what}: {st} {v}");
        assert_eq!(st, 401, "{what}: {v}");
        sent.push(token);
    }
    // No rule matches: 403.
    let nobody = key.sign(&with(json!({"groups": ["ops"]})));
    let (st, v) = get(&d, "/v1/auth/whoami", &nobody);
    assert_eq!((st, code(&v)), (403, "NO_MATCHING_RULE"), "{v}");
    sent.push(nobody);

    // A token naming another issuer: refused before any fetch.
    let hits = issuer.hits();
    let stranger = key.sign(&with(json!({"iss": "https://idp.evil.example"})));
    let (st, v) = get(&d, "/v1/auth/whoami", &stranger);
    assert_eq!((st, code(&v)), (401, "TOKEN_ISSUER"), "{v}");
    let unknown_kid = key.sign_with(
        &with(json!({"iss": "http://127.0.0.1:1"})),
        jsonwebtoken::Algorithm::RS256,
        Some("nope"),
    );
    let (st, v) = get(&d, "/v1/auth/whoami", &unknown_kid);
    assert_eq!((st, code(&v)), (401, "TOKEN_ISSUER"), "{v}");
    assert_eq!(issuer.hits(), hits, "a refused iss made the daemon fetch");
    sent.push(stranger);

    // Not a JWT and no static token: the plain 401.
    let (st, v) = get(&d, "/v1/auth/whoami", "not-a-token");
    assert_eq!((st, code(&v)), (401, "UNAUTHORIZED"), "{v}");
    // The static principal is unchanged.
    let (st, v) = get(&d, "/v1/auth/whoami", &d.token);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["principal"], "demo");
    assert_eq!(v["credential"], "static");
    assert_eq!(v["issuer"], Value::Null);

    let refs: Vec<&str> = sent.iter().map(String::as_str).collect();
    assert_no_token_in_log(&d, &refs);
}

#[test]
fn a_good_token_maps_to_its_rules_and_execs_only_in_their_workspaces() {
    let dir = temp_dir("oidc-keys");
    let key = RsaKey::generate(&dir, "k1");
    let issuer = TestIssuer::start(&[&key]);
    let d = start(&issuer.url, RULES);

    // The login settings, without a token.
    let (st, body) = d.request("GET", "/v1/auth/config", None, None);
    let v: Value = serde_json::from_slice(&body).expect("json");
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["oidc"]["issuer"], issuer.url.as_str());
    assert_eq!(v["oidc"]["client_id"], "kubegate");
    assert_eq!(v["oidc"]["scopes"][0], "openid");

    let token = key.sign(&claims(&issuer.url, "demo-uid"));
    let (st, v) = whoami_ready(&d, &token);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["principal"], "oidc:demo-uid@example.com");
    assert_eq!(v["credential"], "oidc");
    assert_eq!(v["issuer"], issuer.url.as_str());
    assert_eq!(v["groups"], json!(["oidc:dev"]));
    assert_eq!(v["kube_groups"], json!(["kubegate:developers"]));
    assert_eq!(v["workspaces"], json!(["demo/demo-uid"]));
    assert_eq!(v["may_start_sessions"], true);
    assert!(
        v["expires_at"].as_str().is_some_and(|s| s.ends_with('Z')),
        "{v}"
    );

    // An exec in the rule's workspace works …
    let b = exec_body("demo-uid").to_string();
    let (st, out) = d.request("POST", "/v1/exec", Some(&token), Some(b.as_bytes()));
    let out: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(st, 200, "{out}");
    assert_eq!(out["stdout"], "ok");
    // … and another identity, whose templated workspace is elsewhere, is
    // refused there.
    let elsewhere = key.sign(&claims(&issuer.url, "someone-else"));
    let (st, out) = d.request("POST", "/v1/exec", Some(&elsewhere), Some(b.as_bytes()));
    let out: Value = serde_json::from_slice(&out).expect("json");
    assert_eq!(st, 403, "{out}");
    assert_eq!(code(&out), "EXEC_TARGET_FORBIDDEN", "{out}");

    // The same token on the WebSocket subprotocol path.
    let proto = format!(
        "base64url.bearer.authorization.kubegate.dev.{}",
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &token)
    );
    let q = "/v1/exec/interactive?project=demo&uid=demo-uid&deployment=hello&command=true";
    let (mut ws, resp) = d
        .ws(q, &[], &[kubegate::exec::frames::SUBPROTOCOL, &proto])
        .unwrap_or_else(|(st, b)| panic!("{st}: {}", String::from_utf8_lossy(&b)));
    assert_eq!(resp.status().as_u16(), 101);
    let _ = ws.close(None);
    // … and refused outside its workspace there too.
    let proto_else = format!(
        "base64url.bearer.authorization.kubegate.dev.{}",
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            &elsewhere
        )
    );
    match d.ws(q, &[], &[kubegate::exec::frames::SUBPROTOCOL, &proto_else]) {
        Ok(_) => panic!("an exec outside the rule's workspace was accepted"),
        Err((st, _)) => assert_eq!(st, 403),
    }
    assert_no_token_in_log(&d, &[&token, &elsewhere]);
}

#[test]
fn a_rotated_key_is_picked_up_without_a_restart_and_the_refresh_is_rate_limited() {
    let dir = temp_dir("oidc-keys");
    let k1 = RsaKey::generate(&dir, "k1");
    let k2 = RsaKey::generate(&dir, "k2");
    let issuer = TestIssuer::start(&[&k1]);
    let d = start(&issuer.url, RULES);
    let old = k1.sign(&claims(&issuer.url, "demo-uid"));
    assert_eq!(whoami_ready(&d, &old).0, 200);

    // A kid the set does not have yet: 401 once the keys are fresh (a
    // fetch may run first: 503 meanwhile).
    let new = k2.sign(&claims(&issuer.url, "demo-uid"));
    let (st, v) = whoami_ready(&d, &new);
    assert_eq!((st, code(&v)), (401, "TOKEN_INVALID"), "{v}");

    // The issuer rotates. Within the rate limit the daemon does not fetch
    // again: still 401, and no request reached the issuer.
    issuer.set_keys(&[&k1, &k2]);
    let hits = issuer.hits();
    let (st, v) = get(&d, "/v1/auth/whoami", &new);
    assert_eq!((st, code(&v)), (401, "TOKEN_INVALID"), "{v}");
    assert_eq!(issuer.hits(), hits, "a refresh inside the rate limit");

    // Once the limit has passed, the unknown kid triggers a refresh and
    // the new key verifies; no restart.
    wait_for("the rotated key accepted", Duration::from_secs(40), || {
        let (st, _) = get(&d, "/v1/auth/whoami", &new);
        (st == 200).then_some(())
    });
    assert!(issuer.hits() > hits);
    assert_eq!(get(&d, "/v1/auth/whoami", &old).0, 200);
    assert_no_token_in_log(&d, &[&old, &new]);
}

#[test]
fn an_unreachable_issuer_gives_503_never_a_pass() {
    let dir = temp_dir("oidc-keys");
    let key = RsaKey::generate(&dir, "k1");
    let k2 = RsaKey::generate(&dir, "k2");
    let mut issuer = TestIssuer::start(&[&key]);
    let d = start(&issuer.url, RULES);
    let cached = key.sign(&claims(&issuer.url, "demo-uid"));
    assert_eq!(whoami_ready(&d, &cached).0, 200);

    issuer.stop();
    // A cached key still verifies with the issuer gone.
    assert_eq!(get(&d, "/v1/auth/whoami", &cached).0, 200);
    // A kid not cached: the fetch fails, and the answer is 503 with its
    // code and a Retry-After, never a pass.
    let uncached = k2.sign(&claims(&issuer.url, "demo-uid"));
    let seen = wait_for(
        "503 ISSUER_UNAVAILABLE for an uncached kid",
        Duration::from_secs(40),
        || {
            let (st, v) = get(&d, "/v1/auth/whoami", &uncached);
            assert_ne!(st, 200, "an uncached kid passed: {v}");
            let failed = d.log_text().contains("oidc: fetching the keys of");
            (st == 503 && code(&v) == "ISSUER_UNAVAILABLE" && failed).then_some(v)
        },
    );
    assert!(seen["error"]["message"].as_str().is_some());
    let raw = common::daemon::raw_exchange(
        &d.addr,
        format!(
            "GET /v1/auth/whoami HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {uncached}\r\nConnection: close\r\n\r\n"
        )
        .as_bytes(),
    );
    assert_eq!(raw.0, 503);
    assert_no_token_in_log(&d, &[&cached, &uncached]);
}

#[test]
fn sighup_reloads_the_rules_and_a_bad_reload_keeps_them() {
    let dir = temp_dir("oidc-keys");
    let key = RsaKey::generate(&dir, "k1");
    let issuer = TestIssuer::start(&[&key]);
    let d = start(&issuer.url, RULES);
    let token = key.sign(&claims(&issuer.url, "demo-uid"));
    assert_eq!(whoami_ready(&d, &token).0, 200);

    let config = std::fs::read_to_string(&d.config).expect("config");
    let hup = |text: &str, expect_in_log: &str| {
        let before = d.log_text().matches(expect_in_log).count();
        std::fs::write(&d.config, text).expect("write config");
        common::unsafe_kill(d.child.id(), 1);
        wait_for("the reload logged", Duration::from_secs(20), || {
            (d.log_text().matches(expect_in_log).count() > before).then_some(())
        });
    };

    // A good reload: the rule now wants group oidc:ops.
    hup(
        &config.replace("group = \"oidc:dev\"", "group = \"oidc:ops\""),
        "OIDC rules reloaded",
    );
    let (st, v) = get(&d, "/v1/auth/whoami", &token);
    assert_eq!((st, code(&v)), (403, "NO_MATCHING_RULE"), "{v}");

    // A bad reload (a system: kube group): the rules of before stay.
    hup(
        &config.replace("kubegate:developers", "system:masters"),
        "keeping the current principals",
    );
    let (st, v) = get(&d, "/v1/auth/whoami", &token);
    assert_eq!((st, code(&v)), (403, "NO_MATCHING_RULE"), "{v}");
    assert!(d.log_text().contains("oidc.rule[0].kube_groups[0]"));
    // A file that validates but whose CA file cannot be read: kept too.
    hup(
        &config.replace(
            &format!("url = \"{}\"\naudiences = [\"kubegate\"]", issuer.url),
            &format!(
                "url = \"{}\"\naudiences = [\"kubegate\"]\ncertificate_authority = \"no-such-ca.pem\"",
                issuer.url
            ),
        ),
        "oidc.issuer[0].certificate_authority",
    );
    let (st, v) = get(&d, "/v1/auth/whoami", &token);
    assert_eq!((st, code(&v)), (403, "NO_MATCHING_RULE"), "{v}");

    // Back to the first file: the token works again.
    hup(&config, "OIDC rules reloaded");
    assert_eq!(get(&d, "/v1/auth/whoami", &token).0, 200);
    assert_no_token_in_log(&d, &[&token]);
}

#[test]
fn check_config_refuses_a_prefix_that_could_name_a_static_principal() {
    let dir = temp_dir("oidc-config");
    let path = dir.join("kubegate.toml");
    let text = format!(
        "[cluster]\nmode = \"sim\"\n[[principal]]\nname = \"ci\"\ntoken_sha256 = \"{}\"\n{}",
        "ab".repeat(32),
        oidc_toml("https://idp.example.com", RULES).replace(
            "prefix = \"oidc:\"\n[oidc.issuer.claim_mappings.groups]",
            "prefix = \"\"\n[oidc.issuer.claim_mappings.groups]"
        )
    );
    std::fs::write(&path, text).expect("write");
    let mut c = std::process::Command::new(common::KUBEGATE);
    c.arg("check-config").arg("--config").arg(&path);
    let out = common::run_with_timeout(c, None, Duration::from_secs(30));
    assert_ne!(out.code, Some(0));
    let err = out.stderr_str();
    assert!(
        err.contains("oidc.issuer[0].claim_mappings.username.prefix") && err.contains("\"ci\""),
        "{err}"
    );
}
