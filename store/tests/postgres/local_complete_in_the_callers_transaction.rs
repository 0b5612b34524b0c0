//! Exactly once for local effects on PostgreSQL (`idemkit::local`): the
//! completion's compare-and-set runs in the caller's own transaction.
//!
//! - committed: the caller's row and the outcome are both there, and a retry
//!   replays the outcome;
//! - rolled back after `complete_in`: neither is there, and the record is still
//!   Running under the lease (a Local retry takes it over once it expires);
//! - a lost lease: `complete_in` is refused with the stale token, and the
//!   caller's rolled-back row never appears;
//! - a renewal from another connection waits for the caller's transaction and
//!   then finds the record completed (the row lock holds until the commit).
//!
//! Needs scripts/with-postgres.sh.

#![cfg(feature = "postgres")]

use crate::support::local as local_support;
use crate::support::pg as pg_support;

use std::time::Duration;

use idemkit::adapters::postgres::{PgClock, PostgresAdapter};
use idemkit::core::machine::TransitionError;
use idemkit::core::record::StateName;
use idemkit::local::LocalError;
use idemkit::store::{Claim, ExecutionGuard, Store, WorkerError};
use local_support::{claim, created, guard, state};

/// A store in a fresh schema with the service's own `notes` table beside
/// idemkit's, and the clock tests move.
fn fresh(tag: &str) -> (Store, PostgresAdapter, PgClock, String) {
    let schema = pg_support::unique_schema(tag);
    let clock = PgClock::database();
    let pg = PostgresAdapter::connect_with(&pg_support::url(), pg_support::options(&schema, 4))
        .unwrap()
        .with_clock(clock.clone());
    pg.connection()
        .unwrap()
        .batch_execute(&format!(
            "CREATE TABLE \"{schema}\".notes (id text PRIMARY KEY, body text NOT NULL)"
        ))
        .unwrap();
    (Store::from(pg.clone()), pg, clock, schema)
}

fn notes(pg: &PostgresAdapter, schema: &str) -> Vec<String> {
    pg.connection()
        .unwrap()
        .query(
            &format!("SELECT id FROM \"{schema}\".notes ORDER BY id"),
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

fn insert_note(txn: &mut postgres::Transaction<'_>, schema: &str, id: &str) {
    txn.execute(
        &format!("INSERT INTO \"{schema}\".notes (id, body) VALUES ($1, 'hello')"),
        &[&id],
    )
    .unwrap();
}

#[test]
fn postgres_committed_the_row_and_the_outcome_are_both_there() {
    let (store, pg, _, schema) = fresh("local_commit");
    let guard = guard(claim(&store, "k1"));
    let mut conn = pg.connection().unwrap();
    let mut txn = conn.transaction().unwrap();
    insert_note(&mut txn, &schema, "note_1");
    guard.complete_in(&mut txn, created("note_1")).unwrap();
    // Not committed yet: another connection sees the lease, not the outcome.
    assert_eq!(state(&store, "k1"), StateName::Running);
    assert!(notes(&pg, &schema).is_empty());
    txn.commit().unwrap();
    assert_eq!(notes(&pg, &schema), ["note_1"]);
    match claim(&store, "k1") {
        Claim::Replay { response, .. } => assert_eq!(response, created("note_1")),
        other => panic!("expected the replay, got {other:?}"),
    }
}

#[test]
fn postgres_rolled_back_neither_is_there_and_the_retry_takes_over() {
    let (store, pg, clock, schema) = fresh("local_rollback");
    let guard = guard(claim(&store, "k1"));
    {
        let mut conn = pg.connection().unwrap();
        let mut txn = conn.transaction().unwrap();
        insert_note(&mut txn, &schema, "note_1");
        guard.complete_in(&mut txn, created("note_1")).unwrap();
        txn.rollback().unwrap();
    }
    assert!(notes(&pg, &schema).is_empty());
    assert_eq!(state(&store, "k1"), StateName::Running);
    // Once the lease expires, the retry executes again on a clean slate.
    clock.advance(Duration::from_secs(31));
    let retry = guard_after_takeover(&store);
    let mut conn = pg.connection().unwrap();
    let mut txn = conn.transaction().unwrap();
    insert_note(&mut txn, &schema, "note_1");
    retry.complete_in(&mut txn, created("note_1")).unwrap();
    txn.commit().unwrap();
    assert_eq!(notes(&pg, &schema), ["note_1"], "one note");
    assert_eq!(state(&store, "k1"), StateName::Completed);
}

fn guard_after_takeover(store: &Store) -> ExecutionGuard {
    let guard = guard(claim(store, "k1"));
    assert_eq!(guard.attempt(), 2);
    guard
}

#[test]
fn postgres_a_lost_lease_is_refused_in_the_transaction() {
    let (store, pg, clock, schema) = fresh("local_stale");
    let first = guard(claim(&store, "k1"));
    clock.advance(Duration::from_secs(31));
    let second = guard(claim(&store, "k1"));
    let mut conn = pg.connection().unwrap();
    let mut txn = conn.transaction().unwrap();
    insert_note(&mut txn, &schema, "note_old");
    match first.complete_in(&mut txn, created("note_old")) {
        Err(LocalError::Store(WorkerError::Rejected { error, .. })) => {
            assert!(
                matches!(error, TransitionError::StaleToken { .. }),
                "{error:?}"
            );
        }
        other => panic!("expected the stale token, got {other:?}"),
    }
    txn.rollback().unwrap();
    drop(conn);
    assert!(notes(&pg, &schema).is_empty());
    // The new lease is untouched and completes.
    second.complete(created("note_new")).unwrap();
    assert_eq!(state(&store, "k1"), StateName::Completed);
}

#[test]
fn postgres_a_renewal_waits_for_the_transaction_and_finds_the_outcome() {
    let (store, pg, _, schema) = fresh("local_lock");
    let guard = guard(claim(&store, "k1"));
    let renewer = guard.renewer();
    let mut conn = pg.connection().unwrap();
    let mut txn = conn.transaction().unwrap();
    insert_note(&mut txn, &schema, "note_1");
    guard.complete_in(&mut txn, created("note_1")).unwrap();
    let renewal = std::thread::spawn(move || renewer.renew());
    std::thread::sleep(Duration::from_millis(300));
    assert!(!renewal.is_finished(), "the renewal waits for the row lock");
    txn.commit().unwrap();
    match renewal.join().unwrap() {
        Err(WorkerError::Rejected { error, .. }) => {
            assert!(
                matches!(error, TransitionError::WrongState { .. }),
                "{error:?}"
            );
        }
        other => panic!("expected the renewal refused (completed), got {other:?}"),
    }
    assert_eq!(notes(&pg, &schema), ["note_1"]);
    assert_eq!(state(&store, "k1"), StateName::Completed);
}
