//! The embedded store in one call: the engine ([`Store`]) over a redb file
//! ([`RedbAdapter`]), or over memory for tests. Beside both, so that neither
//! names the other.

use std::path::Path;
use std::sync::Arc;

use crate::adapters::redb::{OpenError, RedbAdapter};
use crate::store::Store;

/// The store in the redb file `path` ([`RedbAdapter::open`]): created if
/// absent, kept open and locked for the life of the store.
///
/// As no other process can hold a lease in a file this process holds, the
/// executions a crashed process left Running are settled at once, as their
/// leases' expiry would settle them (External → Unknown, Local → Released),
/// instead of blocking their keys until then: see
/// [`Store::orphans_settled_at_open`]. Not while a process uses the file in
/// shared mode ([`RedbAdapter::open_shared`], an `idemkit exec` between two
/// of its transactions): it may hold a live lease, so leases are then left to
/// their expiry, as they are if settling fails.
///
/// For the adapter's own methods (commit statistics, lock retries), keep it:
/// `let adapter = Arc::new(RedbAdapter::open(path)?); let store = Store::new(adapter.clone());`
/// (that store settles nothing at open).
pub fn open(path: impl AsRef<Path>) -> Result<Store, OpenError> {
    Ok(Store::new(Arc::new(RedbAdapter::open(path)?)).settling_orphans())
}

/// A store in memory ([`RedbAdapter::in_memory`]): for tests and caches.
pub fn in_memory() -> Result<Store, OpenError> {
    Ok(Store::new(Arc::new(RedbAdapter::in_memory()?)))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use idemkit_core::machine::Policy;
    use idemkit_core::record::{EffectKind, RecordState, StateName, StoredResponse, UnknownReason};
    use idemkit_core::{Fingerprint, IdempotencyKey, Scope};

    use std::sync::Arc;

    use crate::adapters::redb::{LockRetry, RedbAdapter};
    use crate::store::{Claim, Store};

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

    fn open_shared(path: &std::path::Path) -> Store {
        Store::new(Arc::new(
            RedbAdapter::open_shared(path, LockRetry::default()).unwrap(),
        ))
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
            let store = crate::open(&path).unwrap();
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
        let store = crate::open(&path).unwrap();
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
            crate::open(&path)
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
        let shared = open_shared(&path);
        orphan(&shared, "charge", "live", EffectKind::External);
        {
            let owner = crate::open(&path).unwrap();
            assert!(owner.orphans_settled_at_open().is_empty());
            assert_eq!(state(&owner, "charge", "live").name(), StateName::Running);
        }
        // Once the shared-mode process is gone, its lease is an orphan.
        drop(shared);
        let owner = crate::open(&path).unwrap();
        assert_eq!(owner.orphans_settled_at_open().len(), 1);
        assert_eq!(state(&owner, "charge", "live").name(), StateName::Unknown);
    }

    #[test]
    fn a_store_shared_between_processes_leaves_leases_to_their_expiry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shared.redb");
        let shared = open_shared(&path);
        orphan(&shared, "charge", "ext", EffectKind::External);
        // Another process may hold this lease: nothing settles it.
        assert!(shared.settle_orphans().unwrap().is_empty());
        drop(shared);
        let again = open_shared(&path);
        assert_eq!(state(&again, "charge", "ext").name(), StateName::Running);
        assert!(again.orphans_settled_at_open().is_empty());
    }
}
