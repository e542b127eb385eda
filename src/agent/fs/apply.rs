//! The write side of the workspace: `POST /workspace`'s apply (check
//! everything, write temporary files beside their targets, delete, rename
//! each over its target), folder deletes that never follow a link, and the
//! mode new files get. The plan's string rules are `wire::paths`; the walk,
//! the limits and the read side are the parent module.

use super::{
    cstring, internal, invalid, limit, open_dir, Applied, FileWrite, Kind, Workspace,
    WorkspacePathError,
};
use crate::agent::wire::paths::{self, is_within, MAX_DEPTH, TEMP_PREFIX};
use crate::api::ApiError;
use rustix::fs::{
    fchmod, openat, renameat, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags,
};
use rustix::io::Errno;
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io::Write as _;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;

impl Workspace {
    /// `POST /workspace`: checks everything (the plan, per-file size, each
    /// path on disk, the resulting count and total), then writes temporary
    /// files, deletes, and renames. Paths must be normalised.
    pub fn apply(&self, writes: Vec<FileWrite>, deletes: Vec<String>) -> Result<Applied, ApiError> {
        let l = self.limits;
        let wpaths: Vec<String> = writes.iter().map(|w| w.path.clone()).collect();
        paths::check_plan(&wpaths, &deletes).map_err(invalid)?;
        for w in &writes {
            if w.content.len() as u64 > l.max_file_bytes {
                return Err(limit(format!(
                    "{:?} is {} bytes, over the {} byte file limit",
                    w.path,
                    w.content.len(),
                    l.max_file_bytes
                )));
            }
        }
        if writes.len() as u64 > l.max_files {
            return Err(limit(format!(
                "{} files written, over the {} file limit",
                writes.len(),
                l.max_files
            )));
        }

        let _guard = self.apply_lock.write();
        let mut delete_kinds = Vec::with_capacity(deletes.len());
        for p in &deletes {
            delete_kinds.push(self.inspect(p)?);
        }
        for w in &writes {
            match self.inspect(&w.path)? {
                Kind::Dir => return Err(invalid(WorkspacePathError::new(
                    &w.path,
                    "is a folder; delete it first (in an earlier request) to write a file there",
                ))),
                Kind::Other => {
                    return Err(invalid(WorkspacePathError::new(
                        &w.path,
                        "is not a regular file",
                    )));
                }
                Kind::Missing | Kind::File { .. } => {}
            }
        }
        self.check_totals(&writes, &deletes, &delete_kinds)?;

        // Phase 1: every new content lands in a temporary file beside its
        // target. Any failure removes them all: nothing changed.
        let mut temps: Vec<(String, String)> = Vec::with_capacity(writes.len());
        for w in &writes {
            match self.write_temp(w) {
                Ok(t) => temps.push((w.path.clone(), t)),
                Err(e) => {
                    for (p, t) in &temps {
                        self.remove_temp(p, t);
                    }
                    return Err(e);
                }
            }
        }
        // Phase 2: deletes. Phase 3: renames (atomic per file).
        let mut deleted = 0;
        let mut failure = None;
        for p in &deletes {
            match self.delete(p) {
                Ok(true) => deleted += 1,
                Ok(false) => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let mut written = 0;
        if failure.is_none() {
            for (p, t) in &temps {
                match self.rename_temp(p, t) {
                    Ok(()) => written += 1,
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        if let Some(e) = failure {
            // Only a change to the folder under our feet (or the disk)
            // gets here; say what was done.
            for (p, t) in temps.iter().skip(written) {
                self.remove_temp(p, t);
            }
            return Err(ApiError::new(
                e.code,
                format!(
                    "{} (after {deleted} deletes and {written} writes of this request)",
                    e.message
                ),
            ));
        }
        Ok(Applied { written, deleted })
    }

    /// The count and total after the apply, refused when over a limit and
    /// larger than now (so a workspace already over a limit can still
    /// shrink).
    fn check_totals(
        &self,
        writes: &[FileWrite],
        deletes: &[String],
        delete_kinds: &[Kind],
    ) -> Result<(), ApiError> {
        let l = self.limits;
        let mut files: HashMap<String, u64> = self.sizes()?.into_iter().collect();
        let (count0, total0) = (files.len() as u64, files.values().sum::<u64>());
        for (p, k) in deletes.iter().zip(delete_kinds) {
            match k {
                Kind::Dir => files.retain(|f, _| !is_within(f, p)),
                _ => {
                    files.remove(p);
                }
            }
        }
        for w in writes {
            files.insert(w.path.clone(), w.content.len() as u64);
        }
        let (count, total) = (files.len() as u64, files.values().sum::<u64>());
        if count > l.max_files && count > count0 {
            return Err(limit(format!(
                "the workspace would hold {count} files, over the {} file limit",
                l.max_files
            )));
        }
        if total > l.max_total_bytes && total > total0 {
            return Err(limit(format!(
                "the workspace would hold {total} bytes, over the {} byte total limit",
                l.max_total_bytes
            )));
        }
        Ok(())
    }

    fn write_temp(&self, w: &FileWrite) -> Result<String, ApiError> {
        let path = w.path.as_str();
        let Some((dir, last)) = self.parent_dir(path, true)? else {
            return Err(internal("creating the folders of", path, "vanished"));
        };
        // A replaced file keeps its permission bits (an executable script
        // stays executable); a new one gets 0666 less the umask.
        let mode = match statat(dir.as_fd(), last, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::RegularFile => {
                st.st_mode & 0o7777
            }
            _ => new_file_mode(),
        };
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        let temp = format!("{TEMP_PREFIX}{}-{n}", std::process::id());
        let fd = openat(
            dir.as_fd(),
            temp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(mode),
        )
        .map_err(|e| internal("creating a temporary file for", path, e))?;
        let result = fchmod(&fd, Mode::from_raw_mode(mode))
            .map_err(std::io::Error::from)
            .and_then(|()| std::fs::File::from(fd).write_all(&w.content));
        if let Err(e) = result {
            let _ = unlinkat(dir.as_fd(), temp.as_str(), AtFlags::empty());
            return Err(internal("writing", path, e));
        }
        Ok(temp)
    }

    fn remove_temp(&self, path: &str, temp: &str) {
        if let Ok(Some((dir, _))) = self.parent_dir(path, false) {
            let _ = unlinkat(dir.as_fd(), temp, AtFlags::empty());
        }
    }

    fn rename_temp(&self, path: &str, temp: &str) -> Result<(), ApiError> {
        let Some((dir, last)) = self.parent_dir(path, false)? else {
            return Err(internal("renaming into", path, "its folder vanished"));
        };
        renameat(dir.as_fd(), temp, dir.as_fd(), last)
            .map_err(|e| internal("renaming into", path, e))
    }

    /// Deletes a file, or a folder with everything in it (links inside are
    /// removed, never followed). False when nothing was there.
    fn delete(&self, path: &str) -> Result<bool, ApiError> {
        let Some((dir, last)) = self.parent_dir(path, false)? else {
            return Ok(false);
        };
        let cname = cstring(last, path)?;
        match statat(dir.as_fd(), last, AtFlags::SYMLINK_NOFOLLOW) {
            Err(Errno::NOENT) => Ok(false),
            Err(e) => Err(internal("inspecting", path, e)),
            Ok(st) => {
                let r = if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                    remove_tree(dir.as_fd(), &cname, 0)
                } else {
                    unlinkat(dir.as_fd(), cname.as_c_str(), AtFlags::empty())
                };
                match r {
                    Ok(()) => Ok(true),
                    Err(Errno::NOENT) => Ok(false),
                    Err(e) => Err(internal("deleting", path, e)),
                }
            }
        }
    }
}

/// Removes the folder `name` in `parent` and everything in it, without
/// following links (a link is unlinked itself).
fn remove_tree(parent: BorrowedFd<'_>, name: &CStr, depth: usize) -> Result<(), Errno> {
    if depth > 2 * MAX_DEPTH {
        return Err(Errno::NAMETOOLONG);
    }
    let fd = open_dir(parent, name)?;
    let mut entries: Vec<(CString, FileType)> = Vec::new();
    for entry in Dir::read_from(&fd)? {
        let entry = entry?;
        let b = entry.file_name().to_bytes();
        if b == b"." || b == b".." {
            continue;
        }
        entries.push((entry.file_name().to_owned(), entry.file_type()));
    }
    for (n, mut ft) in entries {
        if ft == FileType::Unknown {
            ft = match statat(&fd, n.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode),
                Err(Errno::NOENT) => continue,
                Err(e) => return Err(e),
            };
        }
        let r = if ft == FileType::Directory {
            remove_tree(fd.as_fd(), &n, depth + 1)
        } else {
            unlinkat(&fd, n.as_c_str(), AtFlags::empty())
        };
        match r {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(e),
        }
    }
    unlinkat(parent, name, AtFlags::REMOVEDIR)
}

/// The mode of a new workspace file: 0666 less the process umask, as
/// open(2) gives (0644 in a usual container; 0600 under the daemon's
/// embedded sim, whose processes inherit its umask 077). Read once from
/// /proc (reading the umask any other way means changing it); 0644 when
/// /proc does not say.
fn new_file_mode() -> u32 {
    static MODE: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MODE.get_or_init(|| {
        let umask = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Umask:"))
                    .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
            })
            .unwrap_or(0o022);
        0o666 & !umask & 0o777
    })
}
