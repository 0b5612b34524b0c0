//! Exactly once for local effects on redb (`idemkit::local`): the caller's
//! writes to its own tables and the completion commit in one transaction.
//!
//! - both commit with one fsync, and a retry replays the outcome;
//! - a lost lease (taken over after it expired) commits neither, and the
//!   writes never run;
//! - writes that fail or panic commit neither, and the lease is still held;
//! - a renewal between claim and completion moves the version: the
//!   completion is read and decided again, and the writes still commit once;
//! - 48 concurrent completions share group commits, and the ones whose writes
//!   fail spare the others;
//! - a store over another adapter says so and writes nothing;
//! - a Local write made *outside* the transaction runs again after a crash:
//!   at least once, as `idemkit::local` documents.

use crate::support::local as local_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use idemkit::UnixMillis;
use idemkit::adapters::memory::MemoryAdapter;
use idemkit::clock::ManualClock;
use idemkit::core::machine::TransitionError;
use idemkit::core::record::{StateName, StoredResponse};
use idemkit::local::LocalError;
use idemkit::store::{Claim, ExecutionGuard, Store, WorkerError};
use local_support::{claim, created, guard, state};
use redb::{ReadableTable, ReadableTableMetadata, TableDefinition};

/// The service's own table: note id → text.
const NOTES: TableDefinition<&str, &str> = TableDefinition::new("service.notes");

/// The closure that writes note `id`, counting its runs in `runs`.
fn write_note(
    id: &'static str,
    runs: &Arc<AtomicU32>,
) -> impl FnMut(&redb::WriteTransaction) -> Result<&'static str, redb::Error> + Send + 'static {
    let runs = Arc::clone(runs);
    move |txn| {
        runs.fetch_add(1, Ordering::SeqCst);
        txn.open_table(NOTES)?.insert(id, "hello")?;
        Ok(id)
    }
}

fn notes(store: &Store) -> Vec<String> {
    store
        .read_local(|txn| -> Result<Vec<String>, redb::Error> {
            match txn.open_table(NOTES) {
                Ok(table) => table
                    .iter()?
                    .map(|entry| Ok(entry?.0.value().to_owned()))
                    .collect(),
                Err(redb::TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
                Err(e) => Err(e.into()),
            }
        })
        .unwrap()
        .unwrap()
}

#[test]
fn the_write_and_the_outcome_commit_with_one_fsync_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let store = idemkit::open(dir.path().join("notes.redb")).unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let guard = guard(claim(&store, "k1"));
    let before = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    let id = guard
        .complete_with(write_note("note_1", &runs), created("note_1"))
        .unwrap();
    let after = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    assert_eq!(id, "note_1");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(after.commits - before.commits, 1, "one commit holds both");
    assert_eq!(notes(&store), ["note_1"]);
    match claim(&store, "k1") {
        Claim::Replay { response, .. } => assert_eq!(response, created("note_1")),
        other => panic!("expected the replay, got {other:?}"),
    }
    // Both survive a reopen: the commit was durable.
    drop(store);
    let store = idemkit::open(dir.path().join("notes.redb")).unwrap();
    assert_eq!(notes(&store), ["note_1"]);
    assert_eq!(state(&store, "k1"), StateName::Completed);
}

#[test]
fn a_lost_lease_commits_neither_and_never_runs_the_writes() {
    let clock = ManualClock::new(UnixMillis::from_millis(1_800_000_000_000));
    let store = idemkit::in_memory().unwrap().with_clock(clock.clone());
    let runs = Arc::new(AtomicU32::new(0));
    let first = guard(claim(&store, "k1"));
    clock.advance(Duration::from_secs(31));
    // The lease expired: the retry takes the Local record over.
    let second = guard(claim(&store, "k1"));
    assert!(second.token() > first.token());
    match first.complete_with(write_note("note_old", &runs), created("note_old")) {
        Err(LocalError::Store(WorkerError::Rejected { error, .. })) => {
            assert!(
                matches!(error, TransitionError::StaleToken { .. }),
                "{error:?}"
            );
        }
        other => panic!("expected the stale token, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the writes never ran");
    assert!(notes(&store).is_empty());
    second
        .complete_with(write_note("note_new", &runs), created("note_new"))
        .unwrap();
    assert_eq!(notes(&store), ["note_new"]);
}

#[test]
fn failing_writes_commit_neither_and_the_lease_is_still_held() {
    let store = idemkit::in_memory().unwrap();
    let mut guard = guard(claim(&store, "k1"));
    let failed = guard.try_complete_with(
        |txn: &redb::WriteTransaction| -> Result<(), String> {
            txn.open_table(NOTES)
                .map_err(|e| e.to_string())?
                .insert("note_1", "written, then rolled back")
                .map_err(|e| e.to_string())?;
            Err("the balance would go negative".to_owned())
        },
        &created("note_1"),
    );
    match failed {
        Err(LocalError::Writes(e)) => assert_eq!(e, "the balance would go negative"),
        other => panic!("expected the writes' own error, got {other:?}"),
    }
    assert!(
        notes(&store).is_empty(),
        "the failed transaction wrote nothing"
    );
    assert_eq!(state(&store, "k1"), StateName::Running);
    // Still this lease's: it can record another outcome.
    guard
        .complete(StoredResponse::new(422, b"{}".to_vec()))
        .unwrap();
    assert_eq!(state(&store, "k1"), StateName::Completed);
}

#[test]
fn a_panic_in_the_writes_resumes_on_the_caller_and_commits_nothing() {
    let store = idemkit::in_memory().unwrap();
    let guard = guard(claim(&store, "k1"));
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _ = guard.complete_with(
            |txn: &redb::WriteTransaction| -> Result<(), redb::Error> {
                txn.open_table(NOTES)?.insert("note_1", "never kept")?;
                panic!("the handler's bug");
            },
            created("note_1"),
        );
    }));
    let payload = panicked.expect_err("the panic reaches the caller");
    assert_eq!(payload.downcast_ref::<&str>(), Some(&"the handler's bug"));
    assert!(notes(&store).is_empty());
    // The guard was dropped while unwinding: a Local record is released.
    assert_eq!(state(&store, "k1"), StateName::Released);
    // The store still works: the writer was not left poisoned.
    let runs = Arc::new(AtomicU32::new(0));
    guard_of_retry(&store)
        .complete_with(write_note("note_1", &runs), created("note_1"))
        .unwrap();
    assert_eq!(notes(&store), ["note_1"]);
}

fn guard_of_retry(store: &Store) -> ExecutionGuard {
    guard(claim(store, "k1"))
}

#[test]
fn a_renewal_moves_the_version_and_the_writes_still_commit_once() {
    let store = idemkit::in_memory().unwrap();
    let runs = Arc::new(AtomicU32::new(0));
    let guard = guard(claim(&store, "k1"));
    // Another thread's renewal writes the record after the guard last did.
    guard.renewer().renew().unwrap();
    guard
        .complete_with(write_note("note_1", &runs), created("note_1"))
        .unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the refused update ran nothing; the update after the read ran the writes once"
    );
    assert_eq!(notes(&store), ["note_1"]);
    assert_eq!(state(&store, "k1"), StateName::Completed);
}

#[test]
fn concurrent_completions_share_commits_and_failing_writes_spare_the_rest() {
    const WORKERS: usize = 48;
    let dir = tempfile::tempdir().unwrap();
    let store = idemkit::open(dir.path().join("notes.redb")).unwrap();
    let guards: Vec<_> = (0..WORKERS)
        .map(|i| guard(claim(&store, &format!("key-{i}"))))
        .collect();
    let barrier = Arc::new(std::sync::Barrier::new(WORKERS));
    let before = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    let handles: Vec<_> = guards
        .into_iter()
        .enumerate()
        .map(|(i, guard)| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let id = format!("note-{i}");
                let response = created(&id);
                barrier.wait();
                guard.complete_with(
                    move |txn: &redb::WriteTransaction| -> Result<(), String> {
                        txn.open_table(NOTES)
                            .map_err(|e| e.to_string())?
                            .insert(id.as_str(), "text")
                            .map_err(|e| e.to_string())?;
                        // Every seventh handler's writes fail after writing.
                        if i % 7 == 3 {
                            return Err(format!("refused {i}"));
                        }
                        Ok(())
                    },
                    response,
                )
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let after = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    let written = notes(&store);
    for (i, result) in results.iter().enumerate() {
        let key = format!("key-{i}");
        let note = format!("note-{i}");
        if i % 7 == 3 {
            assert!(
                matches!(result, Err(LocalError::Writes(_))),
                "{i}: {result:?}"
            );
            assert!(!written.contains(&note), "{note} was rolled back");
            // Its guard was dropped: the Local record is released.
            assert_eq!(state(&store, &key), StateName::Released);
        } else {
            assert!(result.is_ok(), "{i}: {result:?}");
            assert!(written.contains(&note), "{note} committed");
            assert_eq!(state(&store, &key), StateName::Completed);
        }
    }
    let failing = (0..WORKERS).filter(|i| i % 7 == 3).count();
    assert_eq!(written.len(), WORKERS - failing);
    println!(
        "{WORKERS} completions with local writes ({failing} failing): {} transactions, {} commits, {} reruns, largest group {}",
        after.transactions - before.transactions,
        after.commits - before.commits,
        after.reruns - before.reruns,
        after.largest_group
    );
    let reopened = {
        drop(store);
        idemkit::open(dir.path().join("notes.redb")).unwrap()
    };
    assert_eq!(notes(&reopened).len(), WORKERS - failing);
    let verified = reopened
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .verify()
        .unwrap();
    assert!(verified.1.is_empty(), "{:?}", verified.1);
}

#[test]
fn another_adapter_says_it_cannot_and_writes_nothing() {
    let store = Store::new(Arc::new(MemoryAdapter::default()));
    let runs = Arc::new(AtomicU32::new(0));
    let guard = guard(claim(&store, "k1"));
    match guard.complete_with(write_note("note_1", &runs), created("note_1")) {
        Err(LocalError::Unsupported { what, adapter }) => {
            assert_eq!(what, "complete_with");
            assert_eq!(adapter, "MemoryAdapter");
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(matches!(
        store.read_local(|_| ()),
        Err(LocalError::Unsupported { .. })
    ));
}

/// The contrast `idemkit::local` documents: a Local effect written in its own
/// transaction, then a crash before the outcome is recorded. After the lease
/// expires the retry takes the record over and writes again: at least once.
#[test]
fn a_local_write_outside_the_transaction_runs_again_after_a_crash() {
    let clock = ManualClock::new(UnixMillis::from_millis(1_800_000_000_000));
    let store = idemkit::in_memory().unwrap().with_clock(clock.clone());
    let count_rows = |store: &Store| {
        store
            .read_local(|txn| -> Result<u64, redb::Error> { Ok(txn.open_table(COUNTED)?.len()?) })
            .unwrap()
            .unwrap()
    };
    let mut next_row = 0u64;
    let mut write_row = |store: &Store| {
        next_row += 1;
        let row = next_row;
        store
            .write_local(move |txn| -> Result<(), redb::Error> {
                txn.open_table(COUNTED)?.insert(row, ())?;
                Ok(())
            })
            .unwrap();
    };

    // Attempt 1 writes, then "crashes" before recording its outcome.
    let first = guard(claim(&store, "k1"));
    write_row(&store);
    first.abandon();
    clock.advance(Duration::from_secs(31));
    // The retry takes the expired Local lease over and executes again.
    let second = guard(claim(&store, "k1"));
    assert_eq!(second.attempt(), 2);
    write_row(&store);
    second.complete(created("row")).unwrap();
    assert_eq!(count_rows(&store), 2, "the effect ran twice: at least once");

    // Through the transaction, the crashed attempt leaves nothing behind.
    let first = guard(claim(&store, "k2"));
    first.try_complete_with_abandon();
    clock.advance(Duration::from_secs(31));
    let second = guard(claim(&store, "k2"));
    second
        .complete_with(
            |txn: &redb::WriteTransaction| -> Result<(), redb::Error> {
                txn.open_table(COUNTED)?.insert(1_000, ())?;
                Ok(())
            },
            created("row"),
        )
        .unwrap();
    assert_eq!(count_rows(&store), 3, "k2's effect ran once");
}

const COUNTED: TableDefinition<u64, ()> = TableDefinition::new("service.counted");

/// A crash inside the completion's transaction, in process: the writes run
/// and fail, so the transaction is aborted, and the guard is abandoned as a
/// dead process leaves it (no release).
trait CrashInsideTheTransaction {
    fn try_complete_with_abandon(self);
}

impl CrashInsideTheTransaction for ExecutionGuard {
    fn try_complete_with_abandon(mut self) {
        let crashed = self.try_complete_with(
            |txn: &redb::WriteTransaction| -> Result<(), &'static str> {
                txn.open_table(COUNTED)
                    .map_err(|_| "open")?
                    .insert(999, ())
                    .map_err(|_| "insert")?;
                Err("the process died here")
            },
            &created("row"),
        );
        assert!(matches!(crashed, Err(LocalError::Writes(_))));
        self.abandon();
    }
}
