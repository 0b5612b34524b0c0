//! Fingerprinting never panics for arbitrary pointers and bodies, and selection
//! is consistent: the order and repetition of pointers do not matter, and a
//! JSON body fingerprints like its canonical form.
#![no_main]

use idemkit_core::fingerprint::{ContentKind, FingerprintSpec};
use idemkit_core::json::canonicalize;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    include: Vec<String>,
    exclude: Vec<String>,
    mime: u8,
    body: Vec<u8>,
}

fn spec(kind: ContentKind, include: &[&String], exclude: &[&String]) -> FingerprintSpec {
    let mut spec = FingerprintSpec::new(kind);
    for p in include {
        if let Ok(s) = spec.clone().include(p) {
            spec = s;
        }
    }
    for p in exclude {
        if let Ok(s) = spec.clone().exclude(p) {
            spec = s;
        }
    }
    spec
}

fuzz_target!(|input: Input| {
    let kind = match input.mime % 3 {
        0 => ContentKind::Json,
        1 => ContentKind::FormUrlEncoded,
        _ => ContentKind::Raw,
    };
    let include: Vec<&String> = input.include.iter().take(4).collect();
    let exclude: Vec<&String> = input.exclude.iter().take(4).collect();
    let forward = spec(kind, &include, &exclude);
    let result = forward.fingerprint("op", &input.body);

    // Order and repetition of the pointers change nothing.
    let mut rev_inc = include.clone();
    rev_inc.reverse();
    rev_inc.extend(include.iter().copied());
    let mut rev_exc = exclude.clone();
    rev_exc.reverse();
    let reordered = spec(kind, &rev_inc, &rev_exc).fingerprint("op", &input.body);
    assert_eq!(result, reordered, "pointer order matters");

    // A JSON body fingerprints like its canonical form.
    if kind == ContentKind::Json {
        if let Ok(fp) = &result {
            let canonical = canonicalize(&input.body).expect("fingerprinted but not canonical");
            assert_eq!(forward.fingerprint("op", &canonical).as_ref(), Ok(fp));
        }
    }
});
