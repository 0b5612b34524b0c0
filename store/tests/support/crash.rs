//! Shared by the SIGKILL tests: reopening a killed child's file and checking
//! that everything it acknowledged is there.

#![allow(dead_code, reason = "each test file uses a part of this module")]

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use idemkit::adapters::redb::OpenError;
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, RecordState};
use idemkit::store::{Claim, ExecutionGuard, Store};
use idemkit::{Fingerprint, IdempotencyKey};

/// The killed children's policy. A long lease: records a child abandons stay
/// Running for the whole test.
pub(crate) fn policy() -> Policy {
    Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(Duration::from_secs(3_600))
}

/// Claims the fresh key `key_text` as a child does; a fresh key executes.
pub(crate) fn claim_fresh(store: &Store, key_text: &str) -> ExecutionGuard {
    let key = IdempotencyKey::new(key_text).unwrap();
    let claim = store
        .claim(
            &super::scope(),
            &key,
            Fingerprint::from_bytes([7; 32]),
            "child",
            &policy(),
        )
        .unwrap();
    let Claim::Execute(guard) = claim else {
        panic!("a fresh key must execute");
    };
    guard
}

/// What a child printed `ACK` for, after the call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Acked {
    Claimed,
    Completed,
    Released,
}

/// The seed of a test's random kills: `var` from the environment (to replay a
/// run), else one from the clock; printed either way.
pub(crate) fn seed(var: &str) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("crash test seed: {var}={seed}");
    seed
}

/// Opens `path`, waiting while the killed child's lock is still held.
pub(crate) fn open_retrying(path: &Path) -> Store {
    let started = Instant::now();
    loop {
        match idemkit::open(path) {
            Ok(store) => return store,
            Err(OpenError::Busy { .. }) if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => panic!("reopening after a kill failed: {e}"),
        }
    }
}

/// Reopens `path` after kill number `child` and checks that `verify` finds no
/// problem and every acknowledged key is there in its acknowledged state (a
/// claim may have moved on; a completion carries its key as the body).
pub(crate) fn check(path: &Path, acked: &HashMap<String, Acked>, child: u64) {
    let store = open_retrying(path);
    let report = store.verify().unwrap();
    assert!(
        report.problems.is_empty(),
        "after kill #{child}: {:?}",
        report.problems
    );
    let records = states_by_key(&store);
    for (key, ack) in acked {
        let state = records
            .get(key)
            .unwrap_or_else(|| panic!("after kill #{child}: acknowledged {key} ({ack:?}) is gone"));
        match (ack, state) {
            (Acked::Claimed, _) => {}
            (Acked::Completed, RecordState::Completed { response, .. }) => {
                assert_eq!(response.body.as_deref(), Some(key.as_bytes()));
            }
            (Acked::Released, RecordState::Released { .. }) => {}
            (ack, state) => {
                panic!("after kill #{child}: {key} was acknowledged {ack:?} but is {state:?}")
            }
        }
    }
}

/// Every record's state, by key.
pub(crate) fn states_by_key(store: &Store) -> HashMap<String, RecordState> {
    store
        .list(None)
        .unwrap()
        .into_iter()
        .map(|l| (l.key.to_string(), l.record.state))
        .collect()
}
