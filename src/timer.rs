//! One process-wide timer thread (`kubegate-timer`) for short jobs due
//! later, so that things that mostly wait (a debug relay between its
//! retries) hold no thread of their own while they wait.
//!
//! Jobs run on the timer thread, in due order (ties in submission order),
//! and must be quick and never block: hand real work to a thread of its
//! own. A job holds what it needs to run; to cancel, let it find out (a
//! flag, a `Weak` that no longer upgrades) when it runs. The queue is a
//! heap behind a mutex and a condition variable: one entry per pending
//! job, so its size is bounded by the jobs the callers keep pending (one per
//! relay).

use parking_lot::{Condvar, Mutex};
use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

type Job = Box<dyn FnOnce() + Send>;

struct Entry {
    due: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.due == o.due && self.seq == o.seq
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the heap's top is the earliest.
    fn cmp(&self, o: &Self) -> Ordering {
        (o.due, o.seq).cmp(&(self.due, self.seq))
    }
}

#[derive(Default)]
struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

struct Timer {
    queue: Mutex<Queue>,
    cv: Condvar,
}

static TIMER: OnceLock<Option<&'static Timer>> = OnceLock::new();

fn timer() -> Option<&'static Timer> {
    *TIMER.get_or_init(|| {
        let t: &'static Timer = Box::leak(Box::new(Timer {
            queue: Mutex::new(Queue::default()),
            cv: Condvar::new(),
        }));
        match std::thread::Builder::new()
            .name("kubegate-timer".into())
            .spawn(move || run(t))
        {
            Ok(_) => Some(t),
            Err(e) => {
                log::error!("spawning the timer thread: {e}");
                None
            }
        }
    })
}

fn run(t: &Timer) {
    let mut q = t.queue.lock();
    loop {
        let now = Instant::now();
        match q.heap.peek().map(|e| e.due) {
            None => t.cv.wait(&mut q),
            Some(due) if due > now => {
                let _ = t.cv.wait_for(&mut q, due - now);
            }
            Some(_) => {
                if let Some(e) = q.heap.pop() {
                    // Outside the lock: a job may schedule another.
                    drop(q);
                    (e.job)();
                    q = t.queue.lock();
                }
            }
        }
    }
}

/// Runs `job` on the timer thread after `delay`. False (and the job
/// dropped) when the timer thread could not be started.
pub fn after(delay: Duration, job: impl FnOnce() + Send + 'static) -> bool {
    let Some(t) = timer() else {
        return false;
    };
    let mut q = t.queue.lock();
    q.seq += 1;
    let seq = q.seq;
    let due = Instant::now() + delay;
    let earliest = q.heap.peek().is_none_or(|e| due < e.due);
    q.heap.push(Entry {
        due,
        seq,
        job: Box::new(job),
    });
    drop(q);
    if earliest {
        t.cv.notify_one();
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::bounded;

    #[test]
    fn jobs_run_in_due_order_not_submission_order() {
        let (tx, rx) = bounded(8);
        let start = Instant::now();
        for (ms, tag) in [(60u64, "c"), (20, "a"), (40, "b"), (20, "a2")] {
            let tx = tx.clone();
            assert!(after(Duration::from_millis(ms), move || {
                let _ = tx.send((tag, Instant::now()));
            }));
        }
        let got: Vec<(&str, Instant)> = (0..4)
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(
            got.iter().map(|g| g.0).collect::<Vec<_>>(),
            vec!["a", "a2", "b", "c"]
        );
        // None ran before its delay.
        assert!(got[0].1 >= start + Duration::from_millis(20));
        assert!(got[3].1 >= start + Duration::from_millis(60));
    }

    #[test]
    fn a_job_may_schedule_another_and_an_earlier_job_is_not_held_up() {
        let (tx, rx) = bounded(8);
        let t2 = tx.clone();
        after(Duration::from_secs(3600), move || {
            let _ = t2.send("never");
        });
        let t3 = tx.clone();
        after(Duration::from_millis(5), move || {
            let t4 = t3.clone();
            after(Duration::from_millis(5), move || {
                let _ = t4.send("second");
            });
            let _ = t3.send("first");
        });
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "first");
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap(), "second");
    }
}
