//! The daemon's state directory (`server.state_dir`: session records,
//! rings, checkpoints, recordings, the embedded sim's kubeconfig and
//! folders): opened at every start with umask-077 semantics, whatever made
//! it and whatever umask was in force then (docs/deploy.md, "The state
//! directory").
//!
//! - Missing: created 0700 (with its missing parents).
//! - It must be a directory owned by the daemon's effective uid; anything
//!   else (another owner, a file) is refused with a message naming the
//!   problem.
//! - A symbolic link is refused unless it is one only a trusted party could
//!   have made: the link and the folder holding it belong to root or to the
//!   daemon's uid and that folder is not writable by group or others (what
//!   systemd's `DynamicUser=` makes: `/var/lib/kubegate -> private/kubegate`).
//!   The link's target then passes the same checks.
//! - Its modes are fixed ([`fix_state_modes`]): the directory 0700, every
//!   folder below it 0700, every file without group and other bits (0644
//!   becomes 0600, 0755 becomes 0700). Entries of other owners are left as
//!   they are and not entered; symbolic links are never followed; the
//!   `exclude` paths (a pods' root that must stay searchable for pods of
//!   other uids) are skipped whole.
//!
//! The fix walks with directory descriptors, never paths: each folder is
//! made 0700 before its entries are read, so nobody but the daemon's uid
//! (and root) can swap an entry for a link between the check and the
//! change.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};

/// Folders nested deeper than this below the state directory are left as
/// they are (the walk holds one descriptor per level).
const MAX_DEPTH: usize = 64;

/// What [`fix_state_modes`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FixReport {
    /// Entries whose mode was changed (the directory itself included).
    pub changed: usize,
    /// Entries of another owner, left as they are (and not entered).
    pub foreign: usize,
    /// Folders deeper than the walk goes, left as they are.
    pub too_deep: usize,
}

/// Why the state directory cannot be used; displayed as a whole sentence
/// naming the directory (the daemon's start-up error, exit code 1).
#[derive(Debug)]
pub enum StateDirError {
    /// Missing, and creating it failed.
    Create { dir: PathBuf, error: io::Error },
    /// `lstat` failed.
    Stat { dir: PathBuf, error: io::Error },
    /// A trusted link whose target cannot be resolved or read.
    Target {
        dir: PathBuf,
        target: Option<PathBuf>,
        error: io::Error,
    },
    /// Not a directory of the daemon's uid (`link`: the link's target is
    /// the one at fault).
    NotOwn { link: bool, problem: DirProblem },
    /// A link owned by another uid than root or the daemon's.
    LinkOwner { dir: PathBuf, owner: u32 },
    /// The folder holding the link cannot be read.
    LinkFolder {
        dir: PathBuf,
        folder: PathBuf,
        error: io::Error,
    },
    /// The folder holding the link is not only root's or the daemon's.
    LinkFolderOpen { dir: PathBuf, folder: PathBuf },
    /// [`fix_state_modes`] failed.
    FixModes { dir: PathBuf, error: io::Error },
}

impl std::fmt::Display for StateDirError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StateDirError::Create { dir, error } => {
                write!(f, "creating state directory {}: {error}", dir.display())
            }
            StateDirError::Stat { dir, error } => {
                write!(f, "state directory {}: {error}", dir.display())
            }
            StateDirError::Target {
                dir,
                target: None,
                error,
            } => write!(
                f,
                "state directory {} is a symbolic link that does not resolve: {error}",
                dir.display()
            ),
            StateDirError::Target {
                dir,
                target: Some(t),
                error,
            } => write!(
                f,
                "state directory {} -> {}: {error}",
                dir.display(),
                t.display()
            ),
            StateDirError::NotOwn { link: false, problem } => {
                write!(f, "state directory {problem}")
            }
            StateDirError::NotOwn { link: true, problem } => write!(
                f,
                "state directory {} is a link to {problem}",
                problem.link.display()
            ),
            StateDirError::LinkOwner { dir, owner } => write!(
                f,
                "state directory {} is a symbolic link owned by uid {owner}: refused (whoever owns it chooses where the daemon's state goes); point server.state_dir at the real directory",
                dir.display()
            ),
            StateDirError::LinkFolder { dir, folder, error } => write!(
                f,
                "state directory {}: its folder {}: {error}",
                dir.display(),
                folder.display()
            ),
            StateDirError::LinkFolderOpen { dir, folder } => write!(
                f,
                "state directory {} is a symbolic link in {}, a folder other users can change: refused; point server.state_dir at the real directory",
                dir.display(),
                folder.display()
            ),
            StateDirError::FixModes { dir, error } => write!(
                f,
                "fixing the modes of state directory {}: {error}",
                dir.display()
            ),
        }
    }
}

impl std::error::Error for StateDirError {}

/// Why a path is not a directory of the daemon's uid; displayed starting
/// with the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirProblem {
    /// The state directory as configured (the link, when it is one).
    pub link: PathBuf,
    /// The path at fault.
    pub path: PathBuf,
    pub kind: DirProblemKind,
}

/// What is wrong with [`DirProblem::path`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirProblemKind {
    /// A symbolic link (a link's target may not be one).
    Link,
    NotADirectory,
    /// Owned by another uid than the daemon's.
    Owner {
        owner: u32,
        uid: u32,
    },
}

impl std::fmt::Display for DirProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.path.display();
        match self.kind {
            DirProblemKind::Link => write!(f, "{shown}, itself a symbolic link: refused"),
            DirProblemKind::NotADirectory => write!(f, "{shown} is not a directory"),
            DirProblemKind::Owner { owner, uid } => write!(
                f,
                "{shown} belongs to uid {owner}, not to uid {uid} the daemon runs as: refused (its files would be readable or writable by that user); chown it to uid {uid} or point server.state_dir elsewhere"
            ),
        }
    }
}

/// Opens the state directory as the module comment says; returns the
/// directory the daemon writes in (the link's target when `dir` is a
/// trusted link) and what the mode fix did.
pub fn open_state_dir(
    dir: &Path,
    exclude: &[&Path],
) -> Result<(PathBuf, FixReport), StateDirError> {
    let stat_err = |error| StateDirError::Stat {
        dir: dir.to_path_buf(),
        error,
    };
    let meta = match std::fs::symlink_metadata(dir) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|error| StateDirError::Create {
                    dir: dir.to_path_buf(),
                    error,
                })?;
            std::fs::symlink_metadata(dir).map_err(stat_err)?
        }
        Err(e) => return Err(stat_err(e)),
    };
    let uid = rustix::process::geteuid().as_raw();
    let real = if meta.file_type().is_symlink() {
        check_trusted_link(dir, &meta, uid)?;
        let target = std::fs::canonicalize(dir).map_err(|error| StateDirError::Target {
            dir: dir.to_path_buf(),
            target: None,
            error,
        })?;
        let m = std::fs::symlink_metadata(&target).map_err(|error| StateDirError::Target {
            dir: dir.to_path_buf(),
            target: Some(target.clone()),
            error,
        })?;
        check_own_dir(dir, &target, &m, uid).map_err(|problem| StateDirError::NotOwn {
            link: true,
            problem,
        })?;
        target
    } else {
        check_own_dir(dir, dir, &meta, uid).map_err(|problem| StateDirError::NotOwn {
            link: false,
            problem,
        })?;
        dir.to_path_buf()
    };
    // Exclusions are named under `dir`; the walk sees them relative.
    let relative: Vec<PathBuf> = exclude
        .iter()
        .filter_map(|e| {
            if e.is_absolute() {
                e.strip_prefix(dir).ok().map(Path::to_path_buf)
            } else {
                Some(e.to_path_buf())
            }
        })
        .collect();
    let rel: Vec<&Path> = relative.iter().map(PathBuf::as_path).collect();
    let report = fix_state_modes(&real, &rel).map_err(|error| StateDirError::FixModes {
        dir: dir.to_path_buf(),
        error,
    })?;
    Ok((real, report))
}

/// `path` (after `lstat`) is a directory owned by `uid`; else why not
/// (`link`: the state directory as configured).
fn check_own_dir(
    link: &Path,
    path: &Path,
    meta: &std::fs::Metadata,
    uid: u32,
) -> Result<(), DirProblem> {
    let problem = |kind| DirProblem {
        link: link.to_path_buf(),
        path: path.to_path_buf(),
        kind,
    };
    if meta.file_type().is_symlink() {
        return Err(problem(DirProblemKind::Link));
    }
    if !meta.is_dir() {
        return Err(problem(DirProblemKind::NotADirectory));
    }
    if meta.uid() != uid {
        return Err(problem(DirProblemKind::Owner {
            owner: meta.uid(),
            uid,
        }));
    }
    Ok(())
}

/// A link only root or the daemon's uid could have made or could change.
fn check_trusted_link(
    link: &Path,
    meta: &std::fs::Metadata,
    uid: u32,
) -> Result<(), StateDirError> {
    let trusted = |owner: u32| owner == 0 || owner == uid;
    if !trusted(meta.uid()) {
        return Err(StateDirError::LinkOwner {
            dir: link.to_path_buf(),
            owner: meta.uid(),
        });
    }
    let parent = match link.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let pm = std::fs::metadata(&parent).map_err(|error| StateDirError::LinkFolder {
        dir: link.to_path_buf(),
        folder: parent.clone(),
        error,
    })?;
    if !trusted(pm.uid()) || pm.mode() & 0o022 != 0 {
        return Err(StateDirError::LinkFolderOpen {
            dir: link.to_path_buf(),
            folder: parent,
        });
    }
    Ok(())
}

/// Brings `dir` and everything below it that the daemon's uid owns to
/// umask-077 modes: `dir` 0700, folders 0700, files keep their owner bits
/// only. Skips symbolic links, special files, entries of other owners
/// (counted in [`FixReport::foreign`], not entered) and the `exclude`
/// paths (relative to `dir`: e.g. a pods' root that other uids must be
/// able to search). `dir` itself must not be a symbolic link.
pub fn fix_state_modes(dir: &Path, exclude: &[&Path]) -> io::Result<FixReport> {
    let uid = rustix::process::geteuid().as_raw();
    let root = rustix::fs::openat(
        CWD,
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    let mut report = FixReport::default();
    let st = rustix::fs::fstat(&root)?;
    if st.st_uid != uid {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to uid {}", dir.display(), st.st_uid),
        ));
    }
    if Mode::from_raw_mode(st.st_mode).bits() != 0o700 {
        rustix::fs::fchmod(&root, Mode::from_raw_mode(0o700))?;
        report.changed += 1;
    }
    let exclude: Vec<PathBuf> = exclude.iter().map(|p| normal(p)).collect();
    walk(&root, &PathBuf::new(), &exclude, uid, 0, &mut report)?;
    Ok(report)
}

/// `p` without `.` components or a trailing slash, for comparisons.
fn normal(p: &Path) -> PathBuf {
    p.components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect()
}

fn walk(
    dirfd: &OwnedFd,
    rel: &Path,
    exclude: &[PathBuf],
    uid: u32,
    depth: usize,
    report: &mut FixReport,
) -> io::Result<()> {
    let mut entries = rustix::fs::Dir::read_from(dirfd)?;
    let mut names: Vec<std::ffi::CString> = Vec::new();
    while let Some(e) = entries.read() {
        let e = e?;
        let name = e.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        names.push(name.to_owned());
    }
    drop(entries);
    for name in names {
        let child_rel = rel.join(os_str(&name));
        if exclude.contains(&child_rel) {
            continue;
        }
        let st = match rustix::fs::statat(dirfd.as_fd(), name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
        {
            Ok(st) => st,
            // Removed meanwhile (a session ending): nothing to fix.
            Err(rustix::io::Errno::NOENT) => continue,
            Err(e) => return Err(e.into()),
        };
        let ft = FileType::from_raw_mode(st.st_mode);
        let is_dir = match ft {
            FileType::Directory => true,
            FileType::RegularFile => false,
            _ => continue,
        };
        if st.st_uid != uid {
            report.foreign += 1;
            continue;
        }
        let mode = Mode::from_raw_mode(st.st_mode).bits();
        let want = if is_dir { 0o700 } else { mode & 0o700 };
        if mode != want {
            // The parent is already 0700: only this uid (or root) can
            // replace the entry by a link before this call.
            rustix::fs::chmodat(
                dirfd.as_fd(),
                name.as_c_str(),
                Mode::from_raw_mode(want),
                AtFlags::empty(),
            )?;
            report.changed += 1;
        }
        if is_dir {
            if depth + 1 >= MAX_DEPTH {
                report.too_deep += 1;
                continue;
            }
            let child = match rustix::fs::openat(
                dirfd.as_fd(),
                name.as_c_str(),
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(fd) => fd,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            };
            walk(&child, &child_rel, exclude, uid, depth + 1, report)?;
        }
    }
    Ok(())
}

fn os_str(name: &CStr) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(name.to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn temp(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "kubegate-state-{tag}-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn mode(p: &Path) -> u32 {
        std::fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
    }

    fn chmod(p: &Path, m: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn modes_become_umask_077_and_links_are_not_followed() {
        let base = temp("fix");
        let dir = base.join("state");
        std::fs::create_dir_all(dir.join("sessions/deep/er")).unwrap();
        std::fs::create_dir_all(dir.join("sim/pods/p1")).unwrap();
        std::fs::write(dir.join("sessions/a.json"), "{}").unwrap();
        std::fs::write(dir.join("sessions/deep/er/b"), "x").unwrap();
        std::fs::write(dir.join("run.sh"), "#!/bin/sh").unwrap();
        std::fs::write(dir.join("sim/pods/p1/f"), "x").unwrap();
        // Outside the state: a link must not carry the fix there.
        std::fs::write(base.join("outside"), "x").unwrap();
        std::os::unix::fs::symlink(base.join("outside"), dir.join("link")).unwrap();
        for d in [
            "",
            "sessions",
            "sessions/deep",
            "sessions/deep/er",
            "sim",
            "sim/pods",
            "sim/pods/p1",
        ] {
            chmod(&dir.join(d), 0o755);
        }
        for f in ["sessions/a.json", "sessions/deep/er/b", "sim/pods/p1/f"] {
            chmod(&dir.join(f), 0o644);
        }
        chmod(&dir.join("run.sh"), 0o755);
        chmod(&base.join("outside"), 0o644);

        let r = fix_state_modes(&dir, &[Path::new("sim/pods")]).unwrap();
        assert_eq!(r.foreign, 0);
        for d in ["", "sessions", "sessions/deep", "sessions/deep/er", "sim"] {
            assert_eq!(mode(&dir.join(d)), 0o700, "{d}");
        }
        assert_eq!(mode(&dir.join("sessions/a.json")), 0o600);
        assert_eq!(mode(&dir.join("sessions/deep/er/b")), 0o600);
        assert_eq!(
            mode(&dir.join("run.sh")),
            0o700,
            "the owner's bits are kept"
        );
        assert_eq!(mode(&base.join("outside")), 0o644, "the link was followed");
        // The excluded pods' root is left whole.
        assert_eq!(mode(&dir.join("sim/pods")), 0o755);
        assert_eq!(mode(&dir.join("sim/pods/p1/f")), 0o644);
        assert_eq!(r.changed, 8, "{r:?}");
        // Nothing left to do the second time.
        assert_eq!(
            fix_state_modes(&dir, &[Path::new("sim/pods")])
                .unwrap()
                .changed,
            0
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    /// A figure, not a check: the start-time cost of the fix on a large
    /// state (`cargo test --lib state_dir -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn bench_fix_on_a_large_state() {
        let base = temp("bench");
        let (dirs, files) = (1_000, 100);
        for d in 0..dirs {
            let dd = base.join(format!("d{d}"));
            std::fs::create_dir(&dd).unwrap();
            for f in 0..files {
                std::fs::write(dd.join(format!("f{f}")), "").unwrap();
                chmod(&dd.join(format!("f{f}")), 0o644);
            }
            chmod(&dd, 0o755);
        }
        let t = std::time::Instant::now();
        let r = fix_state_modes(&base, &[]).unwrap();
        let first = t.elapsed();
        let t = std::time::Instant::now();
        let again = fix_state_modes(&base, &[]).unwrap();
        let second = t.elapsed();
        println!(
            "fix_state_modes over {} entries: {first:?} changing {} modes, {second:?} when nothing changes ({})",
            dirs * (files + 1),
            r.changed,
            again.changed
        );
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn open_creates_a_missing_directory_0700_and_refuses_files_and_untrusted_links() {
        let base = temp("open");
        let dir = base.join("a/b/state");
        let (real, _) = open_state_dir(&dir, &[]).unwrap();
        assert_eq!(real, dir);
        assert_eq!(mode(&dir), 0o700);

        let file = base.join("file");
        std::fs::write(&file, "").unwrap();
        let e = open_state_dir(&file, &[]).unwrap_err().to_string();
        assert!(e.contains("is not a directory"), "{e}");

        // A link in a folder only we can change: followed, its target fixed.
        chmod(&base, 0o755);
        let link = base.join("link");
        std::os::unix::fs::symlink(&dir, &link).unwrap();
        chmod(&dir, 0o755);
        let (real, _) = open_state_dir(&link, &[]).unwrap();
        assert_eq!(real, std::fs::canonicalize(&dir).unwrap());
        assert_eq!(mode(&dir), 0o700);

        // The same link in a folder others can write: refused.
        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        chmod(&open, 0o1777);
        let bad = open.join("link");
        std::os::unix::fs::symlink(&dir, &bad).unwrap();
        let e = open_state_dir(&bad, &[]).unwrap_err().to_string();
        assert!(
            e.contains("symbolic link") && e.contains("other users can change"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&base);
    }
}
