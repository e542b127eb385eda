//! The layering rule, enforced: every edge from one module of `src/` to
//! another must be allowed by the table under "## Layering" in
//! docs/ARCHITECTURE.md. The table is read from the page, so the page and
//! the code cannot drift apart.
//!
//! An edge is a `use crate::…` (grouped or not, `pub use` re-exports
//! included), an inline `crate::a::b` path, a `super::` that climbs out of
//! its file, and in `src/main.rs` and `src/bin/` a `kubegate::…` path.
//! Comments and string literals are blanked first, so a path in a doc
//! comment or a message is not an edge; `pub(in crate::x)` is a
//! visibility, not an edge.
//!
//! A file's module path is read from the module tree itself, walked from
//! `src/lib.rs` through every `mod NAME;` (a `#[path = "…"]` on it
//! followed), so `src/http/response_tests.rs` is `http::response::tests`.
//! `src/main.rs` is the unit `main`; the files of `src/bin/` are the unit
//! `bin`.
//!
//! A row whose unit cell is `` `*` `` lists leaves every unit may use.
//! Any other row of the table names one or more units (module paths:
//! `session::engine`) and the units they may use; the units of one row may
//! use each other. A file belongs to the longest unit that prefixes its
//! module path; so does the target of an edge. An edge inside one unit is
//! always allowed; any other must be listed. A listed unit allows
//! everything under it but the units nested in it (`session` is not
//! `session::io`); a listed part of a unit that is no unit itself
//! (`sim::pod_users`) allows only what is under it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const ARCHITECTURE: &str = "docs/ARCHITECTURE.md";

/// The table: unit -> the units it may use.
struct Table {
    rows: BTreeMap<String, Vec<String>>,
}

/// The backquoted names of a table cell: "`a`, `b::c`" -> `["a", "b::c"]`.
fn names(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

impl Table {
    fn parse(page: &str) -> Table {
        let section = page
            .split("\n## Layering")
            .nth(1)
            .expect("docs/ARCHITECTURE.md has a \"## Layering\" section");
        let section = section.split("\n## ").next().unwrap_or(section);
        let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut leaves = Vec::new();
        for line in section.lines() {
            let line = line.trim();
            if !line.starts_with('|') {
                continue;
            }
            let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
            if cells.len() < 2 || !cells[0].starts_with('`') {
                continue;
            }
            if cells[0] == "`*`" {
                // leaves every unit may use
                leaves.extend(names(cells[1]));
                continue;
            }
            let units = names(cells[0]);
            let mut may = names(cells[1]);
            // The units of one row are one layer: they may use each other.
            may.extend(units.iter().cloned());
            for unit in units {
                assert!(
                    !rows.contains_key(&unit),
                    "unit `{unit}` has two rows in the Layering table"
                );
                rows.insert(unit, may.clone());
            }
        }
        for leaf in &leaves {
            assert!(
                rows.contains_key(leaf),
                "leaf `{leaf}` has no row of its own"
            );
        }
        for may in rows.values_mut() {
            may.extend(leaves.iter().cloned());
        }
        assert!(
            rows.len() >= 5,
            "the Layering table has too few rows: {rows:?}"
        );
        Table { rows }
    }

    /// The longest unit prefixing `path` (module path segments).
    fn unit_of(&self, path: &[String]) -> Option<String> {
        (1..=path.len())
            .rev()
            .map(|n| path[..n].join("::"))
            .find(|p| self.rows.contains_key(p))
    }

    fn allows(&self, from: &str, target: &[String]) -> bool {
        let Some(to) = self.unit_of(target) else {
            return false;
        };
        if to == from {
            return true;
        }
        let full = target.join("::");
        self.rows[from].iter().any(|m| {
            // A unit; or a part of one (`sim::pod_users`), which allows
            // only what is under it.
            to == *m
                || (!self.rows.contains_key(m)
                    && (full == *m || full.starts_with(&format!("{m}::")))
                    && self.unit_of(&segs(m)).as_deref() == Some(to.as_str()))
        })
    }
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("src/ is readable")
        .map(|e| e.expect("a readable entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The library's module tree: file -> module path, walked from `lib.rs`
/// through each `mod NAME;` (and its `#[path = "…"]`, relative to the
/// declaring file's folder).
fn module_tree(src: &Path) -> BTreeMap<PathBuf, Vec<String>> {
    let mut tree = BTreeMap::new();
    let mut todo = vec![(src.join("lib.rs"), Vec::new())];
    while let Some((file, module)) = todo.pop() {
        let raw =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let dir = file.parent().expect("a file has a folder").to_path_buf();
        let stem = file.file_stem().expect("a file name").to_string_lossy();
        let children_dir = if matches!(stem.as_ref(), "lib" | "mod" | "main") {
            dir.clone()
        } else {
            dir.join(stem.as_ref())
        };
        for (name, path_attr) in mod_declarations(&raw) {
            let mut child_module = module.clone();
            child_module.push(name.clone());
            let child = match path_attr {
                Some(p) => dir.join(p),
                None => {
                    let flat = children_dir.join(format!("{name}.rs"));
                    if flat.exists() {
                        flat
                    } else {
                        children_dir.join(&name).join("mod.rs")
                    }
                }
            };
            todo.push((child, child_module));
        }
        tree.insert(file, module);
    }
    tree
}

/// The `mod NAME;` declarations of a file (inline `mod NAME { … }` blocks
/// are not files), each with the `#[path = "…"]` on the lines just above.
fn mod_declarations(raw: &str) -> Vec<(String, Option<String>)> {
    let code = code_only(raw);
    let raw_lines: Vec<&str> = raw.lines().collect();
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut words = line.trim().trim_start_matches("pub(crate) ");
        words = words.trim_start_matches("pub ");
        let Some(rest) = words.strip_prefix("mod ") else {
            continue;
        };
        let Some(name) = rest.trim().strip_suffix(';') else {
            continue;
        };
        let mut path_attr = None;
        for above in raw_lines[..n].iter().rev() {
            let above = above.trim();
            if !above.starts_with("#[") {
                break;
            }
            if let Some(p) = above.strip_prefix("#[path = \"") {
                path_attr = p.split('"').next().map(String::from);
            }
        }
        out.push((name.trim().to_string(), path_attr));
    }
    out
}

/// Code with comments and string literals blanked (so a path in a doc
/// comment or a message is not an edge), line structure kept.
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i < b.len() && !(b[i] == b'*' && b.get(i + 1) == Some(&b'/')) {
                if b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if let Some((hashes, mut j)) = raw_string_at(b, i) {
            // r"…", r#"…"#, br"…"
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + close.len();
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' && b.get(i + 2) == Some(&b'\'') {
            // a char literal like '"'
            out.push_str("' '");
            i += 3;
        } else if c == b'\'' && b.get(i + 1) == Some(&b'\\') {
            let mut j = i + 2;
            while j < b.len() && b[j] != b'\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            // copy one UTF-8 character (i is always on a character boundary)
            let ch = src[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// A raw string starting at `i` (`r"`, `r#…"`, `br"`): the number of
/// hashes and the index just past the opening quote.
fn raw_string_at(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if prev_ident(b, i) {
        return None;
    }
    let mut j = match (b.get(i), b.get(i + 1)) {
        (Some(b'r'), _) => i + 1,
        (Some(b'b'), Some(b'r')) => i + 2,
        _ => return None,
    };
    let mut hashes = 0;
    while b.get(j) == Some(&b'#') {
        hashes += 1;
        j += 1;
    }
    (b.get(j) == Some(&b'"')).then_some((hashes, j + 1))
}

fn prev_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Every path `root::a::b…` in `code` (root `crate` or `kubegate`), with
/// `use` groups expanded: `use crate::{a::x, b::{y, z}}` gives `a::x`,
/// `b::y`, `b::z`. Returns (line, segments).
fn paths_from(code: &str, root: &str) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let b = code.as_bytes();
    let needle = format!("{root}::");
    let mut from = 0;
    while let Some(at) = code[from..].find(&needle) {
        let start = from + at;
        from = start + needle.len();
        if prev_ident(b, start) || (start >= 2 && &b[start - 2..start] == b"::") {
            continue;
        }
        if code[..start].trim_end().ends_with("(in") {
            continue; // pub(in crate::x): a visibility
        }
        let line = code[..start].matches('\n').count() + 1;
        expand(&code[start + needle.len()..], Vec::new(), line, &mut found);
    }
    found
}

/// Reads a path (and a `{…}` group) at the start of `rest`, appending
/// every full path to `out`. Returns the bytes consumed.
fn expand(
    rest: &str,
    prefix: Vec<String>,
    line: usize,
    out: &mut Vec<(usize, Vec<String>)>,
) -> usize {
    let b = rest.as_bytes();
    let mut i = 0;
    let mut segs = prefix;
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    return i + 1;
                }
                let used = expand(&rest[i..], segs.clone(), line, out);
                if used == 0 {
                    i += 1; // not a path (a `*`): step over it
                }
                i += used;
            }
        }
        let s = i;
        while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
            i += 1;
        }
        if i == s {
            if b.get(i) == Some(&b'*') {
                i += 1; // a glob: the edge is to the prefix
            }
            break;
        }
        let seg = &rest[s..i];
        if seg != "self" {
            segs.push(seg.to_string());
        }
        if rest[i..].starts_with("::") {
            i += 2;
            continue;
        }
        break;
    }
    // `x as y`: the alias is no segment.
    let after = rest[i..].trim_start();
    if let Some(alias) = after.strip_prefix("as ") {
        let alias = alias.trim_start();
        let len = alias
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(alias.len());
        i = rest.len() - alias.len() + len;
    }
    out.push((line, segs));
    i
}

/// `super::` paths that climb out of the file, resolved to absolute module
/// paths (`super` from an inline `mod tests` is the file itself).
fn super_paths(code: &str, module: &[String]) -> Vec<(usize, Vec<String>)> {
    let mut found = Vec::new();
    let b = code.as_bytes();
    let mut from = 0;
    while let Some(at) = code[from..].find("super::") {
        let start = from + at;
        from = start + 7;
        if prev_ident(b, start) || (start >= 2 && &b[start - 2..start] == b"::") {
            continue;
        }
        let mut ups = 0;
        let mut i = start;
        while b[i..].starts_with(b"super::") {
            ups += 1;
            i += 7;
        }
        from = i;
        let inline = inline_depth(&code[..start]);
        if ups <= inline {
            continue; // stays inside this file
        }
        let keep = (module.len() + inline).saturating_sub(ups);
        let line = code[..start].matches('\n').count() + 1;
        let mut tail = Vec::new();
        expand(&code[i..], Vec::new(), line, &mut tail);
        for (l, segs) in tail {
            let mut abs: Vec<String> = module[..keep.min(module.len())].to_vec();
            abs.extend(segs);
            found.push((l, abs));
        }
    }
    found
}

/// How many `mod NAME {` blocks enclose the end of `code` (counts braces
/// from each inline module's opening).
fn inline_depth(code: &str) -> usize {
    let mut stack: Vec<usize> = Vec::new(); // brace depth at which a mod opened
    let mut braces = 0usize;
    let b = code.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i..].starts_with(b"mod ") && !prev_ident(b, i) {
            let mut j = i + 4;
            while j < b.len() && (b[j].is_ascii_alphanumeric() || b[j] == b'_' || b[j] == b' ') {
                j += 1;
            }
            if b.get(j) == Some(&b'{') {
                stack.push(braces);
                braces += 1;
                i = j + 1;
                continue;
            }
        }
        match b[i] {
            b'{' => braces += 1,
            b'}' => {
                braces = braces.saturating_sub(1);
                if stack.last() == Some(&braces) {
                    stack.pop();
                }
            }
            _ => {}
        }
        i += 1;
    }
    stack.len()
}

/// The edges of one file: `kubegate::` paths in a binary, `crate::` and
/// climbing `super::` paths in the library.
fn edges_of(raw: &str, module: &[String], binary: bool) -> Vec<(usize, Vec<String>)> {
    let code = code_only(raw);
    if binary {
        return paths_from(&code, "kubegate");
    }
    let mut edges = paths_from(&code, "crate");
    edges.extend(super_paths(&code, module));
    edges
}

#[test]
fn every_edge_between_modules_is_in_the_architecture_table() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join(ARCHITECTURE)).expect("the page is readable");
    let table = Table::parse(&page);
    let src = root.join("src");
    let tree = module_tree(&src);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = BTreeSet::new();
    let mut unplaced = BTreeSet::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let shown = format!("src/{}", rel.display());
        let binary = rel == Path::new("main.rs") || rel.starts_with("bin");
        let module: Vec<String> = if rel == Path::new("main.rs") {
            vec!["main".into()]
        } else if binary {
            vec!["bin".into()]
        } else if let Some(m) = tree.get(file) {
            m.clone()
        } else {
            unplaced.insert(format!("{shown} (in no `mod` of the library)"));
            continue;
        };
        if module.is_empty() {
            continue; // lib.rs: the crate root only declares modules
        }
        let Some(from) = table.unit_of(&module) else {
            unplaced.insert(format!("{shown} ({})", module.join("::")));
            continue;
        };
        let raw = std::fs::read_to_string(file).expect("a readable source file");
        for (line, target) in edges_of(&raw, &module, binary) {
            if !table.allows(&from, &target) {
                bad.insert(format!("{shown}:{line}: {from} -> {}", target.join("::")));
            }
        }
    }
    assert!(
        unplaced.is_empty(),
        "files in no unit of the Layering table:\n{}",
        unplaced.into_iter().collect::<Vec<_>>().join("\n")
    );
    assert!(
        bad.is_empty(),
        "{} edges the Layering table (docs/ARCHITECTURE.md) does not allow:\n{}",
        bad.len(),
        bad.into_iter().collect::<Vec<_>>().join("\n")
    );
}

fn segs(s: &str) -> Vec<String> {
    s.split("::").map(String::from).collect()
}

#[test]
fn the_scanner_finds_every_kind_of_edge() {
    let code = code_only(
        "use crate::{http::{self, parse}, kube::status::Status};\n\
         // use crate::server::commented;\n\
         /* crate::server::in_a_block */\n\
         let s = \"crate::config::in_a_string\";\n\
         let r = r#\"crate::config::raw\"#;\n\
         fn f() { crate::session::spec::parse(); }\n\
         pub use crate::api::Code;\n\
         pub(in crate::server) fn g() {}\n\
         use crate::metrics::*;\n\
         use crate::exec::frames::{ClientFrame, SUBPROTOCOL as EXEC};\n",
    );
    let got: Vec<String> = paths_from(&code, "crate")
        .into_iter()
        .map(|(_, p)| p.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "http",
            "http::parse",
            "kube::status::Status",
            "session::spec::parse",
            "api::Code",
            "metrics",
            "exec::frames::ClientFrame",
            "exec::frames::SUBPROTOCOL"
        ]
    );
    let bin: Vec<String> = paths_from(&code_only("use kubegate::cli::run;\n"), "kubegate")
        .into_iter()
        .map(|(_, p)| p.join("::"))
        .collect();
    assert_eq!(bin, ["cli::run"]);

    // super:: out of the file is an edge; out of an inline `mod tests` into
    // its own file is not.
    let sup = super_paths(
        &code_only("use super::super::config::X;\nuse super::y;\nmod tests { use super::z; }\n"),
        &segs("session::engine::owner"),
    );
    let sup: Vec<String> = sup.iter().map(|(_, s)| s.join("::")).collect();
    assert_eq!(sup, ["session::config::X", "session::engine::y"]);
    let glob = super_paths(
        &code_only("use super::*;\n"),
        &segs("http::response::tests"),
    );
    assert_eq!(glob[0].1, segs("http::response"));
}

#[test]
fn the_table_refuses_what_it_does_not_list() {
    let page = "\n## Layering\n\n| unit | may use |\n|---|---|\n\
                | `http` | — |\n| `kube` | `http` |\n\
                | `session` | `kube`, `session::io::wire` |\n\
                | `session::io`, `session::engine` | `session`, `kube` |\n\
                | `session::io::wire` | — |\n| `cli` | `session::io::wire` |\n\
                | `api` | `http::hop` |\n| `token` | — |\n| `*` | `token` |\n\n## Next\n\n| `server` | `cli` |\n";
    let t = Table::parse(page);
    assert!(
        !t.rows.contains_key("server"),
        "the section ends at the next heading"
    );
    assert!(t.allows("kube", &segs("http::parse::Head")));
    assert!(!t.allows("http", &segs("kube::status")));
    assert!(
        t.allows("session", &segs("session::spec::Port")),
        "inside a unit"
    );
    assert!(!t.allows("cli", &segs("session::io::ring::Ring")));
    assert!(t.allows("cli", &segs("session::io::wire::decode")));
    assert!(
        !t.allows("session", &segs("session::io::ring")),
        "the core may not use the engine's io"
    );
    assert!(t.allows("session", &segs("session::io::wire::X")));
    assert!(
        t.allows("session::io", &segs("session::engine::Engine")),
        "one row, one layer"
    );
    assert!(
        !t.allows("session::io::wire", &segs("session::io::ring")),
        "a nested unit is its own"
    );
    assert!(
        !t.allows("cli", &segs("nowhere::x")),
        "a target in no unit is refused"
    );
    assert!(
        t.allows("http", &segs("token::digest")),
        "a leaf of the `*` row"
    );
    assert!(!t.allows("token", &segs("http::x")));
    assert!(
        t.allows("api", &segs("http::hop::is_hop")),
        "a part of a unit"
    );
    assert!(!t.allows("api", &segs("http::parse")), "only that part");
}

#[test]
fn the_module_tree_follows_path_attributes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tree = module_tree(&root.join("src"));
    let at = |p: &str| tree.get(&root.join(p)).map(|m| m.join("::"));
    assert_eq!(
        at("src/http/response_tests.rs").as_deref(),
        Some("http::response::tests")
    );
    assert_eq!(
        at("src/session/io/wire.rs").as_deref(),
        Some("session::io::wire")
    );
    assert_eq!(
        at("src/agent/wire/paths.rs").as_deref(),
        Some("agent::wire::paths")
    );
    assert_eq!(at("src/sim/store/mod.rs").as_deref(), Some("sim::store"));
}
