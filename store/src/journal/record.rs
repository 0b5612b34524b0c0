//! The journal's stored entries: a format byte, then postcard.

use idemkit_core::IdempotencyKey;
use idemkit_core::UnixMillis;
use idemkit_core::client::{AttemptResult, BreakerState};
use serde::{Deserialize, Serialize};

use super::{Action, JournalError};

const FORMAT_V1: u8 = 1;

/// The stored form of an action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionRecord {
    /// The idempotency key.
    pub key: String,
    /// The approved payload.
    pub payload: Vec<u8>,
    /// When the action began, in Unix milliseconds.
    pub created_at: u64,
}

/// The stored form of one attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptRecord {
    /// A random id for the attempt.
    pub attempt_id: String,
    /// When it was journalled as started, in Unix milliseconds.
    pub started_at: u64,
    /// When it ended; `None` while running, or when the process died.
    pub ended_at: Option<u64>,
    /// How it ended.
    pub result: Option<StoredResult>,
}

/// [`AttemptResult`] in stored form.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StoredResult {
    /// The connection failed; nothing was sent.
    ConnectError,
    /// No response in time.
    Timeout,
    /// A response.
    Response {
        /// Its status.
        status: u16,
        /// Its problem type.
        problem_type: Option<String>,
        /// Its Retry-After, in milliseconds.
        retry_after_ms: Option<u64>,
        /// For response-expired problems: the original status.
        original_status: Option<u16>,
    },
}

impl From<AttemptResult> for StoredResult {
    fn from(result: AttemptResult) -> Self {
        match result {
            AttemptResult::ConnectError => StoredResult::ConnectError,
            AttemptResult::Timeout => StoredResult::Timeout,
            AttemptResult::Response {
                status,
                problem_type,
                retry_after,
                original_status,
            } => StoredResult::Response {
                status,
                problem_type,
                retry_after_ms: retry_after
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
                original_status,
            },
        }
    }
}

impl From<StoredResult> for AttemptResult {
    fn from(stored: StoredResult) -> Self {
        match stored {
            StoredResult::ConnectError => AttemptResult::ConnectError,
            StoredResult::Timeout => AttemptResult::Timeout,
            StoredResult::Response {
                status,
                problem_type,
                retry_after_ms,
                original_status,
            } => AttemptResult::Response {
                status,
                problem_type,
                retry_after: retry_after_ms.map(core::time::Duration::from_millis),
                original_status,
            },
        }
    }
}

/// The stored form of an origin's circuit breaker state ([`BreakerState`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BreakerRecord {
    /// Closed, with this many consecutive failures.
    Closed {
        /// Consecutive failures since the last success.
        failures: u32,
    },
    /// Open until this instant, in Unix milliseconds.
    Open {
        /// When a probe may be tried.
        until: u64,
    },
    /// Half-open; `probing` while a probe is out.
    HalfOpen {
        /// A probe has been let through and not reported yet.
        probing: bool,
    },
}

impl From<BreakerState> for BreakerRecord {
    fn from(state: BreakerState) -> Self {
        match state {
            BreakerState::Closed { failures } => BreakerRecord::Closed { failures },
            BreakerState::Open { until } => BreakerRecord::Open {
                until: until.as_millis(),
            },
            BreakerState::HalfOpen { probing } => BreakerRecord::HalfOpen { probing },
        }
    }
}

impl From<BreakerRecord> for BreakerState {
    fn from(record: BreakerRecord) -> Self {
        match record {
            BreakerRecord::Closed { failures } => BreakerState::Closed { failures },
            BreakerRecord::Open { until } => BreakerState::Open {
                until: UnixMillis::from_millis(until),
            },
            BreakerRecord::HalfOpen { probing } => BreakerState::HalfOpen { probing },
        }
    }
}

impl BreakerRecord {
    pub(super) fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, String> {
        decode(bytes)
    }
}

fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let mut out = vec![FORMAT_V1];
    // postcard only fails on a full fixed buffer or an unsupported type; neither
    // applies to these owned structs written into a Vec.
    out.extend(postcard::to_allocvec(value).unwrap_or_default());
    out
}

fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, String> {
    match bytes.split_first() {
        None => Err("empty entry".into()),
        Some((&FORMAT_V1, body)) => match postcard::take_from_bytes::<T>(body) {
            Ok((value, [])) => Ok(value),
            Ok((_, rest)) => Err(format!("{} trailing bytes", rest.len())),
            Err(e) => Err(e.to_string()),
        },
        Some((version, _)) => Err(format!("unknown journal format version {version}")),
    }
}

impl ActionRecord {
    pub(super) fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, String> {
        decode(bytes)
    }

    pub(super) fn into_action(
        self,
        action_id: &str,
        resumed: bool,
    ) -> Result<Action, JournalError> {
        let key = IdempotencyKey::new(&self.key).map_err(|e| JournalError::Corrupt {
            action_id: action_id.into(),
            detail: format!("stored key: {e}"),
        })?;
        Ok(Action {
            action_id: action_id.to_owned(),
            key,
            payload: self.payload,
            created_at: UnixMillis::from_millis(self.created_at),
            resumed,
        })
    }
}

impl AttemptRecord {
    pub(super) fn encode(&self) -> Vec<u8> {
        encode(self)
    }

    pub(super) fn decode(bytes: &[u8]) -> Result<Self, String> {
        decode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_refusals() {
        let record = ActionRecord {
            key: "k".into(),
            payload: b"{}".to_vec(),
            created_at: 5,
        };
        assert_eq!(ActionRecord::decode(&record.encode()), Ok(record.clone()));
        assert!(ActionRecord::decode(&[]).is_err());
        let mut wrong_version = record.encode();
        wrong_version[0] = 9;
        assert_eq!(
            ActionRecord::decode(&wrong_version),
            Err("unknown journal format version 9".to_owned())
        );
        let mut trailing = record.encode();
        trailing.push(0);
        assert!(ActionRecord::decode(&trailing).is_err());
    }

    #[test]
    fn breaker_states_round_trip() {
        for state in [
            BreakerState::Closed { failures: 3 },
            BreakerState::Open {
                until: UnixMillis::from_millis(1_700_000_000_000),
            },
            BreakerState::HalfOpen { probing: true },
        ] {
            let record = BreakerRecord::from(state);
            assert_eq!(BreakerRecord::decode(&record.encode()), Ok(record));
            assert_eq!(BreakerState::from(record), state);
        }
    }

    proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = ActionRecord::decode(&bytes);
            let _ = AttemptRecord::decode(&bytes);
            let _ = BreakerRecord::decode(&bytes);
        }
    }
}
