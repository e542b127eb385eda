//! Kubernetes resource quantities (`500m`, `1`, `1.5Gi`, `2e3`, `128974848`),
//! parsed into an exact integer of nano-units so two quantities compare
//! without floating point. Sans-IO.
//!
//! Grammar (apimachinery `resource.Quantity`): an optional sign, digits with
//! an optional fraction, then one suffix: binary `Ki Mi Gi Ti Pi Ei`,
//! decimal `n u m` (none) `k M G T P E`, or a decimal exponent `e<int>` /
//! `E<int>`. Fractions finer than a nano-unit are rounded up, as upstream
//! does. Negative quantities parse (upstream allows them) but resource
//! ceilings refuse them; values beyond about 10^29 are refused as out of
//! range rather than wrapped.

use std::cmp::Ordering;

/// A parsed quantity: the value times 10^9.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity {
    nanos: i128,
}

/// Why a string is not a quantity; each carries the string as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuantityError {
    /// Not the quantity syntax (number, optional suffix).
    Syntax(String),
    /// A quantity too large (or too precise) to hold exactly.
    OutOfRange(String),
}

impl std::fmt::Display for QuantityError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuantityError::Syntax(s) => write!(
                f,
                "{s:?} is not a Kubernetes quantity (e.g. \"500m\", \"1\", \"1Gi\")"
            ),
            QuantityError::OutOfRange(s) => write!(f, "{s:?} is out of range"),
        }
    }
}

impl std::error::Error for QuantityError {}

const NANO: i128 = 1_000_000_000;

impl Quantity {
    /// Parses a quantity string; `Err` says what is wrong.
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        let bad = || QuantityError::Syntax(s.to_string());
        if s.is_empty() || s.len() > 64 {
            return Err(bad());
        }
        let b = s.as_bytes();
        let mut i = 0;
        let negative = match b[0] {
            b'-' => {
                i = 1;
                true
            }
            b'+' => {
                i = 1;
                false
            }
            _ => false,
        };
        let int_start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int_digits = &s[int_start..i];
        let mut frac_digits = "";
        if i < b.len() && b[i] == b'.' {
            let fs = i + 1;
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            frac_digits = &s[fs..i];
        }
        if int_digits.is_empty() && frac_digits.is_empty() {
            return Err(bad());
        }
        // The suffix: a multiplier as (numerator, power of ten) so decimal
        // exponents stay exact.
        let suffix = &s[i..];
        let (mult, pow10): (i128, i32) = match suffix {
            "" => (1, 0),
            "n" => (1, -9),
            "u" => (1, -6),
            "m" => (1, -3),
            "k" => (1, 3),
            "M" => (1, 6),
            "G" => (1, 9),
            "T" => (1, 12),
            "P" => (1, 15),
            "E" => (1, 18),
            "Ki" => (1 << 10, 0),
            "Mi" => (1 << 20, 0),
            "Gi" => (1 << 30, 0),
            "Ti" => (1 << 40, 0),
            "Pi" => (1 << 50, 0),
            "Ei" => (1 << 60, 0),
            _ if suffix.starts_with(['e', 'E']) => {
                let exp = &suffix[1..];
                let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
                if digits.is_empty()
                    || digits.len() > 3
                    || !digits.bytes().all(|c| c.is_ascii_digit())
                {
                    return Err(bad());
                }
                let e: i32 = exp.parse().map_err(|_| bad())?;
                (1, e)
            }
            _ => return Err(bad()),
        };
        // mantissa = int.frac as an integer, scaled by 10^-len(frac).
        let digits = format!("{int_digits}{frac_digits}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(QuantityError::OutOfRange(s.to_string()));
        }
        let mantissa: i128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| bad())?
        };
        // value in nanos = mantissa * mult * 10^(pow10 + 9 - frac_len)
        let scale = pow10 + 9 - frac_digits.len() as i32;
        let range = || QuantityError::OutOfRange(s.to_string());
        let mut v = mantissa.checked_mul(mult).ok_or_else(range)?;
        if scale >= 0 {
            let p = 10i128.checked_pow(scale as u32).ok_or_else(range)?;
            v = v.checked_mul(p).ok_or_else(range)?;
        } else {
            let p = 10i128.checked_pow((-scale) as u32);
            v = match p {
                // Finer than a nano-unit: round up (upstream does), so a
                // tiny non-zero value never becomes zero.
                Some(p) => (v + p - 1) / p,
                None => i128::from(v != 0),
            };
        }
        if v > 100_000_000_000_000_000_000 * NANO {
            return Err(range());
        }
        Ok(Quantity {
            nanos: if negative { -v } else { v },
        })
    }

    /// The value in nano-units (`1` is 10^9, `1m` is 10^6).
    pub fn nanos(self) -> i128 {
        self.nanos
    }

    pub fn is_positive(self) -> bool {
        self.nanos > 0
    }
}

/// Compares two quantity strings; `None` when either does not parse.
pub fn compare(a: &str, b: &str) -> Option<Ordering> {
    Some(Quantity::parse(a).ok()?.cmp(&Quantity::parse(b).ok()?))
}

/// The value a container gets: `requested` when it parses, is positive and
/// is not above `ceiling`; otherwise the ceiling itself (written as
/// configured).
pub fn clamp(requested: Option<&str>, ceiling: &str) -> String {
    match requested {
        Some(r) => match (Quantity::parse(r), Quantity::parse(ceiling)) {
            (Ok(rq), Ok(cq)) if rq.is_positive() && rq <= cq => r.to_string(),
            _ => ceiling.to_string(),
        },
        None => ceiling.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(s: &str) -> i128 {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{e}")).nanos()
    }

    #[test]
    fn suffixes() {
        assert_eq!(n("1"), NANO);
        assert_eq!(n("500m"), NANO / 2);
        assert_eq!(n("0.5"), NANO / 2);
        assert_eq!(n(".5"), NANO / 2);
        assert_eq!(n("1."), NANO);
        assert_eq!(n("100n"), 100);
        assert_eq!(n("3u"), 3000);
        assert_eq!(n("1k"), 1000 * NANO);
        assert_eq!(n("1M"), 1_000_000 * NANO);
        assert_eq!(n("2G"), 2_000_000_000 * NANO);
        assert_eq!(n("1Ki"), 1024 * NANO);
        assert_eq!(n("1Mi"), (1 << 20) * NANO);
        assert_eq!(n("1.5Gi"), (3 << 29) * NANO);
        assert_eq!(n("1Ei"), (1i128 << 60) * NANO);
        assert_eq!(n("1E"), 10i128.pow(18) * NANO);
        assert_eq!(n("2e3"), 2000 * NANO);
        assert_eq!(n("2E-3"), 2_000_000);
        assert_eq!(n("1e+2"), 100 * NANO);
        assert_eq!(n("128974848"), 128_974_848 * NANO);
        assert_eq!(n("-1"), -NANO);
        assert_eq!(n("+1"), NANO);
        assert_eq!(n("0"), 0);
        assert_eq!(n("000.000"), 0);
    }

    #[test]
    fn finer_than_nano_rounds_up() {
        assert_eq!(n("0.1n"), 1);
        assert_eq!(n("1e-12"), 1);
        assert_eq!(n("0.0000000001"), 1);
        assert_eq!(n("0e-12"), 0);
    }

    #[test]
    fn refusals() {
        for bad in [
            "", "m", "1mi", "1 Gi", "Gi", "1KiB", "1.2.3", "--1", "1e", "1e1000", "abc", "1Gi ",
            "0x10", "١",
        ] {
            assert!(Quantity::parse(bad).is_err(), "{bad:?} parsed");
        }
        assert!(Quantity::parse(&"9".repeat(40)).is_err());
        assert!(Quantity::parse("1e40").is_err());
        assert!(Quantity::parse("999999Ei").is_err());
    }

    #[test]
    fn comparison() {
        assert_eq!(compare("1", "1000m"), Some(Ordering::Equal));
        assert_eq!(compare("1Gi", "1G"), Some(Ordering::Greater));
        assert_eq!(compare("1024Mi", "1Gi"), Some(Ordering::Equal));
        assert_eq!(compare("250m", "0.3"), Some(Ordering::Less));
        assert_eq!(compare("x", "1"), None);
    }

    #[test]
    fn clamping() {
        assert_eq!(clamp(None, "1"), "1");
        assert_eq!(clamp(Some("500m"), "1"), "500m");
        assert_eq!(clamp(Some("1000m"), "1"), "1000m");
        assert_eq!(clamp(Some("2"), "1"), "1");
        assert_eq!(clamp(Some("lots"), "1Gi"), "1Gi");
        assert_eq!(clamp(Some("0"), "1Gi"), "1Gi");
        assert_eq!(clamp(Some("-1"), "1Gi"), "1Gi");
        assert_eq!(clamp(Some("512Mi"), "1Gi"), "512Mi");
        assert_eq!(clamp(Some("1.5Gi"), "1Gi"), "1Gi");
    }
}
