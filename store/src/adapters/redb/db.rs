//! Getting a redb [`Database`] for one transaction: kept open (a store owned by one
//! process, reopened after an I/O error: `recover.rs`) or opened around each
//! transaction (a file shared by several processes, as the `idemkit` CLI does),
//! with the idemkit format check and lock retries.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use redb::{Database, Durability, ReadTransaction, ReadableDatabase, StorageBackend};

use super::FileOptions;
use super::error::{OpenError, RedbError};
use super::group_commit::CommitStats;
use super::open::{
    Integrity, LockRetry, open_backend, open_file_once, open_file_with_retry, redb_open,
};
use super::records::InTxn;
use super::recover::{Owned, Reused, Source};
use super::users::SharedUse;
use crate::adapters::Health;

#[derive(Debug)]
pub(crate) enum Handle {
    /// One database handle for the life of the store (in-memory, custom backend, or a
    /// file this process owns); its writes are grouped (see `group_commit`), and it
    /// is reopened after an I/O error (see `recover`).
    Open(Arc<Owned>),
    /// Open the file for each transaction and close it right after, so several
    /// processes can take turns.
    PerTransaction {
        path: PathBuf,
        retry: std::sync::Mutex<LockRetry>,
        /// Tells a process that opens the file for its life that this one may
        /// hold leases in it (see `users`).
        shared_use: SharedUse,
    },
}

impl Handle {
    /// A handle on a database this process keeps open, opened from `source`.
    pub(crate) fn owned(db: Database, source: Source) -> Result<Handle, OpenError> {
        let owned = Owned::new(db, source).map_err(redb_open)?;
        Ok(Handle::Open(Arc::new(owned)))
    }

    /// The store file at `path`, created if absent, kept open.
    pub(crate) fn open_file(path: &Path, options: FileOptions) -> Result<Handle, OpenError> {
        let db = open_file_once(path, Integrity::Check)?;
        let source = Source::File {
            path: path.to_owned(),
            write_ahead_log: options.write_ahead_log,
        };
        Handle::owned(db, source)
    }

    /// A store on `backend`, kept open; a reopen opens the same backend again.
    pub(crate) fn open_backend(backend: impl StorageBackend) -> Result<Handle, OpenError> {
        let backend: Arc<dyn StorageBackend> = Arc::new(backend);
        let db = open_backend(Reused(Arc::clone(&backend)))?;
        Handle::owned(db, Source::Backend(backend))
    }

    /// Whether this process holds the database alone: kept open (redb locks
    /// it), and, for a file, no process uses it in shared mode (see `users`).
    pub(crate) fn held_alone(&self) -> bool {
        match self {
            Handle::Open(owned) => owned
                .file()
                .is_none_or(|path| !super::users::shared_users_present(path)),
            Handle::PerTransaction { .. } => false,
        }
    }

    /// Whether the database can write now (see `recover`).
    pub(crate) fn health(&self) -> Health {
        match self {
            Handle::Open(owned) => owned.health(),
            Handle::PerTransaction { .. } => Health::writable(),
        }
    }

    /// Another handle on the same database: an open database (and its write
    /// queue) is shared, a per-transaction one copies the path and retry policy.
    pub(crate) fn share(&self) -> Handle {
        match self {
            Handle::Open(owned) => Handle::Open(Arc::clone(owned)),
            Handle::PerTransaction {
                path,
                retry,
                shared_use,
            } => Handle::PerTransaction {
                path: path.clone(),
                retry: std::sync::Mutex::new(*retry.lock().unwrap_or_else(|p| p.into_inner())),
                shared_use: shared_use.share(),
            },
        }
    }

    /// How writes were grouped (zeros unless the database is kept open).
    pub(crate) fn commit_stats(&self) -> CommitStats {
        match self {
            Handle::Open(owned) => owned.group.stats(),
            _ => CommitStats::default(),
        }
    }

    pub(crate) fn set_lock_retry(&self, new: LockRetry) {
        if let Handle::PerTransaction { retry, .. } = self {
            *retry.lock().unwrap_or_else(|p| p.into_inner()) = new;
        }
    }

    /// Changes only the total wait of the lock retry (keeps the backoff).
    pub(crate) fn set_lock_budget(&self, budget: Duration) {
        if let Handle::PerTransaction { retry, .. } = self {
            retry.lock().unwrap_or_else(|p| p.into_inner()).budget = budget;
        }
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Handle::Open(_) => None,
            Handle::PerTransaction { path, .. } => Some(path),
        }
    }

    fn database(&self) -> Result<Arc<Database>, RedbError> {
        match self {
            Handle::Open(owned) => owned.for_read(),
            Handle::PerTransaction { path, retry, .. } => {
                // A poisoned lock still holds a valid `LockRetry` (plain data).
                let retry = *retry.lock().unwrap_or_else(|p| p.into_inner());
                Ok(open_file_with_retry(path, retry, Integrity::Trust).map(Arc::new)?)
            }
        }
    }

    /// Runs `f` in a write transaction committed with [`Durability::Immediate`]:
    /// when this returns `Ok`, the commit is durable. When `f` fails (returns an
    /// error or panics), nothing it wrote is kept.
    ///
    /// `f` also says whether it wrote anything; a
    /// transaction that wrote nothing is aborted instead of committed, which
    /// saves a sync for the common read-only answers (Replay, InFlight). The
    /// decision was still taken under the write lock, so it is just as atomic.
    ///
    /// On a database this process keeps open, the transaction may be shared with
    /// other callers' closures (group commit, see `group_commit`): `f` then runs
    /// after theirs and sees their writes, and may run more than once (hence
    /// `FnMut`) when another closure of its group failed; only the answer of the
    /// run that was committed is returned.
    pub(crate) fn write_if_changed<T, E, F>(&self, mut f: F) -> Result<T, E>
    where
        F: FnMut(&mut InTxn<'_>) -> Result<(T, bool), E> + Send + 'static,
        T: Send + 'static,
        E: From<RedbError> + Send + 'static,
    {
        if let Handle::Open(owned) = self {
            return owned.group.write(&**owned, f);
        }
        let db = self.database()?;
        let mut txn = db.begin_write().map_err(RedbError::from)?;
        txn.set_durability(Durability::Immediate)
            .map_err(RedbError::from)?;
        // redb may panic on pages damaged after the integrity check at open; a
        // panic here must not take the caller down. Dropping the transaction
        // during the unwind aborts it, so nothing is written.
        let decided = catch_unwind(AssertUnwindSafe(|| {
            let mut in_txn = InTxn::new(&txn);
            let decided = f(&mut in_txn);
            if decided.is_ok() {
                // A file opened per transaction keeps no floor in memory.
                in_txn.close().map_err(E::from)?;
            }
            decided
        }))
        .map_err(|payload| RedbError::panicked(payload.as_ref()))?;
        match decided {
            Ok((value, true)) => {
                txn.commit().map_err(RedbError::from)?;
                Ok(value)
            }
            Ok((value, false)) => {
                txn.abort().map_err(RedbError::from)?;
                Ok(value)
            }
            Err(e) => {
                // The error from `f` is what matters; an abort failure adds nothing.
                let _ = txn.abort();
                Err(e)
            }
        }
    }

    /// Runs `f` in one read transaction.
    pub(crate) fn read<T, E>(
        &self,
        f: impl FnOnce(&ReadTransaction) -> Result<T, E>,
    ) -> Result<T, E>
    where
        E: From<RedbError>,
    {
        let db = self.database()?;
        let txn = db.begin_read().map_err(RedbError::from)?;
        // A database kept open is released at once (the transaction keeps what
        // it reads from), so a reopen (see `recover`) never waits for a read; one
        // opened for this transaction must stay open through it.
        let _open_for_this_read = match self {
            Handle::Open(_) => {
                drop(db);
                None
            }
            Handle::PerTransaction { .. } => Some(db),
        };
        catch_unwind(AssertUnwindSafe(|| f(&txn)))
            .unwrap_or_else(|payload| Err(RedbError::panicked(payload.as_ref()).into()))
    }
}

#[cfg(test)]
mod tests {
    //! Group commit through [`Handle::write_if_changed`]: a leader is held inside
    //! its closure while followers queue up, so the group they form is known.

    use std::sync::mpsc;
    use std::thread::JoinHandle;
    use std::time::Duration;

    use redb::{ReadableTableMetadata, TableDefinition};

    use super::*;

    const TEST: TableDefinition<&str, u64> = TableDefinition::new("group_commit_test");

    /// Writes `key` = 1 + the number of keys already written; answers that number.
    fn put(in_txn: &InTxn<'_>, key: &str) -> Result<u64, RedbError> {
        let mut table = in_txn.txn().open_table(TEST)?;
        let n = table.len()? + 1;
        table.insert(key, n)?;
        Ok(n)
    }

    fn get(handle: &Handle, key: &str) -> Option<u64> {
        handle
            .read(|txn| {
                let table = match txn.open_table(TEST) {
                    Ok(table) => table,
                    Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
                    Err(e) => return Err(RedbError::from(e)),
                };
                Ok::<_, RedbError>(table.get(key)?.map(|v| v.value()))
            })
            .unwrap()
    }

    fn group(handle: &Handle) -> &super::super::group_commit::GroupCommit {
        match handle {
            Handle::Open(owned) => &owned.group,
            _ => panic!("not an open handle"),
        }
    }

    /// Starts a leader that writes `key` (or nothing) and then blocks until the
    /// returned sender is used.
    fn held_leader(
        handle: &Arc<Handle>,
        key: Option<&'static str>,
    ) -> (mpsc::Sender<()>, JoinHandle<Result<u64, RedbError>>) {
        let (started_tx, started) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let h = Arc::clone(handle);
        let leader = std::thread::spawn(move || {
            h.write_if_changed(move |in_txn| {
                let n = match key {
                    Some(key) => put(in_txn, key)?,
                    None => 0,
                };
                let _ = started_tx.send(());
                let _ = go_rx.recv();
                Ok((n, key.is_some()))
            })
        });
        started.recv().unwrap();
        (go, leader)
    }

    /// Queues one follower and waits until it is in the queue, so followers
    /// queue in the order they are started.
    fn follower<T: Send + 'static>(
        handle: &Arc<Handle>,
        f: impl FnMut(&mut InTxn<'_>) -> Result<(T, bool), RedbError> + Send + 'static,
    ) -> JoinHandle<Result<T, RedbError>> {
        let before = group(handle).waiting();
        let h = Arc::clone(handle);
        let joined = std::thread::spawn(move || h.write_if_changed(f));
        while group(handle).waiting() == before {
            std::thread::yield_now();
        }
        joined
    }

    fn in_memory() -> Arc<Handle> {
        Arc::new(Handle::open_backend(redb::backends::InMemoryBackend::new()).unwrap())
    }

    #[test]
    fn an_uncontended_write_runs_on_the_callers_thread_in_its_own_commit() {
        let handle = in_memory();
        let me = std::thread::current().id();
        let ran_on = handle
            .write_if_changed(move |txn| {
                put(txn, "a")?;
                Ok::<_, RedbError>((std::thread::current().id(), true))
            })
            .unwrap();
        assert_eq!(ran_on, me);
        assert_eq!(get(&handle, "a"), Some(1));
        let stats = handle.commit_stats();
        assert_eq!(
            (stats.operations, stats.transactions, stats.commits),
            (1, 1, 1)
        );
        // Nothing written: aborted, no commit.
        handle
            .write_if_changed(|_| Ok::<_, RedbError>(((), false)))
            .unwrap();
        let stats = handle.commit_stats();
        assert_eq!((stats.transactions, stats.commits), (2, 1));
    }

    /// A group's time is told step by step; a database without a log spends
    /// none of it logging.
    #[test]
    fn a_groups_time_is_counted_by_step() {
        let handle = in_memory();
        assert_eq!(handle.commit_stats().committing, Duration::ZERO);
        for key in ["a", "b"] {
            handle
                .write_if_changed(move |txn| {
                    put(txn, key)?;
                    Ok::<_, RedbError>(((), true))
                })
                .unwrap();
        }
        let stats = handle.commit_stats();
        for (step, spent) in [
            ("beginning", stats.beginning),
            ("running", stats.running),
            ("committing", stats.committing),
            ("answering", stats.answering),
        ] {
            assert!(spent > Duration::ZERO, "{step}: {stats:?}");
        }
        assert_eq!(stats.logging, Duration::ZERO, "{stats:?}");
    }

    #[test]
    fn queued_writes_are_decided_in_order_in_one_commit() {
        let handle = in_memory();
        let (go, leader) = held_leader(&handle, Some("leader"));
        let followers: Vec<_> = ["f1", "f2", "f3"]
            .into_iter()
            .map(|key| follower(&handle, move |txn| Ok((put(txn, key)?, true))))
            .collect();
        go.send(()).unwrap();
        assert_eq!(leader.join().unwrap().unwrap(), 1);
        // Each follower saw the writes of the ones queued before it.
        let seen: Vec<u64> = followers
            .into_iter()
            .map(|f| f.join().unwrap().unwrap())
            .collect();
        assert_eq!(seen, vec![2, 3, 4]);
        let stats = handle.commit_stats();
        assert_eq!(stats.operations, 4);
        assert_eq!(stats.commits, 2, "{stats:?}");
        assert_eq!(stats.largest_group, 3, "{stats:?}");
        assert_eq!(stats.reruns, 0, "{stats:?}");
    }

    #[test]
    fn a_failing_or_panicking_write_loses_nothing_of_its_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("group.redb");
        let handle = Arc::new(Handle::open_file(&path, FileOptions::default()).unwrap());
        let (go, leader) = held_leader(&handle, None);
        let a = follower(&handle, |txn| Ok((put(txn, "a")?, true)));
        let b = follower(&handle, |txn| {
            put(txn, "b")?;
            Err::<(u64, bool), _>(RedbError::Corrupt {
                detail: "b refuses after writing".into(),
            })
        });
        let c = follower(&handle, |txn| -> Result<(u64, bool), RedbError> {
            put(txn, "c")?;
            panic!("c panics after writing")
        });
        let d = follower(&handle, |txn| Ok((put(txn, "d")?, true)));
        go.send(()).unwrap();
        assert_eq!(leader.join().unwrap().unwrap(), 0);
        assert_eq!(a.join().unwrap().unwrap(), 1);
        assert!(matches!(
            b.join().unwrap(),
            Err(RedbError::Corrupt { detail }) if detail == "b refuses after writing"
        ));
        assert!(matches!(
            c.join().unwrap(),
            Err(RedbError::Corrupt { detail }) if detail.contains("c panics after writing")
        ));
        // d decided after a's write only: b's and c's were rolled back.
        assert_eq!(d.join().unwrap().unwrap(), 2);
        let stats = handle.commit_stats();
        // a ran three times (with b, with c, then committed with d).
        assert_eq!(stats.reruns, 2, "{stats:?}");
        assert_eq!(stats.commits, 1, "{stats:?}");

        // Durable: the file reopened holds a and d, and nothing of b or c.
        drop(handle);
        let reopened = Handle::open_file(&path, FileOptions::default()).unwrap();
        assert_eq!(get(&reopened, "a"), Some(1));
        assert_eq!(get(&reopened, "d"), Some(2));
        assert_eq!(get(&reopened, "b"), None);
        assert_eq!(get(&reopened, "c"), None);
    }

    #[test]
    fn a_failed_group_commit_answers_every_caller_with_the_error() {
        let switch = crate::adapters::redb::FaultSwitch::default();
        let backend = crate::adapters::redb::FaultyBackend::new(
            redb::backends::InMemoryBackend::new(),
            switch.clone(),
        );
        let handle = Arc::new(Handle::open_backend(backend).unwrap());
        // The leader writes nothing (no sync); the group of three behind it
        // commits, and that commit's first sync fails.
        let (go, leader) = held_leader(&handle, None);
        let followers: Vec<_> = ["f1", "f2", "f3"]
            .into_iter()
            .map(|key| follower(&handle, move |txn| Ok((put(txn, key)?, true))))
            .collect();
        switch.fail_sync_after(0);
        go.send(()).unwrap();
        assert_eq!(leader.join().unwrap().unwrap(), 0);
        for f in followers {
            match f.join().unwrap() {
                Err(RedbError::GroupCommit {
                    operations: 3,
                    cause,
                }) => {
                    assert!(matches!(*cause, RedbError::Redb(_)), "{cause:?}");
                }
                other => panic!("expected the shared commit's error, got {other:?}"),
            }
        }
        assert_eq!(switch.injected(), 1);
        assert_eq!(handle.commit_stats().commits, 0);
    }

    #[test]
    fn a_group_is_bounded_and_the_rest_is_led_by_the_next_caller() {
        let handle = in_memory();
        let (go, leader) = held_leader(&handle, None);
        let n = group_commit_max() + 5;
        let followers: Vec<_> = (0..n)
            .map(|i| {
                let key: &'static str = Box::leak(format!("k{i}").into_boxed_str());
                follower(&handle, move |txn| Ok((put(txn, key)?, true)))
            })
            .collect();
        go.send(()).unwrap();
        leader.join().unwrap().unwrap();
        let seen: Vec<u64> = followers
            .into_iter()
            .map(|f| f.join().unwrap().unwrap())
            .collect();
        assert_eq!(seen, (1..=n as u64).collect::<Vec<_>>());
        let stats = handle.commit_stats();
        assert_eq!(stats.largest_group, group_commit_max() as u64);
        assert_eq!(stats.commits, 2, "{stats:?}");
    }

    fn group_commit_max() -> usize {
        super::super::group_commit::MAX_BATCH
    }
}
