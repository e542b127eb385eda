//! The workspace path rules, sans-IO (docs/agent.md, "Paths"): a path as a
//! client sends it becomes either a normalised relative path (`a/b/c.txt`,
//! `/`-separated, no `.`/`..`/empty components) or a [`WorkspacePathError`] naming
//! the path and the reason. The filesystem half of the rules (no existing
//! component may be a symlink) is `agent::fs::Workspace::inspect`, on the
//! server side of the protocol.
//!
//! Also here, because they are rules on strings too: which names the tree
//! leaves out, and which combinations of writes and deletes one apply may
//! not contain.

use std::collections::HashSet;
use std::fmt;

/// Names left out of the tree and the snapshot at any depth (files or
/// folders): version control, package folders, and runtime caches.
pub const EXCLUDED: &[&str] = &[".git", "node_modules", "__pycache__", ".kubegate"];

/// Prefix of the agent's temporary files (written beside their target, then
/// renamed over it). Never listed; no client path may use it.
pub const TEMP_PREFIX: &str = ".kubegate-tmp-";

/// Longest path accepted, in bytes (Linux's PATH_MAX).
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single component, in bytes (Linux's NAME_MAX).
pub const MAX_NAME_BYTES: usize = 255;
/// Deepest path accepted, in components. Also bounds the recursion of the
/// tree walk and of folder deletes.
pub const MAX_DEPTH: usize = 128;

/// A path the rules refuse: the path as sent and why. Made by [`normalize`]
/// and [`check_plan`] here and by the filesystem half of the rules
/// (`agent::fs`), for any path a client sends the agent or the daemon's
/// workspace routes.
///
/// Not the start request's
/// [`CanonicalPathError`](crate::session::spec::CanonicalPathError): the
/// session spec does not normalise, it requires its entry and bundle paths
/// to be in the normal form [`normalize`] returns, with the same length
/// limits ([`MAX_PATH_BYTES`], [`MAX_NAME_BYTES`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspacePathError {
    pub path: String,
    pub reason: String,
}

impl WorkspacePathError {
    pub fn new(path: &str, reason: impl Into<String>) -> WorkspacePathError {
        WorkspacePathError {
            path: path.to_string(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for WorkspacePathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "path {:?}: {}", self.path, self.reason)
    }
}

impl std::error::Error for WorkspacePathError {}

/// Normalises a client path: `/`-separated and relative to the workspace
/// root; empty and `.` components are dropped, `..` removes the component
/// before it. Refused: empty, NUL, backslash, absolute, `..` above the
/// root, the root itself, components over 255 bytes, paths over 4096 bytes
/// or 128 components, and the agent's temporary-file prefix.
pub fn normalize(raw: &str) -> Result<String, WorkspacePathError> {
    let err = |reason: &str| Err(WorkspacePathError::new(raw, reason));
    if raw.is_empty() {
        return err("empty path");
    }
    if raw.contains('\0') {
        return err("contains a NUL byte");
    }
    if raw.len() > MAX_PATH_BYTES {
        return err("longer than 4096 bytes");
    }
    if raw.starts_with('/') {
        return err("absolute path (paths are relative to the workspace root)");
    }
    if raw.contains('\\') {
        // A Windows editor's `src\main.js` would otherwise become a file
        // whose name holds a backslash.
        return err("contains a backslash (separate components with /)");
    }
    let mut out: Vec<&str> = Vec::new();
    for c in raw.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                if out.pop().is_none() {
                    return err("escapes the workspace root through ..");
                }
            }
            name => {
                if name.len() > MAX_NAME_BYTES {
                    return err("a component is longer than 255 bytes");
                }
                if name.starts_with(TEMP_PREFIX) {
                    return err("names starting with .kubegate-tmp- are reserved for the agent");
                }
                out.push(name);
            }
        }
    }
    if out.is_empty() {
        return err("names the workspace root itself");
    }
    if out.len() > MAX_DEPTH {
        return err("deeper than 128 components");
    }
    Ok(out.join("/"))
}

/// Whether a file or folder name is left out of the tree.
pub fn is_excluded(name: &str) -> bool {
    EXCLUDED.contains(&name)
}

/// Whether a name is one of the agent's temporary files.
pub fn is_temp(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
}

/// The proper ancestors of a normalised path: `a/b/c` -> `a`, `a/b`.
fn ancestors(p: &str) -> impl Iterator<Item = &str> {
    p.match_indices('/').map(move |(i, _)| &p[..i])
}

/// Whether `p` is `dir` or lies under it (normalised paths).
pub fn is_within(p: &str, dir: &str) -> bool {
    p == dir || (p.starts_with(dir) && p.as_bytes().get(dir.len()) == Some(&b'/'))
}

/// The rules between the paths of ONE apply (all normalised): a path
/// written twice, a path written and deleted, a write under another
/// written path (it would have to be a file and a folder), and a write
/// under a deleted path or a delete under a written one are refused, so
/// the result never depends on the order of the operations. Deleting the
/// same path twice, or a path and something under it, is harmless.
pub fn check_plan(writes: &[String], deletes: &[String]) -> Result<(), WorkspacePathError> {
    let mut w: HashSet<&str> = HashSet::with_capacity(writes.len());
    for p in writes {
        if !w.insert(p.as_str()) {
            return Err(WorkspacePathError::new(p, "written twice in one request"));
        }
    }
    let d: HashSet<&str> = deletes.iter().map(String::as_str).collect();
    for p in writes {
        if d.contains(p.as_str()) {
            return Err(WorkspacePathError::new(
                p,
                "both written and deleted in one request",
            ));
        }
        for a in ancestors(p) {
            if w.contains(a) {
                return Err(WorkspacePathError::new(
                    p,
                    format!("written under {a:?}, which this request writes as a file"),
                ));
            }
            if d.contains(a) {
                return Err(WorkspacePathError::new(
                    p,
                    format!("written under {a:?}, which this request deletes (use two requests)"),
                ));
            }
        }
    }
    for p in deletes {
        for a in ancestors(p) {
            if w.contains(a) {
                return Err(WorkspacePathError::new(
                    p,
                    format!("deleted under {a:?}, which this request writes as a file"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(raw: &str) -> String {
        normalize(raw).unwrap_or_else(|e| panic!("{raw:?}: {e}"))
    }

    fn bad(raw: &str) -> String {
        match normalize(raw) {
            Ok(p) => panic!("{raw:?} accepted as {p:?}"),
            Err(e) => {
                assert_eq!(e.path, raw);
                e.reason
            }
        }
    }

    #[test]
    fn normalises_relative_paths() {
        assert_eq!(ok("a.txt"), "a.txt");
        assert_eq!(ok("src/main.rs"), "src/main.rs");
        assert_eq!(ok("./src//main.rs/"), "src/main.rs");
        assert_eq!(ok("a/./b/../c"), "a/c");
        assert_eq!(ok("a/b/../../c"), "c");
        assert_eq!(ok("..a/b.."), "..a/b..");
        assert_eq!(ok(".hidden"), ".hidden");
        assert_eq!(ok("with space/é.txt"), "with space/é.txt");
        assert_eq!(ok(&"x".repeat(255)), "x".repeat(255));
    }

    #[test]
    fn refuses_what_leaves_or_names_the_root() {
        assert!(bad("").contains("empty"));
        assert!(bad("/etc/passwd").contains("absolute"));
        assert!(bad("//x").contains("absolute"));
        assert!(bad("..").contains("escapes"));
        assert!(bad("../x").contains("escapes"));
        assert!(bad("a/../../x").contains("escapes"));
        assert!(bad("a/b/../../..").contains("escapes"));
        assert!(bad(".").contains("root"));
        assert!(bad("./").contains("root"));
        assert!(bad("a/..").contains("root"));
        assert!(bad("a\0b").contains("NUL"));
        assert!(bad("a\\..\\b").contains("backslash"));
    }

    #[test]
    fn refuses_oversized_and_reserved_names() {
        assert!(bad(&"x".repeat(256)).contains("255"));
        assert!(bad(&"a/".repeat(2049)).contains("4096"));
        assert!(bad(&"a/".repeat(129)).contains("128"));
        assert_eq!(ok(&"a/".repeat(128)), vec!["a"; 128].join("/"));
        assert!(bad("dir/.kubegate-tmp-1-2").contains("reserved"));
    }

    #[test]
    fn excluded_and_temp_names() {
        for n in [".git", "node_modules", "__pycache__", ".kubegate"] {
            assert!(is_excluded(n), "{n}");
        }
        assert!(!is_excluded(".gitignore"));
        assert!(!is_excluded("src"));
        assert!(is_temp(".kubegate-tmp-9-1"));
        assert!(!is_temp(".kubegate"));
    }

    #[test]
    fn within() {
        assert!(is_within("a", "a"));
        assert!(is_within("a/b", "a"));
        assert!(!is_within("ab", "a"));
        assert!(!is_within("a", "a/b"));
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn plan_rules() {
        assert!(check_plan(&s(&["a", "b/c", "b/d"]), &s(&["e", "e/f", "e"])).is_ok());
        assert!(check_plan(&[], &[]).is_ok());
        let e = check_plan(&s(&["a", "a"]), &[]).unwrap_err();
        assert!(e.reason.contains("twice"));
        let e = check_plan(&s(&["a"]), &s(&["a"])).unwrap_err();
        assert!(e.reason.contains("both"));
        let e = check_plan(&s(&["a/b", "a"]), &[]).unwrap_err();
        assert_eq!(e.path, "a/b");
        let e = check_plan(&s(&["a/b/c"]), &s(&["a"])).unwrap_err();
        assert!(e.reason.contains("deletes"));
        let e = check_plan(&s(&["a"]), &s(&["a/b"])).unwrap_err();
        assert_eq!(e.path, "a/b");
        // Siblings sharing a prefix are not nested.
        assert!(check_plan(&s(&["ab/c"]), &s(&["a"])).is_ok());
    }
}
