//! Claim + complete throughput of a file-backed store, and the latency a single
//! caller sees, so the effect of group commit can be measured:
//!
//! ```text
//! cargo run --release --example group_commit_rate -p idemkit [seconds per run]
//! ```
//!
//! Every operation is a durable redb commit (`Durability::Immediate`, an fsync),
//! so the figures depend on the disk and on whatever else the machine is doing;
//! compare runs on the same machine, not across machines.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use idemkit::adapters::redb::RedbAdapter;
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse()?,
        None => 3,
    };
    let run = Duration::from_secs(seconds);
    let dir = tempfile::tempdir()?;

    // One caller, nobody else: the latency of each durable operation, on a file
    // (dominated by the fsync) and in memory (no fsync: the write path's own cost).
    for (what, store) in [
        ("file", idemkit::open(dir.path().join("latency.redb"))?),
        ("in memory", idemkit::in_memory()?),
    ] {
        let (claims, completes) = single_caller_latencies(&store, run)?;
        println!(
            "1 caller latency ({what}): claim p50 {:?} p99 {:?} | complete p50 {:?} p99 {:?} ({} ops)",
            percentile(&claims, 50),
            percentile(&claims, 99),
            percentile(&completes, 50),
            percentile(&completes, 99),
            claims.len() + completes.len(),
        );
    }

    for threads in [1_usize, 64] {
        let adapter = Arc::new(RedbAdapter::open(
            dir.path().join(format!("rate-{threads}.redb")),
        )?);
        let store = Store::new(adapter.clone());
        let (ops, elapsed) = rate(&store, threads, run)?;
        #[allow(clippy::cast_precision_loss)]
        let per_second = ops as f64 / elapsed.as_secs_f64();
        println!(
            "{threads:>2} threads: {ops} ops (claim + complete on unique keys) in {elapsed:.2?}: {per_second:.0} ops/s{}",
            commit_note(&adapter, ops)
        );
    }
    Ok(())
}

fn policy() -> Policy {
    Policy::default().with_effect(EffectKind::Local)
}

/// Claims and completes unique keys until `run` has passed, timing each call.
fn single_caller_latencies(
    store: &Store,
    run: Duration,
) -> Result<(Vec<Duration>, Vec<Duration>), Box<dyn std::error::Error>> {
    let scope = Scope::new("bench", "latency")?;
    let (mut claims, mut completes) = (Vec::new(), Vec::new());
    let started = Instant::now();
    let mut i = 0_u64;
    while started.elapsed() < run {
        let key = IdempotencyKey::new(&format!("k-{i}"))?;
        i += 1;
        let t = Instant::now();
        let claim = store.claim(
            &scope,
            &key,
            Fingerprint::from_bytes([1; 32]),
            "w",
            &policy(),
        )?;
        claims.push(t.elapsed());
        let Claim::Execute(guard) = claim else {
            return Err(format!("a fresh key was not executed: {claim:?}").into());
        };
        let t = Instant::now();
        guard.complete(StoredResponse::new(200, b"ok".to_vec()))?;
        completes.push(t.elapsed());
    }
    claims.sort();
    completes.sort();
    Ok((claims, completes))
}

fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = (sorted.len() * p / 100).min(sorted.len() - 1);
    sorted.get(at).copied().unwrap_or_default()
}

/// `threads` callers claim and complete unique keys until `run` has passed;
/// returns the number of durable operations and the time taken.
fn rate(
    store: &Store,
    threads: usize,
    run: Duration,
) -> Result<(u64, Duration), Box<dyn std::error::Error>> {
    let barrier = Arc::new(Barrier::new(threads + 1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (store, barrier) = (store.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || -> Result<u64, String> {
                let scope = Scope::new("bench", "rate").map_err(|e| e.to_string())?;
                barrier.wait();
                let started = Instant::now();
                let mut ops = 0_u64;
                let mut i = 0_u64;
                while started.elapsed() < run {
                    let key =
                        IdempotencyKey::new(&format!("t{t}-{i}")).map_err(|e| e.to_string())?;
                    i += 1;
                    let claim = store
                        .claim(
                            &scope,
                            &key,
                            Fingerprint::from_bytes([1; 32]),
                            "w",
                            &policy(),
                        )
                        .map_err(|e| e.to_string())?;
                    let Claim::Execute(guard) = claim else {
                        return Err(format!("a fresh key was not executed: {claim:?}"));
                    };
                    guard
                        .complete(StoredResponse::new(200, b"ok".to_vec()))
                        .map_err(|e| e.to_string())?;
                    ops += 2;
                }
                Ok(ops)
            })
        })
        .collect();
    barrier.wait();
    let started = Instant::now();
    let mut ops = 0;
    for handle in handles {
        ops += handle.join().map_err(|_| "a worker panicked")??;
    }
    Ok((ops, started.elapsed()))
}

/// How many durable commits those operations took (group commit).
fn commit_note(adapter: &RedbAdapter, ops: u64) -> String {
    let stats = adapter.commit_stats();
    if stats.commits == 0 {
        return String::new();
    }
    #[allow(clippy::cast_precision_loss)]
    let per_commit = ops as f64 / stats.commits as f64;
    format!(
        " | {} commits ({per_commit:.1} ops per fsync, largest group {})",
        stats.commits, stats.largest_group
    )
}
