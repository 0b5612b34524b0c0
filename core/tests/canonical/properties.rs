//! Property tests of the headline guarantee: with the strict profile two
//! accepted inputs give the same bytes if and only if they are the same JSON
//! value, and no input of any kind panics.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use crate::support::model;

use idemkit_core::json::{CanonicalizeOptions, Profile, canonicalize, canonicalize_with};
use model::{Rng, V, any_string, any_value, decimal_parts, mutate, render};
use proptest::prelude::*;

fn strict(text: &str) -> Vec<u8> {
    canonicalize(text.as_bytes()).unwrap_or_else(|e| panic!("rejected {text:?}: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Every spelling of one value (member order, whitespace, escapes, number
    /// spelling) gives identical bytes, in both profiles, and canonicalizing the
    /// output again changes nothing.
    #[test]
    fn spellings_of_one_value_agree(v in any_value(), s1 in any::<u64>(), s2 in any::<u64>()) {
        let a = render(&v, &mut Rng(s1));
        let b = render(&v, &mut Rng(s2));
        let ca = strict(&a);
        prop_assert_eq!(&ca, &strict(&b), "{:?} vs {:?}", a, b);
        prop_assert_eq!(&ca, &strict(std::str::from_utf8(&ca).unwrap()), "not idempotent");
        let plain = CanonicalizeOptions::default().profile(Profile::Rfc8785);
        prop_assert_eq!(&ca, &canonicalize_with(a.as_bytes(), &plain).unwrap());
        // serde_json agrees on the value.
        let back: serde_json::Value = serde_json::from_slice(&ca).unwrap();
        let orig: serde_json::Value = serde_json::from_str(&a).unwrap();
        prop_assert!(same_json(&back, &orig));
    }

    /// The records of an array that share their names, some spelled and
    /// ordered alike (an order reused from the record before), some not, each
    /// come out exactly as they do alone.
    #[test]
    fn records_sharing_their_names_come_out_as_they_do_alone(
        names in proptest::collection::btree_set(any_string(), 2..9),
        values in proptest::collection::vec(any_value(), 1..6),
        seeds in proptest::collection::vec(any::<u64>(), 1..4),
        repeat in 1usize..4,
    ) {
        let mut records = Vec::new();
        for (n, value) in values.iter().enumerate() {
            let record = V::Obj(names.iter().map(|name| (name.clone(), value.clone())).collect());
            let seed = seeds[n % seeds.len()];
            for _ in 0..repeat {
                records.push(render(&record, &mut Rng(seed)));
            }
        }
        let whole = strict(&format!("[{}]", records.join(",")));
        let alone: Vec<String> = records
            .iter()
            .map(|r| String::from_utf8(strict(r)).unwrap())
            .collect();
        prop_assert_eq!(String::from_utf8(whole).unwrap(), format!("[{}]", alone.join(",")));
    }

    /// Different values never give identical bytes: a value and a one-leaf
    /// mutation of it (the nearest double, one more character, …).
    #[test]
    fn different_values_differ(v in any_value(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let w = mutate(&v, &mut rng);
        prop_assume!(v != w);
        let a = strict(&render(&v, &mut rng));
        let b = strict(&render(&w, &mut rng));
        prop_assert_ne!(a, b);
    }

    /// Independent values: equal bytes exactly when the models are equal.
    #[test]
    fn bytes_equal_iff_values_equal(v in any_value(), w in any_value(), seed in any::<u64>()) {
        let mut rng = Rng(seed);
        let a = strict(&render(&v, &mut rng));
        let b = strict(&render(&w, &mut rng));
        prop_assert_eq!(a == b, v == w);
    }

    /// Arbitrary number literals: when strict accepts two of them, they give the
    /// same bytes iff their exact decimal values are equal.
    #[test]
    fn accepted_numbers_collide_only_when_exactly_equal(
        a in "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
        b in "-?(0|[1-9][0-9]{0,20})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
    ) {
        if let (Ok(ca), Ok(cb)) = (canonicalize(a.as_bytes()), canonicalize(b.as_bytes())) {
            prop_assert_eq!(ca == cb, decimal_parts(&a) == decimal_parts(&b), "{} {}", a, b);
            // And the output denotes exactly the literal's value.
            prop_assert_eq!(decimal_parts(std::str::from_utf8(&ca).unwrap()), decimal_parts(&a));
        }
    }

    /// Arbitrary bytes never panic, in either profile.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        for profile in [Profile::Strict, Profile::Rfc8785] {
            let opts = CanonicalizeOptions::default().profile(profile).max_depth(8);
            if let Ok(out) = canonicalize_with(&bytes, &opts) {
                prop_assert_eq!(&canonicalize_with(&out, &opts).unwrap(), &out);
            }
        }
    }

    /// JSON-like byte soup (tokens, brackets, escapes) reaches deeper paths of
    /// the parser; it must never panic and errors must point inside the input.
    #[test]
    fn json_like_soup_never_panics(parts in proptest::collection::vec(prop_oneof![
        Just("{"), Just("}"), Just("["), Just("]"), Just(","), Just(":"), Just("\""),
        Just("\\u"), Just("\\ud83d"), Just("\\ude00"), Just("\\"), Just("1"), Just("-0"),
        Just("1e400"), Just(".5"), Just("e"), Just("null"), Just("tru"), Just(" "),
        Just("\u{feff}"), Just("\u{1}"), Just("é"), Just("\"a\":"), Just("\"a\""),
    ], 0..40)) {
        let text: String = parts.concat();
        for profile in [Profile::Strict, Profile::Rfc8785] {
            let opts = CanonicalizeOptions::default().profile(profile).max_depth(6);
            match canonicalize_with(text.as_bytes(), &opts) {
                Ok(out) => prop_assert_eq!(&canonicalize_with(&out, &opts).unwrap(), &out),
                Err(e) => prop_assert!(e.offset <= text.len(), "{e} for {text:?}"),
            }
        }
    }
}

/// serde_json values equal, numbers compared as f64.
fn same_json(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    use serde_json::Value as J;
    match (a, b) {
        (J::Number(x), J::Number(y)) => x.as_f64() == y.as_f64(),
        (J::Array(x), J::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_json(p, q))
        }
        (J::Object(x), J::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| same_json(v, w)))
        }
        _ => a == b,
    }
}

#[test]
fn model_renders_are_valid_json_for_a_fixed_seed() {
    let v = V::Obj(
        [(
            "a/b~".to_owned(),
            V::Arr(vec![V::Num(1e21), V::Str("\u{1f600}\n".into())]),
        )]
        .into_iter()
        .collect(),
    );
    assert_eq!(
        strict(&render(&v, &mut Rng(7))),
        "{\"a/b~\":[1e+21,\"\u{1f600}\\n\"]}".as_bytes()
    );
}
