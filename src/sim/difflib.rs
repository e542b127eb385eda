//! The unified diff upstream's validation puts in some messages
//! (`apimachinery`'s `diff.Diff`: both values as Go's
//! `json.MarshalIndent(v, "", " ")`, then `go-difflib`'s
//! `UnifiedDiff{Context: 3}`), e.g. a PersistentVolumeClaim's "spec is
//! immutable after creation …" (docs/sim.md#persistentvolumeclaims).
//!
//! A port of go-difflib's `SequenceMatcher` (Ratcliff/Obershelp: the
//! longest matching block, then the same on each side of it) without junk
//! heuristics (go-difflib's only apply from 200 lines), its grouped
//! opcodes and its hunk format, so the text reads the same.

use serde_json::Value;

/// Go's `json.MarshalIndent(v, "", " ")` of a JSON value: one space per
/// level, `"key": value`, `[]`/`{}` for empty ones (object keys in the
/// order given: Go's structs keep field order, its maps sort).
pub fn go_indent(v: &Value) -> String {
    let mut out = String::new();
    write(v, 0, &mut out);
    out
}

/// [`go_indent`] of a Go struct: its fields in declaration order (a JSON
/// map here would sort them).
pub fn go_indent_fields(fields: &[(&str, Value)]) -> String {
    let mut out = String::from("{");
    for (i, (k, v)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("\n ");
        out.push_str(&Value::String((*k).to_string()).to_string());
        out.push_str(": ");
        write(v, 1, &mut out);
    }
    out.push_str("\n}");
    out
}

fn write(v: &Value, depth: usize, out: &mut String) {
    let pad = |n: usize, out: &mut String| {
        out.push('\n');
        out.push_str(&" ".repeat(n));
    };
    match v {
        Value::Array(a) if !a.is_empty() => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(depth + 1, out);
                write(x, depth + 1, out);
            }
            pad(depth, out);
            out.push(']');
        }
        Value::Object(m) if !m.is_empty() => {
            out.push('{');
            for (i, (k, x)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                pad(depth + 1, out);
                out.push_str(&Value::String(k.clone()).to_string());
                out.push_str(": ");
                write(x, depth + 1, out);
            }
            pad(depth, out);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// `difflib.SplitLines`: each line keeps its `\n`, the last gets one.
fn split_lines(s: &str) -> Vec<String> {
    let mut lines: Vec<String> = s.split_inclusive('\n').map(str::to_string).collect();
    match lines.last_mut() {
        Some(last) if !last.ends_with('\n') => last.push('\n'),
        Some(_) => lines.push("\n".into()),
        None => lines.push("\n".into()),
    }
    lines
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OpCode {
    tag: u8,
    i1: usize,
    i2: usize,
    j1: usize,
    j2: usize,
}

fn longest_match(
    a: &[String],
    b: &[String],
    (alo, ahi, blo, bhi): (usize, usize, usize, usize),
) -> (usize, usize, usize) {
    let (mut besti, mut bestj, mut best) = (alo, blo, 0);
    let mut j2len: std::collections::HashMap<usize, usize> = Default::default();
    for (i, line) in a.iter().enumerate().take(ahi).skip(alo) {
        let mut next = std::collections::HashMap::new();
        for (j, other) in b.iter().enumerate().take(bhi).skip(blo) {
            if other != line {
                continue;
            }
            let k = j
                .checked_sub(1)
                .and_then(|p| j2len.get(&p))
                .copied()
                .unwrap_or(0)
                + 1;
            next.insert(j, k);
            if k > best {
                besti = i + 1 - k;
                bestj = j + 1 - k;
                best = k;
            }
        }
        j2len = next;
    }
    (besti, bestj, best)
}

fn matching_blocks(a: &[String], b: &[String]) -> Vec<(usize, usize, usize)> {
    let mut queue = vec![(0, a.len(), 0, b.len())];
    let mut blocks = Vec::new();
    while let Some((alo, ahi, blo, bhi)) = queue.pop() {
        let (i, j, k) = longest_match(a, b, (alo, ahi, blo, bhi));
        if k > 0 {
            blocks.push((i, j, k));
            if alo < i && blo < j {
                queue.push((alo, i, blo, j));
            }
            if i + k < ahi && j + k < bhi {
                queue.push((i + k, ahi, j + k, bhi));
            }
        }
    }
    blocks.sort_unstable();
    let mut merged: Vec<(usize, usize, usize)> = Vec::new();
    for (i, j, k) in blocks {
        match merged.last_mut() {
            Some((i1, j1, k1)) if *i1 + *k1 == i && *j1 + *k1 == j => *k1 += k,
            _ => merged.push((i, j, k)),
        }
    }
    merged.push((a.len(), b.len(), 0));
    merged
}

fn opcodes(a: &[String], b: &[String]) -> Vec<OpCode> {
    let (mut i, mut j) = (0, 0);
    let mut codes = Vec::new();
    for (ai, bj, size) in matching_blocks(a, b) {
        let tag = if i < ai && j < bj {
            b'r'
        } else if i < ai {
            b'd'
        } else if j < bj {
            b'i'
        } else {
            0
        };
        if tag != 0 {
            codes.push(OpCode {
                tag,
                i1: i,
                i2: ai,
                j1: j,
                j2: bj,
            });
        }
        i = ai + size;
        j = bj + size;
        if size > 0 {
            codes.push(OpCode {
                tag: b'e',
                i1: ai,
                i2: i,
                j1: bj,
                j2: j,
            });
        }
    }
    codes
}

fn grouped(mut codes: Vec<OpCode>, n: usize) -> Vec<Vec<OpCode>> {
    if codes.is_empty() {
        codes.push(OpCode {
            tag: b'e',
            i1: 0,
            i2: 1,
            j1: 0,
            j2: 1,
        });
    }
    if let Some(c) = codes.first_mut().filter(|c| c.tag == b'e') {
        c.i1 = c.i1.max(c.i2.saturating_sub(n));
        c.j1 = c.j1.max(c.j2.saturating_sub(n));
    }
    if let Some(c) = codes.last_mut().filter(|c| c.tag == b'e') {
        c.i2 = c.i2.min(c.i1 + n);
        c.j2 = c.j2.min(c.j1 + n);
    }
    let mut groups = Vec::new();
    let mut group = Vec::new();
    for c in codes {
        let OpCode {
            tag,
            mut i1,
            i2,
            mut j1,
            j2,
        } = c;
        if tag == b'e' && i2 - i1 > 2 * n {
            group.push(OpCode {
                tag,
                i1,
                i2: i2.min(i1 + n),
                j1,
                j2: j2.min(j1 + n),
            });
            groups.push(std::mem::take(&mut group));
            i1 = i1.max(i2.saturating_sub(n));
            j1 = j1.max(j2.saturating_sub(n));
        }
        group.push(OpCode {
            tag,
            i1,
            i2,
            j1,
            j2,
        });
    }
    let only_equal = group.len() == 1 && group[0].tag == b'e';
    if !group.is_empty() && !only_equal {
        groups.push(group);
    }
    groups
}

fn range(start: usize, stop: usize) -> String {
    let length = stop - start;
    match length {
        1 => format!("{}", start + 1),
        0 => format!("{start},0"),
        _ => format!("{},{length}", start + 1),
    }
}

/// `diff.Diff(a, b)` of two texts (Go's pretty JSON of each side).
pub fn unified(a: &str, b: &str) -> String {
    let (a, b) = (split_lines(a), split_lines(b));
    let mut out = String::new();
    for g in grouped(opcodes(&a, &b), 3) {
        let (first, last) = (g[0], g[g.len() - 1]);
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(first.i1, last.i2),
            range(first.j1, last.j2)
        ));
        for c in g {
            if c.tag == b'e' {
                for l in &a[c.i1..c.i2] {
                    out.push(' ');
                    out.push_str(l);
                }
                continue;
            }
            if c.tag == b'r' || c.tag == b'd' {
                for l in &a[c.i1..c.i2] {
                    out.push('-');
                    out.push_str(l);
                }
            }
            if c.tag == b'r' || c.tag == b'i' {
                for l in &b[c.j1..c.j2] {
                    out.push('+');
                    out.push_str(l);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hunks_read_as_go_difflibs() {
        let a = "{\n \"AccessModes\": [\n  \"ReadWriteOnce\"\n ],\n \"Selector\": null,\n \"Resources\": {\n  \"Limits\": null\n }\n}";
        let b = a.replace("ReadWriteOnce", "ReadWriteMany");
        // As kube-apiserver v1.36.3 wrote it.
        assert_eq!(
            unified(a, &b),
            "@@ -1,6 +1,6 @@\n {\n  \"AccessModes\": [\n-  \"ReadWriteOnce\"\n+  \"ReadWriteMany\"\n  ],\n  \"Selector\": null,\n  \"Resources\": {\n"
        );
        assert_eq!(unified(a, a), "");
        let v: Value = serde_json::from_str(r#"{"A": [], "B": {"c": 1}, "D": null}"#).unwrap();
        assert_eq!(
            go_indent(&v),
            "{\n \"A\": [],\n \"B\": {\n  \"c\": 1\n },\n \"D\": null\n}"
        );
    }
}
