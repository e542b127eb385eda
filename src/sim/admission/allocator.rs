//! The Service ClusterIP / NodePort allocator. The store calls
//! [`allocate`] and [`release`] inside its write lock, after admission
//! accepted the object, so allocations are race-free and a rejected write
//! allocates nothing.

use super::services::needs_cluster_ip;
use super::{arr, str_at, Causes, Rejection};
use crate::sim::resources::Resource;
use crate::sim::store::error::quote;
use crate::sim::store::{FieldCause, Obj};
use serde_json::{json, Map, Value};
use std::collections::HashSet;
use std::net::Ipv4Addr;

/// `10.96.0.0/12`, the default service CIDR.
pub(super) const SVC_NET: u32 = (10 << 24) | (96 << 16);
pub(super) const SVC_SIZE: u32 = 1 << 20;
pub(super) const SVC_RANGE: &str = "10.96.0.0/12";
pub(super) const NODE_PORTS: std::ops::RangeInclusive<u16> = 30000..=32767;

/// Service ClusterIPs and NodePorts in use. Sequential from a cursor (real
/// servers pick at random; sequential keeps tests readable), skipping used
/// values; the first ten addresses are left for well-known services that
/// name their IP (`kubernetes` is 10.96.0.1, DNS 10.96.0.10).
#[derive(Debug)]
pub struct Allocator {
    ips: HashSet<u32>,
    next_ip: u32,
    ports: HashSet<u16>,
    next_port: u16,
}

impl Default for Allocator {
    fn default() -> Self {
        Allocator {
            ips: HashSet::new(),
            next_ip: 11,
            ports: HashSet::new(),
            next_port: *NODE_PORTS.start(),
        }
    }
}

impl Allocator {
    fn take_ip(&mut self) -> Option<u32> {
        for _ in 0..SVC_SIZE {
            let off = self.next_ip;
            self.next_ip = if off + 1 >= SVC_SIZE - 1 { 1 } else { off + 1 };
            let ip = SVC_NET + off;
            if !self.ips.contains(&ip) {
                self.ips.insert(ip);
                return Some(ip);
            }
        }
        None
    }

    fn take_port(&mut self, exclude: &HashSet<u16>) -> Option<u16> {
        for _ in NODE_PORTS {
            let p = self.next_port;
            self.next_port = if p >= *NODE_PORTS.end() {
                *NODE_PORTS.start()
            } else {
                p + 1
            };
            if !self.ports.contains(&p) && !exclude.contains(&p) {
                self.ports.insert(p);
                return Some(p);
            }
        }
        None
    }

    /// Addresses in use (for tests and diagnostics).
    pub fn ips_in_use(&self) -> usize {
        self.ips.len()
    }
}

pub(super) fn svc_ip(svc: &Obj) -> Option<u32> {
    if !needs_cluster_ip(svc) {
        return None;
    }
    str_at(svc, &["spec", "clusterIP"])
        .parse::<Ipv4Addr>()
        .ok()
        .map(u32::from)
}

pub(super) fn svc_node_ports(svc: &Obj) -> Vec<u16> {
    let ty = str_at(svc, &["spec", "type"]);
    if ty != "NodePort" && ty != "LoadBalancer" {
        return vec![];
    }
    arr(svc.pointer("/spec/ports"))
        .iter()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|n| u16::try_from(n).ok())
        .filter(|n| *n != 0)
        .collect()
}

/// Allocates what a valid Service needs (its ClusterIP and NodePorts), given
/// the stored version on update. Checks everything before taking anything,
/// so a rejection leaves the allocator as it was. Other kinds: no-op.
pub fn allocate(
    res: Resource,
    obj: &mut Obj,
    old: Option<&Obj>,
    alloc: &mut Allocator,
) -> Result<(), Rejection> {
    if res != Resource::Service {
        return Ok(());
    }
    let old_ip = old.and_then(svc_ip);
    let old_ports: HashSet<u16> = old
        .map(svc_node_ports)
        .unwrap_or_default()
        .into_iter()
        .collect();
    let cip = str_at(obj, &["spec", "clusterIP"]).to_string();
    let mut causes = Causes::new();
    let mut want_ip = None;
    if needs_cluster_ip(obj) && !cip.is_empty() && cip != "None" {
        if let Ok(addr) = cip.parse::<Ipv4Addr>() {
            let ip = u32::from(addr);
            if Some(ip) != old_ip {
                let shown = format!("[]string{{{}}}", quote(&cip));
                if !(SVC_NET..SVC_NET + SVC_SIZE).contains(&ip) {
                    causes.push(FieldCause::invalid_raw(
                        "spec.clusterIPs",
                        shown,
                        format!("failed to allocate IP {cip}: the provided IP ({cip}) is not in the valid range. The range of valid IPs is {SVC_RANGE}"),
                    ));
                } else if alloc.ips.contains(&ip) {
                    causes.push(FieldCause::invalid_raw(
                        "spec.clusterIPs",
                        shown,
                        format!("failed to allocate IP {cip}: provided IP is already allocated"),
                    ));
                } else {
                    want_ip = Some(ip);
                }
            }
        }
    }
    let mut want_ports = HashSet::new();
    for (i, np) in arr(obj.pointer("/spec/ports")).iter().enumerate() {
        let Some(n) = np
            .get("nodePort")
            .and_then(Value::as_i64)
            .filter(|n| *n != 0)
        else {
            continue;
        };
        let ok_range = u16::try_from(n).ok().filter(|p| NODE_PORTS.contains(p));
        match ok_range {
            None => causes.push(FieldCause::invalid_raw(
                format!("spec.ports[{i}].nodePort"),
                n.to_string(),
                "provided port is not in the valid range. The range of valid ports is 30000-32767",
            )),
            Some(p)
                if !old_ports.contains(&p)
                    && (alloc.ports.contains(&p) || !want_ports.insert(p)) =>
            {
                causes.push(FieldCause::invalid_raw(
                    format!("spec.ports[{i}].nodePort"),
                    n.to_string(),
                    "provided port is already allocated",
                ))
            }
            _ => {}
        }
    }
    if !causes.is_empty() {
        return Err(Rejection::Invalid(causes));
    }
    // Commit: requested values first, then fresh ones.
    if let Some(ip) = want_ip {
        alloc.ips.insert(ip);
    }
    for p in &want_ports {
        alloc.ports.insert(*p);
    }
    let ty = str_at(obj, &["spec", "type"]).to_string();
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if ty != "ExternalName" {
        if cip.is_empty() {
            let ip = alloc.take_ip().ok_or_else(|| {
                Rejection::Invalid(vec![FieldCause::invalid_raw(
                    "spec.clusterIPs",
                    "[]string{}",
                    "failed to allocate IP: range is full",
                )])
            })?;
            let s = Ipv4Addr::from(ip).to_string();
            spec.insert("clusterIP".into(), json!(s));
            spec.insert("clusterIPs".into(), json!([s]));
        } else if cip == "None" {
            spec.insert("clusterIPs".into(), json!(["None"]));
        }
    }
    if ty == "NodePort" || ty == "LoadBalancer" {
        let taken: HashSet<u16> = svc_node_ports_of_spec(spec);
        if let Some(ports) = spec.get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports.iter_mut().filter_map(Value::as_object_mut) {
                if p.get("nodePort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                    if let Some(n) = alloc.take_port(&taken) {
                        p.insert("nodePort".into(), json!(n));
                    }
                }
            }
        }
    }
    Ok(())
}

pub(super) fn svc_node_ports_of_spec(spec: &Map<String, Value>) -> HashSet<u16> {
    arr(spec.get("ports"))
        .iter()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter_map(|n| u16::try_from(n).ok())
        .collect()
}

/// Frees what `obj` held and `keep` (its replacement, if any) no longer holds.
pub fn release(res: Resource, obj: &Obj, keep: Option<&Obj>, alloc: &mut Allocator) {
    if res != Resource::Service {
        return;
    }
    let kept_ip = keep.and_then(svc_ip);
    if let Some(ip) = svc_ip(obj) {
        if Some(ip) != kept_ip {
            alloc.ips.remove(&ip);
        }
    }
    let kept: HashSet<u16> = keep
        .map(svc_node_ports)
        .unwrap_or_default()
        .into_iter()
        .collect();
    for p in svc_node_ports(obj) {
        if !kept.contains(&p) {
            alloc.ports.remove(&p);
        }
    }
}
