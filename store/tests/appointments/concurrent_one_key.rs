//! 100 clients send the same POST with one Idempotency-Key at the same moment,
//! while the calendar provider is slow (200 ms): exactly one booking reaches the
//! provider, and every client gets the 201, a byte-identical replay of it marked
//! `Idempotent-Replayed: true`, or a 409 `request-in-progress` with `Retry-After`;
//! a second wave of 100 after completion gets 100 byte-identical replays.
#![cfg(feature = "axum")]

use crate::support;

use std::sync::{Arc, Barrier};
use std::time::Instant;

use support::{Reply, Service};

const CLIENTS: usize = 100;

#[test]
fn one_key_one_booking_under_100_concurrent_posts() {
    let dir = tempfile::tempdir().unwrap();
    let service = Arc::new(Service::start(
        dir.path(),
        &["--provider-latency-ms", "200"],
    ));
    let body = br#"{"customer_id":"c-1","slot_id":"2026-12-01T10:00"}"#;
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let started = Instant::now();
    let replies: Vec<Reply> = (0..CLIENTS)
        .map(|_| {
            let (service, barrier) = (Arc::clone(&service), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                service.post(Some(b"book-once-1"), Some("clinic-a"), body)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    let elapsed = started.elapsed();

    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .collect();
    let replays: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_some())
        .collect();
    let in_progress: Vec<&Reply> = replies.iter().filter(|r| r.status == 409).collect();
    assert_eq!(
        originals.len() + replays.len() + in_progress.len(),
        CLIENTS,
        "only 201, replay or 409: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(originals.len(), 1, "exactly one execution answered");
    for conflict in &in_progress {
        assert_eq!(conflict.problem(), "request-in-progress");
        let after: u64 = conflict.header("retry-after").unwrap().parse().unwrap();
        assert!(after >= 1);
    }

    // A retry after the dust settles is a replay too.
    let late = service.post(Some(b"book-once-1"), Some("clinic-a"), body);
    let original = originals[0];
    for replay in replays.iter().copied().chain(std::iter::once(&late)) {
        assert_eq!(replay.status, 201);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.body, original.body, "byte-identical body");
        for name in ["content-type", "location"] {
            assert_eq!(replay.header(name), original.header(name), "{name}");
        }
    }

    // A second wave of 100 at once, after completion: all byte-identical replays.
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let second: Vec<Reply> = (0..CLIENTS)
        .map(|_| {
            let (service, barrier) = (Arc::clone(&service), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                service.post(Some(b"book-once-1"), Some("clinic-a"), body)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
    for replay in &second {
        assert_eq!(replay.status, 201);
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        assert_eq!(replay.body, original.body);
        assert_eq!(replay.header("location"), original.header("location"));
    }

    let bookings = service.bookings("clinic-a");
    assert_eq!(
        bookings.len(),
        1,
        "one booking at the provider: {bookings:?}"
    );
    assert_eq!(bookings[0]["id"], original.json()["id"]);
    eprintln!(
        "{CLIENTS} concurrent POSTs in {elapsed:?}: 1 original 201, {} replays, {} in-progress 409s; then {CLIENTS} concurrent replays; {} booking",
        replays.len(),
        in_progress.len(),
        bookings.len()
    );
}
