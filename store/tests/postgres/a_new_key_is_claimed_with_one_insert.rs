//! On PostgreSQL a new key's claim writes first: once a read carried the
//! database's time, a claim within the clock's estimate window inserts the
//! record at once (one statement) and reads only when the insert is refused
//! (the key is taken, or GC raised the token floor). Counted with the
//! adapter's `statements_sent`.

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use std::sync::{Arc, Barrier};

use idemkit::adapters::Adapter;
use idemkit::adapters::postgres::PostgresAdapter;
use idemkit::core::machine::Policy;
use idemkit::core::record::StoredResponse;
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

fn scope() -> Scope {
    Scope::new("acme", "charge").unwrap()
}

fn key(k: &str) -> IdempotencyKey {
    IdempotencyKey::new(k).unwrap()
}

fn claim(store: &Store, k: &str) -> Claim {
    store
        .claim(
            &scope(),
            &key(k),
            Fingerprint::from_bytes([3; 32]),
            "worker",
            &Policy::default(),
        )
        .unwrap()
}

fn executes(store: &Store, k: &str) -> idemkit::store::ExecutionGuard {
    match claim(store, k) {
        Claim::Execute(guard) => guard,
        other => panic!("{k}: expected Execute, got {other:?}"),
    }
}

/// A store over a fresh schema, and the time carried by one claim's read.
fn warmed(tag: &str) -> (Store, PostgresAdapter) {
    let adapter = pg_support::fresh_store(tag);
    let store = Store::from(adapter.clone());
    executes(&store, "warm-up")
        .complete(StoredResponse::new(200, b"ok".to_vec()))
        .unwrap();
    (store, adapter)
}

/// The statements each of ten new keys' claim + complete sent.
fn costs_of_new_keys(store: &Store, adapter: &PostgresAdapter, prefix: &str) -> Vec<u64> {
    (0..10)
        .map(|n| {
            let before = adapter.statements_sent();
            executes(store, &format!("{prefix}-{n}"))
                .complete(StoredResponse::new(201, b"{}".to_vec()))
                .unwrap();
            adapter.statements_sent() - before
        })
        .collect()
}

/// Completes and deletes a record, as GC does past its window: the delete
/// raises the token floor, which is returned.
fn delete_one(store: &Store, adapter: &PostgresAdapter) -> u64 {
    executes(store, "old")
        .complete(StoredResponse::new(200, Vec::new()))
        .unwrap();
    let id = scope().record_id(&key("old"));
    let read = adapter.get(&id).unwrap().stored.unwrap();
    assert!(adapter.delete(&id, &read).unwrap());
    adapter.get(&id).unwrap().token_floor
}

#[test]
fn a_new_keys_claim_and_completion_are_two_statements() {
    let (store, adapter) = warmed("first_cost");
    let costs = costs_of_new_keys(&store, &adapter, "k");
    // Two is the insert and the update. A claim more than the estimate
    // window (1 s) after the last read reads again: three, on a machine
    // slow enough to take that long.
    assert!(costs.iter().all(|c| (2..=3).contains(c)), "{costs:?}");
    let two = costs.iter().filter(|c| **c == 2).count();
    assert!(two >= 8, "most claims wrote first: {costs:?}");
}

#[test]
fn a_taken_key_is_read_after_its_refused_insert_and_answered_in_flight() {
    let (store, adapter) = warmed("first_taken");
    let running = executes(&store, "taken");
    let before = adapter.statements_sent();
    assert!(matches!(claim(&store, "taken"), Claim::InFlight { .. }));
    assert_eq!(
        adapter.statements_sent() - before,
        2,
        "the insert, then the read"
    );
    running
        .complete(StoredResponse::new(201, b"done".to_vec()))
        .unwrap();
    assert!(matches!(claim(&store, "taken"), Claim::Replay { .. }));
}

#[test]
fn after_a_delete_raised_the_token_floor_a_new_key_gets_a_token_above_it() {
    let (store, adapter) = warmed("first_floor");
    let floor = delete_one(&store, &adapter);
    assert!(floor >= 1, "{floor}");

    let guard = executes(&store, "new");
    assert!(
        guard.token().get() > floor,
        "token {} above the floor {floor}",
        guard.token().get()
    );
    guard
        .complete(StoredResponse::new(200, Vec::new()))
        .unwrap();
}

/// GC's first delete raises the floor above every first token. The engine
/// then writes first above the floor its last read carried; had it kept
/// writing first as if the floor were 0, every new key's insert would be
/// refused and read again: four statements instead of two.
#[test]
fn after_a_delete_raised_the_token_floor_new_keys_still_write_first() {
    let (store, adapter) = warmed("first_floor_kept");
    delete_one(&store, &adapter);
    // The first claim after the delete learns the floor: its insert is refused.
    executes(&store, "learns")
        .complete(StoredResponse::new(201, b"{}".to_vec()))
        .unwrap();

    let costs = costs_of_new_keys(&store, &adapter, "after");
    let two = costs.iter().filter(|c| **c == 2).count();
    assert!(two >= 8, "most claims wrote first: {costs:?}");
}

#[test]
fn sixteen_claims_of_one_new_key_racing_on_the_insert_execute_once() {
    let (store, _adapter) = warmed("first_race");
    for round in 0..5 {
        let k = format!("race-{round}");
        let barrier = Arc::new(Barrier::new(16));
        let executed: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..16)
                .map(|_| {
                    let (store, barrier, k) = (&store, Arc::clone(&barrier), &k);
                    s.spawn(move || {
                        barrier.wait();
                        match claim(store, k) {
                            Claim::Execute(guard) => {
                                guard.abandon();
                                1
                            }
                            Claim::InFlight { .. } => 0,
                            other => panic!("{other:?}"),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum()
        });
        assert_eq!(executed, 1, "round {round}");
    }
}
