//! `idemkit fingerprint`: 64 hex characters and a newline, equal to the library's
//! result; selection flags; exit codes and one-line stderr.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use idemkit::core::fingerprint::{ContentKind, FingerprintSpec};

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg("fingerprint")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn ok_hex(out: &Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout.clone()).unwrap();
    assert_eq!(s.len(), 65, "{s:?}");
    assert!(s.ends_with('\n'));
    s.trim_end().to_owned()
}

#[test]
fn matches_the_library_and_ignores_spelling() {
    let body = br#"{"slot":"09:00","request_id":"r1","n":1.0}"#;
    let cli = ok_hex(&run(
        &[
            "--operation",
            "appointments.create",
            "--schema-version",
            "3",
            "--exclude",
            "/request_id",
        ],
        body,
    ));
    let lib = FingerprintSpec::new(ContentKind::Json)
        .schema_version(3)
        .exclude("/request_id")
        .unwrap()
        .fingerprint("appointments.create", body)
        .unwrap();
    assert_eq!(cli, lib.to_string());
    let respelled = ok_hex(&run(
        &[
            "--operation",
            "appointments.create",
            "--schema-version",
            "3",
            "--exclude",
            "/request_id",
        ],
        br#"{ "n": 1e0, "request_id": "other", "slot": "\u0030\u0039:00" }"#,
    ));
    assert_eq!(cli, respelled);
}

#[test]
fn operation_schema_and_selection_change_the_fingerprint() {
    let body = br#"{"a":1,"b":null}"#;
    let base = ok_hex(&run(&["--operation", "x"], body));
    assert_ne!(base, ok_hex(&run(&["--operation", "y"], body)));
    assert_ne!(
        base,
        ok_hex(&run(&["--operation", "x", "--schema-version", "2"], body))
    );
    let null_b = ok_hex(&run(&["--include", "/b"], body));
    let absent_b = ok_hex(&run(&["--include", "/b"], br#"{"a":1}"#));
    assert_ne!(null_b, absent_b, "absent must differ from null");
    assert_eq!(
        null_b,
        ok_hex(&run(&["--include", "/b"], br#"{"a":2,"b":null}"#))
    );
}

#[test]
fn file_input_and_form_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body.txt");
    std::fs::write(&path, b"b=2&a=1&a=0").unwrap();
    let form = ["--content-type", "application/x-www-form-urlencoded"];
    let from_file = ok_hex(&run(&[form[0], form[1], path.to_str().unwrap()], b""));
    assert_eq!(from_file, ok_hex(&run(&form, b"a=1&a=0&b=2")));
    assert_ne!(
        from_file,
        ok_hex(&run(&form, b"a=0&a=1&b=2")),
        "repeated names keep their order"
    );
    let bad = run(&form, b"a=%zz");
    assert_eq!(bad.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("form-invalid-percent-escape"));
}

#[test]
fn rejected_json_exits_65_with_one_line() {
    let out = run(&[], br#"{"a":[1,2,NaN]}"#);
    assert_eq!(out.status.code(), Some(65));
    let line = String::from_utf8(out.stderr).unwrap();
    assert_eq!(line.matches('\n').count(), 1);
    assert!(
        line.contains("invalid token at byte 10 (pointer /a/2) [json-invalid-token]"),
        "{line}"
    );
}

#[test]
fn bad_pointer_is_a_usage_error_and_missing_file_exits_66() {
    let out = run(&["--include", "a/b"], b"{}");
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("pointer-missing-leading-slash"));
    let out = run(&["--exclude", "/a~2"], b"{}");
    assert_eq!(out.status.code(), Some(64));
    let out = run(&["/no/such/body.json"], b"");
    assert_eq!(out.status.code(), Some(66));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/no/such/body.json"));
}

#[test]
fn help_shows_examples() {
    let out = run(&["--help"], b"");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Examples:") && text.contains("--exclude /request_id"),
        "{text}"
    );
}
