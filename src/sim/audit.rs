//! `--audit-log PATH` (docs/sim.md#audit-log): one JSON line per request,
//! an `audit.k8s.io/v1` `Event` at level `Metadata` and stage
//! `ResponseComplete`, as kube-apiserver's log backend writes it with
//! `--audit-log-format json`. Never a header value or a body (no tokens).
//!
//! Bounded: lines go through a 64 KiB buffered writer flushed after each
//! line. A line that cannot be written (the disk is full, the file gone)
//! is dropped and counted; the request it describes is answered all the
//! same. The first drop and every 1,000th after it are logged.

use super::authn::UserInfo;
use super::rbac::Attributes;
use crate::http::Request;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

pub struct AuditLog {
    out: Mutex<std::io::BufWriter<std::fs::File>>,
    dropped: AtomicU64,
}

/// What one audit line says beyond the request itself.
pub struct Entry<'a> {
    pub received: SystemTime,
    pub user: Option<&'a UserInfo>,
    pub impersonated: Option<&'a UserInfo>,
    pub attrs: &'a Attributes,
    pub code: u16,
    /// A failure's Status (its `status`, `message`, `reason` and
    /// `details` are written), when it had one.
    pub failure: Option<Value>,
    /// The authorizer's decision (`allow`/`forbid`) and reason.
    pub decision: Option<(&'a str, &'a str)>,
}

/// A MicroTime, as audit events write their timestamps.
fn micro_time(t: SystemTime) -> String {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let base = crate::kube::time::rfc3339(t);
    let base = base.trim_end_matches('Z');
    format!("{base}.{:06}Z", d.subsec_micros())
}

impl AuditLog {
    pub fn open(path: &std::path::Path) -> std::io::Result<AuditLog> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(AuditLog {
            out: Mutex::new(std::io::BufWriter::with_capacity(64 << 10, f)),
            dropped: AtomicU64::new(0),
        })
    }

    /// Lines dropped so far (a write failed).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// The event for `req` and `e`.
    pub fn event(req: &Request, e: &Entry<'_>) -> Value {
        let a = e.attrs;
        let mut ev = Map::new();
        ev.insert("kind".into(), json!("Event"));
        ev.insert("apiVersion".into(), json!("audit.k8s.io/v1"));
        ev.insert("level".into(), json!("Metadata"));
        ev.insert("auditID".into(), json!(crate::sim::store::new_uid()));
        ev.insert("stage".into(), json!("ResponseComplete"));
        ev.insert("requestURI".into(), json!(req.target));
        ev.insert("verb".into(), json!(a.verb));
        let anonymous = UserInfo::default();
        ev.insert("user".into(), e.user.unwrap_or(&anonymous).to_json());
        if let Some(i) = e.impersonated {
            ev.insert("impersonatedUser".into(), i.to_json());
        }
        ev.insert("sourceIPs".into(), json!([req.peer.ip().to_string()]));
        if let Some(ua) = req.header("user-agent") {
            ev.insert("userAgent".into(), json!(ua));
        }
        if a.resource_request {
            let mut o = Map::new();
            let mut put = |k: &str, v: &str| {
                if !v.is_empty() {
                    o.insert(k.into(), json!(v));
                }
            };
            put("resource", &a.resource);
            put("namespace", &a.namespace);
            put("name", &a.name);
            put("apiGroup", &a.api_group);
            put("apiVersion", &a.api_version);
            put("subresource", &a.subresource);
            ev.insert("objectRef".into(), Value::Object(o));
        }
        let mut rs = Map::new();
        rs.insert("metadata".into(), json!({}));
        if let Some(Value::Object(f)) = &e.failure {
            for k in ["status", "message", "reason"] {
                if let Some(v) = f
                    .get(k)
                    .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
                {
                    rs.insert(k.into(), v.clone());
                }
            }
            if let Some(d) = f.get("details").filter(|d| d.is_object()) {
                rs.insert("details".into(), d.clone());
            }
        }
        rs.insert("code".into(), json!(e.code));
        ev.insert("responseStatus".into(), Value::Object(rs));
        ev.insert(
            "requestReceivedTimestamp".into(),
            json!(micro_time(e.received)),
        );
        ev.insert(
            "stageTimestamp".into(),
            json!(micro_time(SystemTime::now())),
        );
        if let Some((decision, reason)) = e.decision {
            let mut ann = Map::new();
            ann.insert("authorization.k8s.io/decision".into(), json!(decision));
            ann.insert("authorization.k8s.io/reason".into(), json!(reason));
            ev.insert("annotations".into(), Value::Object(ann));
        }
        Value::Object(ev)
    }

    /// Writes one line; a failure drops it (counted), never the request.
    pub fn write(&self, req: &Request, e: &Entry<'_>) {
        let mut line = Self::event(req, e).to_string();
        line.push('\n');
        let mut out = self.out.lock();
        let r = out.write_all(line.as_bytes()).and_then(|()| out.flush());
        if let Err(err) = r {
            let n = self.dropped.fetch_add(1, Ordering::Relaxed);
            if n % 1000 == 0 {
                log::warn!(
                    "the audit log: a line could not be written ({err}); {} dropped so far",
                    n + 1
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_times_have_six_digits() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_micros(1_500_000_123);
        assert_eq!(micro_time(t), "1970-01-01T00:25:00.000123Z");
    }
}
