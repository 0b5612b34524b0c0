//! `application/x-www-form-urlencoded` bodies (WHATWG URL §5.1): pairs split on
//! `&`, name and value split on the first `=`, `+` → space, `%XX` → byte, then
//! UTF-8. Unlike browsers we refuse a malformed escape or non-UTF-8 instead of
//! passing it through or substituting U+FFFD: two different bodies must never
//! decode to the same pairs.

use crate::prelude::*;

use core::fmt;

/// Why a form body was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormErrorKind {
    /// A `%` not followed by two hex digits.
    InvalidPercentEscape,
    /// A name or value is not UTF-8 after percent-decoding.
    InvalidUtf8,
}

/// A refused form body: the kind and the byte offset in the body.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FormError {
    /// What went wrong.
    pub kind: FormErrorKind,
    /// Byte offset in the body (of the `%`, or of the start of the name or value).
    pub offset: usize,
}

impl FormError {
    /// A stable machine-readable code.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self.kind {
            FormErrorKind::InvalidPercentEscape => "form-invalid-percent-escape",
            FormErrorKind::InvalidUtf8 => "form-invalid-utf8",
        }
    }
}

impl fmt::Display for FormError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            FormErrorKind::InvalidPercentEscape => "invalid percent-escape",
            FormErrorKind::InvalidUtf8 => "invalid UTF-8 after percent-decoding",
        };
        write!(f, "{what} at byte {} of the form body", self.offset)
    }
}

impl core::error::Error for FormError {}

/// Decodes a form body into `(name, value)` pairs, in body order. Empty
/// segments (`a=1&&b=2`) are skipped, as the URL standard does.
pub fn decode_form(body: &[u8]) -> Result<Vec<(String, String)>, FormError> {
    let mut pairs = Vec::new();
    let mut offset = 0;
    for segment in body.split(|&b| b == b'&') {
        if !segment.is_empty() {
            let eq = segment.iter().position(|&b| b == b'=');
            let (name, value, value_offset) = match eq {
                Some(i) => (
                    segment.get(..i).unwrap_or_default(),
                    segment.get(i + 1..).unwrap_or_default(),
                    offset + i + 1,
                ),
                None => (segment, &b""[..], offset + segment.len()),
            };
            pairs.push((decode(name, offset)?, decode(value, value_offset)?));
        }
        offset += segment.len() + 1;
    }
    Ok(pairs)
}

fn decode(raw: &[u8], base: usize) -> Result<String, FormError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hi = raw.get(i + 1).and_then(|&h| (h as char).to_digit(16));
                let lo = raw.get(i + 2).and_then(|&h| (h as char).to_digit(16));
                let (Some(hi), Some(lo)) = (hi, lo) else {
                    return Err(FormError {
                        kind: FormErrorKind::InvalidPercentEscape,
                        offset: base + i,
                    });
                };
                out.push(u8::try_from(hi * 16 + lo).unwrap_or_default());
                i += 2;
            }
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| FormError {
        kind: FormErrorKind::InvalidUtf8,
        offset: base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_plus_and_percent() {
        let pairs = decode_form(b"a=1+2&b=%C3%A9&&c&a=%2B").unwrap();
        let want = [("a", "1 2"), ("b", "é"), ("c", ""), ("a", "+")];
        assert_eq!(pairs.len(), want.len());
        for ((n, v), (wn, wv)) in pairs.iter().zip(want) {
            assert_eq!((n.as_str(), v.as_str()), (wn, wv));
        }
    }

    #[test]
    fn refuses_bad_escapes_and_utf8() {
        assert_eq!(
            decode_form(b"a=1&b=%zz").unwrap_err(),
            FormError {
                kind: FormErrorKind::InvalidPercentEscape,
                offset: 6
            }
        );
        assert_eq!(decode_form(b"a=%4").unwrap_err().offset, 2);
        assert_eq!(
            decode_form(b"x=%ff").unwrap_err().kind,
            FormErrorKind::InvalidUtf8
        );
    }
}
