//! What an OIDC principal costs per request (scripts/bench.sh): the same
//! daemon answers `GET /v1/auth/whoami` for a static-token principal (a
//! SHA-256 digest compared against every configured one) and for an OIDC
//! principal (an RS256 ID token of the test issuer, tests/common/issuer.rs:
//! split, key picked from the cache, signature verified, claims checked,
//! rules applied), each request on a fresh connection, as the front door
//! checks every connection's first head. The static path is the peer: the
//! table gives requests per second, latency percentiles and the ratio.
//! `#[ignore]`d: run with `--release -- --ignored --nocapture`.

mod common;

use common::daemon::DaemonProc;
use common::issuer::{claims, oidc_toml, RsaKey, TestIssuer};
use common::{temp_dir, wait_for};
use std::time::{Duration, Instant};

const ROUNDS: usize = 3;
const REQUESTS: usize = 2000;

/// `REQUESTS` whoami calls with `token`: requests per second, and the
/// p50 and p99 latency in microseconds.
fn measure(d: &DaemonProc, token: &str) -> (f64, f64, f64) {
    let mut lat = Vec::with_capacity(REQUESTS);
    let t0 = Instant::now();
    for _ in 0..REQUESTS {
        let t = Instant::now();
        let (st, _) = d.request("GET", "/v1/auth/whoami", Some(token), None);
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(st, 200);
    }
    let rate = REQUESTS as f64 / t0.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let pct = |p: f64| lat[((lat.len() as f64 - 1.0) * p) as usize];
    (rate, pct(0.5), pct(0.99))
}

#[test]
#[ignore = "benchmark: scripts/bench.sh"]
fn bench_oidc_verification_against_a_static_token() {
    let _dog = common::backend::watchdog(600);
    let keys = temp_dir("bench-auth-keys");
    let key = RsaKey::generate(&keys, "k1");
    let issuer = TestIssuer::start(&[&key]);
    let rules = "[[oidc.rule]]\ngroup = \"oidc:dev\"\nworkspaces = [\"demo/{claim:sub}\"]\n";
    let extra = oidc_toml(&issuer.url, rules);
    let d = DaemonProc::start_with(move |c| format!("{c}\n{extra}"), "warn");
    let oidc = key.sign(&claims(&issuer.url, "demo-uid"));
    wait_for("the issuer's keys", Duration::from_secs(30), || {
        let (st, _) = d.request("GET", "/v1/auth/whoami", Some(&oidc), None);
        (st == 200).then_some(())
    });
    println!("| round | static req/s | OIDC req/s | ratio OIDC/static | static p50/p99 µs | OIDC p50/p99 µs |");
    println!("|---|---|---|---|---|---|");
    let mut ratios = Vec::new();
    for r in 1..=ROUNDS {
        let s = measure(&d, &d.token);
        let o = measure(&d, &oidc);
        ratios.push(o.0 / s.0);
        println!(
            "| {r} | {:.0} | {:.0} | {:.2} | {:.0}/{:.0} | {:.0}/{:.0} |",
            s.0,
            o.0,
            o.0 / s.0,
            s.1,
            s.2,
            o.1,
            o.2
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("| median | | | {:.2} | | |", ratios[ratios.len() / 2]);
}
