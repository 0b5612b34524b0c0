//! Canonicalization never panics; its output is a fixed point; strict output
//! is the same JSON value as the input (serde_json, numbers compared as f64);
//! a small input read in one pass (`canonicalize_with`) gets the answer of the
//! two streaming passes (`canonicalize_to`), bytes or error.
#![no_main]

use idemkit_core::json::{CanonicalizeOptions, Profile, canonicalize_to, canonicalize_with};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for profile in [Profile::Strict, Profile::Rfc8785] {
        // Below serde_json's own recursion limit (128), so it can parse what we accept.
        let opts = CanonicalizeOptions::default()
            .profile(profile)
            .max_depth(100);
        let built = canonicalize_with(data, &opts);
        let mut streamed = Vec::new();
        let streamed = canonicalize_to(data, &opts, &mut streamed).map(|()| streamed);
        assert_eq!(built, streamed, "one pass and two passes disagree");
        let Ok(out) = built else {
            continue;
        };
        let again = canonicalize_with(&out, &opts).expect("canonical output must be accepted");
        assert_eq!(again, out, "canonicalization is not idempotent");
        if profile == Profile::Strict {
            let input: serde_json::Value =
                serde_json::from_slice(data).expect("serde_json refuses what strict accepted");
            let output: serde_json::Value =
                serde_json::from_slice(&out).expect("serde_json refuses our output");
            assert!(same(&input, &output), "value changed: {input} -> {output}");
        }
    }
});

fn same(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) => x.as_f64() == y.as_f64(),
        (J::Array(x), J::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}
