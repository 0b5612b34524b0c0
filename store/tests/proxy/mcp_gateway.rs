//! `idemkit mcp` in front of the appointments reference service's MCP tools
//! (`--mcp-listen`), spoken to in raw JSON-RPC over HTTP so each test sends
//! exactly the messages it means: one booking for many calls with one key,
//! tenants kept apart, batches, and the admin listener settling an unknown
//! outcome.
#![cfg(feature = "axum")]

use crate::support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use serde_json::{Value, json};
use support::mcp::{ADMIN_TOKEN, Gateway};
use support::{Reply, example_binary, request};

/// The appointments service with its MCP tools; killed when dropped.
struct Appointments {
    child: Child,
    rest: SocketAddr,
    mcp_url: String,
}

impl Appointments {
    fn start(dir: &Path, extra: &[&str]) -> Appointments {
        let mut child = Command::new(example_binary())
            .arg("--db")
            .arg(dir.join("appointments.redb"))
            .arg("--provider-db")
            .arg(dir.join("provider.redb"))
            .args(["--listen", "127.0.0.1:0", "--mcp-listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut rest = None;
        let mcp_url = loop {
            let line = lines
                .next()
                .expect("the service printed its addresses")
                .unwrap();
            let url = line.rsplit(' ').next().unwrap().to_owned();
            if line.contains("MCP tools on") {
                break url;
            }
            if line.contains("listening on") {
                rest = Some(url.trim_start_matches("http://").parse().unwrap());
            }
        };
        std::thread::spawn(move || for _ in lines {});
        Appointments {
            child,
            rest: rest.expect("the REST address came first"),
            mcp_url,
        }
    }

    /// The calendar's bookings for `tenant`.
    fn bookings(&self, tenant: &str) -> Vec<Value> {
        let auth = format!("Bearer {tenant}");
        let reply = request(
            self.rest,
            "GET",
            "/appointments",
            &[("Authorization", auth.as_bytes())],
            b"",
        )
        .unwrap();
        reply.json()["appointments"].as_array().unwrap().clone()
    }
}

impl Drop for Appointments {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A gateway in front of `service`'s MCP tools: the tenant is a digest of
/// `Authorization` (as the service reads it), plus `extra` config.
fn gateway_in_front(dir: &Path, service: &Appointments, extra: &str) -> Gateway {
    gateway_to(dir, &service.mcp_url, extra)
}

/// [`gateway_in_front`] of the MCP server at `upstream`.
fn gateway_to(dir: &Path, upstream: &str, extra: &str) -> Gateway {
    let config = dir.join("mcp.toml");
    std::fs::write(
        &config,
        format!(
            r#"listen = "127.0.0.1:0"
upstream = "{upstream}"
admin = "127.0.0.1:0"
admin_token = "{ADMIN_TOKEN}"
{extra}
[store]
path = {store:?}
[tenant]
from = "Authorization"
secret = "the test gateway's tenant secret, 32+ bytes"
"#,
            store = dir.join("mcp.redb"),
        ),
    )
    .unwrap();
    Gateway::start(&config)
}

/// A 2026-07-28 `tools/call` (no session, the `_meta` envelope and the
/// standard headers), with `key` unless `None`.
fn call(
    gateway: &Gateway,
    tenant: &str,
    id: u64,
    tool: &str,
    args: Value,
    key: Option<&str>,
) -> Value {
    call_with_meta(None, gateway, tenant, id, tool, args, key, &json!({}))
}

/// [`call`] with `extra` members in `params._meta`, over TLS trusting the CA
/// `tls_ca` (PEM) when given.
#[allow(clippy::too_many_arguments)]
fn call_with_meta(
    tls_ca: Option<&str>,
    gateway: &Gateway,
    tenant: &str,
    id: u64,
    tool: &str,
    args: Value,
    key: Option<&str>,
    extra: &Value,
) -> Value {
    let mut meta = json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    if let Some(key) = key {
        meta["io.idemkit/idempotency-key"] = json!(key);
    }
    for (name, value) in extra.as_object().into_iter().flatten() {
        meta[name] = value.clone();
    }
    let body = json!({
        "jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": { "name": tool, "arguments": args, "_meta": meta },
    });
    post_over(
        tls_ca,
        gateway,
        tenant,
        &[("Mcp-Method", b"tools/call"), ("Mcp-Name", tool.as_bytes())],
        &body,
    )
    .json()
}

fn post(gateway: &Gateway, tenant: &str, extra: &[(&str, &[u8])], body: &Value) -> Reply {
    post_over(None, gateway, tenant, extra, body)
}

/// [`post`], over TLS trusting the CA `tls_ca` (PEM) when given.
fn post_over(
    tls_ca: Option<&str>,
    gateway: &Gateway,
    tenant: &str,
    extra: &[(&str, &[u8])],
    body: &Value,
) -> Reply {
    let auth = format!("Bearer {tenant}");
    let mut headers: Vec<(&str, &[u8])> = vec![
        ("Content-Type", b"application/json"),
        ("Accept", b"application/json, text/event-stream"),
        ("MCP-Protocol-Version", b"2026-07-28"),
        ("Authorization", auth.as_bytes()),
    ];
    headers.extend_from_slice(extra);
    let body = body.to_string();
    let reply = match tls_ca {
        None => request(gateway.addr, "POST", "/mcp", &headers, body.as_bytes()),
        #[cfg(feature = "cli")]
        Some(ca) => support::tls::request_over_tls(
            gateway.addr,
            ca,
            "POST",
            "/mcp",
            &headers,
            body.as_bytes(),
        ),
        #[cfg(not(feature = "cli"))]
        Some(_) => unreachable!("the TLS tests need the cli feature"),
    };
    reply.unwrap()
}

fn replayed(response: &Value) -> bool {
    response["result"]["_meta"]["io.idemkit/replayed"] == json!(true)
}

const ANNA: &str = r#"{"customer_id":"anna","slot_id":"2026-12-01T10:00"}"#;

fn anna() -> Value {
    serde_json::from_str(ANNA).unwrap()
}

/// `book_appointment` through the gateway: 20 simultaneous calls with one key
/// and a retry after them make one booking at the calendar; the first answer
/// is the booking, the retry its replay, every other call in progress or a
/// replay. `list_appointments` (read-only) is never claimed.
#[test]
fn the_reference_service_books_once_for_many_calls_with_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &["--provider-latency-ms", "300"]);
    let gateway = gateway_in_front(dir.path(), &service, "");
    let answers: Vec<Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..20)
            .map(|i| {
                let gateway = &gateway;
                s.spawn(move || {
                    call(
                        gateway,
                        "clinic-a",
                        i,
                        "book_appointment",
                        anna(),
                        Some("book-anna-1"),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let fresh: Vec<&Value> = answers
        .iter()
        .filter(|a| a["result"].is_object() && !replayed(a))
        .collect();
    assert_eq!(fresh.len(), 1, "{answers:?}");
    let booked = &fresh[0]["result"]["structuredContent"];
    assert_eq!(booked["status"], "confirmed", "{booked}");
    for a in &answers {
        let in_progress = a["error"]["data"]["type"] == "idempotency_key_in_progress";
        assert!(
            in_progress || a["result"]["structuredContent"] == *booked,
            "{a}"
        );
    }
    let retry = call(
        &gateway,
        "clinic-a",
        99,
        "book_appointment",
        anna(),
        Some("book-anna-1"),
    );
    assert!(replayed(&retry), "{retry}");
    assert_eq!(retry["id"], 99);
    assert_eq!(retry["result"]["resultType"], "complete");
    assert_eq!(retry["result"]["structuredContent"], *booked);
    assert_eq!(service.bookings("clinic-a").len(), 1);

    let listed = call(
        &gateway,
        "clinic-a",
        100,
        "list_appointments",
        json!({}),
        None,
    );
    assert_eq!(
        listed["result"]["structuredContent"]["appointments"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    let records = gateway.records(None);
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["operation"], "book_appointment");
}

/// The MCP server behind TLS (a front with a certificate a private CA issued
/// for `localhost`): the gateway checks it against `upstream_ca_file` and its
/// name, and one key still books once and replays.
#[cfg(feature = "cli")]
#[test]
fn an_https_mcp_server_books_once_through_tls_checked_against_the_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &[]);
    let certificates = support::tls::localhost_certificates();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &certificates.ca).unwrap();
    let (origin, path) = service.mcp_url["http://".len()..].split_once('/').unwrap();
    let front = support::tls::Front::start(&certificates, origin.parse().unwrap());
    let upstream = format!("https://localhost:{}/{path}", front.addr.port());
    let gateway = gateway_to(
        dir.path(),
        &upstream,
        &format!("upstream_ca_file = {ca_file:?}"),
    );
    books_once_and_replays(&service, |id| {
        call(
            &gateway,
            "clinic-a",
            id,
            "book_appointment",
            anna(),
            Some("book-tls"),
        )
    });
}

/// `book` (a call with one key, given its JSON-RPC id) confirms a booking,
/// and its retry replays that result: one booking at the calendar.
#[cfg(feature = "cli")]
fn books_once_and_replays(service: &Appointments, book: impl Fn(u64) -> Value) {
    let first = book(1);
    assert_eq!(
        first["result"]["structuredContent"]["status"], "confirmed",
        "{first}"
    );
    let retry = book(2);
    assert!(replayed(&retry), "{retry}");
    assert_eq!(
        retry["result"]["structuredContent"],
        first["result"]["structuredContent"]
    );
    assert_eq!(service.bookings("clinic-a").len(), 1);
}

/// The gateway serving HTTPS itself (`tls_cert_file`, `tls_key_file`): a
/// client that trusts the certificate's CA books once and its retry replays.
#[cfg(feature = "cli")]
#[test]
fn the_gateway_serves_https_itself_and_a_key_books_once() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &[]);
    let certificates = support::tls::localhost_certificates();
    let (cert, key) = (dir.path().join("mcp.crt"), dir.path().join("mcp.key"));
    std::fs::write(&cert, &certificates.certificate).unwrap();
    std::fs::write(&key, &certificates.key).unwrap();
    let gateway = gateway_to(
        dir.path(),
        &service.mcp_url,
        &format!("tls_cert_file = {cert:?}\ntls_key_file = {key:?}"),
    );
    assert!(gateway.url.starts_with("https://"), "{}", gateway.url);
    books_once_and_replays(&service, |id| {
        let key = Some("book-https");
        let (args, meta) = (anna(), json!({}));
        let ca = Some(certificates.ca.as_str());
        call_with_meta(
            ca,
            &gateway,
            "clinic-a",
            id,
            "book_appointment",
            args,
            key,
            &meta,
        )
    });
    // The served certificate's expiry is on the admin listener's /metrics.
    let authorization = format!("Bearer {ADMIN_TOKEN}");
    let headers: [(&str, &[u8]); 1] = [("Authorization", authorization.as_bytes())];
    let metrics = request(gateway.admin, "GET", "/metrics", &headers, b"").unwrap();
    let metrics = String::from_utf8(metrics.body).unwrap();
    assert!(
        metrics.contains(r#"idemkit_tls_certificate_expiry_timestamp_seconds{listener="listen"} "#),
        "{metrics}"
    );
}

/// The gateway's access log (`access_log`): a line per HTTP request, naming a
/// `tools/call`'s tool and what its claim decided, execute and then replay
/// under one log reference, and never the key.
#[test]
fn the_access_log_names_each_calls_tool_and_what_its_claim_decided() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &[]);
    let log = dir.path().join("mcp-access.jsonl");
    let gateway = gateway_in_front(dir.path(), &service, &format!("access_log = {log:?}"));
    let key = Some("book-logged");
    let first = call(&gateway, "clinic-a", 1, "book_appointment", anna(), key);
    let again = call(&gateway, "clinic-a", 2, "book_appointment", anna(), key);
    assert!(!replayed(&first) && replayed(&again), "{first} {again}");

    let booked = |text: &str| -> Vec<Value> {
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|line| line["operation"] == "book_appointment")
            .collect()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut text = String::new();
    while booked(&text).len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        text = std::fs::read_to_string(&log).unwrap_or_default();
    }
    let calls = booked(&text);
    assert_eq!(calls.len(), 2, "{text}");
    assert_eq!(calls[0]["claim"], "execute", "{text}");
    assert_eq!(calls[1]["claim"], "replay", "{text}");
    assert_eq!(calls[0]["log_ref"], calls[1]["log_ref"]);
    assert_eq!(calls[0]["log_ref"].as_str().map(str::len), Some(16));
    for line in &calls {
        assert_eq!(line["method"], "POST");
        assert_eq!(line["status"], 200);
    }
    assert!(!text.contains("book-logged"), "the key was logged: {text}");
}

/// One key in two tenants' calls is two actions: each tenant's booking runs
/// once and each retry replays its own tenant's result, never the other's.
#[test]
fn one_key_in_two_tenants_is_two_bookings() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &[]);
    let gateway = gateway_in_front(dir.path(), &service, "");
    let a = call(
        &gateway,
        "clinic-a",
        1,
        "book_appointment",
        anna(),
        Some("shared-key"),
    );
    let b = call(
        &gateway,
        "clinic-b",
        2,
        "book_appointment",
        anna(),
        Some("shared-key"),
    );
    assert!(!replayed(&a) && !replayed(&b), "{a} {b}");
    let a_again = call(
        &gateway,
        "clinic-a",
        3,
        "book_appointment",
        anna(),
        Some("shared-key"),
    );
    let b_again = call(
        &gateway,
        "clinic-b",
        4,
        "book_appointment",
        anna(),
        Some("shared-key"),
    );
    assert_eq!(
        a_again["result"]["structuredContent"],
        a["result"]["structuredContent"]
    );
    assert_eq!(
        b_again["result"]["structuredContent"],
        b["result"]["structuredContent"]
    );
    assert_ne!(
        a["result"]["structuredContent"]["id"],
        b["result"]["structuredContent"]["id"]
    );
    assert_eq!(service.bookings("clinic-a").len(), 1);
    assert_eq!(service.bookings("clinic-b").len(), 1);
}

/// A JSON-RPC batch carrying a protected call is refused whole (400), so no
/// call reaches the server around the claim; a batch of other messages passes.
#[test]
fn a_batch_with_a_protected_call_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &[]);
    let gateway = gateway_in_front(dir.path(), &service, "");
    let batch = json!([
        { "jsonrpc": "2.0", "id": 1, "method": "tools/call",
          "params": { "name": "book_appointment", "arguments": anna() } },
    ]);
    let reply = post(&gateway, "clinic-a", &[], &batch);
    assert_eq!(
        reply.status,
        400,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert!(service.bookings("clinic-a").is_empty());
}

/// The calendar answers after the call's timeout: the outcome is unknown, and
/// a retry gets the unknown result (structured, "do not call again"), never a
/// second booking. The admin listener lists it, an operator resolves it, and
/// the retry then gets the operator's result. Health and metrics are served
/// by the same admin code as the proxy's.
#[test]
fn an_unknown_outcome_is_listed_resolved_and_then_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &["--provider-latency-ms", "1500"]);
    let gateway = gateway_in_front(dir.path(), &service, "call_timeout_ms = 300");
    let first = call(
        &gateway,
        "clinic-a",
        1,
        "book_appointment",
        anna(),
        Some("slow-1"),
    );
    let unknown = &first["result"]["structuredContent"];
    assert_eq!(unknown["state"], "unknown", "{first}");
    assert_eq!(first["result"]["isError"], true);
    let retry = call(
        &gateway,
        "clinic-a",
        2,
        "book_appointment",
        anna(),
        Some("slow-1"),
    );
    assert_eq!(
        retry["result"]["structuredContent"]["state"], "unknown",
        "{retry}"
    );
    assert_eq!(retry["result"]["structuredContent"]["key"], "slow-1");

    let listed = gateway.records(Some("unknown"));
    assert_eq!(listed.len(), 1, "{listed:?}");
    let log_ref = listed[0]["log_ref"].as_str().unwrap();
    let auth = format!("Bearer {ADMIN_TOKEN}");
    let resolved = request(
        gateway.admin,
        "POST",
        &format!("/records/{log_ref}/resolve"),
        &[("Authorization", auth.as_bytes())],
        br#"{"applied":true,"body":"booked after the timeout: see list_appointments"}"#,
    )
    .unwrap();
    assert_eq!(
        resolved.status,
        200,
        "{}",
        String::from_utf8_lossy(&resolved.body)
    );
    let settled = call(
        &gateway,
        "clinic-a",
        3,
        "book_appointment",
        anna(),
        Some("slow-1"),
    );
    assert!(replayed(&settled), "{settled}");
    assert_eq!(
        settled["result"]["content"][0]["text"],
        "booked after the timeout: see list_appointments"
    );

    assert_eq!(gateway.admin_get("/healthz").status, 200);
    let metrics = String::from_utf8(gateway.admin_get("/metrics").body).unwrap();
    assert!(
        metrics.contains(
            r#"idemkit_claims_total{operation="book_appointment",outcome="uncertain"} 1"#
        ),
        "{metrics}"
    );
    let refused = request(gateway.admin, "GET", "/metrics", &[], b"").unwrap();
    assert_eq!(refused.status, 401);
}

/// An MCP server that answers every `tools/call` with HTTP 500 after counting
/// it (a framework's crash page, not a JSON-RPC answer).
struct FailingServer {
    url: String,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _runtime: tokio::runtime::Runtime,
}

impl FailingServer {
    fn start() -> FailingServer {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let calls = std::sync::Arc::new(AtomicUsize::new(0));
        let counted = std::sync::Arc::clone(&calls);
        let app = axum::Router::new().route(
            "/mcp",
            axum::routing::post(move || {
                let counted = std::sync::Arc::clone(&counted);
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    (axum::http::StatusCode::INTERNAL_SERVER_ERROR, "crashed")
                }
            }),
        );
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        runtime.spawn(async move { axum::serve(listener, app).await.unwrap() });
        FailingServer {
            url,
            calls,
            _runtime: runtime,
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A server that answers a call with HTTP 500 instead of a JSON-RPC response
/// is recorded by the rules of an HTTP answer: a Local tool's call is
/// released (a retry with the key runs it again), an External tool's outcome
/// is unknown (a retry gets the unknown result and never reaches the server).
#[test]
fn an_http_500_releases_a_local_call_and_leaves_an_external_one_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let server = FailingServer::start();
    let config = dir.path().join("mcp.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:0\"\nupstream = {:?}\nadmin = \"127.0.0.1:0\"\nadmin_token = \"{ADMIN_TOKEN}\"\n\
             [store]\npath = {:?}\n[tenant]\nfixed = \"t\"\n\
             [[tools]]\nname = \"note\"\neffect = \"local\"\n[[tools]]\nname = \"send\"\neffect = \"external\"\n",
            server.url,
            dir.path().join("mcp.redb")
        ),
    )
    .unwrap();
    let gateway = Gateway::start(&config);
    let args = json!({ "text": "hi" });
    for id in 1..=2 {
        let reply = post(
            &gateway,
            "t",
            &[("Mcp-Method", b"tools/call"), ("Mcp-Name", b"note")],
            &json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
                     "params": { "name": "note", "arguments": args,
                                 "_meta": { "io.idemkit/idempotency-key": "n-1",
                                            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                            "io.modelcontextprotocol/clientCapabilities": {} } } }),
        );
        assert_eq!(reply.status, 500, "the server's own answer passes through");
    }
    assert_eq!(server.calls(), 2, "released: the retry ran again");

    let first = post(
        &gateway,
        "t",
        &[("Mcp-Method", b"tools/call"), ("Mcp-Name", b"send")],
        &json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call",
                 "params": { "name": "send", "arguments": args,
                             "_meta": { "io.idemkit/idempotency-key": "s-1",
                                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                        "io.modelcontextprotocol/clientCapabilities": {} } } }),
    );
    assert_eq!(first.status, 500);
    let retry = call(&gateway, "t", 4, "send", args, Some("s-1"));
    assert_eq!(
        retry["result"]["structuredContent"]["state"], "unknown",
        "{retry}"
    );
    assert_eq!(server.calls(), 3, "the retry never reached the server");
}

/// A retry of a running `book_appointment` call that asks to wait
/// (`_meta["io.idemkit/wait"]`, seconds) is held until the first call's
/// result is recorded and gets it, replayed; one that asks nothing is told
/// the call is in progress. One booking.
#[test]
fn a_retry_that_asks_to_wait_gets_the_running_calls_result() {
    let dir = tempfile::tempdir().unwrap();
    let service = Appointments::start(dir.path(), &["--provider-latency-ms", "1500"]);
    let gateway = gateway_in_front(dir.path(), &service, "");
    std::thread::scope(|s| {
        let first = s.spawn(|| {
            call(
                &gateway,
                "clinic-w",
                1,
                "book_appointment",
                anna(),
                Some("book-wait-1"),
            )
        });
        std::thread::sleep(std::time::Duration::from_millis(400));
        let impatient = call(
            &gateway,
            "clinic-w",
            2,
            "book_appointment",
            anna(),
            Some("book-wait-1"),
        );
        assert_eq!(
            impatient["error"]["data"]["type"], "idempotency_key_in_progress",
            "{impatient}"
        );
        let waiter = call_with_meta(
            None,
            &gateway,
            "clinic-w",
            3,
            "book_appointment",
            anna(),
            Some("book-wait-1"),
            &json!({ "io.idemkit/wait": 10 }),
        );
        let first = first.join().unwrap();
        assert!(first["result"].is_object() && !replayed(&first), "{first}");
        assert!(replayed(&waiter), "{waiter}");
        assert_eq!(waiter["result"]["content"], first["result"]["content"]);
    });
    assert_eq!(service.bookings("clinic-w").len(), 1);
}
