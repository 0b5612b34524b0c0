//! Two `idemkit proxy` processes over one PostgreSQL share every key: 60
//! concurrent retries with one key, spread over both, make one upstream call
//! (the upstream has no idempotency of its own and takes 300 ms). Leases are
//! decided on the database's clock. Needs scripts/with-postgres.sh (feature
//! `postgres`).
#![cfg(all(feature = "postgres", feature = "axum"))]

mod pg_support;
mod proxy_support;
mod support;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use proxy_support::{ProxyProcess, Upstream, config};
use support::{Reply, request};

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
    let barrier = Arc::new(Barrier::new(CLIENTS));
    let replies: Vec<Reply> = (0..CLIENTS)
        .map(|i| {
            let barrier = Arc::clone(&barrier);
            let addr = if i % 2 == 0 { a.addr } else { b.addr };
            std::thread::spawn(move || {
                let headers: [(&str, &[u8]); 3] = [
                    ("Content-Type", b"application/json"),
                    ("Idempotency-Key", b"fleet-1"),
                    ("X-Tenant-Id", b"acme"),
                ];
                barrier.wait();
                request(
                    addr,
                    "POST",
                    "/accounts/A/withdraw",
                    &headers,
                    br#"{"amount":10}"#,
                )
                .unwrap()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|h| h.join().unwrap())
        .collect();
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
        let headers: [(&str, &[u8]); 3] = [
            ("Content-Type", b"application/json"),
            ("Idempotency-Key", b"fleet-1"),
            ("X-Tenant-Id", b"acme"),
        ];
        let again = request(
            proxy.addr,
            "POST",
            "/accounts/A/withdraw",
            &headers,
            br#"{"amount":10}"#,
        )
        .unwrap();
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.body, first.body);
    }
    assert_eq!(upstream.calls("A"), 1);
}
