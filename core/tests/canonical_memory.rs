//! Canonical JSON's memory bound: the peak of live heap bytes while
//! canonicalizing, including the input buffer itself, stays within 4× the
//! input, for API-like and number-heavy documents of a few MB (and within 2×
//! when the output streams into a sink, as `idemkit canonicalize` does).
//!
//! Peak live heap is deterministic (the allocations do not depend on timing),
//! so this is not a timed test. Every scenario holds one lock: the counter is
//! global to the process and tests run on parallel threads.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test code: a failed expectation should panic with its message"
)]

use std::fmt::Write as _;
use std::sync::Mutex;

use idemkit_core::json::{CanonicalizeOptions, CountingSink, canonicalize_to, canonicalize_with};
use peak_alloc::PeakAlloc;

#[global_allocator]
static HEAP: PeakAlloc = PeakAlloc;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A small deterministic generator (xorshift), so the documents are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

const WORDS: [&str; 8] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
];

/// Order-create style payloads (the shape of benches' `api` bodies): nested
/// objects with members out of order, short strings, numbers, an escape.
fn api_document(target: usize) -> Vec<u8> {
    let mut rng = Rng(0x1de3_0001);
    let mut s = String::from(
        r#"{"request_id":"req-7","customer":{"name":"ann","id":"cus_1","email":"a\u0040example.com"},"currency":"EUR","items":["#,
    );
    let mut i = 0u64;
    while s.len() < target {
        if i > 0 {
            s.push(',');
        }
        let w = WORDS[rng.below(8) as usize];
        write!(
            s,
            r#"{{"sku":"{w}-{}","quantity":{},"unit_price":{}.{},"status":"paid","gift":{},"note":null,"line":{i},"attributes":{{"color":"{w}","size":"M"}}}}"#,
            rng.below(100_000),
            1 + rng.below(20),
            rng.below(100_000),
            10 + rng.below(90),
            rng.below(2) == 0,
        )
        .unwrap();
        i += 1;
    }
    s.push_str("]}");
    s.into_bytes()
}

/// Arrays of numbers, many spelled non-canonically (benches' `numbers`).
fn number_document(target: usize) -> Vec<u8> {
    let mut rng = Rng(0x1de3_0002);
    let mut s = String::from("[");
    let mut i = 0u64;
    while s.len() < target {
        if i > 0 {
            s.push(',');
        }
        let (a, b) = (rng.below(1_000_000), rng.below(1000));
        match rng.below(8) {
            0 => write!(s, "{a}"),
            1 => write!(s, "-{}", a + 1),
            2 => write!(s, "{a}.{}", 100 + b / 10 * 10 + 1 + b % 9),
            3 => write!(s, "{a}.50"),
            4 => write!(s, "{a}{}", if b % 2 == 0 { "e-2" } else { "E2" }),
            5 => write!(s, "0.{}{}", 1 + b % 9, a % 1000 * 10 + 7),
            6 => write!(s, "{}{}", 1 + a, 100_000_000 + rng.below(900_000_000)),
            _ => write!(s, "{b}"),
        }
        .unwrap();
        i += 1;
    }
    s.push(']');
    s.into_bytes()
}

/// The worst shape for the plan: one big object of tiny members, out of order.
fn wide_object_document(target: usize) -> Vec<u8> {
    let mut s = String::from("{");
    let mut i = 0u64;
    while s.len() < target {
        if i > 0 {
            s.push(',');
        }
        // Descending names: every member moves.
        write!(s, "\"{:x}\":{}", 0xF_FFFF - i, i % 10).unwrap();
        i += 1;
    }
    s.push('}');
    s.into_bytes()
}

/// Peak live heap bytes, counted from before the input was made, while
/// `run` canonicalizes it; the input is dropped afterwards.
fn peak_with_input(make: impl FnOnce() -> Vec<u8>, run: impl FnOnce(&[u8])) -> (usize, usize) {
    let before = HEAP.current_usage();
    let mut input = make();
    input.shrink_to_fit();
    let len = input.len();
    HEAP.reset_peak_usage();
    run(&input);
    let peak = HEAP.peak_usage() - before;
    drop(input);
    (peak, len)
}

#[track_caller]
fn check(name: &str, make: fn(usize) -> Vec<u8>, target: usize) {
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let opts = CanonicalizeOptions::default().max_input_len(usize::MAX);

    // Into a Vec (the output is part of the peak).
    let mut out_len = 0;
    let (peak, len) = peak_with_input(
        || make(target),
        |input| out_len = canonicalize_with(input, &opts).unwrap().len(),
    );
    assert!(out_len > 0);
    let ratio = peak as f64 / len as f64;
    eprintln!("{name}: {len} bytes, peak {peak} bytes into a Vec ({ratio:.2}x)");
    assert!(
        peak <= 4 * len,
        "{name}: peak {peak} bytes for {len} bytes of input ({ratio:.2}x > 4x)"
    );

    // Streamed into a sink (what `idemkit canonicalize` does with stdout).
    let (peak, len) = peak_with_input(
        || make(target),
        |input| {
            let mut count = CountingSink::default();
            canonicalize_to(input, &opts, &mut count).unwrap();
            assert_eq!(count.0, out_len as u64);
        },
    );
    let ratio = peak as f64 / len as f64;
    eprintln!("{name}: {len} bytes, peak {peak} bytes streamed ({ratio:.2}x)");
    assert!(
        peak <= 2 * len,
        "{name}: streamed peak {peak} bytes for {len} bytes of input ({ratio:.2}x > 2x)"
    );
}

#[test]
fn api_like_document_of_4_mb_peaks_within_4x_its_size() {
    check("api", api_document, 4 << 20);
}

#[test]
fn number_heavy_document_of_4_mb_peaks_within_4x_its_size() {
    check("numbers", number_document, 4 << 20);
}

#[test]
fn one_wide_object_of_reordered_members_peaks_within_4x_its_size() {
    check("wide object", wide_object_document, 4 << 20);
}
