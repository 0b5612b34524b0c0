//! The crash window: the process dies right after the calendar provider
//! accepted a booking and before idemkit recorded the outcome. The provider key
//! of step `book` was persisted before dispatch, so the restarted service finds
//! the booking under that key, finishes the record (sending the confirmation
//! with its own persisted key), and the client's retry gets the 201 for the one
//! booking — never a second booking.
#![cfg(feature = "axum")]

mod support;

use std::time::{Duration, Instant};

use support::{Service, post_until_final};

#[test]
fn crash_after_provider_then_retry_books_once() {
    let dir = tempfile::tempdir().unwrap();
    let body = br#"{"customer_id":"c-42","slot_id":"2026-12-24T09:00"}"#;
    let args = ["--crash-after-provider", "--lease-ms", "1000"];

    let service = Service::start(dir.path(), &args);
    let addr = service.addr;
    let first = support::request(
        addr,
        "POST",
        "/appointments",
        &[
            ("Content-Type", b"application/json"),
            ("Idempotency-Key", b"crash-key-1"),
            ("Authorization", b"Bearer clinic-c"),
        ],
        body,
    );
    assert!(
        first.is_err(),
        "the process died before answering: {first:?}"
    );
    let status = service.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "aborted: {status:?}");

    // Restarted with the same switch: the crash happens once per provider db.
    let started = Instant::now();
    let service = Service::start(dir.path(), &args);
    let restart = started.elapsed();
    let (reply, interim) = post_until_final(
        &service,
        b"crash-key-1",
        "clinic-c",
        body,
        Duration::from_secs(20),
    );
    assert_eq!(
        reply.status,
        201,
        "{:?}",
        String::from_utf8_lossy(&reply.body)
    );
    let bookings = service.bookings("clinic-c");
    assert_eq!(bookings.len(), 1, "one booking: {bookings:?}");
    assert_eq!(reply.json()["id"], bookings[0]["id"]);
    assert!(reply.json()["confirmation_id"].as_str().is_some());

    // And from now on, plain replays.
    let again = service.post(Some(b"crash-key-1"), Some("clinic-c"), body);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.body, reply.body);
    eprintln!(
        "crash window: restart + reconcile {restart:?}, {} interim answers, final 201 replayed={:?}, {} booking",
        interim.len(),
        reply.header("idempotent-replayed"),
        bookings.len()
    );
}
