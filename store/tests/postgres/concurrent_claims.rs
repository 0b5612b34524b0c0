//! Invariant 1 (docs/architecture.md) over PostgreSQL: concurrent claims of one key yield exactly one
//! `Execute`, whether the race is on the INSERT (no record yet) or on the
//! `UPDATE … WHERE version` (a takeover of an expired lease).
//!
//! Four stores — four pools, as four service instances would have — share one
//! database; 32 threads released by one barrier claim the same key, over 30 keys.
//! They decide by the database's clock; the lease expires by moving their shared
//! `PgClock` forward, not by waiting.

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use idemkit::adapters::postgres::{PgClock, PostgresAdapter};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StateName, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

const INSTANCES: usize = 4;
const THREADS_PER_INSTANCE: usize = 8;
const KEYS: usize = 30;
/// Four instances on one schema, deciding by the database's clock plus the
/// offset of `clock` (shared, as one database's clock is).
fn instances(clock: &PgClock) -> Vec<Store> {
    let url = pg_support::url();
    let schema = pg_support::unique_schema("race");
    (0..INSTANCES)
        .map(|_| {
            PostgresAdapter::connect_with(
                &url,
                pg_support::options(&schema, THREADS_PER_INSTANCE as u32),
            )
            .unwrap()
            .with_clock(clock.clone())
        })
        .map(Store::from)
        .collect()
}

/// Every thread claims `key` at once; returns the answers' names. (The stores
/// decide by the database's clock.)
fn race(stores: &[Store], key: &IdempotencyKey, policy: &Policy) -> Vec<&'static str> {
    let scope = Scope::new("acme", "charge").unwrap();
    let barrier = Arc::new(Barrier::new(INSTANCES * THREADS_PER_INSTANCE));
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..INSTANCES * THREADS_PER_INSTANCE)
            .map(|t| {
                let store = &stores[t % INSTANCES];
                let (scope, barrier) = (&scope, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    let outcome = store
                        .claim(
                            scope,
                            key,
                            Fingerprint::from_bytes([1; 32]),
                            &format!("t{t}"),
                            policy,
                        )
                        .unwrap();
                    match outcome {
                        Claim::Execute(guard) => {
                            guard
                                .complete(StoredResponse::new(200, format!("by t{t}").into_bytes()))
                                .unwrap();
                            "execute"
                        }
                        Claim::InFlight { .. } => "in-flight",
                        Claim::Replay { .. } => "replay",
                        other => panic!("unexpected answer {other:?}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

#[test]
fn racing_inserts_yield_one_execute() {
    let stores = instances(&PgClock::database());
    let policy = Policy::default().with_effect(EffectKind::Local);
    for k in 0..KEYS {
        let key = IdempotencyKey::new(&format!("key-{k}")).unwrap();
        let outcomes = race(&stores, &key, &policy);
        let executes = outcomes.iter().filter(|o| **o == "execute").count();
        assert_eq!(executes, 1, "key-{k}: {outcomes:?}");
    }
    let stats = stores[0].stats().unwrap();
    assert_eq!(stats.total, KEYS as u64);
    assert_eq!(
        stats.by_state.get(&StateName::Completed),
        Some(&(KEYS as u64))
    );
}

#[test]
fn racing_takeovers_of_an_expired_lease_yield_one_execute() {
    let clock = PgClock::database();
    let stores = instances(&clock);
    let scope = Scope::new("acme", "charge").unwrap();
    let policy = Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(Duration::from_secs(30));
    for k in 0..KEYS {
        let key = IdempotencyKey::new(&format!("stale-{k}")).unwrap();
        // A worker claims and crashes: the record stays Running until its lease ends.
        match stores[0]
            .claim(
                &scope,
                &key,
                Fingerprint::from_bytes([1; 32]),
                "crashed",
                &policy,
            )
            .unwrap()
        {
            Claim::Execute(guard) => guard.abandon(),
            other => panic!("expected Execute, got {other:?}"),
        }
        // 31 s later by every instance's clock (the database's, moved by the test).
        clock.advance(Duration::from_secs(31));
        let outcomes = race(&stores, &key, &policy);
        let executes = outcomes.iter().filter(|o| **o == "execute").count();
        assert_eq!(executes, 1, "stale-{k}: {outcomes:?}");
        let record = stores[1].get(&scope, &key).unwrap().unwrap();
        assert_eq!(record.attempt, 2, "exactly one takeover");
        assert_eq!(record.state.name(), StateName::Completed);
    }
}
