//! Smoke of the HTTP overhead server (benches/http/run.sh): the bare route
//! answers, a keyed request executes, the same key replays the same body, and
//! (when wrk is installed) the fresh-key script never repeats a key. Nothing here
//! times anything.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;

use idemkit_benches::http_overhead::{self, Bench};

/// One HTTP/1.1 request on its own connection: (status, headers lowercased, body).
fn post(addr: SocketAddr, path: &str, key: Option<&str>, body: &str) -> (u16, String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let key = key.map_or(String::new(), |k| format!("Idempotency-Key: {k}\r\n"));
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n{key}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

fn start() -> (tokio::runtime::Runtime, SocketAddr, Bench) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let bench = Bench::new();
    let (addr, server) = runtime
        .block_on(http_overhead::bind(
            "127.0.0.1:0".parse().unwrap(),
            bench.clone(),
        ))
        .unwrap();
    runtime.spawn(server);
    (runtime, addr, bench)
}

#[test]
fn bare_layered_and_replay_answer() {
    let (_rt, addr, bench) = start();
    let body = r#"{"customer_id":"bench","slot_id":"s1"}"#;

    let (status, head, bare) = post(addr, "/bare", Some("ignored"), body);
    assert_eq!(status, 201);
    assert!(!head.contains("idempotent-replayed"));
    assert_eq!(bare, format!("{{\"ok\":true,\"bytes\":{}}}", body.len()));

    let (status, head, first) = post(addr, "/layered", Some("smoke-1"), body);
    assert!((200..300).contains(&status), "{status}");
    assert!(!head.contains("idempotent-replayed"));
    assert_eq!(first, bare, "the same handler behind the layer");

    let (status, head, again) = post(addr, "/layered", Some("smoke-1"), body);
    assert_eq!(status, 201);
    assert!(head.contains("idempotent-replayed: true"), "{head}");
    assert_eq!(again, first);
    assert_eq!(
        bench.executions.load(Ordering::Relaxed),
        2,
        "bare + one layered execution"
    );

    // The layered route requires the key.
    let (status, _, _) = post(addr, "/layered", None, body);
    assert_eq!(status, 400);
}

/// The fresh-key scheme of fresh.lua (PREFIX-THREAD-COUNTER) under wrk: every
/// request that completed made its own record, so no key repeated.
#[test]
fn fresh_script_keys_are_distinct() {
    if Command::new("wrk").arg("--version").output().is_err() {
        eprintln!("wrk is not installed; skipping");
        return;
    }
    let (_rt, addr, bench) = start();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("http/fresh.lua");
    let out = Command::new("wrk")
        .args(["-t2", "-c4", "-d1s", "-s"])
        .arg(&script)
        .arg(format!("http://{addr}/layered"))
        .args(["--", "smoke"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let completed: usize = text
        .split_whitespace()
        .zip(text.split_whitespace().skip(1))
        .find(|(_, next)| *next == "requests")
        .and_then(|(n, _)| n.parse().ok())
        .unwrap_or_else(|| panic!("no request count in {text}"));
    assert!(completed > 0, "{text}");
    assert!(!text.contains("Non-2xx"), "{text}");
    let records = bench.store.list(None).unwrap().len();
    assert!(
        records >= completed,
        "{records} records for {completed} requests: a key repeated"
    );
    let executions = usize::try_from(bench.executions.load(Ordering::Relaxed)).unwrap();
    assert_eq!(executions, records, "every record executed once");
}
