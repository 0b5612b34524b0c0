//! Record formats: one format byte, then postcard.
//!
//! | format | fields |
//! |---|---|
//! | 1 | fingerprint … keep_until (every field of [`Record`] but `windows`) |
//! | 2 | format 1's fields, then `windows` (the windows the record was claimed under) and `fingerprint_scheme` |
//!
//! [`Record::encode`] writes format 2; [`Record::decode`] reads both.

use crate::prelude::*;

use alloc::collections::BTreeSet;
use core::fmt;

use serde::{Deserialize, Serialize};

use super::{EffectKind, FencingToken, Record, RecordState, Step, StepState};
use crate::fingerprint::Fingerprint;
use crate::time::UnixMillis;

/// The format byte written first by [`Record::encode`].
pub const FORMAT_VERSION: u8 = 2;

/// The oldest format [`Record::decode`] still reads.
pub const OLDEST_READABLE_FORMAT: u8 = 1;

/// Format 1's record: [`Record`] without `windows`, field for field in the same
/// order, so postcard reads format-1 bytes exactly as release 1 wrote them.
#[derive(Serialize, Deserialize)]
struct RecordV1 {
    fingerprint: Fingerprint,
    effect: EffectKind,
    state: RecordState,
    attempt: u32,
    last_token: FencingToken,
    steps: Vec<Step>,
    created_at: UnixMillis,
    updated_at: UnixMillis,
    replay_until: Option<UnixMillis>,
    keep_until: Option<UnixMillis>,
}

impl From<RecordV1> for Record {
    fn from(v1: RecordV1) -> Record {
        Record {
            fingerprint: v1.fingerprint,
            effect: v1.effect,
            state: v1.state,
            attempt: v1.attempt,
            last_token: v1.last_token,
            steps: v1.steps,
            created_at: v1.created_at,
            updated_at: v1.updated_at,
            replay_until: v1.replay_until,
            keep_until: v1.keep_until,
            windows: None,
            fingerprint_scheme: 1,
        }
    }
}

impl From<&Record> for RecordV1 {
    fn from(record: &Record) -> RecordV1 {
        let record = record.clone();
        RecordV1 {
            fingerprint: record.fingerprint,
            effect: record.effect,
            state: record.state,
            attempt: record.attempt,
            last_token: record.last_token,
            steps: record.steps,
            created_at: record.created_at,
            updated_at: record.updated_at,
            replay_until: record.replay_until,
            keep_until: record.keep_until,
        }
    }
}

/// `value` after a format byte; a format byte alone (which decodes to an error)
/// when serde cannot express it, which no record type ever triggers.
fn encode_as<T: Serialize>(version: u8, value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(1 + postcard_len(value));
    append_as(version, value, &mut out);
    out
}

/// Appends `version`, then `value` in postcard, to `out`.
fn append_as<T: Serialize>(version: u8, value: &T, out: &mut Vec<u8>) {
    let start = out.len();
    out.push(version);
    if postcard::serialize_with_flavor(value, Append(out)).is_err() {
        // Writing to a `Vec` cannot fail; a failing `Serialize` leaves the
        // format byte alone, as `decode` then refuses it.
        out.truncate(start + 1);
    }
}

/// How many bytes postcard writes for `value`.
fn postcard_len<T: Serialize>(value: &T) -> usize {
    postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default()).unwrap_or(0)
}

/// A postcard output that appends to a `Vec` the caller already sized.
struct Append<'a>(&'a mut Vec<u8>);

impl postcard::ser_flavors::Flavor for Append<'_> {
    type Output = ();

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0.push(byte);
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.extend_from_slice(data);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<()> {
        Ok(())
    }
}

/// A body written as one run of bytes. postcard writes a byte string exactly
/// as the sequence of `u8` serde derives for a `Vec<u8>` (a varint length,
/// then the bytes) and other formats alike (serde_json: an array of numbers),
/// so the encoding is unchanged; only the per-byte calls go.
pub(super) fn body_as_bytes<S: serde::Serializer>(
    body: &Option<Vec<u8>>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match body {
        Some(bytes) => serializer.serialize_some(&Bytes(bytes)),
        None => serializer.serialize_none(),
    }
}

/// The headers, each value written as [`body_as_bytes`] writes a body.
pub(super) fn headers_as_bytes<S: serde::Serializer>(
    headers: &[(String, Vec<u8>)],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeSeq as _;
    let mut seq = serializer.serialize_seq(Some(headers.len()))?;
    for (name, value) in headers {
        seq.serialize_element(&(name, Bytes(value)))?;
    }
    seq.end()
}

struct Bytes<'a>(&'a [u8]);

impl Serialize for Bytes<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Reads what [`body_as_bytes`] writes: a byte string where the format has one
/// (postcard: one copy instead of a call per byte), a sequence of numbers where
/// it has not (serde_json), so either encoding of a body reads back.
pub(super) fn body_from_bytes<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Vec<u8>>, D::Error> {
    struct MaybeBody;

    impl<'de> serde::de::Visitor<'de> for MaybeBody {
        type Value = Option<Vec<u8>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an optional body of bytes")
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }

        fn visit_some<D: serde::Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_byte_buf(ByteBuf).map(Some)
        }
    }

    deserializer.deserialize_option(MaybeBody)
}

/// Reads what [`headers_as_bytes`] writes, each value as [`body_from_bytes`]
/// reads a body.
pub(super) fn headers_from_bytes<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<(String, Vec<u8>)>, D::Error> {
    let headers: Vec<(String, OwnedBytes)> = Deserialize::deserialize(deserializer)?;
    Ok(headers
        .into_iter()
        .map(|(name, value)| (name, value.0))
        .collect())
}

/// A byte string read by [`ByteBuf`].
struct OwnedBytes(Vec<u8>);

impl<'de> Deserialize<'de> for OwnedBytes {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_byte_buf(ByteBuf).map(OwnedBytes)
    }
}

/// Accepts bytes however the format hands them over.
struct ByteBuf;

impl<'de> serde::de::Visitor<'de> for ByteBuf {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte string or a sequence of bytes")
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Self::Value, E> {
        Ok(bytes.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Self::Value, E> {
        Ok(bytes)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // At most what the format says it holds, and never more than a
        // hostile length could make us reserve before a byte is read.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(64 * 1024));
        while let Some(byte) = seq.next_element::<u8>()? {
            bytes.push(byte);
        }
        Ok(bytes)
    }
}

/// Whether postcard writes `value` as exactly `expected`: the re-encoding is
/// compared as it is made, never allocated (every read of a record checks it).
fn encodes_to<T: Serialize>(value: &T, expected: &[u8]) -> bool {
    postcard::serialize_with_flavor(value, SameAs { expected, at: 0 }).unwrap_or(false)
}

/// A postcard output that compares each byte written with `expected` and stops
/// at the first that differs.
struct SameAs<'a> {
    expected: &'a [u8],
    at: usize,
}

impl postcard::ser_flavors::Flavor for SameAs<'_> {
    type Output = bool;

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.try_extend(&[byte])
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        let end = self.at.saturating_add(data.len());
        if self.expected.get(self.at..end) != Some(data) {
            // Not an error of the value: the only way to stop serializing early.
            return Err(postcard::Error::SerializeBufferFull);
        }
        self.at = end;
        Ok(())
    }

    fn finalize(self) -> postcard::Result<bool> {
        Ok(self.at == self.expected.len())
    }
}

fn take_all<'a, T: Deserialize<'a>>(rest: &'a [u8]) -> Result<T, DecodeError> {
    let (value, trailing) =
        postcard::take_from_bytes::<T>(rest).map_err(|e| corrupt(e.to_string()))?;
    if !trailing.is_empty() {
        return Err(corrupt(format!(
            "{} trailing bytes after the record",
            trailing.len()
        )));
    }
    Ok(value)
}

/// Stored bytes that are not a valid record (docs/architecture.md, invariant 7: a typed
/// error, never a panic and never a misread).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DecodeError {
    /// No bytes at all (not even the format byte).
    Empty,
    /// The format byte names a version this build does not know (written by a
    /// newer release, or not a record at all).
    UnknownVersion {
        /// The format byte found.
        version: u8,
    },
    /// The bytes after the format byte are truncated, malformed, followed by
    /// trailing bytes, or describe a record that breaks an invariant.
    Corrupt {
        /// What is wrong, for logs and operators.
        detail: String,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Empty => f.write_str("record bytes are empty"),
            DecodeError::UnknownVersion { version } => write!(
                f,
                "record format version {version} is unknown (this build reads versions {OLDEST_READABLE_FORMAT} to {FORMAT_VERSION})"
            ),
            DecodeError::Corrupt { detail } => write!(f, "record bytes are corrupt: {detail}"),
        }
    }
}

impl core::error::Error for DecodeError {}

fn corrupt(detail: impl Into<String>) -> DecodeError {
    DecodeError::Corrupt {
        detail: detail.into(),
    }
}

impl Record {
    /// The stored bytes: [`FORMAT_VERSION`], then postcard.
    ///
    /// Native and wasm builds produce identical bytes (docs/architecture.md, invariant 6):
    /// postcard writes integers as fixed-order varints, never in native order.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        encode_as(FORMAT_VERSION, self)
    }

    /// How many bytes [`encode`](Record::encode) writes, counted without
    /// writing them (to size a buffer that holds more than the record).
    #[must_use]
    pub fn encoded_len(&self) -> usize {
        1 + postcard_len(self)
    }

    /// Appends the bytes [`encode`](Record::encode) returns to `out`: a store
    /// that keeps a header before the record writes both into one buffer.
    ///
    /// ```
    /// use idemkit_core::machine::{claim, ClaimRequest, Policy};
    /// use idemkit_core::{Fingerprint, UnixMillis};
    ///
    /// let request = ClaimRequest {
    ///     fingerprint: Fingerprint::from_bytes([7; 32]).into(),
    ///     owner: "worker-1".into(),
    /// };
    /// let now = UnixMillis::from_millis(1_700_000_000_000);
    /// let decision = claim(None, &request, &Policy::default(), now);
    /// let record = decision.write.expect("a new key's claim writes a record");
    ///
    /// // A version number, then the record, in one buffer of the right size.
    /// let mut stored = Vec::with_capacity(8 + record.encoded_len());
    /// stored.extend_from_slice(&42u64.to_le_bytes());
    /// record.encode_into(&mut stored);
    /// assert_eq!(&stored[8..], record.encode().as_slice());
    /// ```
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        append_as(FORMAT_VERSION, self, out);
    }

    /// A record from stored bytes; never panics.
    ///
    /// Besides malformed bytes, this refuses records that break an invariant the
    /// machine relies on, so a hostile or damaged record cannot steer a decision,
    /// and non-canonical encodings: for bytes in the current format,
    /// `decode(b) == Ok(r)` implies `r.encode() == b`; bytes in an older format
    /// decode to the record that `encode` then writes in the current one.
    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        // One record, one encoding per format: refusing non-canonical spellings
        // (overlong varints and the like) makes "decodes" imply "re-encodes to
        // these very bytes", so stored bytes compare equal exactly when records do.
        let (record, canonical) = match version {
            1 => {
                let record = Record::from(take_all::<RecordV1>(rest)?);
                let canonical = encodes_to(&RecordV1::from(&record), rest);
                (record, canonical)
            }
            FORMAT_VERSION => {
                let record = take_all::<Record>(rest)?;
                let canonical = encodes_to(&record, rest);
                (record, canonical)
            }
            _ => return Err(DecodeError::UnknownVersion { version }),
        };
        record.check_invariants()?;
        if !canonical {
            return Err(corrupt("non-canonical encoding"));
        }
        Ok(record)
    }

    /// The invariants every record written by the machine holds; cheap (linear
    /// in the number of steps).
    fn check_invariants(&self) -> Result<(), DecodeError> {
        // FencingToken's serde derive bypasses FencingToken::new.
        if self.last_token.get() == 0 {
            return Err(corrupt("last fencing token is 0"));
        }
        if self.attempt == 0 {
            return Err(corrupt("attempt is 0"));
        }
        if self.fingerprint_scheme == 0 {
            return Err(corrupt("fingerprint scheme is 0"));
        }

        match &self.state {
            RecordState::Running { lease } => {
                if lease.token != self.last_token {
                    return Err(corrupt(format!(
                        "lease token {} differs from the last token {}",
                        lease.token, self.last_token
                    )));
                }
                if self.replay_until.is_some() || self.keep_until.is_some() {
                    return Err(corrupt("a running record has retention deadlines"));
                }
            }
            RecordState::Unknown { .. } => {
                if self.replay_until.is_some() || self.keep_until.is_some() {
                    return Err(corrupt("an unknown record has retention deadlines"));
                }
            }
            RecordState::Completed { .. } => match (self.replay_until, self.keep_until) {
                (Some(replay), Some(keep)) if replay <= keep => {}
                _ => {
                    return Err(corrupt(
                        "a completed record needs replay_until <= keep_until",
                    ));
                }
            },
            RecordState::Released { .. } => {
                if self.replay_until.is_some() || self.keep_until.is_none() {
                    return Err(corrupt(
                        "a released record needs keep_until and no replay_until",
                    ));
                }
            }
        }
        let mut names = BTreeSet::new();
        for step in &self.steps {
            if !names.insert(step.name.as_str()) {
                return Err(corrupt(format!("step {:?} appears twice", step.name)));
            }
            let consistent = match step.state {
                StepState::Started => step.done_at.is_none() && step.provider_ref.is_none(),
                StepState::Done => step.done_at.is_some(),
            };
            if !consistent {
                return Err(corrupt(format!(
                    "step {:?} has done_at/provider_ref inconsistent with its state",
                    step.name
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::fingerprint::Fingerprint;
    use crate::record::{EffectKind, FencingToken, Lease, Step, StoredResponse, UnknownReason};
    use crate::time::UnixMillis;

    fn t(millis: u64) -> UnixMillis {
        UnixMillis::from_millis(millis)
    }

    fn token(n: u64) -> FencingToken {
        FencingToken::new(n).unwrap()
    }

    fn base(state: RecordState) -> Record {
        Record {
            fingerprint: Fingerprint::from_bytes([0xab; 32]),
            effect: EffectKind::External,
            state,
            attempt: 2,
            last_token: token(3),
            steps: vec![
                Step {
                    name: "book".into(),
                    state: StepState::Done,
                    provider_key: "book-1".into(),
                    provider_ref: Some("appt_1".into()),
                    started_at: t(10),
                    done_at: Some(t(20)),
                },
                Step {
                    name: "notify".into(),
                    state: StepState::Started,
                    provider_key: "notify-1".into(),
                    provider_ref: None,
                    started_at: t(30),
                    done_at: None,
                },
            ],
            created_at: t(1),
            updated_at: t(40),
            replay_until: None,
            keep_until: None,
            windows: Some(crate::record::RecordWindows {
                replay_ms: 86_400_000,
                record_ms: 2_592_000_000,
            }),
            fingerprint_scheme: 1,
        }
    }

    /// One valid record per state.
    fn samples() -> Vec<Record> {
        let running = base(RecordState::Running {
            lease: Lease {
                owner: "worker-7".into(),
                token: token(3),
                expires_at: t(30_040),
            },
        });
        let mut completed = base(RecordState::Completed {
            response: StoredResponse {
                status: 201,
                headers: vec![("content-type".into(), b"application/json".to_vec())],
                body: Some(br#"{"id":"appt_1"}"#.to_vec()),
                resource_ref: Some("appt_1".into()),
            },
            completed_at: t(40),
        });
        completed.replay_until = Some(t(1_000));
        completed.keep_until = Some(t(9_000));
        let unknown = base(RecordState::Unknown {
            reason: UnknownReason::MarkedByWorker("timeout".into()),
            since: t(40),
        });
        let mut released = base(RecordState::Released { at: t(40) });
        released.keep_until = Some(t(9_000));
        vec![running, completed, unknown, released]
    }

    #[test]
    fn every_state_round_trips() {
        for record in samples() {
            let bytes = record.encode();
            assert_eq!(bytes.first(), Some(&FORMAT_VERSION));
            assert_eq!(Record::decode(&bytes), Ok(record));
        }
    }

    /// The version-1 bytes of `samples()[0]` with one step, as release 1 wrote them.
    const FORMAT_1_RUNNING: &str = concat!(
        "01",
        "abababababababababababababababababababababababababababababababab",
        "01",                 // effect: External
        "00",                 // state: Running
        "08776f726b65722d37", // owner "worker-7"
        "03",                 // lease token 3
        "d8ea01",             // expires_at 30040
        "02",
        "03", // attempt 2, last_token 3
        "01", // one step
        "04626f6f6b",
        "01",
        "06626f6f6b2d31",
        "0106617070745f31",
        "0a",
        "0114",
        "01",
        "28", // created_at 1, updated_at 40
        "00",
        "00" // no replay_until, no keep_until
    );

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len() / 2)
            .map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }

    /// Format 1 is read forever: its bytes decode to the same record, with no
    /// windows (they come from the policy when such a record is completed).
    #[test]
    fn format_version_1_still_decodes() {
        let mut record = samples().remove(0);
        record.steps.truncate(1);
        record.windows = None;
        record.fingerprint_scheme = 1;
        assert_eq!(Record::decode(&unhex(FORMAT_1_RUNNING)), Ok(record));
    }

    /// Pins format version 2: if this changes, stores written by this release can
    /// no longer be read. Bump FORMAT_VERSION and keep a decoder for version 2.
    #[test]
    fn format_version_2_is_stable() {
        let mut record = samples().remove(0);
        record.steps.truncate(1);
        let hex: String = record.encode().iter().map(|b| format!("{b:02x}")).collect();
        let format_1_fields = FORMAT_1_RUNNING.get(2..).unwrap();
        assert_eq!(
            hex,
            format!(
                "02{format_1_fields}{}",
                concat!(
                    "01",         // windows: Some
                    "80b89929",   // replay 86,400,000 ms (24 h)
                    "8090fbd309", // record 2,592,000,000 ms (30 days)
                    "01"          // fingerprint scheme 1
                )
            )
        );
    }

    /// Found by the `record_decode` fuzz target (its format-1 seed) when format 2
    /// arrived: format-1 bytes decode to a record whose encoding is format 2, and
    /// that encoding decodes to the same record.
    #[test]
    fn format_1_bytes_reencode_in_format_2_to_the_same_record() {
        let bytes = unhex(FORMAT_1_RUNNING);
        let record = Record::decode(&bytes).unwrap();
        let again = record.encode();
        assert_eq!(again.first(), Some(&FORMAT_VERSION));
        assert_ne!(again, bytes);
        assert_eq!(Record::decode(&again), Ok(record));
    }

    /// A format-1 record with a non-canonical spelling is refused like a format-2 one.
    #[test]
    fn format_version_1_refuses_trailing_bytes() {
        let mut bytes = unhex(FORMAT_1_RUNNING);
        bytes.push(0);
        assert!(matches!(
            Record::decode(&bytes),
            Err(DecodeError::Corrupt { .. })
        ));
    }

    #[test]
    fn empty_and_unknown_versions_are_typed_errors() {
        assert_eq!(Record::decode(&[]), Err(DecodeError::Empty));
        let mut bytes = samples().remove(1).encode();
        for version in [0u8, 3, 0x7f, 0xff] {
            bytes[0] = version;
            assert_eq!(
                Record::decode(&bytes),
                Err(DecodeError::UnknownVersion { version })
            );
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for record in samples() {
            let bytes = record.encode();
            for len in 0..bytes.len() {
                let err = Record::decode(&bytes[..len]).unwrap_err();
                let want_empty = len == 0;
                assert_eq!(err == DecodeError::Empty, want_empty, "len {len}: {err}");
            }
        }
    }

    #[test]
    fn trailing_bytes_are_corrupt() {
        let mut bytes = samples().remove(0).encode();
        bytes.push(0);
        assert!(matches!(
            Record::decode(&bytes),
            Err(DecodeError::Corrupt { detail }) if detail.contains("trailing")
        ));
    }

    #[test]
    fn overlong_varint_is_refused() {
        // attempt 2 spelled as the two-byte varint 0x82 0x00.
        let record = samples().remove(3);
        let bytes = record.encode();
        let canonical = Record::decode(&bytes).unwrap();
        assert_eq!(canonical, record);
        let mut spelled = record.clone();
        spelled.attempt = 0x55; // a unique byte to find in the encoding
        let bytes = spelled.encode();
        let at = bytes.iter().position(|&b| b == 0x55).unwrap();
        let mut overlong = bytes[..at].to_vec();
        overlong.extend_from_slice(&[0xd5, 0x00]);
        overlong.extend_from_slice(&bytes[at + 1..]);
        assert_eq!(
            Record::decode(&overlong),
            Err(DecodeError::Corrupt {
                detail: "non-canonical encoding".into()
            })
        );
    }

    #[test]
    fn the_canonical_check_compares_every_byte_and_the_length() {
        for record in samples() {
            let bytes = record.encode();
            let body = &bytes[1..];
            assert!(encodes_to(&record, body));
            let mut longer = body.to_vec();
            longer.push(0);
            assert!(!encodes_to(&record, &longer), "a trailing byte");
            assert!(
                !encodes_to(&record, &body[..body.len() - 1]),
                "one byte short"
            );
            for at in [0, body.len() / 2, body.len() - 1] {
                let mut changed = body.to_vec();
                changed[at] ^= 1;
                assert!(!encodes_to(&record, &changed), "byte {at} changed");
            }
        }
    }

    fn corrupt_detail(record: &Record) -> String {
        match Record::decode(&record.encode()) {
            Err(DecodeError::Corrupt { detail }) => detail,
            other => panic!("expected Corrupt, got {other:?}"),
        }
    }

    #[test]
    fn records_breaking_invariants_are_refused() {
        let [running, completed, unknown, released]: [Record; 4] = samples().try_into().unwrap();

        let mut r = running.clone();
        r.last_token = FencingToken(0);
        assert!(corrupt_detail(&r).contains("token"));

        let mut r = running.clone();
        r.last_token = token(4);
        assert!(corrupt_detail(&r).contains("lease token"));

        let mut r = unknown.clone();
        r.attempt = 0;
        assert!(corrupt_detail(&r).contains("attempt"));

        let mut r = released.clone();
        r.steps[1].name = "book".into();
        assert!(corrupt_detail(&r).contains("twice"));

        let mut r = released.clone();
        r.steps[1].done_at = Some(t(1));
        assert!(corrupt_detail(&r).contains("inconsistent"));

        let mut r = completed.clone();
        r.replay_until = None;
        assert!(corrupt_detail(&r).contains("replay_until"));

        let mut r = completed.clone();
        r.replay_until = Some(t(10_000));
        assert!(corrupt_detail(&r).contains("replay_until"));

        let mut r = released.clone();
        r.keep_until = None;
        assert!(corrupt_detail(&r).contains("keep_until"));

        let mut r = running.clone();
        r.keep_until = Some(t(1));
        assert!(corrupt_detail(&r).contains("retention"));

        let mut r = unknown;
        r.replay_until = Some(t(1));
        assert!(corrupt_detail(&r).contains("retention"));
    }

    #[test]
    fn errors_name_what_is_wrong() {
        assert_eq!(DecodeError::Empty.to_string(), "record bytes are empty");
        assert_eq!(
            DecodeError::UnknownVersion { version: 9 }.to_string(),
            "record format version 9 is unknown (this build reads versions 1 to 2)"
        );
    }

    fn arb_time() -> impl Strategy<Value = UnixMillis> {
        prop_oneof![Just(u64::MAX), Just(0u64), any::<u64>()].prop_map(UnixMillis::from_millis)
    }

    fn arb_response() -> impl Strategy<Value = StoredResponse> {
        (
            any::<u16>(),
            proptest::collection::vec(
                (".{0,8}", proptest::collection::vec(any::<u8>(), 0..8)),
                0..3,
            ),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..300)),
            proptest::option::of(".{0,12}"),
        )
            .prop_map(|(status, headers, body, resource_ref)| StoredResponse {
                status,
                headers,
                body,
                resource_ref,
            })
    }

    fn arb_steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::btree_map(
            ".{0,10}",
            (
                any::<bool>(),
                ".{0,10}",
                proptest::option::of(".{0,10}"),
                arb_time(),
                arb_time(),
            ),
            0..4,
        )
        .prop_map(|steps| {
            steps
                .into_iter()
                .map(
                    |(name, (done, provider_key, reference, started_at, done_at))| Step {
                        name,
                        state: if done {
                            StepState::Done
                        } else {
                            StepState::Started
                        },
                        provider_key,
                        provider_ref: if done { reference } else { None },
                        started_at,
                        done_at: done.then_some(done_at),
                    },
                )
                .collect()
        })
    }

    /// Any record the invariants allow, built valid by construction.
    fn arb_record() -> impl Strategy<Value = Record> {
        let state = prop_oneof![
            (".{0,12}", arb_time()).prop_map(|(owner, expires_at)| (0u8, owner, expires_at, None)),
            (arb_response(), arb_time()).prop_map(|(r, at)| (1u8, String::new(), at, Some(r))),
            (".{0,12}", arb_time()).prop_map(|(why, since)| (2u8, why, since, None)),
            arb_time().prop_map(|at| (3u8, String::new(), at, None)),
        ];
        (
            any::<[u8; 32]>(),
            any::<bool>(),
            state,
            1..=u32::MAX,
            1..=u64::MAX,
            arb_steps(),
            (arb_time(), arb_time(), any::<u64>(), any::<u64>()),
        )
            .prop_map(
                |(fp, external, (kind, text, at, response), attempt, last, steps, times)| {
                    let (created_at, updated_at, a, b) = times;
                    let last_token = token(last);
                    let (lo, hi) = (
                        UnixMillis::from_millis(a.min(b)),
                        UnixMillis::from_millis(a.max(b)),
                    );
                    let (state, replay_until, keep_until) = match (kind, response) {
                        (0, _) => (
                            RecordState::Running {
                                lease: Lease {
                                    owner: text,
                                    token: last_token,
                                    expires_at: at,
                                },
                            },
                            None,
                            None,
                        ),
                        (1, Some(response)) => (
                            RecordState::Completed {
                                response,
                                completed_at: at,
                            },
                            Some(lo),
                            Some(hi),
                        ),
                        (2, _) => (
                            RecordState::Unknown {
                                reason: match a % 5 {
                                    0 => UnknownReason::LeaseExpired,
                                    1 => UnknownReason::MarkedByWorker(text),
                                    2 => UnknownReason::GuardDropped,
                                    3 => UnknownReason::Crash,
                                    _ => UnknownReason::TokensExhausted,
                                },
                                since: at,
                            },
                            None,
                            None,
                        ),
                        _ => (RecordState::Released { at }, None, Some(hi)),
                    };
                    Record {
                        fingerprint: Fingerprint::from_bytes(fp),
                        effect: if external {
                            EffectKind::External
                        } else {
                            EffectKind::Local
                        },
                        state,
                        attempt,
                        last_token,
                        steps,
                        created_at,
                        updated_at,
                        replay_until,
                        keep_until,
                        windows: (a % 2 == 1).then_some(crate::record::RecordWindows {
                            replay_ms: a,
                            record_ms: b,
                        }),
                        fingerprint_scheme: u8::try_from(b % 3 + 1).unwrap_or(1),
                    }
                },
            )
    }

    proptest! {
        #[test]
        fn arbitrary_records_round_trip(record in arb_record()) {
            let bytes = record.encode();
            prop_assert_eq!(Record::decode(&bytes), Ok(record));
            // Every strict prefix is an error, never a panic or another record.
            for len in 0..bytes.len() {
                prop_assert!(Record::decode(&bytes[..len]).is_err());
            }
        }

        #[test]
        fn encoded_len_and_encode_into_agree_with_encode(
            record in arb_record(),
            prefix in proptest::collection::vec(any::<u8>(), 0..9),
        ) {
            let bytes = record.encode();
            prop_assert_eq!(record.encoded_len(), bytes.len());
            let mut out = prefix.clone();
            record.encode_into(&mut out);
            prop_assert_eq!(out.get(..prefix.len()), Some(prefix.as_slice()));
            prop_assert_eq!(out.get(prefix.len()..), Some(bytes.as_slice()));
        }

        /// Bodies and header values are written as byte strings; the bytes
        /// must be those serde's derive writes for a `Vec<u8>` (a sequence of
        /// `u8`), in postcard and in JSON, or stored records would change.
        #[test]
        fn responses_encode_as_the_derived_sequence_of_bytes(response in arb_response()) {
            #[derive(serde::Serialize)]
            struct Derived<'a> {
                status: u16,
                headers: &'a Vec<(String, Vec<u8>)>,
                body: &'a Option<Vec<u8>>,
                resource_ref: &'a Option<String>,
            }
            let derived = Derived {
                status: response.status,
                headers: &response.headers,
                body: &response.body,
                resource_ref: &response.resource_ref,
            };
            prop_assert_eq!(
                postcard::to_allocvec(&response).unwrap(),
                postcard::to_allocvec(&derived).unwrap()
            );
            prop_assert_eq!(
                serde_json::to_string(&response).unwrap(),
                serde_json::to_string(&derived).unwrap()
            );
        }

        #[test]
        fn responses_decode_as_the_derived_sequence_of_bytes(response in arb_response()) {
            #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
            struct Derived {
                status: u16,
                headers: Vec<(String, Vec<u8>)>,
                body: Option<Vec<u8>>,
                resource_ref: Option<String>,
            }
            let derived = Derived {
                status: response.status,
                headers: response.headers.clone(),
                body: response.body.clone(),
                resource_ref: response.resource_ref.clone(),
            };
            let bytes = postcard::to_allocvec(&derived).unwrap();
            prop_assert_eq!(&postcard::from_bytes::<StoredResponse>(&bytes).unwrap(), &response);
            // A truncated encoding is an error, never a shorter body.
            if let Some(shorter) = bytes.len().checked_sub(1) {
                prop_assert!(postcard::from_bytes::<StoredResponse>(&bytes[..shorter]).is_err());
            }
            let json = serde_json::to_string(&derived).unwrap();
            prop_assert_eq!(&serde_json::from_str::<StoredResponse>(&json).unwrap(), &response);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(record) = Record::decode(&bytes) {
                prop_assert_eq!(record.encode(), bytes);
            }
        }

        #[test]
        fn mutated_valid_records_never_panic(
            which in 0usize..4,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
        ) {
            let mut bytes = samples()[which].encode();
            for (index, value) in flips {
                let i = index.index(bytes.len());
                bytes[i] = value;
            }
            if let Ok(record) = Record::decode(&bytes) {
                prop_assert_eq!(record.encode(), bytes);
            }
        }
    }
}
