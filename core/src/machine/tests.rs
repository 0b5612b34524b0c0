//! One test per transition and per row of the claim decision table.

use crate::prelude::*;

use core::time::Duration;

use super::*;
use crate::fingerprint::Fingerprint;
use crate::record::{
    EffectKind, FencingToken, Record, RecordState, RecordWindows, StateName, StepState,
    StoredResponse, UnknownReason,
};
use crate::time::UnixMillis;

const LEASE_MS: u64 = 30_000;

fn t(millis: u64) -> UnixMillis {
    UnixMillis::from_millis(millis)
}

fn policy(effect: EffectKind) -> Policy {
    Policy::default()
        .with_effect(effect)
        .with_lease(Duration::from_millis(LEASE_MS))
        .with_replay_window(Duration::from_secs(100))
        .with_record_window(Duration::from_secs(1_000))
}

fn req(fp: u8, owner: &str) -> ClaimRequest {
    ClaimRequest {
        fingerprint: Fingerprint::from_bytes([fp; 32]).into(),
        owner: owner.into(),
    }
}

fn token(n: u64) -> FencingToken {
    FencingToken::new(n).unwrap()
}

/// A fresh claim at `now`: the record and its token.
fn running(effect: EffectKind, now: u64) -> (Record, FencingToken) {
    let d = claim(None, &req(1, "w1"), &policy(effect), t(now));
    let ClaimOutcome::Execute { token, .. } = d.outcome else {
        panic!("fresh claim must execute: {:?}", d.outcome)
    };
    (d.write.unwrap(), token)
}

fn ok_response() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("location".into(), b"/appointments/1".to_vec())],
        body: Some(b"{\"id\":1}".to_vec()),
        resource_ref: Some("appt_1".into()),
    }
}

fn completed(effect: EffectKind, at: u64) -> Record {
    let (r, tok) = running(effect, 0);
    complete(&r, tok, ok_response(), &policy(effect), t(at)).unwrap()
}

#[test]
fn claim_without_record_executes_with_the_first_token() {
    let p = policy(EffectKind::External);
    let d = claim(None, &req(1, "w1"), &p, t(5));
    assert_eq!(
        d.outcome,
        ClaimOutcome::Execute {
            token: FencingToken::FIRST,
            attempt: 1,
            lease_expires_at: t(5 + LEASE_MS),
            steps: vec![],
        }
    );
    let r = d.write.unwrap();
    assert_eq!(r.effect, EffectKind::External);
    assert_eq!(r.last_token, FencingToken::FIRST);
    assert_eq!(r.lease_expires_at(), Some(t(5 + LEASE_MS)));
    assert_eq!((r.created_at, r.updated_at), (t(5), t(5)));
    assert_eq!(r.gc_due_at(), None);
}

#[test]
fn claim_with_another_fingerprint_is_a_mismatch_in_every_state() {
    let (run, tok) = running(EffectKind::Local, 0);
    let p = policy(EffectKind::Local);
    let records = [
        run.clone(),
        complete(&run, tok, ok_response(), &p, t(1)).unwrap(),
        mark_unknown(&run, tok, UnknownReason::Crash, t(1)).unwrap(),
        release(&run, tok, &p, t(1)).unwrap(),
    ];
    for r in &records {
        for (mismatch, status) in [
            (MismatchStatus::UnprocessableEntity, 422),
            (MismatchStatus::Conflict, 409),
        ] {
            // Also after the lease expired: the fingerprint is checked first.
            let d = claim(
                Some(r),
                &req(2, "w2"),
                &p.with_mismatch(mismatch),
                t(LEASE_MS + 1),
            );
            assert_eq!(
                d.outcome,
                ClaimOutcome::Mismatch { status },
                "{}",
                r.state.name()
            );
            assert_eq!(d.write, None);
        }
    }
}

#[test]
fn claim_on_a_live_lease_is_in_flight_with_retry_after_rounded_up() {
    let (r, _) = running(EffectKind::External, 0);
    let p = policy(EffectKind::External);
    for (now, secs) in [(0, 30), (1, 30), (28_999, 2), (29_000, 1), (29_999, 1)] {
        let d = claim(Some(&r), &req(1, "w2"), &p, t(now));
        assert_eq!(
            d.outcome,
            ClaimOutcome::InFlight {
                retry_after: Duration::from_secs(secs)
            },
            "at {now}"
        );
        assert_eq!(d.write, None);
    }
}

#[test]
fn claim_after_a_local_lease_expired_takes_over() {
    let (r, tok) = running(EffectKind::Local, 0);
    let (r, _) = begin_step(&r, tok, "book", "pk-1", t(10)).unwrap();
    let d = claim(
        Some(&r),
        &req(1, "w2"),
        &policy(EffectKind::Local),
        t(LEASE_MS),
    );
    let ClaimOutcome::Execute {
        token: new,
        attempt,
        lease_expires_at,
        steps,
    } = d.outcome
    else {
        panic!("{:?}", d.outcome)
    };
    assert_eq!(new, token(2));
    assert_eq!(attempt, 2);
    assert_eq!(lease_expires_at, t(2 * LEASE_MS));
    assert_eq!(steps, r.steps);
    let w = d.write.unwrap();
    assert_eq!(w.last_token, token(2));
    // The old worker is fenced off.
    assert_eq!(
        complete(
            &w,
            tok,
            ok_response(),
            &policy(EffectKind::Local),
            t(LEASE_MS + 1)
        ),
        Err(TransitionError::StaleToken {
            presented: tok,
            current: token(2)
        })
    );
}

#[test]
fn claim_after_an_external_lease_expired_becomes_unknown() {
    let (r, _) = running(EffectKind::External, 0);
    let d = claim(
        Some(&r),
        &req(1, "w2"),
        &policy(EffectKind::External),
        t(LEASE_MS + 7),
    );
    assert_eq!(d.outcome, ClaimOutcome::Uncertain { since: t(LEASE_MS) });
    let w = d.write.unwrap();
    assert_eq!(
        w.state,
        RecordState::Unknown {
            reason: UnknownReason::LeaseExpired,
            since: t(LEASE_MS)
        }
    );
    assert_eq!(w.last_token, r.last_token);
    // From now on: uncertain, nothing written.
    let again = claim(
        Some(&w),
        &req(1, "w3"),
        &policy(EffectKind::External),
        t(10 * LEASE_MS),
    );
    assert_eq!(
        again.outcome,
        ClaimOutcome::Uncertain { since: t(LEASE_MS) }
    );
    assert_eq!(again.write, None);
}

#[test]
fn the_record_keeps_the_effect_kind_it_was_created_with() {
    let (r, _) = running(EffectKind::External, 0);
    // A Local policy now does not turn an External record into a takeover.
    let d = claim(
        Some(&r),
        &req(1, "w2"),
        &policy(EffectKind::Local),
        t(LEASE_MS),
    );
    assert!(matches!(d.outcome, ClaimOutcome::Uncertain { .. }));
}

#[test]
fn claim_after_release_executes_attempt_two() {
    let (r, tok) = running(EffectKind::External, 0);
    let p = policy(EffectKind::External);
    let r = release(&r, tok, &p, t(100)).unwrap();
    assert_eq!(r.state, RecordState::Released { at: t(100) });
    assert_eq!(r.keep_until, Some(t(1_000_100)));
    assert_eq!(r.gc_due_at(), Some(t(1_000_100)));
    let d = claim(Some(&r), &req(1, "w2"), &p, t(200));
    assert!(matches!(
        d.outcome,
        ClaimOutcome::Execute { token: tk, attempt: 2, .. } if tk == token(2)
    ));
    let w = d.write.unwrap();
    assert_eq!((w.replay_until, w.keep_until), (None, None));
    assert_eq!(w.created_at, t(0));
}

#[test]
fn completed_replays_then_answers_response_expired_then_is_gone() {
    let p = policy(EffectKind::External);
    let r = completed(EffectKind::External, 1_000);
    assert_eq!(r.replay_until, Some(t(101_000)));
    assert_eq!(r.keep_until, Some(t(1_001_000)));
    let replay = claim(Some(&r), &req(1, "w2"), &p, t(100_999));
    assert_eq!(
        replay.outcome,
        ClaimOutcome::Replay {
            response: ok_response()
        }
    );
    assert_eq!(replay.write, None);
    let expired = ClaimOutcome::ResponseExpired {
        status: 201,
        resource_ref: Some("appt_1".into()),
    };
    assert_eq!(
        claim(Some(&r), &req(1, "w2"), &p, t(101_000)).outcome,
        expired
    );
    assert_eq!(
        claim(Some(&r), &req(1, "w2"), &p, t(1_000_999)).outcome,
        expired
    );
    // A pruned body is never replayed, even inside the window.
    let pruned = prune_body(&r);
    assert_eq!(
        claim(Some(&pruned), &req(1, "w2"), &p, t(2_000)).outcome,
        expired
    );
    // After the record window the key is free; tokens continue.
    let d = claim(Some(&r), &req(2, "w2"), &p, t(1_001_000));
    assert!(matches!(
        d.outcome,
        ClaimOutcome::Execute { token: tk, attempt: 1, .. } if tk == token(2)
    ));
    let w = d.write.unwrap();
    assert_eq!(w.fingerprint, Fingerprint::from_bytes([2; 32]));
    assert!(w.steps.is_empty());
    assert_eq!(w.created_at, t(1_001_000));
}

#[test]
fn record_window_never_ends_before_the_replay_window() {
    let p = policy(EffectKind::Local).with_record_window(Duration::from_secs(1));
    let d = claim(None, &req(1, "w1"), &p, t(0));
    let ClaimOutcome::Execute { token: tok, .. } = d.outcome else {
        panic!("fresh claim must execute")
    };
    let c = complete(&d.write.unwrap(), tok, ok_response(), &p, t(0)).unwrap();
    assert_eq!(c.keep_until, c.replay_until);
    assert!(Record::decode(&c.encode()).is_ok());
}

#[test]
fn unknown_answers_uncertain() {
    let (r, tok) = running(EffectKind::Local, 0);
    let u = mark_unknown(
        &r,
        tok,
        UnknownReason::MarkedByWorker("timeout".into()),
        t(9),
    )
    .unwrap();
    let d = claim(
        Some(&u),
        &req(1, "w2"),
        &policy(EffectKind::Local),
        t(1_000_000_000),
    );
    assert_eq!(d.outcome, ClaimOutcome::Uncertain { since: t(9) });
    assert_eq!(d.write, None);
    assert!(u.is_unresolved(t(0)));
}

#[test]
fn stale_and_unissued_tokens_change_nothing() {
    let p = policy(EffectKind::Local);
    let (r, tok) = running(EffectKind::Local, 0);
    let taken = claim(Some(&r), &req(1, "w2"), &p, t(LEASE_MS))
        .write
        .unwrap();
    for bad in [tok, token(3), token(u64::MAX)] {
        let stale = TransitionError::StaleToken {
            presented: bad,
            current: token(2),
        };
        let now = t(LEASE_MS + 1);
        assert_eq!(
            complete(&taken, bad, ok_response(), &p, now),
            Err(stale.clone())
        );
        assert_eq!(release(&taken, bad, &p, now), Err(stale.clone()));
        assert_eq!(
            mark_unknown(&taken, bad, UnknownReason::GuardDropped, now),
            Err(stale.clone())
        );
        assert_eq!(renew(&taken, bad, &p, now), Err(stale.clone()));
        assert_eq!(begin_step(&taken, bad, "s", "k", now), Err(stale.clone()));
        assert_eq!(complete_step(&taken, bad, "s", None, now), Err(stale));
    }
}

#[test]
fn a_finished_record_refuses_its_own_token() {
    let p = policy(EffectKind::Local);
    let (r, tok) = running(EffectKind::Local, 0);
    let c = complete(&r, tok, ok_response(), &p, t(1)).unwrap();
    let wrong = |found| TransitionError::WrongState {
        expected: StateName::Running,
        found,
    };
    assert_eq!(
        complete(&c, tok, ok_response(), &p, t(2)),
        Err(wrong(StateName::Completed))
    );
    assert_eq!(release(&c, tok, &p, t(2)), Err(wrong(StateName::Completed)));
    let rel = release(&r, tok, &p, t(1)).unwrap();
    assert_eq!(renew(&rel, tok, &p, t(2)), Err(wrong(StateName::Released)));
    let u = mark_unknown(&r, tok, UnknownReason::Crash, t(1)).unwrap();
    // Unknown for another reason than this lease expiring: the worker is done.
    assert_eq!(
        complete(&u, tok, ok_response(), &p, t(2)),
        Err(wrong(StateName::Unknown))
    );
}

#[test]
fn the_worker_of_an_expired_external_lease_may_still_report() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let (r, _) = begin_step(&r, tok, "book", "pk", t(1)).unwrap();
    let u = claim(Some(&r), &req(1, "w2"), &p, t(LEASE_MS))
        .write
        .unwrap();
    // It may record facts and the outcome...
    let u = complete_step(&u, tok, "book", Some("ref".into()), t(LEASE_MS + 1)).unwrap();
    assert_eq!(u.state.name(), StateName::Unknown);
    let done = complete(&u, tok, ok_response(), &p, t(LEASE_MS + 2)).unwrap();
    assert_eq!(done.state.name(), StateName::Completed);
    assert_eq!(
        release(&u, tok, &p, t(LEASE_MS + 2)).unwrap().state.name(),
        StateName::Released
    );
    // ...but not start new effects nor revive its lease.
    let wrong = TransitionError::WrongState {
        expected: StateName::Running,
        found: StateName::Unknown,
    };
    assert_eq!(
        begin_step(&u, tok, "notify", "pk2", t(LEASE_MS + 3)),
        Err(wrong.clone())
    );
    assert_eq!(renew(&u, tok, &p, t(LEASE_MS + 3)), Err(wrong));
}

#[test]
fn renew_extends_a_lease_nobody_took_over() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let r2 = renew(&r, tok, &p, t(20_000)).unwrap();
    assert_eq!(r2.lease_expires_at(), Some(t(50_000)));
    // Even past expiry, while it is still Running under this token.
    let r3 = renew(&r2, tok, &p, t(60_000)).unwrap();
    assert_eq!(r3.lease_expires_at(), Some(t(90_000)));
    assert_eq!(r3.last_token, tok);
    let d = claim(Some(&r3), &req(1, "w2"), &p, t(60_001));
    assert!(matches!(d.outcome, ClaimOutcome::InFlight { .. }));
}

#[test]
fn begin_step_persists_the_key_once_and_reuses_it() {
    let p = policy(EffectKind::Local);
    let (r, tok) = running(EffectKind::Local, 0);
    let (r, start) = begin_step(&r, tok, "book", "pk-first", t(1)).unwrap();
    assert_eq!(
        start,
        StepStart::Dispatch {
            provider_key: "pk-first".into()
        }
    );
    let step = r.step("book").unwrap();
    assert_eq!((step.state, step.started_at), (StepState::Started, t(1)));
    // A retry of the same step (same or a later lease) ignores its new proposal.
    let (again, start) = begin_step(&r, tok, "book", "pk-other", t(2)).unwrap();
    assert_eq!(
        start,
        StepStart::Dispatch {
            provider_key: "pk-first".into()
        }
    );
    assert_eq!(again, r);
    let taken = claim(Some(&r), &req(1, "w2"), &p, t(LEASE_MS))
        .write
        .unwrap();
    let (_, start) = begin_step(&taken, token(2), "book", "pk-new", t(LEASE_MS)).unwrap();
    assert_eq!(
        start,
        StepStart::Dispatch {
            provider_key: "pk-first".into()
        }
    );
    // Once done, it is not dispatched again.
    let done = complete_step(&r, tok, "book", Some("appt_1".into()), t(3)).unwrap();
    let (_, start) = begin_step(&done, tok, "book", "pk-x", t(4)).unwrap();
    assert_eq!(
        start,
        StepStart::AlreadyDone {
            provider_ref: Some("appt_1".into())
        }
    );
}

#[test]
fn complete_step_is_idempotent_and_refuses_conflicts() {
    let (r, tok) = running(EffectKind::Local, 0);
    assert_eq!(
        complete_step(&r, tok, "book", None, t(1)),
        Err(TransitionError::UnknownStep {
            name: "book".into()
        })
    );
    let (r, _) = begin_step(&r, tok, "book", "pk", t(1)).unwrap();
    let done = complete_step(&r, tok, "book", Some("a".into()), t(2)).unwrap();
    let step = done.step("book").unwrap();
    assert_eq!(step.state, StepState::Done);
    assert_eq!(step.done_at, Some(t(2)));
    assert_eq!(
        complete_step(&done, tok, "book", Some("a".into()), t(3)),
        Ok(done.clone())
    );
    assert_eq!(
        complete_step(&done, tok, "book", Some("b".into()), t(3)),
        Err(TransitionError::StepConflict {
            name: "book".into()
        })
    );
    assert!(Record::decode(&done.encode()).is_ok());
}

#[test]
fn resolve_settles_only_unresolved_records() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let not_unknown = |found| TransitionError::WrongState {
        expected: StateName::Unknown,
        found,
    };
    // A live lease is not the operator's to settle.
    assert_eq!(
        resolve(&r, Resolution::NotApplied, &p, t(LEASE_MS - 1)),
        Err(not_unknown(StateName::Running))
    );
    // Past its lease it is.
    let rel = resolve(&r, Resolution::NotApplied, &p, t(LEASE_MS)).unwrap();
    assert_eq!(rel.state, RecordState::Released { at: t(LEASE_MS) });
    let u = mark_unknown(&r, tok, UnknownReason::GuardDropped, t(5)).unwrap();
    let c = resolve(&u, Resolution::Applied(ok_response()), &p, t(50)).unwrap();
    assert_eq!(
        c.state,
        RecordState::Completed {
            response: ok_response(),
            completed_at: t(50)
        }
    );
    assert_eq!(c.replay_until, Some(t(100_050)));
    assert_eq!(
        resolve(&c, Resolution::NotApplied, &p, t(60)),
        Err(not_unknown(StateName::Completed))
    );
    assert_eq!(
        resolve(&rel, Resolution::NotApplied, &p, t(60)),
        Err(not_unknown(StateName::Released))
    );
    // The resolved record's old token is finished.
    assert!(complete(&c, tok, ok_response(), &p, t(70)).is_err());
}

#[test]
fn recover_grants_a_new_lease_that_fences_the_old_one() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let (r, _) = begin_step(&r, tok, "book", "pk-book", t(1)).unwrap();
    assert!(recover(&r, "rec", &p, t(1)).is_err());
    let u = mark_unknown(&r, tok, UnknownReason::Crash, t(2)).unwrap();
    let (rec, grant) = recover(&u, "reconciler", &p, t(3)).unwrap();
    assert_eq!(grant.token, token(2));
    assert_eq!(grant.steps, r.steps);
    assert_eq!(rec.attempt, 2);
    assert_eq!(rec.lease_expires_at(), Some(t(3 + LEASE_MS)));
    let (_, start) = begin_step(&rec, grant.token, "book", "pk-new", t(4)).unwrap();
    assert_eq!(
        start,
        StepStart::Dispatch {
            provider_key: "pk-book".into()
        }
    );
    assert!(matches!(
        complete(&rec, tok, ok_response(), &p, t(5)),
        Err(TransitionError::StaleToken { .. })
    ));
}

#[test]
fn gc_never_touches_running_or_unknown() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let u = mark_unknown(&r, tok, UnknownReason::Crash, t(1)).unwrap();
    for now in [0, LEASE_MS, u64::MAX] {
        assert_eq!(gc(&r, t(now)), GcAction::Keep);
        assert_eq!(gc(&u, t(now)), GcAction::Keep);
    }
    let c = complete(&r, tok, ok_response(), &p, t(0)).unwrap();
    assert_eq!(gc(&c, t(99_999)), GcAction::Keep);
    assert_eq!(gc(&c, t(100_000)), GcAction::PruneBody);
    let pruned = prune_body(&c);
    let RecordState::Completed { response, .. } = &pruned.state else {
        panic!()
    };
    assert_eq!(response.body, None);
    assert_eq!(
        (response.status, response.resource_ref.as_deref()),
        (201, Some("appt_1"))
    );
    assert_eq!(pruned.gc_due_at(), Some(t(1_000_000)));
    assert_eq!(gc(&pruned, t(100_000)), GcAction::Keep);
    assert_eq!(gc(&pruned, t(1_000_000)), GcAction::Delete);
    assert_eq!(gc(&c, t(1_000_000)), GcAction::Delete);
    let rel = release(&r, tok, &p, t(0)).unwrap();
    assert_eq!(gc(&rel, t(999_999)), GcAction::Keep);
    assert_eq!(gc(&rel, t(1_000_000)), GcAction::Delete);
}

#[test]
fn exhausted_tokens_fail_closed() {
    let p = policy(EffectKind::Local);
    let (mut r, tok) = running(EffectKind::Local, 0);
    r = release(&r, tok, &p, t(1)).unwrap();
    r.last_token = token(u64::MAX);
    let d = claim(Some(&r), &req(1, "w"), &p, t(2));
    assert_eq!(d.outcome, ClaimOutcome::Uncertain { since: t(2) });
    let w = d.write.unwrap();
    assert_eq!(
        w.state,
        RecordState::Unknown {
            reason: UnknownReason::TokensExhausted,
            since: t(2)
        }
    );
    assert!(Record::decode(&w.encode()).is_ok());
    assert_eq!(
        recover(&w, "rec", &p, t(3)),
        Err(TransitionError::TokensExhausted {
            current: token(u64::MAX)
        })
    );
}

#[test]
fn errors_name_the_state_and_the_token() {
    assert_eq!(
        TransitionError::StaleToken {
            presented: token(1),
            current: token(2)
        }
        .to_string(),
        "stale fencing token #1: the record's current token is #2"
    );
    assert_eq!(
        TransitionError::WrongState {
            expected: StateName::Running,
            found: StateName::Completed
        }
        .to_string(),
        "record is completed, expected running"
    );
}

#[test]
fn state_names_parse_and_display() {
    for name in StateName::ALL {
        assert_eq!(name.to_string().parse::<StateName>(), Ok(name));
    }
    assert!("Running".parse::<StateName>().is_err());
}

#[test]
fn every_record_the_machine_writes_decodes_to_itself() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let (s, _) = begin_step(&r, tok, "book", "pk", t(1)).unwrap();
    let written = [
        r.clone(),
        s.clone(),
        complete_step(&s, tok, "book", None, t(2)).unwrap(),
        complete(&s, tok, ok_response(), &p, t(2)).unwrap(),
        prune_body(&complete(&s, tok, ok_response(), &p, t(2)).unwrap()),
        release(&s, tok, &p, t(2)).unwrap(),
        mark_unknown(&s, tok, UnknownReason::GuardDropped, t(2)).unwrap(),
        claim(Some(&s), &req(1, "w2"), &p, t(LEASE_MS))
            .write
            .unwrap(),
        renew(&s, tok, &p, t(3)).unwrap(),
    ];
    for record in written {
        assert_eq!(Record::decode(&record.encode()), Ok(record));
    }
}

#[test]
fn resolve_keeps_the_windows_the_record_was_claimed_under() {
    let month = Duration::from_secs(30 * 24 * 60 * 60);
    let claimed_under = policy(EffectKind::External)
        .with_replay_window(month)
        .with_record_window(month);
    let d = claim(None, &req(1, "w1"), &claimed_under, t(0));
    let r = d.write.unwrap();
    assert_eq!(r.windows, Some(RecordWindows::of(&claimed_under)));
    let ClaimOutcome::Execute { token: tok, .. } = d.outcome else {
        panic!("fresh claim must execute")
    };
    let u = mark_unknown(&r, tok, UnknownReason::GuardDropped, t(5)).unwrap();
    // An operator resolves with the default policy (24 h replay, 7 days record).
    let day = 24 * 60 * 60 * 1000;
    let c = resolve(
        &u,
        Resolution::Applied(ok_response()),
        &Policy::default(),
        t(10),
    )
    .unwrap();
    assert_eq!(c.replay_until, Some(t(10 + 30 * day)));
    assert_eq!(c.keep_until, Some(t(10 + 30 * day)));
    let rel = resolve(&u, Resolution::NotApplied, &Policy::default(), t(10)).unwrap();
    assert_eq!(rel.keep_until, Some(t(10 + 30 * day)));
    // A retry on day 8 replays.
    let day_8 = claim(Some(&c), &req(1, "w2"), &Policy::default(), t(8 * day));
    assert!(
        matches!(day_8.outcome, ClaimOutcome::Replay { .. }),
        "{day_8:?}"
    );
}

#[test]
fn a_format_1_record_without_windows_takes_the_policys() {
    let (mut r, tok) = running(EffectKind::Local, 0);
    r.windows = None;
    let c = complete(&r, tok, ok_response(), &policy(EffectKind::Local), t(7)).unwrap();
    assert_eq!(c.replay_until, Some(t(100_007)));
    assert_eq!(c.keep_until, Some(t(1_000_007)));
    // Leased again, it gains the windows of the policy that leases it.
    let rel = release(&r, tok, &policy(EffectKind::Local), t(8)).unwrap();
    let again = claim(Some(&rel), &req(1, "w2"), &policy(EffectKind::Local), t(9));
    assert_eq!(
        again.write.unwrap().windows,
        Some(RecordWindows::of(&policy(EffectKind::Local)))
    );
}

#[test]
fn claim_above_starts_a_fresh_record_above_the_token_floor() {
    let p = policy(EffectKind::Local);
    let d = claim_above(None, &req(1, "w1"), &p, t(0), 41);
    let ClaimOutcome::Execute { token: tok, .. } = d.outcome else {
        panic!("{:?}", d.outcome)
    };
    assert_eq!(tok, token(42));
    assert_eq!(d.write.unwrap().last_token, token(42));
    // An expired record's slot continues from whichever is higher.
    let c = completed(EffectKind::Local, 10);
    let expired_at = c.keep_until.unwrap().as_millis();
    let over_old = claim_above(Some(&c), &req(1, "w1"), &p, t(expired_at), 0);
    assert!(matches!(over_old.outcome, ClaimOutcome::Execute { token: tk, .. } if tk == token(2)));
    let over_floor = claim_above(Some(&c), &req(1, "w1"), &p, t(expired_at), 9);
    assert!(
        matches!(over_floor.outcome, ClaimOutcome::Execute { token: tk, .. } if tk == token(10))
    );
    // No token left above the floor: fail closed.
    let none = claim_above(None, &req(1, "w1"), &p, t(0), u64::MAX);
    assert!(matches!(none.outcome, ClaimOutcome::Uncertain { .. }));
    assert_eq!(none.write, None);
}

// ---------------------------------------------------------------- apply

fn worker_ops(tok: FencingToken) -> Vec<Op> {
    vec![
        Op::Complete {
            token: tok,
            response: ok_response(),
        },
        Op::Release { token: tok },
        Op::MarkUnknown {
            token: tok,
            reason: UnknownReason::GuardDropped,
        },
        Op::Renew { token: tok },
        Op::BeginStep {
            token: tok,
            name: "book".into(),
            proposed_provider_key: "pk".into(),
        },
        Op::CompleteStep {
            token: tok,
            name: "book".into(),
            provider_ref: None,
        },
        Op::Resolve {
            resolution: Resolution::NotApplied,
        },
        Op::Recover { owner: "r".into() },
    ]
}

#[test]
fn apply_refuses_every_record_operation_on_a_key_without_a_record() {
    let p = policy(EffectKind::External);
    for op in worker_ops(token(1)) {
        assert_eq!(
            apply(None, &op, &p, t(0)),
            Err(TransitionError::NotFound),
            "{op:?}"
        );
    }
    let gc_nothing = apply(None, &Op::Gc, &p, t(0)).unwrap();
    assert_eq!(
        (gc_nothing.write, gc_nothing.answer),
        (Write::Keep, Answer::Gc(GcAction::Keep))
    );
}

#[test]
fn apply_answers_what_the_transition_functions_answer() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    let now = t(10);
    let expect_put = |op: Op, next: Record| {
        let d = apply(Some(&r), &op, &p, now).unwrap();
        assert_eq!(
            (d.write, d.answer),
            (Write::Put(next), Answer::Done),
            "{op:?}"
        );
    };
    expect_put(
        Op::Complete {
            token: tok,
            response: ok_response(),
        },
        complete(&r, tok, ok_response(), &p, now).unwrap(),
    );
    expect_put(
        Op::Release { token: tok },
        release(&r, tok, &p, now).unwrap(),
    );
    expect_put(
        Op::MarkUnknown {
            token: tok,
            reason: UnknownReason::GuardDropped,
        },
        mark_unknown(&r, tok, UnknownReason::GuardDropped, now).unwrap(),
    );
    expect_put(Op::Renew { token: tok }, renew(&r, tok, &p, now).unwrap());
    let begun = apply(
        Some(&r),
        &Op::BeginStep {
            token: tok,
            name: "book".into(),
            proposed_provider_key: "pk-1".into(),
        },
        &p,
        now,
    )
    .unwrap();
    let (next, start) = begin_step(&r, tok, "book", "pk-1", now).unwrap();
    assert_eq!(
        (begun.write, begun.answer),
        (Write::Put(next), Answer::Step(start))
    );
    // A stale token is refused by apply exactly as by the function.
    for op in worker_ops(token(9)).into_iter().take(6) {
        assert!(
            matches!(
                apply(Some(&r), &op, &p, now),
                Err(TransitionError::StaleToken { .. })
            ),
            "{op:?}"
        );
    }
}

#[test]
fn apply_writes_nothing_for_answers_that_change_nothing() {
    let p = policy(EffectKind::External);
    let (r, tok) = running(EffectKind::External, 0);
    // Replay, in flight and mismatch are decided without a write.
    let done = completed(EffectKind::External, 5);
    let claim_op = |fp| Op::Claim {
        request: req(fp, "w2"),
        token_floor: 0,
    };
    for (record, op) in [(&done, claim_op(1)), (&r, claim_op(1)), (&r, claim_op(2))] {
        let d = apply(Some(record), &op, &p, t(10)).unwrap();
        assert!(d.writes_nothing(), "{:?}", d.answer);
    }
    // A step begun, then begun again and completed twice with one reference.
    let (with_step, _) = begin_step(&r, tok, "book", "pk-1", t(1)).unwrap();
    let again = apply(
        Some(&with_step),
        &Op::BeginStep {
            token: tok,
            name: "book".into(),
            proposed_provider_key: "pk-2".into(),
        },
        &p,
        t(2),
    )
    .unwrap();
    assert!(again.writes_nothing());
    assert_eq!(
        again.answer,
        Answer::Step(StepStart::Dispatch {
            provider_key: "pk-1".into()
        })
    );
    let step_done = complete_step(&with_step, tok, "book", Some("ref".into()), t(3)).unwrap();
    let repeated = apply(
        Some(&step_done),
        &Op::CompleteStep {
            token: tok,
            name: "book".into(),
            provider_ref: Some("ref".into()),
        },
        &p,
        t(4),
    )
    .unwrap();
    assert!(repeated.writes_nothing());
}

#[test]
fn apply_gc_prunes_then_deletes_a_completed_record_and_keeps_a_running_one() {
    let p = policy(EffectKind::External);
    let done = completed(EffectKind::External, 0);
    let pruned = apply(Some(&done), &Op::Gc, &p, t(100_000)).unwrap();
    assert_eq!(
        (pruned.write, pruned.answer),
        (
            Write::Put(prune_body(&done)),
            Answer::Gc(GcAction::PruneBody)
        )
    );
    let deleted = apply(Some(&done), &Op::Gc, &p, t(1_000_000)).unwrap();
    assert_eq!(
        (deleted.write, deleted.answer),
        (Write::Delete, Answer::Gc(GcAction::Delete))
    );
    let (r, _) = running(EffectKind::External, 0);
    let kept = apply(Some(&r), &Op::Gc, &p, t(10_000_000)).unwrap();
    assert!(kept.writes_nothing());
}

#[test]
fn completions_and_resolutions_never_keep_a_credential_or_a_cookie() {
    let p = policy(EffectKind::External);
    let with_secrets = StoredResponse {
        headers: vec![
            ("Set-Cookie".into(), b"session=s3cret".to_vec()),
            ("location".into(), b"/appointments/1".to_vec()),
            ("authorization".into(), b"Bearer s3cret".to_vec()),
            (
                "x-session-token".into(),
                b"kept by whoever built it".to_vec(),
            ),
        ],
        ..ok_response()
    };
    let (r, tok) = running(EffectKind::External, 0);
    let done = complete(&r, tok, with_secrets.clone(), &p, t(10)).unwrap();
    let u = mark_unknown(&r, tok, UnknownReason::GuardDropped, t(10)).unwrap();
    let resolved = resolve(&u, Resolution::Applied(with_secrets), &p, t(20)).unwrap();
    for record in [done, resolved] {
        let RecordState::Completed { response, .. } = &record.state else {
            panic!("not completed: {:?}", record.state);
        };
        let names: Vec<&str> = response.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["location", "x-session-token"]);
    }
}
