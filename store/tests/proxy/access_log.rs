//! `idemkit proxy`'s access log (`access_log`): one JSON line per answered
//! request naming its route and what the route's claim decided, never its
//! key, query or body; reopened on SIGHUP after a rotation, and flushed when
//! the proxy stops.
#![cfg(feature = "cli")]

use crate::support::idemkit_proxy as proxy_support;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::request;
use proxy_support::{ProxyProcess, Upstream, config_with, post_json};

const BODY: &[u8] = br#"{"amount":10,"request_id":"r-1"}"#;
const OTHER: &[u8] = br#"{"amount":99,"request_id":"r-1"}"#;
const WITHDRAW: &str = "/accounts/A/withdraw";

/// The access log's lines so far.
fn lines(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn each_request_is_a_line_naming_its_claim_and_a_rotated_log_is_reopened_on_sighup() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("access.jsonl");
    let rotated = dir.path().join("access.jsonl.1");
    let upstream = Upstream::start(Duration::ZERO);
    let store = format!("path = \"{}\"", dir.path().join("proxy.redb").display());
    let access_log = format!("access_log = \"{}\"", log.display());
    let mut proxy = ProxyProcess::start(&config_with(
        dir.path(),
        upstream.addr,
        &store,
        &access_log,
        "",
    ));

    let query = format!("{WITHDRAW}?token=secret-in-a-query");
    let statuses = [
        post_json(proxy.addr, &query, Some("k-log"), Some("acme"), BODY).status,
        post_json(proxy.addr, &query, Some("k-log"), Some("acme"), BODY).status,
        post_json(proxy.addr, &query, Some("k-log"), Some("acme"), OTHER).status,
        post_json(proxy.addr, WITHDRAW, None, Some("acme"), BODY).status,
        request(proxy.addr, "GET", "/accounts/A", &[], b"")
            .unwrap()
            .status,
    ];
    assert_eq!(statuses[..4], [201, 201, 422, 400], "{statuses:?}");

    // Rotated: the next lines go to a new file once the proxy got SIGHUP.
    let deadline = Instant::now() + Duration::from_secs(10);
    while lines(&log).len() < statuses.len() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::rename(&log, &rotated).unwrap();
    proxy.signal("HUP");
    let mut after = 0;
    while lines(&log).is_empty() && Instant::now() < deadline {
        after += 1;
        let key = format!("k-after-{after}");
        let reply = post_json(proxy.addr, WITHDRAW, Some(&key), Some("acme"), BODY);
        assert_eq!(reply.status, 201);
        std::thread::sleep(Duration::from_millis(50));
    }
    proxy.signal("TERM");
    let (status, stderr) = proxy.wait_exit_with_stderr(Duration::from_secs(20));
    assert!(status.success(), "{status:?}: {stderr}");

    let before = lines(&rotated);
    let field = |line: &serde_json::Value, name: &str| line.get(name).cloned();
    let claims: Vec<_> = before
        .iter()
        .take(5)
        .map(|l| {
            (
                l["method"].as_str().unwrap().to_owned(),
                l["path"].as_str().unwrap().to_owned(),
                l["status"].as_u64().unwrap(),
                field(l, "operation"),
                field(l, "claim"),
            )
        })
        .collect();
    let withdraw = || Some(serde_json::json!("accounts.withdraw"));
    let claim = |c: &str| Some(serde_json::json!(c));
    assert_eq!(
        claims,
        [
            (
                "POST".into(),
                WITHDRAW.into(),
                201,
                withdraw(),
                claim("execute")
            ),
            (
                "POST".into(),
                WITHDRAW.into(),
                201,
                withdraw(),
                claim("replay")
            ),
            (
                "POST".into(),
                WITHDRAW.into(),
                422,
                withdraw(),
                claim("mismatch")
            ),
            ("POST".into(), WITHDRAW.into(), 400, withdraw(), None),
            (
                "GET".into(),
                "/accounts/A".into(),
                u64::from(statuses[4]),
                None,
                None
            ),
        ]
    );
    // One record, named by its log reference, on the claimed lines alone.
    let log_ref = before[0]["log_ref"].as_str().unwrap();
    assert_eq!(log_ref.len(), 16, "{log_ref}");
    assert_eq!(before[1]["log_ref"], log_ref);
    assert_eq!(before[2]["log_ref"], log_ref);
    assert!(before[3].get("log_ref").is_none(), "{}", before[3]);
    for line in &before {
        assert!(line["peer"].as_str().unwrap().starts_with("127.0.0.1:"));
        assert!(line["ms"].as_f64().unwrap() >= 0.0);
    }
    // Never the query, the key or the body.
    let text = std::fs::read_to_string(&rotated).unwrap();
    for secret in ["secret-in-a-query", "k-log", "request_id"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }

    // After SIGHUP, the new file; the last line was flushed at the stop.
    let reopened = lines(&log);
    assert!(!reopened.is_empty(), "nothing was written after the reopen");
    assert!(
        before.len() + reopened.len() == statuses.len() + after,
        "{} + {} lines for {} requests",
        before.len(),
        reopened.len(),
        statuses.len() + after
    );
}
