//! Writing a pod's volumes: the folders under `<pod_dir>/volumes/`, and the
//! keys of `configMap` and `secret` volumes as files (see the parent
//! module's "Semantics" for which volume types map where). The only part
//! of `podspec` that does I/O.

use super::{arr, missing_object, optional, s, safe_relative, volume_dirs, Lookup, PlanError};
use serde_json::Value;
use std::path::Path;

fn write_file(path: &Path, data: &[u8], mode: Option<u32>) -> Result<(), PlanError> {
    use std::os::unix::fs::PermissionsExt;
    let io = |e: std::io::Error| PlanError::Io(format!("writing {}: {e}", path.display()));
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    std::fs::write(path, data).map_err(io)?;
    if let Some(mode) = mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777))
            .map_err(io)?;
    }
    Ok(())
}

fn mode_of(v: &Value, key: &str) -> Option<u32> {
    v.get(key).and_then(Value::as_u64).map(|m| m as u32)
}

/// Creates the pod's volume folders under `<pod_dir>/volumes/` and writes the
/// keys of `configMap` and `secret` volumes into them (all keys, or `items`
/// with their `path` and `mode`; `defaultMode` otherwise). A missing object
/// or item key is an error unless the volume is `optional`. Call once per
/// pod, before its first container starts; calling again rewrites the files.
pub fn materialize_volumes(
    pod: &Value,
    pod_dir: &Path,
    lookup: Lookup<'_>,
) -> Result<(), PlanError> {
    let ns = s(&pod["metadata"], "namespace");
    let dirs = volume_dirs(pod, pod_dir);
    for v in arr(&pod["spec"], "volumes") {
        let name = s(v, "name");
        if v.get("hostPath").is_some() {
            continue;
        }
        let Some(dir) = dirs.get(name) else { continue };
        std::fs::create_dir_all(dir)
            .map_err(|e| PlanError::Io(format!("creating {}: {e}", dir.display())))?;
        let (kind, src, obj) = if let Some(cm) = v.get("configMap") {
            ("ConfigMap", cm, s(cm, "name"))
        } else if let Some(sec) = v.get("secret") {
            ("Secret", sec, s(sec, "secretName"))
        } else {
            continue;
        };
        let default_mode = mode_of(src, "defaultMode").or(Some(0o644));
        let Some(data) = lookup(kind, obj) else {
            if optional(src) {
                continue;
            }
            return Err(missing_object(kind, obj));
        };
        let items = arr(src, "items");
        if items.is_empty() {
            for (key, value) in &data {
                if safe_relative(key) {
                    write_file(&dir.join(key), value, default_mode)?;
                }
            }
            continue;
        }
        for item in items {
            let (key, path) = (s(item, "key"), s(item, "path"));
            if !safe_relative(path) {
                return Err(PlanError::Invalid(format!(
                    "volume {name:?}: item path {path:?} must be relative without '..'"
                )));
            }
            match data.get(key) {
                Some(value) => write_file(
                    &dir.join(path),
                    value,
                    mode_of(item, "mode").or(default_mode),
                )?,
                None if optional(src) => {}
                None => {
                    return Err(PlanError::MissingRef(format!(
                        "couldn't find key {key} in {kind} {ns}/{obj}"
                    )))
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{lookup, pod};
    use super::*;
    use serde_json::json;

    #[test]
    fn volumes_are_written() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("kubegate-podspec-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        materialize_volumes(&pod(), &dir, &lookup).unwrap();
        let v = dir.join("volumes");
        assert!(v.join("work").is_dir());
        assert_eq!(
            std::fs::read(v.join("config/sub/app.conf")).unwrap(),
            b"k=v\n"
        );
        assert!(!v.join("config/mode").exists(), "items limit the keys");
        let mode = |p: &str| std::fs::metadata(v.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("config/sub/app.conf"), 0o600);
        assert_eq!(std::fs::read(v.join("creds/token")).unwrap(), b"s3cret");
        assert_eq!(mode("creds/token"), 0o400);
        assert!(!v.join("host").exists(), "hostPath is not created");

        let mut missing = pod();
        missing["spec"]["volumes"] = json!([{"name": "c", "configMap": {"name": "gone"}}]);
        let e = materialize_volumes(&missing, &dir, &lookup).unwrap_err();
        assert_eq!(e.to_string(), "configmap \"gone\" not found");
        missing["spec"]["volumes"][0]["configMap"]["optional"] = json!(true);
        materialize_volumes(&missing, &dir, &lookup).unwrap();
        assert!(dir.join("volumes/c").is_dir());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
