//! Exactly once for local effects: the business write and the outcome in one
//! transaction.
//!
//! An [`EffectKind::Local`](idemkit_core::record::EffectKind::Local) operation
//! changes only the service's own database. Recorded the ordinary way
//! ([`ExecutionGuard::complete`]), its business write and its outcome are two
//! commits, and a crash between them leaves a committed write without an
//! outcome: the lease expires, the next retry takes the record over, and the
//! write runs again. That is **at least once**, safe only when the write is
//! idempotent by itself.
//!
//! Written through this module, the business write and the outcome commit in
//! **one transaction** of the database that holds the records, so a crash,
//! an error or a lost lease keeps both or neither. That is **exactly once**:
//!
//! | the records in | the business write | call |
//! |---|---|---|
//! | redb ([`idemkit::open`](crate::open)) | your tables in the same redb database | [`ExecutionGuard::complete_with`]`(writes, response)`: `writes` runs inside the completion's write transaction (group-committed with the others: one fsync for both) |
//! | PostgreSQL (`idemkit::postgres`, feature `postgres`) | your tables in the same database | `ExecutionGuard::complete_in(&mut transaction, response)`: the completion's compare-and-set runs in your transaction, which you then commit |
//! | either, through the middleware | as above | [`Execution::complete_with`](crate::http::Execution::complete_with) / `Execution::complete_in`: the layer then answers the stored response instead of recording a second time |
//!
//! **When it is not exactly once.** A Local effect anywhere else (another
//! database, a file, a message queue, an HTTP call) cannot join the
//! transaction: recording its outcome afterwards is at least once, exactly as
//! without this module. Such an effect is only as safe as it is idempotent
//! (give it a key of its own, or make it External and record its steps).
//!
//! **What holds.** The completion is the state machine's `Complete` of this
//! lease, checked by the record's version *in the same transaction*:
//!
//! - the lease was lost (taken over after it expired: a stale token) → the
//!   completion is refused, [`LocalError::Store`], and your writes are not
//!   committed;
//! - your writes fail (redb: the closure returns `Err` or panics) →
//!   [`LocalError::Writes`] (a panic resumes on your thread), nothing is
//!   committed, and the record is still this lease's to complete or release;
//! - the process dies at any point → the transaction never committed (neither
//!   is kept) or it did (both are), and a retry either executes again on a
//!   clean slate or replays the stored response.
//!
//! ```
//! use idemkit::core::machine::Policy;
//! use idemkit::core::record::{EffectKind, StoredResponse};
//! use idemkit::store::{Claim, Store};
//! use idemkit::{Fingerprint, IdempotencyKey, Scope};
//! use redb::{ReadableTable, TableDefinition};
//!
//! // The service's own table, in the store's database (idemkit's are `idemkit.*`).
//! const TRANSFERS: TableDefinition<&str, u64> = TableDefinition::new("bank.transfers");
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = idemkit::in_memory()?; // or idemkit::open("bank.redb")?
//! let scope = Scope::new("acme", "transfers.create")?;
//! let key = IdempotencyKey::new("c0ffee01")?;
//! let policy = Policy::default().with_effect(EffectKind::Local);
//! let fingerprint = Fingerprint::from_bytes([1; 32]);
//!
//! if let Claim::Execute(guard) = store.claim(&scope, &key, fingerprint, "worker-1", &policy)? {
//!     let response = StoredResponse::new(201, b"{\"id\":\"tr_1\",\"amount\":500}".to_vec());
//!     // The transfer and the outcome commit together, or neither does.
//!     guard.complete_with(
//!         |txn| -> Result<(), redb::Error> {
//!             txn.open_table(TRANSFERS)?.insert("tr_1", 500)?;
//!             Ok(())
//!         },
//!         response,
//!     )?;
//! }
//! // A retry replays the 201; the transfer exists once.
//! assert!(matches!(store.claim(&scope, &key, fingerprint, "worker-2", &policy)?, Claim::Replay { .. }));
//! let amount = store.read_local(|txn| -> Result<Option<u64>, redb::Error> {
//!     Ok(txn.open_table(TRANSFERS)?.get("tr_1")?.map(|v| v.value()))
//! })??;
//! assert_eq!(amount, Some(500));
//! # Ok(()) }
//! ```
//!
//! | file | what |
//! |---|---|
//! | `redb.rs` | `complete_with`, `try_complete_with`, `Store::read_local` / `write_local` |
//! | `postgres.rs` | `complete_in`, `try_complete_in` (feature `postgres`) |
//!
//! The middleware's twins ([`Execution::complete_with`](crate::http::Execution::complete_with),
//! `Execution::complete_in`) are in `http/execution.rs`.

#[cfg(feature = "postgres")]
mod postgres;
mod redb;

use std::convert::Infallible;
use std::fmt;

#[cfg(doc)]
use crate::store::ExecutionGuard;
use crate::store::WorkerError;

/// Why a completion with local writes (or a read or write of the caller's own
/// tables) did not happen. In every case **nothing was committed**: neither
/// the caller's writes nor the outcome.
#[derive(Debug)]
#[non_exhaustive]
pub enum LocalError<E = Infallible> {
    /// The caller's writes failed with their own error. The record is still
    /// this lease's (Running): complete it another way, release it, or let the
    /// guard's drop release it.
    Writes(E),
    /// The store refused the completion (the lease was lost: a stale token;
    /// the record is no longer Running) or failed to write it.
    Store(WorkerError),
    /// This store's adapter cannot commit the caller's writes with an outcome
    /// (`complete_with` needs redb, `complete_in` PostgreSQL).
    Unsupported {
        /// What was asked.
        what: &'static str,
        /// The adapter the store runs on.
        adapter: String,
    },
    /// The execution's outcome was already recorded (a second completion, or
    /// the middleware recorded the handler's response first).
    AlreadyRecorded,
}

impl<E: fmt::Display> fmt::Display for LocalError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LocalError::Writes(e) => {
                write!(f, "the caller's writes failed, nothing was committed: {e}")
            }
            LocalError::Store(e) => write!(
                f,
                "the completion was not recorded, the caller's writes were not committed: {e}"
            ),
            LocalError::Unsupported { what, adapter } => {
                write!(f, "{what} is not available on a store over {adapter}")
            }
            LocalError::AlreadyRecorded => f.write_str("the execution was already recorded"),
        }
    }
}

impl<E: std::error::Error + 'static> std::error::Error for LocalError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LocalError::Writes(e) => Some(e),
            LocalError::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl<E> From<WorkerError> for LocalError<E> {
    fn from(e: WorkerError) -> Self {
        LocalError::Store(e)
    }
}

impl<E> LocalError<E> {
    /// The adapter `store` runs on cannot do `what`.
    fn unsupported(what: &'static str, store: &crate::store::Store) -> Self {
        let adapter = format!("{:?}", store.adapter());
        let adapter = adapter
            .split(|c: char| !c.is_alphanumeric())
            .next()
            .unwrap_or("another adapter")
            .to_owned();
        LocalError::Unsupported { what, adapter }
    }
}
