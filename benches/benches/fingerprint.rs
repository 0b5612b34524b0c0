//! Canonicalize and fingerprint throughput next to the peers, on every body.
//!
//! Group `json/<shape>/<size>`, one benchmark per implementation:
//! - `serde_json_value`: `serde_json::from_slice::<Value>` alone (parsing only).
//! - `canonicalizer_sha256`: `serde_json_canonicalizer` (via `Value`) + SHA-256.
//! - `jcs_sha256`: `serde_jcs` (via `Value`) + SHA-256.
//! - `idemkit_canonicalize`: `idemkit_core::json::canonicalize` (strict, into a `Vec`).
//! - `idemkit_fingerprint`: `FingerprintSpec::fingerprint` (canonical bytes built once, one blake3 update).
//! - `blake3_only`: blake3 over the already-canonical bytes (the hashing share).
//! - `idemkit_count`: `canonicalize_to` into a `CountingSink` (parse + one
//!   serialization pass, nothing kept): the canonicalizer's own cost.
//! - `idemkit_stream_blake3`: `canonicalize_to` into a `blake3::Hasher` (the
//!   streaming API: parse + one serialization, handed over in 64 KiB chunks).
//!
//! The last three break the fingerprint down; see BENCHMARKS.md.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{
    BenchmarkId, Criterion, SamplingMode, Throughput, criterion_group, criterion_main,
};
use idemkit_benches::bodies;
use idemkit_core::json::{CanonicalizeOptions, CountingSink, canonicalize_to};
use idemkit_core::{ContentKind, FingerprintSpec};
use sha2::{Digest as _, Sha256};

fn throughput(c: &mut Criterion) {
    let spec = FingerprintSpec::new(ContentKind::Json);
    for (shape, size, body) in bodies::all() {
        let canonical = idemkit_core::canonicalize(&body).expect("bodies are valid strict JSON");
        let mut group = c.benchmark_group(format!("json/{}/{size}", shape.name()));
        group.throughput(Throughput::Bytes(body.len() as u64));
        // Criterion's default 100 linear samples need 5,050 iterations: too many for
        // the large bodies (tens of ms each). Fewer, flat samples keep each benchmark
        // near its --measurement-time.
        if body.len() > 1 << 20 {
            group.sample_size(10);
            group.sampling_mode(SamplingMode::Flat);
            group.warm_up_time(Duration::from_millis(500));
        } else if body.len() > 16 << 10 {
            group.sample_size(30);
        }
        group.bench_function(BenchmarkId::from_parameter("serde_json_value"), |b| {
            b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)).unwrap())
        });
        group.bench_function(BenchmarkId::from_parameter("canonicalizer_sha256"), |b| {
            b.iter(|| {
                let v: serde_json::Value = serde_json::from_slice(black_box(&body)).unwrap();
                Sha256::digest(serde_json_canonicalizer::to_vec(&v).unwrap())
            })
        });
        group.bench_function(BenchmarkId::from_parameter("jcs_sha256"), |b| {
            b.iter(|| {
                let v: serde_json::Value = serde_json::from_slice(black_box(&body)).unwrap();
                Sha256::digest(serde_jcs::to_vec(&v).unwrap())
            })
        });
        group.bench_function(BenchmarkId::from_parameter("idemkit_canonicalize"), |b| {
            b.iter(|| idemkit_core::canonicalize(black_box(&body)).unwrap())
        });
        group.bench_function(BenchmarkId::from_parameter("idemkit_fingerprint"), |b| {
            b.iter(|| spec.fingerprint("bench.op", black_box(&body)).unwrap())
        });
        group.bench_function(BenchmarkId::from_parameter("blake3_only"), |b| {
            b.iter(|| blake3::hash(black_box(&canonical)))
        });
        let opts = CanonicalizeOptions::default();
        group.bench_function(BenchmarkId::from_parameter("idemkit_count"), |b| {
            b.iter(|| {
                let mut count = CountingSink::default();
                canonicalize_to(black_box(&body), &opts, &mut count).unwrap();
                count.0
            })
        });
        group.bench_function(BenchmarkId::from_parameter("idemkit_stream_blake3"), |b| {
            b.iter(|| {
                let mut h = blake3::Hasher::new();
                canonicalize_to(black_box(&body), &opts, &mut h).unwrap();
                h.finalize()
            })
        });
        group.finish();
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
