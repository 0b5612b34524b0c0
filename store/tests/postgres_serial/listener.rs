//! The listening connection of a store (`idemkit-listen` in
//! `pg_stat_activity`) killed and gone:
//!
//! - its backend terminated (`pg_terminate_backend`): the store says waits are
//!   no longer woken (its waiters poll, and its health says `polling`), says so
//!   again once the listener reconnected (`listening`), and a completion after
//!   that wakes a waiter again;
//! - its store dropped: the thread ends and its connection closes.
//!
//! Each holds `SERVER` (of support::pg): the first terminates every listener
//! of the database, which would disturb another test's.
//!
//! Needs scripts/with-postgres.sh.

#![cfg(feature = "postgres")]

use crate::support::local::{claim, created, guard};
use crate::support::pg::{
    alone, flush_announcements, fresh_store, id_of, listening, poll_until, two_instances, url,
    was_woken, woken,
};

use std::time::{Duration, Instant};

use idemkit::store::{Store, Wakeups};

/// Listeners of this database: their backends' pids, and the channel each
/// listens to (its last statement, while it is the `LISTEN`).
fn listeners(channel: Option<&str>) -> Vec<i32> {
    let mut client = postgres::Client::connect(&url(), postgres::NoTls).unwrap();
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'idemkit-listen' \
             AND datname = current_database() AND ($1::text IS NULL OR query = $1)",
            &[&channel.map(|c| format!("LISTEN \"{c}\""))],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

#[test]
fn postgres_a_killed_listener_reconnects_and_wakes_again() {
    let _server = alone();
    let (a, _, b, _) = two_instances("listener_killed");
    assert_eq!(b.health().wakeups, Some(Wakeups::NotStarted));
    listening(&b);
    let health = b.health().to_json();
    assert!(health.ends_with(r#","wakeups":"listening"}"#), "{health}");
    let before = listeners(None);
    assert!(!before.is_empty(), "no idemkit-listen backend");
    let mut idle = b.watch(&id_of("idle")).unwrap();

    let mut client = postgres::Client::connect(&url(), postgres::NoTls).unwrap();
    let killed: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = 'idemkit-listen' AND datname = current_database()) AS k",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(killed >= 1);
    let killed_at = Instant::now();

    // The channel drops (the waiters are told, and poll), then comes back.
    // `wakeups()` is what /health reports: polling while waits are not woken.
    let down = poll_until(Duration::from_secs(10), || {
        b.wakeups() == Wakeups::Polling && !b.waits_are_woken()
    })
    .expect("the store never said its waiters poll after the listener was killed");
    let up = poll_until(Duration::from_secs(10), || b.waits_are_woken())
        .expect("the listener did not reconnect within 10 s");
    assert_eq!(b.health().wakeups, Some(Wakeups::Listening));
    println!(
        "listener killed: noticed after {down:?}, listening again {up:?} later ({:?} in all)",
        killed_at.elapsed()
    );
    assert!(
        was_woken(&mut idle),
        "the channel's changes woke the waiter"
    );
    let after = listeners(None);
    assert!(
        after.iter().all(|pid| !before.contains(pid)) && !after.is_empty(),
        "a new listening backend: before {before:?}, after {after:?}"
    );

    // Announcements flow again.
    let running = guard(claim(&a, "k1"));
    let mut watch = b.watch(&id_of("k1")).unwrap();
    let start = Instant::now();
    running.complete(created("k1")).unwrap();
    let at = woken(&mut watch, Duration::from_secs(10)).expect("not woken after the reconnect");
    let latency = at.duration_since(start);
    println!("after the reconnect: woken {latency:?} after the completion started");
    assert!(latency <= Duration::from_secs(1), "woken {latency:?} after");
    assert!(
        !was_woken(&mut idle),
        "nothing else changed for the idle key"
    );
}

#[test]
fn postgres_a_dropped_store_ends_its_listener() {
    let _server = alone();
    let pg = fresh_store("listener_dropped");
    let channel = pg.channel().to_owned();
    let writer = Store::from(pg.clone());
    let store = Store::from(pg.clone());
    listening(&store);
    flush_announcements(&writer, &store, "k1");
    let pids = listeners(Some(&channel));
    assert_eq!(pids.len(), 1, "one listener per store: {pids:?}");
    // The adapter handle and its pool outlive the store: only the store's
    // waiters were the listener's reason to run.
    drop(store);
    let gone = poll_until(Duration::from_secs(10), || {
        listeners(None).iter().all(|pid| !pids.contains(pid))
    })
    .expect("the listener's connection outlived its store by 10 s");
    println!("listener gone {gone:?} after its store was dropped");
    drop(pg);
}
