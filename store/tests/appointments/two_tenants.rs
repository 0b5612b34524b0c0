//! A key is an identifier within a tenant, never across tenants: the same key
//! and body sent by two tenants are two operations and make two bookings, each
//! visible only to its tenant; and the files that hold every tenant's records
//! are readable by the service's user alone.
#![cfg(feature = "axum")]

use crate::support;

use support::Service;

#[test]
fn same_key_two_tenants_two_bookings() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let body = br#"{"customer_id":"c-1","slot_id":"s-9"}"#;

    let a = service.post(Some(b"shared-key-1"), Some("tenant-a"), body);
    let b = service.post(Some(b"shared-key-1"), Some("tenant-b"), body);
    assert_eq!(a.status, 201);
    assert_eq!(b.status, 201);
    assert_eq!(
        b.header("idempotent-replayed"),
        None,
        "tenant b executed, not a replay of a"
    );
    assert_ne!(a.json()["id"], b.json()["id"]);

    // Each tenant's retry replays its own outcome.
    let a2 = service.post(Some(b"shared-key-1"), Some("tenant-a"), body);
    assert_eq!(a2.header("idempotent-replayed"), Some("true"));
    assert_eq!(a2.body, a.body);

    let booked_a = service.bookings("tenant-a");
    let booked_b = service.bookings("tenant-b");
    assert_eq!(booked_a.len(), 1);
    assert_eq!(booked_b.len(), 1);
    assert_eq!(booked_a[0]["id"], a.json()["id"]);
    assert_eq!(booked_b[0]["id"], b.json()["id"]);
}

/// The service's store holds raw keys and response bodies, and the simulated
/// providers' file holds customers' bookings and messages: both were created
/// 0644, readable by every user of the machine. They are created 0600.
#[cfg(unix)]
#[test]
fn the_service_creates_its_data_files_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let booked = service.post(
        Some(b"private-1"),
        Some("tenant-a"),
        br#"{"customer_id":"c-1","slot_id":"s-9"}"#,
    );
    assert_eq!(booked.status, 201);
    for file in ["appointments.redb", "provider.redb"] {
        let mode = std::fs::metadata(dir.path().join(file))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600, "{file}: {mode:o}");
    }
}
