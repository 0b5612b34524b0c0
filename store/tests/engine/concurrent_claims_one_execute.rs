//! Invariant 1 (docs/architecture.md): concurrent claims of one key yield exactly one `Execute`.
//!
//! 64 threads released by one barrier claim the same key; this is repeated over
//! 50 keys, on a file-backed store and in memory. Whatever the interleaving, one
//! thread executes and every other one gets InFlight or Replay.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

const THREADS: usize = 64;
const KEYS: usize = 50;

fn hammer(store: &Store) {
    let scope = Scope::new("acme", "charge").unwrap();
    let policy = Policy::default().with_effect(EffectKind::Local);
    for k in 0..KEYS {
        let key = IdempotencyKey::new(&format!("key-{k}")).unwrap();
        let barrier = Arc::new(Barrier::new(THREADS));
        let outcomes: Vec<&'static str> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (store, scope, key, barrier) = (store, &scope, &key, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        let claim = store
                            .claim(
                                scope,
                                key,
                                Fingerprint::from_bytes([1; 32]),
                                &format!("t{t}"),
                                &policy,
                            )
                            .unwrap();
                        match claim {
                            Claim::Execute(guard) => {
                                guard
                                    .complete(StoredResponse::new(200, b"ok".to_vec()))
                                    .unwrap();
                                "execute"
                            }
                            Claim::InFlight { .. } => "in-flight",
                            Claim::Replay { .. } => "replay",
                            other => panic!("unexpected answer {other:?}"),
                        }
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let executes = outcomes.iter().filter(|o| **o == "execute").count();
        assert_eq!(executes, 1, "key-{k}: {outcomes:?}");
        assert_eq!(outcomes.len(), THREADS);
    }
    assert!(store.verify().unwrap().problems.is_empty());
    assert_eq!(store.stats().unwrap().total, KEYS as u64);
}

#[test]
fn sixty_four_threads_per_key_file_backed() {
    let dir = tempfile::tempdir().unwrap();
    let store = idemkit::open(dir.path().join("claims.redb")).unwrap();
    let started = Instant::now();
    hammer(&store);
    eprintln!(
        "{KEYS} keys x {THREADS} threads (file): {:?}",
        started.elapsed()
    );
}

#[test]
fn sixty_four_threads_per_key_in_memory() {
    hammer(&idemkit::in_memory().unwrap());
}
