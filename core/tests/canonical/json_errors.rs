//! Every rejection names its kind, the byte offset and the JSON Pointer of the
//! value where it happened, with a stable code and a one-line message.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use idemkit_core::json::{
    CanonicalizeOptions, JsonErrorKind as K, Profile, canonicalize, canonicalize_to,
    canonicalize_with,
};

#[track_caller]
fn rejects(input: &[u8], kind: K, offset: usize, pointer: &str) {
    let err = canonicalize(input).unwrap_err();
    assert_eq!(
        (&err.kind, err.offset, err.pointer.as_str()),
        (&kind, offset, pointer),
        "{:?}: {err}",
        String::from_utf8_lossy(input)
    );
}

#[test]
fn kinds_offsets_and_pointers() {
    rejects(b"", K::UnexpectedEnd, 0, "");
    rejects(b"  ", K::UnexpectedEnd, 2, "");
    rejects(b"[1,", K::UnexpectedEnd, 3, "/1");
    rejects(b"{\"a\":tru", K::UnexpectedEnd, 8, "/a");
    rejects(b"[1,2,NaN]", K::InvalidToken, 5, "/2");
    rejects(b"[1,]", K::InvalidToken, 3, "/1");
    rejects(b"{\"a\" 1}", K::ExpectedColon, 5, "");
    rejects(b"[1 2]", K::ExpectedCommaOrBracket, 3, "");
    rejects(
        b"{\"a\":{\"b\":1 \"c\":2}}",
        K::ExpectedCommaOrBrace,
        12,
        "/a",
    );
    rejects(b"{'a':1}", K::ExpectedMemberName, 1, "");
    rejects(b"{\"a\":1,}", K::ExpectedMemberName, 7, "");
    rejects(b"{} {}", K::TrailingData, 3, "");
    rejects(b"[5.]", K::InvalidNumber, 3, "/0");
    rejects(b"[-]", K::InvalidNumber, 2, "/0");
    rejects(b"[1e]", K::InvalidNumber, 3, "/0");
    rejects(b"{\"x\":[0, -1e309]}", K::NumberOverflow, 9, "/x/1");
    rejects(
        b"{\"n\":9007199254740993}",
        K::NumberNotExact {
            canonical: "9007199254740992".into(),
        },
        5,
        "/n",
    );
    rejects(b"[\"\xff\"]", K::InvalidUtf8, 2, "/0");
    rejects(b"[\"a\xc0\xaf\"]", K::InvalidUtf8, 3, "/0");
    rejects(b"[\"\xed\xa0\x80\"]", K::InvalidUtf8, 2, "/0");
    rejects(b"[\"a\tb\"]", K::ControlCharacter, 3, "/0");
    rejects(b"[\"\\x41\"]", K::InvalidEscape, 2, "/0");
    rejects(b"[\"\\u12\"]", K::InvalidUnicodeEscape, 2, "/0");
    rejects(b"[\"ab\\ud83d\\u0041\"]", K::LoneHighSurrogate, 4, "/0");
    rejects(b"[\"\\ude00\\ud83d\"]", K::LoneLowSurrogate, 2, "/0");
    rejects(b"{\"\\udead\":1}", K::LoneLowSurrogate, 2, "");
    rejects(
        b"{\"a/b~\":{\"k\":1,\"\\u006b\":2}}",
        K::DuplicateMemberName { name: "k".into() },
        15,
        "/a~1b~0/k",
    );
    rejects(b"\xef\xbb\xbf{}", K::LeadingBom, 0, "");
    let deep = format!("{}{}", "[".repeat(129), "]".repeat(129));
    rejects(
        deep.as_bytes(),
        K::TooDeep { max: 128 },
        128,
        &"/0".repeat(128),
    );
}

#[test]
fn limits_are_configurable() {
    let opts = CanonicalizeOptions::default().max_input_len(4);
    assert_eq!(canonicalize_with(b"[1]", &opts).unwrap(), b"[1]");
    let err = canonicalize_with(b"[1,2]", &opts).unwrap_err();
    assert_eq!(err.kind, K::InputTooLarge { max: 4 });
    let long = format!("[1.{}]", "0".repeat(100));
    let err = canonicalize(long.as_bytes()).unwrap_err();
    assert_eq!((err.kind, err.offset), (K::NumberTooLong { max: 100 }, 1));
    let opts = CanonicalizeOptions::default().max_number_len(200);
    assert_eq!(canonicalize_with(long.as_bytes(), &opts).unwrap(), b"[1]");
    let opts = CanonicalizeOptions::default().max_depth(2);
    assert!(canonicalize_with(b"[[1]]", &opts).is_ok());
    assert_eq!(
        canonicalize_with(b"[[[1]]]", &opts).unwrap_err().kind,
        K::TooDeep { max: 2 }
    );
    // Deep limits do not overflow the stack: both parser and writer are iterative.
    let n = 200_000;
    let deep = format!("{}{}", "[".repeat(n), "]".repeat(n));
    let opts = CanonicalizeOptions::default().max_depth(usize::MAX);
    assert_eq!(
        canonicalize_with(deep.as_bytes(), &opts).unwrap(),
        deep.as_bytes()
    );
}

#[test]
fn rfc8785_profile_rounds_but_rejects_everything_else() {
    let plain = CanonicalizeOptions::default().profile(Profile::Rfc8785);
    assert_eq!(
        canonicalize_with(b"[1e-400, -0, 0.10000000000000001]", &plain).unwrap(),
        b"[0,0,0.1]"
    );
    for bad in [
        &b"{\"a\":1,\"a\":1}"[..],
        b"[\"\\ud800\"]",
        b"\xef\xbb\xbf1",
        b"[1e999]",
    ] {
        assert!(canonicalize_with(bad, &plain).is_err(), "{bad:?}");
    }
}

#[test]
fn display_and_codes() {
    let err = canonicalize(br#"{"x":[{"a":1,"a":2}]}"#).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"duplicate member name "a" at byte 13 (pointer /x/0/a)"#
    );
    assert_eq!(err.code(), "json-duplicate-member-name");
    let err = canonicalize(b"{} x").unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"trailing data after the value at byte 3 (pointer "")"#
    );
    // Codes are distinct.
    let kinds = [
        K::UnexpectedEnd,
        K::InvalidToken,
        K::ExpectedColon,
        K::ExpectedCommaOrBracket,
        K::ExpectedCommaOrBrace,
        K::ExpectedMemberName,
        K::TrailingData,
        K::InvalidNumber,
        K::NumberOverflow,
        K::NumberNotExact {
            canonical: String::new(),
        },
        K::NumberTooLong { max: 0 },
        K::InvalidUtf8,
        K::ControlCharacter,
        K::InvalidEscape,
        K::InvalidUnicodeEscape,
        K::LoneHighSurrogate,
        K::LoneLowSurrogate,
        K::DuplicateMemberName {
            name: String::new(),
        },
        K::LeadingBom,
        K::TooDeep { max: 0 },
        K::InputTooLarge { max: 0 },
    ];
    let mut codes: Vec<&str> = kinds.iter().map(K::code).collect();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), kinds.len());
}

#[test]
fn a_rejected_input_writes_nothing_to_the_sink() {
    let mut out = b"keep".to_vec();
    assert!(
        canonicalize_to(
            b"[1, 2, {\"a\":1,\"a\":2}]",
            &CanonicalizeOptions::default(),
            &mut out
        )
        .is_err()
    );
    assert_eq!(out, b"keep");
}
