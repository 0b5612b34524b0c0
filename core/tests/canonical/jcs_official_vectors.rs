//! The six official RFC 8785 vectors (cyberphone/json-canonicalization):
//! `input/X.json` must give exactly `output/X.json`, which must equal
//! `outhex/X.txt`. One test per file and profile.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use crate::support::jcs as common;

use idemkit_core::json::{CanonicalizeOptions, JsonErrorKind, Profile, canonicalize_with};

fn check(name: &str, profile: Profile) {
    let input = common::read(&format!("input/{name}.json"));
    let output = common::read(&format!("output/{name}.json"));
    let outhex = String::from_utf8(common::read(&format!("outhex/{name}.txt"))).unwrap();
    assert_eq!(
        common::hex(&outhex),
        output,
        "{name}: output/ and outhex/ disagree"
    );
    let opts = CanonicalizeOptions::default().profile(profile);
    let got = canonicalize_with(&input, &opts)
        .unwrap_or_else(|e| panic!("{name} ({profile:?}): rejected: {e}"));
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&output),
        "{name} ({profile:?})"
    );
    assert_eq!(got, output, "{name} ({profile:?}): bytes differ");
}

macro_rules! vector {
    ($rfc:ident, $strict:ident, $name:literal) => {
        #[test]
        fn $rfc() {
            check($name, Profile::Rfc8785);
        }
        #[test]
        fn $strict() {
            check($name, Profile::Strict);
        }
    };
}

vector!(arrays_rfc8785, arrays_strict, "arrays");
vector!(french_rfc8785, french_strict, "french");
vector!(structures_rfc8785, structures_strict, "structures");
vector!(unicode_rfc8785, unicode_strict, "unicode");
vector!(weird_rfc8785, weird_strict, "weird");

#[test]
fn values_rfc8785() {
    check("values", Profile::Rfc8785);
}

/// `values.json` holds `333333333.33333329`, which plain RFC 8785 rounds to
/// `333333333.3333333`: the strict profile must refuse it, naming the number.
#[test]
fn values_strict_is_rejected() {
    let input = common::read("input/values.json");
    let err = canonicalize_with(&input, &CanonicalizeOptions::default()).unwrap_err();
    assert_eq!(
        err.kind,
        JsonErrorKind::NumberNotExact {
            canonical: "333333333.3333333".into()
        },
        "{err}"
    );
    assert_eq!(err.pointer, "/numbers/0");
    assert_eq!(&input[err.offset..err.offset + 18], b"333333333.33333329");
}
