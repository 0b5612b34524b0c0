//! Model-based test (firezone style): random sequences of claims, worker writes,
//! operator actions, GC and clock ticks against the redb store and against a
//! plain reference model — a `BTreeMap` to which the same pure core decisions are
//! applied (with the store-wide token floor GC raises). After every step the
//! store must hold exactly the model's records,
//! list exactly the model's unresolved records, and its three indexes must agree
//! with its records (`Store::verify`).

use std::collections::BTreeMap;
use std::time::Duration;

use idemkit::clock::ManualClock;
use idemkit::conformance::Subject;
use idemkit::core::machine::{self, ClaimOutcome, ClaimRequest, GcAction, Policy, Resolution};
use idemkit::core::record::{EffectKind, FencingToken, Record, StoredResponse, UnknownReason};
use idemkit::{Fingerprint, IdempotencyKey, Scope, UnixMillis};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Claim { key: usize, fp: u8, external: bool },
    Complete { key: usize, stale: bool },
    Release { key: usize, stale: bool },
    MarkUnknown { key: usize },
    Renew { key: usize },
    Step { key: usize, name: u8 },
    Resolve { key: usize, applied: bool },
    Recover { key: usize },
    Gc { batch: usize },
    Tick { millis: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0..4usize;
    prop_oneof![
        3 => (key.clone(), 1..3u8, any::<bool>()).prop_map(|(key, fp, external)| Op::Claim { key, fp, external }),
        2 => (key.clone(), prop::bool::weighted(0.2)).prop_map(|(key, stale)| Op::Complete { key, stale }),
        1 => (key.clone(), prop::bool::weighted(0.2)).prop_map(|(key, stale)| Op::Release { key, stale }),
        1 => key.clone().prop_map(|key| Op::MarkUnknown { key }),
        1 => key.clone().prop_map(|key| Op::Renew { key }),
        1 => (key.clone(), 0..2u8).prop_map(|(key, name)| Op::Step { key, name }),
        1 => (key.clone(), any::<bool>()).prop_map(|(key, applied)| Op::Resolve { key, applied }),
        1 => key.prop_map(|key| Op::Recover { key }),
        1 => (1..4usize).prop_map(|batch| Op::Gc { batch }),
        2 => prop_oneof![Just(1_000u64), Just(20_000), Just(40_000), Just(4_000_000), Just(9_000_000)]
            .prop_map(|millis| Op::Tick { millis }),
    ]
}

/// Keys 0 and 1 share a key string under two tenants (isolation); 2 and 3 are
/// other keys of the first tenant.
fn address(i: usize) -> (Scope, IdempotencyKey) {
    let (tenant, key) = match i {
        0 => ("acme", "k"),
        1 => ("globex", "k"),
        2 => ("acme", "k2"),
        _ => ("acme", "k3"),
    };
    (
        Scope::new(tenant, "op").unwrap(),
        IdempotencyKey::new(key).unwrap(),
    )
}

fn policy(effect: EffectKind) -> Policy {
    Policy::default()
        .with_effect(effect)
        .with_lease(Duration::from_secs(30))
        .with_replay_window(Duration::from_secs(3_600))
        .with_record_window(Duration::from_secs(7_200))
}

struct Model {
    records: BTreeMap<usize, Record>,
    /// The store's token floor: the highest token of any record GC deleted. A
    /// fresh record starts above it, so a key's tokens never repeat.
    token_floor: u64,
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut now = UnixMillis::from_millis(1_800_000_000_000);
    let clock = ManualClock::new(now);
    let store = Subject::new(
        idemkit::in_memory().unwrap().with_clock(clock.clone()),
        clock,
    );
    let mut model = Model {
        records: BTreeMap::new(),
        token_floor: 0,
    };
    // The last token each key's worker was granted (what a live worker would hold).
    let mut tokens: BTreeMap<usize, FencingToken> = BTreeMap::new();
    for (step, op) in ops.into_iter().enumerate() {
        match op {
            Op::Tick { millis } => now = now.saturating_add(Duration::from_millis(millis)),
            Op::Claim { key, fp, external } => {
                let (scope, k) = address(key);
                let effect = if external {
                    EffectKind::External
                } else {
                    EffectKind::Local
                };
                let fingerprint = Fingerprint::from_bytes([fp; 32]);
                let got = store
                    .claim(&scope, &k, fingerprint, "w", &policy(effect), now)
                    .unwrap();
                let request = ClaimRequest {
                    fingerprint: fingerprint.into(),
                    owner: "w".into(),
                };
                let want = machine::claim_above(
                    model.records.get(&key),
                    &request,
                    &policy(effect),
                    now,
                    model.token_floor,
                );
                prop_assert_eq!(&got, &want.outcome, "step {}", step);
                if let Some(write) = want.write {
                    model.records.insert(key, write);
                }
                if let ClaimOutcome::Execute { token, .. } = got {
                    tokens.insert(key, token);
                }
            }
            Op::Complete { key, stale } | Op::Release { key, stale } => {
                let (scope, k) = address(key);
                let Some(mut token) = tokens.get(&key).copied() else {
                    continue;
                };
                if stale {
                    token = FencingToken::new(token.get().saturating_sub(1).max(1)).unwrap();
                }
                let is_complete = matches!(op, Op::Complete { .. });
                let p = policy(EffectKind::Local);
                let response = StoredResponse::new(201, format!("r{step}").into_bytes());
                let got = if is_complete {
                    store.complete(&scope, &k, token, response.clone(), &p, now)
                } else {
                    store.release(&scope, &k, token, &p, now)
                };
                let want = model.records.get(&key).map(|r| {
                    if is_complete {
                        machine::complete(r, token, response, &p, now)
                    } else {
                        machine::release(r, token, &p, now)
                    }
                });
                check_transition(&mut model, key, got.map(|_| ()), want, step)?;
            }
            Op::MarkUnknown { key } => {
                let (scope, k) = address(key);
                let Some(token) = tokens.get(&key).copied() else {
                    continue;
                };
                let got = store.mark_unknown(&scope, &k, token, UnknownReason::Crash, now);
                let want = model
                    .records
                    .get(&key)
                    .map(|r| machine::mark_unknown(r, token, UnknownReason::Crash, now));
                check_transition(&mut model, key, got, want, step)?;
            }
            Op::Renew { key } => {
                let (scope, k) = address(key);
                let Some(token) = tokens.get(&key).copied() else {
                    continue;
                };
                let p = policy(EffectKind::Local);
                let got = store.renew(&scope, &k, token, &p, now).map(|_| ());
                let want = model
                    .records
                    .get(&key)
                    .map(|r| machine::renew(r, token, &p, now));
                check_transition(&mut model, key, got, want, step)?;
            }
            Op::Step { key, name } => {
                let (scope, k) = address(key);
                let Some(token) = tokens.get(&key).copied() else {
                    continue;
                };
                let name = format!("s{name}");
                let got = store.begin_step(&scope, &k, token, &name, &format!("pk{step}"), now);
                let want = model
                    .records
                    .get(&key)
                    .map(|r| machine::begin_step(r, token, &name, format!("pk{step}"), now));
                if let (Ok(g), Some(Ok((_, w)))) = (&got, &want) {
                    prop_assert_eq!(g, w);
                }
                check_transition(
                    &mut model,
                    key,
                    got.map(|_| ()),
                    want.map(|w| w.map(|(r, _)| r)),
                    step,
                )?;
            }
            Op::Resolve { key, applied } => {
                let (scope, k) = address(key);
                let resolution = if applied {
                    Resolution::Applied(StoredResponse::new(200, b"by hand".to_vec()))
                } else {
                    Resolution::NotApplied
                };
                let p = policy(EffectKind::External);
                let got = store.resolve(&scope, &k, resolution.clone(), &p, now);
                let want = model
                    .records
                    .get(&key)
                    .map(|r| machine::resolve(r, resolution, &p, now));
                check_transition(&mut model, key, got, want, step)?;
            }
            Op::Recover { key } => {
                let (scope, k) = address(key);
                let p = policy(EffectKind::External);
                let got = store.recover(&scope, &k, "reconciler", &p, now);
                let want = model
                    .records
                    .get(&key)
                    .map(|r| machine::recover(r, "reconciler", &p, now));
                if let Ok(grant) = &got {
                    tokens.insert(key, grant.token);
                }
                check_transition(
                    &mut model,
                    key,
                    got.map(|_| ()),
                    want.map(|w| w.map(|(r, _)| r)),
                    step,
                )?;
            }
            Op::Gc { batch } => {
                let got = store.gc(now, batch).unwrap();
                // The model: walk records by (gc_due_at, id) like the index, up to `batch`.
                let mut due: Vec<(UnixMillis, Vec<u8>, usize)> = model
                    .records
                    .iter()
                    .filter_map(|(i, r)| {
                        let at = r.gc_due_at()?;
                        let (scope, k) = address(*i);
                        (at <= now).then(|| (at, scope.record_id(&k).as_bytes().to_vec(), *i))
                    })
                    .collect();
                due.sort();
                let more = due.len() > batch;
                let (mut pruned, mut deleted) = (0, 0);
                for (_, _, i) in due.into_iter().take(batch) {
                    let Some(r) = model.records.get(&i) else {
                        continue;
                    };
                    match machine::gc(r, now) {
                        GcAction::Delete => {
                            model.token_floor = model.token_floor.max(r.last_token.get());
                            model.records.remove(&i);
                            deleted += 1;
                        }
                        GcAction::PruneBody => {
                            let pruned_record = machine::prune_body(r);
                            model.records.insert(i, pruned_record);
                            pruned += 1;
                        }
                        GcAction::Keep => {}
                    }
                }
                prop_assert_eq!(
                    (got.pruned, got.deleted, got.more),
                    (pruned, deleted, more),
                    "step {}",
                    step
                );
            }
        }
        // After every step: records, unresolved list and indexes agree with the model.
        for i in 0..4 {
            let (scope, k) = address(i);
            prop_assert_eq!(
                store.get(&scope, &k).unwrap(),
                model.records.get(&i).cloned(),
                "step {} key {}",
                step,
                i
            );
        }
        let mut unresolved: Vec<String> = store
            .list_unresolved(now)
            .unwrap()
            .iter()
            .map(|l| format!("{}/{}", l.scope.tenant(), l.key))
            .collect();
        unresolved.sort();
        let mut expected: Vec<String> = model
            .records
            .iter()
            .filter(|(_, r)| r.is_unresolved(now))
            .map(|(i, _)| {
                let (scope, k) = address(*i);
                format!("{}/{}", scope.tenant(), k)
            })
            .collect();
        expected.sort();
        prop_assert_eq!(unresolved, expected, "step {}", step);
        let report = store.store().verify().unwrap();
        prop_assert!(
            report.problems.is_empty(),
            "step {}: {:?}",
            step,
            report.problems
        );
    }
    Ok(())
}

fn check_transition<E: std::fmt::Display>(
    model: &mut Model,
    key: usize,
    got: Result<(), E>,
    want: Option<Result<Record, machine::TransitionError>>,
    step: usize,
) -> Result<(), TestCaseError> {
    match (got, want) {
        (Ok(()), Some(Ok(record))) => {
            model.records.insert(key, record);
        }
        (Err(_), Some(Err(_)) | None) => {}
        (got, want) => {
            return Err(TestCaseError::fail(format!(
                "step {step}: store answered {:?}, model {:?}",
                got.map_err(|e| e.to_string()),
                want
            )));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn store_matches_the_model(ops in prop::collection::vec(op(), 1..40)) {
        run(ops)?;
    }
}
