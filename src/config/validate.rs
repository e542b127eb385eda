//! The checks of a parsed configuration that serde cannot express, one
//! function per section, each error naming the key at fault
//! ([`KeyError`]); relative paths are resolved against the config file's
//! folder on the way.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::{
    ClusterMode, ClusterSection, Config, ExecSection, KeyError, Principal, RoutingLayer,
    RoutingMode, ServerSection, SessionsSection, DEMO_TOKEN_SHA256, MIN_AUDIT_MAX_BYTES,
    MIN_RECORDING_MAX_BYTES,
};
use crate::api::Workspace;
use crate::kube::connection::Impersonation;
use crate::kube::image::check_image;
use crate::kube::labels::MANAGED_BY_LABEL;
use crate::kube::names::{
    check_dns_label, check_dns_subdomain, check_label_key, check_label_value,
};

/// `Err` naming `key`.
pub(super) fn err<T>(key: &str, message: String) -> Result<T, KeyError> {
    Err(KeyError {
        key: key.to_string(),
        message,
    })
}

/// A relative path made absolute against `base` (the config file's
/// folder); `.` components dropped: `./state` reads better in logs as
/// `state`.
pub(super) fn resolve(base: &Path, p: &mut PathBuf) {
    if p.is_relative() {
        *p = base.join(
            p.components()
                .filter(|c| *c != std::path::Component::CurDir)
                .collect::<PathBuf>(),
        );
    }
}

impl Config {
    /// Every section's checks, then the demo token's rule.
    pub(super) fn validate(&mut self, base: &Path) -> Result<(), KeyError> {
        check_server(&mut self.server, base)?;
        check_cluster(&mut self.cluster, base)?;
        check_sessions(&self.sessions)?;
        check_exec(&mut self.exec, base)?;
        check_principals(&mut self.principals)?;
        if self.cluster.impersonate {
            check_impersonated_names(&self.principals)?;
        }
        super::oidc::check_oidc(&mut self.oidc, &self.principals, base)?;
        self.check_demo_token()
    }

    /// The published demo token is for the demo only: the embedded sim,
    /// one principal, a loopback front door (a local user can reach it
    /// anyway; nobody else can).
    fn check_demo_token(&self) -> Result<(), KeyError> {
        let Some(i) = self
            .principals
            .iter()
            .position(|p| p.token_sha256 == DEMO_TOKEN_SHA256)
        else {
            return Ok(());
        };
        let why = if self.cluster.mode != ClusterMode::Sim {
            "only allowed with [cluster] mode = \"sim\""
        } else if !self.server.listen_addr().ip().is_loopback() {
            "only allowed on a loopback front door (server.listen)"
        } else if self.principals.len() > 1 {
            "only allowed as the one principal"
        } else {
            return Ok(());
        };
        err(
            &format!("principal[{i}].token_sha256"),
            format!(
                "is the digest of the published demo token (config.example.toml), which anyone can read: {why}; make a token of your own and put its digest here (docs/deploy.md, \"Principals\")"
            ),
        )
    }
}

/// `[server]`.
fn check_server(s: &mut ServerSection, base: &Path) -> Result<(), KeyError> {
    if let Err(e) = s.listen.parse::<SocketAddr>() {
        return err(
            "server.listen",
            format!("{:?} is not an IP:PORT address ({e})", s.listen),
        );
    }
    match (&mut s.tls_cert, &mut s.tls_key) {
        (Some(c), Some(k)) => {
            resolve(base, c);
            resolve(base, k);
            for (key, p) in [("server.tls_cert", &*c), ("server.tls_key", &*k)] {
                if let Err(e) = std::fs::metadata(p) {
                    return err(key, format!("cannot read {}: {e}", p.display()));
                }
            }
        }
        (None, None) => {}
        (Some(_), None) => return err("server.tls_key", "missing: tls_cert needs tls_key".into()),
        (None, Some(_)) => return err("server.tls_cert", "missing: tls_key needs tls_cert".into()),
    }
    for (key, v) in [
        ("server.max_connections", s.max_connections),
        ("server.keep_alive_idle_secs", s.keep_alive_idle_secs),
        (
            "server.request_read_timeout_secs",
            s.request_read_timeout_secs,
        ),
        ("server.shutdown_grace_secs", s.shutdown_grace_secs),
        ("server.max_header_bytes", s.max_header_bytes),
        ("server.max_body_bytes", s.max_body_bytes),
        (
            "server.max_connections_per_peer",
            s.max_connections_per_peer,
        ),
        (
            "server.max_connections_per_principal",
            s.max_connections_per_principal,
        ),
        ("server.head_grace_secs", s.head_grace_secs),
        ("server.min_head_bytes_per_sec", s.min_head_bytes_per_sec),
        (
            "server.tunnel_idle_timeout_secs",
            s.tunnel_idle_timeout_secs,
        ),
        (
            "server.tunnel_max_duration_secs",
            s.tunnel_max_duration_secs,
        ),
    ] {
        positive(key, v)?;
    }
    if s.state_dir.as_os_str().is_empty() {
        return err("server.state_dir", "must not be empty".into());
    }
    resolve(base, &mut s.state_dir);
    Ok(())
}

/// `[cluster]` and `[cluster.sim]`.
fn check_cluster(c: &mut ClusterSection, base: &Path) -> Result<(), KeyError> {
    if c.mode != ClusterMode::Kubeconfig {
        if c.kubeconfig.is_some() {
            return err(
                "cluster.kubeconfig",
                "only allowed with mode = \"kubeconfig\"".into(),
            );
        }
        if c.context.is_some() {
            return err(
                "cluster.context",
                "only allowed with mode = \"kubeconfig\"".into(),
            );
        }
    }
    if let Some(p) = &mut c.kubeconfig {
        if p.as_os_str().is_empty() {
            return err("cluster.kubeconfig", "must not be empty".into());
        }
        resolve(base, p);
    }
    if c.context.as_deref().is_some_and(|x| x.trim().is_empty()) {
        return err("cluster.context", "must not be empty".into());
    }
    check_label_value(&c.managed_by).or_else(|m| err("cluster.managed_by", m.into()))?;
    for (i, ns) in c.sim.namespaces.iter().enumerate() {
        check_dns_label(ns).or_else(|m| {
            err(
                &format!("cluster.sim.namespaces[{i}]"),
                format!("{ns:?}: {m}"),
            )
        })?;
    }
    if let Some(r) = c.sim.uid_range.as_deref() {
        if r != "off" {
            if let Err(m) = crate::sim::pod_users::parse_range(r) {
                return err("cluster.sim.uid_range", format!("{m}, or \"off\""));
            }
        }
    }
    if let Some(p) = &mut c.sim.pods_dir {
        if p.as_os_str().is_empty() {
            return err("cluster.sim.pods_dir", "must not be empty".into());
        }
        resolve(base, p);
    }
    for (i, g) in c.sim.fail_images.iter().enumerate() {
        if g.trim().is_empty() {
            return err(
                &format!("cluster.sim.fail_images[{i}]"),
                "must not be empty".into(),
            );
        }
    }
    if let Some(p) = &mut c.sim.request_log {
        if p.as_os_str().is_empty() {
            return err("cluster.sim.request_log", "must not be empty".into());
        }
        resolve(base, p);
    }
    check_dns_label(&c.session_namespace).or_else(|m| {
        err(
            "cluster.session_namespace",
            format!("{:?}: {m}", c.session_namespace),
        )
    })?;
    check_image(&c.workspace_image).or_else(|m| err("cluster.workspace_image", m.to_string()))?;
    check_image(&c.default_app_image)
        .or_else(|m| err("cluster.default_app_image", m.to_string()))?;
    if c.default_app_command
        .first()
        .is_none_or(|a| a.trim().is_empty())
    {
        return err(
            "cluster.default_app_command",
            "must name a program (a non-empty first element)".into(),
        );
    }
    check_routing(c)?;
    for (key, v) in [
        ("cluster.max_cpu", &c.max_cpu),
        ("cluster.max_memory", &c.max_memory),
        ("cluster.max_ephemeral_storage", &c.max_ephemeral_storage),
    ] {
        match crate::kube::quantity::Quantity::parse(v) {
            Ok(q) if q.is_positive() => {}
            Ok(_) => return err(key, format!("{v:?} must be positive")),
            Err(m) => return err(key, m.to_string()),
        }
    }
    Ok(())
}

/// The routing keys (docs/config.md#routing): the base domain under one
/// of its two names, the layer `routing` resolves to, and only the keys of
/// that layer.
fn check_routing(c: &ClusterSection) -> Result<(), KeyError> {
    let domain_key = match (&c.base_domain, &c.ingress_base_domain) {
        (Some(_), Some(_)) => {
            return err(
                "cluster.ingress_base_domain",
                "is the older name of cluster.base_domain: set cluster.base_domain or cluster.ingress_base_domain, not both".into(),
            )
        }
        (None, Some(_)) => "cluster.ingress_base_domain",
        _ => "cluster.base_domain",
    };
    if let Some(d) = c.base_domain() {
        check_dns_subdomain(d).or_else(|m| err(domain_key, format!("{d:?}: {m}")))?;
        // `<port>-<sessionId>.<domain>` must stay a valid host name.
        if d.len() > 253 - 64 {
            return err(
                domain_key,
                "longer than 189 characters: session hosts would exceed 253".into(),
            );
        }
    }
    if let Some(g) = &c.gateway {
        let parsed = g.split_once('/').filter(|(ns, n)| {
            check_dns_label(ns).is_ok() && check_dns_subdomain(n).is_ok() && !n.contains('/')
        });
        if parsed.is_none() {
            return err(
                "cluster.gateway",
                format!("{g:?} is not \"namespace/name\" (a DNS label, a DNS subdomain)"),
            );
        }
    }
    if let Some(s) = &c.gateway_section {
        check_dns_subdomain(s)
            .or_else(|m| err("cluster.gateway_section", format!("{s:?}: {m}")))?;
        if c.gateway.is_none() {
            return err(
                "cluster.gateway_section",
                "only allowed with cluster.gateway".into(),
            );
        }
    }
    for (key, v) in [
        ("cluster.ingress_class", &c.ingress_class),
        ("cluster.ingress_tls_secret", &c.ingress_tls_secret),
    ] {
        if let Some(v) = v {
            check_dns_subdomain(v).or_else(|m| err(key, format!("{v:?}: {m}")))?;
        }
    }
    // `auto` with both layers' keys is ambiguous: say which one.
    let ingress_keys: Vec<&str> = [
        (
            "cluster.ingress_base_domain",
            c.ingress_base_domain.is_some(),
        ),
        ("cluster.ingress_class", c.ingress_class.is_some()),
        ("cluster.ingress_tls_secret", c.ingress_tls_secret.is_some()),
    ]
    .iter()
    .filter(|(_, set)| *set)
    .map(|(k, _)| *k)
    .collect();
    if c.routing == RoutingMode::Auto && c.gateway.is_some() && !ingress_keys.is_empty() {
        return err(
            "cluster.routing",
            format!(
                "\"auto\" cannot choose: cluster.gateway names a Gateway and {} configures an Ingress; set routing = \"gateway\" or \"ingress\"",
                ingress_keys.join(", ")
            ),
        );
    }
    match c.routing() {
        RoutingLayer::Gateway => {
            if c.gateway.is_none() {
                return err(
                    "cluster.gateway",
                    "required with routing = \"gateway\" (\"namespace/name\" of the Gateway)"
                        .into(),
                );
            }
            if c.base_domain().is_none() {
                return err(
                    "cluster.base_domain",
                    "required with gateway routing (the routes' host names)".into(),
                );
            }
            for key in ["cluster.ingress_class", "cluster.ingress_tls_secret"] {
                if ingress_keys.contains(&key) {
                    return err(
                        key,
                        "an Ingress setting, not used with gateway routing (TLS is the Gateway listener's)".into(),
                    );
                }
            }
        }
        RoutingLayer::Ingress => {
            if c.base_domain().is_none() {
                return err(
                    "cluster.base_domain",
                    "required with routing = \"ingress\"".into(),
                );
            }
            if c.gateway.is_some() {
                return err(
                    "cluster.gateway",
                    "only allowed with gateway routing".into(),
                );
            }
        }
        RoutingLayer::None => {
            for (key, set) in [
                (domain_key, c.base_domain().is_some()),
                ("cluster.gateway", c.gateway.is_some()),
                ("cluster.ingress_class", c.ingress_class.is_some()),
                ("cluster.ingress_tls_secret", c.ingress_tls_secret.is_some()),
            ] {
                if set {
                    let why = if c.routing == RoutingMode::None {
                        "not used with routing = \"none\""
                    } else {
                        "only allowed with a base domain (cluster.base_domain)"
                    };
                    return err(key, why.into());
                }
            }
        }
    }
    Ok(())
}

/// `[sessions]`.
fn check_sessions(ss: &SessionsSection) -> Result<(), KeyError> {
    for (key, v) in [
        ("sessions.max_sessions", ss.max_sessions),
        (
            "sessions.max_sessions_per_principal",
            ss.max_sessions_per_principal,
        ),
        ("sessions.idle_secs", ss.idle_secs),
        ("sessions.max_life_secs", ss.max_life_secs),
        ("sessions.suspended_ttl_secs", ss.suspended_ttl_secs),
        (
            "sessions.checkpoint_interval_secs",
            ss.checkpoint_interval_secs,
        ),
        ("sessions.reloads_per_minute", ss.reloads_per_minute),
        ("sessions.max_bundle_bytes", ss.max_bundle_bytes),
        ("sessions.max_file_bytes", ss.max_file_bytes),
        ("sessions.max_files", ss.max_files),
        ("sessions.io_ring_bytes", ss.io_ring_bytes),
        ("sessions.sse_history_events", ss.sse_history_events),
        ("sessions.orphan_grace_secs", ss.orphan_grace_secs),
        ("sessions.start_deadline_secs", ss.start_deadline_secs),
        ("sessions.agent_deadline_secs", ss.agent_deadline_secs),
    ] {
        positive(key, v)?;
    }
    if ss.max_sessions_per_principal > ss.max_sessions {
        return err(
            "sessions.max_sessions_per_principal",
            format!(
                "{} exceeds sessions.max_sessions ({})",
                ss.max_sessions_per_principal, ss.max_sessions
            ),
        );
    }
    if ss.max_file_bytes > ss.max_bundle_bytes {
        return err(
            "sessions.max_file_bytes",
            format!(
                "{} exceeds sessions.max_bundle_bytes ({})",
                ss.max_file_bytes, ss.max_bundle_bytes
            ),
        );
    }
    // activeDeadlineSeconds is an int64 and a pod's life in seconds;
    // anything beyond ten years is a typo.
    if ss.max_life_secs > 10 * 365 * 86_400 {
        return err("sessions.max_life_secs", "longer than ten years".into());
    }
    Ok(())
}

/// `[exec]`.
fn check_exec(x: &mut ExecSection, base: &Path) -> Result<(), KeyError> {
    for (key, v) in [
        ("exec.max_command_args", x.max_command_args),
        ("exec.max_arg_bytes", x.max_arg_bytes),
        ("exec.max_command_bytes", x.max_command_bytes),
        ("exec.default_output_bytes", x.default_output_bytes),
        ("exec.max_output_bytes", x.max_output_bytes),
        ("exec.max_stdin_frame_bytes", x.max_stdin_frame_bytes),
        ("exec.output_channel_frames", x.output_channel_frames),
        ("exec.idle_timeout_secs", x.idle_timeout_secs),
        ("exec.max_duration_secs", x.max_duration_secs),
        ("exec.ping_interval_secs", x.ping_interval_secs),
        ("exec.max_sessions", x.max_sessions),
        (
            "exec.max_sessions_per_principal",
            x.max_sessions_per_principal,
        ),
    ] {
        positive(key, v)?;
    }
    if x.default_output_bytes > x.max_output_bytes {
        return err(
            "exec.default_output_bytes",
            format!(
                "{} exceeds exec.max_output_bytes ({})",
                x.default_output_bytes, x.max_output_bytes
            ),
        );
    }
    check_label_key(&x.workspace_uid_label)
        .or_else(|m| err("exec.workspace_uid_label", m.into()))?;
    if x.workspace_uid_label == MANAGED_BY_LABEL {
        return err(
            "exec.workspace_uid_label",
            format!("must differ from {MANAGED_BY_LABEL}"),
        );
    }
    for (key, v, min) in [
        (
            "exec.audit_max_bytes",
            x.audit_max_bytes,
            MIN_AUDIT_MAX_BYTES,
        ),
        (
            "exec.recording_max_bytes",
            x.recording_max_bytes,
            MIN_RECORDING_MAX_BYTES,
        ),
    ] {
        if v < min {
            return err(key, format!("must be at least {min} (bytes), got {v}"));
        }
    }
    if let Some(p) = &mut x.audit_log {
        if p.as_os_str().is_empty() {
            return err("exec.audit_log", "must not be empty".into());
        }
        resolve(base, p);
    }
    if let Some(p) = &mut x.recording_dir {
        if p.as_os_str().is_empty() {
            return err("exec.recording_dir", "must not be empty".into());
        }
        resolve(base, p);
    }
    Ok(())
}

/// Every `[[principal]]`: names and digests unique, workspaces parsed.
fn check_principals(principals: &mut [Principal]) -> Result<(), KeyError> {
    let mut names = HashSet::new();
    let mut digests = HashSet::new();
    for (i, p) in principals.iter_mut().enumerate() {
        let k = |f: &str| format!("principal[{i}].{f}");
        if p.name.trim().is_empty() || p.name.len() > 128 || p.name.chars().any(char::is_control) {
            return err(&k("name"), "must be 1 to 128 printable characters".into());
        }
        if !names.insert(p.name.clone()) {
            return err(&k("name"), format!("{:?} is defined twice", p.name));
        }
        if p.token_sha256.is_empty() {
            return err(
                &k("token_sha256"),
                "missing (the SHA-256 hex digest of the token)".into(),
            );
        }
        if p.token_sha256.len() != 64 || !p.token_sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
            return err(
                &k("token_sha256"),
                "must be 64 hex digits (a SHA-256 digest)".into(),
            );
        }
        p.token_sha256.make_ascii_lowercase();
        if !digests.insert(p.token_sha256.clone()) {
            return err(
                &k("token_sha256"),
                "the same token digest is used by another principal".into(),
            );
        }
        let mut seen = HashSet::new();
        for (j, w) in p.workspaces.iter_mut().enumerate() {
            let parsed = Workspace::parse(&w.uid).map_err(|m| KeyError {
                key: k(&format!("workspaces[{j}]")),
                message: m.to_string(),
            })?;
            if !seen.insert(parsed.clone()) {
                return err(
                    &k(&format!("workspaces[{j}]")),
                    format!("{parsed} is listed twice"),
                );
            }
            *w = parsed;
        }
        for (j, g) in p.kube_groups.iter().enumerate() {
            check_kube_group(&k(&format!("kube_groups[{j}]")), g)?;
        }
    }
    Ok(())
}

/// A Kubernetes group the daemon would impersonate: never a `system:` one
/// (`system:masters` is cluster-admin; the API server adds
/// `system:authenticated` itself), and sendable unchanged as a header.
pub(crate) fn check_kube_group(key: &str, g: &str) -> Result<(), KeyError> {
    if g.starts_with("system:") {
        return err(
            key,
            format!("{g:?}: groups starting with \"system:\" are never impersonated (docs/SECURITY.md#impersonation)"),
        );
    }
    Impersonation::new("x", &[g.to_string()]).map_err(|e| KeyError {
        key: key.to_string(),
        message: e.to_string(),
    })?;
    Ok(())
}

/// Under `[cluster] impersonate`, every static principal's name is sent as
/// `Impersonate-User`: it must travel unchanged, and never be a `system:`
/// name (a ServiceAccount's or a control-plane component's).
fn check_impersonated_names(principals: &[Principal]) -> Result<(), KeyError> {
    for (i, p) in principals.iter().enumerate() {
        let key = format!("principal[{i}].name");
        if p.name.starts_with("system:") {
            return err(
                &key,
                format!("{:?}: with cluster.impersonate, a name starting with \"system:\" would act as a Kubernetes system identity", p.name),
            );
        }
        Impersonation::new(&p.name, &[]).map_err(|e| KeyError {
            key,
            message: format!("with cluster.impersonate: {e}"),
        })?;
    }
    Ok(())
}

/// `v` is not 0.
fn positive(key: &str, v: u64) -> Result<(), KeyError> {
    if v == 0 {
        return err(key, "must be a positive integer".into());
    }
    Ok(())
}
