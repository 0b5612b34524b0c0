//! redb: the caller's writes run inside the completion's write transaction.
//!
//! The caller's closure becomes a [`LocalWrites`] hook of the redb adapter:
//! the group-commit job that applies the completion's conditional update runs
//! it right after the update, in the same transaction, only if the version
//! check held. A refused update (the record changed: a renewal, a takeover)
//! runs nothing; the engine reads, decides again, and the next update runs
//! the hook again. A hook that fails aborts the transaction.
//!
//! The hook may run on another caller's thread (the group's leader) and more
//! than once (a group repeated after another member failed), so what it gave
//! is kept in a slot that the caller reads once the engine returns: the value
//! of the run whose transaction committed, the caller's own error, or its
//! panic, resumed on the caller's thread.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use idemkit_core::RecordId;
use idemkit_core::record::{Record, StoredResponse};
use redb::{ReadTransaction, WriteTransaction};

use super::LocalError;
use crate::adapters::redb::{LocalWrites, RedbAdapter, RedbError};
use crate::adapters::{Adapter, AdapterError, Read, Stored, Version};
use crate::store::{ExecutionGuard, Seam, StorageError, Store, WorkerError};

/// What one run of the caller's closure gave.
enum Ran<T, E> {
    Done(T),
    Failed(E),
    Panicked(Box<dyn Any + Send>),
}

type Slot<T, E> = Arc<Mutex<Option<Ran<T, E>>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Only whole values are stored in the slot: valid even after a panic.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The caller's closure as the adapter's hook, and the slot it reports to.
fn hook<T, E, F>(mut writes: F) -> (LocalWrites, Slot<T, E>)
where
    F: FnMut(&WriteTransaction) -> Result<T, E> + Send + 'static,
    T: Send + 'static,
    E: Send + 'static,
{
    let slot: Slot<T, E> = Arc::new(Mutex::new(None));
    let out = Arc::clone(&slot);
    let local: LocalWrites = Arc::new(Mutex::new(
        move |txn: &WriteTransaction| -> Result<(), RedbError> {
            let ran = match catch_unwind(AssertUnwindSafe(|| writes(txn))) {
                Ok(Ok(value)) => Ran::Done(value),
                Ok(Err(e)) => Ran::Failed(e),
                Err(panic) => Ran::Panicked(panic),
            };
            let failed = !matches!(ran, Ran::Done(_));
            *lock(&out) = Some(ran);
            if failed {
                Err(RedbError::LocalWrites)
            } else {
                Ok(())
            }
        },
    ));
    (local, slot)
}

/// What the caller gets once the store answered `result`, from `slot`.
fn outcome<T, E>(result: Result<(), WorkerError>, slot: &Slot<T, E>) -> Result<T, LocalError<E>> {
    match (result, lock(slot).take()) {
        (_, Some(Ran::Panicked(panic))) => resume_unwind(panic),
        (Ok(()), Some(Ran::Done(value))) => Ok(value),
        (Err(_), Some(Ran::Failed(e))) => Err(LocalError::Writes(e)),
        (Err(e), _) => Err(LocalError::Store(e)),
        // The store answered without the transaction that holds the writes
        // (an answer that writes nothing): report it, never claim the writes.
        (Ok(()), _) => Err(LocalError::Store(WorkerError::Storage(
            StorageError::Corrupt {
                detail: "the completion was answered without a write, so the caller's writes were \
                     not committed"
                    .to_owned(),
            },
        ))),
    }
}

/// The engine's seam for one completion with the caller's writes: reads as
/// the store does, updates with the hook.
struct WithLocalWrites<'a, T, E> {
    adapter: &'a RedbAdapter,
    local: &'a LocalWrites,
    slot: &'a Slot<T, E>,
}

impl<T, E> Seam for WithLocalWrites<'_, T, E> {
    fn get(&mut self, id: &RecordId) -> Result<Read, AdapterError> {
        Adapter::get(self.adapter, id)
    }

    fn update(
        &mut self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        let answer = self.adapter.update_with(id, read, next, self.local);
        if !matches!(answer, Ok(Some(_)) | Err(RedbError::LocalWrites)) {
            // Nothing of this run was committed: a value it left is not the answer.
            lock(self.slot).take();
        }
        Ok(answer?)
    }
}

impl ExecutionGuard {
    /// Completes this execution with `response` and runs `writes` (the
    /// caller's writes to its own tables in the store's redb database) in the
    /// same write transaction: both commit with one fsync, or neither does.
    /// Exactly once for a Local effect; see [`crate::local`].
    ///
    /// `writes` runs only if the completion is accepted (this lease still
    /// holds the record); it may run more than once, in transactions that were
    /// aborted (group commit repeats a group another caller's failure
    /// aborted), and only the run that committed returns its `T`. Its `Err`
    /// or panic aborts the transaction: [`LocalError::Writes`] (a panic
    /// resumes here) and nothing is committed; the guard is then dropped (a
    /// Local record released). Use [`try_complete_with`](Self::try_complete_with)
    /// to keep the guard instead.
    pub fn complete_with<T, E, F>(
        mut self,
        writes: F,
        response: StoredResponse,
    ) -> Result<T, LocalError<E>>
    where
        F: FnMut(&WriteTransaction) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        self.try_complete_with(writes, &response)
    }

    /// Like [`complete_with`](Self::complete_with), but when nothing was
    /// committed the guard stays in the caller's hands (still this lease's, if
    /// the store did not refuse it), to release it or complete it another
    /// way. After `Ok` the guard is finished and dropping it does nothing.
    pub fn try_complete_with<T, E, F>(
        &mut self,
        writes: F,
        response: &StoredResponse,
    ) -> Result<T, LocalError<E>>
    where
        F: FnMut(&WriteTransaction) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let store = self.store().clone();
        let Some(adapter) = store.adapter_as::<RedbAdapter>() else {
            return Err(LocalError::unsupported("complete_with", &store));
        };
        let now = store.try_now().map_err(WorkerError::Storage)?;
        let (local, slot) = hook(writes);
        let mut seam = WithLocalWrites {
            adapter,
            local: &local,
            slot: &slot,
        };
        let result = self.complete_through(&mut seam, response, now, true);
        if result.is_ok() {
            // Committed (the seam's update returns after its group commit):
            // whoever waits for this key may read the outcome now.
            store.wake(self.record_id());
        }
        outcome(result, &slot)
    }
}

impl Store {
    /// Runs `read` on a snapshot of this store's redb database (the last
    /// commit), for the caller's own tables (see [`crate::local`]). Its own
    /// result comes back as it is (`Ok(Err(e))` for its error).
    pub fn read_local<T>(&self, read: impl FnOnce(&ReadTransaction) -> T) -> Result<T, LocalError> {
        let Some(adapter) = self.adapter_as::<RedbAdapter>() else {
            return Err(LocalError::unsupported("read_local", self));
        };
        adapter
            .read_local(read)
            .map_err(|e| LocalError::Store(WorkerError::Storage(AdapterError::from(e).into())))
    }

    /// Runs `writes` (the caller's writes to its own tables) in a durable write
    /// transaction of this store's redb database, group-committed with the
    /// store's own writes, outside any completion (setting up the service's
    /// data, say). Its `Err` or panic aborts the transaction, as in
    /// [`ExecutionGuard::complete_with`]. A write that is part of an
    /// operation's effect belongs in `complete_with` instead: written here,
    /// it is at least once.
    pub fn write_local<T, E, F>(&self, writes: F) -> Result<T, LocalError<E>>
    where
        F: FnMut(&WriteTransaction) -> Result<T, E> + Send + 'static,
        T: Send + 'static,
        E: Send + 'static,
    {
        let Some(adapter) = self.adapter_as::<RedbAdapter>() else {
            return Err(LocalError::unsupported("write_local", self));
        };
        let (local, slot) = hook(writes);
        let result = adapter
            .write_local(&local)
            .map_err(|e| WorkerError::Storage(AdapterError::from(e).into()));
        outcome(result, &slot)
    }
}
