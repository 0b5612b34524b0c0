//! PostgreSQL: the completion's compare-and-set runs in the caller's transaction.
//!
//! The engine's loop runs on the caller's `postgres::Transaction`: the record
//! is read there (with the database's time), the core decides, and the
//! `UPDATE … WHERE version = $read` runs there too. The row stays locked by
//! the caller's transaction until it commits or rolls back, so a concurrent
//! renewal or takeover waits for it and then sees the outcome (or, after a
//! rollback, the lease as it was).

use idemkit_core::record::{Record, StoredResponse};
use idemkit_core::{RecordId, UnixMillis};

use super::LocalError;
use crate::adapters::postgres::{PgError, PostgresAdapter, Typed};
use crate::adapters::{AdapterError, Read, Stored, Version};
use crate::store::{ExecutionGuard, Seam};

/// The engine's seam over a caller's transaction.
struct InTransaction<'a, 't> {
    pg: &'a PostgresAdapter,
    txn: &'a mut postgres::Transaction<'t>,
}

impl Seam for InTransaction<'_, '_> {
    fn get(&mut self, id: &RecordId) -> Result<Read, AdapterError> {
        let (mut read, now) = self.pg.read_on(&mut Typed(&mut *self.txn), id)?;
        // The decision's time is the database's, read in this transaction.
        read.now = Some(now);
        Ok(read)
    }

    fn update(
        &mut self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        // A serialization failure or deadlock aborted the caller's
        // transaction: not a lost race to retry here, but the caller's to retry.
        Ok(self
            .pg
            .update_on(&mut Typed(&mut *self.txn), id, read, next)?
            .map_err(|e| PgError::from_statement(&e))?)
    }
}

impl ExecutionGuard {
    /// Completes this execution with `response` inside the caller's
    /// PostgreSQL transaction `txn` (opened on the store's database, for
    /// example on [`PostgresAdapter::connection`]): the completion's version check and
    /// write run there, so the caller's own statements and the outcome commit
    /// or roll back together when the caller ends `txn`. Exactly once for a
    /// Local effect; see [`crate::local`].
    ///
    /// After `Ok`, **commit `txn`**: the outcome is durable (and a retry
    /// replays it) only then; rolled back, the record is still Running under
    /// this lease until it expires, and a Local record is then taken over as
    /// after a crash. The guard is finished either way (dropping it must not
    /// write the row on another connection while `txn` holds it).
    ///
    /// On `Err`, roll `txn` back. The guard is abandoned (the lease expires and
    /// the state machine decides, as after a crash): releasing it here, on
    /// another connection, could wait forever for a row `txn` holds. Use
    /// [`try_complete_in`](Self::try_complete_in) to keep the guard and release
    /// it after the rollback.
    pub fn complete_in(
        mut self,
        txn: &mut postgres::Transaction<'_>,
        response: StoredResponse,
    ) -> Result<(), LocalError> {
        let result = self.try_complete_in(txn, &response);
        if result.is_err() {
            self.abandon();
        }
        result
    }

    /// Like [`complete_in`](Self::complete_in), but on `Err` the guard stays in
    /// the caller's hands: roll `txn` back first, then release the guard (or
    /// let its drop release a Local record).
    pub fn try_complete_in(
        &mut self,
        txn: &mut postgres::Transaction<'_>,
        response: &StoredResponse,
    ) -> Result<(), LocalError> {
        let store = self.store().clone();
        let Some(pg) = store.adapter_as::<PostgresAdapter>() else {
            return Err(LocalError::unsupported("complete_in", &store));
        };
        let mut seam = InTransaction { pg, txn };
        // Every read in the transaction carries the database's time, which
        // the decision takes; this instant is never used.
        let unused = UnixMillis::ZERO;
        self.complete_through(&mut seam, response, unused, false)?;
        Ok(())
    }
}
