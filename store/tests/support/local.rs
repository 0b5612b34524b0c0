//! What the local-transaction tests share (`idemkit::local`): one Local
//! operation, its claims and guards, and the 201 it completes with.

#![allow(dead_code, reason = "each test file uses a part of this module")]

use std::time::Duration;

use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StateName, StoredResponse};
use idemkit::store::{Claim, ExecutionGuard, Store};
use idemkit::{Fingerprint, IdempotencyKey};

use super::scope;

/// Local, with a 30 s lease.
pub(crate) fn policy() -> Policy {
    Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(Duration::from_secs(30))
}

pub(crate) fn claim(store: &Store, key: &str) -> Claim {
    store
        .claim(
            &scope(),
            &IdempotencyKey::new(key).unwrap(),
            Fingerprint::from_bytes([9; 32]),
            "worker",
            &policy(),
        )
        .unwrap()
}

pub(crate) fn guard(claim: Claim) -> ExecutionGuard {
    match claim {
        Claim::Execute(guard) => guard,
        other => panic!("expected Execute, got {other:?}"),
    }
}

/// The 201 naming note `id`.
pub(crate) fn created(id: &str) -> StoredResponse {
    StoredResponse::new(201, format!("{{\"id\":\"{id}\"}}").into_bytes())
}

/// The state of the record of `key`.
pub(crate) fn state(store: &Store, key: &str) -> StateName {
    store
        .get(&scope(), &IdempotencyKey::new(key).unwrap())
        .unwrap()
        .expect("the record exists")
        .state
        .name()
}
