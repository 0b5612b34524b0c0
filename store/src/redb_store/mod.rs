//! The embedded redb store.
//!
//! Every operation is *read → decide (idemkit-core) → write* inside one redb write
//! transaction committed with [`redb::Durability::Immediate`]: the store never
//! decides anything itself (it calls `idemkit_core::machine`), and nothing is
//! acknowledged before it is durable. A transaction whose decision writes nothing
//! (Replay, InFlight, Mismatch) is aborted instead of committed, saving a sync.
//!
//! Concurrent writes to a store that keeps its database open are grouped: one
//! caller leads, decides the queued operations in order in one transaction and
//! commits them with a single fsync; each caller is answered only after that
//! commit ([`Store::commit_stats`] shows the effect). A lone caller commits its
//! own write at once, as before. The design, ordering and failure handling are
//! described in `group_commit.rs`.
//!
//! ## Using it
//!
//! ```
//! use idemkit::core::machine::Policy;
//! use idemkit::core::record::{EffectKind, StoredResponse};
//! use idemkit::redb_store::{Claim, Store};
//! use idemkit::{Fingerprint, IdempotencyKey, Scope};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = Store::in_memory()?; // or Store::open("idemkit.redb")?
//! let scope = Scope::new("acme", "appointments.create")?;
//! let key = IdempotencyKey::new("8e03978e")?;
//! let policy = Policy::default().with_effect(EffectKind::Local);
//! let fingerprint = Fingerprint::from_bytes([7; 32]); // from idemkit-core's fingerprints
//!
//! match store.claim(&scope, &key, fingerprint, "worker-1", &policy)? {
//!     Claim::Execute(guard) => {
//!         // ... do the work; then record the outcome (durable before this returns):
//!         guard.complete(StoredResponse::new(201, b"{\"id\":\"appt_1\"}".to_vec()))?;
//!     }
//!     Claim::Replay { response, .. } => { /* answer the stored response */ }
//!     Claim::InFlight { retry_after, .. } => { /* 409 + Retry-After */ }
//!     Claim::Mismatch { status, .. } => { /* 422: key reused with another payload */ }
//!     Claim::Uncertain { log_ref, .. } => { /* 409 outcome-uncertain; operator resolves */ }
//!     Claim::ResponseExpired { resource_ref, .. } => { /* completed; body no longer kept */ }
//! }
//! // A retry with the same key and payload replays, executing nothing.
//! assert!(matches!(
//!     store.claim(&scope, &key, fingerprint, "worker-2", &policy)?,
//!     Claim::Replay { .. }
//! ));
//! # Ok(()) }
//! ```
//!
//! ## Where things are
//!
//! | file | what |
//! |---|---|
//! | `tables.rs` | the table definitions (records + three indexes + meta) and the format version |
//! | `db.rs` | a database for the store's life or per transaction (shared files, lock retries), the integrity check, panics turned into errors |
//! | `group_commit.rs` | group commit: concurrent writes share one durable transaction (leader/follower queue), [`CommitStats`] |
//! | `records.rs` | loading/decoding records and writing them with their index entries |
//! | `claim.rs` | [`Store::claim`], [`ExecutionGuard`], [`Renewer`] |
//! | `operator.rs` | get, list, list_unresolved, resolve, recover, gc, stats, verify |
//! | `backend_impl.rs` | [`crate::backend::IdempotencyBackend`] for [`Store`] (what the conformance suite drives) |
//! | `error.rs` | one error enum per operation family, the umbrella [`Error`] |
//! | `fault.rs` | `FaultyBackend`: I/O failure injection for tests (feature `testing`) |
//!
//! ## Sharing a file between processes
//!
//! [`Store::open`] keeps the file open and locked (redb's exclusive writer) for the
//! life of the store: the fastest choice for one service process. [`Store::open_shared`]
//! opens the file around each transaction and retries redb's lock with jittered
//! backoff ([`LockRetry`]), so several processes (the `idemkit` CLI) take turns.

mod backend_impl;
mod claim;
mod db;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fault;
mod group_commit;
mod operator;
mod records;
mod tables;

use std::path::Path;
use std::sync::Arc;

pub use claim::{Claim, ExecutionGuard, Renewer};
pub use db::LockRetry;
pub use error::{
    ClaimError, Error, OpenError, OperatorError, QueryError, StorageError, WorkerError,
};
#[cfg(any(test, feature = "testing"))]
pub use fault::{FaultSwitch, FaultyBackend};
pub use group_commit::CommitStats;
pub use operator::{GcReport, ImportReport, ListedRecord, Stats, VerifyReport};
pub use tables::FORMAT_VERSION;

use crate::clock::{Clock, SystemClock};
use db::Handle;

/// An idemkit store in a redb database. Cheap to clone (handles share the database).
#[derive(Clone, Debug)]
pub struct Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    handle: Handle,
    clock: Arc<dyn Clock>,
    /// The file, when there is one (for `stats`).
    path: Option<std::path::PathBuf>,
    /// Transient failures armed by a test ([`Store::with_faulty_backend`]).
    #[cfg(any(test, feature = "testing"))]
    faults: Option<FaultSwitch>,
}

impl Store {
    /// Opens the store in `path`, creating the file if it does not exist, and keeps
    /// it open (and locked against other processes) until the last clone is dropped.
    ///
    /// A file that is not an idemkit database, has an unknown format version, or is
    /// damaged gives an [`OpenError`], never a panic: the open runs redb's
    /// integrity check (every page's checksum), which reads the whole file once.
    pub fn open(path: impl AsRef<Path>) -> Result<Store, OpenError> {
        let path = path.as_ref();
        let db = db::open_file_once(path, db::Integrity::Check)?;
        Ok(Store::from_handle(Handle::owned(db), Some(path.to_owned())))
    }

    /// Like [`Store::open`], but the file is opened for each transaction and closed
    /// right after, so several processes can use it in turn (the `idemkit` CLI does
    /// this). While another process holds the file, each operation retries per
    /// `retry` and then fails with [`OpenError::Busy`].
    pub fn open_shared(path: impl AsRef<Path>, retry: LockRetry) -> Result<Store, OpenError> {
        let path = path.as_ref();
        // Check (or create) the file once now, with redb's full integrity check, so
        // a bad file is reported here; the per-transaction opens trust it.
        drop(db::open_file_with_retry(path, retry, db::Integrity::Check)?);
        Ok(Store::from_handle(
            Handle::PerTransaction {
                path: path.to_owned(),
                retry: std::sync::Mutex::new(retry),
            },
            Some(path.to_owned()),
        ))
    }

    /// A store in memory (redb's `InMemoryBackend`): for tests and caches.
    pub fn in_memory() -> Result<Store, OpenError> {
        Store::with_backend(redb::backends::InMemoryBackend::new())
    }

    /// A store on any redb [`redb::StorageBackend`] (for example a
    /// `FaultyBackend`, feature `testing`).
    pub fn with_backend(backend: impl redb::StorageBackend) -> Result<Store, OpenError> {
        let db = db::open_backend(backend)?;
        Ok(Store::from_handle(Handle::owned(db), None))
    }

    /// Like [`Store::with_backend`] over a [`FaultyBackend`], and the store also
    /// honours [`FaultSwitch::fail_next_transactions`]: transient failures of
    /// whole write transactions, for tests of what survives a store that fails
    /// for a while and then works again. Feature `testing`.
    #[cfg(any(test, feature = "testing"))]
    pub fn with_faulty_backend<B: redb::StorageBackend>(
        backend: FaultyBackend<B>,
    ) -> Result<Store, OpenError> {
        let switch = backend.switch().clone();
        let db = db::open_backend(backend)?;
        let mut store = Store::from_handle(Handle::owned(db), None);
        if let Some(inner) = Arc::get_mut(&mut store.inner) {
            inner.faults = Some(switch);
        }
        Ok(store)
    }

    /// A transient failure armed by a test, if the transaction starting now must fail.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn injected_failure(&self) -> Result<(), StorageError> {
        match &self.inner.faults {
            Some(switch) if switch.take_transient_failure() => {
                Err(StorageError::Redb(redb::Error::from(
                    std::io::Error::other("idemkit fault injection: transient transaction failure"),
                )))
            }
            _ => Ok(()),
        }
    }

    /// Without the `testing` feature nothing can arm a failure: always `Ok`,
    /// compiled away.
    #[cfg(not(any(test, feature = "testing")))]
    #[inline(always)]
    pub(crate) fn injected_failure(&self) -> Result<(), StorageError> {
        Ok(())
    }

    fn from_handle(handle: Handle, path: Option<std::path::PathBuf>) -> Store {
        Store {
            inner: Arc::new(Inner {
                handle,
                clock: Arc::new(SystemClock),
                path,
                #[cfg(any(test, feature = "testing"))]
                faults: None,
            }),
        }
    }

    /// The same store API — claims, the [`ExecutionGuard`], operator commands, the
    /// HTTP middleware — applied by PostgreSQL instead of a redb file, so several
    /// instances share one database. Every decision is still the core's; see
    /// [`crate::postgres`]. PostgreSQL failures are [`StorageError::Postgres`].
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn postgres(store: crate::postgres::PgStore) -> Store {
        Store::from_handle(Handle::Postgres(store), None)
    }

    /// The PostgreSQL store behind this one, if it is one.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn as_postgres(&self) -> Option<&crate::postgres::PgStore> {
        match &self.inner.handle {
            Handle::Postgres(pg) => Some(pg),
            _ => None,
        }
    }

    /// This store reading time from `clock` (a [`crate::clock::ManualClock`] in tests).
    ///
    /// A PostgreSQL store (`Store::postgres`, feature `postgres`) decides by the
    /// database's clock instead, unless its `PgClock` is `given_by_caller`; tests
    /// move its time with `PgClock::advance`.
    #[must_use]
    pub fn with_clock(self, clock: impl Clock + 'static) -> Store {
        let inner = match Arc::try_unwrap(self.inner) {
            Ok(inner) => inner,
            Err(shared) => {
                // Another clone exists: share its database handle.
                return Store {
                    inner: Arc::new(Inner {
                        handle: shared.handle.share(),
                        clock: Arc::new(clock),
                        path: shared.path.clone(),
                        #[cfg(any(test, feature = "testing"))]
                        faults: shared.faults.clone(),
                    }),
                };
            }
        };
        Store {
            inner: Arc::new(Inner {
                clock: Arc::new(clock),
                ..inner
            }),
        }
    }

    /// Changes how long a shared store ([`Store::open_shared`]) waits for the
    /// file lock, for this handle and every clone of it (including the guards
    /// it handed out). No effect on a store that keeps its database open.
    pub fn set_lock_retry(&self, retry: LockRetry) {
        self.inner.handle.set_lock_retry(retry);
    }

    /// Another handle on this store whose lock retry budget is `budget` (its
    /// backoff as this one's), without changing this handle's or its clones'.
    pub(crate) fn with_lock_budget(&self, budget: std::time::Duration) -> Store {
        let handle = self.inner.handle.share();
        handle.set_lock_budget(budget);
        Store {
            inner: Arc::new(Inner {
                handle,
                clock: Arc::clone(&self.inner.clock),
                path: self.inner.path.clone(),
                #[cfg(any(test, feature = "testing"))]
                faults: self.inner.faults.clone(),
            }),
        }
    }

    /// How this store's durable writes were grouped into transactions so far
    /// (group commit: concurrent claims and completions share one fsync). See
    /// [`CommitStats`].
    #[must_use]
    pub fn commit_stats(&self) -> CommitStats {
        self.inner.handle.commit_stats()
    }

    /// The current time by this store's clock (a PostgreSQL store's decisions use
    /// the database's clock instead: `PgStore::now`).
    #[must_use]
    pub fn now(&self) -> idemkit_core::UnixMillis {
        self.inner.clock.now()
    }

    /// The database file, if the store has one.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref().or(self.inner.handle.path())
    }
}
