//! `idemkit proxy` over real sockets, in front of an upstream with no idempotency
//! of its own that counts its calls (tests/support/idemkit_proxy.rs): the whole contract of
//! docs/architecture.md, the crash window at the proxy, the admin listener, and shutdown.
#![cfg(feature = "axum")]

use crate::support;
use crate::support::idemkit_proxy as proxy_support;

use std::time::Duration;

use proxy_support::{
    ProxyProcess, Upstream, admin_authorization, config, post_json, simultaneous_withdrawals,
};
use support::{Reply, request};

const BODY: &[u8] = br#"{"amount":10,"request_id":"r-1"}"#;

fn withdraw(proxy: &ProxyProcess, key: &str) -> Reply {
    proxy_support::post_withdrawal(proxy, key, BODY)
}

fn redb_store(dir: &std::path::Path) -> String {
    format!("path = {:?}", dir.join("proxy.redb"))
}

/// An upstream answering after `delay`, and a proxy (redb store in a fresh
/// directory, the default route table) in front of it.
fn in_front_of_upstream(delay: Duration) -> (tempfile::TempDir, Upstream, ProxyProcess) {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(delay);
    let proxy = ProxyProcess::start(&config(
        dir.path(),
        upstream.addr,
        &redb_store(dir.path()),
        "",
    ));
    (dir, upstream, proxy)
}

#[test]
fn fifty_concurrent_posts_with_one_key_make_one_upstream_call() {
    let (_dir, upstream, proxy) = in_front_of_upstream(Duration::from_millis(300));
    let replies = simultaneous_withdrawals(&[proxy.addr], 50, "k-50", BODY);
    assert_eq!(
        upstream.calls("A"),
        1,
        "one upstream call for 50 concurrent requests"
    );
    let originals: Vec<&Reply> = replies
        .iter()
        .filter(|r| r.status == 201 && r.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(originals.len(), 1, "{replies:?}");
    for r in &replies {
        let in_progress = r.status == 409
            && r.problem() == "request-in-progress"
            && r.header("retry-after").is_some();
        let replay = r.status == 201 && r.body == originals[0].body;
        assert!(in_progress || replay, "{r:?}");
    }
}

#[test]
fn a_retry_replays_and_a_changed_request_never_reaches_the_upstream() {
    let (_dir, upstream, proxy) = in_front_of_upstream(Duration::ZERO);

    let first = withdraw(&proxy, "k-1");
    assert_eq!(first.status, 201, "{first:?}");
    let retry = withdraw(&proxy, "k-1");
    assert_eq!(retry.status, 201);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, first.body, "the stored bytes");
    // The same JSON value respelled, and an excluded field changed: a replay.
    let respelled = post_json(
        proxy.addr,
        "/accounts/A/withdraw",
        Some("k-1"),
        Some("acme"),
        br#"{ "request_id": "r-2", "amount": 10 }"#,
    );
    assert_eq!(
        respelled.header("idempotent-replayed"),
        Some("true"),
        "{respelled:?}"
    );
    // Another amount, another account path: 422, nothing sent upstream.
    let changed = post_json(
        proxy.addr,
        "/accounts/A/withdraw",
        Some("k-1"),
        Some("acme"),
        br#"{"amount":11}"#,
    );
    assert_eq!(
        (changed.status, changed.problem().as_str()),
        (422, "idempotency-key-reused")
    );
    let other_account = post_json(
        proxy.addr,
        "/accounts/B/withdraw",
        Some("k-1"),
        Some("acme"),
        BODY,
    );
    assert_eq!(other_account.status, 422, "{other_account:?}");
    assert_eq!((upstream.calls("A"), upstream.calls("B")), (1, 0));

    // No key → 400; no tenant → 401; neither reaches the upstream.
    let no_key = post_json(proxy.addr, "/accounts/A/withdraw", None, Some("acme"), BODY);
    assert_eq!(
        (no_key.status, no_key.problem().as_str()),
        (400, "missing-idempotency-key")
    );
    let no_tenant = post_json(proxy.addr, "/accounts/A/withdraw", Some("k-2"), None, BODY);
    assert_eq!(
        (no_tenant.status, no_tenant.problem().as_str()),
        (401, "unauthenticated")
    );
    assert_eq!(upstream.calls("A"), 1);

    // The same key under another tenant executes on its own.
    let other_tenant = post_json(
        proxy.addr,
        "/accounts/A/withdraw",
        Some("k-1"),
        Some("globex"),
        BODY,
    );
    assert_eq!(other_tenant.status, 201);
    assert_ne!(other_tenant.body, first.body);
    assert_eq!(upstream.calls("A"), 2);

    // GETs pass through, on an unconfigured path and on a configured one.
    let count = request(proxy.addr, "GET", "/accounts/A", &[], b"").unwrap();
    assert_eq!((count.status, count.body.as_slice()), (200, &b"2"[..]));
    let same_path = request(proxy.addr, "GET", "/accounts/A/withdraw", &[], b"").unwrap();
    assert_eq!(
        (same_path.status, same_path.body.as_slice()),
        (200, &b"2"[..])
    );
}

#[test]
fn forwarding_drops_hop_by_hop_headers_adds_x_forwarded_and_keeps_the_key() {
    let (_dir, upstream, proxy) = in_front_of_upstream(Duration::ZERO);
    let headers: Vec<(&str, &[u8])> = vec![
        ("Content-Type", b"application/json"),
        ("Idempotency-Key", b"k-h"),
        ("X-Tenant-Id", b"acme"),
        ("Connection", b"close, x-hop"),
        ("X-Hop", b"connection-scoped"),
        ("Keep-Alive", b"timeout=5"),
        ("X-End-To-End", b"kept"),
    ];
    let reply = request(proxy.addr, "POST", "/accounts/A/withdraw", &headers, BODY).unwrap();
    assert_eq!(reply.status, 201);
    let seen = upstream.seen.lock().unwrap();
    let got = &seen.headers[0];
    let value = |name: &str| got.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str());
    assert_eq!(value("x-end-to-end"), Some("kept"));
    assert_eq!(
        value("idempotency-key"),
        Some("k-h"),
        "the key goes on upstream"
    );
    assert_eq!(value("x-forwarded-for"), Some("127.0.0.1"));
    assert_eq!(value("x-forwarded-proto"), Some("http"));
    assert_eq!(value("x-hop"), None, "named in Connection: hop-by-hop");
    assert_eq!(value("keep-alive"), None);
    assert_eq!(value("host"), Some(upstream.addr.to_string().as_str()));
}

#[test]
fn an_upstream_timeout_is_504_then_outcome_uncertain_with_one_upstream_call() {
    let (_dir, upstream, proxy) = in_front_of_upstream(Duration::ZERO);
    // The `slow` account answers after 3 s; the route waits 1 s.
    let first = post_json(
        proxy.addr,
        "/accounts/slow/withdraw",
        Some("k-t"),
        Some("acme"),
        BODY,
    );
    assert_eq!(first.status, 504, "{first:?}");
    let retry = post_json(
        proxy.addr,
        "/accounts/slow/withdraw",
        Some("k-t"),
        Some("acme"),
        BODY,
    );
    assert_eq!(
        (retry.status, retry.problem().as_str()),
        (409, "outcome-uncertain")
    );
    assert_eq!(upstream.calls("slow"), 1, "never a second upstream call");

    // The operator sees it and settles it through the admin listener.
    let unknown = proxy.admin("GET", "/records?state=unknown", b"");
    let listed = unknown.json();
    let records = listed["records"].as_array().unwrap();
    assert_eq!(records.len(), 1, "{listed}");
    assert_eq!(records[0]["key"], "k-t");
    let log_ref = records[0]["log_ref"].as_str().unwrap().to_owned();
    let unauthorized = request(proxy.admin, "GET", "/records?state=unknown", &[], b"").unwrap();
    assert_eq!(unauthorized.status, 401);
    let resolve = |token: &[u8]| {
        request(
            proxy.admin,
            "POST",
            &format!("/records/{log_ref}/resolve"),
            &[
                ("Authorization", token),
                ("Content-Type", b"application/json"),
            ],
            br#"{"applied":true,"status":201,"body":"{\"id\":\"w_1\"}"}"#,
        )
        .unwrap()
    };
    assert_eq!(resolve(b"Bearer wrong").status, 401);
    let resolved = resolve(&admin_authorization());
    assert_eq!(resolved.status, 200, "{resolved:?}");
    assert_eq!(resolved.json()["from"], "unknown");
    assert_eq!(resolved.json()["state"], "completed");
    let after = post_json(
        proxy.addr,
        "/accounts/slow/withdraw",
        Some("k-t"),
        Some("acme"),
        BODY,
    );
    assert_eq!(
        (after.status, after.body.as_slice()),
        (201, &br#"{"id":"w_1"}"#[..])
    );
    assert_eq!(upstream.calls("slow"), 1);
}

#[test]
fn an_upstream_that_is_down_is_502_and_the_key_executes_once_when_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on yet.
    let port_holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let upstream_addr = port_holder.local_addr().unwrap();
    drop(port_holder);
    let proxy = ProxyProcess::start(&config(
        dir.path(),
        upstream_addr,
        &redb_store(dir.path()),
        "",
    ));
    let down = withdraw(&proxy, "k-d");
    assert_eq!(
        (down.status, down.problem().as_str()),
        (502, "upstream-unavailable")
    );
    let upstream = Upstream::start_on(upstream_addr, Duration::ZERO);
    let back = withdraw(&proxy, "k-d");
    assert_eq!(
        back.status, 201,
        "nothing was sent: the record was released, {back:?}"
    );
    let again = withdraw(&proxy, "k-d");
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(upstream.calls("A"), 1);
}

#[test]
fn connections_the_upstream_closed_while_pooled_are_not_used_for_the_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let first = Upstream::start(Duration::ZERO);
    let upstream_addr = first.addr;
    let proxy = ProxyProcess::start(&config(
        dir.path(),
        upstream_addr,
        &redb_store(dir.path()),
        "",
    ));
    // Both workers' pools hold a kept-alive connection to the first upstream.
    for key in ["k-p1", "k-p2", "k-p3", "k-p4"] {
        assert_eq!(withdraw(&proxy, key).status, 201);
    }
    // It restarts: every pooled connection is closed by the other side.
    drop(first);
    let second = Upstream::start_on(upstream_addr, Duration::ZERO);
    for key in ["k-p5", "k-p6", "k-p7", "k-p8"] {
        let reply = withdraw(&proxy, key);
        assert_eq!(
            reply.status, 201,
            "a closed pooled connection was used: {reply:?}"
        );
    }
    let passed = request(proxy.addr, "GET", "/accounts/A", &[], b"").unwrap();
    assert_eq!(
        (passed.status, passed.body.as_slice()),
        (200, b"4".as_slice())
    );
    assert_eq!(second.calls("A"), 4, "each new key executed once");
}

#[test]
fn metrics_count_the_claims_and_the_replays() {
    let (_dir, _upstream, proxy) = in_front_of_upstream(Duration::ZERO);
    withdraw(&proxy, "k-m");
    withdraw(&proxy, "k-m");
    withdraw(&proxy, "k-m");
    post_json(
        proxy.addr,
        "/accounts/A/withdraw",
        Some("k-m"),
        Some("acme"),
        br#"{"amount":1}"#,
    );
    let metrics = proxy.admin("GET", "/metrics", b"");
    assert_eq!(metrics.status, 200);
    let text = String::from_utf8(metrics.body).unwrap();
    for line in [
        r#"idemkit_claims_total{operation="accounts.withdraw",outcome="execute"} 1"#,
        r#"idemkit_claims_total{operation="accounts.withdraw",outcome="replay"} 2"#,
        r#"idemkit_claims_total{operation="accounts.withdraw",outcome="mismatch"} 1"#,
        r#"idemkit_outcomes_total{operation="accounts.withdraw",disposition="stored"} 1"#,
        r#"idemkit_execution_seconds_count{operation="accounts.withdraw"} 1"#,
        "idemkit_store_errors_total 0",
        "idemkit_gc_deleted_total 0",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
    let health = request(proxy.admin, "GET", "/healthz", &[], b"").unwrap();
    assert_eq!(health.status, 200, "no token needed");
}

#[test]
fn a_proxy_killed_mid_request_does_not_send_the_retry_again_after_restart() {
    let (_dir, upstream, restarted) = proxy_support::killed_mid_request(&["k-kill"], BODY);
    // The proxy holds its redb file alone, so the request the killed process
    // dispatched is settled when the file is opened: the retry right after the
    // restart is uncertain at once, not in progress for the rest of the lease.
    let retry = post_json(
        restarted.addr,
        "/accounts/slow/withdraw",
        Some("k-kill"),
        Some("acme"),
        BODY,
    );
    assert_eq!(
        (retry.status, retry.problem().as_str()),
        (409, "outcome-uncertain"),
        "{retry:?}"
    );
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(upstream.calls("slow"), 1, "the retry was not sent again");
}

#[test]
fn sigterm_lets_a_running_request_finish_and_record_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::from_millis(800));
    let file = config(dir.path(), upstream.addr, &redb_store(dir.path()), "");
    let proxy = ProxyProcess::start(&file);
    let addr = proxy.addr;
    let client = std::thread::spawn(move || {
        post_json(
            addr,
            "/accounts/A/withdraw",
            Some("k-term"),
            Some("acme"),
            BODY,
        )
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while upstream.calls("A") == 0 {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(10));
    }
    proxy.signal("TERM");
    let answered = client.join().unwrap();
    assert_eq!(
        answered.status, 201,
        "the running request finished: {answered:?}"
    );
    let status = proxy.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");

    let restarted = ProxyProcess::start(&file);
    let retry = withdraw(&restarted, "k-term");
    assert_eq!(
        retry.header("idempotent-replayed"),
        Some("true"),
        "recorded before exit"
    );
    assert_eq!(retry.body, answered.body);
    assert_eq!(upstream.calls("A"), 1);
}

#[test]
fn the_probe_passes_through_the_proxy_in_front_of_an_upstream_without_idempotency() {
    let (_dir, _upstream, proxy) = in_front_of_upstream(Duration::from_millis(50));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args([
            "probe",
            &format!("http://{}/accounts/A/withdraw", proxy.addr),
        ])
        .args(["-H", "X-Tenant-Id: acme", "-d", r#"{"amount":10}"#])
        .args(["--other-tenant-header", "X-Tenant-Id: globex", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for check in report["checks"].as_array().unwrap() {
        assert_eq!(check["result"], "pass", "{check}");
    }
    assert_eq!(out.status.code(), Some(0));
}

#[test]
fn a_bad_config_file_is_refused_at_start_with_the_file_line_and_what() {
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        dir.path(),
        "127.0.0.1:9".parse().unwrap(),
        &redb_store(dir.path()),
        "include = [\"amount\"]",
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["proxy", "--config"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!("idemkit proxy: {}:19: include pointer", file.display());
    assert!(stderr.starts_with(&want), "{stderr}");
    assert!(stderr.contains("pointer-missing-leading-slash"), "{stderr}");
}

/// An upstream that answers every request 201 with a session cookie, a
/// session token in a custom header and an application header besides its
/// content type and location; it serves until the test ends.
fn upstream_with_session_headers() -> std::net::SocketAddr {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut length = 0usize;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    match line.trim_end().split_once(':') {
                        Some((name, value)) if name.eq_ignore_ascii_case("content-length") => {
                            length = value.trim().parse().unwrap_or(0);
                        }
                        None if line.trim_end().is_empty() => break,
                        _ => {}
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() {
                    return;
                }
                let answer = br#"{"id":"w_1"}"#;
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 201 Created\r\ncontent-type: application/json\r\n\
                     location: /withdrawals/w_1\r\nset-cookie: session=s3cret\r\n\
                     x-session-token: tok-s3cret\r\nx-request-cost: 3\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n",
                    answer.len()
                );
                let _ = stream.write_all(answer);
            });
        }
    });
    addr
}

/// The proxy stored and replayed every upstream header but a short deny
/// list, so an upstream's session token in `X-Session-Token` was handed to
/// whoever retried with the key. A route replays an allow list (content type,
/// location, caching… by default, or its `replayed_headers`); `Set-Cookie` is
/// never stored.
#[test]
fn the_proxy_replays_only_the_allowed_upstream_headers() {
    for (route_extra, kept, dropped) in [
        (
            "",
            &["content-type", "location"][..],
            &["set-cookie", "x-session-token", "x-request-cost"][..],
        ),
        (
            "replayed_headers = [\"content-type\", \"x-request-cost\"]",
            &["content-type", "x-request-cost"][..],
            &["set-cookie", "x-session-token", "location"][..],
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let upstream = upstream_with_session_headers();
        let proxy = ProxyProcess::start(&config(
            dir.path(),
            upstream,
            &redb_store(dir.path()),
            route_extra,
        ));
        let first = withdraw(&proxy, "k-headers");
        assert_eq!(first.status, 201, "{first:?}");
        assert_eq!(first.header("x-session-token"), Some("tok-s3cret"));
        let replay = withdraw(&proxy, "k-headers");
        assert_eq!(replay.header("idempotent-replayed"), Some("true"));
        for name in kept {
            assert_eq!(
                replay.header(name),
                first.header(name),
                "{route_extra}: {name}"
            );
        }
        for name in dropped {
            assert_eq!(replay.header(name), None, "{route_extra}: {name} replayed");
        }
    }
}

#[test]
fn a_hundred_retries_that_ask_to_wait_get_the_upstream_answer_when_it_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start(Duration::from_secs(3));
    // The upstream takes 3 s: the route waits for it up to 10 s.
    let proxy = ProxyProcess::start_patient(dir.path(), upstream.addr, &redb_store(dir.path()));
    let addr = proxy.addr;

    let first = std::thread::spawn(move || {
        let reply = post_json(
            addr,
            "/accounts/A/withdraw",
            Some("k-w"),
            Some("acme"),
            BODY,
        );
        (reply, std::time::Instant::now())
    });
    // The first request is at the upstream before the retries come.
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while upstream.calls("A") == 0 {
        assert!(std::time::Instant::now() < until, "the upstream was called");
        std::thread::sleep(Duration::from_millis(5));
    }
    let retries: Vec<_> = (0..100)
        .map(|_| {
            std::thread::spawn(move || {
                let reply = request(
                    addr,
                    "POST",
                    "/accounts/A/withdraw",
                    &[
                        ("Content-Type", b"application/json"),
                        ("Idempotency-Key", b"k-w"),
                        ("X-Tenant-Id", b"acme"),
                        ("Prefer", b"wait=10"),
                    ],
                    BODY,
                )
                .unwrap();
                (reply, std::time::Instant::now())
            })
        })
        .collect();
    // The admin listener's gauge says when every retry is held; from then on
    // the proxy should do nothing until the answer.
    let held = |n: usize| {
        let metrics = proxy.admin("GET", "/metrics", b"");
        String::from_utf8_lossy(&metrics.body).contains(&format!("idemkit_waiting_requests {n}\n"))
    };
    let until = std::time::Instant::now() + Duration::from_secs(2);
    while !held(100) {
        assert!(std::time::Instant::now() < until, "100 requests were held");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (cpu_before, wall_before) = (
        support::cpu_ticks(&format!("/proc/{}/stat", proxy.child.id())),
        std::time::Instant::now(),
    );
    let (original, answered) = first.join().unwrap();
    let (cpu_during, wall_during) = (
        support::cpu_ticks(&format!("/proc/{}/stat", proxy.child.id())) - cpu_before,
        wall_before.elapsed(),
    );
    assert_eq!(original.status, 201, "{original:?}");
    let mut slowest = Duration::ZERO;
    for retry in retries {
        let (reply, at) = retry.join().unwrap();
        assert_eq!(reply.status, 201, "{reply:?}");
        assert_eq!(reply.body, original.body);
        assert_eq!(reply.header("idempotent-replayed"), Some("true"));
        assert_eq!(reply.header("preference-applied"), Some("wait=10"));
        slowest = slowest.max(at.saturating_duration_since(answered));
    }
    assert_eq!(upstream.calls("A"), 1, "one upstream call");
    assert!(held(0), "no request is held any more");
    let metrics = String::from_utf8_lossy(&proxy.admin("GET", "/metrics", b"").body).into_owned();
    assert!(
        metrics.contains(
            "idemkit_waits_total{operation=\"accounts.withdraw\",ended=\"answered\"} 100\n"
        ),
        "{metrics}"
    );
    let cpu = Duration::from_millis(cpu_during * 10);
    eprintln!(
        "proxy: {cpu:?} of CPU over {wall_during:?} with 100 requests waiting; \
         the slowest retry answered {slowest:?} after the original"
    );
    assert!(
        cpu < wall_during / 10,
        "{cpu:?} of CPU over {wall_during:?}"
    );
    assert!(
        slowest < Duration::from_millis(100),
        "the slowest retry came {slowest:?} after the original answer"
    );
}
