//! Errors, redb style: one `#[non_exhaustive]` enum per operation family, each
//! converting into the umbrella [`Error`].
//!
//! | family | returned by |
//! |---|---|
//! | [`OpenError`] | `Store::open`, `Store::open_shared`, and every operation of a shared store (it opens the file per transaction) via [`StorageError::Open`] |
//! | [`StorageError`] | the storage failures every operation can hit |
//! | [`ClaimError`] | `Store::claim` |
//! | [`WorkerError`] | the execution guard: complete, release, mark_unknown, renew, steps |
//! | [`OperatorError`] | `Store::resolve`, `Store::recover` |
//! | [`QueryError`] | get, list, list_unresolved, stats, gc |

use std::fmt;
use std::time::Duration;

use idemkit_core::LogRef;
use idemkit_core::machine::TransitionError;

/// The database file could not be opened as an idemkit store.
#[derive(Debug)]
#[non_exhaustive]
pub enum OpenError {
    /// The file is a redb database but not an idemkit store (no idemkit metadata, or
    /// other tables), or not a redb database at all.
    NotIdemkit {
        /// What was found.
        detail: String,
    },
    /// The store was written by a newer (or unknown) format version.
    UnsupportedFormat {
        /// The version in the file.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// The file is damaged: redb's checks failed while opening it.
    Corrupt {
        /// What redb reported.
        detail: String,
    },
    /// Another process kept the file locked for longer than the retry budget.
    Busy {
        /// How long this process tried.
        waited: Duration,
    },
    /// The file could not be read or created.
    Io(std::io::Error),
    /// Any other redb failure while opening.
    Redb(redb::Error),
}

impl fmt::Display for OpenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenError::NotIdemkit { detail } => {
                write!(f, "not an idemkit database: {detail}")
            }
            OpenError::UnsupportedFormat { found, supported } => write!(
                f,
                "idemkit database format {found} is not supported (this build reads format {supported})"
            ),
            OpenError::Corrupt { detail } => write!(f, "database file is corrupt: {detail}"),
            OpenError::Busy { waited } => write!(
                f,
                "database is locked by another process (gave up after {} ms)",
                waited.as_millis()
            ),
            OpenError::Io(e) => write!(f, "cannot open database file: {e}"),
            OpenError::Redb(e) => write!(f, "cannot open database: {e}"),
        }
    }
}

impl std::error::Error for OpenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OpenError::Io(e) => Some(e),
            OpenError::Redb(e) => Some(e),
            _ => None,
        }
    }
}

/// A storage failure: nothing was acknowledged, and the transaction (if any) was
/// rolled back.
#[derive(Debug)]
#[non_exhaustive]
pub enum StorageError {
    /// (Re)opening the database failed (shared stores open it for every transaction).
    Open(OpenError),
    /// redb failed to begin, read, write or commit (I/O error, full disk, ...).
    Redb(redb::Error),
    /// A stored record does not decode (bytes damaged or written by an unknown version).
    CorruptRecord {
        /// The record's log reference (`None` when its id does not decode either).
        log_ref: Option<LogRef>,
        /// What the decoder reported.
        detail: String,
    },
    /// redb failed on damaged pages while reading (found after the open).
    Corrupt {
        /// What redb reported.
        detail: String,
    },
    /// A stored record id does not decode.
    CorruptId {
        /// What the decoder reported.
        detail: String,
    },
    /// This operation was decided in one write transaction together with other
    /// callers' operations (group commit), and beginning or committing that shared
    /// transaction failed: none of them was acknowledged. Every caller of the
    /// group gets the same `cause`.
    GroupCommit {
        /// How many operations shared the transaction.
        operations: usize,
        /// What failed.
        cause: std::sync::Arc<StorageError>,
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
    /// The store is a PostgreSQL store ([`Store::postgres`](super::Store::postgres))
    /// and PostgreSQL failed; [`PgError::Unavailable`](crate::postgres::PgError::Unavailable)
    /// when it could not be reached.
    #[cfg(feature = "postgres")]
    Postgres(crate::postgres::PgError),
}

impl fmt::Display for StorageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StorageError::Open(e) => e.fmt(f),
            StorageError::Redb(e) => write!(f, "storage error: {e}"),
            StorageError::CorruptRecord {
                log_ref: Some(log_ref),
                detail,
            } => write!(f, "record {log_ref} is corrupt: {detail}"),
            StorageError::CorruptRecord {
                log_ref: None,
                detail,
            } => write!(f, "a record with an undecodable id is corrupt: {detail}"),
            StorageError::CorruptId { detail } => write!(f, "a record id is corrupt: {detail}"),
            StorageError::Corrupt { detail } => write!(f, "database file is corrupt: {detail}"),
            StorageError::Contention { log_ref, attempts } => write!(
                f,
                "record {log_ref} changed under {attempts} attempts in a row to write it; \
                 nothing was written"
            ),
            StorageError::GroupCommit { operations, cause } => write!(
                f,
                "the write transaction shared by {operations} operations (group commit) failed, \
                 none of them was acknowledged: {cause}"
            ),
            #[cfg(feature = "postgres")]
            StorageError::Postgres(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for StorageError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StorageError::Open(e) => Some(e),
            StorageError::Redb(e) => Some(e),
            StorageError::GroupCommit { cause, .. } => Some(&**cause),
            #[cfg(feature = "postgres")]
            StorageError::Postgres(e) => Some(e),
            _ => None,
        }
    }
}

#[cfg(feature = "postgres")]
impl From<crate::postgres::PgError> for TxError {
    fn from(e: crate::postgres::PgError) -> Self {
        use crate::postgres::PgError;
        match e {
            PgError::NotFound { log_ref } => TxError::NotFound { log_ref },
            PgError::Rejected { log_ref, error } => TxError::Rejected { log_ref, error },
            other => TxError::Storage(StorageError::Postgres(other)),
        }
    }
}

impl From<OpenError> for StorageError {
    fn from(e: OpenError) -> Self {
        StorageError::Open(e)
    }
}

macro_rules! redb_into_storage {
    ($($t:ty),*) => {$(
        impl From<$t> for StorageError {
            fn from(e: $t) -> Self {
                StorageError::Redb(e.into())
            }
        }
    )*};
}
redb_into_storage!(
    redb::Error,
    redb::StorageError,
    redb::TableError,
    redb::TransactionError,
    redb::CommitError,
    redb::SetDurabilityError
);

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
        match e {
            StorageError::Open(e) => Error::Open(e),
            other => Error::Storage(other),
        }
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
