//! Fingerprints: what an idempotency key originally meant.
//!
//! A [`Fingerprint`] is 32 bytes of keyed blake3 over length-framed fields
//! (operation, schema version, content kind, canonical body, and for HTTP
//! requests the method, the concrete path and the query); see docs/architecture.md,
//! "Fingerprints". It is displayed as 64 lowercase hex characters. A
//! [`FingerprintSpec`] computes one.
//!
//! Schemes: every record stores the scheme its fingerprint was written under
//! ([`Record::fingerprint_scheme`](crate::record::Record::fingerprint_scheme)).
//! [`SCHEME_BODY`] (1) frames the operation, schema version, content kind and
//! body; [`SCHEME_REQUEST_LINE`] (2) frames the request line on top of it. A
//! claim compares a [`RequestFingerprint`] with a record under the record's
//! scheme, so records written before an upgrade keep replaying.

mod form;
mod request_line;
mod spec;

pub use form::{FormError, FormErrorKind, decode_form};
pub use request_line::{
    CONTEXT_V2, RequestFingerprint, RequestLine, SCHEME_BODY, SCHEME_REQUEST_LINE,
};
pub use spec::{CONTEXT, ContentKind, FingerprintError, FingerprintSpec, SpecError};

use core::fmt;
use core::str::FromStr;

/// A 32-byte request fingerprint; `Display` gives 64 lowercase hex characters.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Fingerprint([u8; 32]);

impl Fingerprint {
    /// The length in bytes.
    pub const LEN: usize = 32;

    /// A fingerprint from its raw bytes (as stored in a record).
    #[must_use]
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        Fingerprint(bytes)
    }

    /// The raw bytes.
    #[must_use]
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        crate::hex::Lower(&self.0).fmt(f)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({self})")
    }
}

/// The text was not 64 lowercase hex characters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseFingerprintError {
    /// Byte offset of the first offending character, or the length when it was wrong.
    pub offset: usize,
}

impl fmt::Display for ParseFingerprintError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid fingerprint at byte {}: expected 64 lowercase hex characters",
            self.offset
        )
    }
}

impl core::error::Error for ParseFingerprintError {}

impl FromStr for Fingerprint {
    type Err = ParseFingerprintError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        crate::hex::decode_lower::<32>(s)
            .map(Fingerprint)
            .map_err(|offset| ParseFingerprintError { offset })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;

    #[test]
    fn display_and_parse_round_trip() {
        let mut raw = [0u8; 32];
        for (i, b) in raw.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(37);
        }
        let fp = Fingerprint::from_bytes(raw);
        let text = fp.to_string();
        assert_eq!(text.len(), 64);
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
        assert_eq!(text.parse::<Fingerprint>(), Ok(fp));
    }

    #[test]
    fn parse_names_the_bad_offset() {
        let mut text = "0".repeat(64);
        text.replace_range(10..11, "G");
        assert_eq!(
            text.parse::<Fingerprint>(),
            Err(ParseFingerprintError { offset: 10 })
        );
        assert_eq!(
            "abc".parse::<Fingerprint>(),
            Err(ParseFingerprintError { offset: 3 })
        );
    }
}
