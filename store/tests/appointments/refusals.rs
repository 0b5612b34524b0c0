//! What the service refuses, and that a refusal never books: a changed body
//! under a used key (422), missing / empty / 256-character / control-character
//! keys (400), no `Authorization` (401), and an empty `customer_id` or
//! `slot_id` (422 `invalid-appointment`).
#![cfg(feature = "axum")]

use crate::support;

use support::Service;

#[test]
fn refusals_never_book() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let body = br#"{"customer_id":"c-7","slot_id":"s-1"}"#;

    let first = service.post(Some(b"refusal-key"), Some("clinic-r"), body);
    assert_eq!(first.status, 201);

    // Same key, same meaning, different spelling: a replay, not a mismatch.
    let respelled = service.post(
        Some(b"refusal-key"),
        Some("clinic-r"),
        br#"{ "slot_id" : "s-1", "customer_id" : "c-7" }"#,
    );
    assert_eq!(respelled.status, 201);
    assert_eq!(respelled.header("idempotent-replayed"), Some("true"));
    assert_eq!(respelled.body, first.body);

    let changed = service.post(
        Some(b"refusal-key"),
        Some("clinic-r"),
        br#"{"customer_id":"c-7","slot_id":"s-2"}"#,
    );
    assert_eq!(changed.status, 422);
    assert_eq!(changed.problem(), "idempotency-key-reused");

    let missing = service.post(None, Some("clinic-r"), body);
    assert_eq!(missing.status, 400);
    assert_eq!(missing.problem(), "missing-idempotency-key");

    let long = vec![b'k'; 256];
    let control: &[u8] = b"abc\tdef";
    for (what, key, code) in [
        ("empty", &b""[..], "key-empty"),
        ("quoted empty", &b"\"\""[..], "key-empty"),
        ("256 characters", &long[..], "key-too-long"),
        ("control character", control, "key-invalid-character"),
    ] {
        let reply = service.post(Some(key), Some("clinic-r"), body);
        assert_eq!(reply.status, 400, "{what}");
        assert_eq!(reply.problem(), "invalid-idempotency-key", "{what}");
        assert_eq!(reply.json()["code"], code, "{what}");
    }

    let anonymous = service.post(Some(b"anon-key"), None, body);
    assert_eq!(anonymous.status, 401);
    assert_eq!(anonymous.problem(), "unauthenticated");
    assert_eq!(service.get("/appointments", None).status, 401);

    let bookings = service.bookings("clinic-r");
    assert_eq!(
        bookings.len(),
        1,
        "only the first request booked: {bookings:?}"
    );
    assert_eq!(bookings[0]["slot_id"], "s-1");
}

#[test]
fn empty_customer_or_slot_is_refused_not_booked() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    for (n, body) in [
        &br#"{"customer_id":"","slot_id":"s-1"}"#[..],
        br#"{"customer_id":"c-1","slot_id":""}"#,
        br#"{"customer_id":"","slot_id":""}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("empty-field-{n}");
        let reply = service.post(Some(key.as_bytes()), Some("clinic-e"), body);
        assert_eq!(reply.status, 422, "{}", String::from_utf8_lossy(body));
        assert_eq!(reply.problem(), "invalid-appointment");
    }
    let bookings = service.bookings("clinic-e");
    assert!(bookings.is_empty(), "nothing booked: {bookings:?}");
}
