//! `idemkit probe URL` against real servers over HTTP:
//!
//! - the appointments service passes every required check (`key-required`,
//!   `key-too-long`, `replay`, `mismatch`, `concurrent`, `tenant-isolation`);
//! - a naive implementation (examples/naive_idempotency.rs: a map keyed by the
//!   header, looked up and filled after the work, no payload check, no tenant
//!   scope) passes
//!   the sequential `replay` and fails `concurrent`, `mismatch` and
//!   `tenant-isolation`: exit 1;
//! - `--verbose` lists every request it sends; usage errors exit 2.
//!
//! The npm handler served by Node is probed in wasm/test/node/probe.test.mjs.
#![cfg(feature = "axum")]

use crate::support;

use std::collections::HashMap;
use std::process::{Command, Output};

use serde_json::Value;
use support::Service;

fn probe(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg("probe")
        .args(args)
        .output()
        .unwrap()
}

/// `--json` output → check id → (result, detail).
fn verdicts(out: &Output) -> HashMap<String, (String, String)> {
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["id"].as_str().unwrap().to_owned(),
                (
                    c["result"].as_str().unwrap().to_owned(),
                    c["detail"].as_str().unwrap().to_owned(),
                ),
            )
        })
        .collect()
}

fn result_of<'a>(verdicts: &'a HashMap<String, (String, String)>, id: &str) -> &'a str {
    &verdicts
        .get(id)
        .unwrap_or_else(|| panic!("no check {id}: {verdicts:?}"))
        .0
}

const REQUIRED: [&str; 6] = [
    "key-required",
    "key-too-long",
    "replay",
    "mismatch",
    "concurrent",
    "tenant-isolation",
];

#[test]
fn probe_passes_every_required_check_against_the_appointments_service() {
    let dir = tempfile::tempdir().unwrap();
    let service = Service::start(dir.path(), &[]);
    let url = format!("http://{}/appointments", service.addr);
    let out = probe(&[
        &url,
        "-H",
        "Authorization: Bearer clinic-a",
        "-d",
        r#"{"customer_id":"c-1","slot_id":"s-9"}"#,
        "--other-tenant-header",
        "Authorization: Bearer clinic-b",
        "--json",
    ]);
    let got = verdicts(&out);
    for id in REQUIRED {
        assert_eq!(result_of(&got, id), "pass", "{id}: {:?}", got[id]);
    }
    for id in ["replay-marker", "equivalent-body", "problem-json"] {
        assert_eq!(result_of(&got, id), "pass", "{id}: {:?}", got[id]);
    }
    assert_eq!(out.status.code(), Some(0), "{got:?}");
    // The probe's requests are real: one booking per executed request of
    // clinic-a (replay, concurrent), none from the refused ones.
    let bookings = service.bookings("clinic-a");
    assert_eq!(bookings.len(), 2, "{bookings:?}");
}

#[test]
fn probe_fails_a_naive_header_keyed_server_on_concurrency_mismatch_and_isolation() {
    let naive = Service::spawn(support::naive_binary(), &[]);
    let url = format!("http://{}/charges", naive.addr);
    let out = probe(&[
        &url,
        "-H",
        "Authorization: Bearer a",
        "-d",
        r#"{"amount":1200,"currency":"EUR"}"#,
        "--other-tenant-header",
        "Authorization: Bearer b",
        "--json",
    ]);
    let got = verdicts(&out);
    assert_eq!(out.status.code(), Some(1), "{got:?}");
    assert_eq!(result_of(&got, "replay"), "pass", "{got:?}");
    for id in ["concurrent", "mismatch", "tenant-isolation"] {
        assert_eq!(result_of(&got, id), "fail", "{id}: {:?}", got[id]);
    }
    assert!(
        got["mismatch"].1.contains("silently never happened"),
        "{:?}",
        got["mismatch"]
    );
    assert!(
        got["concurrent"].1.contains("ran more than once"),
        "{:?}",
        got["concurrent"]
    );
    // It ran without a key and took a 256-character one.
    assert_eq!(result_of(&got, "key-required"), "warn");
    assert_eq!(result_of(&got, "key-too-long"), "fail");
    let charges: usize = String::from_utf8_lossy(&naive.get("/charges", None).body)
        .parse()
        .unwrap();
    assert!(
        charges > 20,
        "the simultaneous requests all charged: {charges}"
    );
}

#[test]
fn verbose_lists_every_request_and_the_table_names_each_check() {
    let naive = Service::spawn(support::naive_binary(), &[]);
    let url = format!("http://{}/charges", naive.addr);
    let out = probe(&[
        &url,
        "-d",
        r#"{"amount":1}"#,
        "--concurrency",
        "5",
        "--other-tenant-header",
        "Authorization: Bearer b",
        "--verbose",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let sent = stderr
        .lines()
        .filter(|l| l.starts_with("probe: ") && !l.contains("-> "))
        .count();
    assert_eq!(
        sent,
        9 + 5,
        "7 + N requests, 2 more for isolation:\n{stderr}"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    for id in REQUIRED {
        assert!(table.contains(id), "{table}");
    }
    assert!(table.contains("fail"), "{table}");
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["ftp://example.com/x"][..],
        &["http://127.0.0.1:9/x", "-H", "no colon"][..],
        &["http://127.0.0.1:9/x", "--vary", "/missing", "-d", "{}"][..],
        &["http://127.0.0.1:9/x", "--concurrency", "1"][..],
        &["http://127.0.0.1:9/x", "--no-such-flag"][..],
        &[][..],
    ] {
        let out = probe(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
