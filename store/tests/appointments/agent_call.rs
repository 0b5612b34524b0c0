//! The agent side against the real appointments service: `idemkit call` with a
//! journal sends one key per logical action on every attempt and every re-run,
//! the service books exactly once, and outcomes are reported without ever turning
//! "unknown" into "confirmed".
//!
//! A fault proxy (`support::proxy`) sits between the client and the service where
//! a scenario needs lost answers, and records every key it forwards.
#![cfg(feature = "axum")]

use crate::support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use support::Service;
use support::proxy::Proxy;

const TENANT: &str = "clinic-agent";
const BODY: &str = r#"{"customer_id":"c-7","slot_id":"2026-12-02T09:30"}"#;

/// `idemkit call` for `action_id` against `url`, with short backoffs.
fn call(
    journal: &std::path::Path,
    action_id: &str,
    url: &str,
    body: &str,
    extra: &[&str],
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemkit"));
    cmd.arg("call")
        .arg("--journal")
        .arg(journal)
        .args(["--action-id", action_id, "-X", "POST"])
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", &format!("Authorization: Bearer {TENANT}")])
        .args(["-d", body])
        .args(["--base-delay-ms", "50", "--max-delay-ms", "400"])
        .args(extra)
        .arg(url);
    cmd
}

/// The exit code and the one JSON object printed on stdout.
fn report(out: &Output) -> (i32, serde_json::Value) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().expect("exited, not signalled"), value)
}

fn outcomes(report: &serde_json::Value) -> Vec<String> {
    report["attempts"]
        .as_array()
        .expect("attempts array")
        .iter()
        .map(|a| {
            format!(
                "{}:{}",
                a["outcome"].as_str().unwrap_or("?"),
                a["http_status"]
            )
        })
        .collect()
}

fn assert_one_key(keys: &[String], report: &serde_json::Value) {
    assert!(!keys.is_empty(), "the service saw no request");
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one key on every attempt: {keys:?}"
    );
    assert_eq!(
        report["idempotency_key"],
        keys[0].as_str(),
        "the journal's key was sent"
    );
}

#[test]
fn latency_above_the_client_timeout_and_dropped_responses_book_once() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(
        dir.path(),
        &["--provider-latency-ms", "1200", "--lease-ms", "1000"],
    );
    // The first two answers that come back are lost on the way to the client.
    let proxy = Proxy::start(service.addr, 2);

    let started = Instant::now();
    let out = call(
        &dir.path().join("agent.journal"),
        "run-1/book",
        &proxy.url(),
        BODY,
        &["--timeout-ms", "400", "--max-attempts", "12"],
    )
    .output()
    .unwrap();
    let (code, report) = report(&out);
    let elapsed = started.elapsed();

    assert_eq!(code, 0, "confirmed: {report}");
    assert_eq!(report["status"], "confirmed");
    assert_eq!(report["http_status"], 201);
    let attempts = outcomes(&report);
    assert!(
        attempts.iter().any(|a| a.starts_with("timeout")),
        "the first attempt timed out: {attempts:?}"
    );
    assert_one_key(&proxy.keys(), &report);
    let fates = proxy.fates();
    assert_eq!(
        fates.iter().filter(|f| **f == "dropped").count(),
        2,
        "{fates:?}"
    );
    let body: serde_json::Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    let bookings = service.bookings(TENANT);
    assert_eq!(bookings.len(), 1, "exactly one booking: {bookings:?}");
    assert_eq!(
        body["id"], bookings[0]["id"],
        "the reply names the one booking"
    );
    eprintln!(
        "{} attempts in {elapsed:?} ({attempts:?}), proxy: {fates:?}, one booking {}",
        attempts.len(),
        bookings[0]["id"]
    );
}

#[test]
fn sigkill_mid_attempt_then_rerun_sends_the_same_key_and_books_once() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &["--provider-latency-ms", "1500"]);
    let proxy = Proxy::start(service.addr, 0);
    let journal = dir.path().join("agent.journal");

    let mut first = call(
        &journal,
        "run-2/book",
        &proxy.url(),
        BODY,
        &["--timeout-ms", "10000"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.keys().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the first attempt never reached the service"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // Mid-attempt: the service is still waiting on the calendar provider.
    first.kill().unwrap(); // SIGKILL
    let status = first.wait().unwrap();
    assert!(!status.success(), "killed: {status:?}");
    let sent_before_kill = proxy.keys();

    let out = call(
        &journal,
        "run-2/book",
        &proxy.url(),
        BODY,
        &["--timeout-ms", "10000"],
    )
    .output()
    .unwrap();
    let (code, report) = report(&out);
    assert_eq!(code, 0, "confirmed: {report}");
    assert_eq!(report["status"], "confirmed");
    assert_eq!(
        report["resumed"], true,
        "the re-run resumed the journalled action"
    );
    let keys = proxy.keys();
    assert!(
        keys.len() > sent_before_kill.len(),
        "the re-run sent again: {keys:?}"
    );
    assert_one_key(&keys, &report);
    assert_eq!(service.bookings(TENANT).len(), 1, "exactly one booking");
    eprintln!(
        "attempts across both runs: {:?}; keys sent: {}",
        outcomes(&report),
        keys.len()
    );
}

#[test]
fn outcome_uncertain_stops_the_retries_and_reports_unknown() {
    let dir = tempfile::tempdir().unwrap();
    // The service gives up on the calendar after 200 ms; the booking still lands
    // 1.5 s in. No reconciliation during the test, so the record stays Unknown.
    let service = Service::start(
        dir.path(),
        &[
            "--provider-latency-ms",
            "1500",
            "--provider-timeout-ms",
            "200",
            "--reconcile-every-ms",
            "600000",
        ],
    );
    let proxy = Proxy::start(service.addr, 0);

    let out = call(
        &dir.path().join("agent.journal"),
        "run-3/book",
        &proxy.url(),
        BODY,
        &["--timeout-ms", "5000", "--max-attempts", "8"],
    )
    .output()
    .unwrap();
    let (code, report) = report(&out);
    assert_eq!(code, 69, "unknown (EX_UNAVAILABLE): {report}");
    assert_eq!(report["status"], "unknown");
    assert_eq!(report["http_status"], 409);
    let attempts = outcomes(&report);
    assert_eq!(
        attempts.len(),
        2,
        "504, then 409 outcome-uncertain, then no more: {attempts:?}"
    );
    assert_eq!(report["attempts"][0]["http_status"], 504);
    let problem: serde_json::Value =
        serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    assert!(
        problem["type"]
            .as_str()
            .unwrap()
            .ends_with("/outcome-uncertain"),
        "{problem}"
    );
    assert_one_key(&proxy.keys(), &report);
    assert_eq!(proxy.keys().len(), 2, "nothing was sent after the 409");

    // The booking did land at the provider: "unknown" was the honest answer.
    let deadline = Instant::now() + Duration::from_secs(10);
    while service.bookings(TENANT).is_empty() {
        assert!(Instant::now() < deadline, "the slow booking never landed");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(service.bookings(TENANT).len(), 1);
}

#[test]
fn unprocessable_request_is_rejected_without_retry() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let proxy = Proxy::start(service.addr, 0);

    let out = call(
        &dir.path().join("agent.journal"),
        "run-4/book",
        &proxy.url(),
        r#"{"customer_id":7}"#,
        &["--max-attempts", "5"],
    )
    .output()
    .unwrap();
    let (code, report) = report(&out);
    assert_eq!(code, 2, "rejected: {report}");
    assert_eq!(report["status"], "rejected");
    assert_eq!(report["http_status"], 422);
    assert_eq!(outcomes(&report).len(), 1, "no retry after a 422");
    assert_eq!(proxy.keys().len(), 1);
    assert!(service.bookings(TENANT).is_empty(), "nothing booked");
}
