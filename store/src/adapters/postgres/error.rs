//! The PostgreSQL adapter's error.
//!
//! One `#[non_exhaustive]` enum: every statement of [`PostgresAdapter`](super::PostgresAdapter)
//! can lose its connection. The engine receives it inside a
//! `StorageError::Adapter` (of kind `Unavailable` when
//! [`PgError::is_unavailable`]); refusals of the state machine are the engine's
//! own errors.

use std::fmt;

use idemkit_core::LogRef;

use crate::adapters::{AdapterError, CorruptRecord, FailureKind};

/// A PostgreSQL store operation failed. Whatever the variant, nothing was
/// acknowledged: the caller must not execute (claim) or report success (writes).
#[derive(Debug)]
#[non_exhaustive]
pub enum PgError {
    /// The server could not be reached, the connection broke, or the pool had no
    /// connection within its timeout (SQLSTATE class 08, 57P01–57P03, I/O errors).
    /// Answer "store unavailable" (503 with `Retry-After`); the operation may or may
    /// not have reached the server, so a claim's record may exist as Running — the
    /// lease clock then applies, exactly as after a crash.
    Unavailable {
        /// What the driver or pool reported.
        detail: String,
    },
    /// The server reported a serialization failure or deadlock for a read;
    /// nothing was written. (Of a conditional write, it counts as a lost race:
    /// the engine reads and decides again.)
    Contention {
        /// The record's log reference, when known.
        log_ref: Option<LogRef>,
        /// How many times the statement was tried.
        attempts: u32,
    },
    /// A stored row does not decode (damaged, or written by an unknown record version).
    CorruptRecord {
        /// The record's log reference, when its address decodes.
        log_ref: Option<LogRef>,
        /// What the decoder reported.
        detail: String,
    },
    /// The database schema is missing, older than this build and migrations are
    /// off, or newer than this build.
    Schema {
        /// The schema version found (0: none).
        found: u32,
        /// The version this build uses.
        expected: u32,
        /// What to do about it.
        detail: String,
    },
    /// The store's configuration is invalid (URL, schema name).
    Config {
        /// What is wrong.
        detail: String,
    },
    /// Any other database error (a constraint, a permission, ...).
    Database {
        /// The SQLSTATE code, when the server sent one.
        code: Option<String>,
        /// The server's or driver's message.
        detail: String,
    },
}

impl PgError {
    /// Whether the store was unreachable: answer 503 and retry later.
    #[must_use]
    pub fn is_unavailable(&self) -> bool {
        matches!(self, PgError::Unavailable { .. })
    }
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::Unavailable { detail } => write!(f, "PostgreSQL unavailable: {detail}"),
            PgError::Contention {
                log_ref: Some(log_ref),
                attempts,
            } => write!(
                f,
                "record {log_ref}: gave up after {attempts} attempts lost to concurrent writers"
            ),
            PgError::Contention {
                log_ref: None,
                attempts,
            } => write!(
                f,
                "gave up after {attempts} attempts lost to concurrent writers"
            ),
            PgError::CorruptRecord {
                log_ref: Some(log_ref),
                detail,
            } => write!(f, "record {log_ref} is corrupt: {detail}"),
            PgError::CorruptRecord {
                log_ref: None,
                detail,
            } => write!(f, "a stored row is corrupt: {detail}"),
            PgError::Schema {
                found,
                expected,
                detail,
            } => write!(
                f,
                "idemkit schema version {found} in the database, this build uses {expected}: {detail}"
            ),
            PgError::Config { detail } => {
                write!(f, "invalid PostgreSQL store configuration: {detail}")
            }
            PgError::Database {
                code: Some(code),
                detail,
            } => write!(f, "PostgreSQL error {code}: {detail}"),
            PgError::Database { code: None, detail } => write!(f, "PostgreSQL error: {detail}"),
        }
    }
}

impl std::error::Error for PgError {}

/// How one failed statement is handled.
pub(crate) enum Failure {
    /// Serialization failure or deadlock: retry the whole read → decide → write.
    Retry,
    /// Anything else: give up with this error.
    Fail(PgError),
}

/// SQLSTATEs after which the server is (going) away: connection exceptions
/// (class 08), admin/crash shutdown and "cannot connect now" (57P01–57P03).
fn is_unavailable_code(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
}

/// Sorts a driver error into retry / unavailable / other.
pub(crate) fn classify(e: &postgres::Error) -> Failure {
    if let Some(db) = e.as_db_error() {
        let code = db.code().code();
        let detail = format!("{} (SQLSTATE {code})", db.message());
        if code == "40001" || code == "40P01" {
            return Failure::Retry;
        }
        if is_unavailable_code(code) {
            return Failure::Fail(PgError::Unavailable { detail });
        }
        return Failure::Fail(PgError::Database {
            code: Some(code.to_owned()),
            detail,
        });
    }
    // No SQLSTATE: the driver itself failed. Conversions are our bug or damaged
    // data; everything else (a closed socket, an I/O error, a connect failure, a
    // timeout) means the server's answer was lost.
    let detail = with_causes(e);
    let conversion = [
        "error deserializing",
        "error serializing",
        "invalid column",
        "query returned an unexpected",
    ]
    .iter()
    .any(|p| detail.starts_with(p));
    if conversion && !e.is_closed() {
        return Failure::Fail(PgError::Database { code: None, detail });
    }
    Failure::Fail(PgError::Unavailable { detail })
}

/// `e`'s message followed by its causes': the driver's message alone says
/// "error connecting to server", not that the connection was refused.
pub(crate) fn with_causes(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        // Some causes repeat their own cause's text; say each once.
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cause = c.source();
    }
    out
}

/// The error for a driver failure outside a retry loop.
pub(crate) fn fail(e: &postgres::Error) -> PgError {
    match classify(e) {
        Failure::Fail(err) => err,
        Failure::Retry => PgError::Contention {
            log_ref: None,
            attempts: 1,
        },
    }
}

impl From<r2d2::Error> for PgError {
    fn from(e: r2d2::Error) -> Self {
        PgError::Unavailable {
            detail: format!("no connection from the pool: {e}"),
        }
    }
}

impl PgError {
    /// The error of a statement that failed in a caller's transaction (a
    /// serialization failure is [`PgError::Contention`] there: the
    /// transaction is aborted, and only the caller can retry it).
    pub(crate) fn from_statement(e: &postgres::Error) -> PgError {
        fail(e)
    }
}

impl From<PgError> for AdapterError {
    fn from(e: PgError) -> Self {
        let kind = match &e {
            PgError::Unavailable { .. } | PgError::Contention { .. } => FailureKind::Unavailable,
            PgError::CorruptRecord { .. } => FailureKind::Corrupt,
            _ => FailureKind::Failed,
        };
        match e {
            // The engine's own shape for a record that does not decode.
            PgError::CorruptRecord { log_ref, detail } => {
                AdapterError::new(kind, CorruptRecord { log_ref, detail })
            }
            other => AdapterError::new(kind, other),
        }
    }
}
