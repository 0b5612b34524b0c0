//! The pure claim decision (`idemkit_core::machine::claim`), no I/O: nanoseconds.

// `criterion_group!` generates an undocumented `pub fn`.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use idemkit_core::machine::{ClaimOutcome, ClaimRequest, Policy, claim, complete};
use idemkit_core::record::{EffectKind, StoredResponse};
use idemkit_core::{Fingerprint, UnixMillis};

fn decision(c: &mut Criterion) {
    let policy = Policy::default().with_effect(EffectKind::Local);
    let req = ClaimRequest {
        fingerprint: Fingerprint::from_bytes([7; 32]).into(),
        owner: "worker-1".into(),
    };
    let now = UnixMillis::from_millis(1_800_000_000_000);
    let fresh = claim(None, &req, &policy, now);
    let ClaimOutcome::Execute { token, .. } = fresh.outcome else {
        panic!("a fresh claim executes")
    };
    let running = fresh.write.expect("Execute writes");
    let body = b"{\"id\":\"appt_000001\",\"status\":\"confirmed\"}".to_vec();
    let completed = complete(
        &running,
        token,
        StoredResponse::new(201, body),
        &policy,
        now,
    )
    .expect("completes");
    let other = ClaimRequest {
        fingerprint: Fingerprint::from_bytes([8; 32]).into(),
        ..req.clone()
    };

    let mut g = c.benchmark_group("machine/claim");
    g.bench_function("new_key_execute", |b| {
        b.iter(|| claim(black_box(None), black_box(&req), &policy, now))
    });
    g.bench_function("completed_replay", |b| {
        b.iter(|| claim(black_box(Some(&completed)), black_box(&req), &policy, now))
    });
    g.bench_function("running_in_flight", |b| {
        b.iter(|| claim(black_box(Some(&running)), black_box(&req), &policy, now))
    });
    g.bench_function("mismatch", |b| {
        b.iter(|| claim(black_box(Some(&completed)), black_box(&other), &policy, now))
    });
    g.finish();
    let mut g = c.benchmark_group("machine/codec");
    let encoded = completed.encode();
    g.bench_function("decode_completed", |b| {
        b.iter(|| idemkit_core::record::Record::decode(black_box(&encoded)).unwrap())
    });
    g.bench_function("encode_completed", |b| {
        b.iter(|| black_box(&completed).encode())
    });
    // The npm and HTTP benches' body size: a replay decodes a record this large.
    let api_body = completed_with_body(&running, token, &policy, now, 750);
    let encoded = api_body.encode();
    g.bench_function("decode_completed_750_byte_body", |b| {
        b.iter(|| idemkit_core::record::Record::decode(black_box(&encoded)).unwrap())
    });
    g.finish();
}

/// `running` completed with a JSON body of `len` bytes and two headers.
fn completed_with_body(
    running: &idemkit_core::record::Record,
    token: idemkit_core::record::FencingToken,
    policy: &Policy,
    now: UnixMillis,
    len: usize,
) -> idemkit_core::record::Record {
    let mut body = b"{\"note\":\"".to_vec();
    body.resize(len - 2, b'x');
    body.extend_from_slice(b"\"}");
    let mut response = StoredResponse::new(201, body);
    response.headers = vec![
        ("content-type".into(), b"application/json".to_vec()),
        ("location".into(), b"/appointments/appt_000001".to_vec()),
    ];
    complete(running, token, response, policy, now).expect("completes")
}

criterion_group!(benches, decision);
criterion_main!(benches);
