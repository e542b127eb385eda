//! The fault schedule (seeded, quiet around the samples) and its injection:
//! through the sim's `/sim/faults`, or on a real control plane through the
//! TCP proxy between the daemon and the API server and signals to the sim
//! node's processes (docs/RELIABILITY.md, "On a real control plane").

use crate::args::Cluster;
use crate::state::{Sess, Shared};
use crate::wire::http;
use crate::{SoakError, APP_NAME};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub(crate) enum Fault {
    DropWatches,
    Fail { status: u16, count: u64 },
    CutExec,
    Kill,
    Outage(u64),
}

impl Fault {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Fault::DropWatches => "watch drops",
            Fault::Fail { status: 429, .. } => "429 bursts",
            Fault::Fail { .. } => "5xx bursts",
            Fault::CutExec => "exec stream cuts",
            Fault::Kill => "containers killed",
            Fault::Outage(_) => "API outages",
        }
    }
}

/// The soak's time line, seconds after t0.
pub(crate) struct Plan {
    pub(crate) warm: f64,
    pub(crate) mid: f64,
    pub(crate) end: f64,
    pub(crate) faults_until: f64,
    pub(crate) faults: Vec<(f64, Fault)>,
}

pub(crate) fn plan(d: Duration, seed: u64, sessions: usize) -> Plan {
    let d = d.as_secs_f64();
    let warm = (d / 6.0).clamp(20.0, 300.0).min(d / 3.0);
    let settle = (d / 6.0).clamp(15.0, 120.0).min(d / 4.0);
    let faults_until = d - settle;
    let mid = (warm + d) / 2.0;
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let mut faults: Vec<(f64, Fault)> = Vec::new();
    // Every kind early once (before the first sample, so its paths are warm),
    // then at seeded intervals.
    let kinds: [(f64, f64, Fault); 6] = [
        (3.0, 12.0, Fault::DropWatches),
        (
            5.0,
            14.0,
            Fault::Fail {
                status: 503,
                count: 20,
            },
        ),
        (
            6.0,
            14.0,
            Fault::Fail {
                status: 500,
                count: 20,
            },
        ),
        (
            7.0,
            16.0,
            Fault::Fail {
                status: 429,
                count: 20,
            },
        ),
        (4.0, 10.0, Fault::CutExec),
        (9.0, 18.0, Fault::Kill),
    ];
    for (first, every, fault) in kinds {
        let mut t = first;
        while t < faults_until {
            faults.push((t, fault.clone()));
            t += every * rng.random_range(0.6..1.4);
        }
    }
    // A 10 s outage at 30% of the fault window, then one every 10 minutes.
    let mut t = warm + (faults_until - warm) * 0.3;
    while t + 10.0 < faults_until {
        faults.push((t, Fault::Outage(10)));
        t += 600.0;
    }
    let outages: Vec<f64> = faults
        .iter()
        .filter(|f| matches!(f.1, Fault::Outage(_)))
        .map(|f| f.0)
        .collect();
    let mut kills_left = (sessions / 4).max(usize::from(sessions > 1));
    faults.retain(|(t, f)| {
        // Quiet around the samples, and nothing else while the API is out
        // (the fault endpoint is out too).
        let near_sample = [warm, mid].iter().any(|s| *t > s - 6.0 && *t < s + 2.0);
        let in_outage = outages.iter().any(|o| *t > o - 1.0 && *t < o + 12.0);
        if near_sample || (in_outage && !matches!(f, Fault::Outage(_))) {
            return false;
        }
        if matches!(f, Fault::Kill) {
            if kills_left == 0 {
                return false;
            }
            kills_left -= 1;
        }
        true
    });
    faults.sort_by(|a, b| a.0.total_cmp(&b.0));
    Plan {
        warm,
        mid,
        end: d,
        faults_until,
        faults,
    }
}

pub(crate) fn sim_addr(sim: &str) -> String {
    sim.trim_start_matches("http://").to_string()
}

/// `POST URL/ACTION` (or GET) on the real plane's proxy control endpoint.
pub(crate) fn proxy_call(proxy: &str, method: &str, action: &str) -> Result<Value, SoakError> {
    let (st, resp) = http(
        &sim_addr(proxy),
        method,
        &format!("/{action}"),
        None,
        None,
        Duration::from_secs(10),
    )?;
    if st != 200 {
        return Err(SoakError::Answer(format!(
            "proxy {action}: {st} {}",
            String::from_utf8_lossy(&resp)
        )));
    }
    Ok(serde_json::from_slice(&resp).unwrap_or(Value::Null))
}

pub(crate) fn post_fault(sh: &Shared, body: &Value) -> Result<(), SoakError> {
    let Cluster::Sim(sim) = &sh.args.cluster else {
        return Err(SoakError::Answer("no /sim/faults on a real plane".into()));
    };
    let (st, resp) = http(
        &sim_addr(sim),
        "POST",
        "/sim/faults",
        None,
        Some(body.to_string().as_bytes()),
        Duration::from_secs(10),
    )?;
    if st != 200 {
        return Err(SoakError::Answer(format!(
            "{st} {}",
            String::from_utf8_lossy(&resp)
        )));
    }
    Ok(())
}

pub(crate) fn inject(sh: &Shared, f: &Fault, rng: &mut StdRng) {
    if let Cluster::Real { proxy, .. } = &sh.args.cluster {
        return inject_real(sh, proxy, f, rng);
    }
    let body = match f {
        Fault::DropWatches => json!({"dropWatches": true}),
        Fault::Fail { status, count } => {
            json!({"failRequests": {"count": count, "status": status, "retryAfterSecs": 1}})
        }
        Fault::CutExec => json!({"cutStreams": "exec"}),
        Fault::Outage(secs) => json!({"outageSecs": secs}),
        Fault::Kill => {
            let Some((s, pod)) = pick_victim(sh, f, rng) else {
                return;
            };
            s.st.lock().killed_at = Some(Instant::now());
            json!({"killContainer": {"namespace": sh.args.session_namespace, "pod": pod,
                                     "container": format!("app-{APP_NAME}")}})
        }
    };
    match post_fault(sh, &body) {
        Ok(()) => *sh.faults.lock().counts.entry(f.name()).or_default() += 1,
        Err(e) => {
            eprintln!("soak: fault {f:?} not injected: {e}");
            sh.faults.lock().failed_posts += 1;
        }
    }
}

/// A session whose app can be killed (up, producing, not killed yet), and
/// its pod; `None` (counted as skipped) when at most one is.
fn pick_victim(sh: &Shared, f: &Fault, rng: &mut StdRng) -> Option<(Arc<Sess>, String)> {
    let sessions = sh.sessions.lock().clone();
    let alive: Vec<&Arc<Sess>> = sessions
        .iter()
        .filter(|s| {
            let st = s.st.lock();
            st.killed_at.is_none() && st.start_error.is_none() && st.lines > 0
        })
        .collect();
    if alive.len() <= 1 {
        *sh.faults.lock().skipped.entry(f.name()).or_default() += 1;
        return None;
    }
    let s = alive[rng.random_range(0..alive.len())].clone();
    let pod = s.pod.lock().clone();
    Some((s, pod))
}

/// The faults on a real control plane. The API server itself cannot be
/// told to fail, so: watch drops and exec stream cuts are a cut of every
/// connection of the daemon at the proxy in front of the API server (down,
/// then up at once); an outage is the proxy down for its seconds; a killed
/// container is SIGKILL to its process group on the sim node (this host;
/// the group is the `sim://PID` of its containerID, as the sim's own kill
/// fault does it). 429 and 5xx bursts do not carry over (counted skipped).
fn inject_real(sh: &Shared, proxy: &str, f: &Fault, rng: &mut StdRng) {
    let done = match f {
        Fault::Fail { .. } => {
            *sh.faults.lock().skipped.entry(f.name()).or_default() += 1;
            return;
        }
        Fault::DropWatches | Fault::CutExec => {
            proxy_call(proxy, "POST", "down").and_then(|_| proxy_call(proxy, "POST", "up"))
        }
        Fault::Outage(secs) => proxy_call(proxy, "POST", "down").map(|_| {
            let (proxy, secs) = (proxy.to_string(), *secs);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_secs(secs));
                if let Err(e) = proxy_call(&proxy, "POST", "up") {
                    eprintln!("soak: the proxy did not come back up: {e}");
                }
            });
            Value::Null
        }),
        Fault::Kill => {
            let Some((s, pod)) = pick_victim(sh, f, rng) else {
                return;
            };
            let r = kill_container(sh, &pod);
            if r.is_ok() {
                s.st.lock().killed_at = Some(Instant::now());
            }
            r.map(|()| Value::Null)
        }
    };
    match done {
        Ok(_) => *sh.faults.lock().counts.entry(f.name()).or_default() += 1,
        Err(e) => {
            eprintln!("soak: fault {f:?} not injected: {e}");
            sh.faults.lock().failed_posts += 1;
        }
    }
}

/// SIGKILL to the process group of the app container of `pod` on the sim
/// node (its status' `containerID`, `sim://PGID`).
fn kill_container(sh: &Shared, pod: &str) -> Result<(), SoakError> {
    let client = crate::setup::cluster_client(&sh.args)?;
    let path = format!(
        "/api/v1/namespaces/{}/pods/{pod}",
        sh.args.session_namespace
    );
    let p: Value = client
        .send_json(&kubegate::kube::client::rest::Request::get(path))
        .map_err(|e| SoakError::Answer(format!("reading pod {pod}: {e}")))?;
    let want = format!("app-{APP_NAME}");
    let id = p["status"]["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["name"] == want.as_str())
        .and_then(|c| c["containerID"].as_str())
        .and_then(|id| id.strip_prefix("sim://"))
        .and_then(|pid| pid.parse::<i32>().ok())
        .filter(|pid| *pid > 1)
        .ok_or_else(|| SoakError::Answer(format!("pod {pod}: no running {want} to kill")))?;
    let pgid = rustix::process::Pid::from_raw(id)
        .ok_or_else(|| SoakError::Answer(format!("pod {pod}: bad process id {id}")))?;
    rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL)
        .map_err(|e| SoakError::Answer(format!("killing process group {id} of {pod}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_is_seeded_and_keeps_the_samples_quiet() {
        let p = plan(Duration::from_secs(90), 1, 20);
        let q = plan(Duration::from_secs(90), 1, 20);
        let times = |p: &Plan| p.faults.iter().map(|f| f.0).collect::<Vec<_>>();
        assert_eq!(times(&p), times(&q));
        assert_ne!(times(&p), times(&plan(Duration::from_secs(90), 2, 20)));
        assert_eq!((p.warm, p.end), (20.0, 90.0));
        assert!(p.faults.iter().all(|f| f.0 < p.faults_until));
        for s in [p.warm, p.mid] {
            assert!(p.faults.iter().all(|f| f.0 <= s - 6.0 || f.0 >= s + 2.0));
        }
        let count = |p: &Plan, k: &str| p.faults.iter().filter(|f| f.1.name() == k).count();
        assert_eq!(count(&p, "API outages"), 1);
        assert!(count(&p, "containers killed") <= 5);
        for k in [
            "watch drops",
            "5xx bursts",
            "429 bursts",
            "exec stream cuts",
        ] {
            assert!(count(&p, k) >= 2, "{k}");
        }
        // Nothing else while the API is out.
        let out = p.faults.iter().find(|f| matches!(f.1, Fault::Outage(_)));
        let o = out.map_or(0.0, |f| f.0);
        assert!(p
            .faults
            .iter()
            .all(|f| matches!(f.1, Fault::Outage(_)) || f.0 <= o - 1.0 || f.0 >= o + 12.0));
    }
}
