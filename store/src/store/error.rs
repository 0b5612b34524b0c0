//! Errors, redb's style: one `#[non_exhaustive]` enum per operation family.
//!
//! | family | returned by |
//! |---|---|
//! | [`StorageError`] | the storage failures every operation can hit (an adapter's own error in [`StorageError::Adapter`]) |
//! | [`ClaimError`] | `Store::claim` |
//! | [`WorkerError`] | a transition of one record: the execution guard's writes, `Store::resolve`, `Store::recover` |
//! | [`QueryError`] | get, list, list_unresolved, stats, gc, import, verify |

use std::fmt;

use idemkit_core::LogRef;
use idemkit_core::machine::TransitionError;

use crate::adapters::{AdapterError, CorruptRecord, FailureKind};

/// A storage failure: nothing was acknowledged, and nothing was written.
#[derive(Debug)]
#[non_exhaustive]
pub enum StorageError {
    /// The adapter failed: its kind ([`AdapterError::kind`]) says whether to
    /// try again later, and [`AdapterError::downcast_ref`] finds the adapter's
    /// own error (`adapters::redb::OpenError`, `adapters::postgres::PgError`).
    Adapter(AdapterError),
    /// A stored record does not decode (bytes damaged or written by an unknown version).
    CorruptRecord {
        /// The record's log reference (`None` when its id does not decode either).
        log_ref: Option<LogRef>,
        /// What the decoder reported.
        detail: String,
    },
    /// A stored record id does not decode.
    CorruptId {
        /// What the decoder reported.
        detail: String,
    },
    /// The engine met something the state machine never produces (an answer
    /// to another operation, a claim to execute that wrote no record): a bug,
    /// reported instead of acted on.
    Corrupt {
        /// What was met.
        detail: String,
    },
    /// The record kept changing between this operation's read and its
    /// conditional write, [`MAX_ATTEMPTS`](idemkit_core::machine::MAX_ATTEMPTS)
    /// times in a row; nothing was written. Retry later.
    Contention {
        /// The record's log reference.
        log_ref: LogRef,
        /// How many times it was read and decided.
        attempts: u32,
    },
}

impl StorageError {
    /// The adapter's own error, if this is (or wraps) an `E`.
    #[must_use]
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            StorageError::Adapter(e) => e.downcast_ref(),
            _ => None,
        }
    }

    /// Whether trying again later may succeed: the database was unavailable
    /// (a busy file, a lost connection) or the record was contended.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            StorageError::Adapter(e) => e.kind() == FailureKind::Unavailable,
            StorageError::Contention { .. } => true,
            _ => false,
        }
    }
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Adapter(e) => e.fmt(f),
            StorageError::CorruptRecord {
                log_ref: Some(log_ref),
                detail,
            } => write!(f, "record {log_ref} is corrupt: {detail}"),
            StorageError::CorruptRecord {
                log_ref: None,
                detail,
            } => write!(f, "a record with an undecodable id is corrupt: {detail}"),
            StorageError::CorruptId { detail } => write!(f, "a record id is corrupt: {detail}"),
            StorageError::Corrupt { detail } => write!(f, "inconsistent store: {detail}"),
            StorageError::Contention { log_ref, attempts } => write!(
                f,
                "record {log_ref} changed under {attempts} attempts in a row to write it; \
                 nothing was written"
            ),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StorageError::Adapter(e) => Some(e),
            _ => None,
        }
    }
}

impl From<AdapterError> for StorageError {
    fn from(e: AdapterError) -> Self {
        // A record that does not decode is the engine's concern (GC skips it,
        // `verify` names it), whatever adapter found it.
        if let Some(corrupt) = e.downcast_ref::<CorruptRecord>() {
            return StorageError::CorruptRecord {
                log_ref: corrupt.log_ref,
                detail: corrupt.detail.clone(),
            };
        }
        StorageError::Adapter(e)
    }
}

impl From<CorruptRecord> for StorageError {
    fn from(e: CorruptRecord) -> Self {
        StorageError::CorruptRecord {
            log_ref: e.log_ref,
            detail: e.detail,
        }
    }
}

/// A claim failed before an answer was durable; nothing was executed or written.
#[derive(Debug)]
#[non_exhaustive]
pub enum ClaimError {
    /// Storage failed: answer "store unavailable" (503) and never execute.
    Storage(StorageError),
}

impl fmt::Display for ClaimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClaimError::Storage(e) => write!(f, "claim failed: {e}"),
        }
    }
}

impl std::error::Error for ClaimError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClaimError::Storage(e) => Some(e),
        }
    }
}

impl From<StorageError> for ClaimError {
    fn from(e: StorageError) -> Self {
        ClaimError::Storage(e)
    }
}

/// A transition of one record was refused or failed: a worker's (complete,
/// release, mark_unknown, renew, begin_step, complete_step) or an operator's
/// (resolve, recover). The record is unchanged.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerError {
    /// There is no record under this key (deleted by GC, or never claimed).
    NotFound {
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// The state machine refused the transition: a stale fencing token (the
    /// lease was taken over), a wrong state (resolving a record that is not
    /// unresolved), an unknown step.
    Rejected {
        /// The record's log reference.
        log_ref: LogRef,
        /// Why, naming the tokens or states involved.
        error: TransitionError,
    },
    /// Storage failed; nothing was acknowledged.
    Storage(StorageError),
    /// The record changed since the version the caller saw
    /// ([`Store::resolve_seen`](super::Store::resolve_seen)).
    Changed {
        /// The record's log reference.
        log_ref: LogRef,
    },
}

impl WorkerError {
    /// The state machine's reason, when the transition was refused.
    #[must_use]
    pub fn transition_error(&self) -> Option<&TransitionError> {
        match self {
            WorkerError::Rejected { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl fmt::Display for WorkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WorkerError::NotFound { log_ref } => {
                write!(f, "transition refused: no record {log_ref}")
            }
            WorkerError::Rejected { log_ref, error } => {
                write!(f, "transition refused for record {log_ref}: {error}")
            }
            WorkerError::Storage(e) => write!(f, "transition failed: {e}"),
            WorkerError::Changed { log_ref } => write!(
                f,
                "transition refused: record {log_ref} changed since it was read"
            ),
        }
    }
}

impl std::error::Error for WorkerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            WorkerError::Rejected { error, .. } => Some(error),
            WorkerError::Storage(e) => Some(e),
            WorkerError::NotFound { .. } | WorkerError::Changed { .. } => None,
        }
    }
}

impl From<StorageError> for WorkerError {
    fn from(e: StorageError) -> Self {
        WorkerError::Storage(e)
    }
}

/// A read-only query or GC failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum QueryError {
    /// Storage failed (GC: the batch was rolled back).
    Storage(StorageError),
}

impl fmt::Display for QueryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueryError::Storage(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for QueryError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            QueryError::Storage(e) => Some(e),
        }
    }
}

impl From<StorageError> for QueryError {
    fn from(e: StorageError) -> Self {
        QueryError::Storage(e)
    }
}
