//! The repository stands alone: every document or repository path a file
//! names exists, and nothing names a page outside the repository.
//!
//! Reads every text file git knows of (tracked, or new and not ignored;
//! `tests/fixtures/` data and `target/` are skipped) and checks, line by
//! line:
//!
//! - a reference to a `*.md` page, or a path under `docs/`, `scripts/`,
//!   `src/`, `tests/` or `examples/`, names something that exists relative
//!   to the repository root (a markdown link `[text](target)` in a `.md`
//!   file resolves relative to its page, as GitHub does);
//! - a `#anchor` after a `.md` page names a heading of that page (GitHub's
//!   slugs: lower case, spaces to `-`, punctuation but `-` and `_` dropped,
//!   `-1`, `-2`… for repeats);
//! - no reference leaves the repository: the `shared` folder beside it (the
//!   original specification and seeds), a `spec/…` page, or a page name
//!   that is not a repository path (the specification's page names, and
//!   the pages of `docs/` written without their folder).
//!
//! In Rust files, only comments are held to the first two rules: string
//! literals in code are data (the workspace paths that tests write);
//! the third rule holds everywhere.
//!
//! Every offender is printed as `file:line: reference: why`, not only the
//! first. The matcher is a hand-written scanner (no regex crate in the
//! dependency set): runs of path characters, classified by their shape.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Characters a path reference is made of.
fn is_path_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '/' | '-' | '~')
}

/// Prefixes of the repository's own folders: a run starting with one is a
/// repository path.
const REPO_DIRS: [&str; 5] = ["docs/", "scripts/", "src/", "tests/", "examples/"];

/// The folder beside the repository that held the original specification.
fn shared_forms() -> [String; 3] {
    let up = "..";
    let shared = "shared";
    [
        format!("{up}/{shared}"),
        format!("{shared}/spec"),
        format!("{shared}/seeds"),
    ]
}

/// The page names of the original specification (outside the repository).
const SPEC_PAGES: [&str; 10] = [
    "contract",
    "crates",
    "kubernetes",
    "quality",
    "front-door",
    "design",
    "exec",
    "sessions",
    "sim",
    "README",
];

/// Whether a reference leaves the repository whatever the folders hold.
fn is_outside(path: &str) -> bool {
    shared_forms().iter().any(|f| path.contains(f.as_str()))
        || (path.starts_with("spec/") && path.contains(".md"))
}

/// Whether a bare page name (no folder) is one of the specification's.
fn is_bare_spec_page(path: &str) -> bool {
    !path.contains('/')
        && path
            .strip_suffix(".md")
            .is_some_and(|n| SPEC_PAGES.contains(&n) && n != "README")
}

/// What a line refers to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Ref {
    /// As written (anchor excluded).
    path: String,
    /// The `#anchor` after a `.md` page, if any.
    anchor: Option<String>,
    /// The target of a markdown link (`[text](path)`): relative to the page.
    link: bool,
}

/// The references of one line. `markdown`: the line is from a `.md` file
/// (its link targets resolve relative to the page).
fn refs_in_line(line: &str, markdown: bool) -> Vec<Ref> {
    let chars: Vec<(usize, char)> = line.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_path_char(chars[i].1) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_path_char(chars[i].1) {
            i += 1;
        }
        let (b0, _) = chars[start];
        let b1 = chars.get(i).map_or(line.len(), |&(b, _)| b);
        let before = line[..b0].chars().next_back();
        let after = line[b1..].chars().next();
        let link = markdown && line[..b0].ends_with("](");
        // A pattern, not a path: `tests/bench_*.rs`, `src/{a,b}`,
        // `docs/<page>`, `src/…`.
        let pattern = matches!(after, Some('*' | '{' | '<' | '…' | '$' | '['))
            || matches!(before, Some('*' | '}' | '>' | '$' | '\\' | '@' | ':' | '%'));
        let mut path = line[b0..b1].to_string();
        while path.ends_with('.') && !path.ends_with("..") {
            path.pop();
        }
        let mut anchor = None;
        if path.ends_with(".md") && after == Some('#') {
            let rest = &line[b1 + 1..];
            let a: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || matches!(c, '-' | '_'))
                .collect();
            if !a.is_empty() {
                i = chars.partition_point(|&(b, _)| b < b1 + 1 + a.len());
                anchor = Some(a);
            }
        }
        // Absolute paths (`/workspace/x`, `/etc/kubegate`) are not the
        // repository's; a markdown link's text is not a reference (its
        // target is).
        let label = markdown && line[b1..].starts_with("](");
        if pattern || label || path.starts_with('/') {
            continue;
        }
        let is_md = path.ends_with(".md") && path.len() > 3 && !path.ends_with("/.md");
        let outside = is_outside(&path);
        let repo = REPO_DIRS.iter().any(|d| path.starts_with(d));
        if is_md || outside || repo || (link && !path.contains("://")) {
            if link && (line[b1..].starts_with("://") || path.starts_with("mailto")) {
                continue;
            }
            out.push(Ref { path, anchor, link });
        }
    }
    out
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c.to_lowercase().collect::<String>())
            } else if c == ' ' {
                Some("-".into())
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a markdown page (headings outside code fences).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = BTreeSet::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let Some(h) = line.strip_prefix('#') else {
            continue;
        };
        let h = h.trim_start_matches('#');
        if !h.starts_with(' ') {
            continue;
        }
        let s = slug(h);
        let n = seen.entry(s.clone()).or_insert(0);
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// Why a reference is wrong, if it is. `file` is the referring file,
/// relative to `root`.
fn problem(
    root: &Path,
    file: &str,
    r: &Ref,
    anchor_cache: &mut HashMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    let p = r.path.as_str();
    if is_outside(p) {
        return Some("names a page outside the repository".into());
    }
    let target = if r.link {
        let base = Path::new(file).parent().unwrap_or(Path::new(""));
        normalize(&base.join(p))
    } else {
        normalize(Path::new(p))
    };
    let Some(target) = target else {
        return Some("leaves the repository".into());
    };
    let full = root.join(&target);
    if !full.exists() {
        return Some(if !p.contains('/') && p.ends_with(".md") {
            "a page name that is not a repository path (name it from the root: docs/…)".into()
        } else {
            format!("{} does not exist", target.display())
        });
    }
    if let Some(a) = &r.anchor {
        let set = anchor_cache
            .entry(full.clone())
            .or_insert_with(|| anchors(&std::fs::read_to_string(&full).unwrap_or_default()));
        if !set.contains(a) {
            return Some(format!("#{a} is not a heading of {}", target.display()));
        }
    }
    None
}

/// `a/./b/../c` as `a/c`; `None` when it climbs above the root.
fn normalize(p: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            std::path::Component::Normal(s) => out.push(s),
            _ => return None,
        }
    }
    Some(out)
}

/// Every text file of the repository, relative to its root.
fn repo_files(root: &Path) -> Vec<String> {
    let listed = Command::new("git")
        .args(["ls-files", "--cached", "--others", "--exclude-standard"])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
    let mut files: Vec<String> = match listed {
        Some(text) => text.lines().map(str::to_string).collect(),
        None => {
            let mut v = Vec::new();
            for top in ["src", "tests", "docs", "scripts", ".ci", "examples", "fuzz"] {
                walk(root, &root.join(top), &mut v);
            }
            for f in [
                "README.md",
                "Cargo.toml",
                "config.example.toml",
                "clippy.toml",
            ] {
                v.push(f.to_string());
            }
            v
        }
    };
    files.retain(|f| {
        !f.starts_with("tests/fixtures/")
            && !f.starts_with("target/")
            && !f.contains("/target/")
            && f != "Cargo.lock"
            && root.join(f).is_file()
    });
    files.sort();
    files.dedup();
    files
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(root, &p, out);
        } else if let Ok(rel) = p.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// A Rust line split into its code and its `//` comment (a `//` inside a
/// string literal is not a comment; raw strings and char literals holding
/// `"` are rare enough to ignore).
fn split_rust(line: &str) -> (&str, &str) {
    let b = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'/' if !in_str && b.get(i + 1) == Some(&b'/') => return (&line[..i], &line[i..]),
            _ => {}
        }
        i += 1;
    }
    (line, "")
}

/// The references of a line of `file` that need checking: all of them,
/// except in the code part of a Rust line, where only those that leave the
/// repository count.
fn line_refs(file: &str, line: &str) -> Vec<Ref> {
    if !file.ends_with(".rs") {
        return refs_in_line(line, file.ends_with(".md"));
    }
    let (code, comment) = split_rust(line);
    let mut out: Vec<Ref> = refs_in_line(code, false)
        .into_iter()
        .filter(|r| is_outside(&r.path) || is_bare_spec_page(&r.path))
        .collect();
    out.extend(refs_in_line(comment, false));
    out
}

/// Every offender of the repository, as `file:line: reference: why`.
fn offenders(root: &Path) -> Vec<String> {
    let mut cache = HashMap::new();
    let mut out = Vec::new();
    for file in repo_files(root) {
        let Ok(text) = std::fs::read_to_string(root.join(&file)) else {
            continue; // not UTF-8: not text
        };
        for (n, line) in text.lines().enumerate() {
            for r in line_refs(&file, line) {
                if let Some(why) = problem(root, &file, &r, &mut cache) {
                    let shown = match &r.anchor {
                        Some(a) => format!("{}#{a}", r.path),
                        None => r.path.clone(),
                    };
                    out.push(format!("{file}:{}: {shown}: {why}", n + 1));
                }
            }
        }
    }
    out
}

#[test]
fn every_reference_names_a_path_of_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad = offenders(root);
    assert!(
        bad.is_empty(),
        "{} references name nothing in the repository:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

// The outside names below are assembled at run time, so that this file
// does not name outside pages itself.
const C: &str = "contract";
const K: &str = "kubernetes";
const S: &str = "sim";

fn up_spec(page: &str) -> String {
    format!("{}/{}", shared_forms()[0], format_args!("spec/{page}.md"))
}

fn paths(line: &str, markdown: bool) -> Vec<String> {
    refs_in_line(line, markdown)
        .into_iter()
        .map(|r| match r.anchor {
            Some(a) => format!("{}#{a}", r.path),
            None => r.path,
        })
        .collect()
}

#[test]
fn the_matcher_finds_page_and_path_references() {
    assert_eq!(
        paths(&format!("//! Exit codes ({C}.md): 0 success"), false),
        [format!("{C}.md")]
    );
    assert_eq!(
        paths(
            &format!("wire facts ({K}.md §4), and docs/api.md#exec."),
            false
        ),
        [format!("{K}.md"), "docs/api.md#exec".to_string()]
    );
    let spec = up_spec("sim");
    assert_eq!(
        paths(&format!("Spec: {spec}. Uses only `kube`"), false),
        [spec]
    );
    assert_eq!(
        paths("see [the API](api.md#exec) and [x](../README.md)", true),
        ["api.md#exec", "../README.md"]
    );
    assert_eq!(
        paths("code: `src/session/machine.rs`, `tests/restart.rs`", false),
        ["src/session/machine.rs", "tests/restart.rs"]
    );
    let links = refs_in_line(
        &format!("[a]({S}.md) and {S}.md; [{S}.md]({S}.md#faults)"),
        true,
    );
    assert!(
        links[0].link && !links[1].link && links[2].link,
        "{links:?}"
    );
    assert_eq!(links.len(), 3, "{links:?}");
    assert_eq!(links[2].anchor.as_deref(), Some("faults"));
}

#[test]
fn the_matcher_leaves_other_text_alone() {
    for line in [
        r#"new.pointer("/spec/selector") != old.pointer("/spec/selector")"#,
        r#"format!("{}/tests/fixtures/kube/{rel}", env!("CARGO_MANIFEST_DIR"))"#,
        "GET http://h/v1/sessions/abc/ports/8080/docs/x.md HTTP/1.1",
        "the bench files tests/bench_*.rs and `src/…`",
        "crate::session::machine::Session; issue 6 step 4",
        "see [the spec](https://example.com/spec/design.md)",
        "a *.md glob; the pod's /workspace/README.md",
        "Go's zero value of a kind's spec/status",
    ] {
        assert_eq!(paths(line, true), Vec::<String>::new(), "{line}");
    }
}

#[test]
fn rust_code_is_data_and_comments_are_references() {
    let refs = |line: &str| {
        line_refs("src/x.rs", line)
            .into_iter()
            .map(|r| r.path)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        refs(r#"    assert_eq!(ok("src/main.js"), "src/main.js");"#),
        Vec::<String>::new()
    );
    assert_eq!(
        refs(r#"let u = "http://h/x"; // see docs/api.md"#),
        ["docs/api.md"]
    );
    assert_eq!(
        refs(&format!(r#"let m = "read {C}.md";"#)),
        [format!("{C}.md")]
    );
    assert_eq!(
        refs(&format!("/// Spec: {}", up_spec("sim"))),
        [up_spec("sim")]
    );
}

#[test]
fn problems_are_told_apart() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cache = HashMap::new();
    let why = |file: &str, line: &str, cache: &mut HashMap<PathBuf, BTreeSet<String>>| {
        refs_in_line(line, file.ends_with(".md"))
            .iter()
            .map(|r| problem(root, file, r, cache))
            .collect::<Vec<_>>()
    };
    let bare = why("src/main.rs", &format!("({C}.md)"), &mut cache);
    assert!(bare[0]
        .as_deref()
        .unwrap()
        .contains("not a repository path"));
    let spec = why("src/main.rs", &up_spec(K), &mut cache);
    assert!(spec[0].as_deref().unwrap().contains("outside"));
    let spec = why("src/main.rs", &format!("spec/{K}.md"), &mut cache);
    assert!(spec[0].as_deref().unwrap().contains("outside"));
    assert_eq!(why("docs/README.md", "[x](api.md)", &mut cache), [None]);
    assert!(why("README.md", "[x](api.md)", &mut cache)[0].is_some());
    assert!(why("README.md", &format!("see {S}.md"), &mut cache)[0].is_some());
    assert_eq!(
        why("src/lib.rs", "docs/ARCHITECTURE.md", &mut cache),
        [None]
    );
    let missing = ["docs/", "nope.md"].concat();
    assert!(why("src/lib.rs", &missing, &mut cache)[0].is_some());
    let bad_anchor = ["docs/api.md", "#no-such-heading"].concat();
    assert!(why("src/lib.rs", &bad_anchor, &mut cache)[0]
        .as_deref()
        .unwrap()
        .contains("not a heading"));
    assert_eq!(
        why(
            "src/lib.rs",
            "docs/api.md#error-codes-and-statuses",
            &mut cache
        ),
        [None]
    );
}

#[test]
fn slugs_follow_github() {
    assert_eq!(slug(" `kubegate exec`"), "kubegate-exec");
    assert_eq!(
        slug(" Re-adoption after a restart (`machine_adopt.rs`, `recover.rs`)"),
        "re-adoption-after-a-restart-machine_adoptrs-recoverrs"
    );
    assert_eq!(
        slug(" 4. Exec and attach over WebSocket"),
        "4-exec-and-attach-over-websocket"
    );
    let a = anchors("# A\n## B\n```\n# not\n```\n## B\n");
    assert_eq!(
        a.into_iter().collect::<Vec<_>>(),
        ["a", "b", "b-1"].map(String::from)
    );
}
