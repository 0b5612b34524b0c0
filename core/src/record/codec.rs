//! Format version 1: one format byte, then postcard.

use core::fmt;
use std::collections::BTreeSet;

use super::{Record, RecordState, StepState};

/// The format byte written first by [`Record::encode`].
pub const FORMAT_VERSION: u8 = 1;

/// Stored bytes that are not a valid record (DESIGN.md, invariant 7: a typed
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
                "record format version {version} is unknown (this build reads version {FORMAT_VERSION})"
            ),
            DecodeError::Corrupt { detail } => write!(f, "record bytes are corrupt: {detail}"),
        }
    }
}

impl std::error::Error for DecodeError {}

fn corrupt(detail: impl Into<String>) -> DecodeError {
    DecodeError::Corrupt {
        detail: detail.into(),
    }
}

impl Record {
    /// The stored bytes: [`FORMAT_VERSION`], then postcard.
    ///
    /// Native and wasm builds produce identical bytes (DESIGN.md, invariant 6):
    /// postcard writes integers as fixed-order varints, never in native order.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let out = vec![FORMAT_VERSION];
        // Serializing into a Vec only fails for types serde cannot express
        // (maps with unknown length and the like), which a Record never contains;
        // the fallback keeps this total anyway: a format byte alone decodes to an error.
        match postcard::to_extend(self, out) {
            Ok(bytes) => bytes,
            Err(_) => vec![FORMAT_VERSION],
        }
    }

    /// A record from stored bytes; never panics.
    ///
    /// Besides malformed bytes, this refuses records that break an invariant the
    /// machine relies on, so a hostile or damaged record cannot steer a decision,
    /// and non-canonical encodings: `decode(b) == Ok(r)` implies `r.encode() == b`.
    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        let (&version, rest) = bytes.split_first().ok_or(DecodeError::Empty)?;
        if version != FORMAT_VERSION {
            return Err(DecodeError::UnknownVersion { version });
        }
        let (record, trailing) =
            postcard::take_from_bytes::<Record>(rest).map_err(|e| corrupt(e.to_string()))?;
        if !trailing.is_empty() {
            return Err(corrupt(format!(
                "{} trailing bytes after the record",
                trailing.len()
            )));
        }
        record.check_invariants()?;
        // One record, one encoding: refusing non-canonical spellings (overlong
        // varints and the like) makes "decodes" imply "re-encodes to these very
        // bytes", so stored bytes compare equal exactly when records do.
        if record.encode() != bytes {
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

    /// Pins format version 1: if this changes, old stores can no longer be read.
    /// Bump FORMAT_VERSION and keep a decoder for version 1 instead of editing it.
    #[test]
    fn format_version_1_is_stable() {
        let mut record = samples().remove(0);
        record.steps.truncate(1);
        let hex: String = record.encode().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            concat!(
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
            )
        );
    }

    #[test]
    fn empty_and_unknown_versions_are_typed_errors() {
        assert_eq!(Record::decode(&[]), Err(DecodeError::Empty));
        let mut bytes = samples().remove(1).encode();
        for version in [0u8, 2, 0x7f, 0xff] {
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
            "record format version 9 is unknown (this build reads version 1)"
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
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..64)),
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
