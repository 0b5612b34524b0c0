//! Lowercase hexadecimal text of bytes (fingerprints, record ids, log references
//! and derived keys are all written this way), and its decoding.
//!
//! Two digits computed per byte instead of a `{:02x}` formatting call per byte:
//! the formatter's per-call cost dominated short digests (a fingerprint's 32
//! bytes cost more to print than to hash, most visibly in WebAssembly).
//!
//! ```
//! assert_eq!(idemkit_core::hex::lower(&[0x00, 0xab, 0x7f]), "00ab7f");
//! assert_eq!(idemkit_core::hex::Lower(&[0xde, 0xad]).to_string(), "dead");
//! ```

use core::fmt;

use crate::prelude::*;

/// The two lowercase hex digits of `byte`.
#[must_use]
pub const fn digits(byte: u8) -> [u8; 2] {
    [digit(byte >> 4), digit(byte & 0x0f)]
}

/// The lowercase hex digit of a nibble (0–15).
const fn digit(nibble: u8) -> u8 {
    if nibble < 10 {
        b'0' + nibble
    } else {
        b'a' + nibble - 10
    }
}

/// Appends the lowercase hex of `bytes` to `out`.
pub fn push_lower(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len() * 2);
    // The digits of 32 bytes at a time, appended as one string: a `push` per
    // character checks capacity and encodes a char each time.
    let mut text = [0u8; 64];
    for chunk in bytes.chunks(32) {
        for (pair, &byte) in text.chunks_exact_mut(2).zip(chunk) {
            pair.copy_from_slice(&digits(byte));
        }
        let digits = text.get(..2 * chunk.len()).unwrap_or_default();
        // Hex digits are ASCII: always valid UTF-8.
        out.push_str(core::str::from_utf8(digits).unwrap_or_default());
    }
}

/// The lowercase hex of `bytes`, two characters per byte.
#[must_use]
pub fn lower(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    push_lower(&mut out, bytes);
    out
}

/// The bytes of hex text (either case, two digits per byte); `None` when it
/// has an odd length or anything but hex digits (no sign, no spaces).
#[must_use]
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let (pairs, rest) = text.as_bytes().as_chunks::<2>();
    if !rest.is_empty() {
        return None;
    }
    pairs
        .iter()
        .map(|&[high, low]| Some(value(high)? << 4 | value(low)?))
        .collect()
}

/// The `N` bytes of exactly `2 * N` lowercase hex digits, as [`lower`] writes
/// them. `Err` holds the byte offset of the first character that is not a
/// lowercase hex digit, or the text's length (at most `2 * N`) when it is not
/// `2 * N` characters long.
pub fn decode_lower<const N: usize>(text: &str) -> Result<[u8; N], usize> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * N {
        return Err(bytes.len().min(2 * N));
    }
    let lower_value = |at: usize| match bytes.get(at) {
        Some(&d @ (b'0'..=b'9' | b'a'..=b'f')) => value(d).ok_or(at),
        _ => Err(at),
    };
    let mut out = [0u8; N];
    for (i, slot) in out.iter_mut().enumerate() {
        *slot = (lower_value(2 * i)? << 4) | lower_value(2 * i + 1)?;
    }
    Ok(out)
}

/// The value of one hex digit of either case.
const fn value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Displays its bytes as lowercase hex, written in chunks rather than per byte.
#[derive(Clone, Copy)]
pub struct Lower<'a>(pub &'a [u8]);

impl fmt::Display for Lower<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 64];
        for chunk in self.0.chunks(buf.len() / 2) {
            let mut len = 0;
            for (&byte, pair) in chunk.iter().zip(buf.chunks_exact_mut(2)) {
                pair.copy_from_slice(&digits(byte));
                len += 2;
            }
            // Only ASCII digits were written.
            let text =
                core::str::from_utf8(buf.get(..len).unwrap_or_default()).map_err(|_| fmt::Error)?;
            f.write_str(text)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_matches_the_formatter() {
        let all: Vec<u8> = (0..=255).collect();
        let expected: String = all.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(lower(&all), expected);
        assert_eq!(Lower(&all).to_string(), expected);
        let mut pushed = String::from("x");
        push_lower(&mut pushed, &all);
        assert_eq!(pushed, format!("x{expected}"));
        // Whole and partial 32-byte chunks.
        for n in 0..=70 {
            assert_eq!(lower(&all[..n]), expected[..2 * n], "{n} bytes");
        }
    }

    #[test]
    fn decoding_round_trips_and_refuses_what_is_not_hex() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&lower(&all)), Some(all));
        assert_eq!(decode("00AB10"), Some(vec![0x00, 0xab, 0x10]));
        assert_eq!(decode(""), Some(vec![]));
        for bad in ["0", "zz", "0g", "é0", "+f", " 1", "-1"] {
            assert_eq!(decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn empty_bytes_are_empty_text() {
        assert_eq!(lower(&[]), "");
        assert_eq!(Lower(&[]).to_string(), "");
    }
}
