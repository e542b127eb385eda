//! Writing a file whole or not at all, for the whole crate: the bytes go
//! to a temporary file in the same folder (same file system, so the rename
//! is atomic), created with the mode asked for (never wider, whatever the
//! umask leaves), synced to disk, then renamed over the target. A reader
//! sees the old file or the new one, never a part; a crash leaves at most
//! the temporary file (`.NAME.tmp.PID`) beside it.
//!
//! Out of scope: creating the folder (callers choose its mode) and syncing
//! the folder itself (no caller needs the rename to survive a power cut).

use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The temporary file beside `path` that [`write_atomic`] writes first.
pub fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".tmp.{}", std::process::id()));
    Ok(path.with_file_name(tmp))
}

/// Writes `data` to `path` through a temporary file in the same folder:
/// created with `mode` (e.g. 0o600), synced, renamed over `path`. The
/// folder must exist. On an error the temporary file is removed.
pub fn write_atomic(path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
    let tmp = temp_path(path)?;
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(mode)
            .open(&tmp)?;
        // A file left by an earlier crash keeps its old mode: set it.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kubegate-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn writes_whole_files_with_their_mode_and_no_leftover() {
        let d = dir("whole");
        let p = d.join("state.json");
        write_atomic(&p, b"one", 0o600).unwrap();
        write_atomic(&p, b"two", 0o600).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
        assert_eq!(names.len(), 1, "no temporary file left");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_missing_folder_is_an_error_and_leaves_nothing() {
        let d = dir("missing");
        let p = d.join("no").join("such.json");
        assert!(write_atomic(&p, b"x", 0o600).is_err());
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn the_temporary_file_is_a_hidden_sibling() {
        let t = temp_path(Path::new("/a/b/c.json")).unwrap();
        assert_eq!(t.parent(), Some(Path::new("/a/b")));
        assert!(t
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with(".c.json.tmp."));
        assert!(temp_path(Path::new("/")).is_err());
    }
}
