//! Errors, redb style: one `#[non_exhaustive]` enum per operation family, each
//! converting into the umbrella [`Error`].
//!
//! | family | returned by |
//! |---|---|
//! | [`StorageError`] | the storage failures every operation can hit (an adapter's own error in [`StorageError::Adapter`]) |
//! | [`ClaimError`] | `Store::claim` |
//! | [`WorkerError`] | the execution guard: complete, release, mark_unknown, renew, steps |
//! | [`OperatorError`] | `Store::resolve`, `Store::recover` |
//! | [`QueryError`] | get, list, list_unresolved, stats, gc |

use std::fmt;

use idemkit_core::LogRef;
use idemkit_core::machine::TransitionError;

use crate::adapters::redb::OpenError;
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

/// A worker's write (complete, release, mark_unknown, renew, begin_step,
/// complete_step) was refused or failed; the record is unchanged.
#[derive(Debug)]
#[non_exhaustive]
pub enum WorkerError {
    /// There is no record under this key (deleted by GC, or never claimed).
    NotFound {
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// The state machine refused the transition: a stale fencing token (the lease
    /// was taken over), a wrong state, an unknown step.
    Rejected {
        /// The record's log reference.
        log_ref: LogRef,
        /// Why, naming the tokens or states involved.
        error: TransitionError,
    },
    /// Storage failed; nothing was acknowledged.
    Storage(StorageError),
}

/// An operator's or reconciler's write (resolve, recover) was refused or failed;
/// the record is unchanged.
#[derive(Debug)]
#[non_exhaustive]
pub enum OperatorError {
    /// There is no record under this key.
    NotFound {
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// The state machine refused: the record is not Unknown nor Running past its
    /// lease.
    Rejected {
        /// The record's log reference.
        log_ref: LogRef,
        /// Why, naming the state found.
        error: TransitionError,
    },
    /// Storage failed; nothing was acknowledged.
    Storage(StorageError),
}

macro_rules! transition_family {
    ($name:ident, $what:literal) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self {
                    $name::NotFound { log_ref } => {
                        write!(f, "{} refused: no record {log_ref}", $what)
                    }
                    $name::Rejected { log_ref, error } => {
                        write!(f, "{} refused for record {log_ref}: {error}", $what)
                    }
                    $name::Storage(e) => write!(f, "{} failed: {e}", $what),
                }
            }
        }

        impl std::error::Error for $name {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                match self {
                    $name::Rejected { error, .. } => Some(error),
                    $name::Storage(e) => Some(e),
                    $name::NotFound { .. } => None,
                }
            }
        }

        impl From<StorageError> for $name {
            fn from(e: StorageError) -> Self {
                $name::Storage(e)
            }
        }

        impl From<TxError> for $name {
            fn from(e: TxError) -> Self {
                match e {
                    TxError::NotFound { log_ref } => $name::NotFound { log_ref },
                    TxError::Rejected { log_ref, error } => $name::Rejected { log_ref, error },
                    TxError::Storage(e) => $name::Storage(e),
                }
            }
        }

        impl $name {
            /// The state machine's reason, when the transition was refused.
            #[must_use]
            pub fn transition_error(&self) -> Option<&TransitionError> {
                match self {
                    $name::Rejected { error, .. } => Some(error),
                    _ => None,
                }
            }
        }
    };
}
transition_family!(WorkerError, "worker write");
transition_family!(OperatorError, "operator action");

/// The internal shape of a failed read-decide-write on one record.
#[derive(Debug)]
pub(crate) enum TxError {
    NotFound {
        log_ref: LogRef,
    },
    Rejected {
        log_ref: LogRef,
        error: TransitionError,
    },
    Storage(StorageError),
}

impl From<StorageError> for TxError {
    fn from(e: StorageError) -> Self {
        TxError::Storage(e)
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

/// Any store error: every per-operation error converts into this.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// See [`OpenError`].
    Open(OpenError),
    /// See [`StorageError`].
    Storage(StorageError),
    /// No record under this key.
    NotFound {
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// The state machine refused the transition.
    Rejected {
        /// The record's log reference.
        log_ref: LogRef,
        /// Why.
        error: TransitionError,
    },
}

impl Error {
    /// The state machine's reason, when a transition was refused.
    #[must_use]
    pub fn transition_error(&self) -> Option<&TransitionError> {
        match self {
            Error::Rejected { error, .. } => Some(error),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Open(e) => e.fmt(f),
            Error::Storage(e) => e.fmt(f),
            Error::NotFound { log_ref } => write!(f, "no record {log_ref}"),
            Error::Rejected { log_ref, error } => write!(f, "record {log_ref}: {error}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Open(e) => Some(e),
            Error::Storage(e) => Some(e),
            Error::Rejected { error, .. } => Some(error),
            Error::NotFound { .. } => None,
        }
    }
}

impl From<OpenError> for Error {
    fn from(e: OpenError) -> Self {
        Error::Open(e)
    }
}

impl From<StorageError> for Error {
    fn from(e: StorageError) -> Self {
        Error::Storage(e)
    }
}

impl From<ClaimError> for Error {
    fn from(e: ClaimError) -> Self {
        match e {
            ClaimError::Storage(e) => e.into(),
        }
    }
}

impl From<QueryError> for Error {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Storage(e) => e.into(),
        }
    }
}

impl From<WorkerError> for Error {
    fn from(e: WorkerError) -> Self {
        match e {
            WorkerError::NotFound { log_ref } => Error::NotFound { log_ref },
            WorkerError::Rejected { log_ref, error } => Error::Rejected { log_ref, error },
            WorkerError::Storage(e) => e.into(),
        }
    }
}

impl From<OperatorError> for Error {
    fn from(e: OperatorError) -> Self {
        match e {
            OperatorError::NotFound { log_ref } => Error::NotFound { log_ref },
            OperatorError::Rejected { log_ref, error } => Error::Rejected { log_ref, error },
            OperatorError::Storage(e) => e.into(),
        }
    }
}
