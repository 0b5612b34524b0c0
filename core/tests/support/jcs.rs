//! Shared helpers: locating the checked-in JCS test data (`core/tests/data/jcs`) and hex decoding.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::panic,
    reason = "shared test helpers; not every test file uses each"
)]

use std::path::PathBuf;

/// `core/tests/data/jcs` (checked in; its README says where each file came from),
/// or a loud failure naming the path.
pub(crate) fn jcs_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/jcs");
    assert!(
        dir.join("README.md").is_file(),
        "JCS test data missing: expected it at {} (it is part of the repository)",
        dir.display()
    );
    dir
}

pub(crate) fn read(rel: &str) -> Vec<u8> {
    let path = jcs_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

pub(crate) fn hex(s: &str) -> Vec<u8> {
    let clean: Vec<u8> = s.bytes().filter(|b| b.is_ascii_hexdigit()).collect();
    clean
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
        .collect()
}
