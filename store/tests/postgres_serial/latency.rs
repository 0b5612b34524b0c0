//! Claim + complete latency, redb (file, fsync per commit) and PostgreSQL (local
//! server, `synchronous_commit = on`) side by side in one run, for the README's
//! "redb or PostgreSQL?" figures. It prints percentiles; it asserts only
//! correctness (every fresh key executes once, every retry replays), never a time.
//!
//! Run with `--nocapture` to see the figures (scripts/with-postgres.sh does).

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use std::time::{Duration, Instant};

use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

const ROUNDS: usize = 300;

/// Per round: (claim + complete of a fresh key, claim of the same key = replay).
fn measure(b: &Store, label: &str) -> (Vec<Duration>, Vec<Duration>) {
    let scope = Scope::new("bench", "latency").unwrap();
    let policy = Policy::default().with_effect(EffectKind::Local);
    let fp = Fingerprint::from_bytes([3; 32]);
    let mut execute = Vec::with_capacity(ROUNDS);
    let mut replay = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS {
        let key = IdempotencyKey::new(&format!("{label}-{i}")).unwrap();
        let started = Instant::now();
        let Claim::Execute(guard) = b.claim(&scope, &key, fp, "bench", &policy).unwrap() else {
            panic!("a fresh key must execute");
        };
        guard
            .complete(StoredResponse::new(201, vec![b'x'; 256]))
            .unwrap();
        execute.push(started.elapsed());
        let started = Instant::now();
        match b.claim(&scope, &key, fp, "bench", &policy).unwrap() {
            Claim::Replay { response, .. } => assert_eq!(response.status, 201),
            other => panic!("a completed key must replay, got {other:?}"),
        }
        replay.push(started.elapsed());
    }
    (execute, replay)
}

fn pct(sorted: &[Duration], p: usize) -> f64 {
    let i = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted[i].as_secs_f64() * 1e3
}

fn report(name: &str, (mut execute, mut replay): (Vec<Duration>, Vec<Duration>)) {
    execute.sort();
    replay.sort();
    eprintln!(
        "latency {name:<10} claim+complete p50 {:.3} ms p99 {:.3} ms | replay p50 {:.3} ms p99 {:.3} ms ({ROUNDS} rounds)",
        pct(&execute, 50),
        pct(&execute, 99),
        pct(&replay, 50),
        pct(&replay, 99)
    );
}

#[test]
fn claim_complete_latency_redb_and_postgres() {
    let _server = pg_support::alone();
    let dir = tempfile::tempdir().unwrap();
    let redb = idemkit::open(dir.path().join("latency.redb")).unwrap();
    let pg = Store::from(pg_support::fresh_store("latency"));
    // Warm both (pool connections, page cache) before measuring.
    let _ = measure(&redb, "warm");
    let _ = measure(&pg, "warm");
    report("redb", measure(&redb, "run"));
    report("postgres", measure(&pg, "run"));
}
