//! Numbers: the RFC 8259 grammar, IEEE-754 rounding, RFC 8785 §3.2.2.3 output and
//! the strict exactness check.
//!
//! The exactness check compares two *exact decimals*: the literal as written and
//! the ECMAScript serialization of the double it rounds to. Both are normalised to
//! `digits × 10^exp` with no leading or trailing zero digits, so `1`, `1.0`, `1e0`,
//! `10e-1` and `0.1E1` are the same decimal, and `9007199254740993` is not the
//! decimal of `9007199254740992`.

use super::error::JsonErrorKind;

/// Exponents beyond this are clamped: any literal whose exponent reaches it
/// overflows or underflows a double anyway, and a clamped exponent can never
/// equal the small exponent of a serialized double.
const EXP_CLAMP: i64 = 1 << 40;

/// Scans a number literal starting at `start` (which holds `-` or a digit).
/// Returns the end offset. A literal stops at the first byte that cannot
/// continue it; the caller then decides whether that byte is legal there.
pub(crate) fn scan(bytes: &[u8], start: usize) -> Result<usize, (JsonErrorKind, usize)> {
    let at = |i: usize| bytes.get(i).copied();
    let mut i = start;
    if at(i) == Some(b'-') {
        i += 1;
    }
    match at(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => {
            while matches!(at(i), Some(b'0'..=b'9')) {
                i += 1;
            }
        }
        _ => return Err((JsonErrorKind::InvalidNumber, i)),
    }
    if at(i) == Some(b'.') {
        i += 1;
        if !matches!(at(i), Some(b'0'..=b'9')) {
            return Err((JsonErrorKind::InvalidNumber, i));
        }
        while matches!(at(i), Some(b'0'..=b'9')) {
            i += 1;
        }
    }
    if matches!(at(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(at(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !matches!(at(i), Some(b'0'..=b'9')) {
            return Err((JsonErrorKind::InvalidNumber, i));
        }
        while matches!(at(i), Some(b'0'..=b'9')) {
            i += 1;
        }
    }
    Ok(i)
}

/// An exact decimal `(-1)^neg × digits × 10^exp`, normalised: `digits` has no
/// leading or trailing `0`; zero has no digits (and its sign is ignored).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Decimal {
    neg: bool,
    exp: i64,
}

/// Parses a literal that already matched the JSON grammar into a normalised
/// decimal; the significant digits go into `digits` (cleared first).
pub(crate) fn exact_decimal(literal: &[u8], digits: &mut Vec<u8>) -> Decimal {
    digits.clear();
    let mut neg = false;
    let mut frac_len: i64 = 0;
    let mut in_frac = false;
    let mut exp: i64 = 0;
    let mut exp_neg = false;
    let mut iter = literal.iter().copied();
    for b in iter.by_ref() {
        match b {
            b'-' => neg = true,
            b'0'..=b'9' => {
                if !(digits.is_empty() && b == b'0') {
                    digits.push(b);
                }
                if in_frac {
                    frac_len += 1;
                }
            }
            b'.' => in_frac = true,
            _ => break, // 'e' or 'E'
        }
    }
    for b in iter {
        match b {
            b'-' => exp_neg = true,
            b'0'..=b'9' => {
                exp = (exp * 10 + i64::from(b - b'0')).min(EXP_CLAMP);
            }
            _ => {}
        }
    }
    if exp_neg {
        exp = -exp;
    }
    let mut exp = exp - frac_len;
    while digits.last() == Some(&b'0') {
        digits.pop();
        exp += 1;
    }
    if digits.is_empty() {
        return Decimal { neg: false, exp: 0 };
    }
    Decimal { neg, exp }
}

/// Reusable buffers for number checks, so that no number allocates.
#[derive(Default)]
pub(crate) struct NumberScratch {
    literal_digits: Vec<u8>,
    canonical_digits: Vec<u8>,
    buffer: ryu_js::Buffer,
}

impl core::fmt::Debug for NumberScratch {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("NumberScratch")
    }
}

/// Rounds a grammatical literal to a double; with `strict`, refuses it unless
/// the literal's exact value equals the value of its RFC 8785 serialization.
pub(crate) fn evaluate(
    literal: &str,
    strict: bool,
    scratch: &mut NumberScratch,
) -> Result<f64, JsonErrorKind> {
    // Rust's parser is correctly rounded (round-half-even) for any length and
    // accepts every string of the JSON number grammar.
    let value: f64 = literal.parse().map_err(|_| JsonErrorKind::InvalidNumber)?;
    if !value.is_finite() {
        return Err(JsonErrorKind::NumberOverflow);
    }
    if strict {
        let canonical = format(value, &mut scratch.buffer);
        let a = exact_decimal(literal.as_bytes(), &mut scratch.literal_digits);
        let b = exact_decimal(canonical.as_bytes(), &mut scratch.canonical_digits);
        if a != b || scratch.literal_digits != scratch.canonical_digits {
            return Err(JsonErrorKind::NumberNotExact {
                canonical: canonical.to_owned(),
            });
        }
    }
    Ok(value)
}

/// The RFC 8785 §3.2.2.3 (ECMAScript `Number.prototype.toString`) form of a
/// finite double. `-0` gives `0`.
pub(crate) fn format(value: f64, buffer: &mut ryu_js::Buffer) -> &str {
    if value == 0.0 {
        return "0";
    }
    buffer.format_finite(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(s: &str) -> (Decimal, Vec<u8>) {
        let mut d = Vec::new();
        let x = exact_decimal(s.as_bytes(), &mut d);
        (x, d)
    }

    #[test]
    fn spellings_of_one_value_normalise_alike() {
        let one = dec("1");
        for s in ["1.0", "1e0", "10e-1", "0.1E1", "1E+0", "100e-2", "0.001e3"] {
            assert_eq!(dec(s), one, "{s}");
        }
        let zero = dec("0");
        for s in ["-0", "-0.0", "0e10", "-0e-10", "0.000"] {
            assert_eq!(dec(s), zero, "{s}");
        }
        assert_ne!(dec("9007199254740993"), dec("9007199254740992"));
        assert_ne!(dec("-1"), dec("1"));
    }

    #[test]
    fn strict_rejects_inexact_literals() {
        let mut s = NumberScratch::default();
        for lit in [
            "9007199254740993",
            "1e-400",
            "0.10000000000000001",
            "4.9e-324",
            "333333333.33333329",
        ] {
            assert!(
                matches!(
                    evaluate(lit, true, &mut s),
                    Err(JsonErrorKind::NumberNotExact { .. })
                ),
                "{lit}"
            );
            assert!(evaluate(lit, false, &mut s).is_ok(), "{lit}");
        }
        assert_eq!(
            evaluate("1e400", false, &mut s),
            Err(JsonErrorKind::NumberOverflow)
        );
        assert_eq!(evaluate("1e-7", true, &mut s), Ok(1e-7));
    }
}
