//! One soak from start to end: sessions, execs, the timeline of samples
//! and faults, the checks at the end, the wind-down.

use crate::args::Args;
use crate::args::Cluster;
use crate::execs::exec_worker;
use crate::faults::{inject, plan, proxy_call, sim_addr};
use crate::report::{report, Report};
use crate::samples::{proc_figures, sample, Sample};
use crate::sessions::{session_io, start_session};
use crate::setup::{cluster_client, ensure_target, watch_pods};
use crate::state::{ExecTotals, FaultLog, Sess, SessState, Shared};
use crate::wire::{http, json_of};
use crate::{SoakError, KILLED_EXIT, QUIET_DOWN};
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::SeedableRng;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::faults::Plan;
use kubegate::kube::client::Client;
use std::thread::JoinHandle;

pub(crate) fn run(args: Args) -> Result<bool, SoakError> {
    let sim = cluster_client(&args)?;
    ensure_target(&args, &sim)?;
    let plan = plan(args.duration, args.seed, args.sessions);
    eprintln!(
        "soak: {} sessions, {} execs, {} s (warm-up {:.0} s, faults until {:.0} s, {} faults), seed {}",
        args.sessions,
        args.execs,
        args.duration.as_secs(),
        plan.warm,
        plan.faults_until,
        plan.faults.len(),
        args.seed
    );
    post_fault_seed(&args)?;
    let sh = Arc::new(Shared {
        exec_steady: (0..args.execs).map(|_| AtomicBool::new(false)).collect(),
        args,
        t0: Mutex::new(None),
        stop: AtomicBool::new(false),
        hold: AtomicBool::new(false),
        sessions: Mutex::new(Vec::new()),
        execs: Mutex::new(ExecTotals::default()),
        faults: Mutex::new(FaultLog::default()),
    });
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let sse_threads = start_sessions(&sh, &sim, &mut threads)?;
    await_first_lines(&sh);
    start_execs(&sh, &mut threads)?;
    let mut samples = timeline(&sh, &plan);
    let sessions = sh.sessions.lock().clone();
    let down = sessions_down(&sh, &sessions);
    let end_sample = sample(&sh);
    eprintln!(
        "soak: {:>6.1} s sample end: RSS {} KiB, {} threads, {} fds",
        sh.elapsed(),
        end_sample.rss_kib,
        end_sample.threads,
        end_sample.fds
    );
    samples.push(("end", end_sample));
    let hung_workers = wind_down(&sh, threads);
    let (exit_lost_runs, exit_wrong_runs) = killed_runs(&sessions);
    let (metrics, sim_faults, leaked) = stop_sessions(&sh, &sessions, sse_threads, &sim);
    Ok(report(
        &sh,
        &Report {
            samples,
            down,
            leaked,
            hung_workers,
            exit_lost_runs,
            exit_wrong_runs,
            metrics,
            sim_faults,
        },
    ))
}

/// Starts every session, 8 at a time; each worker then runs its io
/// client (pushed to `threads`). The event readers of the sessions that
/// started.
fn start_sessions(
    sh: &Arc<Shared>,
    sim: &Client,
    threads: &mut Vec<JoinHandle<()>>,
) -> Result<Vec<JoinHandle<()>>, SoakError> {
    let mut sse_threads: Vec<JoinHandle<()>> = Vec::new();
    // Sessions: started 8 at a time; each worker then runs its io client.
    let started = Instant::now();
    let (permit_tx, permit_rx) = crossbeam_channel::bounded::<()>(8);
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<(
        usize,
        Result<std::thread::JoinHandle<()>, SoakError>,
    )>(sh.args.sessions.max(1));
    for i in 0..sh.args.sessions {
        let s = Arc::new(Sess {
            idx: i,
            id: Mutex::new(String::new()),
            pod: Mutex::new(String::new()),
            st: Mutex::new(SessState::default()),
            steady: AtomicBool::new(false),
            sse_sock: Mutex::new(None),
            sse_done: AtomicBool::new(false),
        });
        sh.sessions.lock().push(s.clone());
        let (sh2, sim2, ptx, prx, rtx) = (
            sh.clone(),
            sim.clone(),
            permit_tx.clone(),
            permit_rx.clone(),
            ready_tx.clone(),
        );
        let rng = StdRng::seed_from_u64(sh.args.seed.wrapping_mul(1000).wrapping_add(i as u64));
        let h = std::thread::Builder::new()
            .name(format!("session-{i}"))
            .spawn(move || {
                let _ = ptx.send(());
                let r = start_session(&sh2, &s, &sim2);
                let _ = prx.recv();
                let ok = r.is_ok();
                if let Err(e) = &r {
                    s.st.lock().start_error = Some(e.to_string());
                    s.sse_done.store(true, Ordering::SeqCst);
                }
                let _ = rtx.send((i, r));
                if ok {
                    session_io(&sh2, &s, rng);
                }
            })
            .map_err(|e| SoakError::Setup(format!("spawning a session worker: {e}")))?;
        threads.push(h);
    }
    drop(ready_tx);
    let mut start_failures = 0;
    for _ in 0..sh.args.sessions {
        match ready_rx.recv_timeout(Duration::from_secs(600)) {
            Ok((_, Ok(h))) => sse_threads.push(h),
            Ok((i, Err(e))) => {
                start_failures += 1;
                eprintln!("soak: session {i} did not start: {e}");
            }
            Err(_) => {
                return Err(SoakError::Setup(
                    "sessions did not start within 600 s".into(),
                ))
            }
        }
    }
    eprintln!(
        "soak: {} sessions running after {:.1} s",
        sh.args.sessions - start_failures,
        started.elapsed().as_secs_f64()
    );
    Ok(sse_threads)
}

/// The apps print once `go` arrived: waits (up to 60 s) until every one
/// did.
fn await_first_lines(sh: &Shared) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let sessions = sh.sessions.lock().clone();
        let waiting = sessions
            .iter()
            .filter(|s| {
                let st = s.st.lock();
                st.start_error.is_none() && st.lines == 0
            })
            .count();
        if waiting == 0 {
            break;
        }
        if Instant::now() >= deadline {
            eprintln!("soak: {waiting} session apps printed nothing within 60 s");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts the exec workers (pushed to `threads`).
fn start_execs(sh: &Arc<Shared>, threads: &mut Vec<JoinHandle<()>>) -> Result<(), SoakError> {
    for w in 0..sh.args.execs {
        let sh2 = sh.clone();
        let rng = StdRng::seed_from_u64(sh.args.seed.wrapping_mul(7919).wrapping_add(w as u64));
        threads.push(
            std::thread::Builder::new()
                .name(format!("exec-{w}"))
                .spawn(move || exec_worker(&sh2, w, rng))
                .map_err(|e| SoakError::Setup(format!("spawning an exec worker: {e}")))?,
        );
    }
    Ok(())
}

/// The soak's timeline: samples at the plan's points, faults at their
/// times, the faults cleared for the settle window, a progress line every
/// 10 s. The samples taken.
fn timeline(sh: &Shared, plan: &Plan) -> Vec<(&'static str, Sample)> {
    let t0 = Instant::now();
    *sh.t0.lock() = Some(t0);
    let at = |secs: f64| t0 + Duration::from_secs_f64(secs);
    let mut frng = StdRng::seed_from_u64(sh.args.seed ^ 0xfa17);
    let mut samples: Vec<(&'static str, Sample)> = Vec::new();
    let mut points = vec![("start", plan.warm), ("middle", plan.mid)];
    let mut next_fault = 0;
    let mut cleared = false;
    let mut last_progress = Instant::now();
    loop {
        let now = Instant::now();
        if now >= at(plan.end) {
            break;
        }
        if let Some((name, t)) = points.first().copied() {
            if now >= at(t) {
                points.remove(0);
                let s = sample(sh);
                eprintln!(
                    "soak: {:>6.1} s sample {name}: RSS {} KiB, {} threads, {} fds{}",
                    sh.elapsed(),
                    s.rss_kib,
                    s.threads,
                    s.fds,
                    if s.steady {
                        ""
                    } else {
                        " (not every client was connected)"
                    }
                );
                samples.push((name, s));
                continue;
            }
        }
        if let Some((t, f)) = plan.faults.get(next_fault) {
            if now >= at(*t) {
                inject(sh, f, &mut frng);
                eprintln!("soak: {:>6.1} s fault {f:?}", sh.elapsed());
                next_fault += 1;
                continue;
            }
        }
        if !cleared && now >= at(plan.faults_until) {
            // Whatever is pending ends here: the settle window is clean.
            match &sh.args.cluster {
                Cluster::Sim(sim) => {
                    let _ = http(
                        &sim_addr(sim),
                        "DELETE",
                        "/sim/faults",
                        None,
                        None,
                        Duration::from_secs(10),
                    );
                }
                Cluster::Real { proxy, .. } => {
                    if let Err(e) = proxy_call(proxy, "POST", "up") {
                        eprintln!("soak: the proxy did not come back up: {e}");
                    }
                }
            }
            cleared = true;
            eprintln!("soak: {:>6.1} s faults over; settling", sh.elapsed());
        }
        if last_progress.elapsed() >= Duration::from_secs(10) {
            last_progress = Instant::now();
            let sessions = sh.sessions.lock().clone();
            let lines: u64 = sessions.iter().map(|s| s.st.lock().lines).sum();
            let t = sh.execs.lock();
            let (rss, threads, fds) = proc_figures(sh.args.daemon_pid).unwrap_or_default();
            eprintln!(
                "soak: {:>6.1} s: {lines} session lines, execs {} started / {} completed; daemon RSS {rss} KiB, {threads} threads, {fds} fds",
                sh.elapsed(),
                t.started,
                t.completed
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    samples
}

/// Sessions down: wrong status, or (apps not killed) output stopped, or
/// the daemon no longer calls them running.
fn sessions_down(sh: &Shared, sessions: &[Arc<Sess>]) -> Vec<String> {
    let mut down: Vec<String> = Vec::new();
    for s in sessions {
        let id = s.id.lock().clone();
        let st = s.st.lock();
        if let Some(e) = &st.start_error {
            down.push(format!("session {}: start failed: {e}", s.idx));
            continue;
        }
        if !st.bad_status.is_empty() {
            down.push(format!("{id}: status {:?}", st.bad_status));
        }
        if st.killed_at.is_none() {
            let quiet = st.last_progress.map_or(Duration::MAX, |t| t.elapsed());
            if quiet > QUIET_DOWN {
                down.push(format!("{id}: no output for {:.0} s", quiet.as_secs_f64()));
            }
            if !st.runs_ended.is_empty() {
                down.push(format!("{id}: app ended unasked: {:?}", st.runs_ended));
            }
        }
    }
    for s in sessions {
        let id = s.id.lock().clone();
        if id.is_empty() {
            continue;
        }
        match daemon_call(sh, "GET", &format!("/v1/sessions/{id}")) {
            Ok((200, b)) if json_of(&b)["status"] == "running" => {}
            Ok((st, b)) => down.push(format!("{id}: GET {st} {}", json_of(&b)["status"])),
            Err(e) => down.push(format!("{id}: GET failed: {e}")),
        }
    }
    down
}

/// Wind down: execs finish their current stream, io clients close. The
/// workers not ended within 60 s.
fn wind_down(sh: &Shared, threads: Vec<JoinHandle<()>>) -> usize {
    sh.stop.store(true, Ordering::SeqCst);
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(threads.len().max(1));
    let n_workers = threads.len();
    for h in threads {
        let tx = done_tx.clone();
        std::thread::spawn(move || {
            let _ = h.join();
            let _ = tx.send(());
        });
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut joined = 0;
    while joined < n_workers {
        match done_rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(()) => joined += 1,
            Err(_) => break,
        }
    }
    n_workers - joined
}

/// Killed apps: their run end must have come, with 137. The lost and the
/// wrong ones.
fn killed_runs(sessions: &[Arc<Sess>]) -> (Vec<String>, Vec<String>) {
    let mut exit_lost_runs = Vec::new();
    let mut exit_wrong_runs = Vec::new();
    for s in sessions {
        let killed = s.st.lock().killed_at;
        let Some(killed) = killed else { continue };
        let id = s.id.lock().clone();
        let deadline = killed + Duration::from_secs(30);
        loop {
            let runs = s.st.lock().runs_ended.clone();
            if let Some((code, reason)) = runs.first() {
                if *code != Some(KILLED_EXIT) {
                    exit_wrong_runs.push(format!("{id}: run ended {code:?} {reason}"));
                }
                break;
            }
            if Instant::now() >= deadline {
                exit_lost_runs.push(format!("{id}: no run end after the kill"));
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    (exit_lost_runs, exit_wrong_runs)
}

/// The daemon's metrics and the sim's fault counters, then every session
/// stopped and the session pods left (60 s to go).
fn stop_sessions(
    sh: &Shared,
    sessions: &[Arc<Sess>],
    sse_threads: Vec<JoinHandle<()>>,
    sim: &Client,
) -> (String, Value, Vec<String>) {
    let metrics = daemon_call(sh, "GET", "/metrics")
        .map(|(_, b)| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let sim_faults = match &sh.args.cluster {
        Cluster::Sim(sim) => http(
            &sim_addr(sim),
            "GET",
            "/sim/faults",
            None,
            None,
            Duration::from_secs(10),
        )
        .map(|(_, b)| json_of(&b))
        .unwrap_or(Value::Null),
        Cluster::Real { proxy, .. } => proxy_call(proxy, "GET", "status").unwrap_or(Value::Null),
    };
    for s in sessions {
        s.sse_done.store(true, Ordering::SeqCst);
        let id = s.id.lock().clone();
        if id.is_empty() {
            continue;
        }
        match daemon_call(sh, "DELETE", &format!("/v1/sessions/{id}")) {
            Ok((204, _)) => {}
            Ok((st, b)) => eprintln!("soak: DELETE {id}: {st} {}", json_of(&b)),
            Err(e) => eprintln!("soak: DELETE {id}: {e}"),
        }
        if let Some(sock) = s.sse_sock.lock().take() {
            let _ = sock.shutdown(std::net::Shutdown::Both);
        }
    }
    for h in sse_threads {
        let _ = h.join();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let leaked = loop {
        match watch_pods(sim, &sh.args.session_namespace) {
            Ok(p) if p.is_empty() => break p,
            Ok(p) if Instant::now() >= deadline => break p,
            Err(e) if Instant::now() >= deadline => break vec![format!("(unknown: {e})")],
            _ => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    (metrics, sim_faults, leaked)
}

/// One bodiless request to the daemon with the soak's token (30 s).
fn daemon_call(sh: &Shared, method: &str, path: &str) -> Result<(u16, Vec<u8>), SoakError> {
    http(
        &sh.args.daemon,
        method,
        path,
        Some(&sh.args.token),
        None,
        Duration::from_secs(30),
    )
}

/// Seeds the sim's fault randomness, so a soak can be replayed.
fn post_fault_seed(a: &Args) -> Result<(), SoakError> {
    // A real plane draws nothing at random: the driver's schedule is all.
    let Cluster::Sim(sim) = &a.cluster else {
        return Ok(());
    };
    let (st, b) = http(
        &sim_addr(sim),
        "POST",
        "/sim/faults",
        None,
        Some(json!({"seed": a.seed}).to_string().as_bytes()),
        Duration::from_secs(10),
    )?;
    if st != 200 {
        return Err(SoakError::Setup(format!(
            "the sim's fault endpoint: {st} {}",
            String::from_utf8_lossy(&b)
        )));
    }
    Ok(())
}
