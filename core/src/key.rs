//! Idempotency keys: opaque client strings of 1–255 visible ASCII characters.
//!
//! The `Idempotency-Key` header is accepted in both spellings seen in the wild:
//! the Structured-Field string that the IETF draft
//! (draft-ietf-httpapi-idempotency-key-header) writes (`"abc"`, RFC 8941 §3.3.3)
//! and the bare token that Stripe clients send (`abc`). Keys are case-sensitive and
//! never normalised: `Abc` and `abc` are different operations.
//!
//! A bare key may not contain `,`: HTTP combines two `Idempotency-Key` field
//! lines into one value joined by `,` (RFC 9110 §5.3), so `a,b` cannot be told
//! apart from two keys sent at once and is refused ([`KeyError::BareComma`]). A
//! quoted key may hold `,` (`"a,b"` is the one key `a,b`).

use crate::prelude::*;

use core::fmt;

/// A validated idempotency key: 1–255 characters, each in `0x21..=0x7E`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// The longest key accepted, in characters (= bytes, since keys are ASCII).
    pub const MAX_LEN: usize = 255;

    /// Validates a raw key (already taken out of its header syntax).
    ///
    /// ```
    /// use idemkit_core::IdempotencyKey;
    /// assert_eq!(IdempotencyKey::new("order-42").unwrap().as_str(), "order-42");
    /// assert!(IdempotencyKey::new("has space").is_err());
    /// ```
    pub fn new(raw: &str) -> Result<Self, KeyError> {
        validate(raw.as_bytes(), 0)?;
        Ok(IdempotencyKey(raw.to_owned()))
    }

    /// Parses an `Idempotency-Key` header value: a Structured-Field string
    /// (`"abc"`, with `\"` and `\\` escapes) or a bare key (`abc`). Surrounding
    /// spaces and tabs (HTTP optional whitespace) are ignored. A bare key holding
    /// `,` is refused: it is what HTTP makes of two field lines.
    ///
    /// ```
    /// use idemkit_core::{IdempotencyKey, KeyError};
    /// let quoted = IdempotencyKey::parse_header(b"\"8e03978e-40d5-43e8\"").unwrap();
    /// let bare = IdempotencyKey::parse_header(b"8e03978e-40d5-43e8").unwrap();
    /// assert_eq!(quoted, bare);
    /// assert_eq!(IdempotencyKey::parse_header(b"a,b"), Err(KeyError::BareComma { offset: 1 }));
    /// assert_eq!(IdempotencyKey::parse_header(b"\"a,b\"").unwrap().as_str(), "a,b");
    /// ```
    pub fn parse_header(value: &[u8]) -> Result<Self, KeyError> {
        let start = value
            .iter()
            .position(|b| !is_ows(*b))
            .unwrap_or(value.len());
        let end = value
            .iter()
            .rposition(|b| !is_ows(*b))
            .map_or(start, |i| i + 1);
        let trimmed = value.get(start..end).unwrap_or_default();
        if trimmed.first() == Some(&b'"') {
            return parse_sf_string(trimmed, start);
        }
        // The first offending byte is named: in `a, b` (two folded field lines)
        // that is the comma, not the space after it.
        if let Some(i) = trimmed
            .iter()
            .position(|b| *b == b',' || !(0x21..=0x7E).contains(b))
            .filter(|i| trimmed.get(*i) == Some(&b','))
        {
            return Err(KeyError::BareComma { offset: start + i });
        }
        validate(trimmed, start)?;
        // validate() accepted only ASCII, so this conversion cannot fail.
        let text = core::str::from_utf8(trimmed).map_err(|_| KeyError::InvalidCharacter {
            offset: start,
            byte: trimmed.first().copied().unwrap_or_default(),
        })?;
        Ok(IdempotencyKey(text.to_owned()))
    }

    /// A random key in UUID version 4 form (`8e03978e-40d5-4e83-bc93-6894a57f9324`)
    /// from 16 bytes the caller drew from a CSPRNG (core draws no randomness).
    ///
    /// ```
    /// use idemkit_core::IdempotencyKey;
    /// let key = IdempotencyKey::from_random([0xab; 16]);
    /// assert_eq!(key.as_str(), "abababab-abab-4bab-abab-abababababab");
    /// ```
    #[must_use]
    pub fn from_random(mut bytes: [u8; 16]) -> Self {
        // RFC 9562 §5.4: version 4 in the high nibble of byte 6, variant 10 in byte 8.
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        let mut text = String::with_capacity(36);
        for (i, byte) in bytes.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                text.push('-');
            }
            crate::hex::push_lower(&mut text, &[*byte]);
        }
        IdempotencyKey(text)
    }

    /// A deterministic key for a runtime that already holds a durable run id and
    /// step id: blake3 in derive-key mode over the length-framed namespace, run id
    /// and step id, written `ik1-` followed by 32 hex characters.
    ///
    /// Never derive a key from a call's arguments alone: two intended actions can
    /// have identical arguments (two identical bookings on purpose), and they must
    /// not share a key.
    ///
    /// ```
    /// use idemkit_core::IdempotencyKey;
    /// let a = IdempotencyKey::derive("travel-agent", "run-7", "book-flight");
    /// assert_eq!(a, IdempotencyKey::derive("travel-agent", "run-7", "book-flight"));
    /// assert_ne!(a, IdempotencyKey::derive("travel-agent", "run-7", "book-hotel"));
    /// assert!(a.as_str().starts_with("ik1-"));
    /// ```
    #[must_use]
    pub fn derive(namespace: &str, run_id: &str, step_id: &str) -> Self {
        let mut hasher = crate::digest::ACTION_KEY.hasher();
        for part in [namespace, run_id, step_id] {
            hasher.update(&(part.len() as u64).to_le_bytes());
            hasher.update(part.as_bytes());
        }
        let mut text = String::from("ik1-");
        crate::hex::push_lower(
            &mut text,
            hasher.finalize().as_bytes().get(..16).unwrap_or_default(),
        );
        IdempotencyKey(text)
    }

    /// The key as given by the client.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The header value a client sends: the key bare (as Stripe clients send it)
    /// when the bare spelling parses back to this key, else the Structured-Field
    /// string. A key holding `,` or starting with `"` is therefore sent quoted.
    ///
    /// ```
    /// use idemkit_core::IdempotencyKey;
    /// assert_eq!(IdempotencyKey::new("order-42").unwrap().to_client_header_value(), "order-42");
    /// assert_eq!(IdempotencyKey::new("a,b").unwrap().to_client_header_value(), "\"a,b\"");
    /// ```
    #[must_use]
    pub fn to_client_header_value(&self) -> String {
        if self.0.contains(',') || self.0.starts_with('"') {
            self.to_header_value()
        } else {
            self.0.clone()
        }
    }

    /// The key as a Structured-Field string, as the IETF draft writes the header.
    #[must_use]
    pub fn to_header_value(&self) -> String {
        let mut out = String::with_capacity(self.0.len() + 2);
        out.push('"');
        for c in self.0.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
        out
    }
}

fn is_ows(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

fn validate(raw: &[u8], base_offset: usize) -> Result<(), KeyError> {
    if raw.is_empty() {
        return Err(KeyError::Empty);
    }
    if raw.len() > IdempotencyKey::MAX_LEN {
        return Err(KeyError::TooLong { len: raw.len() });
    }
    if let Some(i) = raw.iter().position(|b| !(0x21..=0x7E).contains(b)) {
        return Err(KeyError::InvalidCharacter {
            offset: base_offset + i,
            byte: raw.get(i).copied().unwrap_or_default(),
        });
    }
    Ok(())
}

/// RFC 8941 §4.2.5: a string is `"` *(unescaped / `\"` / `\\`) `"`.
fn parse_sf_string(value: &[u8], base_offset: usize) -> Result<IdempotencyKey, KeyError> {
    let mut key = String::new();
    let mut i = 1;
    loop {
        let Some(&b) = value.get(i) else {
            return Err(KeyError::UnterminatedString {
                offset: base_offset + i,
            });
        };
        match b {
            b'"' => break,
            b'\\' => {
                match value.get(i + 1) {
                    Some(&e @ (b'"' | b'\\')) => key.push(char::from(e)),
                    _ => {
                        return Err(KeyError::InvalidEscape {
                            offset: base_offset + i,
                        });
                    }
                }
                i += 2;
                continue;
            }
            // A space is legal inside an SF string but not in a key; report it as such.
            0x21..=0x7E => key.push(char::from(b)),
            _ => {
                return Err(KeyError::InvalidCharacter {
                    offset: base_offset + i,
                    byte: b,
                });
            }
        }
        i += 1;
    }
    if i + 1 != value.len() {
        return Err(KeyError::TrailingData {
            offset: base_offset + i + 1,
        });
    }
    if key.is_empty() {
        return Err(KeyError::Empty);
    }
    if key.len() > IdempotencyKey::MAX_LEN {
        return Err(KeyError::TooLong { len: key.len() });
    }
    Ok(IdempotencyKey(key))
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "IdempotencyKey({:?})", self.0)
    }
}

impl TryFrom<String> for IdempotencyKey {
    type Error = KeyError;
    fn try_from(raw: String) -> Result<Self, KeyError> {
        validate(raw.as_bytes(), 0)?;
        Ok(IdempotencyKey(raw))
    }
}

impl From<IdempotencyKey> for String {
    fn from(key: IdempotencyKey) -> String {
        key.0
    }
}

impl core::str::FromStr for IdempotencyKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        IdempotencyKey::new(s)
    }
}

/// Why a key or an `Idempotency-Key` header value was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyError {
    /// The key (or the quoted string) is empty.
    Empty,
    /// The key is longer than [`IdempotencyKey::MAX_LEN`] characters.
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// A byte outside visible ASCII (`0x21..=0x7E`): space, control or non-ASCII.
    InvalidCharacter {
        /// Byte offset in the header value.
        offset: usize,
        /// The offending byte.
        byte: u8,
    },
    /// A quoted key has no closing `"`.
    UnterminatedString {
        /// Byte offset where the value ended.
        offset: usize,
    },
    /// A backslash not followed by `"` or `\` inside a quoted key.
    InvalidEscape {
        /// Byte offset of the backslash.
        offset: usize,
    },
    /// Something follows the closing `"` of a quoted key (parameters are not allowed).
    TrailingData {
        /// Byte offset of the first extra byte.
        offset: usize,
    },
    /// A bare (unquoted) key holds `,`, which is how HTTP joins two
    /// `Idempotency-Key` field lines (RFC 9110 §5.3); a key holding `,` must be
    /// sent quoted (`"a,b"`).
    BareComma {
        /// Byte offset of the first `,` in the header value.
        offset: usize,
    },
}

impl KeyError {
    /// A stable machine-readable code, also used by the JavaScript package.
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            KeyError::Empty => "key-empty",
            KeyError::TooLong { .. } => "key-too-long",
            KeyError::InvalidCharacter { .. } => "key-invalid-character",
            KeyError::UnterminatedString { .. } => "key-unterminated-string",
            KeyError::InvalidEscape { .. } => "key-invalid-escape",
            KeyError::TrailingData { .. } => "key-trailing-data",
            KeyError::BareComma { .. } => "key-bare-comma",
        }
    }
}

impl fmt::Display for KeyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyError::Empty => f.write_str("idempotency key is empty"),
            KeyError::TooLong { len } => write!(
                f,
                "idempotency key is {len} characters long; at most {} are allowed",
                IdempotencyKey::MAX_LEN
            ),
            KeyError::InvalidCharacter { offset, byte } => write!(
                f,
                "idempotency key has byte 0x{byte:02x} at offset {offset}; only visible ASCII (0x21-0x7e) is allowed"
            ),
            KeyError::UnterminatedString { offset } => {
                write!(
                    f,
                    "quoted idempotency key has no closing '\"' (value ends at offset {offset})"
                )
            }
            KeyError::InvalidEscape { offset } => write!(
                f,
                "quoted idempotency key has an invalid escape at offset {offset}; only \\\" and \\\\ are allowed"
            ),
            KeyError::TrailingData { offset } => {
                write!(
                    f,
                    "unexpected data after the quoted idempotency key at offset {offset}"
                )
            }
            KeyError::BareComma { offset } => write!(
                f,
                "bare idempotency key has ',' at offset {offset}, which is how HTTP joins two Idempotency-Key field lines; send one key, quoted (\"a,b\") if it holds ','"
            ),
        }
    }
}

impl core::error::Error for KeyError {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn bare_and_quoted_forms_agree() {
        for (header, key) in [
            (&b"abc"[..], "abc"),
            (b"\"abc\"", "abc"),
            (b"  abc\t", "abc"),
            (b" \"a\\\"b\\\\c\" ", "a\"b\\c"),
            (b"\"\\\"\"", "\""),
        ] {
            assert_eq!(
                IdempotencyKey::parse_header(header).unwrap().as_str(),
                key,
                "{header:?}"
            );
        }
    }

    #[test]
    fn keys_are_case_sensitive_and_not_normalised() {
        let upper = IdempotencyKey::parse_header(b"ABC").unwrap();
        let lower = IdempotencyKey::parse_header(b"abc").unwrap();
        assert_ne!(upper, lower);
    }

    #[test]
    fn refusals_name_the_reason_and_offset() {
        let cases: &[(&[u8], KeyError)] = &[
            (b"", KeyError::Empty),
            (b"   ", KeyError::Empty),
            (b"\"\"", KeyError::Empty),
            (
                b"a b",
                KeyError::InvalidCharacter {
                    offset: 1,
                    byte: b' ',
                },
            ),
            (b"ab\x01", KeyError::InvalidCharacter { offset: 2, byte: 1 }),
            (
                b"\xc3\xa9",
                KeyError::InvalidCharacter {
                    offset: 0,
                    byte: 0xc3,
                },
            ),
            (
                b"\"a b\"",
                KeyError::InvalidCharacter {
                    offset: 2,
                    byte: b' ',
                },
            ),
            (b"\"abc", KeyError::UnterminatedString { offset: 4 }),
            (b"\"a\\n\"", KeyError::InvalidEscape { offset: 2 }),
            (b"\"abc\";p=1", KeyError::TrailingData { offset: 5 }),
            // Two field lines folded by HTTP, with and without the space.
            (b"a,b", KeyError::BareComma { offset: 1 }),
            (b" a, b", KeyError::BareComma { offset: 2 }),
            (b"abc,", KeyError::BareComma { offset: 3 }),
            (b",abc", KeyError::BareComma { offset: 0 }),
            (b"\"a\", \"b\"", KeyError::TrailingData { offset: 3 }),
        ];
        for (header, expected) in cases {
            assert_eq!(
                IdempotencyKey::parse_header(header).as_ref(),
                Err(expected),
                "{header:?}"
            );
        }
        let long = vec![b'k'; 256];
        assert_eq!(
            IdempotencyKey::parse_header(&long),
            Err(KeyError::TooLong { len: 256 })
        );
        assert!(IdempotencyKey::parse_header(&long[..255]).is_ok());
    }

    #[test]
    fn a_quoted_key_may_hold_a_comma() {
        let key = IdempotencyKey::parse_header(b"\"a,b\"").unwrap();
        assert_eq!(key.as_str(), "a,b");
        assert_eq!(key.to_header_value(), "\"a,b\"");
        // The key itself (already out of its header syntax) is valid.
        assert_eq!(IdempotencyKey::new("a,b"), Ok(key));
    }

    #[test]
    fn header_value_round_trips() {
        let key = IdempotencyKey::new("a\"b\\c").unwrap();
        assert_eq!(key.to_header_value(), "\"a\\\"b\\\\c\"");
        assert_eq!(
            IdempotencyKey::parse_header(key.to_header_value().as_bytes()),
            Ok(key)
        );
    }

    #[test]
    fn generated_keys_are_valid_keys() {
        for seed in [[0u8; 16], [0xff; 16], [0x5a; 16]] {
            let key = IdempotencyKey::from_random(seed);
            assert_eq!(IdempotencyKey::new(key.as_str()), Ok(key.clone()));
            assert_eq!(key.as_str().len(), 36);
            assert_eq!(key.as_str().as_bytes()[14], b'4', "version nibble");
        }
        let derived = IdempotencyKey::derive("", "", "");
        assert_eq!(IdempotencyKey::new(derived.as_str()), Ok(derived.clone()));
        // Length framing: moving a boundary changes the key.
        assert_ne!(
            IdempotencyKey::derive("ab", "c", "d"),
            IdempotencyKey::derive("a", "bc", "d")
        );
    }

    proptest! {
        #[test]
        fn parse_header_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = IdempotencyKey::parse_header(&bytes);
        }

        #[test]
        fn every_valid_key_round_trips_in_both_forms(key in "[!-~]{1,255}") {
            let parsed = IdempotencyKey::new(&key).unwrap();
            prop_assert_eq!(IdempotencyKey::parse_header(parsed.to_header_value().as_bytes()).unwrap(), parsed.clone());
            prop_assert_eq!(IdempotencyKey::parse_header(parsed.to_client_header_value().as_bytes()).unwrap(), parsed.clone());
            if !key.starts_with('"') && !key.contains(',') {
                prop_assert_eq!(parsed.to_client_header_value(), key.clone());
                prop_assert_eq!(IdempotencyKey::parse_header(key.as_bytes()).unwrap(), parsed);
            }
        }
    }
}
