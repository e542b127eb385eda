//! `kubegate install-self DEST` (docs/sessions.md#a-sessions-pod,
//! docs/runner.md#kubegate-install-self-dest): copies the running executable to
//! `DEST/kubegate`, so an init container from the kubegate image can bring the binary into a
//! session pod's shared `kubegate-bin` volume for `app-runner`.
//!
//! Atomic: the copy is written to a temporary file in DEST (created with
//! `O_EXCL`), synced, made 0755, renamed over `DEST/kubegate`, and DEST is
//! synced. A reader (an app container starting `app-runner`) sees the old
//! file or the whole new one, never a partial copy; a program already
//! running from the old file keeps its inode. Running it again replaces the
//! copy the same way. A failure removes the temporary file.

use super::error::RunnerError;
use crate::exit::{self, codes, Parsed};
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The installed file's name inside DEST.
pub const INSTALLED_NAME: &str = "kubegate";
/// Where the running executable is read from.
pub const SELF_EXE: &str = "/proc/self/exe";
/// Prefix of the temporary file in DEST (left behind only by a crash).
const TMP_PREFIX: &str = ".kubegate-install-";

pub const SYNOPSIS: &str = "usage: kubegate install-self DEST";

pub const HELP: &str = "usage: kubegate install-self DEST

Copies the running kubegate executable to DEST/kubegate (mode 0755),
creating DEST if needed; a hard link instead of a copy when DEST is on
the same filesystem and the executable is readable by everyone. The copy is written to a temporary file in DEST
and renamed into place, so DEST/kubegate is always either the old file or
the complete new one; running it again replaces the copy.

Used by a session pod's init container (`kubegate install-self
/kubegate/bin`) to bring the binary into app containers for app-runner.

Exit codes: 0 installed, 2 usage error, 1 I/O error.
";

/// `install-self [--] DEST` or `--help`.
pub fn parse(argv: &[String]) -> Result<Parsed<PathBuf>, RunnerError> {
    use lexopt::prelude::*;
    let mut dest = None;
    let mut p = lexopt::Parser::from_args(argv);
    while let Some(arg) = p.next()? {
        match arg {
            Short('h') | Long("help") => return Ok(Parsed::Help),
            Value(v) => {
                let v = v.string()?;
                if dest.is_some() {
                    return Err(RunnerError::usage(format!(
                        "unexpected argument {v:?}: one DEST folder only"
                    )));
                }
                if v.is_empty() {
                    return Err(RunnerError::usage("DEST must not be empty"));
                }
                dest = Some(PathBuf::from(v));
            }
            other => return Err(other.unexpected().into()),
        }
    }
    dest.map(Parsed::Run)
        .ok_or_else(|| RunnerError::usage("missing DEST (the folder to install into)"))
}

fn io_err(what: String, e: io::Error) -> RunnerError {
    RunnerError::new(codes::LOCAL_IO, format!("{what}: {e}"))
}

/// Copies `src` to `dest_dir/kubegate` atomically; the installed path.
pub fn install(src: &Path, dest_dir: &Path) -> Result<PathBuf, RunnerError> {
    install_with(src, dest_dir, false)
}

/// [`install`], but a hard link to `src` when `prefer_link` and it can be
/// one: same filesystem, linking allowed, and `src` readable and
/// executable by everyone (mode 0555 at least). Executables are replaced
/// by rename, never written in place (a running one cannot be: ETXTBSY),
/// so a link is as good as a copy for a binary, and costs no space: on
/// the sim every pod's volume is a folder on the same disk, and a copy of
/// a 70 MB binary per session pod filled that disk at a few hundred
/// sessions. In a real cluster the image layer and the pod's volume are
/// different filesystems: the link fails (EXDEV) and the copy is made.
pub fn install_with(
    src: &Path,
    dest_dir: &Path,
    prefer_link: bool,
) -> Result<PathBuf, RunnerError> {
    if prefer_link {
        fs::create_dir_all(dest_dir)
            .map_err(|e| io_err(format!("creating {}", dest_dir.display()), e))?;
        if let Some(target) = try_link(src, dest_dir) {
            return Ok(target);
        }
    }
    fs::create_dir_all(dest_dir)
        .map_err(|e| io_err(format!("creating {}", dest_dir.display()), e))?;
    let target = dest_dir.join(INSTALLED_NAME);
    if fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
        return Err(RunnerError::new(
            codes::LOCAL_IO,
            format!("{} is a folder", target.display()),
        ));
    }
    let mut from = File::open(src).map_err(|e| io_err(format!("reading {}", src.display()), e))?;
    let (tmp_path, mut tmp) = create_temp(dest_dir)?;
    let result = (|| {
        // std's copy uses copy_file_range/sendfile where it can.
        io::copy(&mut from, &mut tmp).map_err(|e| {
            io_err(
                format!("copying {} to {}", src.display(), tmp_path.display()),
                e,
            )
        })?;
        tmp.set_permissions(fs::Permissions::from_mode(0o755))
            .map_err(|e| io_err(format!("chmod {}", tmp_path.display()), e))?;
        tmp.sync_all()
            .map_err(|e| io_err(format!("syncing {}", tmp_path.display()), e))?;
        fs::rename(&tmp_path, &target).map_err(|e| {
            io_err(
                format!("renaming {} to {}", tmp_path.display(), target.display()),
                e,
            )
        })
    })();
    if let Err(e) = result {
        let _ = fs::remove_file(&tmp_path);
        return Err(e);
    }
    // The rename is durable once the folder is synced; a failure here
    // leaves a complete file in place, so it is only logged.
    if let Err(e) = File::open(dest_dir).and_then(|d| d.sync_all()) {
        log::warn!("syncing {}: {e}", dest_dir.display());
    }
    Ok(target)
}

/// Links `src` into `dest_dir` under its installed name (atomically: a
/// temporary link renamed into place); `None` when it cannot be linked,
/// for the caller to copy instead.
fn try_link(src: &Path, dest_dir: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let real = fs::canonicalize(src).ok()?;
    let meta = fs::metadata(&real).ok()?;
    if !meta.is_file() || meta.permissions().mode() & 0o555 != 0o555 {
        return None;
    }
    let target = dest_dir.join(INSTALLED_NAME);
    match fs::symlink_metadata(&target) {
        // Already this very file: nothing to do (a rename of one link of
        // an inode over another of the same inode does nothing at all).
        Ok(m) if m.is_file() && m.ino() == meta.ino() && m.dev() == meta.dev() => {
            return Some(target)
        }
        Ok(m) if m.is_dir() => return None,
        _ => {}
    }
    let pid = std::process::id();
    for attempt in 0..16u32 {
        let p = dest_dir.join(format!("{TMP_PREFIX}{pid}-link-{attempt}"));
        match fs::hard_link(&real, &p) {
            Ok(()) => {
                if fs::rename(&p, &target).is_ok() {
                    return Some(target);
                }
                let _ = fs::remove_file(&p);
                return None;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                log::debug!(
                    "linking {} into {}: {e}; copying",
                    real.display(),
                    dest_dir.display()
                );
                return None;
            }
        }
    }
    None
}

/// A new temporary file in `dir`, created exclusively, owner-only until
/// it is complete.
fn create_temp(dir: &Path) -> Result<(PathBuf, File), RunnerError> {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let pid = std::process::id();
    let mut last = None;
    for attempt in 0..16u32 {
        let p = dir.join(format!("{TMP_PREFIX}{pid}-{nanos:08x}-{attempt}"));
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o700)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io_err(format!("creating a file in {}", dir.display()), e)),
        }
    }
    Err(io_err(
        format!("creating a file in {}", dir.display()),
        last.unwrap_or_else(|| io::Error::other("no free name")),
    ))
}

/// `kubegate install-self …`: 0 installed, 2 usage, 1 I/O.
pub fn install_self_main(argv: &[String]) -> i32 {
    let dest = match parse(argv) {
        Ok(Parsed::Help) => {
            print!("{HELP}");
            return exit::SUCCESS;
        }
        Ok(Parsed::Run(d)) => d,
        Err(e) => {
            eprintln!("kubegate: {e}\n{SYNOPSIS}");
            return exit::USAGE;
        }
    };
    match install_with(Path::new(SELF_EXE), &dest, true) {
        Ok(path) => {
            log::info!("installed {}", path.display());
            exit::SUCCESS
        }
        Err(e) => {
            eprintln!("kubegate: {e}");
            exit::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    /// A fresh folder under the system's temp folder, removed on drop.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(tag: &str) -> TempDir {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos();
            let p = std::env::temp_dir().join(format!(
                "kubegate-install-test-{tag}-{}-{nanos}",
                std::process::id()
            ));
            fs::create_dir_all(&p).unwrap();
            TempDir(p)
        }
        fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_one_folder() {
        assert_eq!(
            parse(&args(&["/x/bin"])).unwrap(),
            Parsed::Run("/x/bin".into())
        );
        assert_eq!(
            parse(&args(&["--", "-odd"])).unwrap(),
            Parsed::Run("-odd".into())
        );
        assert_eq!(parse(&args(&["--help"])).unwrap(), Parsed::Help);
        for bad in [&[][..], &["a", "b"], &["--force", "a"], &[""]] {
            let e = parse(&args(bad)).unwrap_err();
            assert!(e.is_usage(), "{bad:?}: {e}");
        }
    }

    #[test]
    fn installs_replaces_and_leaves_no_temporary_file() {
        let t = TempDir::new("replace");
        let src = t.path().join("src");
        fs::write(&src, b"first").unwrap();
        let dest = t.path().join("a/b");
        let p = install(&src, &dest).unwrap();
        assert_eq!(p, dest.join("kubegate"));
        assert_eq!(fs::read(&p).unwrap(), b"first");
        let m = fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        let ino = m.ino();
        fs::write(&src, b"second, longer").unwrap();
        install(&src, &dest).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"second, longer");
        assert_ne!(fs::metadata(&p).unwrap().ino(), ino, "replaced by rename");
        let names: Vec<_> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["kubegate"]);
    }

    #[test]
    fn links_on_the_same_filesystem_and_copies_what_others_cannot_read() {
        let t = TempDir::new("link");
        let src = t.path().join("src");
        fs::write(&src, b"binary").unwrap();
        fs::set_permissions(&src, fs::Permissions::from_mode(0o755)).unwrap();
        let dest = t.path().join("bin");
        let p = install_with(&src, &dest, true).unwrap();
        let (a, b) = (fs::metadata(&src).unwrap(), fs::metadata(&p).unwrap());
        assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "a link, not a copy");
        // Again: still one link, no temporary name left behind.
        install_with(&src, &dest, true).unwrap();
        assert_eq!(fs::metadata(&src).unwrap().nlink(), 2);
        let names: Vec<_> = fs::read_dir(&dest)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec!["kubegate"]);
        // A new source (replaced by rename, as binaries are): a new link.
        let next = t.path().join("next");
        fs::write(&next, b"binary 2").unwrap();
        fs::set_permissions(&next, fs::Permissions::from_mode(0o755)).unwrap();
        fs::rename(&next, &src).unwrap();
        install_with(&src, &dest, true).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"binary 2");
        // Owner-only: a copy with mode 0755 (other users run it).
        fs::set_permissions(&src, fs::Permissions::from_mode(0o700)).unwrap();
        let p = install_with(&src, &t.path().join("other"), true).unwrap();
        let m = fs::metadata(&p).unwrap();
        assert_ne!(m.ino(), fs::metadata(&src).unwrap().ino());
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    }

    #[test]
    fn failures_are_io_errors_and_clean_up() {
        let t = TempDir::new("fail");
        let src = t.path().join("src");
        fs::write(&src, b"x").unwrap();
        // DEST is a file.
        let file = t.path().join("file");
        fs::write(&file, b"").unwrap();
        let e = install(&src, &file).unwrap_err();
        assert_eq!(e.code, codes::LOCAL_IO, "{e}");
        // DEST/kubegate is a folder.
        let d = t.path().join("d");
        fs::create_dir_all(d.join("kubegate")).unwrap();
        let e = install(&src, &d).unwrap_err();
        assert!(e.message.contains("is a folder"), "{e}");
        // The source is missing: nothing left behind.
        let e = install(&t.path().join("nope"), &d).unwrap_err();
        assert_eq!(e.code, codes::LOCAL_IO);
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
    }
}
