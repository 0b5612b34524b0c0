//! `idemkit fingerprint`: 64 hex characters and a newline, equal to the library's
//! result; selection flags; exit codes and one-line stderr.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use std::process::Output;

use idemkit::core::fingerprint::{ContentKind, FingerprintSpec};

fn run(args: &[&str], stdin: &[u8]) -> Output {
    let args: Vec<&str> = std::iter::once("fingerprint")
        .chain(args.iter().copied())
        .collect();
    crate::support::idemkit_with_stdin(&args, stdin)
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

/// With `--method` and `--path` the request line counts (scheme 2), equal to the
/// library; the value is pinned (it was computed independently, see core's
/// `scheme_2_golden_value`).
#[test]
fn request_line_flags_frame_method_path_and_sorted_query() {
    let fp = |extra: &[&str], body: &[u8]| {
        let mut args = vec!["--operation", "accounts.withdraw"];
        args.extend_from_slice(extra);
        ok_hex(&run(&args, body))
    };
    let body = br#"{"amount":10}"#;
    let a = fp(
        &[
            "--method",
            "POST",
            "--path",
            "/accounts/A/withdraw",
            "--query",
            "b=2&a=1",
        ],
        body,
    );
    assert_eq!(
        a,
        "398f37b8cec382b83905ba4e2d772c7e93e699e7737cc0d1e0a87b4eeb0188ef"
    );
    let line = idemkit::core::fingerprint::RequestLine::new(
        "POST",
        "/accounts/A/withdraw",
        Some("b=2&a=1"),
    );
    let lib = FingerprintSpec::new(ContentKind::Json)
        .fingerprint_request("accounts.withdraw", &line, body)
        .unwrap();
    assert_eq!(a, lib.value().to_string());
    // A leading `?` is dropped; pairs are sorted by name, spelling decoded.
    let same = [
        "--method=POST",
        "--path=/accounts/A/withdraw",
        "--query=?a=1&b=2",
    ];
    assert_eq!(fp(&same, br#"{ "amount": 10 }"#), a);
    let b = fp(
        &[
            "--method",
            "POST",
            "--path",
            "/accounts/B/withdraw",
            "--query",
            "a=1&b=2",
        ],
        body,
    );
    assert_ne!(a, b, "another path is another request");
    let put = fp(
        &[
            "--method",
            "PUT",
            "--path",
            "/accounts/A/withdraw",
            "--query",
            "a=1&b=2",
        ],
        body,
    );
    assert_ne!(a, put, "another method is another request");
    // Without the request line: scheme 1, the body-only fingerprint.
    assert_eq!(fp(&[], body), lib.body_only_fingerprint().to_string());
    assert_ne!(fp(&[], body), a);
    // Left-out query parameters.
    let tracked = [
        "--method",
        "POST",
        "--path",
        "/accounts/A/withdraw",
        "--query",
        "a=1&b=2&utm_source=mail",
        "--ignore-query-param",
        "utm_source",
    ];
    assert_eq!(fp(&tracked, body), a);
    let ignored = [
        "--method",
        "POST",
        "--path",
        "/accounts/A/withdraw",
        "--query",
        "x=%zz",
        "--ignore-query",
    ];
    let no_query = fp(
        &["--method", "POST", "--path", "/accounts/A/withdraw"],
        body,
    );
    assert_eq!(fp(&ignored, body), no_query);
}

#[test]
fn request_line_flags_need_each_other() {
    for args in [
        &["--method", "POST"][..],
        &["--path", "/a"][..],
        &["--query", "a=1"][..],
        &[
            "--method",
            "POST",
            "--path",
            "/a",
            "--ignore-query",
            "--ignore-query-param",
            "a",
        ][..],
    ] {
        let out = run(args, b"{}");
        assert_eq!(
            out.status.code(),
            Some(64),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
