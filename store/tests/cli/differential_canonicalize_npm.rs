//! Differential test: our canonical output is byte-identical to npm
//! `canonicalize@4.0.0` (an independent RFC 8785 implementation, run by node
//! on `JSON.parse` of the same text) on a seeded random corpus of 5,000+
//! strict-acceptable documents: deep nesting, astral and private-use
//! characters, every escape spelling, exact number spellings. A few hundred go
//! through the real `idemkit canonicalize` binary too.
//!
//! Needs `npm ci --prefix store/tests/npm` first; without it the test fails
//! (never skips).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use crate::support::json_model as model;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use idemkit::core::json::canonicalize;
use model::{Rng, V, any_value, render};
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

const DOCUMENTS: usize = 5_000;
const THROUGH_BINARY: usize = 300;
const SEED: [u8; 32] = *b"idemkit differential npm seed v1";

fn npm_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/npm");
    assert!(
        dir.join("node_modules/canonicalize/package.json").is_file(),
        "npm canonicalize@4.0.0 is not installed in {}: run `npm ci --prefix store/tests/npm` first",
        dir.display()
    );
    dir
}

/// Wraps `v` in `depth` alternating arrays and objects.
fn nest(mut v: V, depth: usize) -> V {
    for d in 0..depth {
        v = if d % 2 == 0 {
            V::Arr(vec![V::Num(d as f64), v])
        } else {
            V::Obj(
                [
                    (format!("k\u{10437}{d}"), v),
                    ("\u{e000}".to_owned(), V::Null),
                ]
                .into_iter()
                .collect(),
            )
        };
    }
    v
}

fn corpus() -> Vec<String> {
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(RngAlgorithm::ChaCha, &SEED),
    );
    let strategy = any_value();
    (0..DOCUMENTS)
        .map(|i| {
            let mut v = strategy.new_tree(&mut runner).unwrap().current();
            if i % 20 == 0 {
                // Deep documents: up to the default limit of 128 levels.
                v = nest(v, 60 + i % 62);
            }
            render(&v, &mut Rng(i as u64))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn canonical_bytes_match_npm_canonicalize_4_0_0() {
    let dir = npm_dir();
    let docs = corpus();
    assert!(docs.len() >= 5_000);
    // The corpus really exercises what it claims to.
    let count = |f: &dyn Fn(&str) -> bool| docs.iter().filter(|d| f(d)).count();
    let features = [
        (
            "astral character",
            count(&|d| d.chars().any(|c| c > '\u{ffff}')),
        ),
        (
            "BMP private use",
            count(&|d| d.chars().any(|c| ('\u{e000}'..='\u{f8ff}').contains(&c))),
        ),
        ("\\u escape", count(&|d| d.contains("\\u"))),
        (
            "surrogate pair escape",
            count(&|d| d.contains("\\ud8") || d.contains("\\uD8")),
        ),
        (
            "exponent spelling",
            count(&|d| d.contains("e-") || d.contains("E+")),
        ),
        (
            "depth > 100",
            count(&|d| d.bytes().filter(|&b| b == b'[' || b == b'{').count() > 100),
        ),
    ];
    for (what, n) in features {
        assert!(n >= 20, "only {n} documents with {what}");
    }
    let ours: Vec<Vec<u8>> = docs
        .iter()
        .map(|d| {
            canonicalize(d.as_bytes())
                .unwrap_or_else(|e| panic!("strict rejected generated {d:?}: {e}"))
        })
        .collect();

    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("corpus.hex");
    let lines: Vec<String> = docs.iter().map(|d| hex(d.as_bytes())).collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let out = Command::new("node")
        .arg(dir.join("canonicalize-batch.mjs"))
        .arg(&input)
        .current_dir(&dir)
        .output()
        .expect("cannot run `node` (Node.js 18+ is needed for this test)");
    assert!(
        out.status.success(),
        "node failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let theirs: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(
        theirs.len(),
        docs.len(),
        "node printed a wrong number of lines"
    );

    let mut mismatches = Vec::new();
    for (i, ((doc, ours), theirs)) in docs.iter().zip(&ours).zip(&theirs).enumerate() {
        if theirs.starts_with("ERR") {
            mismatches.push(format!("#{i}: npm refused {doc:?}: {theirs}"));
        } else if unhex(theirs) != *ours {
            mismatches.push(format!(
                "#{i}: {doc:?}\n  ours: {}\n  npm:  {}",
                String::from_utf8_lossy(ours),
                String::from_utf8_lossy(&unhex(theirs))
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} documents differ from npm canonicalize:\n{}",
        mismatches.len(),
        docs.len(),
        mismatches
            .iter()
            .take(5)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );

    // The real binary gives the same bytes.
    for (doc, ours) in docs.iter().zip(&ours).take(THROUGH_BINARY) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
            .arg("canonicalize")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(doc.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{doc:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(&out.stdout, ours, "binary differs on {doc:?}");
    }
}
