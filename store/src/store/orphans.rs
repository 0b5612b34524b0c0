//! Settling, when a store is opened, the executions of a process that is gone.
//!
//! A store whose database this process holds alone ([`Adapter::held_alone`]: a
//! redb file kept open, which redb locks against every other process) can only
//! have been left Running by a process that no longer exists: nobody can renew
//! or complete those leases. Waiting for them to expire protects nothing and
//! costs a lease of downtime per crash, so [`Store::open`] settles them at once,
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
use super::error::{QueryError, TxError};
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
    /// settled: empty unless the store was opened with [`Store::open`] (a redb
    /// file this process holds alone) and a process died holding leases.
    #[must_use]
    pub fn orphans_settled_at_open(&self) -> &[SettledOrphan] {
        &self.orphans
    }

    /// Settles every Running record when this process holds the database
    /// alone; nothing otherwise. Called once, when the store is opened, before
    /// this process can hold any lease of its own.
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
            Err(TxError::Storage(e)) => return Err(QueryError::Storage(e)),
            // Gone or settled since the scan: nothing of a dead process is left.
            Err(TxError::NotFound { .. } | TxError::Rejected { .. }) => return Ok(None),
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idemkit_core::machine::Policy;
    use idemkit_core::record::{EffectKind, RecordState, StateName, StoredResponse, UnknownReason};
    use idemkit_core::{Fingerprint, IdempotencyKey, Scope};

    use crate::store::{Claim, LockRetry, Store};

    fn scope(operation: &str) -> Scope {
        Scope::new("acme", operation).unwrap()
    }

    fn key(k: &str) -> IdempotencyKey {
        IdempotencyKey::new(k).unwrap()
    }

    /// Claims `k` under a 30 s lease and leaves it Running, as a process that
    /// died mid-execution would.
    fn orphan(store: &Store, operation: &str, k: &str, effect: EffectKind) {
        let policy = Policy::default()
            .with_effect(effect)
            .with_lease(Duration::from_secs(30));
        match store
            .claim(
                &scope(operation),
                &key(k),
                Fingerprint::from_bytes([2; 32]),
                "dead",
                &policy,
            )
            .unwrap()
        {
            Claim::Execute(guard) => guard.abandon(),
            other => panic!("expected Execute, got {other:?}"),
        }
    }

    fn state(store: &Store, operation: &str, k: &str) -> RecordState {
        store
            .get(&scope(operation), &key(k))
            .unwrap()
            .unwrap()
            .state
    }

    #[test]
    fn opening_a_file_held_alone_settles_what_a_dead_process_left_running() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("orphans.redb");
        {
            let store = Store::open(&path).unwrap();
            orphan(&store, "charge", "ext", EffectKind::External);
            orphan(&store, "note", "loc", EffectKind::Local);
            let done = Policy::default().with_effect(EffectKind::Local);
            if let Claim::Execute(g) = store
                .claim(
                    &scope("charge"),
                    &key("done"),
                    Fingerprint::from_bytes([2; 32]),
                    "w",
                    &done,
                )
                .unwrap()
            {
                g.complete(StoredResponse::new(201, b"ok".to_vec()))
                    .unwrap();
            }
        }
        let store = Store::open(&path).unwrap();
        assert!(matches!(
            state(&store, "charge", "ext"),
            RecordState::Unknown {
                reason: UnknownReason::Crash,
                ..
            }
        ));
        assert!(matches!(
            state(&store, "note", "loc"),
            RecordState::Released { .. }
        ));
        assert_eq!(state(&store, "charge", "done").name(), StateName::Completed);
        let mut settled: Vec<_> = store
            .orphans_settled_at_open()
            .iter()
            .map(|o| (o.operation.clone(), o.became))
            .collect();
        settled.sort();
        assert_eq!(
            settled,
            vec![
                ("charge".to_owned(), StateName::Unknown),
                ("note".to_owned(), StateName::Released)
            ]
        );
        // The retries are answered at once: uncertain, and a new execution.
        let retry = |operation: &str, k: &str, effect| {
            store
                .claim(
                    &scope(operation),
                    &key(k),
                    Fingerprint::from_bytes([2; 32]),
                    "w2",
                    &Policy::default().with_effect(effect),
                )
                .unwrap()
        };
        assert!(matches!(
            retry("charge", "ext", EffectKind::External),
            Claim::Uncertain { .. }
        ));
        assert!(matches!(
            retry("note", "loc", EffectKind::Local),
            Claim::Execute(_)
        ));
        // Opened again, nothing is left to settle.
        drop(store);
        assert!(
            Store::open(&path)
                .unwrap()
                .orphans_settled_at_open()
                .is_empty()
        );
    }

    #[test]
    fn a_file_in_use_by_a_shared_mode_process_keeps_its_leases_when_opened_for_life() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mixed.redb");
        // An `idemkit exec`: between its transactions, with a live lease.
        let shared = Store::open_shared(&path, LockRetry::default()).unwrap();
        orphan(&shared, "charge", "live", EffectKind::External);
        {
            let owner = Store::open(&path).unwrap();
            assert!(owner.orphans_settled_at_open().is_empty());
            assert_eq!(state(&owner, "charge", "live").name(), StateName::Running);
        }
        // Once the shared-mode process is gone, its lease is an orphan.
        drop(shared);
        let owner = Store::open(&path).unwrap();
        assert_eq!(owner.orphans_settled_at_open().len(), 1);
        assert_eq!(state(&owner, "charge", "live").name(), StateName::Unknown);
    }

    #[test]
    fn a_store_shared_between_processes_leaves_leases_to_their_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.redb");
        let shared = Store::open_shared(&path, LockRetry::default()).unwrap();
        orphan(&shared, "charge", "ext", EffectKind::External);
        // Another process may hold this lease: nothing settles it.
        assert!(shared.settle_orphans().unwrap().is_empty());
        drop(shared);
        let again = Store::open_shared(&path, LockRetry::default()).unwrap();
        assert_eq!(state(&again, "charge", "ext").name(), StateName::Running);
        assert!(again.orphans_settled_at_open().is_empty());
    }
}
