//! Samples of the daemon's RSS, threads and open fds (from `/proc`), the
//! median of a few reads while every client is held connected.

use crate::state::Shared;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Default)]
pub(crate) struct Sample {
    pub(crate) rss_kib: u64,
    pub(crate) threads: u64,
    pub(crate) fds: u64,
    pub(crate) steady: bool,
}

pub(crate) fn proc_figures(pid: u32) -> Option<(u64, u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |k: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(k))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((field("VmRSS:")?, field("Threads:")?, fds))
}

pub(crate) fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

/// Holds every client connected, waits until they all are (20 s at most),
/// then takes the median of five readings 200 ms apart.
pub(crate) fn sample(sh: &Shared) -> Sample {
    sh.hold.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(20);
    let steady = loop {
        let sessions = sh.sessions.lock().clone();
        let all = sessions
            .iter()
            .filter(|s| s.st.lock().start_error.is_none())
            .all(|s| s.steady.load(Ordering::SeqCst))
            && sh.exec_steady.iter().all(|e| e.load(Ordering::SeqCst));
        if all {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (mut rss, mut thr, mut fds) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..5 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(200));
        }
        if let Some((r, t, f)) = proc_figures(sh.args.daemon_pid) {
            rss.push(r);
            thr.push(t);
            fds.push(f);
        }
    }
    sh.hold.store(false, Ordering::SeqCst);
    Sample {
        rss_kib: median(rss),
        threads: median(thr),
        fds: median(fds),
        steady,
    }
}
