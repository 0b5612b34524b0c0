//! A replay, a request in flight, a mismatch and an uncertain outcome write
//! nothing: the redb store decides them on a snapshot read and never submits
//! them to the group-commit queue (`RedbAdapter::commit_stats().operations` counts
//! every write submitted), so they never wait behind other callers' commits.
//! Claims that do write (a fresh key, a lease that expired into Unknown) still
//! go through the queue.

use std::time::Duration;

use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey};

use crate::support::scope;

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

fn claim(store: &Store, k: &str, body: u8, policy: &Policy) -> Claim {
    store
        .claim(
            &scope(),
            &key(k),
            Fingerprint::from_bytes([body; 32]),
            "worker",
            policy,
        )
        .unwrap()
}

#[test]
fn replays_in_flight_and_mismatches_are_answered_without_entering_the_write_queue() {
    let dir = tempfile::tempdir().unwrap();
    let store = idemkit::open(dir.path().join("reads.redb")).unwrap();
    let policy = Policy::default().with_effect(EffectKind::External);

    let Claim::Execute(done) = claim(&store, "completed", 1, &policy) else {
        panic!("a fresh key executes");
    };
    done.complete(StoredResponse::new(201, b"{\"id\":1}".to_vec()))
        .unwrap();
    let Claim::Execute(_running) = claim(&store, "running", 1, &policy) else {
        panic!("a fresh key executes");
    };
    let before = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();

    for _ in 0..50 {
        assert!(matches!(
            claim(&store, "completed", 1, &policy),
            Claim::Replay { .. }
        ));
        assert!(matches!(
            claim(&store, "completed", 2, &policy),
            Claim::Mismatch { status: 422, .. }
        ));
        assert!(matches!(
            claim(&store, "running", 1, &policy),
            Claim::InFlight { .. }
        ));
    }
    let after = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    assert_eq!(
        after.operations, before.operations,
        "150 answers that write nothing submitted writes: {before:?} → {after:?}"
    );

    // A claim that writes still goes through the queue and commits.
    let Claim::Execute(_fresh) = claim(&store, "fresh", 1, &policy) else {
        panic!("a fresh key executes");
    };
    let written = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    assert_eq!(written.operations, after.operations + 1);
    assert_eq!(written.commits, after.commits + 1);
}

#[test]
fn an_external_lease_that_expired_is_written_unknown_then_answered_from_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = idemkit::open(dir.path().join("expiry.redb")).unwrap();
    let policy = Policy::default()
        .with_effect(EffectKind::External)
        .with_lease(Duration::from_millis(50));
    let Claim::Execute(guard) = claim(&store, "k", 1, &policy) else {
        panic!("a fresh key executes");
    };
    std::mem::forget(guard); // the worker is gone without a word
    std::thread::sleep(Duration::from_millis(120));

    let before = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    // The first retry after the expiry writes the record Unknown (a write)...
    assert!(matches!(
        claim(&store, "k", 1, &policy),
        Claim::Uncertain { .. }
    ));
    let marked = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    assert_eq!(marked.operations, before.operations + 1, "{marked:?}");
    // ...every later one reads it.
    for _ in 0..20 {
        assert!(matches!(
            claim(&store, "k", 1, &policy),
            Claim::Uncertain { .. }
        ));
    }
    assert_eq!(
        store
            .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
            .unwrap()
            .commit_stats()
            .operations,
        marked.operations
    );
}
