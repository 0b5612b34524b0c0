//! The redb adapter's errors: opening a file ([`OpenError`]) and using it
//! ([`RedbError`]). Both reach callers of the engine inside
//! [`StorageError::Adapter`](crate::store::StorageError::Adapter), or directly
//! from the constructors (`RedbAdapter::open`, `idemkit::open`); `AdapterError::downcast_ref` finds them.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::adapters::{AdapterError, CorruptRecord, FailureKind};

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
    /// The store's write-ahead log (`<file>.wal`) holds frames that could not
    /// be applied: some are missing, or one does not describe valid records.
    /// The log is left in place.
    WriteAheadLog {
        /// The log's file.
        path: std::path::PathBuf,
        /// What is wrong with it.
        detail: String,
    },
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
            OpenError::WriteAheadLog { path, detail } => write!(
                f,
                "cannot apply the write-ahead log {}: {detail}",
                path.display()
            ),
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

/// A failure of the redb adapter while it read or wrote.
#[derive(Debug)]
#[non_exhaustive]
pub enum RedbError {
    /// (Re)opening the database failed (shared stores open it for every transaction).
    Open(OpenError),
    /// redb failed to begin, read, write or commit (I/O error, full disk, ...).
    Redb(redb::Error),
    /// A stored record does not decode.
    CorruptRecord(CorruptRecord),
    /// redb failed on damaged pages while reading (found after the open), or
    /// stored bytes are not what this format writes.
    Corrupt {
        /// What redb reported.
        detail: String,
    },
    /// This write was committed in one transaction together with other callers'
    /// writes (group commit), and beginning or committing that shared
    /// transaction failed: none of them was acknowledged. Every caller of the
    /// group gets the same `cause`.
    GroupCommit {
        /// How many operations shared the transaction.
        operations: usize,
        /// What failed.
        cause: Arc<RedbError>,
    },
    /// The caller's own writes, run in the transaction of a record's write
    /// ([`LocalWrites`](super::LocalWrites)), failed: the transaction was
    /// aborted, so neither they nor the record's write were kept. The caller
    /// kept its own error ([`crate::local`]).
    LocalWrites,
    /// The database failed a write with an I/O error and has not yet been
    /// reopened and proven writable (see [`RedbAdapter`](super::RedbAdapter)'s
    /// recovery): nothing was written. A transient failure: the store reopens
    /// it on a later operation or health check.
    Unwritable {
        /// What failed, and how reopening went so far.
        detail: String,
        /// Since when writes are refused.
        since: SystemTime,
    },
    /// Writing or syncing the store's write-ahead log (`<file>.wal`) failed:
    /// the transaction was not committed, nothing was acknowledged, and the
    /// database is reopened (which applies what the log holds) before it
    /// writes again.
    WriteAheadLog {
        /// The log's file.
        path: std::path::PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

impl fmt::Display for RedbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RedbError::Open(e) => e.fmt(f),
            RedbError::Redb(e) => write!(f, "storage error: {e}"),
            RedbError::CorruptRecord(e) => e.fmt(f),
            RedbError::Corrupt { detail } => write!(f, "database file is corrupt: {detail}"),
            RedbError::GroupCommit { operations, cause } => write!(
                f,
                "the write transaction shared by {operations} operations (group commit) failed, \
                 none of them was acknowledged: {cause}"
            ),
            RedbError::LocalWrites => f.write_str(
                "the caller's writes in the record's transaction failed; nothing was written",
            ),
            RedbError::Unwritable { detail, .. } => {
                write!(
                    f,
                    "the database is unavailable until it is reopened after an I/O error: {detail}"
                )
            }
            RedbError::WriteAheadLog { path, source } => write!(
                f,
                "writing the write-ahead log {} failed, nothing was acknowledged: {source}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for RedbError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RedbError::Open(e) => Some(e),
            RedbError::Redb(e) => Some(e),
            RedbError::CorruptRecord(e) => Some(e),
            RedbError::GroupCommit { cause, .. } => Some(&**cause),
            RedbError::WriteAheadLog { source, .. } => Some(source),
            RedbError::Corrupt { .. } | RedbError::LocalWrites | RedbError::Unwritable { .. } => {
                None
            }
        }
    }
}

impl RedbError {
    /// What kind of failure this is, for the engine.
    fn kind(&self) -> FailureKind {
        match self {
            RedbError::Open(OpenError::Busy { .. }) | RedbError::Unwritable { .. } => {
                FailureKind::Unavailable
            }
            RedbError::Open(OpenError::Corrupt { .. })
            | RedbError::CorruptRecord(_)
            | RedbError::Corrupt { .. } => FailureKind::Corrupt,
            RedbError::GroupCommit { cause, .. } => cause.kind(),
            _ => FailureKind::Failed,
        }
    }

    /// Whether redb has latched this failure (an I/O error of its storage), so
    /// that the database must be closed and opened again before it writes.
    pub(crate) fn needs_reopen(&self) -> bool {
        match self {
            RedbError::Redb(e) => matches!(
                e,
                redb::Error::Io(_)
                    | redb::Error::PreviousIo
                    | redb::Error::Backend(_)
                    | redb::Error::DatabaseClosed
            ),
            RedbError::GroupCommit { cause, .. } => cause.needs_reopen(),
            RedbError::WriteAheadLog { .. } => true,
            _ => false,
        }
    }
}

/// What redb's panic on damaged pages says, for [`OpenError::Corrupt`] and
/// [`RedbError::Corrupt`].
fn panicked(payload: &(dyn std::any::Any + Send)) -> String {
    format!(
        "redb panicked reading the file: {}",
        crate::panic_text(payload)
    )
}

impl OpenError {
    /// A panic inside redb while opening (a damaged file), as an error.
    pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> OpenError {
        OpenError::Corrupt {
            detail: panicked(payload),
        }
    }
}

impl RedbError {
    /// A panic inside redb in a transaction (a damaged page), as an error.
    pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> RedbError {
        RedbError::Corrupt {
            detail: panicked(payload),
        }
    }
}

/// `f`, with a panic inside it answered as [`RedbError::Corrupt`]: redb
/// documents panics on damaged pages, and one must not take the caller down.
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, RedbError>) -> Result<T, RedbError> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|payload| Err(RedbError::panicked(payload.as_ref())))
}

impl From<RedbError> for AdapterError {
    fn from(e: RedbError) -> Self {
        AdapterError::new(e.kind(), e)
    }
}

impl From<OpenError> for RedbError {
    fn from(e: OpenError) -> Self {
        RedbError::Open(e)
    }
}

impl From<CorruptRecord> for RedbError {
    fn from(e: CorruptRecord) -> Self {
        RedbError::CorruptRecord(e)
    }
}

macro_rules! redb_into_storage {
    ($($t:ty),*) => {$(
        impl From<$t> for RedbError {
            fn from(e: $t) -> Self {
                RedbError::Redb(e.into())
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
