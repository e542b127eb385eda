//! Pod users on the host (docs/sim.md, "Pod users"): the pool of host ids
//! the kubelet gives pods, the check that the pods' root is reachable by
//! them, and the ownership of a pod's folder and volumes.
//!
//! The sim has no mount or user namespaces: what keeps one pod out of
//! another's files and processes is the host's own permission model. Each
//! pod gets an id N from the configured range; unless its security context
//! names others, its processes run as uid N, gid N, and every process of
//! the pod has N as a supplementary group. The pods' root is 0711 (search,
//! no listing); a pod's folder is owned by the pod's user and group N, mode
//! 0770; emptyDir folders inside it are 0777 as a kubelet makes them (the
//! pod folder is the fence), with `fsGroup` group-owned by it and setgid.
//! `configMap`/`secret` volumes stay the sim's (read-only to the pod, as
//! their mounts are in a cluster), folders 0755, group `fsGroup` and
//! group-readable when one is set.

use super::podspec::users::PodOwner;
use std::collections::HashSet;
use std::io;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The default host id range for pods: 65,536 ids above the ranges
/// distributions give people (1000-60000) and the first subordinate-id
/// block `useradd` hands out (100000-165535).
pub const DEFAULT_UID_RANGE: (u32, u32) = (200_000, 265_535);

/// A `--uid-range` / `cluster.sim.uid_range` the sim refuses; `Display` is
/// the text the command line and the config check print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UidRangeError {
    /// No `-` between two ids.
    NotARange(String),
    /// An end that is not an id from 1 to 2^31 - 1.
    BadId(String),
    /// FIRST above LAST.
    Reversed(String),
}

impl std::fmt::Display for UidRangeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UidRangeError::NotARange(s) => {
                write!(f, "{s:?} is not FIRST-LAST (e.g. \"200000-265535\")")
            }
            UidRangeError::BadId(x) => write!(f, "{x:?} is not an id from 1 to 2147483647"),
            UidRangeError::Reversed(s) => write!(f, "{s:?}: FIRST is above LAST"),
        }
    }
}

impl std::error::Error for UidRangeError {}

/// Parses `FIRST-LAST` (inclusive; both in 1 to 2^31 - 1, FIRST <= LAST).
pub fn parse_range(s: &str) -> Result<(u32, u32), UidRangeError> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| UidRangeError::NotARange(s.to_string()))?;
    let num = |x: &str| -> Result<u32, UidRangeError> {
        x.trim()
            .parse::<u32>()
            .ok()
            .filter(|&n| (1..=2_147_483_647).contains(&n))
            .ok_or_else(|| UidRangeError::BadId(x.to_string()))
    };
    let (a, b) = (num(a)?, num(b)?);
    if a > b {
        return Err(UidRangeError::Reversed(s.to_string()));
    }
    Ok((a, b))
}

/// Host ids for pods, handed out round-robin from a random start (an id is
/// reused as late as possible: files a pod left outside its folder, in
/// /tmp say, stay its uid's).
pub struct IdPool {
    first: u32,
    last: u32,
    next: u32,
    used: HashSet<u32>,
}

impl IdPool {
    pub fn new((first, last): (u32, u32)) -> IdPool {
        use rand::Rng;
        IdPool {
            first,
            last,
            next: rand::rng().random_range(first..=last),
            used: HashSet::new(),
        }
    }

    pub fn alloc(&mut self) -> Option<u32> {
        let span = u64::from(self.last - self.first) + 1;
        for _ in 0..span {
            let n = self.next;
            self.next = if n >= self.last { self.first } else { n + 1 };
            if self.used.insert(n) {
                return Some(n);
            }
        }
        None
    }

    pub fn free(&mut self, id: u32) {
        self.used.remove(&id);
    }

    pub fn range(&self) -> (u32, u32) {
        (self.first, self.last)
    }
}

/// Creates the pods' root, mode 0711, and checks that a pod user can reach
/// it: every folder above it must let others search it (`o+x`), or no pod
/// could enter its own folder (nor run anything from it). The error names
/// the folder at fault.
pub fn prepare_root(root: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    std::fs::create_dir_all(root)?;
    // Ours, and a folder (not a link someone planted to aim our chowns).
    let meta = std::fs::symlink_metadata(root)?;
    let me = rustix::process::geteuid().as_raw();
    if !meta.is_dir() || meta.uid() != me {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the pods' folder {} is not a folder of this process's user (uid {me})",
                root.display()
            ),
        ));
    }
    std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o711))?;
    if let Some((dir, mode)) = unreachable_above(root)? {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "the pods' folder {} is out of reach of pod users: {} is mode {:04o} \
                 (pods run as their own uids and must search every folder above \
                 theirs); choose a pods folder whose parents all allow search by \
                 others (o+x)",
                root.display(),
                dir.display(),
                mode
            ),
        ));
    }
    Ok(())
}

/// The first existing folder above `root` that others may not search, with
/// its mode (`None`: all may).
pub fn unreachable_above(root: &Path) -> io::Result<Option<(PathBuf, u32)>> {
    let abs = std::path::absolute(root)?;
    for dir in abs.ancestors().skip(1) {
        let meta = match std::fs::metadata(dir) {
            Ok(m) => m,
            // Not made yet: created by us below a folder checked next.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o001 == 0 {
            return Ok(Some((dir.to_path_buf(), mode)));
        }
    }
    Ok(None)
}

/// A fresh pods' folder for this run under the system's temporary folder
/// (a random name created exclusively, so nobody can have prepared it),
/// mode 0711: where a sim puts its pods when the default folder is out of
/// their reach (a state directory under /root, say). Removed at shutdown.
pub fn temp_root() -> io::Result<PathBuf> {
    let base = std::env::temp_dir();
    for _ in 0..16 {
        let p = base.join(format!("kubegate-pods-{:016x}", rand::random::<u64>()));
        match std::fs::DirBuilder::new().mode(0o711).create(&p) {
            Ok(()) => {
                prepare_root(&p)?;
                return Ok(p);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no fresh pods' folder name in 16 tries"))
}

fn chown(path: &Path, uid: Option<u32>, gid: Option<u32>) -> io::Result<()> {
    std::os::unix::fs::lchown(path, uid, gid)
        .map_err(|e| io::Error::new(e.kind(), format!("chown {}: {e}", path.display())))
}

fn chmod(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io::Error::new(e.kind(), format!("chmod {}: {e}", path.display())))
}

/// Gives the (existing) pod folder to the pod: owner, group N, 0770. Call
/// it last, once everything the sim writes inside is written and owned.
pub fn own_pod_dir(pod_dir: &Path, o: &PodOwner) -> io::Result<()> {
    chmod(pod_dir, 0o770)?;
    chown(pod_dir, Some(o.uid), Some(o.gid))
}

/// Gives the pod's volumes (already written) to it: `volumes/` as the pod
/// folder; each emptyDir-like folder (every type but configMap, secret and
/// hostPath) owned by the pod's user, 0777, with `fsGroup` its group plus
/// setgid; configMap and secret contents group `fsGroup` and group-readable
/// when one is set. hostPath folders are the host's and left alone.
/// `dirs` is `podspec::volume_dirs`; `volumes` the pod's `spec.volumes`.
pub fn own_volumes(
    pod_dir: &Path,
    volumes: &[serde_json::Value],
    dirs: &std::collections::BTreeMap<String, PathBuf>,
    o: &PodOwner,
) -> io::Result<()> {
    let root = pod_dir.join("volumes");
    if std::fs::symlink_metadata(&root).is_ok_and(|m| m.is_dir()) {
        chmod(&root, 0o770)?;
        chown(&root, Some(o.uid), Some(o.gid))?;
    }
    for v in volumes {
        let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("");
        if v.get("hostPath").is_some() {
            continue;
        }
        let Some(dir) = dirs.get(name) else { continue };
        if !std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        if v.get("configMap").is_some() || v.get("secret").is_some() {
            readable(dir, o.fs_group)?;
            continue;
        }
        match o.fs_group {
            Some(g) => {
                chown(dir, Some(o.uid), Some(g))?;
                chmod(dir, 0o2777)?;
            }
            None => {
                chown(dir, Some(o.uid), Some(o.gid))?;
                chmod(dir, 0o777)?;
            }
        }
    }
    Ok(())
}

/// A configMap/secret volume: its folders searchable and listable by all
/// (0755 at least, whatever the sim's umask: the pod folder is the fence),
/// files as their `mode` says; with `fs_group`, that group and group read
/// on everything.
fn readable(path: &Path, fs_group: Option<u32>) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    if let Some(g) = fs_group {
        chown(path, None, Some(g))?;
    }
    let mode = meta.permissions().mode() & 0o7777;
    let group = if fs_group.is_some() { 0o040 } else { 0 };
    if meta.is_dir() {
        chmod(path, mode | 0o755)?;
        for e in std::fs::read_dir(path)? {
            readable(&e?.path(), fs_group)?;
        }
    } else if group != 0 {
        chmod(path, mode | group)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("200000-265535"), Ok((200000, 265535)));
        assert_eq!(parse_range("5-5"), Ok((5, 5)));
        assert!(parse_range("0-10").is_err());
        assert!(parse_range("10-5").is_err());
        assert!(parse_range("10").is_err());
        assert!(parse_range("1-2147483648").is_err());
    }

    #[test]
    fn the_root_must_be_our_own_folder() {
        let base = std::env::temp_dir().join(format!("kubegate-podroot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let link = base.join("link");
        std::os::unix::fs::symlink(&base, &link).unwrap();
        let e = prepare_root(&link).unwrap_err();
        assert!(
            e.to_string().contains("not a folder of this process"),
            "{e}"
        );
        let ok = base.join("pods");
        // (Ok, or refused because a folder above the system's temporary
        // folder is out of others' reach: the mode is set either way.)
        let _ = prepare_root(&ok);
        let mode = std::fs::metadata(&ok).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o711);
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn pool_hands_out_each_id_once_then_reuses_freed_ones() {
        let mut p = IdPool::new((10, 12));
        let mut got: Vec<u32> = (0..3).filter_map(|_| p.alloc()).collect();
        got.sort();
        assert_eq!(got, vec![10, 11, 12]);
        assert_eq!(p.alloc(), None);
        p.free(11);
        assert_eq!(p.alloc(), Some(11));
    }
}
