//! Numbers: the RFC 8259 grammar, IEEE-754 rounding, RFC 8785 §3.2.2.3 output and
//! the strict exactness check.
//!
//! The exactness check compares two *exact decimals*: the literal as written and
//! the ECMAScript serialization of the double it rounds to. Both are normalised to
//! `digits × 10^exp` with no leading or trailing zero digits, so `1`, `1.0`, `1e0`,
//! `10e-1` and `0.1E1` are the same decimal, and `9007199254740993` is not the
//! decimal of `9007199254740992`.

use crate::prelude::*;

use super::error::JsonErrorKind;

/// Exponents beyond this are clamped: any literal whose exponent reaches it
/// overflows or underflows a double anyway, and a clamped exponent can never
/// equal the small exponent of a serialized double.
const EXP_CLAMP: i64 = 1 << 40;

/// Scans a number literal starting at `start` (which holds `-` or a digit).
/// Returns the end offset, and whether the literal is already in canonical
/// plain form (see [`is_canonical_plain`], computed in the same pass). A
/// literal stops at the first byte that cannot continue it; the caller then
/// decides whether that byte is legal there.
pub(crate) fn scan(bytes: &[u8], start: usize) -> Result<(usize, bool), (JsonErrorKind, usize)> {
    let at = |i: usize| bytes.get(i).copied();
    let digits_from = |i: usize| digits_end(bytes, i);
    let mut i = start;
    let neg = at(i) == Some(b'-');
    if neg {
        i += 1;
    }
    let int_start = i;
    let int_zero = match at(i) {
        Some(b'0') => {
            i += 1;
            true
        }
        Some(b'1'..=b'9') => {
            i = digits_from(i + 1);
            false
        }
        _ => return Err((JsonErrorKind::InvalidNumber, i)),
    };
    let int_len = i - int_start;
    let mut plain = if int_zero {
        !neg
    } else {
        int_len <= SHORTCUT_DIGITS
    };
    if at(i) == Some(b'.') {
        i += 1;
        let frac_start = i;
        if !matches!(at(i), Some(b'0'..=b'9')) {
            return Err((JsonErrorKind::InvalidNumber, i));
        }
        i = digits_from(i);
        let frac = bytes.get(frac_start..i).unwrap_or_default();
        plain = frac.last() != Some(&b'0')
            && if int_zero {
                let zeros = frac.iter().take_while(|&&b| b == b'0').count();
                zeros < 6 && frac.len() - zeros <= SHORTCUT_DIGITS
            } else {
                int_len + frac.len() <= SHORTCUT_DIGITS
            };
    }
    if matches!(at(i), Some(b'e' | b'E')) {
        plain = false;
        i += 1;
        if matches!(at(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if !matches!(at(i), Some(b'0'..=b'9')) {
            return Err((JsonErrorKind::InvalidNumber, i));
        }
        i = digits_from(i);
    }
    Ok((i, plain))
}

/// The offset of the first byte at or after `i` that is not an ASCII digit,
/// eight bytes at a time.
fn digits_end(bytes: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    while let Some(chunk) = bytes.get(i..i.saturating_add(8)) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        // Digits become 0..=9; the high bit of each byte of `non_digit` is
        // set iff that byte is 10 or more (no carries cross bytes: the high
        // bit is masked off before adding).
        let x = u64::from_le_bytes(chunk) ^ (LO * 0x30);
        let non_digit = (((x & (LO * 0x7f)) + LO * 0x76) | x) & HI;
        if non_digit != 0 {
            return i + (non_digit.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while bytes.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    i
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

/// Where the canonical text of a number literal is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Canonical {
    /// The literal is its own canonical form.
    Literal,
    /// The canonical form was appended to the output buffer.
    Appended,
}

/// The most significant digits a decimal may have for the shortcut in
/// [`canonicalize`]: any decimal of at most 15 (`DBL_DIG`) significant digits
/// in the normal range is the only one of that length that rounds to its
/// double, so the shortest round-trip digits of that double are its own.
const SHORTCUT_DIGITS: usize = 15;

/// Checks a grammatical literal and finds its RFC 8785 §3.2.2.3 form: either
/// the literal itself or text appended to `out`. With `strict`, refuses it
/// unless the literal's exact value equals the value of that form.
///
/// Literals of at most 15 significant digits whose form has no exponent
/// (`1e-7 < |x| < 1e21`) are written from their own digits (see
/// [`SHORTCUT_DIGITS`]) without rounding to a double and formatting it; the
/// rest go through [`evaluate`].
///
/// `plain` is [`scan`]'s verdict: the literal is its own canonical form.
pub(crate) fn canonicalize(
    literal: &str,
    plain: bool,
    strict: bool,
    scratch: &mut NumberScratch,
    out: &mut String,
) -> Result<Canonical, JsonErrorKind> {
    if plain {
        return Ok(Canonical::Literal);
    }
    let bytes = literal.as_bytes();
    let dec = exact_decimal(bytes, &mut scratch.literal_digits);
    let digits = &scratch.literal_digits;
    let k = digits.len() as i64;
    let n = dec.exp.saturating_add(k);
    if digits.is_empty() || (digits.len() <= SHORTCUT_DIGITS && -6 < n && n <= 21) {
        let start = out.len();
        if digits.is_empty() {
            out.push('0');
        } else {
            if dec.neg {
                out.push('-');
            }
            push_plain(digits, n, out);
        }
        return Ok(finish(literal, start, out));
    }
    let value = evaluate(literal, strict, scratch)?;
    let start = out.len();
    out.push_str(format(value, &mut scratch.buffer));
    Ok(finish(literal, start, out))
}

/// Appends the RFC 8785 form of the grammatical `literal` to `out`: the
/// literal itself, or the text [`canonicalize`] makes in `text` (cleared
/// first). `plain` and `strict` are as for [`canonicalize`].
pub(crate) fn write_canonical(
    literal: &str,
    plain: bool,
    strict: bool,
    scratch: &mut NumberScratch,
    text: &mut String,
    out: &mut Vec<u8>,
) -> Result<(), JsonErrorKind> {
    text.clear();
    match canonicalize(literal, plain, strict, scratch, text)? {
        Canonical::Literal => out.extend_from_slice(literal.as_bytes()),
        Canonical::Appended => out.extend_from_slice(text.as_bytes()),
    }
    Ok(())
}

/// (The specification of `scan`'s `plain`, kept for the tests.)
///
/// Whether a grammatical literal is already in its canonical form without
/// an exponent, in one pass and without normalising it: `-?I(.F)?` with at most
/// [`SHORTCUT_DIGITS`] significant digits, `F` not ending in `0`, not `-0`, and
/// for `0.F` fewer than six zeros after the point (`0.000001` is plain,
/// `0.0000001` is `1e-7`). `I` has no leading zero (the grammar) and at most 15
/// digits, so it never reaches the exponent form at `1e21`.
#[cfg(test)]
fn is_canonical_plain(bytes: &[u8]) -> bool {
    let unsigned = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let (int, frac) = match unsigned.iter().position(|&b| !b.is_ascii_digit()) {
        None => (unsigned, &b""[..]),
        Some(i) => match unsigned.split_at(i) {
            (int, [b'.', frac @ ..]) => (int, frac),
            _ => return false, // an exponent
        },
    };
    if frac.is_empty() {
        // `0` (not `-0`) or an integer without leading zero.
        return if int == b"0" {
            unsigned.len() == bytes.len()
        } else {
            int.len() <= SHORTCUT_DIGITS
        };
    }
    if !frac.iter().all(u8::is_ascii_digit) || frac.last() == Some(&b'0') {
        return false;
    }
    if int == b"0" {
        let zeros = frac.iter().take_while(|&&b| b == b'0').count();
        zeros < 6 && frac.len() - zeros <= SHORTCUT_DIGITS
    } else {
        int.len() + frac.len() <= SHORTCUT_DIGITS
    }
}

/// ECMAScript `Number::toString` without an exponent (`-6 < n <= 21`) for the
/// significant `digits` (ASCII, no leading or trailing zero) times
/// `10^(n - digits.len())`.
fn push_plain(digits: &[u8], n: i64, out: &mut String) {
    let digits = core::str::from_utf8(digits).unwrap_or_default();
    let k = digits.len() as i64;
    if k <= n {
        out.push_str(digits);
        for _ in k..n {
            out.push('0');
        }
    } else if n > 0 {
        let (int, frac) = digits.split_at(usize::try_from(n).unwrap_or_default());
        out.push_str(int);
        out.push('.');
        out.push_str(frac);
    } else {
        out.push_str("0.");
        for _ in n..0 {
            out.push('0');
        }
        out.push_str(digits);
    }
}

/// Keeps the text appended from `start` unless it repeats the literal.
fn finish(literal: &str, start: usize, out: &mut String) -> Canonical {
    if out.get(start..) == Some(literal) {
        out.truncate(start);
        Canonical::Literal
    } else {
        Canonical::Appended
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

    /// The slow path: round to a double, check, format.
    fn slow(lit: &str, strict: bool) -> Result<String, JsonErrorKind> {
        let mut s = NumberScratch::default();
        let v = evaluate(lit, strict, &mut s)?;
        Ok(format(v, &mut ryu_js::Buffer::new()).to_owned())
    }

    fn fast(lit: &str, strict: bool) -> Result<String, JsonErrorKind> {
        let mut s = NumberScratch::default();
        let mut out = String::from("junk");
        let (end, plain) = scan(lit.as_bytes(), 0).unwrap();
        assert_eq!(end, lit.len());
        assert_eq!(plain, is_canonical_plain(lit.as_bytes()), "{lit}");
        if plain {
            // The literal must survive the full path unchanged.
            assert_eq!(
                canonicalize(lit, false, strict, &mut s, &mut out),
                Ok(Canonical::Literal),
                "not plain after all: {lit}"
            );
        }
        Ok(match canonicalize(lit, plain, strict, &mut s, &mut out)? {
            Canonical::Literal => {
                assert_eq!(out, "junk");
                lit.to_owned()
            }
            Canonical::Appended => out.split_off(4),
        })
    }

    #[test]
    fn digits_end_finds_the_first_non_digit() {
        let text = b"0123456789012345678/9:0a1\xff2 34567890123456789";
        for i in 0..=text.len() {
            let want = text
                .iter()
                .skip(i)
                .position(|b| !b.is_ascii_digit())
                .map_or(text.len(), |p| p + i);
            assert_eq!(digits_end(text, i), want, "{i}");
        }
        let all: Vec<u8> = (0..=255).collect();
        for i in 0..all.len() {
            let want = if all[i].is_ascii_digit() {
                usize::from(b'9') + 1
            } else {
                i
            };
            assert_eq!(digits_end(&all, i), want.max(i), "{i}");
        }
    }

    #[test]
    fn plain_canonical_literals() {
        for lit in [
            "0",
            "1",
            "-1",
            "123.457",
            "0.5",
            "-0.000001",
            "123456789012345",
            "0.123456789012345",
        ] {
            assert!(is_canonical_plain(lit.as_bytes()), "{lit}");
        }
        for lit in [
            "-0",
            "1.0",
            "0.0",
            "-0.0",
            "1e2",
            "0.0000001",
            "1234567890123456",
            "0.1234567890123456",
            "12345678.12345678",
            "1.50",
        ] {
            assert!(!is_canonical_plain(lit.as_bytes()), "{lit}");
        }
    }

    #[test]
    fn shortcut_agrees_with_rounding_and_formatting() {
        let fixed = [
            "0",
            "-0",
            "0.0",
            "-0.0e5",
            "1",
            "-1",
            "10",
            "1e2",
            "1E+2",
            "1.0",
            "1.50",
            "25e-1",
            "0.000001",
            "0.0000001",
            "1e-7",
            "1e20",
            "1e21",
            "1e22",
            "123456789012345",
            "1234567890123456",
            "999999999999999e6",
            "999999999999999e7",
            "0.1",
            "-0.5e-5",
            "36028797018964100",
            "36028797018964100.000",
            "9007199254740993",
            "1e-400",
            "1e400",
            "4.9e-324",
            "5e-324",
            "1.7976931348623157e308",
            "100000000000000000000",
            "0.10000000000000001",
            "00",
            "-01",
        ];
        for lit in fixed {
            if scan(lit.as_bytes(), 0).map(|s| s.0) != Ok(lit.len()) {
                continue;
            }
            for strict in [true, false] {
                assert_eq!(
                    fast(lit, strict),
                    slow(lit, strict),
                    "{lit} strict={strict}"
                );
            }
        }
        // mulberry32: literals of 1..=17 digits with a point and an exponent.
        let mut state: u32 = 0x5eed;
        let mut next = move || {
            state = state.wrapping_add(0x6d2b_79f5);
            let mut t = state;
            t = (t ^ (t >> 15)).wrapping_mul(t | 1);
            t ^= t.wrapping_add((t ^ (t >> 7)).wrapping_mul(t | 61));
            t ^ (t >> 14)
        };
        for _ in 0..200_000 {
            let mut lit = String::new();
            if next() % 2 == 0 {
                lit.push('-');
            }
            let len = 1 + next() % 17;
            let point = next() % (len + 1);
            for i in 0..len {
                if i == point && i > 0 {
                    lit.push('.');
                }
                let d = if i == 0 && len > 1 && point != 1 {
                    1 + next() % 9
                } else {
                    next() % 10
                };
                lit.push(char::from(b'0' + d as u8));
            }
            if next() % 3 == 0 {
                lit.push('e');
                let e = next() % 30;
                if next() % 2 == 0 {
                    lit.push('-');
                }
                lit.push_str(&e.to_string());
            }
            if scan(lit.as_bytes(), 0).map(|s| s.0) != Ok(lit.len()) {
                continue;
            }
            for strict in [true, false] {
                assert_eq!(
                    fast(&lit, strict),
                    slow(&lit, strict),
                    "{lit} strict={strict}"
                );
            }
        }
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
