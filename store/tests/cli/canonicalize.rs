//! `idemkit canonicalize`: exact stdout bytes, exit codes, one-line stderr.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use std::process::Output;

fn run(args: &[&str], stdin: &[u8]) -> Output {
    crate::support::idemkit_with_stdin(args, stdin)
}

fn stderr_line(out: &Output) -> String {
    let s = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(s.matches('\n').count(), 1, "stderr must be one line: {s:?}");
    s
}

#[test]
fn stdin_gives_exact_canonical_bytes_without_newline() {
    let out = run(
        &["canonicalize"],
        br#" { "b": 1.0, "a": [1e0, "\u0061", "\u00e9"] } "#,
    );
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, "{\"a\":[1,\"a\",\"é\"],\"b\":1}".as_bytes());
    assert!(out.stderr.is_empty());
    let dash = run(&["canonicalize", "-"], b"[1.0]");
    assert_eq!(dash.stdout, b"[1]");
}

#[test]
fn file_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body.json");
    std::fs::write(&path, b"{\"z\":null,\"a\":true}").unwrap();
    let out = run(&["canonicalize", path.to_str().unwrap()], b"");
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, br#"{"a":true,"z":null}"#);
}

#[test]
fn rejection_exits_65_with_kind_offset_and_pointer() {
    let out = run(&["canonicalize"], br#"{"x":[{"a":1,"a":2}]}"#);
    assert_eq!(out.status.code(), Some(65));
    assert!(out.stdout.is_empty());
    let line = stderr_line(&out);
    assert!(line.contains("duplicate member name \"a\""), "{line}");
    assert!(line.contains("at byte 13"), "{line}");
    assert!(line.contains("(pointer /x/0/a)"), "{line}");
    assert!(line.contains("[json-duplicate-member-name]"), "{line}");
}

#[test]
fn profiles_differ_only_on_inexact_numbers() {
    let strict = run(&["canonicalize"], b"[9007199254740993]");
    assert_eq!(strict.status.code(), Some(65));
    let line = stderr_line(&strict);
    assert!(
        line.contains("json-number-not-exact")
            && line.contains("byte 1")
            && line.contains("pointer /0"),
        "{line}"
    );
    let plain = run(
        &["canonicalize", "--profile", "rfc8785"],
        b"[9007199254740993]",
    );
    assert_eq!(plain.status.code(), Some(0));
    assert_eq!(plain.stdout, b"[9007199254740992]");
}

#[test]
fn control_characters_in_names_do_not_break_the_line() {
    let out = run(&["canonicalize"], b"{\"a\\nb\":{\"c\":01}}");
    assert_eq!(out.status.code(), Some(65));
    let line = stderr_line(&out);
    assert!(line.contains("/a\\nb"), "{line}");
}

#[test]
fn unreadable_file_exits_66_naming_the_path() {
    let out = run(&["canonicalize", "/definitely/not/here.json"], b"");
    assert_eq!(out.status.code(), Some(66));
    assert!(stderr_line(&out).contains("/definitely/not/here.json"));
}

#[test]
fn help_shows_examples() {
    let out = run(&["canonicalize", "--help"], b"");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Examples:") && text.contains("idemkit canonicalize --profile rfc8785"),
        "{text}"
    );
}

/// A generated file over the library's 8 MiB default: members out of order, so
/// the canonical form differs from the input.
fn big_document(min_len: usize) -> (Vec<u8>, Vec<u8>) {
    let mut input = String::from("[");
    let mut canonical = String::from("[");
    let mut i = 0u64;
    while input.len() < min_len {
        if i > 0 {
            input.push(',');
            canonical.push(',');
        }
        input.push_str(&format!("{{\"z\":{i}.0,\"a\":\"x{i}\"}}"));
        canonical.push_str(&format!("{{\"a\":\"x{i}\",\"z\":{i}}}"));
        i += 1;
    }
    input.push(']');
    canonical.push(']');
    (input.into_bytes(), canonical.into_bytes())
}

#[test]
fn file_over_eight_mib_is_canonicalized_without_a_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.json");
    let (input, canonical) = big_document(9 << 20);
    std::fs::write(&path, &input).unwrap();
    let out = run(&["canonicalize", path.to_str().unwrap()], b"");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout == canonical,
        "output differs from the expected canonical form"
    );
}

#[test]
fn max_bytes_flag_rejects_a_larger_file_and_accepts_one_at_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body.json");
    std::fs::write(&path, b"[1.0, 2]").unwrap();
    let file = path.to_str().unwrap();
    let over = run(&["canonicalize", "--max-bytes", "7", file], b"");
    assert_eq!(over.status.code(), Some(65));
    assert!(over.stdout.is_empty());
    let line = stderr_line(&over);
    assert!(
        line.contains("input larger than 7 bytes") && line.contains("[json-input-too-large]"),
        "{line}"
    );
    let at = run(&["canonicalize", "--max-bytes", "8", file], b"");
    assert_eq!(at.status.code(), Some(0));
    assert_eq!(at.stdout, b"[1,2]");
    let stdin = run(&["canonicalize", "--max-bytes", "3"], b"[1.0]");
    assert_eq!(stdin.status.code(), Some(65));
}
