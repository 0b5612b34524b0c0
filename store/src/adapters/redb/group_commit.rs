//! Group commit: concurrent writes to one store share a durable redb transaction.
//!
//! Every conditional write of the adapter (an insert, update or delete the
//! engine decided, a GC batch or an import as one `write_all`) is a job that
//! must run under redb's single writer and be durable (`Durability::Immediate`,
//! an fsync) before its caller is answered.
//! With one transaction per operation, concurrent callers queue on redb's write
//! lock and the store does one fsync per operation. Here they queue on a small
//! in-process queue instead, and one of them commits a whole group at once.
//!
//! ## Leader / follower (LevelDB's write queue)
//!
//! A caller wraps its closure in a job and locks the queue:
//!
//! - **No leader active**: it becomes the leader and runs *its own* job at once,
//!   alone, on its own thread: no handoff, no waiting, so a single caller's
//!   latency is what it was (one transaction, one fsync).
//! - **A leader is active**: it appends its job and sleeps on its own slot until
//!   either its result arrives or it is told to lead.
//!
//! A leader takes up to [`MAX_BATCH`] jobs from the front of the queue (FIFO:
//! arrival order), runs each closure **in order in one write transaction** (each
//! decision therefore sees the writes of the ones before it, exactly as if they
//! had committed one after the other in that order), commits once, and only then
//! hands each caller its own result. While one group commits, the next one
//! gathers in the queue: the busier the store, the more operations share an fsync.
//!
//! **Handoff, not drain.** When its group is done the leader passes leadership
//! to the caller at the front of the queue (if any) and returns. It never keeps
//! committing other callers' groups, so a leader's own latency is bounded by one
//! group (it is never stuck working for others under sustained load), and the
//! queue is served strictly first come, first served. The price is one thread
//! wake-up per group, microseconds against an fsync. The handoff runs in a drop
//! guard, so even a leader that panicked passes leadership on. It comes after
//! the group's answers are handed out, not before: the next group then gathers
//! the callers just answered, and fewer, larger groups cost less per operation
//! (handing off first, the next leader finds only the few callers that queued
//! meanwhile: at 64 clients the groups shrink and throughput falls by a fifth).
//!
//! ## Failure isolation
//!
//! redb cannot undo part of a transaction (savepoints need a clean one), so a
//! closure that returns `Err` or panics poisons its whole group's transaction.
//! The leader then **aborts the transaction** (nothing of the group is written),
//! answers the failed caller with its own error (a panic becomes
//! [`RedbError::Corrupt`], as everywhere in this store), drops that job, and
//! **runs the rest again** in a new transaction, in the same order. Closures are
//! therefore `FnMut`: they may run more than once, and only the run whose
//! transaction committed is the one whose answer is delivered. The decisions are
//! pure functions of (stored records, request, `now`), so a re-run decides the
//! same unless the failed job's absence changes what the later ones see — which
//! is exactly the state that gets committed. A closure that wrote nothing
//! (Replay, InFlight, ...) simply commits with the others (or, if nobody in the
//! group wrote, the transaction is aborted and no fsync is spent).
//!
//! The adapter's jobs never fail that way on their own: each is a conditional
//! write given as data (`Write`, applied by `apply` in `mod.rs`), which answers
//! "refused" instead of failing when its condition does not hold (the version
//! moved, the key is taken, the token floor is too high): a refused write writes
//! nothing and leaves its group alone. The engine decided before the queue, on
//! a snapshot, so a refusal by the state machine (a stale token) never enters
//! it. What can still fail inside a group is storage itself.
//!
//! ## Durability
//!
//! A result is delivered only after `commit()` with `Durability::Immediate`
//! returned `Ok` for the transaction that holds its write, so nothing is
//! acknowledged before it is durable (invariant 2 of docs/architecture.md), no matter how many other
//! operations share the commit. If beginning or committing the shared
//! transaction fails, *every* caller of the group gets the error (a group of one
//! gets redb's error itself, a larger group [`RedbError::GroupCommit`] with
//! the shared cause): none of them was acknowledged. A crash at any point loses
//! only unacknowledged operations. Claims stay atomic because all
//! decisions of a group run one after the other under the single writer: two
//! claims of one key in one group see each other (the second sees the first's
//! lease), so there is still exactly one `Execute` (invariant 1).
//!
//! ## Carrying a transaction on
//!
//! On a store file with a write-ahead log (`wal.rs`), a group's writes are
//! durable once its log frame is synced; redb's commit only makes them visible
//! to redb's read transactions. That commit (without a sync) still costs about
//! a fifth of a group at 64 clients: the freed-page bookkeeping, the table
//! roots and the checksums of every page the group changed, and the next
//! group then copies those pages again. So a group whose frame was written
//! does not commit: its transaction is *carried on*, and the next group runs in
//! it. redb commits once per [`CARRY_GROUPS`] groups, at a checkpoint, when a
//! caller needs a snapshot that holds everything acknowledged
//! ([`GroupCommit::make_visible`]: scans, `verify`, reads of the caller's own
//! tables), and at close.
//!
//! Until then the carried records are kept in memory, by id, and a point read
//! of a record asks there first ([`GroupCommit::unseen_record`]), so a read
//! sees every acknowledged write as before. The map is emptied only after the
//! commit that holds its records was counted (`SnapshotCache`): a read that no
//! longer finds a record there takes a snapshot that has it. A bit per hash of
//! each carried id (`IdFilter`) lets a read of any other record (a replay,
//! mostly) skip the map's lock, which the leader takes to fill it.
//!
//! Each carried group's effects (its frame's payload) are kept as well. When a
//! later job fails and the transaction must be aborted, the next transaction
//! writes them again before anything else, so no decision is ever taken on a
//! state without them, and a checkpoint never records frames as applied that
//! the database lacks. When the database fails and is marked for reopening,
//! the carry is dropped (an open transaction would keep the database from
//! closing): the reopen applies the log, which holds every carried frame, and
//! only then are the in-memory records forgotten. A crash loses the open
//! transaction and nothing else: the log's replay at open applies its frames.
//!
//! Only a database this process keeps open ([`super::RedbAdapter::open`],
//! `in_memory`, `with_backend`) batches; a store shared between processes
//! (`open_shared`) and PostgreSQL keep one transaction per operation.

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redb::{Database, Durability, WriteTransaction};

use super::error::{RedbError, guarded};
use super::records::{Floors, InTxn};
use super::wal::{self, Effects, Wal};

/// The most operations one group transaction decides.
pub(crate) const MAX_BATCH: usize = 256;

/// The most groups one transaction holds before redb commits it (see
/// "Carrying a transaction on").
pub(crate) const CARRY_GROUPS: usize = 16;

/// Where a group's leader gets the database to write in, and what it tells
/// of how the group's transaction ended (`recover.rs`: an I/O error makes the
/// database be reopened).
pub(crate) trait WriteTarget: Sync {
    /// The database to begin this group's transaction in, its generation and
    /// its write-ahead log; an error fails the whole group (nothing written).
    fn for_write(&self) -> Result<ForWrite, RedbError>;
    /// Beginning, closing or committing the transaction on the database of
    /// `generation` failed with `error`.
    fn failed(&self, generation: u64, error: &RedbError);
    /// A transaction committed durably.
    fn committed(&self);
    /// A group's transaction on the database of `generation` committed and
    /// left `floors` (`None`: not known), told before the next group begins:
    /// its transaction may take them instead of reading them (see
    /// [`ForWrite::floors`]).
    fn floors_committed(&self, generation: u64, floors: Option<Floors>);
    /// The group's transaction writes `floor` as the token floor: told after
    /// the transaction closed and before it commits, so a read that sees the
    /// commit sees this floor or a higher one.
    fn token_floor_raised(&self, floor: u64);
    /// Whether the database of `generation` is the one open and writable: only
    /// then may a transaction on it be carried on to the next group.
    fn holds(&self, generation: u64) -> bool;
}

/// Where a group writes: what [`WriteTarget::for_write`] gives.
pub(crate) struct ForWrite {
    pub(crate) db: Arc<Database>,
    /// Counts the databases opened: a failure is reported with it.
    pub(crate) generation: u64,
    /// The database's write-ahead log (a file's: see `wal.rs`); without
    /// one, every group commits durably in redb.
    pub(crate) wal: Option<Arc<Mutex<Wal>>>,
    /// The floors the last commit on `db` left, when known exactly: the
    /// group's transaction then does not open the meta table to read them
    /// (about a twentieth of a claim + complete's instructions at one client).
    pub(crate) floors: Option<Floors>,
}

/// How a store's durable writes were grouped into transactions
/// ([`RedbAdapter::commit_stats`](super::RedbAdapter::commit_stats)). Counted since the
/// store was opened, over every clone of it.
///
/// Only a store that keeps its database open groups writes (see
/// [`RedbAdapter::open`](super::RedbAdapter::open)); a store opened with
/// [`RedbAdapter::open_shared`](super::RedbAdapter::open_shared) or over PostgreSQL reports
/// zeros.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Write operations submitted (claims, completions, releases, renewals,
    /// steps, resolutions, GC batches), whatever their outcome.
    pub operations: u64,
    /// Groups run, each in a write transaction: one begun for it (then
    /// committed, aborted because nobody in the group wrote anything, or
    /// aborted because an operation in the group failed), or the one the
    /// group before carried on.
    pub transactions: u64,
    /// Transactions committed durably (one fsync each). Fewer than the
    /// operations that wrote when concurrent writes were grouped.
    pub commits: u64,
    /// Of those, the ones made durable by a frame of the store's write-ahead
    /// log (an fsync of the log) rather than by redb's own sync.
    pub logged: u64,
    /// Of the logged ones, those whose transaction was carried on into the
    /// next group's instead of being committed in redb: redb commits once for
    /// up to 16 groups, and reads find the carried records in memory until
    /// then.
    pub carried: u64,
    /// Operation runs repeated because another operation in their group failed
    /// and the group's transaction was aborted.
    pub reruns: u64,
    /// The most operations taken into one group.
    pub largest_group: u64,
    /// Time spent by leaders beginning the groups' transactions, in all.
    ///
    /// With the four durations after it, this is where a group's time goes
    /// while its callers wait: divided by [`transactions`](Self::transactions),
    /// what one group costs at this load. A group's steps run one after the
    /// other on its leader's thread, so their sum per group bounds how many
    /// groups a second the store can commit.
    pub beginning: Duration,
    /// Time spent running the operations in the transactions (the B-tree
    /// writes) and closing the tables, in all.
    pub running: Duration,
    /// Time spent committing the transactions (or aborting the ones that
    /// wrote nothing), in all: the log frames and their syncs included.
    pub committing: Duration,
    /// Of [`committing`](Self::committing), the time spent writing and
    /// syncing the write-ahead log's frames.
    pub logging: Duration,
    /// Time spent handing the callers their answers (waking each), in all.
    pub answering: Duration,
}

#[derive(Debug, Default)]
struct Counters {
    operations: AtomicU64,
    transactions: AtomicU64,
    commits: AtomicU64,
    logged: AtomicU64,
    carried: AtomicU64,
    reruns: AtomicU64,
    largest_group: AtomicU64,
    /// Nanoseconds, as `CommitStats`' durations.
    beginning: AtomicU64,
    running: AtomicU64,
    committing: AtomicU64,
    logging: AtomicU64,
    answering: AtomicU64,
}

fn count(counter: &AtomicU64, by: usize) {
    counter.fetch_add(u64::try_from(by).unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// Adds the time since `since` to `counter` (nanoseconds) and returns now:
/// where the next step's time starts.
fn time(counter: &AtomicU64, since: Instant) -> Instant {
    let now = Instant::now();
    let spent = now.saturating_duration_since(since).as_nanos();
    counter.fetch_add(u64::try_from(spent).unwrap_or(u64::MAX), Ordering::Relaxed);
    now
}

fn nanos(counter: &AtomicU64) -> Duration {
    Duration::from_nanos(counter.load(Ordering::Relaxed))
}

/// The write queue of one open database.
#[derive(Default)]
pub(crate) struct GroupCommit {
    queue: Mutex<Queue>,
    counters: Counters,
    /// What the last group left uncommitted in redb, for the next group.
    carry: Mutex<Option<Carried>>,
    /// The records the carried groups wrote (id → stored value, `None`:
    /// deleted), for reads: redb's snapshots do not hold them yet.
    unseen: RwLock<HashMap<Vec<u8>, Option<Vec<u8>>>>,
    /// Whether `unseen` may hold anything: reads skip its lock otherwise.
    carrying: AtomicBool,
    /// Which ids `unseen` may hold: a replay of a record no carried group
    /// wrote skips the lock that every group's leader takes too.
    unseen_ids: IdFilter,
}

/// A bit per hash of an id, set for every id in [`GroupCommit::unseen`] (and,
/// rarely, for others sharing its bit), cleared when the map is emptied. A
/// group's leader sets bits; they are cleared by a leader or by a reopen,
/// while no group can write: never at once.
struct IdFilter {
    words: Box<[AtomicU64]>,
}

/// 2^16 bits (8 KiB): the carried groups of a store at 64 clients set about
/// 1,000 of them ([`CARRY_GROUPS`] groups of about 60 writes), so a replay
/// meets a set bit about once in 64.
const FILTER_BITS: u32 = 16;

impl Default for IdFilter {
    fn default() -> IdFilter {
        IdFilter {
            words: (0..(1 << FILTER_BITS) / 64)
                .map(|_| AtomicU64::new(0))
                .collect(),
        }
    }
}

impl IdFilter {
    /// The word and the bit of `id`.
    fn bit(id: &[u8]) -> (usize, u64) {
        // Ids of one store share long prefixes (tenant, operation): every
        // byte is mixed in, eight at a time.
        let mut hash = 0xcbf2_9ce4_8422_2325_u64 ^ id.len() as u64;
        for chunk in id.chunks(8) {
            let word = chunk
                .iter()
                .rev()
                .fold(0_u64, |word, &byte| word << 8 | u64::from(byte));
            hash = (hash.rotate_left(23) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
        let bit = (hash >> (64 - FILTER_BITS)) as usize;
        (bit / 64, 1 << (bit % 64))
    }

    fn insert(&self, id: &[u8]) {
        let (word, mask) = IdFilter::bit(id);
        if let Some(word) = self.words.get(word) {
            word.fetch_or(mask, Ordering::Release);
        }
    }

    /// Whether `id` may have been inserted since the last `clear`.
    fn may_hold(&self, id: &[u8]) -> bool {
        let (word, mask) = IdFilter::bit(id);
        self.words
            .get(word)
            .is_none_or(|word| word.load(Ordering::Acquire) & mask != 0)
    }

    fn clear(&self) {
        for word in &self.words {
            if word.load(Ordering::Relaxed) != 0 {
                word.store(0, Ordering::Release);
            }
        }
    }
}

/// Groups whose writes are durable in the log but not committed in redb.
struct Carried {
    /// The transaction that holds them, to carry on; `None` once it was
    /// aborted (a job of a later group failed): the next transaction writes
    /// `effects` again before anything else.
    txn: Option<WriteTransaction>,
    /// The database they were written on.
    generation: u64,
    /// Each group's writes, as its log frame holds them.
    effects: Vec<Effects>,
}

impl fmt::Debug for GroupCommit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GroupCommit")
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct Queue {
    /// Whether some caller is leading (running a group, or told to).
    leader: bool,
    /// Jobs waiting for a leader, in arrival order.
    waiting: VecDeque<Box<dyn Job>>,
}

/// A mutex whose holder panicked still guards valid data here (a queue, a slot):
/// every update is a single assignment or push/pop.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupCommit {
    /// Runs `f` in a durable write transaction of `target`'s database, possibly shared with
    /// other callers' closures, and returns its answer once that transaction is
    /// durable (or nothing was written). See the module documentation.
    pub(crate) fn write<F, T, E>(&self, target: &dyn WriteTarget, f: F) -> Result<T, E>
    where
        F: FnMut(&mut InTxn<'_>) -> Result<(T, bool), E> + Send + 'static,
        T: Send + 'static,
        E: From<RedbError> + Send + 'static,
    {
        count(&self.counters.operations, 1);
        self.submit(target, f, false)
    }

    /// Makes every write acknowledged so far visible to a read transaction
    /// begun after this returns: redb commits a carried transaction (see
    /// "Carrying a transaction on"). Point reads of records need not call this
    /// ([`GroupCommit::unseen_record`] answers them); scans and reads of other
    /// tables do.
    pub(crate) fn make_visible(&self, target: &dyn WriteTarget) -> Result<(), RedbError> {
        // A read made by a job of the group running (the caller's own writes
        // reading its tables) would wait for itself: it sees the last commit.
        if !self.carrying.load(Ordering::Acquire) || LEADING.with(Cell::get) {
            return Ok(());
        }
        self.submit(
            target,
            |_: &mut InTxn<'_>| Ok::<_, RedbError>(((), false)),
            true,
        )
    }

    /// A record a carried group wrote: `Some(None)` if it deleted it, `None`
    /// if no carried group wrote it (redb's snapshot then has it as it is).
    /// A read asks this before it takes its snapshot: a carried transaction
    /// that commits meanwhile is counted (`SnapshotCache`) before its records
    /// leave this map.
    pub(crate) fn unseen_record(&self, id: &[u8]) -> Option<Option<Vec<u8>>> {
        if !self.carrying.load(Ordering::Acquire) || !self.unseen_ids.may_hold(id) {
            return None;
        }
        self.unseen
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    /// Drops what the groups carried: the database of their transaction
    /// failed, and the reopen applies their log frames. Reads keep finding
    /// their records here until then ([`GroupCommit::reopened`]).
    pub(crate) fn drop_carried(&self) {
        drop(lock(&self.carry).take());
    }

    /// The database was reopened and has applied the log: what the groups
    /// carried is in it.
    pub(crate) fn reopened(&self) {
        drop(lock(&self.carry).take());
        self.seen();
    }

    /// The transaction to close the database of `generation` with: the
    /// carried one (or one that writes the carried groups again), else a new one.
    pub(crate) fn closing_transaction(
        &self,
        db: &Database,
        generation: u64,
    ) -> Result<WriteTransaction, RedbError> {
        match lock(&self.carry).take() {
            Some(Carried {
                txn: Some(txn),
                generation: g,
                ..
            }) if g == generation => Ok(txn),
            Some(Carried {
                txn: None,
                generation: g,
                effects,
            }) if g == generation => begin_with(db, &effects),
            _ => begin(db),
        }
    }

    /// The carried groups' records are in redb's snapshots now.
    fn seen(&self) {
        self.unseen
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // After the map: a read that still finds a bit finds no record and
        // takes a snapshot, which holds the commit.
        self.unseen_ids.clear();
        self.carrying.store(false, Ordering::Release);
    }

    /// `effects`' records, for reads until redb commits them.
    fn unseen_until_committed(&self, effects: &Effects) {
        let mut unseen = self.unseen.write().unwrap_or_else(PoisonError::into_inner);
        for (id, value) in effects.records() {
            self.unseen_ids.insert(id);
            unseen.insert(id.to_vec(), value.map(<[u8]>::to_vec));
        }
        drop(unseen);
        self.carrying.store(true, Ordering::Release);
    }

    fn submit<F, T, E>(&self, target: &dyn WriteTarget, f: F, visible: bool) -> Result<T, E>
    where
        F: FnMut(&mut InTxn<'_>) -> Result<(T, bool), E> + Send + 'static,
        T: Send + 'static,
        E: From<RedbError> + Send + 'static,
    {
        let slot = Arc::new(Slot {
            state: Mutex::new(SlotState::Queued),
            caller: std::thread::current(),
        });
        let job = Box::new(Pending {
            f,
            result: None,
            slot: Arc::clone(&slot),
            visible,
        });
        let mut group = {
            let mut queue = lock(&self.queue);
            if queue.leader {
                queue.waiting.push_back(job);
                None
            } else {
                // Uncontended: lead a group of one right here.
                queue.leader = true;
                Some(vec![job as Box<dyn Job>])
            }
        };
        loop {
            if let Some(jobs) = group.take() {
                self.lead(target, jobs);
            }
            match slot.wait() {
                Some(result) => return result,
                // Promoted: our job is at the front of the queue.
                None => group = Some(self.take_group()),
            }
        }
    }

    /// The counters so far.
    pub(crate) fn stats(&self) -> CommitStats {
        let c = &self.counters;
        CommitStats {
            operations: c.operations.load(Ordering::Relaxed),
            transactions: c.transactions.load(Ordering::Relaxed),
            commits: c.commits.load(Ordering::Relaxed),
            logged: c.logged.load(Ordering::Relaxed),
            carried: c.carried.load(Ordering::Relaxed),
            reruns: c.reruns.load(Ordering::Relaxed),
            largest_group: c.largest_group.load(Ordering::Relaxed),
            beginning: nanos(&c.beginning),
            running: nanos(&c.running),
            committing: nanos(&c.committing),
            logging: nanos(&c.logging),
            answering: nanos(&c.answering),
        }
    }

    /// How many jobs wait for a leader (for tests that arrange a group).
    #[cfg(test)]
    pub(crate) fn waiting(&self) -> usize {
        lock(&self.queue).waiting.len()
    }

    fn take_group(&self) -> Vec<Box<dyn Job>> {
        let mut queue = lock(&self.queue);
        let n = queue.waiting.len().min(MAX_BATCH);
        queue.waiting.drain(..n).collect()
    }

    /// Runs one group and passes leadership on.
    fn lead(&self, target: &dyn WriteTarget, mut jobs: Vec<Box<dyn Job>>) {
        let _handoff = Handoff(self);
        self.counters.largest_group.fetch_max(
            u64::try_from(jobs.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        // Closures and redb calls are each guarded; this only catches a bug in
        // the leader itself. Whatever is left in `jobs` then was not answered,
        // and dropping it answers those callers with an error (see `Pending`).
        let _leading = Leading::now();
        let _ = catch_unwind(AssertUnwindSafe(|| self.run_group(target, &mut jobs)));
    }

    /// Decides every job of the group in one transaction and answers each
    /// caller; a failed job is answered alone and the rest run again. What
    /// the group leaves uncommitted in redb waits for the next group.
    fn run_group(&self, target: &dyn WriteTarget, jobs: &mut Vec<Box<dyn Job>>) {
        let mut carry = lock(&self.carry).take();
        self.run_carrying(target, jobs, &mut carry);
        if let Some(left) = carry {
            let mut kept = lock(&self.carry);
            // Under the lock that a failure takes to drop a carry (see
            // `drop_carried`): a database marked broken keeps none.
            if target.holds(left.generation) {
                *kept = Some(left);
            }
        }
    }

    fn run_carrying(
        &self,
        target: &dyn WriteTarget,
        jobs: &mut Vec<Box<dyn Job>>,
        carry: &mut Option<Carried>,
    ) {
        let counters = &self.counters;
        while !jobs.is_empty() {
            let mut step = Instant::now();
            let ForWrite {
                db,
                generation,
                wal,
                floors,
            } = match target.for_write() {
                Ok(found) => found,
                Err(e) => return fail_all(jobs, e),
            };
            // Carried on a database since reopened: the reopen applied its log.
            if carry.as_ref().is_some_and(|c| c.generation != generation) {
                *carry = None;
            }
            let txn = match carry.as_mut().and_then(|c| c.txn.take()) {
                Some(txn) => txn,
                None => {
                    // The carried groups' writes, lost with an aborted
                    // transaction, are written again before anything else.
                    let again = carry.as_ref().map_or(&[][..], |c| &c.effects[..]);
                    match begin_with(&db, again) {
                        Ok(txn) => txn,
                        Err(e) => {
                            target.failed(generation, &e);
                            return fail_all(jobs, e);
                        }
                    }
                }
            };
            // The transaction holds what it needs; a reopen must not wait for
            // this group to let go of the database.
            drop(db);
            let carried_groups = carry.as_ref().map_or(0, |c| c.effects.len());
            count(&counters.transactions, 1);
            step = time(&counters.beginning, step);
            let mut wrote = false;
            let mut failed = None;
            // idemkit's tables are opened once for the whole group (see `InTxn`).
            let mut in_txn = match wal {
                Some(_) => InTxn::logged(&txn),
                None => InTxn::new(&txn),
            }
            .knowing(floors);
            for (i, job) in jobs.iter_mut().enumerate() {
                match job.run(&mut in_txn) {
                    Ran::Decided { wrote: w } => wrote |= w,
                    Ran::Failed => {
                        failed = Some(i);
                        break;
                    }
                }
            }
            if let Some(i) = failed {
                // Nothing of this transaction may survive: not the failed job's
                // partial writes, not the others' (they run again below). The
                // carried groups' writes are written again first.
                drop(in_txn);
                abort_quietly(txn);
                let mut job = jobs.remove(i);
                job.deliver();
                count(&counters.reruns, i);
                time(&counters.running, step);
                continue;
            }
            let (effects, floors_left) = match guarded(|| in_txn.close()) {
                Ok(closed) => {
                    if let Some(floor) = closed.token_floor {
                        target.token_floor_raised(floor);
                    }
                    (closed.effects, closed.floors)
                }
                Err(e) => {
                    abort_quietly(txn);
                    target.failed(generation, &e);
                    return fail_all(jobs, e);
                }
            };
            step = time(&counters.running, step);
            // Carried on up to CARRY_GROUPS groups (each then costs no redb
            // commit), never for a caller that reads next with a snapshot of
            // its own.
            let carry_on = wal.is_some()
                && carried_groups + 1 < CARRY_GROUPS
                && !jobs.iter().any(|job| job.wants_visible());
            let ended = if wrote {
                match &wal {
                    Some(wal) => {
                        let mut wal = lock(wal);
                        let fits = effects.as_ref().is_some_and(|e| wal.takes(e.len()));
                        match effects {
                            Some(effects) if carry_on && fits => {
                                log_and_carry(txn, &mut wal, effects, &counters.logging).map(
                                    |(txn, effects)| {
                                        self.unseen_until_committed(&effects);
                                        let c = carry.get_or_insert_with(|| Carried {
                                            txn: None,
                                            generation,
                                            effects: Vec::new(),
                                        });
                                        c.txn = Some(txn);
                                        c.effects.push(effects);
                                        Ended::Carried
                                    },
                                )
                            }
                            effects => {
                                commit_with_log(txn, &mut wal, effects.as_ref(), &counters.logging)
                                    .map(Ended::Committed)
                            }
                        }
                    }
                    None => commit(txn).map(|()| Ended::Committed(Committed::Durably)),
                }
            } else if carried_groups > 0 {
                // Nothing new, but the carried groups are in this transaction:
                // carried on again, or committed (their frames are durable).
                if carry_on {
                    if let Some(c) = carry.as_mut() {
                        c.txn = Some(txn);
                    }
                    Ok(Ended::Carried)
                } else {
                    commit_undurably(txn).map(|()| Ended::Committed(Committed::ThroughTheLog))
                }
            } else {
                abort(txn).map(|()| Ended::Aborted)
            };
            step = time(&counters.committing, step);
            match ended {
                Ok(ended) => {
                    if wrote {
                        count(&counters.commits, 1);
                    }
                    match ended {
                        Ended::Committed(how) => {
                            if wrote && how == Committed::ThroughTheLog {
                                count(&counters.logged, 1);
                            }
                            target.committed();
                            if carried_groups > 0 {
                                // Counted as a commit first: a read that no
                                // longer finds them here takes a new snapshot.
                                *carry = None;
                                self.seen();
                            }
                        }
                        Ended::Carried => {
                            if wrote {
                                count(&counters.logged, 1);
                                count(&counters.carried, 1);
                            }
                        }
                        Ended::Aborted => {}
                    }
                    if wrote {
                        // Before the callers are answered, so before the next
                        // leader begins.
                        target.floors_committed(generation, floors_left);
                    }
                    for mut job in jobs.drain(..) {
                        job.deliver();
                    }
                    time(&counters.answering, step);
                }
                Err(e) => {
                    target.failed(generation, &e);
                    fail_all(jobs, e);
                }
            }
            return;
        }
    }
}

/// How a group's transaction ended.
enum Ended {
    /// Committed in redb.
    Committed(Committed),
    /// Left open for the next group, its writes durable in the log.
    Carried,
    /// Nothing was written.
    Aborted,
}

thread_local! {
    /// Whether this thread is leading a group (see [`GroupCommit::make_visible`]).
    static LEADING: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread as leading a group until dropped.
struct Leading;

impl Leading {
    fn now() -> Leading {
        LEADING.with(|leading| leading.set(true));
        Leading
    }
}

impl Drop for Leading {
    fn drop(&mut self) {
        LEADING.with(|leading| leading.set(false));
    }
}

/// Passes leadership to the caller at the front of the queue, or ends it.
/// A drop guard, so a leader that panicked cannot stall the store.
struct Handoff<'a>(&'a GroupCommit);

impl Drop for Handoff<'_> {
    fn drop(&mut self) {
        let mut queue = lock(&self.0.queue);
        match queue.waiting.front() {
            Some(next) => next.promote(),
            None => queue.leader = false,
        }
    }
}

/// Answers every job with `error`: the group's transaction could not be begun,
/// committed or aborted, so none of them is acknowledged.
fn fail_all(jobs: &mut Vec<Box<dyn Job>>, error: RedbError) {
    let operations = jobs.len();
    if operations == 1 {
        // A group of one (the uncontended case) reports redb's error as it is.
        if let Some(mut job) = jobs.pop() {
            job.fail(error);
        }
        return;
    }
    let cause = Arc::new(error);
    for mut job in jobs.drain(..) {
        job.fail(RedbError::GroupCommit {
            operations,
            cause: Arc::clone(&cause),
        });
    }
}

fn begin(db: &Database) -> Result<WriteTransaction, RedbError> {
    guarded(|| {
        let mut txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate)?;
        Ok(txn)
    })
}

/// A new transaction holding `carried` (groups' writes whose carried
/// transaction was aborted or is gone), written before anything else.
fn begin_with(db: &Database, carried: &[Effects]) -> Result<WriteTransaction, RedbError> {
    let txn = begin(db)?;
    if carried.is_empty() {
        return Ok(txn);
    }
    match guarded(|| wal::apply_effects(&txn, carried)) {
        Ok(()) => Ok(txn),
        Err(e) => {
            abort_quietly(txn);
            Err(e)
        }
    }
}

fn commit(txn: WriteTransaction) -> Result<(), RedbError> {
    guarded(|| Ok(txn.commit()?))
}

/// How a group's transaction was made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Committed {
    /// By redb's own sync (a checkpoint, when the database has a log).
    Durably,
    /// By a frame of the write-ahead log, synced before redb committed
    /// without a sync.
    ThroughTheLog,
}

/// Commits a group that wrote, on a database with a write-ahead log: through
/// the log when it can describe the group and has room (`effects`), else
/// durably in redb, which is a checkpoint: the log starts again.
fn commit_with_log(
    mut txn: WriteTransaction,
    wal: &mut Wal,
    effects: Option<&Effects>,
    logging: &AtomicU64,
) -> Result<Committed, RedbError> {
    let logged = effects.filter(|effects| wal.takes(effects.len()));
    let Some(effects) = logged else {
        // Every durable commit says which frames it holds: the logged commits
        // before it record nothing (below), so without this a reopen would
        // apply their frames again over this group's writes. A retired log
        // (its database is being reopened) takes no frame and no checkpoint;
        // its last frame, if its wipe failed, was never committed, and this
        // says it need not be applied.
        guarded(|| wal::record_applied(&txn, wal.applied()))?;
        commit(txn)?;
        if !wal.is_retired() {
            wal.checkpointed();
        }
        return Ok(Committed::Durably);
    };
    // No `wal_applied` here: this commit becomes durable only with a later
    // durable one, and every durable commit records the last frame it holds.
    guarded(|| Ok(txn.set_durability(Durability::None)?))?;
    // The frame is durable before the transaction is visible to anyone.
    let appending = Instant::now();
    let appended = wal.append(effects);
    time(logging, appending);
    if let Err(source) = appended {
        abort_quietly(txn);
        return Err(RedbError::WriteAheadLog {
            path: wal.path().to_owned(),
            source,
        });
    }
    if let Err(e) = commit(txn) {
        wal.retract();
        return Err(e);
    }
    Ok(Committed::ThroughTheLog)
}

/// Writes and syncs a group's frame and keeps its transaction open for the
/// next group: its writes are durable, and only reads through
/// [`GroupCommit::unseen_record`] see them until redb commits.
fn log_and_carry(
    txn: WriteTransaction,
    wal: &mut Wal,
    effects: Effects,
    logging: &AtomicU64,
) -> Result<(WriteTransaction, Effects), RedbError> {
    let appending = Instant::now();
    let appended = wal.append(&effects);
    time(logging, appending);
    match appended {
        Ok(()) => Ok((txn, effects)),
        Err(source) => {
            abort_quietly(txn);
            Err(RedbError::WriteAheadLog {
                path: wal.path().to_owned(),
                source,
            })
        }
    }
}

/// Commits without a sync: what the transaction holds is durable in the log.
fn commit_undurably(mut txn: WriteTransaction) -> Result<(), RedbError> {
    guarded(|| Ok(txn.set_durability(Durability::None)?))?;
    commit(txn)
}

fn abort(txn: WriteTransaction) -> Result<(), RedbError> {
    guarded(|| Ok(txn.abort()?))
}

/// Aborts after a failed job: that job's error is what its caller gets, and the
/// others run again in a new transaction, so an abort failure adds nothing.
fn abort_quietly(txn: WriteTransaction) {
    let _ = abort(txn);
}

/// What running a job's closure in the group's transaction gave.
enum Ran {
    /// It decided (the answer is kept until the commit); `wrote` if it wrote.
    Decided { wrote: bool },
    /// It returned an error or panicked: the transaction must be aborted.
    Failed,
}

/// One caller's closure and answer, type-erased so one queue holds them all.
trait Job: Send {
    /// Runs the closure in the group's transaction, keeping its answer until delivery.
    fn run(&mut self, in_txn: &mut InTxn<'_>) -> Ran;
    /// Hands the kept answer to the caller.
    fn deliver(&mut self);
    /// Answers the caller with `error` instead.
    fn fail(&mut self, error: RedbError);
    /// Tells the waiting caller to lead the next group.
    fn promote(&self);
    /// Whether the caller needs the group's transaction committed in redb
    /// (not carried on): it reads next with a transaction of its own.
    fn wants_visible(&self) -> bool;
}

struct Pending<F, T, E> {
    f: F,
    result: Option<Result<T, E>>,
    slot: Arc<Slot<T, E>>,
    visible: bool,
}

impl<F, T, E> Job for Pending<F, T, E>
where
    F: FnMut(&mut InTxn<'_>) -> Result<(T, bool), E> + Send,
    T: Send,
    E: From<RedbError> + Send,
{
    fn run(&mut self, in_txn: &mut InTxn<'_>) -> Ran {
        let f = &mut self.f;
        let (result, ran) = match catch_unwind(AssertUnwindSafe(|| f(in_txn))) {
            Ok(Ok((value, wrote))) => (Ok(value), Ran::Decided { wrote }),
            Ok(Err(e)) => (Err(e), Ran::Failed),
            Err(payload) => (
                Err(RedbError::panicked(payload.as_ref()).into()),
                Ran::Failed,
            ),
        };
        self.result = Some(result);
        ran
    }

    fn deliver(&mut self) {
        if let Some(result) = self.result.take() {
            self.slot.complete(result);
        }
    }

    fn fail(&mut self, error: RedbError) {
        self.result = None;
        self.slot.complete(Err(error.into()));
    }

    fn promote(&self) {
        self.slot.promote();
    }

    fn wants_visible(&self) -> bool {
        self.visible
    }
}

impl<F, T, E> Drop for Pending<F, T, E> {
    fn drop(&mut self) {
        // Dropped unanswered only if a leader panicked outside the guarded calls.
        // The caller must not wait forever; nothing was acknowledged.
        self.slot.abandon();
    }
}

/// Where a waiting caller learns its answer (or that it must lead).
///
/// The caller parks its thread rather than waiting on a condition variable:
/// waking it is then a system call only if it is asleep, and the leader's
/// own answer (or one that arrives before its caller waits) costs none.
struct Slot<T, E> {
    state: Mutex<SlotState<T, E>>,
    /// The thread that waits in [`Slot::wait`]: the one that made the slot.
    caller: std::thread::Thread,
}

enum SlotState<T, E> {
    Queued,
    Lead,
    Done(Result<T, E>),
    /// The job was dropped without an answer (see `Pending`'s `Drop`).
    Abandoned,
    /// The caller took its answer.
    Taken,
}

impl<T, E: From<RedbError>> Slot<T, E> {
    fn complete(&self, result: Result<T, E>) {
        *lock(&self.state) = SlotState::Done(result);
        self.caller.unpark();
    }

    fn promote(&self) {
        let mut state = lock(&self.state);
        if matches!(*state, SlotState::Queued) {
            *state = SlotState::Lead;
            drop(state);
            self.caller.unpark();
        }
    }

    /// Blocks until the answer is in (`Some`) or this caller must lead (`None`).
    fn wait(&self) -> Option<Result<T, E>> {
        let mut state = lock(&self.state);
        loop {
            match std::mem::replace(&mut *state, SlotState::Taken) {
                SlotState::Done(result) => return Some(result),
                SlotState::Abandoned => {
                    return Some(Err(RedbError::Corrupt {
                        detail: "a panic in the group commit leader left this write \
                                 unanswered; it was not acknowledged"
                            .to_owned(),
                    }
                    .into()));
                }
                SlotState::Lead => {
                    *state = SlotState::Queued;
                    return None;
                }
                SlotState::Queued | SlotState::Taken => {
                    *state = SlotState::Queued;
                    drop(state);
                    // Returns at once if the answer came in meanwhile (the
                    // unpark is kept), and may return early: the state says.
                    std::thread::park();
                    state = lock(&self.state);
                }
            }
        }
    }
}

impl<T, E> Slot<T, E> {
    fn abandon(&self) {
        let mut state = lock(&self.state);
        if matches!(*state, SlotState::Queued | SlotState::Lead) {
            *state = SlotState::Abandoned;
            drop(state);
            self.caller.unpark();
        }
    }
}

#[cfg(test)]
mod tests {
    //! Carrying a transaction on: a leader is held inside its job while the
    //! next caller queues, so the group that carries is known.

    use std::path::Path;
    use std::sync::mpsc;
    use std::thread::JoinHandle;

    use idemkit_core::machine::{ClaimRequest, Policy, claim_above};
    use idemkit_core::record::Record;
    use idemkit_core::{Fingerprint, IdempotencyKey, RecordId, Scope, UnixMillis};
    use redb::ReadableDatabase;

    use super::*;
    use crate::adapters::redb::db::Handle;
    use crate::adapters::redb::tables::RECORDS;
    use crate::adapters::redb::{FileOptions, Prepared, RedbAdapter, apply};
    use crate::adapters::{Adapter, Scan, ScanBy};

    fn every_record() -> Scan {
        Scan {
            by: ScanBy::All,
            limit: 100,
            after: None,
        }
    }

    fn id(key: &str) -> RecordId {
        RecordId::new(
            &Scope::new("acme", "charge").unwrap(),
            &IdempotencyKey::new(key).unwrap(),
        )
    }

    fn claimed() -> Record {
        let request = ClaimRequest {
            fingerprint: Fingerprint::from_bytes([3; 32]).into(),
            owner: "w".into(),
        };
        let at = UnixMillis::from_millis(1_700_000_000_000);
        claim_above(None, &request, &Policy::default(), at, 0)
            .write
            .unwrap()
    }

    fn open(path: &Path) -> Arc<RedbAdapter> {
        Arc::new(RedbAdapter::open_with(path, FileOptions::default()).unwrap())
    }

    /// A new store file `s.redb` in a directory of its own, kept open.
    fn fresh() -> (tempfile::TempDir, std::path::PathBuf, Arc<RedbAdapter>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let adapter = open(&path);
        (dir, path, adapter)
    }

    fn group(adapter: &RedbAdapter) -> &GroupCommit {
        match &adapter.handle {
            Handle::Open(owned) => &owned.group,
            Handle::PerTransaction { .. } => panic!("not a file kept open"),
        }
    }

    /// Whether redb's own read transactions see `key` (not the carried records).
    fn in_redb(adapter: &RedbAdapter, key: &str) -> bool {
        let Handle::Open(owned) = &adapter.handle else {
            panic!("not a file kept open");
        };
        let db = owned.for_write().unwrap().db;
        let txn = db.begin_read().unwrap();
        let records = txn.open_table(RECORDS).unwrap();
        records.get(id(key).as_bytes()).unwrap().is_some()
    }

    /// Starts a caller whose job inserts `key`, or fails when `key` is `None`,
    /// and then waits for the returned sender; answers once it is in the queue
    /// or running its job.
    fn writer(
        adapter: &Arc<RedbAdapter>,
        key: Option<&'static str>,
    ) -> (mpsc::Sender<()>, JoinHandle<Result<bool, RedbError>>) {
        let (running_tx, running) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let a = Arc::clone(adapter);
        let before = group(adapter).waiting();
        let joined = std::thread::spawn(move || {
            a.handle.write_if_changed(move |in_txn| {
                let _ = running_tx.send(());
                let _ = go_rx.lock().unwrap().recv();
                let Some(key) = key else {
                    return Err(RedbError::Corrupt {
                        detail: "this job fails".to_owned(),
                    });
                };
                let (tables, floors) = in_txn.tables()?;
                let written = apply(tables, floors, &mut Prepared::insert(&id(key), &claimed()))?;
                Ok((written.is_some(), true))
            })
        });
        // Running (it leads) or queued behind a leader.
        loop {
            if running.try_recv().is_ok() || group(adapter).waiting() > before {
                break;
            }
            std::thread::yield_now();
        }
        (go, joined)
    }

    fn found(adapter: &RedbAdapter, key: &str) -> bool {
        adapter.get(&id(key)).unwrap().stored.is_some()
    }

    #[test]
    fn a_carried_groups_records_are_read_before_redb_commits_them() {
        let (_dir, _path, adapter) = fresh();
        let (go_a, a) = writer(&adapter, Some("a"));
        let (go_b, b) = writer(&adapter, Some("b"));
        go_a.send(()).unwrap();
        assert!(a.join().unwrap().unwrap());
        // Acknowledged and carried on into b's group, which is running: redb's
        // snapshots lack it, a read finds it.
        assert!(!in_redb(&adapter, "a"));
        assert!(found(&adapter, "a"));
        assert!(!found(&adapter, "b"));
        let stats = adapter.commit_stats();
        assert_eq!((stats.logged, stats.carried), (1, 1), "{stats:?}");

        go_b.send(()).unwrap();
        assert!(b.join().unwrap().unwrap());
        // Nobody asked for a snapshot: both carried, both read.
        assert!(!in_redb(&adapter, "b"));
        assert!(found(&adapter, "a") && found(&adapter, "b"));

        // A scan needs redb to hold them: it has it commit first.
        let page = adapter.scan(&every_record()).unwrap();
        assert_eq!(page.entries.len(), 2, "{page:?}");
        assert!(in_redb(&adapter, "a") && in_redb(&adapter, "b"));
        assert!(found(&adapter, "a") && found(&adapter, "b"));
        assert!(group(&adapter).unseen_record(id("a").as_bytes()).is_none());
    }

    #[test]
    fn a_failed_job_after_a_carried_group_keeps_that_groups_writes() {
        let (_dir, _path, adapter) = fresh();
        let (go_a, a) = writer(&adapter, Some("a"));
        let (go_fail, fail) = writer(&adapter, None);
        go_a.send(()).unwrap();
        assert!(a.join().unwrap().unwrap());
        go_fail.send(()).unwrap();
        let failed = fail.join().unwrap().unwrap_err().to_string();
        assert!(failed.contains("this job fails"), "{failed}");
        // The failed job's transaction held a's writes and was aborted: a is
        // still read, and the next transaction writes it again first.
        assert!(found(&adapter, "a"));
        let (go_c, c) = writer(&adapter, Some("c"));
        go_c.send(()).unwrap();
        assert!(c.join().unwrap().unwrap());
        // A second insert of a is refused: the carried write is there.
        let again = adapter.insert(&id("a"), &claimed()).unwrap();
        assert_eq!(again, None);
        assert_eq!(adapter.scan(&every_record()).unwrap().entries.len(), 2);
        assert!(adapter.verify().unwrap().1.is_empty());
    }

    /// The caller's own writes run inside a group: a read they make there
    /// cannot wait for a commit of that group.
    #[test]
    fn a_read_inside_a_group_after_a_carried_one_does_not_wait_for_itself() {
        let (_dir, _path, adapter) = fresh();
        let (go_a, a) = writer(&adapter, Some("a"));
        let before = group(&adapter).waiting();
        let reader = Arc::clone(&adapter);
        let local = std::thread::spawn(move || {
            let inner = Arc::clone(&reader);
            let local: crate::adapters::redb::LocalWrites =
                Arc::new(Mutex::new(move |_: &WriteTransaction| {
                    inner.read_local(|_| ()).map(drop)
                }));
            reader.write_local(&local)
        });
        while group(&adapter).waiting() == before {
            std::thread::yield_now();
        }
        go_a.send(()).unwrap();
        assert!(a.join().unwrap().unwrap());
        local.join().unwrap().unwrap();
        assert!(found(&adapter, "a"));
    }

    #[test]
    fn a_store_closed_while_carrying_keeps_every_acknowledged_write() {
        let (dir, path, adapter) = fresh();
        for key in ["a", "b", "c"] {
            let (go, w) = writer(&adapter, Some(key));
            go.send(()).unwrap();
            assert!(w.join().unwrap().unwrap());
        }
        assert!(adapter.commit_stats().carried >= 1);
        assert!(!in_redb(&adapter, "c"));

        // A crash now: the file and its log as the disk holds them.
        let crashed = dir.path().join("crashed.redb");
        std::fs::copy(&path, &crashed).unwrap();
        std::fs::copy(wal::path_of(&path), wal::path_of(&crashed)).unwrap();
        let after_crash = open(&crashed);
        assert!(["a", "b", "c"].iter().all(|k| found(&after_crash, k)));
        drop(after_crash);

        // A close commits the carried transaction durably and removes the log.
        drop(adapter);
        assert!(!wal::path_of(&path).exists());
        let reopened = open(&path);
        assert!(["a", "b", "c"].iter().all(|k| in_redb(&reopened, k)));
        assert!(reopened.verify().unwrap().1.is_empty());
    }

    #[test]
    fn the_id_filter_holds_what_was_inserted_and_little_else_until_cleared() {
        let filter = IdFilter::default();
        // As many ids as the carried groups of a busy store hold, sharing
        // their tenant and operation as a store's ids do.
        let carried: Vec<RecordId> = (0..1024).map(|i| id(&format!("order-{i}"))).collect();
        for id in &carried {
            filter.insert(id.as_bytes());
        }
        assert!(carried.iter().all(|id| filter.may_hold(id.as_bytes())));
        // Spread over the bits (about 8 pairs of 1,024 share one by chance).
        let set: u32 = filter
            .words
            .iter()
            .map(|word| word.load(Ordering::Relaxed).count_ones())
            .sum();
        assert!(set > 990, "1,024 ids set {set} bits");
        // A bit per hash of the whole id: a replay of another key meets a set
        // bit about once in 64 (1,024 of 65,536 bits).
        let others = (0..10_000)
            .filter(|i| filter.may_hold(id(&format!("replayed-{i}")).as_bytes()))
            .count();
        assert!(others < 500, "{others} of 10,000 other ids met a set bit");
        filter.clear();
        assert!(!carried.iter().any(|id| filter.may_hold(id.as_bytes())));
    }
}
