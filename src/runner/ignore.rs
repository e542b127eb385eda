//! Which workspace changes restart the program, sans-IO: the
//! `.kubegateignore` matcher (gitignore-style) and the fixed exclusions the
//! workspace agent also applies (`agent::wire::paths::EXCLUDED`, at any depth, and
//! the agent's temporary files).
//!
//! The pattern language is gitignore's (gitignore(5)), for the parts a
//! workspace needs:
//! - one pattern per line; blank lines and lines starting with `#` are
//!   skipped (`\#` is a literal `#`); trailing spaces are dropped unless
//!   escaped (`\ `);
//! - `!` negates (a later pattern re-includes what an earlier one left out;
//!   `\!` is a literal `!`), but nothing under an ignored folder can be
//!   re-included (git does the same: it never looks inside);
//! - a trailing `/` matches folders only;
//! - a pattern with a `/` at its start or in its middle is anchored to the
//!   workspace root (a leading `/` is dropped); without one it matches a
//!   name at any depth;
//! - `*` matches any run of characters but `/`, `?` one character but `/`,
//!   `[a-z]`/`[!a-z]`/`[^a-z]` a class; `\x` escapes `x`;
//! - `**` as a whole component: `**/x` matches `x` at any depth, `x/**`
//!   everything inside `x`, `a/**/b` zero or more folders between; a `**`
//!   inside a component is a plain `*`.
//!
//! The last matching pattern decides. Bounded: at most [`MAX_RULES`]
//! patterns of at most [`MAX_PATTERN_BYTES`] each are kept (more is a
//! mistake, not a workspace), so matching stays cheap.

use crate::agent::wire::paths::{is_excluded, is_temp};

/// The ignore file, at the workspace root only.
pub const IGNORE_FILE: &str = ".kubegateignore";
/// Patterns kept from one file.
pub const MAX_RULES: usize = 1000;
/// Longest pattern kept, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    Lit(char),
    /// `*`
    Star,
    /// `?`
    One,
    /// `[...]`: ranges, negated or not.
    Class(bool, Vec<(char, char)>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    /// `**`: zero or more components.
    AnyDirs,
    Glob(Vec<Tok>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Rule {
    negate: bool,
    dir_only: bool,
    /// Anchored to the root; an unanchored pattern is stored as `**/pat`.
    segs: Vec<Seg>,
}

/// The parsed `.kubegateignore` (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IgnoreRules {
    rules: Vec<Rule>,
}

impl IgnoreRules {
    /// Parses the file's text; lines that are not patterns are skipped.
    pub fn parse(text: &str) -> IgnoreRules {
        let rules = text
            .lines()
            .filter_map(parse_line)
            .take(MAX_RULES)
            .collect();
        IgnoreRules { rules }
    }

    /// Number of patterns kept.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether `path` (relative to the root, `/`-separated) is ignored:
    /// itself, or one of its folders. `is_dir` says what `path` is.
    pub fn is_ignored(&self, path: &str, is_dir: bool) -> bool {
        if self.rules.is_empty() {
            return false;
        }
        let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        (1..=segs.len()).any(|i| self.decide(&segs[..i], i < segs.len() || is_dir))
    }

    /// The last matching rule's verdict for exactly this path.
    fn decide(&self, segs: &[&str], is_dir: bool) -> bool {
        self.rules
            .iter()
            .rev()
            .find(|r| (!r.dir_only || is_dir) && match_segs(&r.segs, segs))
            .is_some_and(|r| !r.negate)
    }
}

/// Whether a change at `path` (relative, `/`-separated) matters: not under
/// an excluded name at any depth (`.git`, `node_modules`, the runtimes'
/// cache folders: the workspace agent's list), not an agent temporary file
/// (the rename that follows is the change), not ignored by the rules.
pub fn is_relevant(path: &str, is_dir: bool, rules: &IgnoreRules) -> bool {
    if path.is_empty() {
        return false;
    }
    let mut parts = path.split('/').filter(|s| !s.is_empty()).peekable();
    while let Some(p) = parts.next() {
        if is_excluded(p) || (parts.peek().is_none() && is_temp(p)) {
            return false;
        }
    }
    !rules.is_ignored(path, is_dir)
}

fn parse_line(line: &str) -> Option<Rule> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    if line.is_empty() || line.starts_with('#') || line.len() > MAX_PATTERN_BYTES {
        return None;
    }
    let line = trim_trailing_spaces(line);
    if line.is_empty() {
        return None;
    }
    let (negate, body) = match line.strip_prefix('!') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let mut body = body;
    let mut dir_only = false;
    while let Some(rest) = body.strip_suffix('/') {
        // A trailing `\/` cannot happen in a name; treat it like `/`.
        dir_only = true;
        body = rest;
    }
    let anchored = body.contains('/');
    let body = body.trim_start_matches('/');
    if body.is_empty() {
        return None;
    }
    let mut segs: Vec<Seg> = Vec::new();
    if !anchored {
        segs.push(Seg::AnyDirs);
    }
    for part in body.split('/') {
        if part.is_empty() {
            continue; // `a//b` is `a/b`
        }
        if part == "**" {
            if segs.last() != Some(&Seg::AnyDirs) {
                segs.push(Seg::AnyDirs);
            }
            continue;
        }
        segs.push(Seg::Glob(parse_glob(part)));
    }
    Some(Rule {
        negate,
        dir_only,
        segs,
    })
}

/// Drops trailing spaces that are not escaped with a backslash.
fn trim_trailing_spaces(line: &str) -> &str {
    let mut end = line.len();
    let b = line.as_bytes();
    while end > 0 && b[end - 1] == b' ' {
        // Count the backslashes before this space.
        let mut n = 0;
        while end >= 2 + n && b[end - 2 - n] == b'\\' {
            n += 1;
        }
        if n % 2 == 1 {
            break; // escaped: kept
        }
        end -= 1;
    }
    &line[..end]
}

fn parse_glob(part: &str) -> Vec<Tok> {
    let chars: Vec<char> = part.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                if let Some(&c) = chars.get(i + 1) {
                    out.push(Tok::Lit(c));
                    i += 2;
                } else {
                    i += 1; // a lone trailing backslash matches nothing extra
                }
            }
            '*' => {
                if out.last() != Some(&Tok::Star) {
                    out.push(Tok::Star);
                }
                i += 1;
            }
            '?' => {
                out.push(Tok::One);
                i += 1;
            }
            '[' => match parse_class(&chars, i + 1) {
                Some((tok, next)) => {
                    out.push(tok);
                    i = next;
                }
                None => {
                    out.push(Tok::Lit('['));
                    i += 1;
                }
            },
            c => {
                out.push(Tok::Lit(c));
                i += 1;
            }
        }
    }
    out
}

/// A class starting after its `[`: the token and the index after its `]`,
/// or `None` when it is never closed (the `[` is then literal).
fn parse_class(chars: &[char], mut i: usize) -> Option<(Tok, usize)> {
    let negated = matches!(chars.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    loop {
        let mut c = *chars.get(i)?;
        if c == ']' && !first {
            return Some((Tok::Class(negated, ranges), i + 1));
        }
        first = false;
        if c == '\\' {
            i += 1;
            c = *chars.get(i)?;
        }
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&e| e != ']') {
            let mut end = chars[i + 2];
            let mut skip = 3;
            if end == '\\' {
                end = *chars.get(i + 3)?;
                skip = 4;
            }
            ranges.push((c, end));
            i += skip;
        } else {
            ranges.push((c, c));
            i += 1;
        }
    }
}

/// Whether the components of `path` match `pat`, by dynamic programming
/// over (pattern index, path index): `**` never makes it exponential.
fn match_segs(pat: &[Seg], path: &[&str]) -> bool {
    let n = path.len();
    // `next[j]`: pat[i+1..] matches path[j..]; starts as the empty pattern.
    let mut next: Vec<bool> = (0..=n).map(|j| j == n).collect();
    for (i, seg) in pat.iter().enumerate().rev() {
        let mut cur = vec![false; n + 1];
        match seg {
            Seg::AnyDirs if i + 1 == pat.len() => {
                // `x/**`: everything inside (at least one component).
                for (j, c) in cur.iter_mut().enumerate() {
                    *c = j < n;
                }
            }
            Seg::AnyDirs => {
                // Zero or more components: next[j] || cur[j+1].
                cur[n] = next[n];
                for j in (0..n).rev() {
                    cur[j] = next[j] || cur[j + 1];
                }
            }
            Seg::Glob(toks) => {
                for j in 0..n {
                    cur[j] = next[j + 1] && glob(toks, path[j]);
                }
            }
        }
        next = cur;
    }
    next[0]
}

fn tok_matches(t: &Tok, c: char) -> bool {
    match t {
        Tok::Lit(l) => *l == c,
        Tok::One => true,
        Tok::Class(neg, ranges) => ranges.iter().any(|&(a, b)| a <= c && c <= b) != *neg,
        Tok::Star => false,
    }
}

/// One component against one glob: the classic linear backtracking on the
/// last `*` (no exponential blow-up).
fn glob(toks: &[Tok], name: &str) -> bool {
    let s: Vec<char> = name.chars().collect();
    let (mut p, mut i) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while i < s.len() {
        if p < toks.len() && toks[p] == Tok::Star {
            star = Some((p, i));
            p += 1;
        } else if p < toks.len() && tok_matches(&toks[p], s[i]) {
            p += 1;
            i += 1;
        } else if let Some((sp, si)) = star {
            p = sp + 1;
            i = si + 1;
            star = Some((sp, si + 1));
        } else {
            return false;
        }
    }
    toks[p..].iter().all(|t| *t == Tok::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ig(rules: &str, path: &str, is_dir: bool) -> bool {
        IgnoreRules::parse(rules).is_ignored(path, is_dir)
    }

    #[test]
    fn comments_blanks_and_escapes() {
        let r = IgnoreRules::parse("# a comment\n\n   \n\\#hash\n\\!bang\n");
        assert_eq!(r.len(), 2);
        assert!(r.is_ignored("#hash", false));
        assert!(r.is_ignored("!bang", false));
        assert!(!r.is_ignored("# a comment", false));
    }

    #[test]
    fn trailing_spaces() {
        assert!(ig("a.txt   ", "a.txt", false));
        assert!(ig("a\\ ", "a ", false));
        assert!(!ig("a\\ ", "a", false));
        // CRLF files.
        assert!(ig("x.log\r\ny.log\r\n", "y.log", false));
    }

    #[test]
    fn star_and_question_mark() {
        assert!(ig("*.log", "app.log", false));
        assert!(ig("*.log", "deep/er/app.log", false));
        assert!(ig("*.log", ".log", false));
        assert!(!ig("*.log", "app.log.txt", false));
        assert!(ig("file?.txt", "file1.txt", false));
        assert!(!ig("file?.txt", "file10.txt", false));
        assert!(!ig("file?.txt", "file.txt", false));
        // `*` never crosses a `/`.
        assert!(!ig("src/*.js", "src/a/b.js", false));
        assert!(ig("src/*.js", "src/b.js", false));
        assert!(ig("a*b*c", "aXXbYYc", false));
        assert!(!ig("a*b*c", "aXXbYY", false));
    }

    #[test]
    fn classes() {
        assert!(ig("[abc].txt", "b.txt", false));
        assert!(!ig("[abc].txt", "d.txt", false));
        assert!(ig("[a-c]x", "cx", false));
        assert!(ig("[!a-c]x", "dx", false));
        assert!(!ig("[^a-c]x", "ax", false));
        assert!(ig("[]]", "]", false));
        // Never closed: a literal `[`.
        assert!(ig("[oops", "[oops", false));
    }

    #[test]
    fn double_star() {
        assert!(ig("**/foo", "foo", false));
        assert!(ig("**/foo", "a/b/foo", false));
        assert!(ig("foo/**", "foo/a", false));
        assert!(ig("foo/**", "foo/a/b", false));
        assert!(
            !ig("foo/**", "foo", true),
            "the folder itself is not inside it"
        );
        assert!(ig("a/**/b", "a/b", false));
        assert!(ig("a/**/b", "a/x/y/b", false));
        assert!(!ig("a/**/b", "x/a/b", false), "anchored");
        assert!(ig("**", "anything/at/all", false));
        // Inside a component `**` is a plain `*`.
        assert!(ig("a**z", "abcz", false));
        assert!(!ig("a**z", "ab/cz", false));
    }

    #[test]
    fn anchoring() {
        assert!(ig("/build", "build", true));
        assert!(!ig("/build", "sub/build", true));
        assert!(ig("build", "sub/build", true));
        assert!(ig("doc/frotz", "doc/frotz", false));
        assert!(!ig("doc/frotz", "a/doc/frotz", false));
        // Contents of an ignored folder are ignored.
        assert!(ig("/build", "build/x/y.o", false));
    }

    #[test]
    fn trailing_slash_means_folders_only() {
        assert!(ig("out/", "out", true));
        assert!(!ig("out/", "out", false));
        assert!(ig("out/", "out/file", false));
        assert!(ig("out/", "a/out/file", false), "unanchored");
        assert!(!ig("out/", "a/out", false), "a file named out");
    }

    #[test]
    fn negation() {
        let r = "*.log\n!keep.log\n";
        assert!(ig(r, "a.log", false));
        assert!(!ig(r, "keep.log", false));
        assert!(!ig(r, "sub/keep.log", false));
        // The last match wins.
        assert!(ig("!keep.log\n*.log\n", "keep.log", false));
        // Nothing under an ignored folder comes back.
        let r = "logs/\n!logs/keep.txt\n";
        assert!(ig(r, "logs/keep.txt", false));
        // But a re-included folder's contents are visible again.
        let r = "/gen/*\n!/gen/src/\n";
        assert!(ig(r, "gen/out.bin", false));
        assert!(!ig(r, "gen/src/a.rs", false));
        // `!` alone and `/` alone are not patterns.
        assert!(IgnoreRules::parse("!\n/\n").is_empty());
    }

    #[test]
    fn relevance_combines_exclusions_temps_and_rules() {
        let rules = IgnoreRules::parse("dist/\n*.tmp\n");
        assert!(is_relevant("src/app.js", false, &rules));
        assert!(is_relevant("kubegate.toml", false, &rules));
        for p in [
            ".git/index",
            ".git",
            "node_modules/x/index.js",
            "a/node_modules/b",
            "src/__pycache__/m.pyc",
            ".kubegate/cache",
            "dist/bundle.js",
            "x.tmp",
            "src/.kubegate-tmp-123",
            "",
        ] {
            assert!(!is_relevant(p, false, &rules), "{p}");
        }
        // A folder merely named like a temp file is still walked into.
        assert!(is_relevant(".kubegate-tmp-dir/x", false, &rules));
    }

    #[test]
    fn limits() {
        let many: String = (0..MAX_RULES + 10).map(|i| format!("f{i}\n")).collect();
        assert_eq!(IgnoreRules::parse(&many).len(), MAX_RULES);
        let long = "x".repeat(MAX_PATTERN_BYTES + 1);
        assert!(IgnoreRules::parse(&long).is_empty());
        // A pathological pattern stays fast.
        let r = IgnoreRules::parse("**/a/**/a/**/a/**/a/**/b\n*a*a*a*a*a*a*b\n");
        let path = vec!["a"; 60].join("/");
        assert!(!r.is_ignored(&path, false));
    }
}
