//! A real I/O error on the store's file, then the cause removed: the service
//! serves again without a restart, and its health check said so truthfully.
//!
//! The fault is the one an operator meets: the running process's file-size
//! limit (RLIMIT_FSIZE) is dropped to one byte, as a full disk or a volume that
//! refuses writes would, so redb's next write fails with EFBIG and redb refuses
//! every later operation of that database ("Previous I/O error occurred").
//! While it lasts, every new key is 503 and the health check is 503 with the
//! reason; once the limit is restored, the store reopens its database on the
//! next request or health check, and new keys are 201 again within seconds.
//! Nothing acknowledged before the fault is lost, and nothing runs twice.
#![cfg(all(unix, feature = "axum"))]

mod proxy_support;
mod support;

use std::time::{Duration, Instant};

use proxy_support::{ProxyProcess, Upstream, post_json};
use rustix::process::{Pid, Resource, Rlimit, prlimit};
use support::{Reply, Service, request};

/// Sets the file-size limit of the process `pid` (its soft limit; `None`:
/// unlimited, as it was).
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let pid = Pid::from_raw(i32::try_from(pid).unwrap()).unwrap();
    let now = prlimit(
        Some(pid),
        Resource::Fsize,
        Rlimit {
            current: None,
            maximum: None,
        },
    )
    .expect("read the file-size limit");
    prlimit(
        Some(pid),
        Resource::Fsize,
        Rlimit {
            current: bytes,
            maximum: now.maximum,
        },
    )
    .expect("set the file-size limit");
}

/// Sends `send` until it answers `status`, or fails after `within`; the
/// answer and how long it took.
fn until_status(
    within: Duration,
    status: u16,
    mut send: impl FnMut() -> Reply,
) -> (Reply, Duration) {
    let started = Instant::now();
    loop {
        let reply = send();
        if reply.status == status {
            return (reply, started.elapsed());
        }
        assert!(
            started.elapsed() < within,
            "no {status} within {within:?}; last answer: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn book(service: &Service, key: &str, slot: &str) -> Reply {
    let body = format!(r#"{{"customer_id":"anna","slot_id":"{slot}"}}"#);
    service.post(Some(key.as_bytes()), Some("clinic-a"), body.as_bytes())
}

#[test]
fn appointments_serve_again_after_a_failed_write_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let before = book(&service, "before-fault", "s-1");
    assert_eq!(before.status, 201, "{before:?}");

    limit_file_size(service.child.id(), Some(1));
    let during = book(&service, "during-fault", "s-2");
    assert_eq!(during.status, 503, "{during:?}");
    assert!(during.header("retry-after").is_some());
    let health = service.get("/health", None);
    assert_eq!(health.status, 503, "{health:?}");
    let reason = health.json()["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(reason.contains("failed a write"), "{reason}");
    assert!(health.json()["since_ms"].as_u64().is_some(), "{health:?}");
    // Still unwritable a moment later: the fault has not gone by itself.
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(book(&service, "still-during", "s-3").status, 503);

    limit_file_size(service.child.id(), None);
    let (after, took) = until_status(Duration::from_secs(5), 201, || {
        book(&service, "after-fault", "s-4")
    });
    eprintln!("first 201 after the limit was restored: {took:?}");
    assert_eq!(after.header("idempotent-replayed"), None);
    let health = service.get("/health", None);
    assert_eq!(health.status, 200, "{health:?}");
    assert_eq!(health.json()["writable"], true);

    // Acknowledged before the fault: still there, replayed byte for byte.
    let replay = book(&service, "before-fault", "s-1");
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.body, before.body);
    // Refused during the fault (nothing was claimed): runs now, once.
    assert_eq!(book(&service, "during-fault", "s-2").status, 201);
    assert_eq!(
        book(&service, "during-fault", "s-2").header("idempotent-replayed"),
        Some("true")
    );
    let slots: Vec<String> = service
        .bookings("clinic-a")
        .iter()
        .map(|b| b["slot_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(slots.len(), 3, "one booking per key: {slots:?}");

    // And after a restart, the file holds all of it.
    drop(service);
    let restarted = Service::start(dir.path(), &[]);
    assert_eq!(restarted.bookings("clinic-a").len(), 3);
    assert_eq!(
        book(&restarted, "after-fault", "s-4").header("idempotent-replayed"),
        Some("true")
    );
}

const ADMIN_TOKEN: &str = "storage-fault-test-admin-token-0123456789abcdef";

fn withdraw(proxy: &ProxyProcess, key: &str) -> Reply {
    post_json(
        proxy.addr,
        "/accounts/A/withdraw",
        Some(key),
        Some("acme"),
        br#"{"amount":10}"#,
    )
}

fn admin_get(proxy: &ProxyProcess, path: &str) -> Reply {
    let bearer = format!("Bearer {ADMIN_TOKEN}");
    request(
        proxy.admin,
        "GET",
        path,
        &[("Authorization", bearer.as_bytes())],
        b"",
    )
    .unwrap()
}

#[test]
fn the_proxy_serves_again_after_a_failed_write_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::ZERO);
    let config = dir.path().join("proxy.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
upstream = "http://{upstream}"
admin = "127.0.0.1:0"
admin_token = "{ADMIN_TOKEN}"

[store]
path = {store:?}

[tenant]
header = "X-Tenant-Id"

[[routes]]
method = "POST"
path = "/accounts/{{account}}/withdraw"
operation = "accounts.withdraw"
effect = "external"
"#,
            upstream = upstream.addr,
            store = dir.path().join("proxy.redb"),
        ),
    )
    .unwrap();
    let proxy = ProxyProcess::start(&config);
    assert_eq!(withdraw(&proxy, "before-fault").status, 201);
    assert_eq!(admin_get(&proxy, "/healthz").status, 200);

    limit_file_size(proxy.child.id(), Some(1));
    assert_eq!(withdraw(&proxy, "during-fault").status, 503);
    let health = admin_get(&proxy, "/healthz");
    assert_eq!(health.status, 503, "{health:?}");
    assert!(health.json()["reason"].as_str().is_some(), "{health:?}");
    let metrics = String::from_utf8_lossy(&admin_get(&proxy, "/metrics").body).into_owned();
    assert!(metrics.contains("idemkit_store_writable 0"), "{metrics}");

    limit_file_size(proxy.child.id(), None);
    let (_, took) = until_status(Duration::from_secs(5), 201, || {
        withdraw(&proxy, "after-fault")
    });
    eprintln!("first 201 after the limit was restored: {took:?}");
    assert_eq!(admin_get(&proxy, "/healthz").status, 200);
    let metrics = String::from_utf8_lossy(&admin_get(&proxy, "/metrics").body).into_owned();
    assert!(metrics.contains("idemkit_store_writable 1"), "{metrics}");
    // One upstream call per key that was claimed; the refused one never went.
    assert_eq!(upstream.calls("A"), 2);
    let replay = withdraw(&proxy, "before-fault");
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
}
