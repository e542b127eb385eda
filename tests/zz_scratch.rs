mod common;
use common::pod_fixture::fixture;
use kubegate::config::PodAccess as Mode;
use kubegate::session::access;
use serde_json::json;
use std::time::{Duration, Instant};

fn thread_cpu() -> Duration {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    Duration::from_micros(
        (ru.ru_utime.tv_sec * 1_000_000
            + ru.ru_utime.tv_usec
            + ru.ru_stime.tv_sec * 1_000_000
            + ru.ru_stime.tv_usec) as u64,
    )
}

#[test]
#[ignore]
fn scratch_attempt_cost() {
    let f = fixture(
        json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1"},"spec":{"containers":[{"name":"c","image":"x","command":["sleep","1000"]}]}}),
        Duration::from_secs(30),
    );
    for mode in [Mode::ApiProxy, Mode::Direct] {
        let a = access::from_config(mode, &f.client);
        let n = 300;
        let t0 = Instant::now();
        let c0 = thread_cpu();
        for _ in 0..n {
            let r = a.stream(&f.target, 9230, "/events", &[], Duration::from_secs(60));
            assert!(r.is_err());
        }
        let c1 = thread_cpu();
        eprintln!(
            "{mode:?}: {:?} wall/attempt, {:?} cpu/attempt",
            t0.elapsed() / n,
            (c1 - c0) / n
        );
        let t0 = Instant::now();
        let c0 = thread_cpu();
        for _ in 0..n {
            let h = std::thread::Builder::new()
                .name("x".into())
                .spawn(|| 1)
                .unwrap();
            h.join().unwrap();
        }
        eprintln!(
            "spawn+join: {:?} wall, {:?} cpu(this thread)",
            t0.elapsed() / n,
            (thread_cpu() - c0) / n
        );
    }
}

#[test]
#[ignore]
fn scratch_agent_cost() {
    let f = fixture(
        json!({"apiVersion":"v1","kind":"Pod","metadata":{"name":"p1"},"spec":{"containers":[{"name":"c","image":"x","command":["sleep","1000"]}]}}),
        Duration::from_secs(30),
    );
    let n = 1000;
    let c0 = thread_cpu();
    for _ in 0..n {
        let a = f.client.stream_agent(Some(Duration::from_secs(60)));
        drop(a);
    }
    eprintln!("agent build+drop: {:?} cpu", (thread_cpu() - c0) / n);
    let c0 = thread_cpu();
    for _ in 0..n {
        let _ = std::net::TcpStream::connect(f.sim.url.trim_start_matches("http://")).unwrap();
    }
    eprintln!("tcp connect+close: {:?} cpu", (thread_cpu() - c0) / n);
    let c0 = thread_cpu();
    let api = kubegate::kube::client::Api::<kubegate::kube::client::Pod>::namespaced(
        &f.client, "default",
    );
    for _ in 0..n {
        let _ = api.get("p1");
    }
    eprintln!("REST get pod (pooled): {:?} cpu", (thread_cpu() - c0) / n);
}
