//! Two `idemkit proxy` processes over one PostgreSQL share every key: 60
//! concurrent retries with one key, spread over both, make one upstream call
//! (the upstream has no idempotency of its own and takes 300 ms). Leases are
//! decided on the database's clock. A retry that asks to wait on one proxy is
//! answered when the other records, through PostgreSQL's notification (and
//! still when that notification connection is killed). Needs
//! scripts/with-postgres.sh (feature `postgres`).
#![cfg(all(feature = "postgres", feature = "axum"))]

use crate::support;
use crate::support::idemkit_proxy as proxy_support;
use crate::support::pg as pg_support;

use std::time::{Duration, Instant};

use proxy_support::{ProxyProcess, Upstream, config, post_json, simultaneous_withdrawals};

const CLIENTS: usize = 60;

#[test]
fn two_proxies_over_one_postgres_make_one_upstream_call_for_sixty_retries() {
    let upstream = Upstream::start(Duration::from_millis(300));
    let schema = pg_support::unique_schema("proxy_fleet");
    let store = format!(
        "postgres = {:?}\nschema = {schema:?}\npool_size = 8",
        pg_support::url()
    );
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = ProxyProcess::start(&config(dir_a.path(), upstream.addr, &store, ""));
    let b = ProxyProcess::start(&config(dir_b.path(), upstream.addr, &store, ""));
    let replies =
        simultaneous_withdrawals(&[a.addr, b.addr], CLIENTS, "fleet-1", br#"{"amount":10}"#);
    assert_eq!(
        upstream.calls("A"),
        1,
        "one upstream call across both proxies"
    );
    let originals = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .count();
    assert_eq!(originals, 1, "{replies:?}");
    assert!(
        replies.iter().all(|r| r.status == 201 || r.status == 409),
        "{replies:?}"
    );
    // Afterwards both proxies replay the same stored answer.
    let first = replies.iter().find(|r| r.status == 201).unwrap();
    for proxy in [&a, &b] {
        let again = post_json(
            proxy.addr,
            "/accounts/A/withdraw",
            Some("fleet-1"),
            Some("acme"),
            br#"{"amount":10}"#,
        );
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.body, first.body);
    }
    assert_eq!(upstream.calls("A"), 1);
}

/// `POST` the withdrawal with `key` through `addr`, asking to wait 10 s; the
/// reply and when it came.
fn waiting_withdrawal(addr: std::net::SocketAddr, key: &str) -> (support::Reply, Instant) {
    let reply = support::request(
        addr,
        "POST",
        "/accounts/A/withdraw",
        &[
            ("Content-Type", b"application/json"),
            ("Idempotency-Key", key.as_bytes()),
            ("X-Tenant-Id", b"acme"),
            ("Prefer", b"wait=10"),
        ],
        br#"{"amount":10}"#,
    )
    .unwrap();
    (reply, Instant::now())
}

/// The first attempt of `key` through `a`, and while it runs at the upstream a
/// waiting retry through `b` (after `meanwhile`): how long after `a`'s answer
/// `b`'s came.
fn retry_on_b_waits_for_a(
    a: &ProxyProcess,
    b: &ProxyProcess,
    upstream: &Upstream,
    key: &str,
    meanwhile: impl FnOnce(),
) -> Duration {
    let calls_before = upstream.calls("A");
    let (a_addr, b_addr) = (a.addr, b.addr);
    let key_a = key.to_owned();
    let first = std::thread::spawn(move || {
        let reply = post_json(
            a_addr,
            "/accounts/A/withdraw",
            Some(&key_a),
            Some("acme"),
            br#"{"amount":10}"#,
        );
        (reply, Instant::now())
    });
    let until = Instant::now() + Duration::from_secs(5);
    while upstream.calls("A") == calls_before {
        assert!(Instant::now() < until, "the upstream was called");
        std::thread::sleep(Duration::from_millis(5));
    }
    let key_b = key.to_owned();
    let waiter = std::thread::spawn(move || waiting_withdrawal(b_addr, &key_b));
    std::thread::sleep(Duration::from_millis(300));
    meanwhile();
    let (original, answered) = first.join().unwrap();
    let (retry, at) = waiter.join().unwrap();
    assert_eq!(original.status, 201, "{original:?}");
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.header("preference-applied"), Some("wait=10"));
    assert_eq!(retry.body, original.body);
    assert_eq!(upstream.calls("A"), calls_before + 1, "one upstream call");
    at.saturating_duration_since(answered)
}

/// A retry held on proxy B is answered when proxy A records the first
/// attempt, through PostgreSQL's notification, within a second; with B's
/// notification connection killed while it waits, its fallback poll (or the
/// reconnected channel) still answers it.
#[test]
fn a_retry_waiting_on_one_proxy_is_answered_when_the_other_records() {
    let upstream = Upstream::start(Duration::from_secs(2));
    let schema = pg_support::unique_schema("proxy_wait");
    let store = format!(
        "postgres = {:?}\nschema = {schema:?}\npool_size = 4",
        pg_support::url()
    );
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = ProxyProcess::start_patient(dir_a.path(), upstream.addr, &store);
    let b = ProxyProcess::start_patient(dir_b.path(), upstream.addr, &store);

    let lag = retry_on_b_waits_for_a(&a, &b, &upstream, "wait-fleet-1", || {});
    eprintln!("notified: B answered {lag:?} after A");
    assert!(lag < Duration::from_secs(1), "B answered {lag:?} after A");

    let lag = retry_on_b_waits_for_a(&a, &b, &upstream, "wait-fleet-2", || {
        let mut client = postgres::Client::connect(&pg_support::url(), postgres::NoTls).unwrap();
        let killed: i64 = client
            .query_one(
                "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = 'idemkit-listen') t",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(killed >= 1, "a listening connection was there to kill");
    });
    eprintln!("listener killed: B answered {lag:?} after A");
    assert!(lag < Duration::from_secs(2), "B answered {lag:?} after A");
}
