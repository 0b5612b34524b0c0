//! A write that is refused must not take the others down with it.
//!
//! Workers whose lease was taken over try to complete with their stale fencing
//! token (the state machine refuses) while, at the same moment, the new lease
//! holders complete the same records and other callers claim and complete
//! fresh keys. A guard writes its transition conditionally on the version its
//! own last write left: a stale guard's write is refused by the version check
//! inside the group (it writes nothing and fails alone), the engine reads the
//! newer record, and the state machine refuses the stale token there. No group
//! is aborted and nothing runs again (`CommitStats::reruns` stays 0); only a
//! group in which every write was refused ends without a commit. Before the
//! conditional writes, the refusals ran inside the groups and aborted them:
//! 99 transactions for 168 operations.
//! Afterwards, in the reopened file: every acknowledged completion is there,
//! and no stale write left a trace.

use crate::support::crash as crash_support;

use std::collections::HashMap;
use std::sync::Barrier;
use std::time::Duration;

use idemkit::UnixMillis;
use idemkit::clock::ManualClock;
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, RecordState, StoredResponse};
use idemkit::store::{Claim, ExecutionGuard, Store, WorkerError};
use idemkit::{Fingerprint, IdempotencyKey};

use crate::support::scope;

const PER_KIND: usize = 24;
const ROUNDS: usize = 5;
const LEASE: Duration = Duration::from_secs(30);

fn policy() -> Policy {
    Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(LEASE)
}

fn execute(store: &Store, key: &str) -> ExecutionGuard {
    match store
        .claim(
            &scope(),
            &IdempotencyKey::new(key).unwrap(),
            Fingerprint::from_bytes([5; 32]),
            "w",
            &policy(),
        )
        .unwrap()
    {
        Claim::Execute(guard) => guard,
        other => panic!("{key}: expected Execute, got {other:?}"),
    }
}

#[test]
fn stale_completions_in_a_group_leave_the_others_durable_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stale.redb");
    let clock = ManualClock::new(UnixMillis::from_millis(1_700_000_000_000));
    let store = idemkit::open(&path).unwrap().with_clock(clock.clone());
    // Expected final body per key.
    let mut expected: HashMap<String, Vec<u8>> = HashMap::new();
    let mut rounds = 0;
    while rounds < ROUNDS {
        // Leases taken over: the old guards hold stale tokens.
        let keys: Vec<String> = (0..PER_KIND).map(|k| format!("s{rounds}-{k}")).collect();
        let stale: Vec<ExecutionGuard> = keys.iter().map(|k| execute(&store, k)).collect();
        clock.advance(LEASE + Duration::from_secs(1));
        let current: Vec<ExecutionGuard> = keys.iter().map(|k| execute(&store, k)).collect();
        let barrier = Barrier::new(3 * PER_KIND);
        let fresh_done: Vec<String> = std::thread::scope(|s| {
            for guard in stale {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    match guard.complete(StoredResponse::new(200, b"stale".to_vec())) {
                        Err(WorkerError::Rejected { .. }) => {}
                        other => panic!("a stale completion must be refused: {other:?}"),
                    }
                });
            }
            for (guard, key) in current.into_iter().zip(&keys) {
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    guard
                        .complete(StoredResponse::new(201, key.as_bytes().to_vec()))
                        .unwrap();
                });
            }
            let fresh: Vec<_> = (0..PER_KIND)
                .map(|k| {
                    let (store, barrier) = (&store, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let key = format!("f{rounds}-{k}");
                        execute(store, &key)
                            .complete(StoredResponse::new(201, key.as_bytes().to_vec()))
                            .unwrap();
                        key
                    })
                })
                .collect();
            fresh.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for key in keys.into_iter().chain(fresh_done) {
            let body = key.clone().into_bytes();
            expected.insert(key, body);
        }
        rounds += 1;
    }
    let stats = store
        .adapter_as::<idemkit::adapters::redb::RedbAdapter>()
        .unwrap()
        .commit_stats();
    eprintln!("{rounds} rounds: {stats:?}");
    // Per round: the claims of the stale and of the current leases (one by
    // one), then at once the current completions, the fresh claims and
    // completions, and the stale completions' refused conditional writes.
    assert_eq!(
        stats.operations,
        (ROUNDS * 6 * PER_KIND) as u64,
        "{stats:?}"
    );
    assert_eq!(stats.reruns, 0, "a refusal aborted a group: {stats:?}");
    assert!(
        stats.transactions - stats.commits <= (ROUNDS * PER_KIND) as u64,
        "only groups of refused writes end without a commit: {stats:?}"
    );

    drop(store);
    let store = idemkit::open(&path).unwrap();
    assert!(store.verify().unwrap().problems.is_empty());
    let records = crash_support::states_by_key(&store);
    assert_eq!(records.len(), expected.len());
    for (key, body) in &expected {
        match records.get(key) {
            Some(RecordState::Completed { response, .. }) => {
                assert_eq!(response.body.as_deref(), Some(body.as_slice()), "{key}");
            }
            other => panic!("{key}: expected its acknowledged completion, found {other:?}"),
        }
    }
}
