//! Another instance's writes wake this one's waiters (`LISTEN`/`NOTIFY`): two
//! stores over one database, as two processes of a fleet. A watch on B, for a
//! key A claimed, resolves when A
//!
//! - completes it (within 1 s; the figure is printed), releases it, or
//!   deletes its record;
//! - completes it inside the caller's transaction: only once that commits,
//!   never after a rollback;
//!
//! and never when A only renews the lease or records a step (the record stays
//! Running), nor when a store in another schema of the same database completes
//! the same key. A completion nobody waits for sends no notification at all
//! (PostgreSQL commits notifying transactions one at a time).
//!
//! "Never" is checked without timing: a later completion (the sentinel) is
//! announced through the same channel, and PostgreSQL delivers notifications
//! in commit order, so once the sentinel's watch resolved, an announcement of
//! the earlier write would have arrived before it.
//!
//! Needs scripts/with-postgres.sh.

#![cfg(feature = "postgres")]

use crate::support::local::{claim, created, guard, state};
use crate::support::pg::{
    flush_announcements, id_of, listening, options, two_instances, unique_schema, url, was_woken,
    woken,
};

use std::time::{Duration, Instant};

use idemkit::adapters::Adapter;
use idemkit::adapters::postgres::{Migrations, PgError, PgOptions, PostgresAdapter};
use idemkit::core::record::StateName;
use idemkit::store::Store;
use postgres::fallible_iterator::FallibleIterator;

/// The bound the requirement states, from the write's start to the wake-up.
const WITHIN: Duration = Duration::from_secs(1);
/// How long a test waits for a wake-up before it fails (generous: the bound is
/// checked on the figure measured).
const PATIENCE: Duration = Duration::from_secs(10);

/// Runs `write`, and returns how long after its start `watch` resolved.
fn latency(watch: &mut idemkit::store::Watch, write: impl FnOnce()) -> Duration {
    let start = Instant::now();
    write();
    let returned = start.elapsed();
    let at = woken(watch, PATIENCE).expect("the write was not announced within 10 s");
    let latency = at.duration_since(start);
    println!("announced: woken {latency:?} after the write started (the write took {returned:?})");
    latency
}

#[test]
fn postgres_a_completion_on_one_instance_wakes_the_others_waiter_within_a_second() {
    let (a, _, b, _) = two_instances("announce_complete");
    listening(&b);
    let running = guard(claim(&a, "k1"));
    let mut watch = b.watch(&id_of("k1")).unwrap();
    assert!(!was_woken(&mut watch), "nothing happened yet");
    let took = latency(&mut watch, || running.complete(created("k1")).unwrap());
    assert!(took <= WITHIN, "woken {took:?} after the completion");
    assert_eq!(state(&b, "k1"), StateName::Completed);
}

#[test]
fn postgres_a_release_and_a_delete_wake_the_other_instance() {
    let (a, pg_a, b, _) = two_instances("announce_release");
    listening(&b);

    let released = guard(claim(&a, "k1"));
    let mut watch = b.watch(&id_of("k1")).unwrap();
    let took = latency(&mut watch, || released.release().unwrap());
    assert!(took <= WITHIN, "release: woken {took:?} after it");
    assert_eq!(state(&b, "k1"), StateName::Released);

    // GC deletes only settled records; the adapter's delete is what GC calls,
    // here on a Running one so that a waiter exists.
    let _lease = guard(claim(&a, "k2"));
    let read = pg_a.get(&id_of("k2")).unwrap().stored.unwrap();
    let mut watch = b.watch(&id_of("k2")).unwrap();
    let took = latency(&mut watch, || {
        assert!(Adapter::delete(&pg_a, &id_of("k2"), &read).unwrap());
    });
    assert!(took <= WITHIN, "delete: woken {took:?} after it");
    assert!(
        b.get(
            &crate::support::scope(),
            &idemkit::IdempotencyKey::new("k2").unwrap()
        )
        .unwrap()
        .is_none()
    );
}

#[test]
fn postgres_a_write_that_stays_running_wakes_nobody() {
    let (a, _, b, _) = two_instances("announce_renew");
    listening(&b);
    let mut running = guard(claim(&a, "k1"));
    let mut watch = b.watch(&id_of("k1")).unwrap();
    running.renew().unwrap();
    let _ = running.begin_step("book", "provider-key-1").unwrap();
    running.complete_step("book", Some("ref-1".into())).unwrap();
    flush_announcements(&a, &b, "sentinel");
    assert!(
        !was_woken(&mut watch),
        "a renewal or a step (still Running) was announced"
    );
    // The same watch still resolves once the record leaves Running.
    running.complete(created("k1")).unwrap();
    assert!(woken(&mut watch, PATIENCE).is_some());
}

#[test]
fn postgres_only_a_record_someone_waits_on_is_announced() {
    let (a, pg_a, b, _) = two_instances("announce_watched_only");
    listening(&b);
    // A raw listener on the store's channel sees every notification sent.
    let mut raw = postgres::Client::connect(&url(), postgres::NoTls).unwrap();
    raw.batch_execute(&format!("LISTEN \"{}\"", pg_a.channel()))
        .unwrap();
    // Nobody waits on k1: its completion notifies nobody.
    guard(claim(&a, "k1")).complete(created("k1")).unwrap();
    // B waits on k2: its completion is announced, and arrives after any
    // notification of k1's earlier commit would have.
    let running = guard(claim(&a, "k2"));
    let mut watch = b.watch(&id_of("k2")).unwrap();
    assert!(watch.is_marked(), "the row was marked");
    running.complete(created("k2")).unwrap();
    assert!(woken(&mut watch, PATIENCE).is_some(), "k2 was announced");
    let mut payloads = Vec::new();
    let mut notes = raw.notifications();
    let mut arrived = notes.timeout_iter(PATIENCE);
    while let Ok(Some(note)) = arrived.next() {
        payloads.push(note.payload().to_owned());
        if note.payload() == idemkit::core::hex::lower(id_of("k2").as_bytes()) {
            break;
        }
    }
    assert_eq!(
        payloads,
        vec![idemkit::core::hex::lower(id_of("k2").as_bytes())],
        "only the watched record was announced"
    );
}

#[test]
fn postgres_a_completion_in_the_callers_transaction_wakes_only_once_committed() {
    let (a, pg_a, b, _) = two_instances("announce_txn");
    listening(&b);

    // Committed: nothing before the commit, a wake-up after it.
    let running = guard(claim(&a, "k1"));
    let mut watch = b.watch(&id_of("k1")).unwrap();
    let mut conn = pg_a.connection().unwrap();
    let mut txn = conn.transaction().unwrap();
    running.complete_in(&mut txn, created("k1")).unwrap();
    flush_announcements(&a, &b, "sentinel-1");
    assert!(
        !was_woken(&mut watch),
        "announced before the caller's commit"
    );
    let took = latency(&mut watch, || txn.commit().unwrap());
    assert!(took <= WITHIN, "woken {took:?} after the commit");
    assert_eq!(state(&b, "k1"), StateName::Completed);
    drop(conn);

    // Rolled back: the record is still Running, and nobody was woken.
    let running = guard(claim(&a, "k2"));
    let mut watch = b.watch(&id_of("k2")).unwrap();
    let mut conn = pg_a.connection().unwrap();
    let mut txn = conn.transaction().unwrap();
    running.complete_in(&mut txn, created("k2")).unwrap();
    txn.rollback().unwrap();
    drop(conn);
    flush_announcements(&a, &b, "sentinel-2");
    assert!(
        !was_woken(&mut watch),
        "a rolled-back completion was announced"
    );
    assert_eq!(state(&b, "k2"), StateName::Running);
}

#[test]
fn postgres_stores_in_other_schemas_of_one_database_do_not_wake_each_other() {
    let (x1, pg_x, x2, _) = two_instances("announce_schema_x");
    let (y1, pg_y, y2, _) = two_instances("announce_schema_y");
    assert_ne!(pg_x.channel(), pg_y.channel());
    listening(&x2);
    listening(&y2);
    // The same scope and key, so the same id bytes, in both schemas; running
    // in X (a watch marks an existing row) and in Y.
    let running = guard(claim(&x1, "k1"));
    let _also_running = guard(claim(&y1, "k1"));
    let mut on_x = x2.watch(&id_of("k1")).unwrap();
    let mut on_y = y2.watch(&id_of("k1")).unwrap();
    running.complete(created("k1")).unwrap();
    assert!(
        woken(&mut on_x, PATIENCE).is_some(),
        "X's completion reaches X's other instance"
    );
    flush_announcements(&y1, &y2, "sentinel");
    assert!(
        !was_woken(&mut on_y),
        "X's completion was announced to Y, a store in another schema"
    );
}

#[test]
fn postgres_long_schema_names_still_get_a_channel_of_their_own() {
    // Two schemas alike in their first 38 characters, too long for
    // `idemkit_<schema>`: hashed channels, still apart.
    let prefix = unique_schema("announce_long");
    let long = |tail: &str| format!("{prefix}{}{tail}", "_".repeat(60 - prefix.len()));
    let connect = |schema: &str| {
        let pg = PostgresAdapter::connect_with(&url(), options(schema, 2)).unwrap();
        (Store::from(pg.clone()), pg)
    };
    let (x, pg_x) = connect(&long("x"));
    let (y, pg_y) = connect(&long("y"));
    assert_ne!(pg_x.channel(), pg_y.channel());
    assert!(pg_x.channel().len() <= 63, "{}", pg_x.channel());
    let (x_listener, _) = connect(&long("x"));
    listening(&x_listener);
    let mut watch = x_listener.watch(&id_of("k1")).unwrap();
    guard(claim(&y, "k1")).complete(created("k1")).unwrap();
    flush_announcements(&x, &x_listener, "sentinel");
    assert!(!was_woken(&mut watch), "Y's completion reached X");
}

#[test]
fn postgres_a_schema_from_before_waits_were_marked_is_migrated_and_its_running_record_still_wakes_a_waiter()
 {
    let schema = unique_schema("announce_upgrade");
    let connect = || PostgresAdapter::connect_with(&url(), options(&schema, 4)).unwrap();
    // A record left Running by a build of schema version 2...
    let old = Store::from(connect());
    let running = guard(claim(&old, "k1"));
    // ...in a schema as that build made it: no `watched` column, version 2.
    let mut admin = postgres::Client::connect(&url(), postgres::NoTls).unwrap();
    admin
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".idemkit_records DROP COLUMN watched; \
             DELETE FROM \"{schema}\".idemkit_schema_version WHERE version = 3"
        ))
        .unwrap();
    let check_only = PgOptions {
        migrations: Migrations::CheckOnly,
        ..options(&schema, 4)
    };
    match PostgresAdapter::connect_with(&url(), check_only) {
        Err(PgError::Schema { found: 2, .. }) => {}
        other => panic!("expected the schema at version 2, got {other:?}"),
    }
    // An instance of this build migrates it on connect and waits on the record
    // (marking it needs the column the migration adds).
    let b = Store::from(connect());
    listening(&b);
    assert_eq!(state(&b, "k1"), StateName::Running, "the record kept");
    let mut watch = b.watch(&id_of("k1")).unwrap();
    assert!(watch.is_marked());
    let took = latency(&mut watch, || running.complete(created("k1")).unwrap());
    assert!(took <= WITHIN, "woken {took:?} after the completion");
}
