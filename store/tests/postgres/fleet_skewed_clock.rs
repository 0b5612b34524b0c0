//! A fleet whose clocks disagree: two appointments instances over one PostgreSQL
//! database, the second one running under libfaketime 120 s ahead of the first.
//!
//! A booking starts on the honest instance (the calendar provider is slow). While
//! it runs, the client's retry with the same key reaches the instance whose clock
//! is two minutes ahead. By that instance's clock the lease expired long ago, but
//! lease decisions on PostgreSQL use the database's clock: the retry answers 409
//! `request-in-progress` (with a `Retry-After` within the lease), the skewed
//! instance's reconciler leaves the live lease alone, the first client gets its
//! 201, and the providers saw exactly one booking.
//!
//! Needs scripts/with-postgres.sh (feature `postgres`) and the Debian package
//! `faketime` (scripts/test-all.sh installs it when missing).

#![cfg(all(feature = "postgres", feature = "axum"))]

use crate::support;
use crate::support::pg as pg_support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime};

use idemkit::adapters::postgres::PostgresAdapter;
use idemkit::core::record::{RecordState, StateName};
use idemkit::store::Store;
use support::{Reply, Service};

const BODY: &[u8] = br#"{"customer_id":"c-9","slot_id":"2026-12-01T11:00"}"#;
const KEY: &[u8] = b"skewed-fleet-1";
const TENANT: &str = "clinic-skew";
/// How far ahead the second instance's clock runs.
const SKEW_SECS: u64 = 120;
/// The execution lease (the example's default, renewed every third of it).
const LEASE_MS: u64 = 3_000;
/// Long enough that the retry lands while the booking is still at the provider.
const PROVIDER_LATENCY_MS: u64 = 8_000;

/// libfaketime's multi-threaded preload library, from the `faketime` package.
fn libfaketime() -> PathBuf {
    let candidates = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|dir| dir.path().join("faketime/libfaketimeMT.so.1"))
        .chain([PathBuf::from("/usr/lib/faketime/libfaketimeMT.so.1")]);
    for path in candidates {
        if path.is_file() {
            return path;
        }
    }
    panic!(
        "libfaketimeMT.so.1 not found: install the Debian package `faketime` \
         (scripts/test-all.sh does: apt-get install -y faketime)"
    )
}

/// An appointments instance on the shared schema; `skew` runs it under libfaketime.
fn start(url: &str, schema: &str, provider_db: &Path, skew: Option<u64>) -> Service {
    let mut command = Command::new(support::postgres_example_binary());
    command.args([
        "--postgres",
        url,
        "--pg-schema",
        schema,
        "--provider-latency-ms",
        &PROVIDER_LATENCY_MS.to_string(),
        "--lease-ms",
        &LEASE_MS.to_string(),
        // Reconcile often, so a reconciler misreading the lease acts mid-booking.
        "--reconcile-every-ms",
        "100",
    ]);
    command.arg("--provider-db").arg(provider_db);
    if let Some(secs) = skew {
        command
            .env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", format!("+{secs}s"))
            // Only the wall clock is skewed: tokio's timers (monotonic) stay real.
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("FAKETIME_NO_CACHE", "1");
    }
    Service::spawn_command(command)
}

/// The wall clock of an instance, from the `Date` header it answers with.
fn clock_of(service: &Service) -> SystemTime {
    let reply = service.get("/health", None);
    let date = reply
        .header("date")
        .expect("the service sends a Date header");
    httpdate::parse_http_date(date).unwrap_or_else(|e| panic!("Date {date:?}: {e}"))
}

/// Waits until the record of the booking is Running with its `book` step begun:
/// the honest instance is at the provider.
fn wait_until_booking_runs(store: &Store) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let running = store.list(Some(StateName::Running)).unwrap();
        if running.iter().any(|r| {
            matches!(r.record.state, RecordState::Running { .. })
                && r.record.steps.iter().any(|s| s.name == "book")
        }) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the booking never reached the provider: {running:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn retry_on_an_instance_two_minutes_ahead_waits_for_the_running_booking() {
    let url = pg_support::url();
    let schema = pg_support::unique_schema("skew");
    let dir = tempfile::tempdir().unwrap();
    let honest = start(&url, &schema, &dir.path().join("provider-a.redb"), None);
    let ahead = start(
        &url,
        &schema,
        &dir.path().join("provider-b.redb"),
        Some(SKEW_SECS),
    );
    // libfaketime really moved the second instance's clock (else the test proves nothing).
    let skew = clock_of(&ahead)
        .duration_since(clock_of(&honest))
        .unwrap_or_default();
    assert!(
        skew >= Duration::from_secs(SKEW_SECS - 10),
        "the skewed instance is only {skew:?} ahead"
    );
    let observer =
        Store::from(PostgresAdapter::connect_with(&url, pg_support::options(&schema, 1)).unwrap());

    // The first client books on the honest instance; the provider takes its time.
    let (first, retry_after) = std::thread::scope(|s| {
        let first = s.spawn(|| honest.post(Some(KEY), Some(TENANT), BODY));
        wait_until_booking_runs(&observer);

        // Its retry reaches the instance whose clock is two minutes ahead.
        let retry = ahead.post(Some(KEY), Some(TENANT), BODY);
        assert_eq!(
            (retry.status, retry.problem()),
            (409, "request-in-progress".to_owned()),
            "a retry mid-booking on the skewed instance: {}",
            String::from_utf8_lossy(&retry.body)
        );
        let retry_after: u64 = retry
            .header("retry-after")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("409 without a numeric Retry-After: {retry:?}"));
        assert!(
            (1..=LEASE_MS.div_ceil(1000)).contains(&retry_after),
            "Retry-After {retry_after} s is not within the {LEASE_MS} ms lease (the database's clock)"
        );
        (first.join().unwrap(), retry_after)
    });
    assert_eq!(
        (first.status, first.header("idempotent-replayed")),
        (201, None),
        "the first client gets its booking: {first:?}"
    );

    // Both instances replay it now, and there is one booking in all.
    for service in [&honest, &ahead] {
        let late: Reply = service.post(Some(KEY), Some(TENANT), BODY);
        assert_eq!(
            (late.status, late.header("idempotent-replayed")),
            (201, Some("true")),
            "{late:?}"
        );
        assert_eq!(late.body, first.body);
    }
    let bookings = honest.bookings(TENANT).len() + ahead.bookings(TENANT).len();
    assert_eq!(bookings, 1, "the providers saw exactly one booking");
    let unresolved = observer.list(Some(StateName::Unknown)).unwrap();
    assert!(
        unresolved.is_empty(),
        "no record left Unknown: {unresolved:?}"
    );
    eprintln!(
        "skewed fleet: instance {skew:?} ahead answered 409 request-in-progress \
         (Retry-After {retry_after} s), first client 201, 1 booking"
    );
}
