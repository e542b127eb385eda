//! Where `kubegate login` keeps its token sets (docs/cli.md, "The token
//! store"): `$XDG_STATE_HOME/kubegate/tokens/` (or
//! `~/.local/state/kubegate/tokens/`), folder 0700, one JSON file per
//! (daemon URL, issuer, client id), 0600, replaced by temp file and rename;
//! beside each, a lock file taken with `flock` by whoever refreshes it.
//!
//! A file's name is `D-K.json`: D the first 16 hex digits of SHA-256 of the
//! daemon URL, K of the issuer and client id. A client command knows only
//! its daemon URL: it takes the newest `D-*.json` (several sets for one
//! daemon exist only after its login settings changed).

use super::{local_io, CliError};
use crate::exit::codes;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// A token file larger than this is not ours.
const MAX_FILE: u64 = 256 * 1024;
/// How long a command waits for another's refresh (whose requests have a
/// 30 s deadline each).
const LOCK_WAIT: Duration = Duration::from_secs(75);

/// One stored login.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenSet {
    pub daemon_url: String,
    pub issuer: String,
    pub client_id: String,
    pub id_token: String,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
    /// The ID token's `exp` (seconds since the epoch).
    pub expires_at: u64,
    /// When this set was written (seconds since the epoch).
    #[serde(default)]
    pub obtained_at: u64,
    /// `kubegate login --issuer-ca-file`, as an absolute path: the only
    /// CA certificates trusted for the issuer, at login and at every
    /// refresh. None (and absent in files written before it existed):
    /// the web PKI roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issuer_ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenSet")
            .field("daemon_url", &self.daemon_url)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("expires_at", &self.expires_at)
            .field("issuer_ca_file", &self.issuer_ca_file)
            .finish_non_exhaustive()
    }
}

/// The daemon URL as the store keys it (no trailing slash).
pub fn normal_url(server: &str) -> &str {
    server.trim_end_matches('/')
}

fn hex16(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The token store's folder.
#[derive(Debug, Clone)]
pub struct Store {
    pub dir: PathBuf,
}

/// Where the CLI keeps its state (docs/cli.md): `$XDG_STATE_HOME`, else
/// `$HOME/.local/state` (absolute paths only); `None` without either.
pub fn state_base() -> Option<PathBuf> {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .filter(|p| p.is_absolute())
                .map(|h| h.join(".local").join("state"))
        })
}

impl Store {
    /// The folder from the environment (`XDG_STATE_HOME`, else `HOME`).
    pub fn locate() -> Result<Store, CliError> {
        let base = state_base().ok_or_else(|| {
            CliError::new(
                codes::CONFIG,
                "neither XDG_STATE_HOME nor HOME is set: no place for the token store",
            )
        })?;
        Ok(Store {
            dir: base.join("kubegate").join("tokens"),
        })
    }

    fn prefix(daemon_url: &str) -> String {
        format!("{}-", hex16(&[normal_url(daemon_url)]))
    }

    /// The file of (daemon URL, issuer, client id).
    pub fn path_for(&self, daemon_url: &str, issuer: &str, client_id: &str) -> PathBuf {
        self.dir.join(format!(
            "{}{}.json",
            Self::prefix(daemon_url),
            hex16(&[issuer, client_id])
        ))
    }

    /// The token files of a daemon URL.
    fn files_of(&self, daemon_url: &str) -> Vec<PathBuf> {
        let prefix = Self::prefix(daemon_url);
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix) && n.ends_with(".json"))
            .map(|n| self.dir.join(n))
            .take(1000)
            .collect()
    }

    /// The newest set stored for `daemon_url`, and its file.
    pub fn find(&self, daemon_url: &str) -> Result<Option<(PathBuf, TokenSet)>, CliError> {
        let mut best: Option<(PathBuf, TokenSet)> = None;
        for p in self.files_of(daemon_url) {
            let Some(set) = read(&p)? else { continue };
            if set.daemon_url != normal_url(daemon_url) {
                continue;
            }
            if best
                .as_ref()
                .is_none_or(|(_, b)| set.obtained_at >= b.obtained_at)
            {
                best = Some((p, set));
            }
        }
        Ok(best)
    }

    /// Writes `set` to its file (0600, temp file and rename); the path.
    pub fn write(&self, set: &TokenSet) -> Result<PathBuf, CliError> {
        use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)
            .map_err(|e| local_io(&format!("creating {}", self.dir.display()), e))?;
        // An existing folder keeps its mode from before: tighten it.
        std::fs::set_permissions(&self.dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| local_io(&format!("chmod {}", self.dir.display()), e))?;
        let path = self.path_for(&set.daemon_url, &set.issuer, &set.client_id);
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let bytes =
            serde_json::to_vec_pretty(set).map_err(|e| local_io("encoding the token set", e))?;
        let what = format!("writing {}", path.display());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| local_io(&what, e))?;
        f.write_all(&bytes)
            .and_then(|()| f.sync_all())
            .map_err(|e| local_io(&what, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            local_io(&what, e)
        })?;
        Ok(path)
    }

    /// Removes every set of `daemon_url` (and their lock files); how many.
    pub fn remove(&self, daemon_url: &str) -> Result<usize, CliError> {
        let mut n = 0;
        for p in self.files_of(daemon_url) {
            match std::fs::remove_file(&p) {
                Ok(()) => n += 1,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(local_io(&format!("removing {}", p.display()), e)),
            }
            let _ = std::fs::remove_file(lock_path(&p));
        }
        Ok(n)
    }
}

/// Reads one token file; `None` when it is gone.
pub fn read(path: &Path) -> Result<Option<TokenSet>, CliError> {
    let f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(local_io(&format!("reading {}", path.display()), e)),
    };
    let mut raw = Vec::new();
    f.take(MAX_FILE + 1)
        .read_to_end(&mut raw)
        .map_err(|e| local_io(&format!("reading {}", path.display()), e))?;
    if raw.len() as u64 > MAX_FILE {
        return Err(CliError::new(
            codes::CONFIG,
            format!("{}: larger than {MAX_FILE} bytes", path.display()),
        ));
    }
    serde_json::from_slice(&raw).map(Some).map_err(|e| {
        CliError::new(
            codes::CONFIG,
            format!(
                "{}: not a token set ({e}); kubegate logout removes it",
                path.display()
            ),
        )
    })
}

/// The lock file beside a token file.
pub fn lock_path(token_file: &Path) -> PathBuf {
    token_file.with_extension("lock")
}

/// An exclusive `flock` on a token file's lock file, released on drop
/// (and by the kernel if we die).
pub struct Lock {
    _file: std::fs::File,
}

impl Lock {
    /// Waits (at most [`LOCK_WAIT`]) for the lock of `token_file`.
    pub fn take(token_file: &Path) -> Result<Lock, CliError> {
        use rustix::fs::{flock, FlockOperation};
        use std::os::unix::fs::OpenOptionsExt;
        let path = lock_path(token_file);
        let what = format!("locking {}", path.display());
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&path)
            .map_err(|e| local_io(&what, e))?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            match flock(&file, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(Lock { _file: file }),
                Err(rustix::io::Errno::WOULDBLOCK | rustix::io::Errno::INTR) => {}
                Err(e) => return Err(local_io(&what, e)),
            }
            if Instant::now() >= deadline {
                return Err(local_io(
                    &what,
                    "another kubegate has held it for over 75 s",
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn set(daemon: &str, issuer: &str, at: u64) -> TokenSet {
        TokenSet {
            daemon_url: daemon.into(),
            issuer: issuer.into(),
            client_id: "kubegate".into(),
            id_token: format!("id-{daemon}-{issuer}"),
            refresh_token: Some("r".into()),
            access_token: None,
            expires_at: 1,
            obtained_at: at,
            issuer_ca_file: None,
        }
    }

    fn temp_store(name: &str) -> Store {
        let dir = std::env::temp_dir().join(format!("kubegate-ts-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Store {
            dir: dir.join("tokens"),
        }
    }

    #[test]
    fn keyed_by_daemon_issuer_and_client_files_0600_in_0700() {
        let s = temp_store("keys");
        let a = s.path_for("https://a", "https://idp", "kubegate");
        assert_eq!(a, s.path_for("https://a/", "https://idp", "kubegate"));
        assert_ne!(a, s.path_for("https://b", "https://idp", "kubegate"));
        assert_ne!(a, s.path_for("https://a", "https://idp2", "kubegate"));
        assert_ne!(a, s.path_for("https://a", "https://idp", "other"));
        // The separator keeps ("ab", "c") and ("a", "bc") apart.
        assert_ne!(
            s.path_for("https://a", "ab", "c"),
            s.path_for("https://a", "a", "bc")
        );
        let p = s.write(&set("https://a", "https://idp", 1)).unwrap();
        s.write(&set("https://b", "https://idp", 1)).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), 0o600);
        assert_eq!(mode(&s.dir), 0o700);
        let (_, got) = s.find("https://a/").unwrap().unwrap();
        assert_eq!(got.id_token, "id-https://a-https://idp");
        let (_, got) = s.find("https://b").unwrap().unwrap();
        assert_eq!(got.id_token, "id-https://b-https://idp");
        assert!(s.find("https://c").unwrap().is_none());
        assert!(!format!("{got:?}").contains("id-https"));
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }

    #[test]
    fn the_newest_set_of_a_daemon_wins_and_remove_takes_all() {
        let s = temp_store("newest");
        s.write(&set("https://a", "https://old", 10)).unwrap();
        s.write(&set("https://a", "https://new", 20)).unwrap();
        s.write(&set("https://b", "https://x", 5)).unwrap();
        let (_, got) = s.find("https://a").unwrap().unwrap();
        assert_eq!(got.issuer, "https://new");
        let p = s.path_for("https://a", "https://new", "kubegate");
        drop(Lock::take(&p).unwrap());
        assert_eq!(s.remove("https://a").unwrap(), 2);
        assert!(s.find("https://a").unwrap().is_none());
        assert!(!lock_path(&p).exists());
        assert!(s.find("https://b").unwrap().is_some());
        assert_eq!(s.remove("https://a").unwrap(), 0);
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }

    #[test]
    fn the_issuer_ca_file_is_kept_and_older_files_without_it_still_load() {
        let s = temp_store("issuer-ca");
        let mut with = set("https://a", "https://idp", 1);
        with.issuer_ca_file = Some(PathBuf::from("/etc/kubegate/idp-ca.pem"));
        let p = s.write(&with).unwrap();
        let raw = std::fs::read_to_string(&p).unwrap();
        assert!(
            raw.contains("\"issuer_ca_file\": \"/etc/kubegate/idp-ca.pem\""),
            "{raw}"
        );
        assert_eq!(read(&p).unwrap().unwrap(), with);
        // Without one, the field is not written at all: the file is what
        // an older kubegate wrote and reads.
        let p = s.write(&set("https://b", "https://idp", 1)).unwrap();
        assert!(!std::fs::read_to_string(&p)
            .unwrap()
            .contains("issuer_ca_file"));
        // A file written before the field existed.
        let old = s.dir.join("old.json");
        std::fs::write(
            &old,
            r#"{"daemon_url":"https://c","issuer":"https://idp","client_id":"kubegate","id_token":"i","refresh_token":"r","access_token":null,"expires_at":5,"obtained_at":4}"#,
        )
        .unwrap();
        let got = read(&old).unwrap().unwrap();
        assert_eq!((got.issuer_ca_file, got.expires_at), (None, 5));
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }

    #[test]
    fn a_broken_file_is_a_config_error_naming_logout() {
        let s = temp_store("broken");
        let p = s.write(&set("https://a", "https://idp", 1)).unwrap();
        std::fs::write(&p, "{not json").unwrap();
        let e = s.find("https://a").unwrap_err();
        assert!(e.is_config() && e.message.contains("logout"), "{e}");
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }

    #[test]
    fn the_lock_is_exclusive_across_opens() {
        use rustix::fs::{flock, FlockOperation};
        let s = temp_store("lock");
        std::fs::create_dir_all(&s.dir).unwrap();
        let p = s.dir.join("x.json");
        let held = Lock::take(&p).unwrap();
        let other = std::fs::File::open(lock_path(&p)).unwrap();
        assert!(flock(&other, FlockOperation::NonBlockingLockExclusive).is_err());
        drop(held);
        assert!(flock(&other, FlockOperation::NonBlockingLockExclusive).is_ok());
        let _ = std::fs::remove_dir_all(s.dir.parent().unwrap());
    }
}
