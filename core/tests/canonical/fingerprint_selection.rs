//! Fingerprint field selection: excluded fields never matter, included ones
//! always do, an absent selected member differs from `null`, and spelling never
//! matters.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use crate::support::model;

use std::collections::BTreeMap;

use idemkit_core::fingerprint::{ContentKind, FingerprintError, FingerprintSpec, SpecError};
use idemkit_core::json::PointerError;
use model::{Rng, V, any_string, any_value, mutate, render};
use proptest::prelude::*;

fn pointer_token(k: &str) -> String {
    k.replace('~', "~0").replace('/', "~1")
}

fn fp(spec: &FingerprintSpec, v: &V, seed: u64) -> String {
    let body = render(v, &mut Rng(seed));
    spec.fingerprint("op", body.as_bytes()).unwrap().to_string()
}

fn object() -> impl Strategy<Value = BTreeMap<String, V>> {
    proptest::collection::btree_map(any_string(), any_value(), 1..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Changing an excluded member (or dropping it) never changes the
    /// fingerprint; changing any other member does.
    #[test]
    fn exclude_hides_exactly_the_excluded_member(
        members in object(), pick in any::<prop::sample::Index>(), seed in any::<u64>(),
    ) {
        let key = members.keys().nth(pick.index(members.len())).unwrap().clone();
        let spec = FingerprintSpec::new(ContentKind::Json)
            .exclude(&format!("/{}", pointer_token(&key))).unwrap();
        let base = fp(&spec, &V::Obj(members.clone()), seed);
        let mut rng = Rng(seed);
        let mut changed = members.clone();
        changed.insert(key.clone(), mutate(&members[&key], &mut rng));
        prop_assert_eq!(&base, &fp(&spec, &V::Obj(changed), seed ^ 1));
        let mut dropped = members.clone();
        dropped.remove(&key);
        prop_assert_eq!(&base, &fp(&spec, &V::Obj(dropped), seed ^ 2));
        for other in members.keys().filter(|k| **k != key) {
            let mut changed = members.clone();
            changed.insert(other.clone(), mutate(&members[other], &mut rng));
            prop_assert_ne!(&base, &fp(&spec, &V::Obj(changed), seed));
        }
    }

    /// With an include list only the included member counts; absent ≠ null.
    #[test]
    fn include_covers_exactly_the_included_member(
        members in object(), pick in any::<prop::sample::Index>(), seed in any::<u64>(),
    ) {
        let key = members.keys().nth(pick.index(members.len())).unwrap().clone();
        let spec = FingerprintSpec::new(ContentKind::Json)
            .include(&format!("/{}", pointer_token(&key))).unwrap();
        let base = fp(&spec, &V::Obj(members.clone()), seed);
        let mut rng = Rng(seed);
        for other in members.keys().filter(|k| **k != key) {
            let mut changed = members.clone();
            changed.insert(other.clone(), mutate(&members[other], &mut rng));
            prop_assert_eq!(&base, &fp(&spec, &V::Obj(changed), seed ^ 3));
        }
        let mut changed = members.clone();
        changed.insert(key.clone(), mutate(&members[&key], &mut rng));
        prop_assert_ne!(&base, &fp(&spec, &V::Obj(changed), seed));
        let mut null = members.clone();
        null.insert(key.clone(), V::Null);
        let mut absent = members.clone();
        absent.remove(&key);
        prop_assert_ne!(fp(&spec, &V::Obj(null), seed), fp(&spec, &V::Obj(absent), seed));
    }

    /// Whole-body fingerprints ignore spelling and see every change.
    #[test]
    fn whole_body_fingerprint_is_the_value(v in any_value(), s1 in any::<u64>(), s2 in any::<u64>()) {
        let spec = FingerprintSpec::new(ContentKind::Json);
        prop_assert_eq!(fp(&spec, &v, s1), fp(&spec, &v, s2));
        let w = mutate(&v, &mut Rng(s1));
        prop_assume!(v != w);
        prop_assert_ne!(fp(&spec, &v, s1), fp(&spec, &w, s2));
    }

    /// Arbitrary pointers and bodies never panic.
    #[test]
    fn arbitrary_pointers_and_bodies_never_panic(
        include in proptest::collection::vec("(/[a~01/]{0,3}){0,3}|[^/].*", 0..3),
        exclude in proptest::collection::vec("(/[a~01/]{0,3}){0,3}", 0..3),
        body in proptest::collection::vec(any::<u8>(), 0..64),
        mime in prop_oneof![Just("application/json"), Just("text/plain"), Just("application/x-www-form-urlencoded")],
    ) {
        let mut spec = FingerprintSpec::new(ContentKind::from_mime(mime));
        for p in &include {
            if let Ok(s) = spec.clone().include(p) { spec = s; }
        }
        for p in &exclude {
            if let Ok(s) = spec.clone().exclude(p) { spec = s; }
        }
        let _ = spec.fingerprint("op", &body);
    }
}

#[test]
fn nested_pointers_and_array_elements() {
    let spec = FingerprintSpec::new(ContentKind::Json)
        .include("/order/items/0/sku")
        .unwrap()
        .include("/a~1b")
        .unwrap();
    let f = |body: &str| spec.fingerprint("op", body.as_bytes()).unwrap();
    let base = f(r#"{"order":{"items":[{"sku":"x","n":1}],"at":5},"a/b":1}"#);
    assert_eq!(
        base,
        f(r#"{"a/b":1.0,"order":{"at":6,"items":[{"n":2,"sku":"x"}]}}"#)
    );
    assert_ne!(base, f(r#"{"order":{"items":[{"sku":"y"}]},"a/b":1}"#));
    assert_ne!(base, f(r#"{"order":{"items":[]},"a/b":1}"#));
    // Include order does not matter.
    let swapped = FingerprintSpec::new(ContentKind::Json)
        .include("/a~1b")
        .unwrap()
        .include("/order/items/0/sku")
        .unwrap();
    assert_eq!(
        base,
        swapped
            .fingerprint("op", br#"{"order":{"items":[{"sku":"x"}]},"a/b":1}"#)
            .unwrap()
    );
}

#[test]
fn operation_schema_and_kind_are_framed() {
    let json = FingerprintSpec::new(ContentKind::Json);
    let raw = FingerprintSpec::new(ContentKind::Raw);
    let a = json.fingerprint("op", b"{}").unwrap();
    assert_ne!(a, json.fingerprint("op2", b"{}").unwrap());
    assert_ne!(
        a,
        json.clone()
            .schema_version(2)
            .fingerprint("op", b"{}")
            .unwrap()
    );
    assert_ne!(a, raw.fingerprint("op", b"{}").unwrap());
    // Framing: moving bytes between operation and body changes the result.
    assert_ne!(
        raw.fingerprint("ab", b"c").unwrap(),
        raw.fingerprint("a", b"bc").unwrap()
    );
    // Raw bodies are bytes as they are.
    assert_ne!(
        raw.fingerprint("op", b"{ }").unwrap(),
        raw.fingerprint("op", b"{}").unwrap()
    );
}

#[test]
fn form_bodies_sort_by_name_and_keep_repeats_in_order() {
    let form = FingerprintSpec::new(ContentKind::from_mime(
        "application/x-www-form-urlencoded; charset=utf-8",
    ));
    let f = |b: &[u8]| form.fingerprint("op", b).unwrap();
    assert_eq!(f(b"b=2&a=1&a=3"), f(b"a=1&b=2&a=3"));
    assert_eq!(f(b"a=x+y&b=%C3%A9"), f(b"b=\xc3\xa9&a=x%20y"));
    assert_ne!(f(b"a=1&a=3"), f(b"a=3&a=1"));
    assert_ne!(f(b"a=1&b=2"), f(b"a=1b=2"));
}

#[test]
fn typed_errors() {
    assert_eq!(
        FingerprintSpec::new(ContentKind::Json)
            .include("a")
            .unwrap_err(),
        SpecError::Pointer {
            pointer: "a".into(),
            error: PointerError::MissingLeadingSlash
        }
    );
    assert_eq!(
        FingerprintSpec::new(ContentKind::Json)
            .exclude("/a~")
            .unwrap_err(),
        SpecError::Pointer {
            pointer: "/a~".into(),
            error: PointerError::InvalidEscape { offset: 2 }
        }
    );
    assert_eq!(
        FingerprintSpec::new(ContentKind::Json)
            .exclude("")
            .unwrap_err(),
        SpecError::ExcludeRoot
    );
    let raw = FingerprintSpec::new(ContentKind::Raw)
        .include("/a")
        .unwrap();
    assert_eq!(
        raw.fingerprint("op", b"{}").unwrap_err(),
        FingerprintError::SelectionNeedsJson
    );
    let json = FingerprintSpec::new(ContentKind::Json);
    let err = json.fingerprint("op", br#"{"a":[1,]}"#).unwrap_err();
    assert_eq!(err.code(), "json-invalid-token");
    assert!(matches!(err, FingerprintError::Json(e) if e.offset == 8 && e.pointer == "/a/1"));
}

#[test]
fn content_kind_from_mime() {
    for (mime, kind) in [
        ("application/json", ContentKind::Json),
        ("application/json; charset=utf-8", ContentKind::Json),
        ("APPLICATION/JSON", ContentKind::Json),
        ("application/merge-patch+json", ContentKind::Json),
        (
            "application/x-www-form-urlencoded",
            ContentKind::FormUrlEncoded,
        ),
        ("text/plain", ContentKind::Raw),
        ("application/jsonx", ContentKind::Raw),
        ("json", ContentKind::Raw),
        ("", ContentKind::Raw),
    ] {
        assert_eq!(ContentKind::from_mime(mime), kind, "{mime}");
    }
}

#[test]
fn exclusions_apply_before_inclusions() {
    let spec = FingerprintSpec::new(ContentKind::Json)
        .include("/a/b")
        .unwrap()
        .exclude("/a")
        .unwrap();
    let absent = FingerprintSpec::new(ContentKind::Json)
        .include("/a/b")
        .unwrap();
    assert_eq!(
        spec.fingerprint("op", br#"{"a":{"b":1}}"#).unwrap(),
        absent.fingerprint("op", b"{}").unwrap()
    );
    // An excluded array element is dropped and later ones move up.
    let spec = FingerprintSpec::new(ContentKind::Json)
        .exclude("/0")
        .unwrap();
    let whole = FingerprintSpec::new(ContentKind::Json);
    assert_eq!(
        spec.fingerprint("op", b"[1,2,3]").unwrap(),
        whole.fingerprint("op", b"[2,3]").unwrap()
    );
    // A pointer that selects nothing excludes nothing.
    let spec = FingerprintSpec::new(ContentKind::Json)
        .exclude("/zz")
        .unwrap();
    assert_eq!(
        spec.fingerprint("op", br#"{"a":1}"#).unwrap(),
        whole.fingerprint("op", br#"{"a":1}"#).unwrap()
    );
}
