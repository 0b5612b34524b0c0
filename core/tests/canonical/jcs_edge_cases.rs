//! All 72 cases of `core/tests/data/jcs/edge_cases.json`, in both profiles: exact
//! output bytes or a rejection (`implementation-defined` accepts either).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use crate::support::jcs as common;

use idemkit_core::json::{CanonicalizeOptions, Profile, canonicalize_with};
use serde_json::Value;

fn run(profile: Profile, field: &str) {
    let doc: Value = serde_json::from_slice(&common::read("edge_cases.json")).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 72, "edge_cases.json should hold 72 cases");
    let opts = CanonicalizeOptions::default().profile(profile);
    let mut failures = Vec::new();
    for case in cases {
        let id = case["id"].as_str().unwrap();
        let input = common::hex(case["input_hex"].as_str().unwrap());
        let expect = &case[field];
        let got = canonicalize_with(&input, &opts);
        match (expect["result"].as_str().unwrap(), &got) {
            ("ok", Ok(out)) => {
                let want = common::hex(expect["output_hex"].as_str().unwrap());
                if *out != want {
                    failures.push(format!(
                        "{id}: got {:?}, want {:?}",
                        String::from_utf8_lossy(out),
                        String::from_utf8_lossy(&want)
                    ));
                }
            }
            ("ok", Err(e)) => failures.push(format!("{id}: rejected ({e}) but should pass")),
            ("reject", Ok(out)) => failures.push(format!(
                "{id}: accepted as {:?} but should be rejected ({})",
                String::from_utf8_lossy(out),
                expect["reason"]
            )),
            ("reject", Err(_)) | ("implementation-defined", _) => {}
            (other, _) => failures.push(format!("{id}: unknown expectation {other}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing case(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn edge_cases_strict_profile() {
    run(Profile::Strict, "strict");
}

#[test]
fn edge_cases_rfc8785_profile() {
    run(Profile::Rfc8785, "rfc8785");
}

/// Our choices where the file says `implementation-defined`: both profiles
/// reject a leading BOM and nesting deeper than 128.
#[test]
fn implementation_defined_choices_are_rejections() {
    let opts = CanonicalizeOptions::default().profile(Profile::Rfc8785);
    assert!(canonicalize_with(b"\xef\xbb\xbf{}", &opts).is_err());
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    assert!(canonicalize_with(deep.as_bytes(), &opts).is_err());
    let ok = format!("{}{}", "[".repeat(128), "]".repeat(128));
    assert!(canonicalize_with(ok.as_bytes(), &opts).is_ok());
}
