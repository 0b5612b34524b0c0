//! The messaging provider fails the first two confirmations. The booking step is
//! recorded done before `notify` runs, so each retry with the same key resumes at
//! `notify` (with its persisted provider key) and the calendar is never asked
//! to book again.
#![cfg(feature = "axum")]

use crate::support;

use support::Service;

#[test]
fn retries_resume_at_notify_without_booking_again() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(
        dir.path(),
        &["--fail-notify", "2", "--reconcile-every-ms", "60000"],
    );
    let body = br#"{"customer_id":"c-5","slot_id":"s-5"}"#;

    for attempt in 1..=2 {
        let reply = service.post(Some(b"notify-key"), Some("clinic-n"), body);
        assert_eq!(reply.status, 503, "attempt {attempt}");
        assert_eq!(reply.problem(), "notification-failed");
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert_eq!(
            service.bookings("clinic-n").len(),
            1,
            "booked once, at attempt 1"
        );
    }
    let third = service.post(Some(b"notify-key"), Some("clinic-n"), body);
    assert_eq!(third.status, 201);
    assert_eq!(
        third.header("idempotent-replayed"),
        None,
        "attempt 3 executed notify"
    );
    let bookings = service.bookings("clinic-n");
    assert_eq!(bookings.len(), 1);
    assert_eq!(third.json()["id"], bookings[0]["id"]);
    assert!(third.json()["confirmation_id"].as_str().is_some());

    let fourth = service.post(Some(b"notify-key"), Some("clinic-n"), body);
    assert_eq!(fourth.header("idempotent-replayed"), Some("true"));
    assert_eq!(fourth.body, third.body);
}
