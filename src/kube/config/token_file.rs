//! [`TokenFile`]: a bearer token read from a file (kubeconfig `tokenFile`,
//! the in-cluster service-account token). Service-account tokens are
//! rotated by the kubelet (hourly by default), so the file is re-read when
//! the cached value is older than [`TOKEN_FILE_MAX_AGE`] and right after
//! `invalidate()` (the server said 401). Reading a small file under a lock
//! is cheap; `bearer()` is a clone of the cached string otherwise.

use crate::kube::connection::{Credentials, CredentialsError};
use parking_lot::Mutex;
use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a read token is used before the file is read again.
pub const TOKEN_FILE_MAX_AGE: Duration = Duration::from_secs(60);

/// Tokens are a few KiB at most (a JWT); anything larger is not a token.
const MAX_TOKEN_BYTES: u64 = 1 << 20;

struct State {
    token: Option<String>,
    read_at: Option<Instant>,
}

pub struct TokenFile {
    path: PathBuf,
    max_age: Duration,
    state: Mutex<State>,
}

impl fmt::Debug for TokenFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenFile")
            .field("path", &self.path)
            .field("max_age", &self.max_age)
            .finish_non_exhaustive()
    }
}

impl TokenFile {
    pub fn new(path: impl Into<PathBuf>) -> TokenFile {
        TokenFile::with_max_age(path, TOKEN_FILE_MAX_AGE)
    }

    pub fn with_max_age(path: impl Into<PathBuf>, max_age: Duration) -> TokenFile {
        TokenFile {
            path: path.into(),
            max_age,
            state: Mutex::new(State {
                token: None,
                read_at: None,
            }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file now (a load-time check that it is there and usable).
    pub fn prime(&self) -> Result<(), CredentialsError> {
        self.bearer().map(|_| ())
    }

    fn read(&self) -> Result<String, CredentialsError> {
        let err = |m: String| CredentialsError(format!("token file {}: {m}", self.path.display()));
        let mut buf = Vec::new();
        std::fs::File::open(&self.path)
            .and_then(|f| f.take(MAX_TOKEN_BYTES + 1).read_to_end(&mut buf))
            .map_err(|e| err(format!("cannot read: {e}")))?;
        if buf.len() as u64 > MAX_TOKEN_BYTES {
            return Err(err("larger than 1 MiB: not a token".into()));
        }
        let s = String::from_utf8(buf).map_err(|_| err("not UTF-8 text".into()))?;
        let t = s.trim();
        if t.is_empty() {
            return Err(err("is empty".into()));
        }
        if !super::kubeconfig::valid_token(t) {
            // A header value cannot hold these; say so instead of sending it.
            return Err(err("holds more than one line or word: not a token".into()));
        }
        Ok(t.to_string())
    }
}

impl Credentials for TokenFile {
    fn bearer(&self) -> Result<Option<String>, CredentialsError> {
        let mut st = self.state.lock();
        if let (Some(t), Some(at)) = (&st.token, st.read_at) {
            if at.elapsed() < self.max_age {
                return Ok(Some(t.clone()));
            }
        }
        match self.read() {
            Ok(t) => {
                st.token = Some(t.clone());
                st.read_at = Some(Instant::now());
                Ok(Some(t))
            }
            Err(e) => match st.token.clone() {
                // A periodic re-read failed (e.g. mid-rotation): keep the
                // last good token until the server rejects it, and try
                // again after another period. After a 401 there is no
                // cached token and the error surfaces.
                Some(t) => {
                    log::warn!("{e}; using the token read before");
                    st.read_at = Some(Instant::now());
                    Ok(Some(t))
                }
                None => Err(e),
            },
        }
    }

    fn invalidate(&self) {
        let mut st = self.state.lock();
        st.token = None;
        st.read_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(tag: &str, contents: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("kubegate-tokenfile-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let p = dir.join("token");
        std::fs::write(&p, contents).expect("write");
        p
    }

    #[test]
    fn rereads_after_max_age_and_invalidate() {
        let p = temp_file("age", "one\n");
        let tf = TokenFile::with_max_age(&p, Duration::ZERO);
        assert_eq!(tf.bearer().expect("read").as_deref(), Some("one"));
        std::fs::write(&p, "two").expect("rewrite");
        // max_age zero: every call re-reads.
        assert_eq!(tf.bearer().expect("read").as_deref(), Some("two"));

        let cached = TokenFile::new(&p);
        assert_eq!(cached.bearer().expect("read").as_deref(), Some("two"));
        std::fs::write(&p, "three").expect("rewrite");
        assert_eq!(cached.bearer().expect("cached").as_deref(), Some("two"));
        cached.invalidate();
        assert_eq!(cached.bearer().expect("reread").as_deref(), Some("three"));

        // A failing periodic re-read keeps the last token; after a 401 the
        // error shows, naming the file.
        std::fs::remove_file(&p).expect("rm");
        assert_eq!(tf.bearer().expect("stale").as_deref(), Some("two"));
        tf.invalidate();
        let e = tf.bearer().expect_err("gone");
        assert!(e.0.contains(&p.display().to_string()), "{e}");
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }

    #[test]
    fn empty_and_odd_files() {
        let p = temp_file("empty", " \n");
        let e = TokenFile::new(&p).bearer().expect_err("empty");
        assert!(e.0.ends_with("is empty"), "{e}");
        std::fs::write(&p, "a b").expect("write");
        assert!(TokenFile::new(&p).bearer().is_err());
        assert!(!format!("{:?}", TokenFile::new(&p)).contains("a b"));
        let _ = std::fs::remove_dir_all(p.parent().expect("dir"));
    }
}
