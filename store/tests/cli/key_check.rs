//! `idemkit key check`: the same core rule as the middleware and the npm package. A
//! bare value holding `,` (what HTTP makes of two field lines) is refused with its
//! offset and code; quoted, the comma is part of the key.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use std::process::{Command, Output};

fn check(value: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["key", "check", value])
        .output()
        .unwrap()
}

#[test]
fn bare_key_with_a_comma_is_refused_with_offset_and_code() {
    for (value, offset) in [("a,b", 1), ("a, b", 1), (" x,", 2)] {
        let out = check(value);
        assert_eq!(out.status.code(), Some(65), "{value:?}");
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains(&format!("',' at offset {offset}"))
                && stderr.contains("[key-bare-comma]"),
            "{value:?}: {stderr}"
        );
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    }
}

#[test]
fn quoted_key_may_hold_a_comma() {
    let out = check("\"a,b\"");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "a,b\n");
    let bare = check("order-42");
    assert_eq!(String::from_utf8(bare.stdout).unwrap(), "order-42\n");
}
