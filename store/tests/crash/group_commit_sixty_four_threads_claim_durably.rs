//! Group commit under 64 concurrent callers on one file-backed store.
//!
//! - Every thread claims its own fresh keys and, in the same rounds, one key
//!   shared by all threads: each fresh key executes, each shared key executes
//!   exactly once (invariant 1 of docs/architecture.md holds inside a group: a later claim of the same
//!   key in the same transaction sees the earlier one's lease).
//! - Every acknowledged claim and completion is in the file after it is closed
//!   and reopened (invariant 2: nothing is answered before its commit is durable).
//! - The writes were grouped: far fewer durable commits than write operations
//!   (`RedbAdapter::commit_stats`), which is the point of group commit.

use crate::support::crash as crash_support;

use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};

use idemkit::adapters::redb::RedbAdapter;
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, RecordState, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey};

use crate::support::scope;

const THREADS: usize = 64;
const ROUNDS: usize = 8;

fn policy() -> Policy {
    Policy::default().with_effect(EffectKind::Local)
}

fn claim(store: &Store, key: &str, owner: &str) -> Claim {
    store
        .claim(
            &scope(),
            &IdempotencyKey::new(key).unwrap(),
            Fingerprint::from_bytes([3; 32]),
            owner,
            &policy(),
        )
        .unwrap()
}

#[derive(Debug, Default)]
struct Acks {
    /// Keys whose completion was acknowledged, with the body stored.
    completed: HashMap<String, Vec<u8>>,
    /// Executions per shared key.
    shared_executes: HashMap<String, usize>,
}

#[test]
fn sixty_four_threads_distinct_and_shared_keys_execute_once_and_stay_durable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("group.redb");
    let adapter = Arc::new(RedbAdapter::open(&path).unwrap());
    let store = Store::new(adapter.clone());
    let acks = Mutex::new(Acks::default());
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, acks, barrier) = (&store, &acks, &barrier);
            s.spawn(move || {
                for round in 0..ROUNDS {
                    barrier.wait();
                    // A fresh key of this thread's own.
                    let own = format!("t{t}-r{round}");
                    let Claim::Execute(guard) = claim(store, &own, &format!("t{t}")) else {
                        panic!("fresh key {own} did not execute");
                    };
                    let body = own.clone().into_bytes();
                    guard
                        .complete(StoredResponse::new(201, body.clone()))
                        .unwrap();
                    acks.lock().unwrap().completed.insert(own, body);
                    // The key every thread claims this round.
                    let shared = format!("shared-r{round}");
                    match claim(store, &shared, &format!("t{t}")) {
                        Claim::Execute(guard) => {
                            let body = format!("{shared} by t{t}").into_bytes();
                            guard
                                .complete(StoredResponse::new(200, body.clone()))
                                .unwrap();
                            let mut acks = acks.lock().unwrap();
                            *acks.shared_executes.entry(shared.clone()).or_default() += 1;
                            acks.completed.insert(shared, body);
                        }
                        Claim::InFlight { .. } | Claim::Replay { .. } => {}
                        other => panic!("unexpected answer for {shared}: {other:?}"),
                    }
                }
            });
        }
    });
    let acks = acks.into_inner().unwrap();
    for round in 0..ROUNDS {
        let shared = format!("shared-r{round}");
        assert_eq!(
            acks.shared_executes.get(&shared),
            Some(&1),
            "{shared} must execute exactly once: {:?}",
            acks.shared_executes
        );
    }
    assert_eq!(acks.completed.len(), THREADS * ROUNDS + ROUNDS);

    let stats = adapter.commit_stats();
    eprintln!("{stats:?}");
    // Every claim that executed and every completion wrote; without grouping
    // there would be one commit per write.
    let writes = (2 * (THREADS * ROUNDS + ROUNDS)) as u64;
    assert!(
        stats.commits * 4 <= writes,
        "64 concurrent callers should share commits: {stats:?} for {writes} writes"
    );
    assert!(stats.largest_group > 1, "{stats:?}");

    // Durable: closed and reopened, the file holds every acknowledged completion.
    drop((store, adapter));
    let store = idemkit::open(&path).unwrap();
    assert!(store.verify().unwrap().problems.is_empty());
    let records = crash_support::states_by_key(&store);
    assert_eq!(records.len(), acks.completed.len());
    for (key, body) in &acks.completed {
        match records.get(key) {
            Some(RecordState::Completed { response, .. }) => {
                assert_eq!(response.body.as_deref(), Some(body.as_slice()), "{key}");
            }
            other => panic!("acknowledged completion of {key} is not in the file: {other:?}"),
        }
    }
}

#[test]
fn sixty_four_threads_of_claim_and_complete_share_commits() {
    let dir = tempfile::tempdir().unwrap();
    let adapter = Arc::new(RedbAdapter::open(dir.path().join("rate.redb")).unwrap());
    let store = Store::new(adapter.clone());
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, barrier) = (&store, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..10 {
                    let Claim::Execute(guard) = claim(store, &format!("k{t}-{i}"), "w") else {
                        panic!("a fresh key did not execute");
                    };
                    guard
                        .complete(StoredResponse::new(200, b"ok".to_vec()))
                        .unwrap();
                }
            });
        }
    });
    let stats = adapter.commit_stats();
    eprintln!("{stats:?}");
    let operations = (THREADS * 10 * 2) as u64;
    assert_eq!(stats.operations, operations);
    assert!(
        stats.commits * 4 <= operations,
        "commits should be far fewer than operations: {stats:?}"
    );
}
