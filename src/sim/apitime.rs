//! `metav1.Time` and `metav1.MicroTime` as the API server decodes and
//! encodes them: a body's time is parsed with Go's `time.Parse` against
//! `time.RFC3339` (`Time`) or `2006-01-02T15:04:05.000000Z07:00`
//! (`MicroTime`), and written back in UTC with whole seconds or exactly six
//! fractional digits. A value Go would refuse is refused with Go's own
//! error text (`parsing time "x" as "…": cannot parse "x" as "2006"`),
//! which the API server puts in its 400 (`… cannot be handled as a Lease:
//! parsing time …`).
//!
//! The parser walks the layout's elements the way Go's `time.parse` does
//! (the prefix literal, then the element; `hold` is the value at the
//! element's start, which the error names), so its refusals read the same.

use crate::kube::time::{civil_from_days, days_from_civil};

/// The two layouts the API's time types use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `metav1.Time`: `time.RFC3339`. A fraction after the seconds is
    /// accepted (any number of digits) and dropped on output.
    Rfc3339,
    /// `metav1.MicroTime`: exactly six fractional digits, kept.
    Micro,
}

impl Layout {
    /// Go's layout string, as the error names it.
    pub fn text(self) -> &'static str {
        match self {
            Layout::Rfc3339 => "2006-01-02T15:04:05Z07:00",
            Layout::Micro => "2006-01-02T15:04:05.000000Z07:00",
        }
    }
}

/// An instant in UTC: seconds since the epoch and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant {
    pub secs: i64,
    pub nanos: u32,
}

impl Instant {
    /// The instant of a `SystemTime` (before the epoch: the epoch).
    pub fn from_system(t: std::time::SystemTime) -> Instant {
        let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        Instant {
            secs: d.as_secs() as i64,
            nanos: d.subsec_nanos(),
        }
    }

    /// Now.
    pub fn now() -> Instant {
        Instant::from_system(std::time::SystemTime::now())
    }

    /// `2006-01-02T15:04:05.000000Z` in UTC (MicroTime's encoding: the
    /// nanoseconds cut, not rounded, to microseconds).
    pub fn micro(self) -> String {
        format!("{}.{:06}Z", self.date_time(), self.nanos / 1_000)
    }

    /// `2006-01-02T15:04:05Z` in UTC (Time's encoding: the fraction cut).
    pub fn seconds(self) -> String {
        format!("{}Z", self.date_time())
    }

    fn date_time(self) -> String {
        let days = self.secs.div_euclid(86_400);
        let rem = self.secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
            rem / 3600,
            (rem % 3600) / 60,
            rem % 60
        )
    }
}

fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's `%q` of a string (close enough: JSON escaping).
fn quote(s: &str) -> String {
    crate::sim::store::error::quote(s)
}

/// What went wrong, and where: Go's `time.ParseError`.
enum Fail {
    /// `cannot parse VALUE as ELEM`.
    Bad { value: String, elem: &'static str },
    /// `: MESSAGE` after the value (`month out of range`, `extra text: …`).
    Message(String),
}

fn bad(value: &str, elem: &'static str) -> Fail {
    Fail::Bad {
        value: value.to_string(),
        elem,
    }
}

fn range(what: &str) -> Fail {
    Fail::Message(format!(": {what} out of range"))
}

/// Go's `getnum`: one or two digits (`fixed`: exactly two).
fn getnum(s: &str, fixed: bool) -> Option<(i64, &str)> {
    let b = s.as_bytes();
    if !b.first().is_some_and(u8::is_ascii_digit) {
        return None;
    }
    if !b.get(1).is_some_and(u8::is_ascii_digit) {
        if fixed {
            return None;
        }
        return Some((i64::from(b[0] - b'0'), &s[1..]));
    }
    Some((
        i64::from(b[0] - b'0') * 10 + i64::from(b[1] - b'0'),
        &s[2..],
    ))
}

/// Go's `atoi` (an optional sign, then digits only).
fn atoi(s: &str) -> Option<i64> {
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    Some(if neg { -n } else { n })
}

/// Go's `parseNanoseconds`: `value[..nbytes]` is a separator and digits.
fn nanoseconds(value: &str, nbytes: usize) -> Result<u32, Fail> {
    let b = value.as_bytes();
    if !matches!(b.first(), Some(b'.') | Some(b',')) {
        return Err(Fail::Message(String::new()));
    }
    let nbytes = nbytes.min(10);
    let Some(mut ns) = value.get(1..nbytes).and_then(atoi) else {
        return Err(Fail::Message(String::new()));
    };
    if ns < 0 {
        return Err(range("fractional second"));
    }
    for _ in nbytes - 1..9 {
        ns *= 10;
    }
    Ok(ns as u32)
}

/// Parses `value` as Go's `time.Parse(layout, value)` would; the error is
/// Go's text.
pub fn parse(value: &str, layout: Layout) -> Result<Instant, String> {
    parse_inner(value, layout).map_err(|f| match f {
        Fail::Bad { value: v, elem } => format!(
            "parsing time {} as {}: cannot parse {} as {}",
            quote(value),
            quote(layout.text()),
            quote(&v),
            quote(elem)
        ),
        Fail::Message(m) => format!("parsing time {}{m}", quote(value)),
    })
}

fn skip<'a>(value: &'a str, prefix: &'static str) -> Result<&'a str, Fail> {
    value.strip_prefix(prefix).ok_or_else(|| bad(value, prefix))
}

fn parse_inner(value: &str, layout: Layout) -> Result<Instant, Fail> {
    // 2006
    let v = value;
    if v.len() < 4 || !v.as_bytes()[0].is_ascii_digit() || !v.is_char_boundary(4) {
        return Err(bad(v, "2006"));
    }
    let year = atoi(&v[..4]).ok_or_else(|| bad(v, "2006"))?;
    let v = &v[4..];
    // -01
    let v = skip(v, "-")?;
    let (month, rest) = getnum(v, true).ok_or_else(|| bad(v, "01"))?;
    if !(1..=12).contains(&month) {
        return Err(range("month"));
    }
    let v = rest;
    // -02
    let v = skip(v, "-")?;
    let (day, v) = getnum(v, true).ok_or_else(|| bad(v, "02"))?;
    // T15
    let v = skip(v, "T")?;
    let (hour, rest) = getnum(v, false).ok_or_else(|| bad(v, "15"))?;
    if hour >= 24 {
        return Err(range("hour"));
    }
    let v = rest;
    // :04
    let v = skip(v, ":")?;
    let (min, rest) = getnum(v, true).ok_or_else(|| bad(v, "04"))?;
    if min >= 60 {
        return Err(range("minute"));
    }
    let v = rest;
    // :05, and a fraction the layout does not name (RFC3339)
    let v = skip(v, ":")?;
    let (sec, rest) = getnum(v, true).ok_or_else(|| bad(v, "05"))?;
    if sec >= 60 {
        return Err(range("second"));
    }
    let mut v = rest;
    let mut nanos = 0;
    let b = v.as_bytes();
    let has_fraction = b.len() >= 2 && matches!(b[0], b'.' | b',') && b[1].is_ascii_digit();
    match layout {
        Layout::Rfc3339 if has_fraction => {
            let n = 2 + b[2..].iter().take_while(|c| c.is_ascii_digit()).count();
            nanos = nanoseconds(v, n).map_err(|f| match f {
                Fail::Message(m) if m.is_empty() => bad(v, "05"),
                f => f,
            })?;
            v = &v[n..];
        }
        Layout::Rfc3339 => {}
        Layout::Micro => {
            // .000000: exactly six digits.
            if v.len() < 7 || !v.is_char_boundary(7) {
                return Err(bad(v, ".000000"));
            }
            nanos = nanoseconds(v, 7).map_err(|f| match f {
                Fail::Message(m) if m.is_empty() => bad(v, ".000000"),
                f => f,
            })?;
            v = &v[7..];
        }
    }
    // Z07:00
    let offset = if let Some(rest) = v.strip_prefix('Z') {
        v = rest;
        0
    } else {
        let b = v.as_bytes();
        if b.len() < 6 || b[3] != b':' || !v.is_char_boundary(6) {
            return Err(bad(v, "Z07:00"));
        }
        let (sign, hh, mm) = (b[0], &v[1..3], &v[4..6]);
        let (Some((hr, _)), Some((mn, _))) = (getnum(hh, true), getnum(mm, true)) else {
            return Err(bad(v, "Z07:00"));
        };
        if hr > 24 {
            return Err(range("time zone offset hour"));
        }
        if mn > 60 {
            return Err(range("time zone offset minute"));
        }
        let off = (hr * 60 + mn) * 60;
        let off = match sign {
            b'+' => off,
            b'-' => -off,
            _ => return Err(bad(v, "Z07:00")),
        };
        v = &v[6..];
        off
    };
    if !v.is_empty() {
        return Err(Fail::Message(format!(": extra text: {}", quote(v))));
    }
    if day < 1 || day > days_in(month, year) {
        return Err(range("day"));
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset;
    Ok(Instant { secs, nanos })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn micro(s: &str) -> Result<String, String> {
        parse(s, Layout::Micro).map(Instant::micro)
    }

    #[test]
    fn micro_time_round_trips_and_refuses_as_go_does() {
        // Each answer checked against kube-apiserver v1.36.3 (a Lease's
        // renewTime).
        assert_eq!(
            micro("2026-01-01T01:00:00.123456+01:00").unwrap(),
            "2026-01-01T00:00:00.123456Z"
        );
        assert_eq!(
            micro("2026-01-01T00:00:00,123456Z").unwrap(),
            "2026-01-01T00:00:00.123456Z"
        );
        let layout = r#"as "2006-01-02T15:04:05.000000Z07:00""#;
        for (input, tail) in [
            ("2026-01-01T00:00:00Z", r#"cannot parse "Z" as ".000000""#),
            (
                "2026-01-01T00:00:00.123Z",
                r#"cannot parse ".123Z" as ".000000""#,
            ),
            (
                "2026-01-01T01:00:00.123456789+01:00",
                r#"cannot parse "789+01:00" as "Z07:00""#,
            ),
            (
                "2026-01-01t00:00:00.123456z",
                r#"cannot parse "t00:00:00.123456z" as "T""#,
            ),
            ("", r#"cannot parse "" as "2006""#),
            ("yesterday", r#"cannot parse "yesterday" as "2006""#),
            ("2026-01-01T00:00:00", r#"cannot parse "" as ".000000""#),
        ] {
            assert_eq!(
                micro(input).unwrap_err(),
                format!("parsing time {} {layout}: {tail}", quote(input)),
                "{input}"
            );
        }
        assert_eq!(
            micro("2026-13-01T00:00:00.123456Z").unwrap_err(),
            r#"parsing time "2026-13-01T00:00:00.123456Z": month out of range"#
        );
        assert_eq!(
            micro("2026-02-30T00:00:00.123456Z").unwrap_err(),
            r#"parsing time "2026-02-30T00:00:00.123456Z": day out of range"#
        );
        assert_eq!(
            micro("2026-02-01T00:00:00.123456Zx").unwrap_err(),
            r#"parsing time "2026-02-01T00:00:00.123456Zx": extra text: "x""#
        );
        assert_eq!(
            micro("2024-02-29T23:59:59.999999-00:30").unwrap(),
            "2024-03-01T00:29:59.999999Z"
        );
    }

    #[test]
    fn time_takes_any_fraction_and_drops_it() {
        let t = |s: &str| parse(s, Layout::Rfc3339).map(Instant::seconds);
        assert_eq!(t("2026-01-01T00:00:00Z").unwrap(), "2026-01-01T00:00:00Z");
        assert_eq!(
            t("2026-01-01T00:00:00.987654321Z").unwrap(),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            t("2026-01-01T02:00:00+02:00").unwrap(),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(
            t("2026-01-01 00:00:00Z").unwrap_err(),
            r#"parsing time "2026-01-01 00:00:00Z" as "2006-01-02T15:04:05Z07:00": cannot parse " 00:00:00Z" as "T""#
        );
        assert_eq!(
            Instant {
                secs: 0,
                nanos: 999_999_999
            }
            .micro(),
            "1970-01-01T00:00:00.999999Z"
        );
    }
}
