//! Scopes and record ids: which stored record a key may ever select.
//!
//! A key alone never identifies a record. The scope — the tenant (from the
//! authenticated caller, never from the body or the key) and the operation (the
//! endpoint or action) — is part of the identity, so the same key sent by another
//! tenant or to another endpoint can never see or overwrite this record
//! (docs/architecture.md, invariant 3).

use crate::prelude::*;

use core::fmt;

use crate::key::IdempotencyKey;

/// The longest tenant or operation name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 255;

/// `(tenant, operation)`: who is calling and what they are doing.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope {
    tenant: String,
    operation: String,
}

impl Scope {
    /// A scope from a tenant and an operation name: each 1–255 bytes of UTF-8
    /// without control characters.
    ///
    /// ```
    /// use idemkit_core::Scope;
    /// let scope = Scope::new("acme", "appointments.create").unwrap();
    /// assert_eq!(scope.operation(), "appointments.create");
    /// assert!(Scope::new("", "x").is_err());
    /// ```
    pub fn new(tenant: &str, operation: &str) -> Result<Self, ScopeError> {
        check_name(ScopePart::Tenant, tenant)?;
        check_name(ScopePart::Operation, operation)?;
        Ok(Scope {
            tenant: tenant.to_owned(),
            operation: operation.to_owned(),
        })
    }

    /// The tenant.
    #[must_use]
    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    /// The operation.
    #[must_use]
    pub fn operation(&self) -> &str {
        &self.operation
    }

    /// The record id of `key` in this scope.
    #[must_use]
    pub fn record_id(&self, key: &IdempotencyKey) -> RecordId {
        RecordId::new(self, key)
    }
}

fn check_name(part: ScopePart, name: &str) -> Result<(), ScopeError> {
    if name.is_empty() {
        return Err(ScopeError::Empty { part });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(ScopeError::TooLong {
            part,
            len: name.len(),
        });
    }
    if let Some((offset, _)) = name.char_indices().find(|(_, c)| c.is_control()) {
        return Err(ScopeError::ControlCharacter { part, offset });
    }
    Ok(())
}

/// Which half of a scope an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScopePart {
    /// The tenant name.
    Tenant,
    /// The operation name.
    Operation,
}

impl fmt::Display for ScopePart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScopePart::Tenant => "tenant",
            ScopePart::Operation => "operation",
        })
    }
}

/// A tenant or operation name was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ScopeError {
    /// The name is empty.
    Empty {
        /// Tenant or operation.
        part: ScopePart,
    },
    /// The name is longer than [`MAX_NAME_LEN`] bytes.
    TooLong {
        /// Tenant or operation.
        part: ScopePart,
        /// Its length in bytes.
        len: usize,
    },
    /// The name contains a control character.
    ControlCharacter {
        /// Tenant or operation.
        part: ScopePart,
        /// Byte offset of the character.
        offset: usize,
    },
}

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScopeError::Empty { part } => write!(f, "{part} name is empty"),
            ScopeError::TooLong { part, len } => {
                write!(
                    f,
                    "{part} name is {len} bytes long; at most {MAX_NAME_LEN} are allowed"
                )
            }
            ScopeError::ControlCharacter { part, offset } => {
                write!(f, "{part} name has a control character at byte {offset}")
            }
        }
    }
}

impl core::error::Error for ScopeError {}

/// The storage id of one record: an injective encoding of `(tenant, operation, key)`.
///
/// Layout: a version byte (`1`), then each of tenant, operation and key as a
/// 2-byte big-endian length followed by its bytes. Length-prefixing (not
/// separators) is what makes the encoding injective: `("a:b", "c")` and
/// `("a", "b:c")` can never meet. All records of one tenant share a byte prefix, so
/// a sorted store lists a tenant's records together.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId {
    bytes: Vec<u8>,
}

const RECORD_ID_VERSION: u8 = 1;

impl RecordId {
    /// The id of `key` in `scope`.
    #[must_use]
    pub fn new(scope: &Scope, key: &IdempotencyKey) -> Self {
        let parts = [
            scope.tenant.as_bytes(),
            scope.operation.as_bytes(),
            key.as_str().as_bytes(),
        ];
        let mut bytes = Vec::with_capacity(1 + parts.iter().map(|p| 2 + p.len()).sum::<usize>());
        bytes.push(RECORD_ID_VERSION);
        for part in parts {
            // Every part is at most 255 bytes (checked by Scope and IdempotencyKey).
            let len = u16::try_from(part.len()).unwrap_or(u16::MAX);
            bytes.extend_from_slice(&len.to_be_bytes());
            bytes.extend_from_slice(part);
        }
        RecordId { bytes }
    }

    /// The encoded bytes, as used for the storage key.
    #[must_use]
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Decodes stored bytes back into the scope and key they name.
    pub fn decode(bytes: &[u8]) -> Result<(Scope, IdempotencyKey), RecordIdError> {
        let [tenant, operation, key] = split(bytes)?;
        let scope = Scope::new(tenant, operation).map_err(RecordIdError::Scope)?;
        let key = IdempotencyKey::new(key).map_err(RecordIdError::Key)?;
        Ok((scope, key))
    }

    /// The tenant, operation and key this id names, borrowed from it: what
    /// [`decode`](Self::decode) gives, without checking them again or
    /// copying them (an id is only made from a valid scope and key).
    ///
    /// ```
    /// use idemkit_core::IdempotencyKey;
    /// use idemkit_core::scope::{RecordId, Scope};
    ///
    /// let scope = Scope::new("acme", "payments.capture").unwrap();
    /// let id = RecordId::new(&scope, &IdempotencyKey::new("k-1").unwrap());
    /// assert_eq!(id.parts(), ["acme", "payments.capture", "k-1"]);
    /// ```
    #[must_use]
    pub fn parts(&self) -> [&str; 3] {
        // `new` wrote the bytes from a valid scope and key, so they split;
        // the empty parts are never returned.
        split(&self.bytes).unwrap_or([""; 3])
    }

    /// A short digest of this id that is safe to log and to show an operator.
    #[must_use]
    pub fn log_ref(&self) -> LogRef {
        let mut hasher = crate::digest::LOG_REF.hasher();
        hasher.update(&self.bytes);
        let digest = *hasher.finalize().as_bytes();
        let mut short = [0u8; 8];
        short.copy_from_slice(digest.get(..8).unwrap_or(&[0; 8]));
        LogRef(short)
    }
}

/// The three length-prefixed parts of a record id's bytes, not yet checked as
/// a scope and a key.
fn split(bytes: &[u8]) -> Result<[&str; 3], RecordIdError> {
    let Some((&version, mut rest)) = bytes.split_first() else {
        return Err(RecordIdError::Truncated { offset: 0 });
    };
    if version != RECORD_ID_VERSION {
        return Err(RecordIdError::UnknownVersion { version });
    }
    let mut parts: [&str; 3] = [""; 3];
    for part in &mut parts {
        let offset = bytes.len() - rest.len();
        let (len, tail) = match rest {
            [hi, lo, tail @ ..] => (usize::from(u16::from_be_bytes([*hi, *lo])), tail),
            _ => return Err(RecordIdError::Truncated { offset }),
        };
        let (raw, tail) = match (tail.get(..len), tail.get(len..)) {
            (Some(raw), Some(tail)) => (raw, tail),
            _ => return Err(RecordIdError::Truncated { offset: offset + 2 }),
        };
        *part = core::str::from_utf8(raw)
            .map_err(|_| RecordIdError::InvalidUtf8 { offset: offset + 2 })?;
        rest = tail;
    }
    if !rest.is_empty() {
        return Err(RecordIdError::TrailingData {
            offset: bytes.len() - rest.len(),
        });
    }
    Ok(parts)
}

impl fmt::Debug for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the raw key: ids end up in logs.
        write!(f, "RecordId({})", self.log_ref())
    }
}

/// Stored record-id bytes could not be decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RecordIdError {
    /// The bytes end inside a length or a part.
    Truncated {
        /// Byte offset of the incomplete field.
        offset: usize,
    },
    /// The version byte is not one this build knows.
    UnknownVersion {
        /// The version found.
        version: u8,
    },
    /// A part is not UTF-8.
    InvalidUtf8 {
        /// Byte offset of the part.
        offset: usize,
    },
    /// Bytes follow the key.
    TrailingData {
        /// Byte offset of the first extra byte.
        offset: usize,
    },
    /// The tenant or operation is not a valid name.
    Scope(ScopeError),
    /// The key is not a valid idempotency key.
    Key(crate::key::KeyError),
}

impl fmt::Display for RecordIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordIdError::Truncated { offset } => {
                write!(f, "record id truncated at byte {offset}")
            }
            RecordIdError::UnknownVersion { version } => {
                write!(f, "record id has unknown format version {version}")
            }
            RecordIdError::InvalidUtf8 { offset } => {
                write!(f, "record id part at byte {offset} is not UTF-8")
            }
            RecordIdError::TrailingData { offset } => {
                write!(f, "record id has trailing bytes at {offset}")
            }
            RecordIdError::Scope(e) => write!(f, "record id: {e}"),
            RecordIdError::Key(e) => write!(f, "record id: {e}"),
        }
    }
}

impl core::error::Error for RecordIdError {}

/// A 16-hex-character digest of a [`RecordId`]: safe to log, stable across processes.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogRef([u8; 8]);

impl fmt::Display for LogRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::hex::Lower(&self.0).fmt(f)
    }
}

impl fmt::Debug for LogRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LogRef({self})")
    }
}

/// A log reference read back from its text (16 lowercase hex characters, as it
/// is displayed): for a caller that has one at hand and would otherwise hash the
/// scope and key again to get it.
impl core::str::FromStr for LogRef {
    type Err = ParseLogRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::hex::decode_lower::<8>(s)
            .map(LogRef)
            .map_err(|offset| ParseLogRefError { offset })
    }
}

/// The text was not 16 lowercase hex characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseLogRefError {
    /// Byte offset of the first offending character, or the length when it was wrong.
    pub offset: usize,
}

impl fmt::Display for ParseLogRefError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid log reference at byte {}: expected 16 lowercase hex characters",
            self.offset
        )
    }
}

impl core::error::Error for ParseLogRefError {}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn id(tenant: &str, operation: &str, key: &str) -> RecordId {
        Scope::new(tenant, operation)
            .unwrap()
            .record_id(&IdempotencyKey::new(key).unwrap())
    }

    #[test]
    fn a_log_ref_reads_back_from_its_text_and_nothing_else() {
        let log_ref = id("acme", "payments.capture", "k-1").log_ref();
        assert_eq!(log_ref.to_string().parse::<LogRef>(), Ok(log_ref));
        let text = log_ref.to_string();
        assert_eq!("".parse::<LogRef>(), Err(ParseLogRefError { offset: 0 }));
        assert_eq!(
            text[..15].parse::<LogRef>(),
            Err(ParseLogRefError { offset: 15 })
        );
        assert_eq!(
            format!("{text}0").parse::<LogRef>(),
            Err(ParseLogRefError { offset: 16 })
        );
        let upper = text.to_uppercase();
        let first_letter = upper.find(|c: char| c.is_ascii_alphabetic());
        if let Some(at) = first_letter {
            assert_eq!(
                upper.parse::<LogRef>(),
                Err(ParseLogRefError { offset: at })
            );
        }
        assert_eq!(
            format!("{}g", &text[..15]).parse::<LogRef>(),
            Err(ParseLogRefError { offset: 15 })
        );
    }

    #[test]
    fn separators_inside_names_do_not_collide() {
        assert_ne!(id("a:b", "c", "k"), id("a", "b:c", "k"));
        assert_ne!(id("a", "bc", "k"), id("ab", "c", "k"));
        // A name that ends in bytes that look like a length prefix of the next part.
        assert_ne!(id("t", "op", "k"), id("t", "o", "p"));
        assert!(
            Scope::new("t", "op\u{1}").is_err(),
            "control characters are refused"
        );
    }

    #[test]
    fn decode_inverts_encode() {
        let scope = Scope::new("tenant é", "appointments.create").unwrap();
        let key = IdempotencyKey::new("k-1").unwrap();
        let id = scope.record_id(&key);
        assert_eq!(RecordId::decode(id.as_bytes()), Ok((scope, key)));
    }

    #[test]
    fn decode_refuses_bad_bytes_with_offsets() {
        assert_eq!(
            RecordId::decode(&[]),
            Err(RecordIdError::Truncated { offset: 0 })
        );
        assert_eq!(
            RecordId::decode(&[9]),
            Err(RecordIdError::UnknownVersion { version: 9 })
        );
        assert_eq!(
            RecordId::decode(&[1, 0]),
            Err(RecordIdError::Truncated { offset: 1 })
        );
        assert_eq!(
            RecordId::decode(&[1, 0, 5, b'a']),
            Err(RecordIdError::Truncated { offset: 3 })
        );
        let mut bytes = id("t", "o", "k").as_bytes().to_vec();
        bytes.push(0);
        assert_eq!(
            RecordId::decode(&bytes),
            Err(RecordIdError::TrailingData { offset: 10 })
        );
    }

    #[test]
    fn log_ref_is_short_and_hides_the_key() {
        let id = id("acme", "charge", "secret-key-123");
        let text = id.log_ref().to_string();
        assert_eq!(text.len(), 16);
        assert!(!format!("{id:?}").contains("secret"));
    }

    fn name() -> impl Strategy<Value = String> {
        // Names rich in separators, length-like bytes and prefixes of each other.
        proptest::string::string_regex("[a-c:/\\x{1}-\\x{3}é]{1,6}")
            .unwrap()
            .prop_filter("no control characters in names", |s| {
                !s.chars().any(char::is_control)
            })
    }

    fn raw_key() -> impl Strategy<Value = String> {
        "[a-c:/\"\\\\]{1,6}"
    }

    proptest! {
        #[test]
        fn different_triples_never_share_an_id(
            a in (name(), name(), raw_key()),
            b in (name(), name(), raw_key()),
        ) {
            let ia = id(&a.0, &a.1, &a.2);
            let ib = id(&b.0, &b.1, &b.2);
            prop_assert_eq!(a == b, ia.as_bytes() == ib.as_bytes());
        }

        #[test]
        fn the_parts_are_what_decode_gives(t in (name(), name(), raw_key())) {
            let id = id(&t.0, &t.1, &t.2);
            let (scope, key) = RecordId::decode(id.as_bytes()).unwrap();
            prop_assert_eq!(id.parts(), [scope.tenant(), scope.operation(), key.as_str()]);
        }

        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = RecordId::decode(&bytes);
        }
    }
}
