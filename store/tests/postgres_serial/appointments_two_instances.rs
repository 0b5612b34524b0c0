//! Two appointments instances on different ports share one PostgreSQL database.
//!
//! 1. 100 clients send the same POST with one Idempotency-Key at the same moment,
//!    alternating between the two instances, while the calendar provider is slow
//!    (200 ms): exactly one booking in total. Each instance has its own simulated
//!    provider, which knows nothing of the other, so only idemkit's shared claim
//!    can keep the second instance from booking too.
//! 2. PostgreSQL is stopped: a POST with a new key gets 503
//!    `store-unavailable` with `Retry-After` from both instances and books nothing.
//!    It is started again: the client's retries complete, with one booking.
//!
//! Needs scripts/with-postgres.sh (feature `postgres`).

#![cfg(all(feature = "postgres", feature = "axum"))]

use crate::support;
use crate::support::pg as pg_support;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use support::{Reply, Service};

const CLIENTS: usize = 100;
const BODY: &[u8] = br#"{"customer_id":"c-1","slot_id":"2026-12-01T10:00"}"#;

fn start(url: &str, schema: &str, provider_db: &Path) -> Service {
    let args: Vec<std::ffi::OsString> = vec![
        "--postgres".into(),
        url.into(),
        "--pg-schema".into(),
        schema.into(),
        "--provider-db".into(),
        provider_db.into(),
        "--provider-latency-ms".into(),
        "200".into(),
    ];
    Service::spawn(support::postgres_example_binary(), &args)
}

fn pg_ctl(args: &[&str]) {
    let ctl = std::env::var("IDEMKIT_TEST_PG_CTL")
        .expect("IDEMKIT_TEST_PG_CTL is not set: run through scripts/with-postgres.sh");
    let mut cmd = match std::env::var("IDEMKIT_TEST_PG_RUNAS") {
        Ok(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user, "--", &ctl]);
            c
        }
        Err(_) => Command::new(&ctl),
    };
    assert!(
        cmd.args(args).status().unwrap().success(),
        "pg_ctl {args:?}"
    );
}

fn data_dir() -> String {
    std::env::var("IDEMKIT_TEST_PG_DATA")
        .expect("IDEMKIT_TEST_PG_DATA is not set: run through scripts/with-postgres.sh")
}

#[test]
fn two_instances_one_database_one_booking_and_503_while_it_is_down() {
    let _server = pg_support::alone();
    let url = pg_support::url();
    let data = data_dir();
    let port = std::env::var("IDEMKIT_TEST_PG_PORT").unwrap();
    let schema = pg_support::unique_schema("appt");
    let dir = tempfile::tempdir().unwrap();
    // The first instance migrates; the second finds the schema ready.
    let a = Arc::new(start(&url, &schema, &dir.path().join("provider-a.redb")));
    let b = Arc::new(start(&url, &schema, &dir.path().join("provider-b.redb")));
    let total_bookings = |tenant: &str| a.bookings(tenant).len() + b.bookings(tenant).len();

    // 1. One key, 100 concurrent POSTs over both instances.
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let started = Instant::now();
    let replies: Vec<Reply> = (0..CLIENTS)
        .map(|i| {
            let service = Arc::clone(if i % 2 == 0 { &a } else { &b });
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                service.post(Some(b"book-once-pg"), Some("clinic-a"), BODY)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let elapsed = started.elapsed();
    let originals = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .count();
    let replays = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_some())
        .count();
    let in_progress = replies.iter().filter(|r| r.status == 409).count();
    assert_eq!(
        originals + replays + in_progress,
        CLIENTS,
        "only 201, replay or 409: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(originals, 1, "exactly one execution answered");
    // After the dust settles both instances replay it.
    for s in [&a, &b] {
        let late = s.post(Some(b"book-once-pg"), Some("clinic-a"), BODY);
        assert_eq!(
            (late.status, late.header("idempotent-replayed")),
            (201, Some("true"))
        );
    }
    assert_eq!(
        total_bookings("clinic-a"),
        1,
        "one booking over both instances"
    );
    eprintln!(
        "two instances, {CLIENTS} concurrent POSTs in {elapsed:?}: 1 original, {replays} replays, \
         {in_progress} in-progress 409s; 1 booking"
    );

    // 2. PostgreSQL goes away mid-run.
    pg_ctl(&["-D", &data, "-m", "fast", "-w", "stop"]);
    let restart = || {
        let opts = format!("-c listen_addresses=127.0.0.1 -p {port} -k {data}");
        let log = format!("{data}/server.log");
        pg_ctl(&["-D", &data, "-l", &log, "-w", "-o", &opts, "start"]);
    };
    for s in [&a, &b] {
        let reply = s.post(Some(b"during-outage"), Some("clinic-b"), BODY);
        if reply.status != 503 {
            restart();
            panic!("expected 503 while PostgreSQL is down, got {reply:?}");
        }
        assert_eq!(reply.problem(), "store-unavailable");
        assert!(
            reply.header("retry-after").is_some(),
            "503 carries Retry-After"
        );
    }
    restart();
    assert_eq!(
        total_bookings("clinic-b"),
        0,
        "nothing executed without a claim"
    );
    // The client retries (alternating instances) until it gets its answer.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut statuses = Vec::new();
    let mut n = 0;
    let done = loop {
        assert!(
            Instant::now() < deadline,
            "retries never completed: {statuses:?}"
        );
        let s = if n % 2 == 0 { &a } else { &b };
        n += 1;
        let reply = s.post(Some(b"during-outage"), Some("clinic-b"), BODY);
        statuses.push(reply.status);
        match reply.status {
            201 => break reply,
            503 | 409 => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("unexpected {other}: {reply:?}"),
        }
    };
    assert_eq!(
        total_bookings("clinic-b"),
        1,
        "one booking after the restart"
    );
    let again = b.post(Some(b"during-outage"), Some("clinic-b"), BODY);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, done.body);
    eprintln!("outage: both instances answered 503; after restart, retries got {statuses:?}");
}
