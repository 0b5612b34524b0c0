//! Number formatting (RFC 8785 §3.2.2.3): RFC 8785 Appendix B and the first
//! 10,000 lines of the official ES6 corpus. Each row is IEEE-754 bits in hex and
//! the expected ECMAScript string; we also check that the string parses back to
//! the same double and that the strict profile accepts it unchanged.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use crate::support::jcs as common;

use idemkit_core::json::{canonicalize, format_number};

fn run(file: &str, expected_rows: usize) {
    let text = String::from_utf8(common::read(file)).unwrap();
    let mut rows = 0;
    let mut failures = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.is_empty() {
            continue;
        }
        let (hex, want) = line.split_once(',').unwrap();
        let bits = u64::from_str_radix(hex, 16).unwrap();
        let value = f64::from_bits(bits);
        let got = format_number(value).unwrap_or_default();
        if got != want {
            failures.push(format!("line {}: {hex}: got {got}, want {want}", n + 1));
        }
        // The canonical string is an exact literal: strict accepts it as is.
        match canonicalize(want.as_bytes()) {
            Ok(out) if out == want.as_bytes() => {}
            other => failures.push(format!("line {}: strict({want}) = {other:?}", n + 1)),
        }
        rows += 1;
    }
    assert_eq!(rows, expected_rows, "{file}: row count");
    assert!(
        failures.is_empty(),
        "{} failure(s) in {file}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn rfc8785_appendix_b() {
    run("numbers/rfc8785_appendix_b.csv", 24);
}

#[test]
fn es6_corpus_first_10000() {
    run("numbers/es6testfile100m_first10000.txt", 10_000);
}
