//! A database this process keeps open, and how it comes back after an I/O error.
//!
//! redb latches its first failed write or sync: every later operation of that
//! `Database` answers "Previous I/O error occurred. Please close and re-open the
//! database". A full disk, a file-size limit or a flaky volume would then keep
//! the store down until a restart, although the cause is often gone seconds
//! later. So when a group commit fails with an I/O error:
//!
//! 1. the database is marked **unwritable**: writes fail at once with
//!    [`RedbError::Unwritable`] (a transient failure: 503 and `Retry-After`)
//!    instead of reaching the latched database; reads go on while it can read;
//! 2. the next operation that needs it (a write, a read once the database is
//!    closed, or a health check, so that a load balancer's probes bring it back
//!    while no traffic comes) **closes and reopens** it and proves it writable
//!    with a durable probe write (one metadata entry, `last_recovery`) before
//!    writes are let through again. The first attempt is made at once; after a
//!    failed one the next waits, from 25 ms doubling up to [`MAX_PAUSE`] (or four
//!    times as long as the attempt took, for a file whose recovery is slow).
//!
//! No thread is started: a store dropped while unwritable simply closes.
//!
//! Reopening runs redb's crash recovery, so what was acknowledged stays
//! acknowledged: a commit is acknowledged only after its fsync returned, and
//! that state is what a reopen finds. Writes of the failed commit were not
//! acknowledged (every caller of its group got the error). A reopen never
//! creates a file: if the store's file is gone, recovery keeps failing and says
//! so, rather than starting an empty store under the old name.
//!
//! Execution guards keep their lease through all this: their record and version
//! are unchanged on disk, so a completion retried after the reopen is the same
//! conditional write. Leases are never settled here: the process that holds
//! them is alive.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redb::{Database, Durability, ReadableDatabase, StorageBackend};

use super::error::RedbError;
use super::group_commit::{ForWrite, GroupCommit, WriteTarget};
use super::records::{Floors, token_floor_in};
use super::snapshot::{Snapshot, SnapshotCache};
use super::tables::{META, META_LAST_RECOVERY};
use super::wal::{self, Wal};
use crate::adapters::Health;

/// The longest pause between two reopen attempts (unless an attempt itself
/// takes longer: see the module documentation).
pub(crate) const MAX_PAUSE: Duration = Duration::from_secs(1);

/// The pause after the first failed attempt; doubled after each later one.
const FIRST_PAUSE: Duration = Duration::from_millis(25);

/// How long a reopen waits for operations still holding the old database (a
/// read beginning its transaction, a group commit) before it gives this
/// attempt up and leaves the database in place.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// How to open the database again.
#[derive(Debug)]
pub(crate) enum Source {
    /// The file at this path (it must exist), with or without its
    /// write-ahead log.
    File {
        path: PathBuf,
        write_ahead_log: bool,
    },
    /// The same storage backend (memory, or a caller's backend), shared by
    /// every database opened on it.
    Backend(Arc<dyn StorageBackend>),
}

/// A database this process keeps open, with its write queue and its recovery.
#[derive(Debug)]
pub(crate) struct Owned {
    slot: Mutex<Slot>,
    /// Held by the one caller reopening the database; others do not wait.
    recovery: Mutex<Recovery>,
    pub(crate) group: GroupCommit,
    source: Source,
    /// When a commit last succeeded (Unix ms; 0: none yet).
    last_commit: AtomicU64,
    /// The token floor, for a read not to open the meta table each time
    /// (a tenth of a snapshot read's instructions): read at open and at a
    /// reopen, raised by each group before it commits. Never below the floor
    /// of a commit a read can see; above it only when a commit that raised it
    /// then failed, which makes a new record's token skip numbers and nothing
    /// else.
    token_floor: AtomicU64,
    /// The records table of the last commit, for reads (see `snapshot`).
    snapshot: SnapshotCache,
}

#[derive(Debug)]
struct Slot {
    /// `None` while it is being reopened, or after a reopen failed to open it.
    db: Option<Arc<Database>>,
    /// Counts the databases opened: a failure met on an older one is stale.
    generation: u64,
    /// Why writes are refused, while they are.
    broken: Option<Broken>,
    /// The write-ahead log of `db` (a file's; see `wal.rs`).
    wal: Option<Arc<Mutex<Wal>>>,
    /// The floors the last commit on `db` left, exactly, when known: set by
    /// each group that commits, cleared by any failure (a commit that failed
    /// may still have landed) and by a reopen. `None` makes the next group
    /// read them from the meta table.
    floors: Option<Floors>,
}

#[derive(Clone, Debug)]
struct Broken {
    since: SystemTime,
    cause: String,
    attempts: u32,
    last_attempt: Option<String>,
}

#[derive(Debug)]
struct Recovery {
    /// No attempt before this instant.
    next_attempt: Instant,
    /// The pause after the last failed attempt (zero before any).
    pause: Duration,
}

/// A mutex whose holder panicked still guards valid data here: every change is
/// an assignment.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn unix_millis(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Owned {
    /// `db`, which was opened from `source`; an error when its token floor
    /// cannot be read.
    pub(crate) fn new(db: Database, source: Source) -> Result<Owned, redb::Error> {
        let token_floor = AtomicU64::new(stored_token_floor(&db)?);
        let wal = new_wal(&db, &source);
        Ok(Owned {
            slot: Mutex::new(Slot {
                db: Some(Arc::new(db)),
                generation: 0,
                broken: None,
                wal,
                floors: None,
            }),
            recovery: Mutex::new(Recovery {
                next_attempt: Instant::now(),
                pause: Duration::ZERO,
            }),
            group: GroupCommit::default(),
            source,
            last_commit: AtomicU64::new(0),
            token_floor,
            snapshot: SnapshotCache::default(),
        })
    }

    /// The records table as the last commit left it, for a read.
    pub(crate) fn records(&self) -> Result<Arc<Snapshot>, RedbError> {
        self.snapshot.records(|| self.for_read())
    }

    /// The token floor kept in memory.
    pub(crate) fn token_floor(&self) -> u64 {
        self.token_floor.load(Ordering::Acquire)
    }

    /// The write-ahead log of the database now open (for tests that arm a
    /// failure in it).
    #[cfg(test)]
    pub(crate) fn wal(&self) -> Option<Arc<Mutex<Wal>>> {
        lock(&self.slot).wal.clone()
    }

    /// The file it was opened from, if any.
    pub(crate) fn file(&self) -> Option<&std::path::Path> {
        match &self.source {
            Source::File { path, .. } => Some(path),
            Source::Backend(_) => None,
        }
    }

    /// The database to read from (reopened first if a failed reopen closed it).
    pub(crate) fn for_read(&self) -> Result<Arc<Database>, RedbError> {
        if let Some(db) = &lock(&self.slot).db {
            return Ok(Arc::clone(db));
        }
        self.try_recover();
        let slot = lock(&self.slot);
        match &slot.db {
            Some(db) => Ok(Arc::clone(db)),
            None => Err(unwritable(slot.broken.as_ref())),
        }
    }

    /// What a health check reports; an unwritable database is given a reopen
    /// attempt first when one is due, so that health checks alone bring it back.
    pub(crate) fn health(&self) -> Health {
        if lock(&self.slot).broken.is_some() {
            self.try_recover();
        }
        let last = self.last_commit.load(Ordering::Relaxed);
        let last_write = (last > 0).then(|| UNIX_EPOCH + Duration::from_millis(last));
        let slot = lock(&self.slot);
        let health = match &slot.broken {
            None => Health::writable(),
            Some(broken) => Health::unwritable(describe(broken)).since(Some(broken.since)),
        };
        health.last_writable(last_write)
    }

    /// Marks the database unwritable after `error`, met on the database of
    /// `generation`, if it is an I/O error (redb has latched it).
    fn note_failure(&self, generation: u64, error: &RedbError) {
        if !error.needs_reopen() {
            return;
        }
        let mut slot = lock(&self.slot);
        if slot.generation != generation || slot.broken.is_some() {
            return;
        }
        slot.broken = Some(Broken {
            since: SystemTime::now(),
            cause: error.to_string(),
            attempts: 0,
            last_attempt: None,
        });
        drop(slot);
        // Its writes are in the log, which the reopen applies; a transaction
        // kept open would keep the database from closing.
        self.group.drop_carried();
        // The first reopen is due at once. A caller already reopening holds the
        // lock (and may be waiting for this caller's database to be released):
        // its own schedule stands.
        if let Ok(mut recovery) = self.recovery.try_lock() {
            recovery.next_attempt = Instant::now();
            recovery.pause = Duration::ZERO;
        }
        tracing::error!(
            error = %error,
            "the store's database failed a write; writes are refused until it is reopened"
        );
    }

    /// Reopens the database if it is unwritable, an attempt is due and nobody
    /// else is at it; whether it is writable afterwards.
    fn try_recover(&self) -> bool {
        let Ok(mut recovery) = self.recovery.try_lock() else {
            return false;
        };
        let since = match &lock(&self.slot).broken {
            None => return true,
            Some(broken) => broken.since,
        };
        if Instant::now() < recovery.next_attempt {
            return false;
        }
        let attempt = Instant::now();
        match self.reopen() {
            Ok(()) => {
                recovery.pause = Duration::ZERO;
                let down_ms = SystemTime::now()
                    .duration_since(since)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                tracing::warn!(
                    down_ms,
                    "the store's database was reopened and is writable again"
                );
                true
            }
            Err(error) => {
                let attempts = self.attempt_failed(&error);
                // The first few attempts, then every tenth: a disk that stays
                // full must not flood the log.
                if attempts <= 3 || attempts.is_multiple_of(10) {
                    tracing::warn!(error = %error, attempts, "reopening the store's database failed");
                }
                recovery.pause = if recovery.pause.is_zero() {
                    FIRST_PAUSE
                } else {
                    (recovery.pause * 2).min(MAX_PAUSE)
                }
                .max(attempt.elapsed() * 4);
                recovery.next_attempt = Instant::now() + recovery.pause;
                false
            }
        }
    }

    /// One attempt: close the database, open it again (applying what its
    /// write-ahead log holds), probe a durable write.
    fn reopen(&self) -> Result<(), RedbError> {
        // No group may log against the old database any more: one that
        // already holds the log finishes first. Its frames stay in the file
        // for the reopen to apply.
        if let Some(old) = lock(&self.slot).wal.take() {
            lock(&old).retire();
        }
        // A shared snapshot holds the old database: the close below waits for it.
        self.snapshot.commit_seen();
        let old = lock(&self.slot).db.take();
        if let Some(old) = old
            && let Err(still_used) = close(old)
        {
            let mut slot = lock(&self.slot);
            if slot.db.is_none() {
                slot.db = Some(still_used);
            }
            return Err(RedbError::Unwritable {
                detail: "the failed database was still in use and could not be closed".to_owned(),
                since: SystemTime::now(),
            });
        }
        let db = match &self.source {
            Source::File { path, .. } => super::open::open_existing_file(path)?,
            Source::Backend(backend) => super::open::open_backend(Reused(Arc::clone(backend)))?,
        };
        let floor = stored_token_floor(&db)?;
        self.token_floor.fetch_max(floor, Ordering::AcqRel);
        let probed = probe(&db);
        let wal = new_wal(&db, &self.source);
        let mut slot = lock(&self.slot);
        slot.wal = wal;
        slot.db = Some(Arc::new(db));
        slot.generation += 1;
        slot.floors = None;
        // Not one taken from the old database while this one opened.
        self.snapshot.commit_seen();
        drop(slot);
        // The new database applied the log: it holds what groups carried.
        // (A group takes the carry's lock before the slot's.)
        self.group.reopened();
        probed?;
        lock(&self.slot).broken = None;
        self.committed();
        Ok(())
    }

    /// Counts a failed attempt; how many failed so far.
    fn attempt_failed(&self, error: &RedbError) -> u32 {
        match &mut lock(&self.slot).broken {
            Some(broken) => {
                broken.attempts += 1;
                broken.last_attempt = Some(error.to_string());
                broken.attempts
            }
            None => 0,
        }
    }
}

impl WriteTarget for Owned {
    fn for_write(&self) -> Result<ForWrite, RedbError> {
        if lock(&self.slot).broken.is_some() {
            self.try_recover();
        }
        let slot = lock(&self.slot);
        match (&slot.db, &slot.broken) {
            (Some(db), None) => Ok(ForWrite {
                db: Arc::clone(db),
                generation: slot.generation,
                wal: slot.wal.clone(),
                floors: slot.floors,
            }),
            (_, broken) => Err(unwritable(broken.as_ref())),
        }
    }

    fn failed(&self, generation: u64, error: &RedbError) {
        // A commit that failed may still have landed.
        self.snapshot.commit_seen();
        lock(&self.slot).floors = None;
        self.note_failure(generation, error);
    }

    fn committed(&self) {
        self.snapshot.commit_seen();
        self.last_commit
            .store(unix_millis(SystemTime::now()), Ordering::Relaxed);
    }

    fn token_floor_raised(&self, floor: u64) {
        self.token_floor.fetch_max(floor, Ordering::AcqRel);
    }

    fn holds(&self, generation: u64) -> bool {
        let slot = lock(&self.slot);
        slot.generation == generation && slot.broken.is_none() && slot.db.is_some()
    }

    fn floors_committed(&self, generation: u64, floors: Option<Floors>) {
        let mut slot = lock(&self.slot);
        // Only for the database open now, and not once it is broken.
        if slot.generation == generation && slot.broken.is_none() {
            slot.floors = floors;
        }
    }
}

/// The token floor as the last commit of `db` stored it.
fn stored_token_floor(db: &Database) -> Result<u64, redb::Error> {
    Ok(token_floor_in(&db.begin_read()?.open_table(META)?)?)
}

/// A store closed while writable leaves no log: its last frames are made
/// durable in redb (a checkpoint) and the file is removed. If that fails, or
/// the store is unwritable, the log stays for the next open to apply.
impl Drop for Owned {
    fn drop(&mut self) {
        // The database closes with the last read of it; none is left now.
        self.snapshot.commit_seen();
        let slot = self.slot.get_mut().unwrap_or_else(PoisonError::into_inner);
        let (Some(db), Some(wal), None) = (&slot.db, &slot.wal, &slot.broken) else {
            return;
        };
        let mut wal = lock(wal);
        if wal.is_retired() {
            return;
        }
        if wal.has_undurable_frames() {
            // A transaction carried from the last group holds writes of
            // frames the checkpoint records: it is the one committed.
            let closing = self.group.closing_transaction(db, slot.generation);
            if closing
                .and_then(|txn| checkpoint(txn, wal.applied()))
                .is_err()
            {
                return;
            }
        }
        if let Err(error) = wal.remove() {
            tracing::warn!(%error, "removing the store's write-ahead log at close failed");
        }
    }
}

/// A durable commit that records `applied` as the last log frame the
/// database holds (every earlier non-durable commit becomes durable with it).
fn checkpoint(mut txn: redb::WriteTransaction, applied: u64) -> Result<(), RedbError> {
    txn.set_durability(Durability::Immediate)?;
    wal::record_applied(&txn, applied)?;
    txn.commit()?;
    Ok(())
}

/// The write-ahead log for `db` opened from `source`: a file's only (a
/// backend's store commits durably in redb). A log that cannot be created
/// leaves the store committing durably in redb, which is slower, not less safe.
fn new_wal(db: &Database, source: &Source) -> Option<Arc<Mutex<Wal>>> {
    let Source::File {
        path,
        write_ahead_log: true,
    } = source
    else {
        return None;
    };
    let made = wal::applied_in(db)
        .map_err(|e| e.to_string())
        .and_then(|applied| Wal::create(path, applied).map_err(|e| e.to_string()));
    match made {
        Ok(wal) => Some(Arc::new(Mutex::new(wal))),
        Err(error) => {
            tracing::warn!(
                %error,
                path = %path.display(),
                "no write-ahead log for the store: every write commits durably in redb"
            );
            None
        }
    }
}

fn describe(broken: &Broken) -> String {
    let mut text = format!("the database failed a write ({})", broken.cause);
    match &broken.last_attempt {
        None => text.push_str("; it will be reopened"),
        Some(last) => text.push_str(&format!(
            "; {} reopen attempt(s) failed, the last with: {last}",
            broken.attempts
        )),
    }
    text
}

fn unwritable(broken: Option<&Broken>) -> RedbError {
    match broken {
        Some(broken) => RedbError::Unwritable {
            detail: describe(broken),
            since: broken.since,
        },
        // Only between taking the old database out and putting the new one in.
        None => RedbError::Unwritable {
            detail: "the database is being reopened".to_owned(),
            since: SystemTime::now(),
        },
    }
}

/// Closes `db` once nothing else holds it (a read holds it only to begin its
/// transaction; a group commit, for its group), or gives it back after
/// [`CLOSE_WAIT`].
fn close(mut db: Arc<Database>) -> Result<(), Arc<Database>> {
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        match Arc::try_unwrap(db) {
            // An error closing a database that failed is expected: its file is
            // released either way, and the reopen says whether it is usable.
            Ok(db) => {
                let _ = db.close();
                return Ok(());
            }
            Err(shared) if Instant::now() < deadline => {
                db = shared;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(shared) => return Err(shared),
        }
    }
}

/// A durable write: proves that the reopened database can commit.
fn probe(db: &Database) -> Result<(), RedbError> {
    let mut txn = db.begin_write()?;
    txn.set_durability(Durability::Immediate)?;
    {
        let mut meta = txn.open_table(META)?;
        let now = unix_millis(SystemTime::now()).to_le_bytes();
        meta.insert(META_LAST_RECOVERY, now.as_slice())?;
    }
    txn.commit()?;
    Ok(())
}

/// A storage backend shared by the successive databases opened on it.
#[derive(Debug)]
pub(crate) struct Reused(pub(crate) Arc<dyn StorageBackend>);

impl StorageBackend for Reused {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.0.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.0.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        self.0.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        self.0.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
        self.0.close()
    }

    fn try_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.0.try_lock_range(start, end)
    }

    fn try_lock_shared_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.0.try_lock_shared_range(start, end)
    }

    fn lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<(), redb::BackendError> {
        self.0.lock_range(start, end)
    }

    fn lock_shared_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<(), redb::BackendError> {
        self.0.lock_shared_range(start, end)
    }

    fn unlock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<(), redb::BackendError> {
        self.0.unlock_range(start, end)
    }

    fn query_lock_range(
        &self,
        start: std::ops::Bound<u64>,
        end: std::ops::Bound<u64>,
    ) -> Result<bool, redb::BackendError> {
        self.0.query_lock_range(start, end)
    }
}

#[cfg(test)]
mod tests {
    //! Recovery over a [`FaultyBackend`]: redb latches the injected I/O error
    //! exactly as it latches a real one, and the reopen opens the same backend.

    use idemkit_core::machine::Policy;
    use idemkit_core::record::{EffectKind, StateName, StoredResponse};
    use idemkit_core::{Fingerprint, IdempotencyKey, Scope};

    use super::*;
    use crate::adapters::redb::{FaultSwitch, FaultyBackend};
    use crate::store::{Claim, ClaimError, Store};

    fn store(switch: &FaultSwitch) -> Store {
        let backend = FaultyBackend::new(redb::backends::InMemoryBackend::new(), switch.clone());
        Store::from(crate::adapters::redb::RedbAdapter::with_backend(backend).unwrap())
    }

    fn claim(store: &Store, key: &str) -> Result<Claim, ClaimError> {
        store.claim(
            &Scope::new("acme", "charge").unwrap(),
            &IdempotencyKey::new(key).unwrap(),
            Fingerprint::from_bytes([3; 32]),
            "w",
            &Policy::default().with_effect(EffectKind::External),
        )
    }

    fn execute(store: &Store, key: &str) -> crate::store::ExecutionGuard {
        match claim(store, key).unwrap() {
            Claim::Execute(guard) => guard,
            other => panic!("expected Execute, got {other:?}"),
        }
    }

    #[test]
    fn one_failed_sync_is_followed_by_a_reopen_and_writes_succeed_again() {
        let switch = FaultSwitch::default();
        let store = store(&switch);
        execute(&store, "before")
            .complete(StoredResponse::new(201, b"kept".to_vec()))
            .unwrap();
        switch.fail_sync_after(0);
        let failed = claim(&store, "during");
        assert!(failed.is_err(), "{failed:?}");
        assert_eq!(switch.injected(), 1);
        // The next write reopens (the first attempt is due at once) and succeeds.
        let guard = execute(&store, "after");
        guard
            .complete(StoredResponse::new(201, b"new".to_vec()))
            .unwrap();
        assert!(store.health().is_writable());
        // What was acknowledged before the fault is still there.
        let before = store
            .get(
                &Scope::new("acme", "charge").unwrap(),
                &IdempotencyKey::new("before").unwrap(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(before.state.name(), StateName::Completed);
        assert!(store.verify().unwrap().problems.is_empty());
    }

    #[test]
    fn while_the_disk_keeps_failing_writes_are_refused_as_unavailable_and_health_says_why() {
        let switch = FaultSwitch::default();
        let store = store(&switch);
        let mut held = execute(&store, "held");
        switch.set_sticky(true);
        switch.fail_sync_after(0);
        assert!(claim(&store, "k1").is_err());
        let health = store.health();
        let reason = health
            .unwritable
            .clone()
            .expect("unwritable while the disk fails");
        assert!(reason.contains("failed a write"), "{reason}");
        assert!(health.since.is_some());
        // Refused as unavailable (a 503 with Retry-After), not as a plain failure.
        match claim(&store, "k2") {
            Err(ClaimError::Storage(e)) => assert!(e.is_transient(), "{e}"),
            other => panic!("expected a transient storage error, got {other:?}"),
        }
        // The guard's completion fails too, and keeps its lease.
        assert!(
            held.try_complete(&StoredResponse::new(201, b"x".to_vec()))
                .is_err(),
            "a completion succeeded on a failing disk"
        );
        // The cause goes away: within the backoff's bound, writes succeed again.
        switch.disarm();
        let deadline = Instant::now() + MAX_PAUSE * 3;
        while !store.health().is_writable() {
            assert!(
                Instant::now() < deadline,
                "still unwritable: {:?}",
                store.health()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        held.complete(StoredResponse::new(201, b"x".to_vec()))
            .unwrap();
        execute(&store, "k3").abandon();
        assert!(store.verify().unwrap().problems.is_empty());
    }

    #[test]
    fn a_completion_whose_failed_sync_still_landed_is_a_success_when_tried_again() {
        let switch = FaultSwitch::default();
        let store = store(&switch);
        let mut guard = execute(&store, "k");
        let response = StoredResponse::new(201, b"booked".to_vec());
        // The memory backend keeps what was written before the sync failed, as a
        // disk may: the commit is there although the worker was told it failed.
        switch.fail_sync_after(0);
        assert!(guard.try_complete(&response).is_err());
        guard.try_complete(&response).unwrap();
        let record = store
            .get(
                &Scope::new("acme", "charge").unwrap(),
                &IdempotencyKey::new("k").unwrap(),
            )
            .unwrap()
            .unwrap();
        assert_eq!(record.state.name(), StateName::Completed);
        // Another response under the same token is still refused.
        let mut other = execute(&store, "k2");
        other.try_complete(&response).unwrap();
        assert!(
            other
                .try_complete(&StoredResponse::new(500, b"other".to_vec()))
                .is_err()
        );
    }

    #[test]
    fn a_store_dropped_while_unwritable_releases_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let switch = FaultSwitch::default();
        {
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .unwrap();
            let backend = FaultyBackend::new(
                redb::backends::FileBackend::new(file).unwrap(),
                switch.clone(),
            );
            let store =
                Store::from(crate::adapters::redb::RedbAdapter::with_backend(backend).unwrap());
            execute(&store, "a").abandon();
            switch.set_sticky(true);
            switch.fail_sync_after(0);
            assert!(claim(&store, "b").is_err());
            assert!(!store.health().is_writable());
        }
        // No thread kept it open.
        let store = crate::open(&path).unwrap();
        assert!(store.verify().unwrap().problems.is_empty());
    }
}
