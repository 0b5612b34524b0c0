//! String literals read straight from the (validated) input: scanning,
//! comparing member names by UTF-16 code units without unescaping them into
//! a buffer, and writing them in RFC 8785 form.

use crate::prelude::*;

use core::cmp::Ordering;

use super::error::JsonErrorKind;

/// The offset of the first byte at or after `i` that is `"`, `\\` or a control
/// byte (U+0000..U+001F), eight bytes at a time. Exact when that byte lies in a
/// whole eight-byte chunk; in the last partial chunk it may stop early (up to
/// eight bytes before the end), so callers finish byte by byte.
pub(crate) fn skip_plain(bytes: &[u8], mut i: usize) -> usize {
    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;
    // Non-zero iff some byte of `v` is below `n` (n <= 0x80).
    let below = |v: u64, n: u64| v.wrapping_sub(LO * n) & !v & HI;
    while let Some(chunk) = bytes.get(i..i.saturating_add(8)) {
        let Ok(chunk) = <[u8; 8]>::try_from(chunk) else {
            break;
        };
        let w = u64::from_le_bytes(chunk);
        let special = below(w, 0x20)
            | below(w ^ (LO * u64::from(b'"')), 1)
            | below(w ^ (LO * u64::from(b'\\')), 1);
        if special != 0 {
            // A borrow can only flag bytes above a flagged one, so the lowest
            // flag is the first special byte.
            return i + (special.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    i
}

/// The four hex digits of the `\u` escape at `at` (the backslash): `Err(Some(i))`
/// names a byte that is not a hex digit, `Err(None)` the end of the input.
pub(crate) fn hex4(bytes: &[u8], at: usize) -> Result<u16, Option<usize>> {
    let mut v: u16 = 0;
    for k in 0..4 {
        let i = at + 2 + k;
        let d = match bytes.get(i) {
            None => return Err(None),
            Some(&b) => match b {
                b'0'..=b'9' => b - b'0',
                b'a'..=b'f' => b - b'a' + 10,
                b'A'..=b'F' => b - b'A' + 10,
                _ => return Err(Some(i)),
            },
        };
        v = (v << 4) | u16::from(d);
    }
    Ok(v)
}

/// Why a string literal is not valid JSON: where and what, or that the input
/// ended inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StringError {
    /// The input ended before the closing quote.
    End,
    /// `kind` at byte `at`.
    Invalid(JsonErrorKind, usize),
}

/// The offset just past the string literal whose `"` is at `at`, checked:
/// raw control characters, escapes, and `\u` surrogate pairs.
pub(crate) fn string_end(bytes: &[u8], at: usize) -> Result<usize, StringError> {
    let mut i = at + 1;
    loop {
        i = skip_plain(bytes, i);
        match bytes.get(i) {
            None => return Err(StringError::End),
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => i = escape_end(bytes, i)?,
            Some(&b) if b < 0x20 => {
                return Err(StringError::Invalid(JsonErrorKind::ControlCharacter, i));
            }
            Some(_) => i += 1,
        }
    }
}

/// Checks the escape at `at` (a backslash) and returns the offset after it.
fn escape_end(bytes: &[u8], at: usize) -> Result<usize, StringError> {
    let invalid = |kind| Err(StringError::Invalid(kind, at));
    let hex = |from| {
        hex4(bytes, from).map_err(|i| match i {
            Some(_) => StringError::Invalid(JsonErrorKind::InvalidUnicodeEscape, from),
            None => StringError::End,
        })
    };
    match bytes.get(at + 1) {
        None => Err(StringError::End),
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(at + 2),
        Some(b'u') => match hex(at)? {
            0xD800..=0xDBFF => {
                let follows = bytes.get(at + 6..at + 8) == Some(b"\\u");
                let lo = if follows { hex(at + 6)? } else { 0 };
                if (0xDC00..=0xDFFF).contains(&lo) {
                    Ok(at + 12)
                } else {
                    invalid(JsonErrorKind::LoneHighSurrogate)
                }
            }
            0xDC00..=0xDFFF => invalid(JsonErrorKind::LoneLowSurrogate),
            _ => Ok(at + 6),
        },
        Some(_) => invalid(JsonErrorKind::InvalidEscape),
    }
}

/// The offset just past the string literal whose `"` is at `at` (validated).
pub(crate) fn skip_string(bytes: &[u8], at: usize) -> usize {
    let mut i = at + 1;
    loop {
        i = skip_plain(bytes, i);
        match bytes.get(i) {
            None => return bytes.len(),
            Some(b'"') => return i + 1,
            // The escaped byte is never a quote that ends the string; `\u`
            // digits are plain.
            Some(b'\\') => i += 2,
            Some(_) => i += 1,
        }
    }
}

/// Whether the (validated) string literals whose `"` are at `a` and `b` are
/// written with the same bytes (then they are the same name; the converse
/// need not hold, as escapes may differ).
pub(crate) fn same_name(bytes: &[u8], a: usize, b: usize) -> bool {
    let (Some(x), Some(y)) = (bytes.get(a + 1..), bytes.get(b + 1..)) else {
        return false;
    };
    // One pass over both: names are short, and equal ones are the common case.
    let mut i = 0;
    loop {
        match (x.get(i), y.get(i)) {
            (Some(p), Some(q)) if p == q => match p {
                b'"' => return true,
                // The escaped byte is compared here, so an escaped quote is
                // never taken for the end.
                b'\\' => {
                    if x.get(i + 1) != y.get(i + 1) {
                        return false;
                    }
                    i += 2;
                }
                _ => i += 1,
            },
            _ => return false,
        }
    }
}

/// The UTF-16 code units of the (validated) string literal whose `"` is at
/// `at`, decoded from `from` (a character boundary inside it).
struct Units<'a> {
    bytes: &'a [u8],
    pos: usize,
    /// The low surrogate of a supplementary character read from raw UTF-8.
    low: Option<u16>,
}

impl<'a> Units<'a> {
    fn new(bytes: &'a [u8], from: usize) -> Self {
        Units {
            bytes,
            pos: from,
            low: None,
        }
    }
}

impl Iterator for Units<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        if let Some(low) = self.low.take() {
            return Some(low);
        }
        let b = *self.bytes.get(self.pos)?;
        match b {
            b'"' => None,
            b'\\' => {
                let (unit, len) = match self.bytes.get(self.pos + 1)? {
                    b'"' => (u16::from(b'"'), 2),
                    b'\\' => (u16::from(b'\\'), 2),
                    b'/' => (u16::from(b'/'), 2),
                    b'b' => (0x08, 2),
                    b'f' => (0x0C, 2),
                    b'n' => (0x0A, 2),
                    b'r' => (0x0D, 2),
                    b't' => (0x09, 2),
                    // A surrogate pair is two escapes, read one at a time:
                    // exactly its UTF-16 code units.
                    _ => (hex4(self.bytes, self.pos).ok()?, 6),
                };
                self.pos += len;
                Some(unit)
            }
            _ => {
                let len = match b {
                    0..0x80 => 1,
                    0xC0..0xE0 => 2,
                    0xE0..0xF0 => 3,
                    _ => 4,
                };
                let c = self
                    .bytes
                    .get(self.pos..self.pos + len)
                    .and_then(|s| core::str::from_utf8(s).ok())
                    .and_then(|s| s.chars().next())?;
                self.pos += len;
                let mut buf = [0u16; 2];
                let units = c.encode_utf16(&mut buf);
                if let [high, low] = units {
                    self.low = Some(*low);
                    Some(*high)
                } else {
                    units.first().copied()
                }
            }
        }
    }
}

/// RFC 8785 §3.2.3: compares the member names (validated string literals)
/// whose `"` is at `a` and at `b` as arrays of UTF-16 code units, after
/// unescaping.
pub(crate) fn cmp_names(bytes: &[u8], a: usize, b: usize) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    let sa = bytes.get(a + 1..).unwrap_or_default();
    let sb = bytes.get(b + 1..).unwrap_or_default();
    // UTF-8 byte order equals code point order, which equals UTF-16 order
    // unless a supplementary character meets U+E000..U+FFFF. Compare raw bytes
    // up to the first difference or escape and only decode from there.
    let mut i = 0;
    loop {
        match (sa.get(i).copied(), sb.get(i).copied()) {
            (Some(x), Some(y)) if x == y => {
                if x == b'"' {
                    return Ordering::Equal;
                }
                if x == b'\\' {
                    break;
                }
                i += 1;
            }
            // One name ends: it is a prefix of the other (an escape decodes
            // to at least one code unit).
            (Some(b'"'), _) => return Ordering::Less,
            (_, Some(b'"')) => return Ordering::Greater,
            // Byte order is UTF-16 order unless one side is a supplementary
            // character (lead byte F0..F4) and the other U+E000..U+FFFF (lead
            // byte EE or EF): only then can both differing bytes be 0xEE or
            // above.
            (Some(x), Some(y)) if x != b'\\' && y != b'\\' && (x < 0xEE || y < 0xEE) => {
                return x.cmp(&y);
            }
            _ => break,
        }
    }
    // Back up to the start of the character that differs (the shared prefix
    // is raw UTF-8, identical on both sides).
    let mut start = i;
    while start > 0 && sa.get(start).is_some_and(|&c| c & 0xC0 == 0x80) {
        start -= 1;
    }
    Units::new(sa, start).cmp(Units::new(sb, start))
}

/// Whether the (validated) string literal whose `"` is at `at` is `token`.
pub(crate) fn name_is(bytes: &[u8], at: usize, token: &str) -> bool {
    Units::new(bytes, at + 1).eq(token.encode_utf16())
}

/// The unescaped text of the (validated) string literal whose `"` is at `at`.
pub(crate) fn decode_name(bytes: &[u8], at: usize) -> String {
    char::decode_utf16(Units::new(bytes, at + 1))
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect()
}

/// Appends `token` escaped per RFC 6901 (`~` → `~0`, `/` → `~1`).
pub(crate) fn push_pointer_token(out: &mut String, token: &str) {
    for c in token.chars() {
        match c {
            '~' => out.push_str("~0"),
            '/' => out.push_str("~1"),
            c => out.push(c),
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// RFC 8785 §3.2.2.2 for one character: `"`, `\` and U+0000..U+001F are
/// escaped (`\b \t \n \f \r` by name, the rest as `\u00xx`, lowercase).
fn push_escaped_char(c: u32, out: &mut Vec<u8>) {
    match c {
        0x22 => out.extend_from_slice(b"\\\""),
        0x5C => out.extend_from_slice(b"\\\\"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x09 => out.extend_from_slice(b"\\t"),
        0x0A => out.extend_from_slice(b"\\n"),
        0x0C => out.extend_from_slice(b"\\f"),
        0x0D => out.extend_from_slice(b"\\r"),
        0..0x20 => out.extend_from_slice(&[
            b'\\',
            b'u',
            b'0',
            b'0',
            HEX.get((c >> 4) as usize).copied().unwrap_or(b'0'),
            HEX.get((c & 0xF) as usize).copied().unwrap_or(b'0'),
        ]),
        _ => {
            let mut buf = [0u8; 4];
            let ch = char::from_u32(c).unwrap_or(char::REPLACEMENT_CHARACTER);
            out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
        }
    }
}

/// Writes the (validated) string literal whose `"` is at `at` in RFC 8785
/// form and returns the offset just past it. Runs without escapes are copied
/// as they are: raw bytes in an accepted string never need escaping.
pub(crate) fn write_string(bytes: &[u8], at: usize, out: &mut Vec<u8>) -> usize {
    let start = at + 1;
    let mut i = skip_plain(bytes, start);
    // Fast path: no escapes.
    loop {
        match bytes.get(i) {
            None => return bytes.len(),
            Some(b'"') => {
                out.extend_from_slice(bytes.get(at..=i).unwrap_or_default());
                return i + 1;
            }
            Some(b'\\') => break,
            Some(_) => i = skip_plain(bytes, i + 1),
        }
    }
    out.push(b'"');
    let mut run = start;
    loop {
        match bytes.get(i) {
            None => return bytes.len(),
            Some(b'"') => {
                out.extend_from_slice(bytes.get(run..=i).unwrap_or_default());
                return i + 1;
            }
            Some(b'\\') => {
                out.extend_from_slice(bytes.get(run..i).unwrap_or_default());
                i = write_escape(bytes, i, out);
                run = i;
                i = skip_plain(bytes, i);
            }
            Some(_) => i = skip_plain(bytes, i + 1),
        }
    }
}

/// Writes the character of the (validated) escape at `at` in RFC 8785 form
/// and returns the offset after the escape.
fn write_escape(bytes: &[u8], at: usize, out: &mut Vec<u8>) -> usize {
    let c = match bytes.get(at + 1) {
        Some(b'"') => 0x22,
        Some(b'\\') => 0x5C,
        Some(b'/') => 0x2F,
        Some(b'b') => 0x08,
        Some(b'f') => 0x0C,
        Some(b'n') => 0x0A,
        Some(b'r') => 0x0D,
        Some(b't') => 0x09,
        Some(b'u') => {
            let hi = u32::from(hex4(bytes, at).unwrap_or(0xFFFD));
            if (0xD800..0xDC00).contains(&hi) {
                let lo = u32::from(hex4(bytes, at + 6).unwrap_or(0xDC00));
                let cp = 0x10000 + ((hi - 0xD800) << 10) + (lo.wrapping_sub(0xDC00) & 0x3FF);
                push_escaped_char(cp, out);
                return at + 12;
            }
            push_escaped_char(hi, out);
            return at + 6;
        }
        _ => return at + 2,
    };
    push_escaped_char(c, out);
    at + 2
}

/// Writes `s` as an RFC 8785 §3.2.2.2 string literal (with quotes).
pub(crate) fn escape_into(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run = 0;
    let mut i = 0;
    loop {
        i = skip_plain(bytes, i);
        let Some(&b) = bytes.get(i) else {
            break;
        };
        if !(b < 0x20 || b == b'"' || b == b'\\') {
            i += 1;
            continue;
        }
        out.extend_from_slice(bytes.get(run..i).unwrap_or_default());
        push_escaped_char(u32::from(b), out);
        i += 1;
        run = i;
    }
    out.extend_from_slice(bytes.get(run..).unwrap_or_default());
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lit(s: &str) -> String {
        let mut out = Vec::new();
        escape_into(s, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn cmp_names_matches_code_unit_order_raw_and_escaped() {
        let words = [
            "",
            "a",
            "ab",
            "b",
            "\u{7f}",
            "\u{80}",
            "é",
            "\u{7ff}",
            "\u{800}",
            "中",
            "\u{d7ff}",
            "\u{e000}",
            "\u{ffff}",
            "\u{10000}",
            "😀",
            "\u{10ffff}",
            "a\u{e000}",
            "a😀",
            "a\u{ffff}b",
            "a\u{10000}",
            "😀a",
            "\u{e000}a",
            "a\nb",
            "\"",
            "\\",
        ];
        // Each word raw (as RFC 8785 writes it) and spelled with \u escapes.
        let spell = |w: &str, escaped: bool| -> String {
            if escaped {
                let mut s = String::from("\"");
                for u in w.encode_utf16() {
                    s.push_str(&format!("\\u{u:04X}"));
                }
                s.push('"');
                s
            } else {
                lit(w)
            }
        };
        for a in words {
            for b in words {
                for (ea, eb) in [(false, false), (true, false), (false, true), (true, true)] {
                    let text = format!("{}{}", spell(a, ea), spell(b, eb));
                    let at_b = spell(a, ea).len();
                    assert_eq!(
                        cmp_names(text.as_bytes(), 0, at_b),
                        a.encode_utf16().cmp(b.encode_utf16()),
                        "{a:?} {b:?} {text}"
                    );
                }
            }
            assert_eq!(decode_name(spell(a, true).as_bytes(), 0), a);
            assert!(name_is(spell(a, true).as_bytes(), 0, a));
        }
    }

    #[test]
    fn write_string_unescapes_and_escapes_minimally() {
        let cases: [(&str, &str); 6] = [
            (r#""plain""#, r#""plain""#),
            (r#""\u0061\/\"\\""#, r#""a/\"\\""#),
            (r#""\u001F\u000a\b""#, r#""\u001f\n\b""#),
            (r#""\uD83D\uDE00x""#, "\"😀x\""),
            (r#""é\u00e9""#, "\"éé\""),
            (r#""\u0022""#, r#""\"""#),
        ];
        for (input, want) in cases {
            let mut out = Vec::new();
            let end = write_string(input.as_bytes(), 0, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), want, "{input}");
            assert_eq!(end, input.len());
            assert_eq!(skip_string(input.as_bytes(), 0), input.len());
        }
    }

    #[test]
    fn same_name_compares_the_written_bytes_up_to_the_closing_quote() {
        let same = |a: &str, b: &str| {
            let text = format!("{a}:{b}");
            same_name(text.as_bytes(), 0, a.len() + 1)
        };
        assert!(same(r#""sku""#, r#""sku""#));
        assert!(same(r#""a\"b""#, r#""a\"b""#));
        assert!(same(r#""a\\""#, r#""a\\""#));
        assert!(!same(r#""a\"b""#, r#""a\"c""#));
        assert!(!same(r#""ab""#, r#""abc""#));
        assert!(!same(r#""abc""#, r#""ab""#));
        // The same name written otherwise is not the same bytes.
        assert!(!same(r#""a""#, r#""\u0061""#));
    }

    #[test]
    fn skip_plain_stops_at_or_before_special_bytes() {
        // Neighbouring special bytes, bytes just above them (0x20, 0x21, 0x23,
        // 0x5D) and high bytes exercise the borrows of the eight-byte test.
        let texts: [&[u8]; 3] = [
            b"abcdefghijklmnop\"qrstuvwxyz0123456789\\abcdefgh\x01ijklmnopqrstuvwx",
            b"\x20\x21\x23\x5d\x00\x01\"\\\x1f\x20\xff\xa0\x9f\x80\x7f\x21\x1f\x00\x22\x5c\x20\xe2\x82\xac",
            "caf\u{e9} \u{1f600} \u{ffff}\u{e000}!#[]^~ \u{7f}\u{80}\"".as_bytes(),
        ];
        for text in texts {
            for i in 0..text.len() {
                let j = skip_plain(text, i);
                assert!(j >= i && j <= text.len());
                let first = text
                    .iter()
                    .skip(i)
                    .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
                    .map_or(text.len(), |p| p + i);
                assert!(j <= first, "{text:?} {i} {j} {first}");
                // Exact unless it stopped at the last, partial chunk.
                assert!(j == first || j + 8 > text.len(), "{text:?} {i} {j} {first}");
            }
        }
    }
}
