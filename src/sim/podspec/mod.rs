//! Pure translation of a pod's container into a [`ProcessSpec`] for the sim's
//! runtime, and the writing of its volumes
//! ([`volumes::materialize_volumes`]).
//!
//! - here: command line, env, downward API, mounts and the path mapping.
//! - [`users`]: the host user of a container's processes and the owner of
//!   the pod's folder (security contexts).
//! - [`volumes`]: the volume folders and ConfigMap/Secret files.
//!
//! What it owns: Kubernetes container semantics that a local process can
//! honour: `command`/`args`, `$(VAR)` expansion, `env`/`envFrom` (literal
//! values, the downward API, ConfigMap and Secret keys), `workingDir`,
//! `tty`/`stdin`, and volumes. What it never does: touch the store (the
//! caller passes a lookup), start processes, or decide pod status (the
//! kubelet maps a [`PlanError`] to `CreateContainerConfigError`).
//! `plan_container` does no I/O at all, so it is tested exhaustively.
//!
//! # Semantics and deliberate differences
//!
//! - No image is pulled, so every image is treated like the common base
//!   images (busybox, alpine, debian): no ENTRYPOINT. With `command`, argv
//!   is `command ++ args`; without it, `args` alone is the command line
//!   (what `kubectl run NAME --image=busybox -- sh -c '…'` relies on); with
//!   neither, the runtime's idle process runs (waits for SIGTERM, exits 0),
//!   standing in for the image's default command. An `argv[0]` of `kubegate`, or an absolute path whose
//!   file name is `kubegate` outside every volume (the image's copy), becomes
//!   the running binary (`PlanContext::self_exe`).
//! - `$(VAR)` expansion follows upstream (k8s.io/kubernetes
//!   third_party/forked/golang/expansion): `$$` is a literal `$`; `$(NAME)`
//!   is replaced when NAME is defined and left verbatim otherwise; any other
//!   `$` is kept. Env values see the variables defined BEFORE them
//!   (`envFrom` first, then `env` in order); `command`, `args` and
//!   `subPathExpr` see the final container variables. The base variables
//!   (PATH, HOSTNAME, HOME) are not expansion sources, as upstream, where
//!   image variables are not.
//! - The environment is ONLY: `PATH` (a typical image's), `HOSTNAME` (the
//!   pod's `spec.hostname` or name), `HOME` (the pod dir), then `envFrom`,
//!   then `env`; a later definition of a name replaces the earlier value in
//!   place. The sim's own environment is never inherited.
//! - Downward API `fieldRef`: `metadata.name`, `metadata.namespace`,
//!   `metadata.uid`, `metadata.labels['k']`, `metadata.annotations['k']`
//!   (missing key: empty), `spec.nodeName`, `spec.serviceAccountName`,
//!   `status.podIP`, `status.podIPs` (comma-separated), `status.hostIP`,
//!   `status.hostIPs`. `resourceFieldRef` gives the container's own
//!   limit/request string when set (divisor ignored), else the host's CPU
//!   count for `limits.cpu` and `0` otherwise (approximation). A missing
//!   ConfigMap/Secret or key is an error unless `optional: true`.
//! - Volumes: `emptyDir`, `configMap`, `secret` and every other type except
//!   `hostPath` become the host folder `<pod_dir>/volumes/<volume name>`
//!   (`configMap`/`secret` keys are written there as files, `items`,
//!   `defaultMode` and `mode` honoured; other types stay empty folders).
//!   `hostPath` maps to its own `path`.
//!
//! # The mount-path mapping rule
//!
//! A process runs in the host's file system, so a path like `/data/x` in a
//! pod built for a real cluster must be rewritten to the folder that stands
//! for the volume mounted at `/data`. Each `volumeMounts[]` entry maps its
//! `mountPath` (trailing `/` removed) to the volume's host folder, joined
//! with `subPath` (or the expanded `subPathExpr`) when set. Then in every
//! `command` and `args` element, every env value (after expansion and after
//! `valueFrom`), and `workingDir`, each occurrence of a mount path is
//! replaced when it stands on path boundaries:
//! - before it: the start of the string or a character that cannot be part of
//!   a path (anything but letters, digits, `_ - . ~ /`), so `/x/data` and
//!   `a/data` are left alone while `--dir=/data` and `'/data` are mapped;
//! - after it: the end of the string, a `/`, or such a non-path character,
//!   so `/work` is not mapped inside `/workspace` or `/work.txt`.
//!
//! Where several mount paths match at one position, the LONGEST wins
//! (`/data/cache` over `/data`). The string is scanned once from left to
//! right and replaced text is never rescanned. A `mountPath` of `/` is not
//! mapped (it would rewrite every path). Paths built at run time by the
//! program itself (not written in the spec) are not seen: the documented
//! limit of running without mount namespaces.
//!
//! `workingDir` defaults to the pod dir.

use crate::sim::runtime::{ProcessSpec, DEFAULT_PATH};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

pub mod users;
pub mod volumes;

use users::process_user;

/// The data of a ConfigMap or Secret: `lookup(kind, name)` with kind
/// `"ConfigMap"` or `"Secret"`, in the pod's namespace. Values are the
/// decoded bytes (ConfigMap `data` and `binaryData`; Secret `data` decoded
/// and `stringData`). `None`: no such object.
pub type Lookup<'a> = &'a dyn Fn(&str, &str) -> Option<BTreeMap<String, Vec<u8>>>;

/// What the kubelet knows about the pod's placement.
pub struct PlanContext<'a> {
    pub pod_ip: String,
    pub host_ip: String,
    pub node_name: String,
    /// The pod's host folder (exists; volumes live under `volumes/`).
    pub pod_dir: PathBuf,
    /// The running kubegate binary, for commands named `kubegate`.
    pub self_exe: PathBuf,
    pub lookup: Lookup<'a>,
    /// The host id the sim gave this pod (see [`process_user`]); `None`
    /// when the sim cannot switch users (every process runs as the sim).
    pub pod_id: Option<u32>,
    /// The sim's own uid: what a process runs as without `pod_id`.
    pub sim_uid: u32,
}

/// Why a container cannot be planned. All but `Io` are reported as waiting
/// reason `CreateContainerConfigError` (see [`PlanError::reason`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// A ConfigMap, Secret or key the spec needs does not exist.
    MissingRef(String),
    /// A field the sim does not implement.
    Unsupported(String),
    /// A malformed spec (e.g. a `subPath` with `..`).
    Invalid(String),
    /// Writing a volume failed.
    Io(String),
}

impl PlanError {
    /// The container waiting reason a kubelet reports for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::Io(_) => "CreateContainerError",
            _ => "CreateContainerConfigError",
        }
    }
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlanError::MissingRef(m)
            | PlanError::Unsupported(m)
            | PlanError::Invalid(m)
            | PlanError::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for PlanError {}

fn s<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn arr<'v>(v: &'v Value, key: &str) -> &'v [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn strings(v: &Value, key: &str) -> Result<Vec<String>, PlanError> {
    let list = match v.get(key) {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(list)) => list,
        Some(_) => {
            return Err(PlanError::Invalid(format!(
                "{key} must be a list of strings"
            )))
        }
    };
    list.iter()
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .ok_or_else(|| PlanError::Invalid(format!("{key} must be a list of strings")))
        })
        .collect()
}

/// Upstream `$(VAR)` expansion; `lookup` returns the value of a defined name.
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let b = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut checkpoint = 0;
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            out.push_str(&input[checkpoint..i]);
            match b[i + 1] {
                b'$' => {
                    out.push('$');
                    i += 2;
                }
                b'(' => match input[i + 2..].find(')') {
                    Some(len) => {
                        let name = &input[i + 2..i + 2 + len];
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => {
                                out.push_str("$(");
                                out.push_str(name);
                                out.push(')');
                            }
                        }
                        i += 3 + len;
                    }
                    None => {
                        // Incomplete reference: kept, scanning goes on
                        // after the `$(`.
                        out.push_str("$(");
                        i += 2;
                    }
                },
                _ => {
                    out.push('$');
                    i += 1;
                }
            }
            checkpoint = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&input[checkpoint..]);
    out
}

/// A mount path and the host folder that stands for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub mount_path: String,
    pub host_path: PathBuf,
}

fn is_path_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '~' | '/')
}

/// Applies the mapping rule (module doc) to one string.
pub fn map_paths(input: &str, mounts: &[Mount]) -> String {
    if mounts.is_empty() {
        return input.to_string();
    }
    let mut sorted: Vec<&Mount> = mounts.iter().filter(|m| m.mount_path != "/").collect();
    sorted.sort_by_key(|m| std::cmp::Reverse(m.mount_path.len()));
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut prev: Option<char> = None;
    'scan: while i < input.len() {
        let rest = &input[i..];
        if prev.is_none_or(|c| !is_path_char(c)) {
            for m in &sorted {
                if let Some(after) = rest.strip_prefix(m.mount_path.as_str()) {
                    let next = after.chars().next();
                    if next.is_none_or(|c| c == '/' || !is_path_char(c)) {
                        out.push_str(&m.host_path.to_string_lossy());
                        i += m.mount_path.len();
                        prev = m.mount_path.chars().last();
                        continue 'scan;
                    }
                }
            }
        }
        let Some(c) = rest.chars().next() else { break };
        out.push(c);
        prev = Some(c);
        i += c.len_utf8();
    }
    out
}

/// A relative path that stays inside its folder (no `..`, not absolute).
fn safe_relative(p: &str) -> bool {
    !p.is_empty()
        && Path::new(p)
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
}

/// The host folder of each pod volume by name.
pub fn volume_dirs(pod: &Value, pod_dir: &Path) -> BTreeMap<String, PathBuf> {
    let mut dirs = BTreeMap::new();
    for v in arr(&pod["spec"], "volumes") {
        let name = s(v, "name");
        if name.is_empty() {
            continue;
        }
        let dir = match v.get("hostPath") {
            Some(hp) => PathBuf::from(s(hp, "path")),
            None => pod_dir.join("volumes").join(name),
        };
        dirs.insert(name.to_string(), dir);
    }
    dirs
}

/// The container's mounts. `env` expands `subPathExpr`.
pub fn container_mounts(
    pod: &Value,
    container: &Value,
    pod_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Mount>, PlanError> {
    let dirs = volume_dirs(pod, pod_dir);
    let mut mounts = Vec::new();
    for vm in arr(container, "volumeMounts") {
        let name = s(vm, "name");
        let Some(dir) = dirs.get(name) else {
            return Err(PlanError::Invalid(format!(
                "volumeMount {name:?}: no volume of that name in the pod"
            )));
        };
        let mut mount_path = s(vm, "mountPath").to_string();
        while mount_path.len() > 1 && mount_path.ends_with('/') {
            mount_path.pop();
        }
        if !mount_path.starts_with('/') {
            return Err(PlanError::Invalid(format!(
                "volumeMount {name:?}: mountPath {mount_path:?} must be absolute"
            )));
        }
        let sub = match (vm.get("subPath"), vm.get("subPathExpr")) {
            (Some(p), _) => p.as_str().unwrap_or("").to_string(),
            (None, Some(e)) => expand(e.as_str().unwrap_or(""), env),
            (None, None) => String::new(),
        };
        let host_path = if sub.is_empty() {
            dir.clone()
        } else if safe_relative(&sub) {
            dir.join(&sub)
        } else {
            return Err(PlanError::Invalid(format!(
                "volumeMount {name:?}: subPath {sub:?} must be a relative path without '..'"
            )));
        };
        mounts.push(Mount {
            mount_path,
            host_path,
        });
    }
    Ok(mounts)
}

fn field_ref(pod: &Value, ctx: &PlanContext<'_>, path: &str) -> Result<String, PlanError> {
    let meta = &pod["metadata"];
    let keyed = |prefix: &str, map: &str| -> Option<String> {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(s(&meta[map], key).to_string())
    };
    if let Some(v) = keyed("metadata.labels['", "labels") {
        return Ok(v);
    }
    if let Some(v) = keyed("metadata.annotations['", "annotations") {
        return Ok(v);
    }
    Ok(match path {
        "metadata.name" => s(meta, "name").to_string(),
        "metadata.namespace" => s(meta, "namespace").to_string(),
        "metadata.uid" => s(meta, "uid").to_string(),
        "spec.nodeName" => ctx.node_name.clone(),
        "spec.serviceAccountName" => {
            let sa = s(&pod["spec"], "serviceAccountName");
            if sa.is_empty() { "default" } else { sa }.to_string()
        }
        "status.podIP" | "status.podIPs" => ctx.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => ctx.host_ip.clone(),
        other => {
            return Err(PlanError::Unsupported(format!(
                "unsupported fieldRef fieldPath {other:?}"
            )))
        }
    })
}

fn resource_field_ref(container: &Value, r: &Value) -> String {
    let resource = s(r, "resource");
    let (section, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let section = if section == "requests" {
        "requests"
    } else {
        "limits"
    };
    match container["resources"][section].get(name) {
        Some(Value::String(v)) => v.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ if resource == "limits.cpu" => std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .to_string(),
        _ => "0".to_string(),
    }
}

fn kind_ref(v: &Value) -> Option<(&'static str, &Value)> {
    if let Some(r) = v.get("configMapKeyRef").or_else(|| v.get("configMapRef")) {
        return Some(("ConfigMap", r));
    }
    v.get("secretKeyRef")
        .or_else(|| v.get("secretRef"))
        .map(|r| ("Secret", r))
}

fn optional(r: &Value) -> bool {
    r.get("optional").and_then(Value::as_bool).unwrap_or(false)
}

fn missing_object(kind: &str, name: &str) -> PlanError {
    PlanError::MissingRef(format!("{} {name:?} not found", kind.to_lowercase()))
}

/// Sets `name` in an ordered environment: a redefinition keeps the first
/// position and takes the new value.
fn set_env(env: &mut Vec<(String, String)>, name: &str, value: String) {
    match env.iter_mut().find(|(k, _)| k == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name.to_string(), value)),
    }
}

/// The container's own variables (`envFrom`, then `env`), before path
/// mapping: the expansion source for command, args and subPathExpr.
fn container_env(
    pod: &Value,
    container: &Value,
    ctx: &PlanContext<'_>,
) -> Result<Vec<(String, String)>, PlanError> {
    let ns = s(&pod["metadata"], "namespace");
    let mut env: Vec<(String, String)> = Vec::new();
    for from in arr(container, "envFrom") {
        let Some((kind, r)) = kind_ref(from) else {
            continue;
        };
        let name = s(r, "name");
        let Some(data) = (ctx.lookup)(kind, name) else {
            if optional(r) {
                continue;
            }
            return Err(missing_object(kind, name));
        };
        let prefix = s(from, "prefix");
        for (k, v) in data {
            let key = format!("{prefix}{k}");
            if key.is_empty() || key.contains('=') {
                continue; // upstream skips invalid names too
            }
            set_env(&mut env, &key, String::from_utf8_lossy(&v).into_owned());
        }
    }
    for e in arr(container, "env") {
        let name = s(e, "name");
        if name.is_empty() {
            return Err(PlanError::Invalid("env entry without a name".into()));
        }
        let value = match e.get("valueFrom") {
            None => {
                let defined = env.clone();
                expand(s(e, "value"), &|n: &str| {
                    defined
                        .iter()
                        .rev()
                        .find(|(k, _)| k == n)
                        .map(|(_, v)| v.clone())
                })
            }
            Some(vf) => {
                if let Some(fr) = vf.get("fieldRef") {
                    field_ref(pod, ctx, s(fr, "fieldPath"))?
                } else if let Some(rr) = vf.get("resourceFieldRef") {
                    resource_field_ref(container, rr)
                } else if let Some((kind, r)) = kind_ref(vf) {
                    let (obj, key) = (s(r, "name"), s(r, "key"));
                    match (ctx.lookup)(kind, obj).map(|d| d.get(key).cloned()) {
                        Some(Some(v)) => String::from_utf8_lossy(&v).into_owned(),
                        _ if optional(r) => continue,
                        None => return Err(missing_object(kind, obj)),
                        Some(None) => {
                            return Err(PlanError::MissingRef(format!(
                                "couldn't find key {key} in {kind} {ns}/{obj}"
                            )))
                        }
                    }
                } else {
                    return Err(PlanError::Unsupported(format!(
                        "env {name:?}: unsupported valueFrom"
                    )));
                }
            }
        };
        set_env(&mut env, name, value);
    }
    Ok(env)
}

/// Plans one container (or init container) of `pod`. Pure: no I/O.
pub fn plan_container(
    pod: &Value,
    container: &Value,
    ctx: &PlanContext<'_>,
) -> Result<ProcessSpec, PlanError> {
    let vars = container_env(pod, container, ctx)?;
    let var = |n: &str| {
        vars.iter()
            .rev()
            .find(|(k, _)| k == n)
            .map(|(_, v)| v.clone())
    };
    let mounts = container_mounts(pod, container, &ctx.pod_dir, &var)?;

    let mut argv = Vec::new();
    let command = strings(container, "command")?;
    let args = strings(container, "args")?;
    if !command.is_empty() || !args.is_empty() {
        argv = command;
        argv.extend(args);
        for a in argv.iter_mut() {
            *a = map_paths(&expand(a, &var), &mounts);
        }
        if is_kubegate(&argv[0], &mounts) {
            argv[0] = ctx.self_exe.to_string_lossy().into_owned();
        }
    }

    let hostname = match s(&pod["spec"], "hostname") {
        "" => s(&pod["metadata"], "name"),
        h => h,
    };
    let mut env = vec![
        ("PATH".to_string(), DEFAULT_PATH.to_string()),
        ("HOSTNAME".to_string(), hostname.to_string()),
        (
            "HOME".to_string(),
            ctx.pod_dir.to_string_lossy().into_owned(),
        ),
    ];
    for (k, v) in &vars {
        set_env(&mut env, k, map_paths(v, &mounts));
    }

    let cwd = match s(container, "workingDir") {
        "" => ctx.pod_dir.clone(),
        wd => PathBuf::from(map_paths(wd, &mounts)),
    };
    let flag = |k: &str| container.get(k).and_then(Value::as_bool).unwrap_or(false);
    Ok(ProcessSpec {
        argv,
        env,
        cwd,
        tty: flag("tty"),
        stdin: flag("stdin"),
        log: true,
        user: process_user(pod, container, ctx)?,
    })
}

fn is_kubegate(argv0: &str, mounts: &[Mount]) -> bool {
    if argv0 == "kubegate" {
        return true;
    }
    // The image's own copy (e.g. /usr/local/bin/kubegate); a copy in a
    // volume (already mapped to the host) is run as it is.
    argv0.starts_with('/')
        && Path::new(argv0)
            .file_name()
            .is_some_and(|f| f == "kubegate")
        && !mounts
            .iter()
            .any(|m| Path::new(argv0).starts_with(&m.host_path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vars<'p>(pairs: &'p [(&'p str, &'p str)]) -> impl Fn(&str) -> Option<String> + 'p {
        move |n| {
            pairs
                .iter()
                .find(|(k, _)| *k == n)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn expansion_follows_upstream() {
        let m = vars(&[("A", "a"), ("EMPTY", ""), ("B", "$(A)")]);
        let cases = [
            ("$(A)", "a"),
            ("x$(A)y$(A)", "xaya"),
            ("$$(A)", "$(A)"),
            ("$$$(A)", "$a"),
            ("$$$$", "$$"),
            ("$(MISSING)", "$(MISSING)"),
            ("$(EMPTY)-", "-"),
            ("$A", "$A"),
            ("$", "$"),
            ("a$", "a$"),
            ("$(A", "$(A"),
            ("$(A$(A)", "$(A$(A)"),
            ("$()", "$()"),
            ("$(B)", "$(A)"), // values are not expanded twice
            ("é$(A)é", "éaé"),
            ("$é", "$é"),
            ("((($(A))))", "(((a)))"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &m), want, "input {input:?}");
        }
    }

    #[test]
    fn incomplete_reference_then_complete_one() {
        // Upstream takes everything up to the first ")" as the name.
        let m = vars(&[("A", "a")]);
        assert_eq!(expand("$($(A)", &m), "$($(A)");
        // An unclosed "$(" is kept and scanning goes on after it.
        assert_eq!(expand("$( $$", &m), "$( $");
    }

    fn mounts() -> Vec<Mount> {
        vec![
            Mount {
                mount_path: "/work".into(),
                host_path: "/h/work".into(),
            },
            Mount {
                mount_path: "/data".into(),
                host_path: "/h/data".into(),
            },
            Mount {
                mount_path: "/data/cache".into(),
                host_path: "/h/cache".into(),
            },
        ]
    }

    #[test]
    fn mount_mapping_respects_boundaries_and_prefers_longest() {
        let m = mounts();
        let cases = [
            ("/work", "/h/work"),
            ("/work/", "/h/work/"),
            ("/work/src/a.rs", "/h/work/src/a.rs"),
            ("/workspace", "/workspace"),
            ("/work.txt", "/work.txt"),
            ("/x/work", "/x/work"),
            ("a/work", "a/work"),
            ("--dir=/work", "--dir=/h/work"),
            (
                "cd /work && ls /data/x; cat '/data/cache/y'",
                "cd /h/work && ls /h/data/x; cat '/h/cache/y'",
            ),
            ("/data/cachex", "/h/data/cachex"),
            ("/work:/data", "/h/work:/h/data"),
            ("PATH=/work/bin:/usr/bin", "PATH=/h/work/bin:/usr/bin"),
            ("/workwork /work", "/workwork /h/work"),
            ("ü/work", "ü/work"),
            ("", ""),
        ];
        for (input, want) in cases {
            assert_eq!(map_paths(input, &m), want, "input {input:?}");
        }
        // Replaced text is not rescanned (a host path inside a mount path).
        let nested = [Mount {
            mount_path: "/h".into(),
            host_path: "/h/h".into(),
        }];
        assert_eq!(map_paths("/h/x", &nested), "/h/h/x");
        // "/" is never mapped.
        let root = [Mount {
            mount_path: "/".into(),
            host_path: "/h".into(),
        }];
        assert_eq!(map_paths("/etc/x", &root), "/etc/x");
    }

    pub(super) fn lookup(kind: &str, name: &str) -> Option<BTreeMap<String, Vec<u8>>> {
        let mut m = BTreeMap::new();
        match (kind, name) {
            ("ConfigMap", "cfg") => {
                m.insert("mode".to_string(), b"fast".to_vec());
                m.insert("file.conf".to_string(), b"k=v\n".to_vec());
            }
            ("Secret", "sec") => {
                m.insert("token".to_string(), b"s3cret".to_vec());
            }
            _ => return None,
        }
        Some(m)
    }

    pub(super) fn pod() -> Value {
        json!({
            "metadata": {"name": "web-1", "namespace": "dev", "uid": "u-1",
                         "labels": {"app": "web"}, "annotations": {"a/b": "c"}},
            "spec": {
                "volumes": [
                    {"name": "work", "emptyDir": {}},
                    {"name": "config", "configMap": {"name": "cfg", "items": [{"key": "file.conf", "path": "sub/app.conf", "mode": 0o600}]}},
                    {"name": "creds", "secret": {"secretName": "sec", "defaultMode": 0o400}},
                    {"name": "host", "hostPath": {"path": "/srv/shared"}}
                ],
                "containers": []
            }
        })
    }

    fn ctx<'a>(l: Lookup<'a>) -> PlanContext<'a> {
        PlanContext {
            pod_ip: "127.0.1.7".into(),
            host_ip: "127.0.0.1".into(),
            node_name: "sim-node".into(),
            pod_dir: "/pods/dev/web-1".into(),
            self_exe: "/opt/kubegate".into(),
            lookup: l,
            pod_id: None,
            sim_uid: 1000,
        }
    }

    fn env_of<'s>(spec: &'s ProcessSpec, k: &str) -> Option<&'s str> {
        spec.env
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    #[test]
    fn full_container_plan() {
        let c = json!({
            "name": "app",
            "command": ["sh", "-c"],
            "args": ["echo $(GREETING) > /work/out; cat /etc/app/sub/app.conf $$HOME"],
            "workingDir": "/work/src",
            "tty": true, "stdin": true,
            "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
            "env": [
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "UID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "IPS", "valueFrom": {"fieldRef": {"fieldPath": "status.podIPs"}}},
                {"name": "HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}},
                {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                {"name": "APP", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['app']"}}},
                {"name": "ANN", "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['a/b']"}}},
                {"name": "NOPE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['none']"}}},
                {"name": "GREETING", "value": "hi-$(NAME)-$(LATER)-$(CFG_mode)"},
                {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "token"}}},
                {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "x", "optional": true}}},
                {"name": "DATA", "value": "/work/data"},
                {"name": "PATH", "value": "/work/bin:/usr/bin"},
                {"name": "LATER", "value": "late"},
                {"name": "NAME", "value": "renamed"}
            ],
            "volumeMounts": [
                {"name": "work", "mountPath": "/work/"},
                {"name": "config", "mountPath": "/etc/app"},
                {"name": "creds", "mountPath": "/var/run/creds", "subPath": "token"},
                {"name": "host", "mountPath": "/shared"}
            ]
        });
        let spec = plan_container(&pod(), &c, &ctx(&lookup)).unwrap();
        assert_eq!(
            spec.argv,
            [
                "sh",
                "-c",
                "echo hi-web-1-$(LATER)-fast > /pods/dev/web-1/volumes/work/out; cat /pods/dev/web-1/volumes/config/sub/app.conf $HOME"
            ]
        );
        assert_eq!(spec.cwd, PathBuf::from("/pods/dev/web-1/volumes/work/src"));
        assert!(spec.tty && spec.stdin && spec.log);
        let want = [
            ("NAME", "renamed"),
            ("NS", "dev"),
            ("UID", "u-1"),
            ("IP", "127.0.1.7"),
            ("IPS", "127.0.1.7"),
            ("HOST", "127.0.0.1"),
            ("NODE", "sim-node"),
            ("APP", "web"),
            ("ANN", "c"),
            ("NOPE", ""),
            ("CFG_mode", "fast"),
            ("GREETING", "hi-web-1-$(LATER)-fast"),
            ("TOKEN", "s3cret"),
            ("DATA", "/pods/dev/web-1/volumes/work/data"),
            ("PATH", "/pods/dev/web-1/volumes/work/bin:/usr/bin"),
            ("HOSTNAME", "web-1"),
            ("HOME", "/pods/dev/web-1"),
        ];
        for (k, v) in want {
            assert_eq!(env_of(&spec, k), Some(v), "{k}");
        }
        assert_eq!(env_of(&spec, "OPT"), None);
        // Base variables first; a redefinition keeps its place.
        assert_eq!(spec.env[0].0, "PATH");
        let names: Vec<_> = spec.env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names.iter().filter(|n| **n == "NAME").count(), 1);
    }

    #[test]
    fn args_without_command_are_the_command_line() {
        let c = json!({"name": "run", "args": ["sh", "-c", "echo $(HOSTNAME)"]});
        let spec = plan_container(&pod(), &c, &ctx(&lookup)).unwrap();
        assert_eq!(spec.argv, ["sh", "-c", "echo $(HOSTNAME)"]);
    }

    #[test]
    fn no_command_is_the_idle_process_and_defaults() {
        let c = json!({"name": "idle"});
        let spec = plan_container(&pod(), &c, &ctx(&lookup)).unwrap();
        assert!(spec.argv.is_empty());
        assert_eq!(spec.cwd, PathBuf::from("/pods/dev/web-1"));
        assert!(!spec.tty && !spec.stdin);
        assert_eq!(
            spec.env,
            [
                ("PATH".to_string(), DEFAULT_PATH.to_string()),
                ("HOSTNAME".to_string(), "web-1".to_string()),
                ("HOME".to_string(), "/pods/dev/web-1".to_string())
            ]
        );
    }

    #[test]
    fn kubegate_resolves_to_the_running_binary() {
        let p = pod();
        let l = ctx(&lookup);
        let run = |cmd: &str| {
            let c = json!({"name": "a", "command": [cmd, "agent"],
                           "volumeMounts": [{"name": "work", "mountPath": "/work"}]});
            plan_container(&p, &c, &l).unwrap().argv[0].clone()
        };
        assert_eq!(run("kubegate"), "/opt/kubegate");
        assert_eq!(run("/usr/local/bin/kubegate"), "/opt/kubegate");
        // A copy installed into a volume (install-self) is run as it is.
        assert_eq!(
            run("/work/kubegate"),
            "/pods/dev/web-1/volumes/work/kubegate"
        );
        assert_eq!(run("kubegate-other"), "kubegate-other");
    }

    #[test]
    fn errors_are_config_errors() {
        let p = pod();
        let l = ctx(&lookup);
        let plan = |c: Value| plan_container(&p, &c, &l).unwrap_err();
        let e = plan(
            json!({"name": "a", "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "absent"}}}]}),
        );
        assert_eq!(
            e,
            PlanError::MissingRef("couldn't find key absent in ConfigMap dev/cfg".into())
        );
        assert_eq!(e.reason(), "CreateContainerConfigError");
        let e = plan(
            json!({"name": "a", "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "gone", "key": "k"}}}]}),
        );
        assert_eq!(e.to_string(), "secret \"gone\" not found");
        let e = plan(json!({"name": "a", "envFrom": [{"configMapRef": {"name": "gone"}}]}));
        assert!(matches!(e, PlanError::MissingRef(_)));
        let e = plan(
            json!({"name": "a", "env": [{"name": "X", "valueFrom": {"fieldRef": {"fieldPath": "spec.bogus"}}}]}),
        );
        assert!(matches!(e, PlanError::Unsupported(_)));
        let e = plan(
            json!({"name": "a", "volumeMounts": [{"name": "work", "mountPath": "/w", "subPath": "../x"}]}),
        );
        assert!(matches!(e, PlanError::Invalid(_)));
        let e = plan(json!({"name": "a", "volumeMounts": [{"name": "nope", "mountPath": "/w"}]}));
        assert!(matches!(e, PlanError::Invalid(_)));
        let e = plan(json!({"name": "a", "command": "not-a-list"}));
        assert!(matches!(e, PlanError::Invalid(_)));
        // envFrom optional: fine.
        let ok = plan_container(
            &p,
            &json!({"name": "a", "envFrom": [{"secretRef": {"name": "gone", "optional": true}}]}),
            &l,
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn sub_path_expr_uses_the_container_env() {
        let c = json!({"name": "a", "command": ["ls", "/w"],
            "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "volumeMounts": [{"name": "work", "mountPath": "/w", "subPathExpr": "logs/$(POD)"}]});
        let spec = plan_container(&pod(), &c, &ctx(&lookup)).unwrap();
        assert_eq!(spec.argv[1], "/pods/dev/web-1/volumes/work/logs/web-1");
    }
}
