//! RFC 3339 UTC timestamps (`2024-05-01T12:00:00Z`) as Kubernetes writes them,
//! without a date crate: the civil-from-days conversion is a dozen lines.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Formats a time as RFC 3339 UTC with whole seconds, like metav1.Time.
pub fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs() as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Formats a time as RFC 3339 UTC with nanoseconds (used by `kubectl logs --timestamps`).
pub fn rfc3339_nanos(t: SystemTime) -> String {
    let dur = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let base = rfc3339(UNIX_EPOCH + Duration::from_secs(dur.as_secs()));
    format!("{}.{:09}Z", &base[..base.len() - 1], dur.subsec_nanos())
}

/// Formats a time as Go's `time.RFC3339Nano` does (what a kubelet writes
/// before each line of `logs?timestamps=true`): nanoseconds with trailing
/// zeros trimmed, no fraction at all on a whole second.
pub fn rfc3339_nano(t: SystemTime) -> String {
    let dur = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let base = rfc3339(UNIX_EPOCH + Duration::from_secs(dur.as_secs()));
    let frac = format!("{:09}", dur.subsec_nanos());
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        return base;
    }
    format!("{}.{frac}Z", &base[..base.len() - 1])
}

/// A time cut to its whole second (what a `metav1.Time` keeps when the API
/// server formats it with `time.RFC3339`).
pub fn whole_second(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs();
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// The current time as RFC 3339 UTC.
pub fn now_rfc3339() -> String {
    rfc3339(SystemTime::now())
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into a SystemTime.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || (b[10] != b'T' && b[10] != b't') {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> { s.get(r)?.parse().ok() };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos: u64 = 0;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let frac = &s[start..i];
        if frac.is_empty() {
            return None;
        }
        let mut digits: String = frac.chars().take(9).collect();
        while digits.len() < 9 {
            digits.push('0');
        }
        nanos = digits.parse().ok()?;
    }
    let offset_secs: i64 = match b.get(i) {
        Some(b'Z') | Some(b'z') if i + 1 == b.len() => 0,
        Some(sign @ (b'+' | b'-')) if i + 6 == b.len() => {
            let oh: i64 = s.get(i + 1..i + 3)?.parse().ok()?;
            let om: i64 = s.get(i + 4..i + 6)?.parse().ok()?;
            let off = oh * 3600 + om * 60;
            if *sign == b'+' {
                off
            } else {
                -off
            }
        }
        _ => return None,
    };
    let days = days_from_civil(y, mo, d);
    let secs = days * 86_400 + h * 3600 + mi * 60 + se - offset_secs;
    if secs < 0 {
        return None;
    }
    Some(UNIX_EPOCH + Duration::from_secs(secs as u64) + Duration::from_nanos(nanos))
}

// Howard Hinnant's algorithms (public domain), proleptic Gregorian calendar.
/// The date (year, month, day) of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
pub(crate) fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // leap day 2000
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn nano_stamps_trim_trailing_zeros_like_go() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(rfc3339_nano(t), "2023-11-14T22:13:20Z");
        let t2 = t + Duration::from_millis(250);
        assert_eq!(rfc3339_nano(t2), "2023-11-14T22:13:20.25Z");
        let t3 = t + Duration::from_nanos(1);
        assert_eq!(rfc3339_nano(t3), "2023-11-14T22:13:20.000000001Z");
        for x in [t, t2, t3] {
            assert_eq!(parse_rfc3339(&rfc3339_nano(x)), Some(x));
        }
        assert_eq!(whole_second(t2), t);
        assert_eq!(whole_second(t), t);
    }

    #[test]
    fn parses_what_it_formats_and_offsets() {
        for secs in [0u64, 951_782_400, 1_700_000_000, 4_102_444_800] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            assert_eq!(parse_rfc3339(&rfc3339(t)), Some(t));
        }
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_millis(250);
        assert_eq!(parse_rfc3339("2023-11-14T22:13:20.25Z"), Some(t));
        assert_eq!(parse_rfc3339(&rfc3339_nanos(t)), Some(t));
        assert_eq!(
            parse_rfc3339("2023-11-15T00:13:20+02:00"),
            Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        );
        for bad in [
            "",
            "2023-11-14",
            "2023-13-14T22:13:20Z",
            "2023-11-14T22:13:20",
            "x023-11-14T22:13:20Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }
}
