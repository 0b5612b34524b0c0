//! The engine: one [`Store`] over any [`Adapter`].
//!
//! Every operation is one loop: **get** the record (a committed snapshot, its
//! version and the token floor) → let `idemkit_core::machine::apply` **decide**
//! → **write** the decision with the adapter's conditional write (insert if
//! absent, update or delete if the version is still the one read). A refused
//! write means another writer came first: the loop reads and decides again, at
//! most [`MAX_ATTEMPTS`] times
//! ([`StorageError::Contention`]). The engine never decides anything itself,
//! knows no database, and an answer that writes nothing (a replay, a request in
//! flight, a mismatch, a refusal) is answered from the read alone.
//!
//! The [`ExecutionGuard`] keeps the record and version its claim wrote, so a
//! worker's transition (complete, release, renew, a step) costs one conditional
//! write and no read, unless another writer changed the record meanwhile.
//!
//! ## Using it
//!
//! ```
//! use idemkit::core::machine::Policy;
//! use idemkit::core::record::{EffectKind, StoredResponse};
//! use idemkit::store::Claim;
//! use idemkit::{Fingerprint, IdempotencyKey, Scope};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let store = idemkit::in_memory()?; // or idemkit::open("idemkit.redb")?
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
//! | `mod.rs` | [`Store`], the read → decide → write loop |
//! | `claim.rs` | [`Store::claim`], [`Claim`] |
//! | `guard.rs` | [`ExecutionGuard`], [`Renewer`] |
//! | `health.rs` | [`Store::health`]: whether it can write now |
//! | `operator.rs` | get, list, list_unresolved, resolve, recover, import, gc, stats, verify |
//! | `orphans.rs` | what a process that is gone left Running, settled when a store held alone is opened |
//! | `error.rs` | one error enum per operation family |
//!
//! A store is built over an adapter ([`Store::new`], or `Store::from(adapter)`);
//! [`crate::open`] and [`crate::in_memory`] are the short forms for the embedded
//! one. Tests drive time with [`Store::with_clock`].

mod claim;
mod error;
mod guard;
mod health;
mod operator;
mod orphans;
mod waiters;

use std::sync::Arc;

use idemkit_core::machine::{self, Answer, MAX_ATTEMPTS, Op, Policy, TransitionError, Write};
use idemkit_core::{RecordId, UnixMillis};

pub use crate::adapters::{Health, Wakeups};
pub use claim::Claim;
pub use error::{ClaimError, QueryError, StorageError, WorkerError};
pub use guard::{ExecutionGuard, Renewer};
pub use operator::{
    GcReport, ImportReport, ListedRecord, Listing, RecordPage, Stats, VerifyReport,
};
pub use orphans::SettledOrphan;
pub use waiters::{Changed, TooManyWaiters, WaitLimits, Watch};

use crate::adapters::{Adapter, AdapterError, Read, Stored, Version};
use crate::clock::{Clock, SystemClock};
use idemkit_core::record::{Record, RecordState};

/// An idemkit store: the engine over one [`Adapter`]. Cheap to clone (clones
/// share the adapter).
#[derive(Clone, Debug)]
pub struct Store {
    adapter: Arc<dyn Adapter>,
    clock: Arc<dyn Clock>,
    /// What health checks saw, shared by the clones.
    seen: Arc<health::Seen>,
    /// What opening the store settled ([`Store::orphans_settled_at_open`]).
    orphans: Arc<[SettledOrphan]>,
    /// The requests waiting for a running key's outcome.
    waiters: Arc<waiters::Waiters>,
    /// The last time a claim's read carried, for claims that decide by its
    /// estimate and write first ([`claim`](Store::claim)).
    observed: Arc<claim::ObservedTime>,
}

impl<A: Adapter> From<A> for Store {
    /// [`Store::new`] over `adapter`.
    fn from(adapter: A) -> Store {
        Store::new(Arc::new(adapter))
    }
}

/// What one read → decide → write gave.
pub(crate) struct Applied {
    /// The core's answer.
    pub(crate) answer: Answer,
    /// The record as it now stands (written, or read when nothing was written),
    /// with its version.
    pub(crate) stored: Option<Stored>,
    /// The instant the decision was taken at.
    pub(crate) now: UnixMillis,
    /// The token floor the last read carried (`None`: nothing was read).
    pub(crate) token_floor: Option<u64>,
}

impl Store {
    /// The engine over `adapter`, deciding by the adapter's clock when its
    /// database keeps the time ([`Adapter::clock`]: PostgreSQL's), else by the
    /// system clock.
    #[must_use]
    pub fn new(adapter: Arc<dyn Adapter>) -> Store {
        let clock = adapter.clock().unwrap_or_else(|| Arc::new(SystemClock));
        let waiters = waiters::Waiters::of(&adapter);
        Store {
            adapter,
            clock,
            seen: Arc::default(),
            orphans: Arc::new([]),
            waiters,
            observed: Arc::default(),
        }
    }

    /// This store reading time from `clock` (a [`crate::clock::ManualClock`] in
    /// tests). An adapter whose database keeps the time still decides by the
    /// time each read of a record carries ([`Read::now`]).
    #[must_use]
    pub fn with_clock(self, clock: impl Clock + 'static) -> Store {
        Store {
            adapter: self.adapter,
            clock: Arc::new(clock),
            seen: self.seen,
            orphans: self.orphans,
            waiters: self.waiters,
            observed: self.observed,
        }
    }

    /// The adapter under this store.
    #[must_use]
    pub fn adapter(&self) -> &Arc<dyn Adapter> {
        &self.adapter
    }

    /// The adapter under this store as an `A`, if it is one: for its own
    /// methods (a redb file's commit statistics, say) when the caller kept no
    /// handle on it.
    #[must_use]
    pub fn adapter_as<A: Adapter>(&self) -> Option<&A> {
        let any: &dyn std::any::Any = &*self.adapter;
        any.downcast_ref::<A>()
    }

    /// Another handle on this store whose adapter waits at most `wait` for a
    /// lock another process holds ([`Adapter::with_lock_wait`]), without
    /// changing this one's. The same store for an adapter that never waits so.
    pub(crate) fn with_lock_wait(&self, wait: std::time::Duration) -> Store {
        match self.adapter.with_lock_wait(wait) {
            Some(adapter) => Store {
                adapter,
                clock: Arc::clone(&self.clock),
                seen: Arc::clone(&self.seen),
                orphans: Arc::clone(&self.orphans),
                waiters: Arc::clone(&self.waiters),
                observed: Arc::clone(&self.observed),
            },
            None => self.clone(),
        }
    }

    /// The current time by this store's clock.
    #[must_use]
    pub fn now(&self) -> UnixMillis {
        self.clock.now()
    }

    /// The current time by this store's clock, or why it cannot be read (a
    /// database clock whose database is unreachable).
    pub(crate) fn try_now(&self) -> Result<UnixMillis, StorageError> {
        self.clock.try_now().map_err(|e| {
            // A clock that cannot be read is a database that cannot be reached.
            StorageError::Adapter(crate::adapters::AdapterError::new(
                crate::adapters::FailureKind::Unavailable,
                e,
            ))
        })
    }

    /// The store clock's estimate of the instant `elapsed` after `earlier`, if
    /// it gives one ([`Clock::estimate_after`]).
    pub(crate) fn estimate_after(
        &self,
        earlier: UnixMillis,
        elapsed: std::time::Duration,
    ) -> Option<UnixMillis> {
        self.clock.estimate_after(earlier, elapsed)
    }

    /// The one loop over this store's adapter: see [`run_on`].
    pub(crate) fn run<'a>(
        &'a self,
        id: &RecordId,
        op: Op,
        policy: &Policy,
        now: impl Into<Now<'a>>,
        held: Option<Stored>,
    ) -> Result<Applied, WorkerError> {
        let mut adapter: &dyn Adapter = &*self.adapter;
        let applied = run_on(&mut adapter, id, op, policy, now, held)?;
        // A write that ends the Running state wakes who waits for it. A
        // wake-up that finds the record unchanged (an answer that wrote
        // nothing) only costs the waiter a read.
        if applied
            .stored
            .as_ref()
            .is_none_or(|s| !matches!(s.record.state, RecordState::Running { .. }))
        {
            self.wake(id);
        }
        Ok(applied)
    }
}

/// Where one read → decide → write reads and writes: the store's adapter, or
/// for an outcome committed with the caller's own writes ([`crate::local`]) the
/// adapter's transaction that holds them.
pub(crate) trait Seam {
    /// [`Adapter::get`].
    fn get(&mut self, id: &RecordId) -> Result<Read, AdapterError>;
    /// [`Adapter::update`].
    fn update(
        &mut self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError>;
    /// [`Adapter::insert`]; refused by a seam that only completes a record
    /// (the default): writing it there would commit it without the caller's
    /// writes.
    fn insert(&mut self, _: &RecordId, _: &Record) -> Result<Option<Version>, AdapterError> {
        Err(only_updates())
    }
    /// [`Adapter::delete`]; refused by a seam that only completes a record
    /// (the default).
    fn delete(&mut self, _: &RecordId, _: &Stored) -> Result<bool, AdapterError> {
        Err(only_updates())
    }
}

/// What a seam that only completes a record answers to an insert or delete.
fn only_updates() -> AdapterError {
    AdapterError::new(
        crate::adapters::FailureKind::Failed,
        "a completion with the caller's writes only updates its record",
    )
}

impl Seam for &dyn Adapter {
    fn get(&mut self, id: &RecordId) -> Result<Read, AdapterError> {
        Adapter::get(*self, id)
    }

    fn insert(&mut self, id: &RecordId, record: &Record) -> Result<Option<Version>, AdapterError> {
        Adapter::insert(*self, id, record)
    }

    fn update(
        &mut self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        Adapter::update(*self, id, read, next)
    }

    fn delete(&mut self, id: &RecordId, read: &Stored) -> Result<bool, AdapterError> {
        Adapter::delete(*self, id, read)
    }
}

/// The instant a decision is taken at, unless the adapter's read carries its
/// database's time (PostgreSQL's read does, so reading the store's clock first,
/// a round trip to the same database, would be wasted: [`Now::Clock`] reads it
/// only when the read carries no time).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Now<'a> {
    /// This instant.
    At(UnixMillis),
    /// The store's clock, read when needed.
    Clock(&'a Store),
}

impl Now<'_> {
    fn read(self) -> UnixMillis {
        match self {
            Now::At(at) => at,
            Now::Clock(store) => store.now(),
        }
    }
}

impl From<UnixMillis> for Now<'_> {
    fn from(at: UnixMillis) -> Self {
        Now::At(at)
    }
}

/// The one loop: decide `op` on the record of `id` and write the decision
/// conditionally through `seam`; a refused write reads and decides again.
///
/// `held` is the record and version this caller wrote last (a guard's), used
/// instead of a first read: when it is still current, the transition costs
/// one conditional write (a refusal, or an answer that writes nothing, is
/// decided again on a read). `now` is the instant to decide at unless the
/// read carries its database's time.
pub(crate) fn run_on<'a>(
    seam: &mut dyn Seam,
    id: &RecordId,
    mut op: Op,
    policy: &Policy,
    now: impl Into<Now<'a>>,
    mut held: Option<Stored>,
) -> Result<Applied, WorkerError> {
    let at = now.into();
    let log_ref = id.log_ref();
    let mut token_floor = None;
    for _ in 0..MAX_ATTEMPTS {
        let from_held = held.is_some();
        let (existing, now) = match held.take() {
            Some(stored) => (Some(stored), at.read()),
            None => {
                let read = seam.get(id).map_err(StorageError::from)?;
                token_floor = Some(read.token_floor);
                if let Op::Claim { token_floor, .. } = &mut op {
                    *token_floor = read.token_floor;
                }
                (read.stored, read.now.unwrap_or_else(|| at.read()))
            }
        };
        let decision = machine::apply(existing.as_ref().map(|s| &s.record), &op, policy, now);
        // The held record is trusted only for a write, which its version
        // check verifies. A refusal or an answer without a write taken on
        // it may be stale (another worker took the lease over, and a step
        // begun before would be answered "dispatch" to the fenced one): it
        // is decided again on the record as read.
        let answers_unwritten = match &decision {
            Ok(decision) => decision.writes_nothing(),
            Err(_) => true,
        };
        if from_held && answers_unwritten {
            continue;
        }
        let decision = decision.map_err(|error| match error {
            TransitionError::NotFound => WorkerError::NotFound { log_ref },
            error => WorkerError::Rejected { log_ref, error },
        })?;
        let written = match (decision.write, existing) {
            (Write::Keep, existing) => Some(existing),
            (Write::Put(next), None) => {
                seam.insert(id, &next)
                    .map_err(StorageError::from)?
                    .map(|version| {
                        Some(Stored {
                            record: next,
                            version,
                        })
                    })
            }
            (Write::Put(next), Some(read)) => {
                if next == read.record {
                    Some(Some(read))
                } else {
                    seam.update(id, &read, &next)
                        .map_err(StorageError::from)?
                        .map(|version| {
                            Some(Stored {
                                record: next,
                                version,
                            })
                        })
                }
            }
            (Write::Delete, Some(read)) => seam
                .delete(id, &read)
                .map_err(StorageError::from)?
                .then_some(None),
            (Write::Delete, None) => Some(None),
        };
        if let Some(stored) = written {
            return Ok(Applied {
                answer: decision.answer,
                stored,
                now,
                token_floor,
            });
        }
        // Lost the race: read the newer record and decide again.
    }
    Err(StorageError::Contention {
        log_ref,
        attempts: MAX_ATTEMPTS,
    }
    .into())
}
