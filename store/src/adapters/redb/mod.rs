//! The redb adapter: the embedded default, one file (or memory) per store.
//!
//! - **Reads** ([`Adapter::get`], [`Adapter::scan`]) are redb read transactions:
//!   snapshots of the last commit, taken without waiting for the writer. On a
//!   database kept open, the record reads between two commits share one
//!   (`snapshot.rs`).
//! - **Conditional writes** ([`Adapter::insert`], `update`, `delete`,
//!   `write_all`) check their condition (no entry / the version read / the
//!   token floor) inside redb's single write transaction and write only if it
//!   holds. Concurrent writes share one transaction and one fsync (group
//!   commit, `group_commit.rs`); a refused condition writes nothing and answers
//!   `None` without failing anything else of its group.
//! - **Durability**: a write is answered only after it is durable. On a file
//!   this process keeps open, a group's writes go first to the store's
//!   write-ahead log, `<file>.wal` (one frame, one `fdatasync` of bytes the
//!   log has already allocated). redb commits them without a sync only once
//!   for up to 16 groups: a group's transaction is carried on into the next
//!   group's, and reads find its records in memory until then
//!   (`group_commit.rs`). Every so often, and at close, a durable redb commit
//!   takes them all and the log starts again (`wal.rs`). Every open of the file applies what the
//!   log holds first. Elsewhere (a file shared between processes, memory, a
//!   custom backend, or with the log turned off: [`FileOptions`]) every
//!   transaction commits with `Durability::Immediate`.
//! - **Recovery**: redb refuses every later operation of a database after an
//!   I/O error (a full disk, a file-size limit); the adapter then closes and
//!   reopens it on the next operation or health check, and proves it writable
//!   with a probe write before it lets writes through (`recover.rs`). Writes
//!   meanwhile fail fast as [`RedbError::Unwritable`], a transient failure.
//! - **Creation**: a new file is made whole under a temporary name and then
//!   linked at its path (`create.rs`), so a process killed while creating it
//!   leaves either no file or a whole store, never one redb refuses.
//!
//! | file | what |
//! |---|---|
//! | `tables.rs` | the tables (records + three indexes + meta), the value layout, the format version |
//! | `create.rs` | a new file made whole before it gets its name; what a half-made one is |
//! | `open.rs` | opening a file or backend: the format check and upgrade, lock retries, panics turned into errors |
//! | `db.rs` | a database for the store's life or per transaction (shared files) |
//! | `group_commit.rs` | group commit: concurrent writes share one durable transaction (leader/follower queue), [`CommitStats`] |
//! | `wal.rs` | the write-ahead log of a file kept open: frames, checkpoints, replay at open |
//! | `recover.rs` | a database kept open, and its reopening after an I/O error |
//! | `snapshot.rs` | the records table of the last commit, shared by the reads until the next |
//! | `users.rs` | the shared-use lock beside a file opened per transaction |
//! | `records.rs` | reading and writing records with their index entries |
//! | `error.rs` | [`OpenError`], [`RedbError`] |
//! | `fault.rs` | `FaultyBackend`: I/O failure injection for tests (feature `testing`) |
//!
//! ## Sharing a file between processes
//!
//! [`RedbAdapter::open`] keeps the file open and locked (redb's exclusive
//! writer) for the life of the adapter: the fastest choice for one service
//! process. [`RedbAdapter::open_shared`] opens the file around each transaction
//! and retries redb's lock with jittered backoff ([`LockRetry`]), so several
//! processes (the `idemkit` CLI) take turns.

pub(crate) mod create;
mod db;
mod error;
#[cfg(any(test, feature = "testing"))]
mod fault;
mod group_commit;
mod open;
mod records;
mod recover;
mod snapshot;
mod tables;
mod users;
mod wal;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use idemkit_core::RecordId;
use idemkit_core::record::{Record, RecordState};
use redb::{ReadableTable, ReadableTableMetadata};

use error::guarded;
pub use error::{OpenError, RedbError};
#[cfg(any(test, feature = "testing"))]
pub use fault::{FaultSwitch, FaultyBackend};
pub use group_commit::CommitStats;
pub use open::LockRetry;
pub use tables::FORMAT_VERSION;

use super::{
    Adapter, AdapterError, Cursor, Health, Read, Scan, ScanBy, ScanPage, Scanned, Stored, Version,
    Write, first_version, next_version,
};
use db::Handle;
use records::{Encoded, Floors, IndexEntries, Tables, decode, load_from, token_floor_in};
use tables::{GC_DUE, LEASE_EXPIRY, META, RECORDS, UNKNOWN};

/// Records in a redb database; see the module documentation.
#[derive(Debug)]
pub struct RedbAdapter {
    handle: Handle,
    /// The file, when there is one.
    path: Option<PathBuf>,
    /// Transient failures armed by a test ([`RedbAdapter::with_faulty_backend`]).
    #[cfg(any(test, feature = "testing"))]
    faults: Option<FaultSwitch>,
}

impl RedbAdapter {
    /// Opens the database in `path`, creating the file if it does not exist,
    /// and keeps it open (and locked against other processes) until dropped.
    ///
    /// A file that is not an idemkit database, has an unknown format version, or
    /// is damaged gives an [`OpenError`], never a panic: the open runs redb's
    /// integrity check (every page's checksum), which reads the whole file once.
    /// A format-1 file is upgraded to format 2 (see [`FORMAT_VERSION`]).
    ///
    /// Writes are made durable through the store's write-ahead log,
    /// `<file>.wal`, unless the environment variable `IDEMKIT_WAL` is `off`
    /// (see [`FileOptions`]). While the process runs, and after a crash until
    /// the next open, the store is the file *and* its log: copy both, or stop
    /// the process first (a clean close leaves no log).
    pub fn open(path: impl AsRef<Path>) -> Result<RedbAdapter, OpenError> {
        RedbAdapter::open_with(path, FileOptions::from_env())
    }

    /// [`RedbAdapter::open`] with explicit [`FileOptions`] (the environment is
    /// not read).
    ///
    /// ```
    /// use idemkit::adapters::redb::{FileOptions, RedbAdapter};
    /// # let dir = tempfile::tempdir()?;
    /// // Every write committed durably in the redb file itself, no `.wal` beside it.
    /// let adapter = RedbAdapter::open_with(
    ///     dir.path().join("orders.redb"),
    ///     FileOptions::default().write_ahead_log(false),
    /// )?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_with(
        path: impl AsRef<Path>,
        options: FileOptions,
    ) -> Result<RedbAdapter, OpenError> {
        let path = path.as_ref();
        Ok(RedbAdapter::from_handle(
            Handle::open_file(path, options)?,
            Some(path.to_owned()),
        ))
    }

    /// Like [`RedbAdapter::open`], but the file is opened for each transaction and
    /// closed right after, so several processes can use it in turn (the `idemkit`
    /// CLI does this). While another process holds the file, each operation
    /// retries per `retry` and then fails with [`OpenError::Busy`].
    pub fn open_shared(path: impl AsRef<Path>, retry: LockRetry) -> Result<RedbAdapter, OpenError> {
        let path = path.as_ref();
        // Check (or create, or upgrade) the file once now, with redb's full
        // integrity check, so a bad file is reported here; the per-transaction
        // opens trust it.
        drop(open::open_file_with_retry(
            path,
            retry,
            open::Integrity::Check,
        )?);
        Ok(RedbAdapter::from_handle(
            Handle::PerTransaction {
                path: path.to_owned(),
                retry: std::sync::Mutex::new(retry),
                shared_use: users::SharedUse::announce(path),
            },
            Some(path.to_owned()),
        ))
    }

    /// A database in memory (redb's `InMemoryBackend`): for tests and caches.
    pub fn in_memory() -> Result<RedbAdapter, OpenError> {
        RedbAdapter::with_backend(redb::backends::InMemoryBackend::new())
    }

    /// A database on any redb [`redb::StorageBackend`] (for example a
    /// `FaultyBackend`, feature `testing`).
    pub fn with_backend(backend: impl redb::StorageBackend) -> Result<RedbAdapter, OpenError> {
        Ok(RedbAdapter::from_handle(
            Handle::open_backend(backend)?,
            None,
        ))
    }

    /// Like [`RedbAdapter::with_backend`] over a [`FaultyBackend`], and the
    /// adapter also honours [`FaultSwitch::fail_next_transactions`]: transient
    /// failures of whole write transactions. Feature `testing`.
    #[cfg(any(test, feature = "testing"))]
    pub fn with_faulty_backend<B: redb::StorageBackend>(
        backend: FaultyBackend<B>,
    ) -> Result<RedbAdapter, OpenError> {
        let switch = backend.switch().clone();
        let mut adapter = RedbAdapter::from_handle(Handle::open_backend(backend)?, None);
        adapter.faults = Some(switch);
        Ok(adapter)
    }

    fn from_handle(handle: Handle, path: Option<PathBuf>) -> RedbAdapter {
        RedbAdapter {
            handle,
            path,
            #[cfg(any(test, feature = "testing"))]
            faults: None,
        }
    }

    /// Another adapter on the same database (an open one shares its handle and
    /// write queue), whose lock retry budget is `budget` for a shared file.
    #[must_use]
    pub fn with_lock_budget(&self, budget: std::time::Duration) -> RedbAdapter {
        let handle = self.handle.share();
        handle.set_lock_budget(budget);
        RedbAdapter {
            handle,
            path: self.path.clone(),
            #[cfg(any(test, feature = "testing"))]
            faults: self.faults.clone(),
        }
    }

    /// Changes how long a shared file ([`RedbAdapter::open_shared`]) waits for
    /// its lock. No effect on a database kept open.
    pub fn set_lock_retry(&self, retry: LockRetry) {
        self.handle.set_lock_retry(retry);
    }

    /// How durable writes were grouped into transactions so far, and where
    /// the groups' time went (zeros unless the database is kept open). See
    /// [`CommitStats`].
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    ///
    /// use idemkit::adapters::redb::RedbAdapter;
    /// use idemkit::core::machine::Policy;
    /// use idemkit::core::record::StoredResponse;
    /// use idemkit::core::{Fingerprint, IdempotencyKey, Scope};
    /// use idemkit::store::{Claim, Store};
    ///
    /// let adapter = Arc::new(RedbAdapter::in_memory()?);
    /// let store = Store::new(adapter.clone());
    /// let (scope, key) = (Scope::new("acme", "charge")?, IdempotencyKey::new("k-1")?);
    /// let fingerprint = Fingerprint::from_bytes([7; 32]);
    /// if let Claim::Execute(guard) = store.claim(&scope, &key, fingerprint, "worker", &Policy::default())? {
    ///     guard.complete(StoredResponse::new(201, b"{}".to_vec()))?;
    /// }
    ///
    /// let stats = adapter.commit_stats();
    /// assert_eq!(stats.commits, 2); // the claim and its completion
    /// // What one group cost its leader, step by step.
    /// let groups = u32::try_from(stats.transactions)?;
    /// println!(
    ///     "{} writes a group; per group: running {:?}, committing {:?} (logging {:?}), answering {:?}",
    ///     stats.operations / stats.transactions,
    ///     stats.running / groups,
    ///     stats.committing / groups,
    ///     stats.logging / groups,
    ///     stats.answering / groups,
    /// );
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn commit_stats(&self) -> CommitStats {
        self.handle.commit_stats()
    }

    /// The database file, if there is one.
    #[must_use]
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref().or(self.handle.path())
    }

    /// [`Adapter::get`] from the snapshot the reads since the last commit
    /// share (`snapshot.rs`), on a database held open; `None`: the read takes
    /// a transaction of its own.
    fn read_shared(&self, id: &RecordId) -> Option<Result<Read, AdapterError>> {
        let Handle::Open(owned) = &self.handle else {
            return None;
        };
        // A record a carried group wrote is not in redb's snapshots yet
        // (`group_commit.rs`); asked before the snapshot is taken.
        if let Some(value) = owned.group.unseen_record(id.as_bytes()) {
            let read = value
                .map(|value| decode(id.as_bytes(), &value))
                .transpose()
                .map(|stored| Read {
                    stored,
                    token_floor: owned.token_floor(),
                    now: None,
                });
            return Some(read.map_err(|e| AdapterError::from(RedbError::from(e))));
        }
        let read = owned.records().and_then(|snapshot| {
            // Taken after the snapshot began: at least the floor it holds.
            let token_floor = owned.token_floor();
            let stored = guarded(|| load_from(&snapshot.records, id.as_bytes()))?;
            Ok(Read {
                stored,
                token_floor,
                now: None,
            })
        });
        Some(read.map_err(AdapterError::from))
    }

    /// Makes every acknowledged write visible to the read transactions begun
    /// after this (a transaction carried between groups is committed).
    fn make_visible(&self) -> Result<(), RedbError> {
        match &self.handle {
            Handle::Open(owned) => owned.group.make_visible(&**owned),
            Handle::PerTransaction { .. } => Ok(()),
        }
    }

    /// A transient failure armed by a test, if the transaction starting now must fail.
    #[cfg(any(test, feature = "testing"))]
    fn injected_failure(&self) -> Result<(), RedbError> {
        match &self.faults {
            Some(switch) if switch.take_transient_failure() => {
                Err(RedbError::Redb(redb::Error::from(std::io::Error::other(
                    "idemkit fault injection: transient transaction failure",
                ))))
            }
            _ => Ok(()),
        }
    }

    /// Without the `testing` feature nothing can arm a failure.
    #[cfg(not(any(test, feature = "testing")))]
    #[inline(always)]
    #[allow(clippy::unused_self, reason = "the same call as with the feature")]
    fn injected_failure(&self) -> Result<(), RedbError> {
        Ok(())
    }

    /// Checks that every record and id decodes and that the three indexes hold
    /// exactly the entries the records imply: one line per problem, empty when
    /// the database is consistent. Used after crashes and I/O faults.
    pub fn verify(&self) -> Result<(u64, Vec<String>), RedbError> {
        self.make_visible()?;
        self.handle.read(|txn| {
            let records = txn.open_table(RECORDS)?;
            let mut checked = 0;
            let mut problems = Vec::new();
            let mut expected_gc = BTreeSet::new();
            let mut expected_lease = BTreeSet::new();
            let mut expected_unknown = BTreeMap::new();
            for entry in records.iter()? {
                let (id, value) = entry?;
                let id = id.value().to_vec();
                checked += 1;
                if let Err(e) = RecordId::decode(&id) {
                    problems.push(format!("record id does not decode: {e}"));
                }
                let record = match decode(&id, value.value()) {
                    Ok(stored) => stored.record,
                    Err(e) => {
                        problems.push(e.to_string());
                        continue;
                    }
                };
                if let Some(due) = record.gc_due_at() {
                    expected_gc.insert((due.as_millis(), id.clone()));
                }
                if let Some(at) = record.lease_expires_at() {
                    expected_lease.insert((at.as_millis(), id.clone()));
                }
                if let RecordState::Unknown { since, .. } = &record.state {
                    expected_unknown.insert(id.clone(), since.as_millis());
                }
            }
            let timed = |table: redb::TableDefinition<(u64, &[u8]), ()>| -> Result<BTreeSet<(u64, Vec<u8>)>, RedbError> {
                let table = txn.open_table(table)?;
                let mut found = BTreeSet::new();
                for entry in table.iter()? {
                    let (key, ()) = entry.map(|(k, _)| (k, ()))?;
                    let (at, id) = key.value();
                    found.insert((at, id.to_vec()));
                }
                Ok(found)
            };
            compare("gc_due", &expected_gc, &timed(GC_DUE)?, &mut problems);
            compare(
                "lease_expiry",
                &expected_lease,
                &timed(LEASE_EXPIRY)?,
                &mut problems,
            );
            let mut found_unknown = BTreeMap::new();
            for entry in txn.open_table(UNKNOWN)?.iter()? {
                let (id, since) = entry?;
                found_unknown.insert(id.value().to_vec(), since.value());
            }
            if expected_unknown != found_unknown {
                problems.push(format!(
                    "unknown index holds {} entries, records imply {}",
                    found_unknown.len(),
                    expected_unknown.len()
                ));
            }
            // Sizes too, in case a table's own metadata disagrees with its entries.
            let n = records.len()?;
            if n != checked {
                problems.push(format!(
                    "records table says {n} entries, iteration found {checked}"
                ));
            }
            Ok((checked, problems))
        })
    }

    /// Applies `writes` in one write transaction (possibly shared with other
    /// callers': group commit), each checked and applied or refused on its own.
    /// `local`, if given, runs in the same transaction once every write of
    /// `writes` applied (not at all if one was refused); its failure aborts
    /// the transaction.
    fn write_in_one_transaction(
        &self,
        mut writes: Vec<Prepared>,
        local: Option<LocalWrites>,
    ) -> Result<Vec<Option<Version>>, RedbError> {
        self.injected_failure()?;
        self.handle.write_if_changed(move |in_txn| {
            let (tables, floors) = in_txn.tables()?;
            let mut answers = Vec::with_capacity(writes.len());
            for write in &mut writes {
                answers.push(apply(tables, floors, write)?);
            }
            let all_applied = answers.iter().all(Option::is_some);
            if let Some(local) = &local
                && all_applied
            {
                // A poisoned lock: the caller's closure panicked in an earlier
                // run, whose transaction was aborted; it is the caller's to run again.
                let mut local = local.lock().unwrap_or_else(PoisonError::into_inner);
                (*local)(in_txn.txn())?;
                return Ok((answers, true));
            }
            let wrote = answers.iter().any(Option::is_some);
            Ok((answers, wrote))
        })
    }

    /// The conditional update of `read` to `next`, with `local` in its
    /// transaction if given.
    fn update_if(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
        local: Option<LocalWrites>,
    ) -> Result<Option<Version>, RedbError> {
        let answers =
            self.write_in_one_transaction(vec![Prepared::update(id, read, next)], local)?;
        Ok(answers.into_iter().next().flatten())
    }

    /// Replaces the record `read` with `next`, like [`Adapter::update`], and
    /// runs `local` (the caller's writes to its own tables) in the same
    /// transaction, so both commit with one fsync or neither does: `None` if
    /// the version moved (then `local` did not run), [`RedbError::LocalWrites`]
    /// if `local` failed (then nothing was written). `local` may run more than
    /// once (group commit repeats a group whose transaction another caller's
    /// failure aborted); only the run of the transaction that committed counts.
    pub fn update_with(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
        local: &LocalWrites,
    ) -> Result<Option<Version>, RedbError> {
        self.update_if(id, read, next, Some(Arc::clone(local)))
    }

    /// Runs `local` (the caller's writes to its own tables) in a durable write
    /// transaction of this database, group-committed with the store's own
    /// writes. [`RedbError::LocalWrites`] if it failed (nothing written).
    pub fn write_local(&self, local: &LocalWrites) -> Result<(), RedbError> {
        self.write_in_one_transaction(Vec::new(), Some(Arc::clone(local)))
            .map(drop)
    }

    /// Runs `f` on a read transaction of this database: a snapshot of the last
    /// commit, which holds every write acknowledged before this call, for the
    /// caller's own tables (the store's are `idemkit.*`).
    pub fn read_local<T>(
        &self,
        f: impl FnOnce(&redb::ReadTransaction) -> T,
    ) -> Result<T, RedbError> {
        self.make_visible()?;
        self.handle.read(|txn| Ok(f(txn)))
    }
}

/// How [`RedbAdapter::open_with`] keeps a store file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FileOptions {
    /// Make writes durable through the write-ahead log `<file>.wal` (the
    /// default): each group of writes is one small synced write to the log,
    /// and redb's own durable commit (its header and the changed pages, at
    /// scattered offsets) happens only every few MiB of log and at close.
    /// `false`: every group of writes is a durable redb commit, and no file
    /// but the store's own is written (besides the `.lock` of shared use).
    pub write_ahead_log: bool,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            write_ahead_log: true,
        }
    }
}

impl FileOptions {
    /// With the write-ahead log on or off.
    #[must_use]
    pub fn write_ahead_log(mut self, on: bool) -> Self {
        self.write_ahead_log = on;
        self
    }

    /// The defaults, with the write-ahead log off when the environment
    /// variable `IDEMKIT_WAL` is `off` (what [`RedbAdapter::open`], and so
    /// [`crate::open`] and every `idemkit` command, use): an operator's
    /// switch that needs no change to the program. Any value but `on` or
    /// `off` leaves the log on, with a warning naming the value.
    pub fn from_env() -> Self {
        let on = log_wanted(std::env::var_os("IDEMKIT_WAL").as_deref());
        FileOptions::default().write_ahead_log(on)
    }
}

/// Whether the value of `IDEMKIT_WAL` (`None`: unset) asks for the log.
fn log_wanted(value: Option<&std::ffi::OsStr>) -> bool {
    match value.map(|value| value.to_str()) {
        None | Some(Some("on")) => true,
        Some(Some("off")) => false,
        Some(other) => {
            tracing::warn!(
                value = ?other.unwrap_or("(not UTF-8)"),
                "IDEMKIT_WAL is neither `on` nor `off`: the write-ahead log stays on"
            );
            true
        }
    }
}

/// The caller's writes to its own tables of a redb store's database, run inside
/// one of the store's write transactions ([`RedbAdapter::update_with`],
/// [`RedbAdapter::write_local`]). `Err(RedbError::LocalWrites)` (or any error)
/// aborts that transaction. Shared because group commit may run it again on
/// another caller's thread (see `group_commit.rs`).
pub type LocalWrites =
    Arc<Mutex<dyn FnMut(&redb::WriteTransaction) -> Result<(), RedbError> + Send>>;

/// A [`Write`] made ready before it joins a group: its record encoded and
/// the index entries of the records it replaces and writes derived, by the
/// caller (see [`Encoded`]). The condition is checked, and the version of a
/// new record chosen, in the transaction ([`apply`]).
enum Prepared {
    Insert {
        id: RecordId,
        new: Encoded,
        last_token: u64,
    },
    Update {
        id: RecordId,
        read: Version,
        old: IndexEntries,
        new: Encoded,
    },
    Delete {
        id: RecordId,
        read: Version,
        old: IndexEntries,
        last_token: u64,
    },
}

impl Prepared {
    fn insert(id: &RecordId, record: &Record) -> Self {
        Prepared::Insert {
            id: id.clone(),
            // The version is set in the transaction, above the version floor.
            new: Encoded::new(0, record),
            last_token: record.last_token.get(),
        }
    }

    /// The version is the one read, so the stored record is `read`'s: its
    /// index entries are derived from it without decoding it again.
    fn update(id: &RecordId, read: &Stored, next: &Record) -> Self {
        Prepared::Update {
            id: id.clone(),
            read: read.version,
            old: IndexEntries::of(&read.record),
            new: Encoded::new(next_version(read.version).0, next),
        }
    }

    fn delete(id: &RecordId, read: &Stored) -> Self {
        Prepared::Delete {
            id: id.clone(),
            read: read.version,
            old: IndexEntries::of(&read.record),
            last_token: read.record.last_token.get(),
        }
    }

    fn of(write: &Write) -> Self {
        match write {
            Write::Insert(id, record) => Prepared::insert(id, record),
            Write::Update(id, read, next) => Prepared::update(id, read, next),
            Write::Delete(id, read) => Prepared::delete(id, read),
        }
    }
}

/// One conditional write in `tables`; `floors` are raised by a delete (the
/// caller stores them once for the transaction).
fn apply(
    tables: &mut Tables<'_>,
    floors: &mut Floors,
    write: &mut Prepared,
) -> Result<Option<Version>, RedbError> {
    match write {
        Prepared::Insert {
            id,
            new,
            last_token,
        } => {
            if floors.token >= *last_token {
                return Ok(None);
            }
            let version = first_version(floors.version);
            new.set_version(version.0);
            let written = tables.put_if(id.as_bytes(), None, None, new)?;
            Ok(written.then_some(version))
        }
        Prepared::Update { id, read, old, new } => {
            let written = tables.put_if(id.as_bytes(), Some(read.0), Some(old), new)?;
            Ok(written.then(|| next_version(*read)))
        }
        Prepared::Delete {
            id,
            read,
            old,
            last_token,
        } => {
            if !tables.remove_if(id.as_bytes(), read.0, old)? {
                return Ok(None);
            }
            floors.token = floors.token.max(*last_token);
            floors.version = floors.version.max(read.0);
            Ok(Some(Version(0)))
        }
    }
}

impl Adapter for RedbAdapter {
    fn get(&self, id: &RecordId) -> Result<Read, AdapterError> {
        if let Some(read) = self.read_shared(id) {
            return read;
        }
        Ok(self.handle.read(|txn| {
            let records = txn.open_table(RECORDS)?;
            Ok::<_, RedbError>(Read {
                stored: load_from(&records, id.as_bytes())?,
                token_floor: token_floor_in(&txn.open_table(META)?)?,
                now: None,
            })
        })?)
    }

    fn insert(&self, id: &RecordId, record: &Record) -> Result<Option<Version>, AdapterError> {
        let answers = self.write_in_one_transaction(vec![Prepared::insert(id, record)], None)?;
        Ok(answers.into_iter().next().flatten())
    }

    fn update(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        Ok(self.update_if(id, read, next, None)?)
    }

    fn delete(&self, id: &RecordId, read: &Stored) -> Result<bool, AdapterError> {
        let answers = self.write_in_one_transaction(vec![Prepared::delete(id, read)], None)?;
        Ok(answers.into_iter().next().flatten().is_some())
    }

    fn scan(&self, scan: &Scan) -> Result<ScanPage, AdapterError> {
        self.make_visible()?;
        Ok(self.handle.read(|txn| scan_in(txn, scan))?)
    }

    /// A database kept open is locked against every other process (or is in
    /// this process's memory); one opened per transaction is shared.
    fn held_alone(&self) -> bool {
        self.handle.held_alone()
    }

    /// Unwritable after an I/O error until the database was reopened and a
    /// probe write succeeded; a reopen attempt is made first when one is due
    /// (see [`RedbAdapter`]'s recovery).
    fn health(&self) -> Health {
        self.handle.health()
    }

    /// The file's size, plus its write-ahead log's while there is one
    /// (`None` in memory or when the file cannot be read).
    fn bytes_on_disk(&self) -> Result<Option<u64>, AdapterError> {
        let size = |p: &Path| std::fs::metadata(p).ok().map(|m| m.len());
        Ok(self
            .path()
            .and_then(|p| Some(size(p)? + size(&wal::path_of(p)).unwrap_or(0))))
    }

    /// This database with `wait` as its lock retry budget (see
    /// [`RedbAdapter::with_lock_budget`]).
    fn with_lock_wait(&self, wait: std::time::Duration) -> Option<Arc<dyn Adapter>> {
        Some(Arc::new(self.with_lock_budget(wait)))
    }

    /// The records and the three indexes ([`RedbAdapter::verify`]).
    fn verify(&self) -> Option<Result<(u64, Vec<String>), AdapterError>> {
        Some(RedbAdapter::verify(self).map_err(AdapterError::from))
    }

    fn write_all(&self, writes: &[Write]) -> Result<Vec<Option<Version>>, AdapterError> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let prepared = writes.iter().map(Prepared::of).collect();
        Ok(self.write_in_one_transaction(prepared, None)?)
    }
}

/// One page of `scan`, read in `txn`: the indexes give the order, the records
/// table the records.
fn scan_in(txn: &redb::ReadTransaction, scan: &Scan) -> Result<ScanPage, RedbError> {
    let records = txn.open_table(RECORDS)?;
    let mut entries = Vec::new();
    let mut next = None;
    let mut push =
        |id: &[u8], cursor: Vec<u8>, entries: &mut Vec<Scanned>| -> Result<bool, RedbError> {
            if entries.len() == scan.limit {
                return Ok(false);
            }
            let Some(value) = records.get(id)? else {
                // An index entry without its record: `verify` reports it.
                return Ok(true);
            };
            entries.push(Scanned {
                id: id.to_vec(),
                stored: decode(id, value.value()).map_err(|e| e.to_string()),
            });
            next = Some(Cursor(cursor));
            Ok(true)
        };
    let after = scan.after.as_ref().map(|c| c.0.as_slice());
    match scan.by {
        ScanBy::All | ScanBy::Unknown => {
            let ids = if scan.by == ScanBy::All {
                ids_after(&records, after, scan.limit)?
            } else {
                ids_after(&txn.open_table(UNKNOWN)?, after, scan.limit)?
            };
            for id in ids {
                if !push(&id, id.clone(), &mut entries)? {
                    break;
                }
            }
        }
        ScanBy::GcDue(by) | ScanBy::LeaseExpired(by) => {
            let index = txn.open_table(if matches!(scan.by, ScanBy::GcDue(_)) {
                GC_DUE
            } else {
                LEASE_EXPIRY
            })?;
            let start = after.and_then(timed_cursor);
            let range = match &start {
                Some((at, id)) => index.range::<(u64, &[u8])>((
                    std::ops::Bound::Excluded((*at, id.as_slice())),
                    std::ops::Bound::Unbounded,
                ))?,
                None => index.range::<(u64, &[u8])>(..)?,
            };
            for entry in range {
                let (key, _) = entry?;
                let (at, id) = key.value();
                if at > by.as_millis() {
                    break;
                }
                let mut cursor = at.to_be_bytes().to_vec();
                cursor.extend_from_slice(id);
                if !push(id, cursor, &mut entries)? {
                    break;
                }
            }
        }
    }
    if entries.len() < scan.limit {
        next = None;
    }
    Ok(ScanPage { entries, next })
}

/// At most `limit` ids of an id-keyed table, in order, after `after`.
fn ids_after<V: redb::Value + 'static>(
    table: &impl ReadableTable<&'static [u8], V>,
    after: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Vec<u8>>, RedbError> {
    let range = match after {
        Some(after) => {
            table.range::<&[u8]>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))?
        }
        None => table.range::<&[u8]>(..)?,
    };
    Ok(range
        .take(limit)
        .map(|entry| entry.map(|(id, _)| id.value().to_vec()))
        .collect::<Result<_, _>>()?)
}

/// A cursor of a timed index: the instant (u64 BE) then the id.
fn timed_cursor(cursor: &[u8]) -> Option<(u64, Vec<u8>)> {
    let (at, id) = cursor.split_first_chunk::<8>()?;
    Some((u64::from_be_bytes(*at), id.to_vec()))
}

fn compare(
    name: &str,
    expected: &BTreeSet<(u64, Vec<u8>)>,
    found: &BTreeSet<(u64, Vec<u8>)>,
    problems: &mut Vec<String>,
) {
    for (at, id) in expected.difference(found) {
        problems.push(format!(
            "{name} index misses record {} at {at}",
            display_log_ref(id)
        ));
    }
    for (at, id) in found.difference(expected) {
        problems.push(format!(
            "{name} index has a stray entry for {} at {at}",
            display_log_ref(id)
        ));
    }
}

fn display_log_ref(id: &[u8]) -> String {
    RecordId::decode(id).map_or_else(
        |_| "(undecodable id)".to_owned(),
        |(scope, key)| scope.record_id(&key).log_ref().to_string(),
    )
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::log_wanted;

    #[test]
    fn only_off_turns_the_write_ahead_log_off() {
        assert!(log_wanted(None));
        assert!(log_wanted(Some(OsStr::new("on"))));
        assert!(!log_wanted(Some(OsStr::new("off"))));
        // A misspelling keeps the default (and is warned about).
        assert!(log_wanted(Some(OsStr::new("Off"))));
        assert!(log_wanted(Some(OsStr::new("0"))));
    }
}
