//! Where a TOML error is: the dotted key path at a byte offset of the
//! document, so that a parse error names the key at fault like the
//! validation's errors do.

use std::collections::HashMap;

/// The dotted key path at byte `offset` of a TOML document, from the last
/// table header before it and the key on its line (array-of-tables entries
/// get their index: `principal[1].name`). Good enough to point a person at
/// the key; inline tables are reported by their outer key.
pub(super) fn key_at(text: &str, offset: usize) -> String {
    let offset = offset.min(text.len());
    let mut section = String::new();
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut line_start = 0;
    for line in text[..offset].split_inclusive('\n') {
        let end = line_start + line.len();
        let t = line.trim();
        // Only whole lines before the offset's line change the section;
        // the offset's own line is handled below.
        if end <= offset || !line.ends_with('\n') {
            if let Some(h) = t.strip_prefix("[[").and_then(|r| r.split("]]").next()) {
                let h = h.trim().to_string();
                let n = counts.entry(h.clone()).or_insert(0);
                section = format!("{h}[{n}]");
                *n += 1;
            } else if let Some(h) = t.strip_prefix('[').and_then(|r| r.split(']').next()) {
                section = h.trim().to_string();
            }
        }
        line_start = end;
    }
    // The line holding the offset.
    let ls = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let le = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = text[ls..le].trim();
    if line.starts_with('[') {
        // The error is about the header itself (e.g. an unknown section).
        let h = line.trim_matches(|c| c == '[' || c == ']').trim();
        return h.to_string();
    }
    let key = line
        .split_once('=')
        .map(|(k, _)| k.trim().trim_matches('"').to_string())
        .unwrap_or_default();
    match (section.is_empty(), key.is_empty()) {
        (true, _) => key,
        (false, true) => section,
        (false, false) => format!("{section}.{key}"),
    }
}
