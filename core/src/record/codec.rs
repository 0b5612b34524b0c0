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
    /// machine relies on, so a hostile or damaged record cannot steer a decision.
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
