//! A failing disk: a [`FaultyBackend`] over redb's real `FileBackend` fails the
//! n-th write or sync of one operation. For every n that hits the operation, it
//! must return an error (acknowledging nothing), and the file must reopen with
//! every earlier acknowledged claim and completion intact, every record decoding
//! and the indexes agreeing with the records. The sweep stops at the first n the
//! operation survives (it needed fewer I/O calls than that).

use std::fs::OpenOptions;
use std::path::Path;

use idemkit::adapters::redb::LockRetry;
use idemkit::adapters::redb::{FaultSwitch, FaultyBackend};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StateName, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey};

use crate::support::scope;

#[derive(Clone, Copy, Debug)]
enum Fault {
    Write,
    Sync,
}

#[derive(Clone, Copy, Debug)]
enum Op {
    Claim,
    Complete,
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

fn policy() -> Policy {
    Policy::default().with_effect(EffectKind::Local)
}

fn open_faulty(path: &Path, switch: &FaultSwitch) -> Store {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .unwrap();
    let backend = redb::backends::FileBackend::new(file).unwrap();
    Store::from(
        idemkit::adapters::redb::RedbAdapter::with_backend(FaultyBackend::new(
            backend,
            switch.clone(),
        ))
        .unwrap(),
    )
}

fn execute(store: &Store, k: &str) -> idemkit::store::ExecutionGuard {
    match store
        .claim(
            &scope(),
            &key(k),
            Fingerprint::from_bytes([1; 32]),
            "w",
            &policy(),
        )
        .unwrap()
    {
        Claim::Execute(g) => g,
        other => panic!("expected Execute, got {other:?}"),
    }
}

/// Returns whether a failure was injected into `op`.
fn run_case(dir: &Path, fault: Fault, op: Op, n: u64, sticky: bool) -> bool {
    let path = dir.join(format!("{fault:?}-{op:?}-{n}-{sticky}.redb"));
    let switch = FaultSwitch::default();
    switch.set_sticky(sticky);
    {
        let store = open_faulty(&path, &switch);
        // Acknowledged before the fault: a completed record and a running one.
        execute(&store, "done")
            .complete(StoredResponse::new(200, b"done".to_vec()))
            .unwrap();
        let running = execute(&store, "running");
        running.abandon();
        let target = match op {
            Op::Claim => None,
            Op::Complete => Some(execute(&store, "target")),
        };
        match fault {
            Fault::Write => switch.fail_write_after(n),
            Fault::Sync => switch.fail_sync_after(n),
        }
        let result = match target {
            None => store
                .claim(
                    &scope(),
                    &key("target"),
                    Fingerprint::from_bytes([1; 32]),
                    "w",
                    &policy(),
                )
                .map(|c| {
                    if let Claim::Execute(g) = c {
                        g.abandon();
                    }
                })
                .map_err(|e| e.to_string()),
            Some(g) => g
                .complete(StoredResponse::new(201, b"target".to_vec()))
                .map_err(|e| e.to_string()),
        };
        let injected = switch.injected() > 0;
        if !injected {
            assert!(result.is_ok(), "{result:?}");
            switch.disarm();
            return false;
        }
        assert!(
            result.is_err(),
            "{fault:?} #{n} during {op:?} was injected but the operation reported success"
        );
        switch.disarm();
    }
    // Reopen with the plain file backend: redb recovers, and nothing acknowledged
    // is lost. (Shared, so that the running record is read as it was left, not
    // settled as an orphan: that is what opening it for life would do.)
    let store = Store::from(
        idemkit::adapters::redb::RedbAdapter::open_shared(&path, LockRetry::default()).unwrap(),
    );
    let report = store.verify().unwrap();
    assert!(
        report.problems.is_empty(),
        "{fault:?} #{n} {op:?}: {:?}",
        report.problems
    );
    let done = store.get(&scope(), &key("done")).unwrap().unwrap();
    assert_eq!(done.state.name(), StateName::Completed);
    let running = store.get(&scope(), &key("running")).unwrap().unwrap();
    assert_eq!(running.state.name(), StateName::Running);
    // The failed operation was not acknowledged: either it did not happen, or it
    // reached the disk anyway (like a crash after the last sync) — both consistent.
    let target = store.get(&scope(), &key("target")).unwrap();
    match op {
        Op::Claim => {
            if let Some(r) = target {
                assert_eq!(r.state.name(), StateName::Running);
            }
        }
        Op::Complete => {
            let r = target.expect("the target's claim was acknowledged");
            // Released: the store reopened the database after the fault, so the
            // guard dropped with its failed completion released the Local record
            // (its business write, in the same transaction, did not commit either).
            assert!(matches!(
                r.state.name(),
                StateName::Running | StateName::Completed | StateName::Released
            ));
        }
    }
    true
}

fn sweep(fault: Fault, op: Op, sticky: bool) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    while run_case(dir.path(), fault, op, n, sticky) {
        n += 1;
        assert!(n < 500, "the operation never stops hitting the fault");
    }
    assert!(n > 0, "{fault:?} during {op:?}: no call was ever failed");
    n
}

#[test]
fn failed_writes_during_claim() {
    eprintln!(
        "claim hit by {} writes",
        sweep(Fault::Write, Op::Claim, false)
    );
}

#[test]
fn failed_syncs_during_claim() {
    eprintln!(
        "claim hit by {} syncs",
        sweep(Fault::Sync, Op::Claim, false)
    );
}

#[test]
fn failed_writes_during_complete() {
    eprintln!(
        "complete hit by {} writes",
        sweep(Fault::Write, Op::Complete, false)
    );
}

#[test]
fn failed_syncs_during_complete() {
    eprintln!(
        "complete hit by {} syncs",
        sweep(Fault::Sync, Op::Complete, false)
    );
}

#[test]
fn a_disk_that_stays_broken() {
    sweep(Fault::Write, Op::Complete, true);
    sweep(Fault::Sync, Op::Claim, true);
}

/// Sixty-four writers share group commits when one commit's sync fails: every
/// caller is answered (the failed group's with an error, nobody hangs), the
/// store reopens its database on the next write, every writer's second round
/// succeeds, and the file holds every acknowledged completion.
#[test]
fn a_failed_commit_among_sixty_four_writers_answers_everyone_and_the_store_writes_again() {
    const WRITERS: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sixty-four.redb");
    let switch = FaultSwitch::default();
    let store = open_faulty(&path, &switch);
    // Warm up, then fail the third sync from now: a commit in the middle of the burst.
    execute(&store, "warm")
        .complete(StoredResponse::new(200, b"warm".to_vec()))
        .unwrap();
    switch.fail_sync_after(2);
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(WRITERS));
    let (answers, answered) = std::sync::mpsc::channel();
    for w in 0..WRITERS {
        let store = store.clone();
        let barrier = std::sync::Arc::clone(&barrier);
        let answers = answers.clone();
        std::thread::spawn(move || {
            barrier.wait();
            let name = format!("first-{w}");
            let first = store
                .claim(
                    &scope(),
                    &key(&name),
                    Fingerprint::from_bytes([1; 32]),
                    "w",
                    &policy(),
                )
                .map_err(|e| e.to_string())
                .and_then(|claim| match claim {
                    Claim::Execute(g) => g
                        .complete(StoredResponse::new(201, name.clone().into_bytes()))
                        .map_err(|e| e.to_string()),
                    other => Err(format!("unexpected {other:?}")),
                });
            let _ = answers.send((w, first));
        });
    }
    drop(answers);
    let mut acknowledged = Vec::new();
    let mut failed = 0;
    for _ in 0..WRITERS {
        let (w, first) = answered
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("every writer is answered");
        match first {
            Ok(()) => acknowledged.push(w),
            Err(_) => failed += 1,
        }
    }
    assert_eq!(switch.injected(), 1);
    assert!(
        failed > 0,
        "the failed commit answered nobody with an error"
    );
    // Later writes succeed: the database was reopened.
    for w in 0..WRITERS {
        execute(&store, &format!("second-{w}"))
            .complete(StoredResponse::new(201, b"second".to_vec()))
            .unwrap();
    }
    assert!(store.health().is_writable());
    drop(store);
    let store = idemkit::open(&path).unwrap();
    assert!(store.verify().unwrap().problems.is_empty());
    for w in acknowledged {
        let r = store
            .get(&scope(), &key(&format!("first-{w}")))
            .unwrap()
            .unwrap();
        assert_eq!(r.state.name(), StateName::Completed, "writer {w}");
    }
    for w in 0..WRITERS {
        let r = store
            .get(&scope(), &key(&format!("second-{w}")))
            .unwrap()
            .unwrap();
        assert_eq!(r.state.name(), StateName::Completed, "writer {w}");
    }
}
