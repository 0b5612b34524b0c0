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
//!
//! The processes run with the store's write-ahead log off (`IDEMKIT_WAL=off`):
//! the log writes into space its file already has, so a file-size limit does
//! not stop it, and the first write to fail would be whichever next needs the
//! redb file to grow. With the log off that is the very next one. The log's own
//! failures are tested beside it (`adapters::redb::wal`).
#![cfg(all(unix, feature = "axum"))]

use crate::support;
use crate::support::idemkit_proxy as proxy_support;

use std::time::{Duration, Instant};

use proxy_support::{ProxyProcess, Upstream, config};
use rustix::process::{Pid, Resource, Rlimit, prlimit};
use support::{Reply, Service, request};

/// Every write a durable redb commit, so the first one after the limit fails.
const WITHOUT_LOG: &[(&str, &str)] = &[("IDEMKIT_WAL", "off")];

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
    let service = Service::start_with_env(dir.path(), &[], WITHOUT_LOG);
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
    let restarted = Service::start_with_env(dir.path(), &[], WITHOUT_LOG);
    assert_eq!(restarted.bookings("clinic-a").len(), 3);
    assert_eq!(
        book(&restarted, "after-fault", "s-4").header("idempotent-replayed"),
        Some("true")
    );
}

fn withdraw(proxy: &ProxyProcess, key: &str) -> Reply {
    proxy_support::post_withdrawal(proxy, key, br#"{"amount":10}"#)
}

#[test]
fn the_proxy_serves_again_after_a_failed_write_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::ZERO);
    let store = format!("path = {:?}", dir.path().join("proxy.redb"));
    let config = config(dir.path(), upstream.addr, &store, "");
    let proxy = ProxyProcess::start_with_env(&config, WITHOUT_LOG);
    assert_eq!(withdraw(&proxy, "before-fault").status, 201);
    assert_eq!(proxy.admin("GET", "/healthz", b"").status, 200);

    limit_file_size(proxy.child.id(), Some(1));
    assert_eq!(withdraw(&proxy, "during-fault").status, 503);
    let health = proxy.admin("GET", "/healthz", b"");
    assert_eq!(health.status, 503, "{health:?}");
    assert!(health.json()["reason"].as_str().is_some(), "{health:?}");
    let metrics = String::from_utf8_lossy(&proxy.admin("GET", "/metrics", b"").body).into_owned();
    assert!(metrics.contains("idemkit_store_writable 0"), "{metrics}");

    limit_file_size(proxy.child.id(), None);
    let (_, took) = until_status(Duration::from_secs(5), 201, || {
        withdraw(&proxy, "after-fault")
    });
    eprintln!("first 201 after the limit was restored: {took:?}");
    assert_eq!(proxy.admin("GET", "/healthz", b"").status, 200);
    let metrics = String::from_utf8_lossy(&proxy.admin("GET", "/metrics", b"").body).into_owned();
    assert!(metrics.contains("idemkit_store_writable 1"), "{metrics}");
    // One upstream call per key that was claimed; the refused one never went.
    assert_eq!(upstream.calls("A"), 2);
    let replay = withdraw(&proxy, "before-fault");
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
}

/// The MCP gateway shares the proxy's admin listener: while its store cannot
/// write, a protected `tools/call` is refused with the store-unavailable error
/// (nothing forwarded) and `/healthz` is 503; once the limit is lifted, the
/// health checks alone bring the store back.
#[test]
fn the_mcp_gateway_health_tells_the_truth_and_comes_back() {
    let dir = tempfile::tempdir().unwrap();
    // No server needs to answer: the claim is what fails.
    let config = support::mcp::gateway_config(
        dir.path(),
        "http://127.0.0.1:9/mcp",
        "[[tools]]\nname = \"book\"\neffect = \"external\"\n",
    );
    let gateway = support::mcp::Gateway::start_with_env(&config, WITHOUT_LOG);
    assert_eq!(gateway.admin_get("/healthz").status, 200);

    limit_file_size(gateway.pid(), Some(1));
    let call = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "book",
            "arguments": { "slot": "s-1" },
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.idemkit/idempotency-key": "during-fault",
            },
        },
    })
    .to_string();
    let refused = request(
        gateway.addr,
        "POST",
        "/mcp",
        &[
            ("Content-Type", b"application/json"),
            ("Accept", b"application/json, text/event-stream"),
            ("MCP-Protocol-Version", b"2026-07-28"),
            ("Mcp-Method", b"tools/call"),
            ("Mcp-Name", b"book"),
        ],
        call.as_bytes(),
    )
    .unwrap();
    let text = String::from_utf8_lossy(&refused.body).into_owned();
    assert!(text.contains("idempotency_store_unavailable"), "{text}");
    let health = gateway.admin_get("/healthz");
    assert_eq!(health.status, 503, "{health:?}");

    limit_file_size(gateway.pid(), None);
    let (_, took) = until_status(Duration::from_secs(5), 200, || {
        gateway.admin_get("/healthz")
    });
    eprintln!("the gateway's health was 200 again {took:?} after the limit was restored");
}
