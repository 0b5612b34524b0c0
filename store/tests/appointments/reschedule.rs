//! `POST /appointments/{id}/reschedule` over HTTP against the service binary:
//! one key moves the booking once at the calendar provider however many
//! concurrent retries carry it, a retry replays the stored 200, the same key
//! with another slot is refused, and a tenant can never reach (or learn about)
//! another tenant's appointment. The calendar's own count of reschedules per
//! booking is the number of times the effect ran.
#![cfg(feature = "axum")]

use crate::support;

use std::sync::{Arc, Barrier};

use support::{Reply, Service};

const CLIENTS: usize = 50;

/// Books one appointment for `tenant` and returns its id.
fn book(service: &Service, tenant: &str, key: &[u8], slot: &str) -> String {
    let body = format!(r#"{{"customer_id":"c-1","slot_id":"{slot}"}}"#);
    let reply = service.post(Some(key), Some(tenant), body.as_bytes());
    assert_eq!(reply.status, 201, "booking: {reply:?}");
    reply.json()["id"].as_str().expect("id").to_owned()
}

/// The calendar's view of booking `id` of `tenant`.
fn booking(service: &Service, tenant: &str, id: &str) -> serde_json::Value {
    service
        .bookings(tenant)
        .into_iter()
        .find(|b| b["id"] == id)
        .unwrap_or_else(|| panic!("booking {id} of {tenant} at the calendar"))
}

fn reschedule_path(id: &str) -> String {
    format!("/appointments/{id}/reschedule")
}

#[test]
fn reschedule_runs_once_under_concurrent_retries_with_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let service = Arc::new(Service::start(
        dir.path(),
        &["--provider-latency-ms", "200"],
    ));
    let id = book(&service, "clinic-a", b"book-r1", "s-1");
    let path = reschedule_path(&id);
    let body = br#"{"slot_id":"s-2"}"#;

    let barrier = Arc::new(Barrier::new(CLIENTS));
    let replies: Vec<Reply> = (0..CLIENTS)
        .map(|_| {
            let (service, barrier, path) =
                (Arc::clone(&service), Arc::clone(&barrier), path.clone());
            std::thread::spawn(move || {
                barrier.wait();
                service.post_to(&path, Some(b"move-once-1"), Some("clinic-a"), body)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();

    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 200 && r.header("idempotent-replayed").is_none())
        .collect();
    let replays = replies
        .iter()
        .filter(|r| r.status == 200 && r.header("idempotent-replayed") == Some("true"))
        .count();
    let in_progress = replies
        .iter()
        .filter(|r| r.status == 409 && r.problem() == "request-in-progress")
        .count();
    assert_eq!(
        originals.len() + replays + in_progress,
        CLIENTS,
        "only 200, replay or 409 in progress: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(originals.len(), 1, "exactly one execution answered");
    let answer = originals[0].json();
    assert_eq!(answer["id"], id.as_str());
    assert_eq!(answer["slot_id"], "s-2");
    assert_eq!(answer["previous_slot_id"], "s-1");

    let at_calendar = booking(&service, "clinic-a", &id);
    assert_eq!(at_calendar["slot_id"], "s-2");
    assert_eq!(
        at_calendar["reschedules"], 1,
        "the calendar moved the booking once: {at_calendar}"
    );
    eprintln!(
        "{CLIENTS} concurrent reschedules with one key: 1 original 200, {replays} replays, \
         {in_progress} in-progress 409s; {} reschedule at the calendar",
        at_calendar["reschedules"]
    );
}

#[test]
fn reschedule_retry_replays_the_stored_answer() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let id = book(&service, "clinic-a", b"book-r2", "s-1");
    let path = reschedule_path(&id);
    let body = br#"{"slot_id":"s-3"}"#;

    let first = service.post_to(&path, Some(b"move-r2"), Some("clinic-a"), body);
    assert_eq!(first.status, 200, "{first:?}");
    assert_eq!(first.header("idempotent-replayed"), None);
    let retry = service.post_to(&path, Some(b"move-r2"), Some("clinic-a"), body);
    assert_eq!(retry.status, 200);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body, "byte-identical replay");
    assert_eq!(retry.header("content-type"), first.header("content-type"));

    let at_calendar = booking(&service, "clinic-a", &id);
    assert_eq!(at_calendar["slot_id"], "s-3");
    assert_eq!(at_calendar["reschedules"], 1, "the retry moved nothing");
}

#[test]
fn reschedule_same_key_with_another_slot_is_422() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let id = book(&service, "clinic-a", b"book-r3", "s-1");
    let path = reschedule_path(&id);

    let first = service.post_to(
        &path,
        Some(b"move-r3"),
        Some("clinic-a"),
        br#"{"slot_id":"s-4"}"#,
    );
    assert_eq!(first.status, 200, "{first:?}");
    let changed = service.post_to(
        &path,
        Some(b"move-r3"),
        Some("clinic-a"),
        br#"{"slot_id":"s-5"}"#,
    );
    assert_eq!(changed.status, 422);
    assert_eq!(changed.problem(), "idempotency-key-reused");

    let at_calendar = booking(&service, "clinic-a", &id);
    assert_eq!(
        at_calendar["slot_id"], "s-4",
        "the changed request did not run"
    );
    assert_eq!(at_calendar["reschedules"], 1);
}

/// The request line is part of what a key means: the key and body used to move
/// one appointment, sent to another appointment's path, is refused; it neither
/// replays the first answer (the client would believe the second one moved) nor
/// moves the second one.
#[test]
fn reschedule_of_another_appointment_with_the_same_key_and_body_is_422() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let first_id = book(&service, "clinic-a", b"book-r6", "s-1");
    let second_id = book(&service, "clinic-a", b"book-r7", "s-2");
    let body = br#"{"slot_id":"s-8"}"#;

    let first = service.post_to(
        &reschedule_path(&first_id),
        Some(b"move-r6"),
        Some("clinic-a"),
        body,
    );
    assert_eq!(first.status, 200, "{first:?}");
    let other = service.post_to(
        &reschedule_path(&second_id),
        Some(b"move-r6"),
        Some("clinic-a"),
        body,
    );
    assert_eq!(other.status, 422, "{other:?}");
    assert_eq!(other.problem(), "idempotency-key-reused");

    assert_eq!(booking(&service, "clinic-a", &first_id)["reschedules"], 1);
    let untouched = booking(&service, "clinic-a", &second_id);
    assert_eq!(
        untouched["slot_id"], "s-2",
        "the second appointment did not move"
    );
    assert_eq!(untouched["reschedules"], 0);
}

#[test]
fn reschedule_of_another_tenants_appointment_is_404() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let id = book(&service, "tenant-a", b"book-r4", "s-1");
    let body = br#"{"slot_id":"s-6"}"#;

    let foreign = service.post_to(
        &reschedule_path(&id),
        Some(b"move-r4"),
        Some("tenant-b"),
        body,
    );
    assert_eq!(foreign.status, 404, "{foreign:?}");
    assert_eq!(foreign.problem(), "appointment-not-found");
    let unknown = service.post_to(
        &reschedule_path("bk_999999"),
        Some(b"move-r4-unknown"),
        Some("tenant-b"),
        body,
    );
    assert_eq!(unknown.status, 404);
    // Another tenant's id and an unknown id are indistinguishable.
    assert_eq!(foreign.json(), unknown.json());
    let text = String::from_utf8_lossy(&foreign.body);
    assert!(!text.contains("s-1") && !text.contains(&id), "{text}");

    let at_calendar = booking(&service, "tenant-a", &id);
    assert_eq!(
        at_calendar["slot_id"], "s-1",
        "tenant a's booking untouched"
    );
    assert_eq!(at_calendar["reschedules"], 0);
    assert!(service.bookings("tenant-b").is_empty());

    // The owner can still reschedule it.
    let own = service.post_to(
        &reschedule_path(&id),
        Some(b"move-r4"),
        Some("tenant-a"),
        body,
    );
    assert_eq!(own.status, 200, "{own:?}");
    assert_eq!(booking(&service, "tenant-a", &id)["reschedules"], 1);
}

#[test]
fn reschedule_to_an_empty_slot_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let id = book(&service, "clinic-a", b"book-r5", "s-1");
    for (n, body) in [&br#"{"slot_id":""}"#[..], br#"{"slot":"s-2"}"#, b"[]"]
        .into_iter()
        .enumerate()
    {
        let key = format!("move-r5-{n}");
        let reply = service.post_to(
            &reschedule_path(&id),
            Some(key.as_bytes()),
            Some("clinic-a"),
            body,
        );
        assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(body));
        assert_eq!(reply.problem(), "invalid-appointment");
    }
    assert_eq!(booking(&service, "clinic-a", &id)["reschedules"], 0);
}

#[test]
fn reschedule_timed_out_at_the_calendar_is_reconciled_once() {
    let dir = tempfile::tempdir().unwrap();
    // The calendar answers after 600 ms; the service waits 200 ms.
    let service = Service::start(
        dir.path(),
        &[
            "--provider-latency-ms",
            "600",
            "--provider-timeout-ms",
            "200",
            "--reconcile-every-ms",
            "100",
            "--lease-ms",
            "300",
        ],
    );
    // Booking under the same timeout: wait for it to be reconciled too.
    let booked = service.post(
        Some(b"book-r6"),
        Some("clinic-a"),
        br#"{"customer_id":"c-1","slot_id":"s-1"}"#,
    );
    assert_eq!(booked.status, 504, "{booked:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let id = loop {
        let retry = service.post(
            Some(b"book-r6"),
            Some("clinic-a"),
            br#"{"customer_id":"c-1","slot_id":"s-1"}"#,
        );
        if retry.status == 201 {
            break retry.json()["id"].as_str().unwrap().to_owned();
        }
        // 409 while the outcome is unknown; 504 when the reconciler found no
        // booking yet and released the record, so the retry dispatched again
        // under the same persisted provider key.
        assert!(matches!(retry.status, 409 | 504), "{retry:?}");
        assert!(std::time::Instant::now() < deadline, "no 201 in time");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };

    let path = reschedule_path(&id);
    let body = br#"{"slot_id":"s-7"}"#;
    let first = service.post_to(&path, Some(b"move-r6"), Some("clinic-a"), body);
    assert_eq!(first.status, 504, "{first:?}");
    assert_eq!(first.problem(), "provider-timeout");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    // Until the reconciler has asked the calendar, retries are refused; the
    // calendar moves the appointment once whatever happens.
    let answer = loop {
        let retry = service.post_to(&path, Some(b"move-r6"), Some("clinic-a"), body);
        if retry.status == 200 {
            break retry;
        }
        // Refused while unknown, or (released by the reconciler before the
        // calendar acted) dispatched again under the same provider key.
        assert!(matches!(retry.status, 409 | 504), "{retry:?}");
        assert!(std::time::Instant::now() < deadline, "no 200 in time");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(answer.json()["slot_id"], "s-7");
    assert_eq!(answer.json()["previous_slot_id"], "s-1");
    let at_calendar = booking(&service, "clinic-a", &id);
    assert_eq!(at_calendar["slot_id"], "s-7");
    assert_eq!(at_calendar["reschedules"], 1, "moved once: {at_calendar}");
}
