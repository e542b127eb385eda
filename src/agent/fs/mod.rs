//! The workspace on disk (docs/agent.md): the tree with hashes, atomic
//! writes, deletes, single-file reads and the snapshot, all under one root
//! folder and all limits.
//!
//! Symlinks: every path is walked from a descriptor of the root, one
//! component at a time, with `O_NOFOLLOW` (`openat`, `statat`,
//! `renameat`, `unlinkat` relative to the parent folder's descriptor). A
//! symlink anywhere on a path is refused (`INVALID_PATH`), and one planted
//! between the check and the change (app containers share this volume)
//! makes the change fail instead of following it: nothing outside the root
//! is ever read or written through a link.
//!
//! Writes: all paths are checked first; then every file is written to a
//! temporary file in its target's folder (`.kubegate-tmp-<pid>-<n>`); only
//! when all of them are written are the deletes done and the temporary
//! files renamed over their targets. A reader sees the old file or the new
//! one, never half of one, and a full disk leaves the workspace as it was.
//!
//! - here: opening the root, the descriptor-relative walk, the read side
//!   (tree, sizes, snapshot, single-file reads) and the start-up sweep of
//!   leftover temporary files.
//! - `apply.rs`: the write side (apply, deletes, temporary files, modes).
//!
//! The limits are [`Limits`] and the string rules on paths
//! [`paths`], both in the protocol module.

use super::wire::paths::{self, WorkspacePathError, MAX_DEPTH};
use super::wire::Limits;
use crate::api::{ApiError, Code};
use crate::token::hex;
use parking_lot::RwLock;
use rustix::fs::{fstat, mkdirat, openat, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags};
use rustix::io::Errno;
use sha2::{Digest, Sha256};
use std::ffi::{CStr, CString};
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;

/// What a path names right now (no symlink on the way: that is an error).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Missing,
    File {
        size: u64,
    },
    Dir,
    /// A FIFO, socket or device.
    Other,
}

/// One write of an apply: a normalised path and the decoded bytes.
#[derive(Debug, Clone)]
pub struct FileWrite {
    pub path: String,
    pub content: Vec<u8>,
}

/// One file of a snapshot.
#[derive(Debug, Clone)]
pub struct SnapshotFile {
    pub path: String,
    pub hash: String,
    pub content: Vec<u8>,
}

/// What an apply did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    pub written: usize,
    /// Paths that existed and were removed (a missing path counts 0).
    pub deleted: usize,
}

pub struct Workspace {
    root: OwnedFd,
    root_path: PathBuf,
    limits: Limits,
    /// One apply at a time (its checks, limits above all, must hold when
    /// its changes land); the tree and the snapshot take it shared, so they
    /// never see half of an apply.
    apply_lock: RwLock<()>,
    temp_counter: AtomicU64,
}

fn invalid(e: WorkspacePathError) -> ApiError {
    ApiError::new(Code::InvalidPath, e.to_string())
}

fn internal(what: &str, path: &str, e: impl std::fmt::Display) -> ApiError {
    ApiError::new(Code::Internal, format!("{what} {path:?}: {e}"))
}

fn limit(msg: String) -> ApiError {
    ApiError::new(Code::WorkspaceLimit, msg)
}

/// The SHA-256 of `content` as 64 lowercase hex digits.
pub fn sha256_hex(content: &[u8]) -> String {
    hex(&Sha256::digest(content))
}

mod apply;

fn open_dir<P: rustix::path::Arg>(parent: BorrowedFd<'_>, name: P) -> Result<OwnedFd, Errno> {
    openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// Opens a regular file for reading without following a link and without
/// blocking on a FIFO; None when it vanished or is not a regular file.
fn open_file(parent: BorrowedFd<'_>, name: &CStr) -> Result<Option<std::fs::File>, Errno> {
    let fd = match openat(
        parent,
        name,
        OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOCTTY,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::NOENT) | Err(Errno::LOOP) | Err(Errno::NXIO) => return Ok(None),
        Err(e) => return Err(e),
    };
    let st = fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return Ok(None);
    }
    Ok(Some(std::fs::File::from(fd)))
}

/// Reads at most `max + 1` bytes (so "over the limit" is seen without
/// reading a huge file whole).
fn read_capped(f: std::fs::File, max: u64) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    f.take(max.saturating_add(1)).read_to_end(&mut out)?;
    Ok(out)
}

fn stat_kind(st: &rustix::fs::Stat) -> (FileType, u64) {
    (
        FileType::from_raw_mode(st.st_mode),
        u64::try_from(st.st_size).unwrap_or(0),
    )
}

fn cstring(name: &str, path: &str) -> Result<CString, ApiError> {
    CString::new(name).map_err(|_| invalid(WorkspacePathError::new(path, "contains a NUL byte")))
}

impl Workspace {
    /// Opens the root folder (which must exist; the root itself may be a
    /// symlink: it is the operator's, not a client's).
    pub fn open(root: &Path, limits: Limits) -> std::io::Result<Workspace> {
        let fd = rustix::fs::open(
            root,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Workspace {
            root: fd,
            root_path: root.to_path_buf(),
            limits,
            apply_lock: RwLock::new(()),
            temp_counter: AtomicU64::new(0),
        })
    }

    pub fn root_path(&self) -> &Path {
        &self.root_path
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    fn root_dup(&self, path: &str) -> Result<OwnedFd, ApiError> {
        self.root
            .try_clone()
            .map_err(|e| internal("opening the workspace root for", path, e))
    }

    /// Why walking into `walked` (a prefix of `path`) failed: a symlink or a
    /// non-folder is the client's `INVALID_PATH`, anything else ours.
    fn walk_error(dir: BorrowedFd<'_>, name: &str, walked: &str, path: &str, e: Errno) -> ApiError {
        if e == Errno::LOOP || e == Errno::NOTDIR {
            let symlink = statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)
                .map(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
                .unwrap_or(e == Errno::LOOP);
            let reason = if symlink {
                format!("{walked:?} is a symlink (paths never pass through symlinks)")
            } else {
                format!("{walked:?} is a file, not a folder")
            };
            return invalid(WorkspacePathError::new(path, reason));
        }
        internal("opening the folder of", path, e)
    }

    /// The folder that holds `path` (normalised) and the last component,
    /// walked without following links; with `create`, missing folders are
    /// made (0755). None when a folder is missing and `create` is false.
    fn parent_dir<'p>(
        &self,
        path: &'p str,
        create: bool,
    ) -> Result<Option<(OwnedFd, &'p str)>, ApiError> {
        let (parents, last) = match path.rsplit_once('/') {
            Some((p, l)) => (Some(p), l),
            None => (None, path),
        };
        let mut dir = self.root_dup(path)?;
        let Some(parents) = parents else {
            return Ok(Some((dir, last)));
        };
        let mut end = 0;
        for c in parents.split('/') {
            end += c.len();
            let walked = &parents[..end];
            end += 1;
            let next = match open_dir(dir.as_fd(), c) {
                Ok(fd) => fd,
                Err(Errno::NOENT) if create => {
                    match mkdirat(dir.as_fd(), c, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(internal("creating the folder", walked, e)),
                    }
                    open_dir(dir.as_fd(), c)
                        .map_err(|e| Self::walk_error(dir.as_fd(), c, walked, path, e))?
                }
                Err(Errno::NOENT) => return Ok(None),
                Err(e) => return Err(Self::walk_error(dir.as_fd(), c, walked, path, e)),
            };
            dir = next;
        }
        Ok(Some((dir, last)))
    }

    /// The filesystem half of the path rules: what `path` (normalised)
    /// names, refusing when any existing component of it is a symlink or
    /// when a folder on the way is a file.
    pub fn inspect(&self, path: &str) -> Result<Kind, ApiError> {
        let Some((dir, last)) = self.parent_dir(path, false)? else {
            return Ok(Kind::Missing);
        };
        match statat(dir.as_fd(), last, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(Kind::Missing),
            Err(e) => Err(internal("inspecting", path, e)),
            Ok(st) => match stat_kind(&st) {
                (FileType::Symlink, _) => Err(invalid(WorkspacePathError::new(
                    path,
                    "is a symlink (paths never pass through symlinks)",
                ))),
                (FileType::Directory, _) => Ok(Kind::Dir),
                (FileType::RegularFile, size) => Ok(Kind::File { size }),
                _ => Ok(Kind::Other),
            },
        }
    }

    /// Visits every regular file under the root (excluded names and
    /// symlinks skipped, files deeper than the path rules allow left out),
    /// with its folder's descriptor; `temps` also visits the agent's
    /// temporary files (the start-up sweep).
    fn walk(
        &self,
        temps: bool,
        visit: &mut dyn FnMut(&str, BorrowedFd<'_>, &CStr) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let root = self.root_dup("")?;
        Self::walk_dir(root.as_fd(), "", 0, temps, visit)
    }

    fn walk_dir(
        dir: BorrowedFd<'_>,
        prefix: &str,
        depth: usize,
        temps: bool,
        visit: &mut dyn FnMut(&str, BorrowedFd<'_>, &CStr) -> Result<(), ApiError>,
    ) -> Result<(), ApiError> {
        let listing = Dir::read_from(dir).map_err(|e| internal("listing", prefix, e))?;
        let mut entries: Vec<(CString, FileType)> = Vec::new();
        for entry in listing {
            let entry = entry.map_err(|e| internal("listing", prefix, e))?;
            let name = entry.file_name();
            let b = name.to_bytes();
            if b == b"." || b == b".." {
                continue;
            }
            entries.push((name.to_owned(), entry.file_type()));
        }
        for (cname, mut ft) in entries {
            let Ok(name) = cname.to_str() else {
                log::debug!("skipping a non-UTF-8 name under {prefix:?}");
                continue;
            };
            if ft == FileType::Unknown {
                match statat(dir, cname.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                    Ok(st) => ft = FileType::from_raw_mode(st.st_mode),
                    Err(_) => continue,
                }
            }
            let rel = format!("{prefix}{name}");
            if paths::is_temp(name) {
                if temps && ft == FileType::RegularFile {
                    visit(&rel, dir, &cname)?;
                }
                continue;
            }
            if paths::is_excluded(name) {
                continue;
            }
            match ft {
                FileType::RegularFile if !temps => visit(&rel, dir, &cname)?,
                FileType::Directory if depth + 1 < MAX_DEPTH => {
                    match open_dir(dir, cname.as_c_str()) {
                        Ok(fd) => {
                            Self::walk_dir(fd.as_fd(), &format!("{rel}/"), depth + 1, temps, visit)?
                        }
                        // Gone, or replaced by a link or a file since listed.
                        Err(Errno::NOENT) | Err(Errno::NOTDIR) | Err(Errno::LOOP) => {}
                        Err(e) => return Err(internal("opening the folder", &rel, e)),
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Every listed file and its size, sorted by path.
    pub fn sizes(&self) -> Result<Vec<(String, u64)>, ApiError> {
        let mut out = Vec::new();
        self.walk(
            false,
            &mut |rel, dir, name| match statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => {
                    let (ft, size) = stat_kind(&st);
                    if ft == FileType::RegularFile {
                        out.push((rel.to_string(), size));
                    }
                    Ok(())
                }
                Err(Errno::NOENT) => Ok(()),
                Err(e) => Err(internal("inspecting", rel, e)),
            },
        )?;
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// `GET /workspace`: every listed file with the SHA-256 of its content,
    /// sorted by path. Hashing streams, so no file is held whole.
    pub fn tree(&self) -> Result<Vec<(String, String)>, ApiError> {
        let _guard = self.apply_lock.read();
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        self.walk(false, &mut |rel, dir, name| {
            let Some(mut f) = open_file(dir, name).map_err(|e| internal("opening", rel, e))? else {
                return Ok(());
            };
            let mut h = Sha256::new();
            loop {
                match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => h.update(&buf[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(internal("reading", rel, e)),
                }
            }
            out.push((rel.to_string(), hex(&h.finalize())));
            Ok(())
        })?;
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// `GET /workspace/snapshot`: every listed file with its content. Refused
    /// (`WORKSPACE_LIMIT`) when the workspace is over a limit: such a
    /// snapshot could not be applied back anyway.
    pub fn snapshot(&self) -> Result<Vec<SnapshotFile>, ApiError> {
        let _guard = self.apply_lock.read();
        let l = self.limits;
        let mut out: Vec<SnapshotFile> = Vec::new();
        let mut total: u64 = 0;
        self.walk(false, &mut |rel, dir, name| {
            let Some(f) = open_file(dir, name).map_err(|e| internal("opening", rel, e))? else {
                return Ok(());
            };
            let content = read_capped(f, l.max_file_bytes).map_err(|e| internal("reading", rel, e))?;
            let size = content.len() as u64;
            if size > l.max_file_bytes {
                return Err(limit(format!(
                    "{rel:?} is larger than the {} byte file limit; the workspace cannot be snapshotted",
                    l.max_file_bytes
                )));
            }
            total += size;
            if out.len() as u64 >= l.max_files || total > l.max_total_bytes {
                return Err(limit(format!(
                    "the workspace holds more than {} files or {} bytes; it cannot be snapshotted",
                    l.max_files, l.max_total_bytes
                )));
            }
            out.push(SnapshotFile {
                path: rel.to_string(),
                hash: sha256_hex(&content),
                content,
            });
            Ok(())
        })?;
        out.sort_unstable_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// `GET /workspace/file`: the content of one file (normalised path).
    pub fn read(&self, path: &str) -> Result<Vec<u8>, ApiError> {
        let not_found = || ApiError::new(Code::NotFound, format!("no file {path:?}"));
        let max = self.limits.max_file_bytes;
        match self.inspect(path)? {
            Kind::Missing => return Err(not_found()),
            Kind::Dir => {
                return Err(invalid(WorkspacePathError::new(
                    path,
                    "is a folder, not a file",
                )));
            }
            Kind::Other => {
                return Err(invalid(WorkspacePathError::new(
                    path,
                    "is not a regular file",
                )));
            }
            Kind::File { .. } => {}
        }
        let Some((dir, last)) = self.parent_dir(path, false)? else {
            return Err(not_found());
        };
        let cname = cstring(last, path)?;
        let f = open_file(dir.as_fd(), &cname)
            .map_err(|e| internal("opening", path, e))?
            .ok_or_else(not_found)?;
        let content = read_capped(f, max).map_err(|e| internal("reading", path, e))?;
        if content.len() as u64 > max {
            return Err(limit(format!(
                "{path:?} is larger than the {max} byte file limit"
            )));
        }
        Ok(content)
    }

    /// Removes temporary files a killed agent left behind (start-up).
    pub fn sweep_temps(&self) -> Result<usize, ApiError> {
        let mut n = 0;
        self.walk(true, &mut |rel, dir, name| {
            if unlinkat(dir, name, AtFlags::empty()).is_ok() {
                log::info!("removed the leftover temporary file {rel:?}");
                n += 1;
            }
            Ok(())
        })?;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::atomic::Ordering;

    /// A unique folder under the system temp dir, removed on drop; `root`
    /// is the workspace, `outside` a sibling that must never change.
    struct Tmp {
        base: PathBuf,
        root: PathBuf,
        outside: PathBuf,
    }

    impl Tmp {
        fn new(tag: &str) -> Tmp {
            static N: AtomicU64 = AtomicU64::new(0);
            let base = std::env::temp_dir().join(format!(
                "kubegate-agent-fs-{tag}-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&base);
            let root = base.join("root");
            let outside = base.join("outside");
            std::fs::create_dir_all(&root).unwrap();
            std::fs::create_dir_all(&outside).unwrap();
            std::fs::write(outside.join("secret.txt"), b"outside").unwrap();
            Tmp {
                base,
                root,
                outside,
            }
        }

        fn ws(&self, limits: Limits) -> Workspace {
            Workspace::open(&self.root, limits).unwrap()
        }

        /// The outside folder is exactly as created.
        fn outside_untouched(&self) {
            let names: Vec<_> = std::fs::read_dir(&self.outside)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![std::ffi::OsString::from("secret.txt")]);
            assert_eq!(
                std::fs::read(self.outside.join("secret.txt")).unwrap(),
                b"outside"
            );
        }
    }

    impl Drop for Tmp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.base);
        }
    }

    fn fw(path: &str, content: &[u8]) -> FileWrite {
        FileWrite {
            path: path.into(),
            content: content.to_vec(),
        }
    }

    #[test]
    fn write_read_tree_round_trip() {
        let t = Tmp::new("rt");
        let ws = t.ws(Limits::default());
        let a = ws
            .apply(
                vec![
                    fw("b/c/d.txt", b"deep"),
                    fw("a.txt", b"top"),
                    fw("bin", &[0, 255, 1]),
                ],
                vec![],
            )
            .unwrap();
        assert_eq!(
            a,
            Applied {
                written: 3,
                deleted: 0
            }
        );
        assert_eq!(std::fs::read(t.root.join("b/c/d.txt")).unwrap(), b"deep");
        assert_eq!(ws.read("bin").unwrap(), vec![0, 255, 1]);
        let tree = ws.tree().unwrap();
        let paths: Vec<&str> = tree.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["a.txt", "b/c/d.txt", "bin"]);
        assert_eq!(tree[0].1, sha256_hex(b"top"));
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let snap = ws.snapshot().unwrap();
        assert_eq!(snap.len(), 3);
        assert_eq!(snap[1].content, b"deep");
        assert_eq!(snap[1].hash, sha256_hex(b"deep"));
        // Nothing temporary is left behind.
        let names: Vec<_> = std::fs::read_dir(t.root.join("b/c"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn excluded_folders_temps_links_and_fifos_are_not_listed() {
        let t = Tmp::new("excl");
        for d in [".git", "node_modules", "src/__pycache__", "x/.kubegate"] {
            std::fs::create_dir_all(t.root.join(d)).unwrap();
            std::fs::write(t.root.join(d).join("f"), b"x").unwrap();
        }
        std::fs::write(t.root.join("src/main.py"), b"print()").unwrap();
        std::fs::write(t.root.join("src/.kubegate-tmp-1-1"), b"half").unwrap();
        std::os::unix::fs::symlink(&t.outside, t.root.join("out")).unwrap();
        std::os::unix::fs::symlink(t.outside.join("secret.txt"), t.root.join("s.txt")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            t.root.join("fifo"),
            FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        let ws = t.ws(Limits::default());
        let tree = ws.tree().unwrap();
        let paths: Vec<&str> = tree.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["src/main.py"]);
        assert_eq!(ws.snapshot().unwrap().len(), 1);
        // A FIFO is refused without blocking.
        assert_eq!(ws.read("fifo").unwrap_err().code, Code::InvalidPath);
        // The start-up sweep removes the leftover temporary file only.
        assert_eq!(ws.sweep_temps().unwrap(), 1);
        assert!(!t.root.join("src/.kubegate-tmp-1-1").exists());
        assert!(t.root.join("src/main.py").exists());
    }

    #[test]
    fn symlinks_are_refused_and_nothing_outside_changes() {
        let t = Tmp::new("link");
        std::fs::create_dir_all(t.root.join("real")).unwrap();
        std::os::unix::fs::symlink(&t.outside, t.root.join("out")).unwrap();
        std::os::unix::fs::symlink(&t.outside, t.root.join("real/out")).unwrap();
        std::os::unix::fs::symlink(t.outside.join("secret.txt"), t.root.join("s.txt")).unwrap();
        let ws = t.ws(Limits::default());
        for p in [
            "out/secret.txt",
            "out/new.txt",
            "real/out/x/y",
            "s.txt",
            "out",
        ] {
            let e = ws.apply(vec![fw(p, b"pwned")], vec![]).unwrap_err();
            assert_eq!(e.code, Code::InvalidPath, "{p}: {e}");
            assert!(e.message.contains("symlink"), "{p}: {e}");
            assert!(e.message.contains(p), "{p}: {e}");
            let e = ws.apply(vec![], vec![p.into()]).unwrap_err();
            assert_eq!(e.code, Code::InvalidPath, "{p}: {e}");
            assert!(matches!(ws.inspect(p), Err(e) if e.code == Code::InvalidPath));
        }
        assert_eq!(
            ws.read("out/secret.txt").unwrap_err().code,
            Code::InvalidPath
        );
        assert_eq!(ws.read("s.txt").unwrap_err().code, Code::InvalidPath);
        // All or nothing: a good write beside a bad one is not made.
        let e = ws
            .apply(vec![fw("good.txt", b"ok"), fw("out/evil", b"x")], vec![])
            .unwrap_err();
        assert_eq!(e.code, Code::InvalidPath);
        assert!(!t.root.join("good.txt").exists());
        t.outside_untouched();
        // The links themselves are still there.
        assert!(t.root.join("out").symlink_metadata().unwrap().is_symlink());
    }

    #[test]
    fn files_and_folders_in_the_way() {
        let t = Tmp::new("way");
        let ws = t.ws(Limits::default());
        ws.apply(vec![fw("f", b"file"), fw("d/x", b"x")], vec![])
            .unwrap();
        let e = ws.apply(vec![fw("f/g", b"no")], vec![]).unwrap_err();
        assert_eq!(e.code, Code::InvalidPath);
        assert!(e.message.contains("not a folder"), "{e}");
        let e = ws.apply(vec![fw("d", b"no")], vec![]).unwrap_err();
        assert_eq!(e.code, Code::InvalidPath);
        assert!(e.message.contains("folder"), "{e}");
        assert_eq!(ws.read("d").unwrap_err().code, Code::InvalidPath);
        assert_eq!(ws.read("nope").unwrap_err().code, Code::NotFound);
        assert_eq!(ws.read("f/g").unwrap_err().code, Code::InvalidPath);
        let e = ws
            .apply(vec![fw("a", b"1"), fw("a/b", b"2")], vec![])
            .unwrap_err();
        assert_eq!(e.code, Code::InvalidPath);
        assert!(!t.root.join("a").exists());
    }

    #[test]
    fn deletes_files_folders_and_missing_paths() {
        let t = Tmp::new("del");
        let ws = t.ws(Limits::default());
        ws.apply(
            vec![
                fw("keep", b"k"),
                fw("gone", b"g"),
                fw("dir/a", b"a"),
                fw("dir/sub/b", b"b"),
            ],
            vec![],
        )
        .unwrap();
        // A link inside a deleted folder is removed, its target kept.
        std::os::unix::fs::symlink(&t.outside, t.root.join("dir/sub/out")).unwrap();
        let a = ws
            .apply(
                vec![fw("new", b"n")],
                vec![
                    "gone".into(),
                    "dir".into(),
                    "missing".into(),
                    "no/such/thing".into(),
                ],
            )
            .unwrap();
        assert_eq!(
            a,
            Applied {
                written: 1,
                deleted: 2
            }
        );
        let tree: Vec<String> = ws.tree().unwrap().into_iter().map(|(p, _)| p).collect();
        assert_eq!(tree, ["keep", "new"]);
        assert!(!t.root.join("dir").exists());
        t.outside_untouched();
    }

    #[test]
    fn replace_keeps_the_mode() {
        let t = Tmp::new("mode");
        let ws = t.ws(Limits::default());
        ws.apply(vec![fw("run.sh", b"#!/bin/sh\n")], vec![])
            .unwrap();
        let p = t.root.join("run.sh");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        ws.apply(vec![fw("run.sh", b"#!/bin/sh\necho\n")], vec![])
            .unwrap();
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(std::fs::read(&p).unwrap(), b"#!/bin/sh\necho\n");
    }

    #[test]
    fn limits() {
        let t = Tmp::new("lim");
        let l = Limits {
            max_file_bytes: 10,
            max_files: 3,
            max_total_bytes: 20,
        };
        let ws = t.ws(l);
        let e = ws.apply(vec![fw("big", &[1; 11])], vec![]).unwrap_err();
        assert_eq!(e.code, Code::WorkspaceLimit);
        assert!(e.message.contains("big"), "{e}");
        ws.apply(vec![fw("a", &[1; 10]), fw("b", &[1; 5])], vec![])
            .unwrap();
        let e = ws.apply(vec![fw("c", &[1; 6])], vec![]).unwrap_err();
        assert_eq!(e.code, Code::WorkspaceLimit);
        assert!(e.message.contains("total"), "{e}");
        // Replacing counts the new size, not both.
        ws.apply(vec![fw("a", &[2; 10]), fw("c", &[1; 5])], vec![])
            .unwrap();
        let e = ws.apply(vec![fw("d", b"")], vec![]).unwrap_err();
        assert!(e.message.contains("file limit"), "{e}");
        // A delete makes room in the same request.
        ws.apply(vec![fw("d", b"")], vec!["c".into()]).unwrap();
        assert!(!t.root.join("c").exists());
        // Over a limit through an app's own writes: shrinking still works,
        // the snapshot is refused.
        std::fs::write(t.root.join("app.log"), [0u8; 30]).unwrap();
        assert_eq!(ws.snapshot().unwrap_err().code, Code::WorkspaceLimit);
        assert_eq!(ws.read("app.log").unwrap_err().code, Code::WorkspaceLimit);
        ws.apply(vec![], vec!["a".into()]).unwrap();
        let e = ws.apply(vec![fw("e", b"e")], vec![]).unwrap_err();
        assert_eq!(e.code, Code::WorkspaceLimit);
        ws.apply(vec![], vec!["app.log".into()]).unwrap();
        assert_eq!(ws.snapshot().unwrap().len(), 2);
    }
}
