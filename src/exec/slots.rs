//! Concurrency limits on execs, per principal and overall
//! (docs/exec.md#beyond-the-basic-gateway): a slot is taken before any cluster
//! call and given back when its guard drops; no slot is a clear `EXEC_TOO_MANY` at once, never a
//! wait.

use crate::api::{ApiError, Code};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

pub struct Slots {
    max_total: usize,
    max_per_principal: usize,
    used: Mutex<(usize, HashMap<String, usize>)>,
}

/// A taken slot; dropping it gives it back.
pub struct Slot {
    slots: Arc<Slots>,
    who: String,
}

impl Slots {
    pub fn new(max_total: usize, max_per_principal: usize) -> Arc<Slots> {
        Arc::new(Slots {
            max_total,
            max_per_principal,
            used: Mutex::new((0, HashMap::new())),
        })
    }

    pub fn acquire(self: &Arc<Self>, who: &str) -> Result<Slot, ApiError> {
        let mut g = self.used.lock();
        if g.0 >= self.max_total {
            return Err(ApiError::new(
                Code::ExecTooMany,
                format!(
                    "{} execs are running, the most this daemon allows; retry later",
                    self.max_total
                ),
            ));
        }
        let mine = g.1.get(who).copied().unwrap_or(0);
        if mine >= self.max_per_principal {
            return Err(ApiError::new(
                Code::ExecTooMany,
                format!(
                    "you have {mine} execs running, the most allowed per principal; retry later"
                ),
            ));
        }
        g.0 += 1;
        g.1.insert(who.to_string(), mine + 1);
        Ok(Slot {
            slots: self.clone(),
            who: who.to_string(),
        })
    }

    /// Slots in use (overall).
    pub fn in_use(&self) -> usize {
        self.used.lock().0
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut g = self.slots.used.lock();
        g.0 = g.0.saturating_sub(1);
        if let Some(n) = g.1.get_mut(&self.who) {
            *n -= 1;
            if *n == 0 {
                g.1.remove(&self.who);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_principal_and_overall_limits() {
        let s = Slots::new(3, 2);
        let a1 = s.acquire("a").unwrap();
        let _a2 = s.acquire("a").unwrap();
        assert_eq!(s.acquire("a").err().unwrap().code, Code::ExecTooMany);
        let _b1 = s.acquire("b").unwrap();
        let e = s.acquire("c").err().unwrap();
        assert!(e.message.contains("3 execs"), "{}", e.message);
        drop(a1);
        assert_eq!(s.in_use(), 2);
        let _c = s.acquire("c").unwrap();
        assert_eq!(s.in_use(), 3);
    }
}
