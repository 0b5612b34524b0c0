//! Two `idemkit proxy` processes over one PostgreSQL share every key: 60
//! concurrent retries with one key, spread over both, make one upstream call
//! (the upstream has no idempotency of its own and takes 300 ms). Leases are
//! decided on the database's clock. Needs scripts/with-postgres.sh (feature
//! `postgres`).
#![cfg(all(feature = "postgres", feature = "axum"))]

use crate::support::idemkit_proxy as proxy_support;
use crate::support::pg as pg_support;

use std::time::Duration;

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
