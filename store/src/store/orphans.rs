//! Settling, when a store is opened, the executions of a process that is gone.
//!
//! A store whose database this process holds alone ([`Adapter::held_alone`]: a
//! redb file kept open, which redb locks against every other process) can only
//! have been left Running by a process that no longer exists: nobody can renew
//! or complete those leases. Waiting for them to expire protects nothing and
//! costs a lease of downtime per crash, so [`crate::open`] settles them at once,
//! by the rules a lease expiry follows: an **External** execution may have
//! written downstream, so it becomes **Unknown** (`UnknownReason::Crash`; a
//! retry gets `outcome-uncertain`, a reconciler may start at once); a **Local**
//! one committed its effect with its outcome or not at all, and as it has no
//! outcome it **released** (a retry executes). The dead worker's own fencing
//! token is presented, as if it had reported the crash itself.
//!
//! A shared store (PostgreSQL, a redb file opened per transaction) keeps the
//! lease-based takeover: another live process may hold any of its leases.

use idemkit_core::machine::{Op, Policy};
use idemkit_core::record::{EffectKind, RecordState, StateName, UnknownReason};
use idemkit_core::{LogRef, RecordId, UnixMillis};

use super::Store;
use super::error::{QueryError, WorkerError};
use crate::adapters::{ScanBy, Stored};

/// An execution a previous process left Running, settled when the store was
/// opened ([`Store::orphans_settled_at_open`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettledOrphan {
    /// The record's log reference (never the raw key).
    pub log_ref: LogRef,
    /// The operation it belongs to.
    pub operation: String,
    /// What it became: [`StateName::Unknown`] (External) or
    /// [`StateName::Released`] (Local).
    pub became: StateName,
}

impl Store {
    /// The executions a previous process left Running that opening this store
    /// settled: empty unless the store was opened with [`crate::open`] (a redb
    /// file this process holds alone) and a process died holding leases.
    #[must_use]
    pub fn orphans_settled_at_open(&self) -> &[SettledOrphan] {
        &self.orphans
    }

    /// This store, having settled what a process that is gone left Running
    /// (see [`Store::orphans_settled_at_open`]). Called once, when the store
    /// is opened, before this process can hold any lease of its own; a failure
    /// leaves those leases to their expiry.
    #[must_use]
    pub(crate) fn settling_orphans(mut self) -> Store {
        match self.settle_orphans() {
            Ok(settled) => self.orphans = settled.into(),
            Err(e) => tracing::warn!(
                error = %e,
                "the executions a previous process left running could not be settled at open; \
                 they will be settled when their leases expire"
            ),
        }
        self
    }

    /// Settles every Running record when this process holds the database
    /// alone; nothing otherwise.
    pub(crate) fn settle_orphans(&self) -> Result<Vec<SettledOrphan>, QueryError> {
        if !self.adapter.held_alone() {
            return Ok(Vec::new());
        }
        let now = self.try_now()?;
        // Only to date a Released record's window for a record written before
        // records kept their own windows.
        let policy = Policy::default();
        let mut settled = Vec::new();
        self.scan_all(ScanBy::LeaseExpired(UnixMillis::MAX), |entry| {
            // An undecodable record is left alone (its state cannot be read);
            // `verify` names it.
            if let Ok(stored) = &entry.stored
                && let Some(orphan) = self.settle_one(&entry.id, stored, &policy, now)?
            {
                settled.push(orphan);
            }
            Ok(true)
        })?;
        Ok(settled)
    }

    fn settle_one(
        &self,
        id: &[u8],
        stored: &Stored,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<Option<SettledOrphan>, QueryError> {
        let RecordState::Running { lease } = &stored.record.state else {
            return Ok(None);
        };
        let Ok((scope, key)) = RecordId::decode(id) else {
            return Ok(None);
        };
        let record_id = scope.record_id(&key);
        let (op, became) = match stored.record.effect {
            EffectKind::External => (
                Op::MarkUnknown {
                    token: lease.token,
                    reason: UnknownReason::Crash,
                },
                StateName::Unknown,
            ),
            EffectKind::Local => (Op::Release { token: lease.token }, StateName::Released),
        };
        match self.run(&record_id, op, policy, now, Some(stored.clone())) {
            Ok(_) => {}
            Err(WorkerError::Storage(e)) => return Err(QueryError::Storage(e)),
            // Gone or settled since the scan: nothing of a dead process is left.
            Err(
                WorkerError::NotFound { .. }
                | WorkerError::Rejected { .. }
                | WorkerError::Changed { .. },
            ) => return Ok(None),
        }
        let orphan = SettledOrphan {
            log_ref: record_id.log_ref(),
            operation: scope.operation().to_owned(),
            became,
        };
        tracing::warn!(
            log_ref = %orphan.log_ref,
            operation = %orphan.operation,
            became = ?orphan.became,
            "an execution of a process that is gone was settled when the store was opened"
        );
        Ok(Some(orphan))
    }
}
