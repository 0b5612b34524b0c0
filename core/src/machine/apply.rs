//! One entry point for every decision: [`apply`] an [`Op`] to the record a
//! store read, get back what to write and what to answer.
//!
//! A store then needs one loop for every operation (read → [`apply`] → write
//! with the version it read; a lost race reads again, at most
//! [`MAX_ATTEMPTS`] times) instead of one function per transition. The
//! functions [`claim_above`], [`complete`], [`release`], … stay the parts it is
//! made of, and their documentation holds the rules.

use crate::prelude::*;

use super::claim::{ClaimOutcome, ClaimRequest, claim_above};
use super::transitions::{
    GcAction, RecoverGrant, Resolution, StepStart, begin_step, complete, complete_step, gc,
    mark_unknown, prune_body, recover, release, renew, resolve,
};
use super::{Policy, TransitionError};
use crate::record::{FencingToken, Record, StoredResponse, UnknownReason};
use crate::time::UnixMillis;

/// How many times a store reads, decides and tries its conditional write again
/// after another writer changed the record in between, before it gives up with
/// a contention error. Every store (redb, PostgreSQL, the JavaScript adapters)
/// uses this bound; under it a lost race costs one more read, never a wrong
/// answer.
pub const MAX_ATTEMPTS: u32 = 32;

/// One operation on the record of one key.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// A request carrying the key wants to execute ([`claim_above`]).
    Claim {
        /// The request's fingerprint and owner.
        request: ClaimRequest,
        /// The highest token any deleted record of this store had (its GC
        /// counter): a fresh record's first token is above it. 0 for none.
        token_floor: u64,
    },
    /// The worker holding `token` stores the outcome ([`complete`]).
    Complete {
        /// The worker's fencing token.
        token: FencingToken,
        /// The response retries replay.
        response: StoredResponse,
    },
    /// The attempt had no effect ([`release`]).
    Release {
        /// The worker's fencing token.
        token: FencingToken,
    },
    /// The outcome is ambiguous ([`mark_unknown`]).
    MarkUnknown {
        /// The worker's fencing token.
        token: FencingToken,
        /// Why.
        reason: UnknownReason,
    },
    /// The worker extends its lease ([`renew`]).
    Renew {
        /// The worker's fencing token.
        token: FencingToken,
    },
    /// Persist a step before dispatching it ([`begin_step`]).
    BeginStep {
        /// The worker's fencing token.
        token: FencingToken,
        /// The step's name.
        name: String,
        /// The provider key to persist if the step is new.
        proposed_provider_key: String,
    },
    /// A step is done ([`complete_step`]).
    CompleteStep {
        /// The worker's fencing token.
        token: FencingToken,
        /// The step's name.
        name: String,
        /// The provider's reference, if it gave one.
        provider_ref: Option<String>,
    },
    /// An operator settles an ambiguous outcome ([`resolve`]).
    Resolve {
        /// Applied (with the response) or not applied.
        resolution: Resolution,
    },
    /// A reconciler takes a new lease to re-drive the steps ([`recover`]).
    Recover {
        /// Who takes the lease.
        owner: String,
    },
    /// Garbage collection of this record ([`gc`], [`prune_body`]).
    Gc,
}

/// What the store writes in the transaction that read the record.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "the store must write this before it answers"]
#[allow(
    clippy::large_enum_variant,
    reason = "a Write lives for one store call and its record is written as it is; a box would add an allocation to every write"
)]
pub enum Write {
    /// Nothing: the record stays as read (or absent).
    Keep,
    /// This record, under the key (insert if none was read, else update if
    /// the version read is still current).
    Put(Record),
    /// Delete the record (if the version read is still current).
    Delete,
}

/// What the caller of the operation gets once the write is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Answer {
    /// The answer to [`Op::Claim`].
    Claim(ClaimOutcome),
    /// The answer to [`Op::BeginStep`]: dispatch, or already done.
    Step(StepStart),
    /// The answer to [`Op::Recover`]: the new lease.
    Recovered(RecoverGrant),
    /// The answer to [`Op::Gc`].
    Gc(GcAction),
    /// The transition was accepted ([`Op::Complete`], [`Op::Release`],
    /// [`Op::MarkUnknown`], [`Op::Renew`], [`Op::CompleteStep`],
    /// [`Op::Resolve`]).
    Done,
}

/// The write and the answer of one operation.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "the store must write `write` atomically, then answer `answer`"]
pub struct Decision {
    /// What to write in the transaction that read `existing`.
    pub write: Write,
    /// What to answer after the write is durable.
    pub answer: Answer,
}

impl Decision {
    /// Whether the answer needs no write: a store may answer it from a
    /// snapshot read, without entering its write path (a replay, a request in
    /// flight, a mismatch, an uncertain or expired outcome, a repeated step).
    #[must_use]
    pub fn writes_nothing(&self) -> bool {
        self.write == Write::Keep
    }
}

/// `Put(next)` unless `next` is what was read (a write that changes nothing
/// costs a commit and a version for nothing).
fn put_if_changed(existing: &Record, next: Record) -> Write {
    if next == *existing {
        Write::Keep
    } else {
        Write::Put(next)
    }
}

/// Decides `op` on `existing` (the record read in this transaction, if any)
/// at `now`, under `policy`.
///
/// Every operation but [`Op::Claim`] and [`Op::Gc`] needs a record:
/// [`TransitionError::NotFound`] when there is none. A refused transition
/// writes nothing.
///
/// ```
/// use idemkit_core::machine::{apply, Answer, ClaimOutcome, ClaimRequest, Op, Policy, Write};
/// use idemkit_core::record::StoredResponse;
/// use idemkit_core::{Fingerprint, UnixMillis};
///
/// let policy = Policy::default();
/// let now = UnixMillis::from_millis(1_700_000_000_000);
/// let request = ClaimRequest { fingerprint: Fingerprint::from_bytes([1; 32]).into(), owner: "w".into() };
///
/// let first = apply(None, &Op::Claim { request: request.clone(), token_floor: 0 }, &policy, now).unwrap();
/// let (Write::Put(running), Answer::Claim(ClaimOutcome::Execute { token, .. })) = (first.write, first.answer) else {
///     unreachable!("no record: execute")
/// };
/// let response = StoredResponse::new(201, b"{}".to_vec());
/// let done = apply(Some(&running), &Op::Complete { token, response: response.clone() }, &policy, now).unwrap();
/// let Write::Put(completed) = done.write else { unreachable!("complete writes") };
///
/// let retry = apply(Some(&completed), &Op::Claim { request, token_floor: 0 }, &policy, now).unwrap();
/// assert!(retry.writes_nothing());
/// assert_eq!(retry.answer, Answer::Claim(ClaimOutcome::Replay { response }));
/// ```
pub fn apply(
    existing: Option<&Record>,
    op: &Op,
    policy: &Policy,
    now: UnixMillis,
) -> Result<Decision, TransitionError> {
    let record = || existing.ok_or(TransitionError::NotFound);
    let accepted = |record: &Record, next: Record| Decision {
        write: put_if_changed(record, next),
        answer: Answer::Done,
    };
    Ok(match op {
        Op::Claim {
            request,
            token_floor,
        } => {
            let decision = claim_above(existing, request, policy, now, *token_floor);
            Decision {
                write: decision.write.map_or(Write::Keep, Write::Put),
                answer: Answer::Claim(decision.outcome),
            }
        }
        Op::Complete { token, response } => {
            let r = record()?;
            accepted(r, complete(r, *token, response.clone(), policy, now)?)
        }
        Op::Release { token } => {
            let r = record()?;
            accepted(r, release(r, *token, policy, now)?)
        }
        Op::MarkUnknown { token, reason } => {
            let r = record()?;
            accepted(r, mark_unknown(r, *token, reason.clone(), now)?)
        }
        Op::Renew { token } => {
            let r = record()?;
            accepted(r, renew(r, *token, policy, now)?)
        }
        Op::BeginStep {
            token,
            name,
            proposed_provider_key,
        } => {
            let r = record()?;
            let (next, start) = begin_step(r, *token, name, proposed_provider_key.as_str(), now)?;
            Decision {
                write: put_if_changed(r, next),
                answer: Answer::Step(start),
            }
        }
        Op::CompleteStep {
            token,
            name,
            provider_ref,
        } => {
            let r = record()?;
            accepted(
                r,
                complete_step(r, *token, name, provider_ref.clone(), now)?,
            )
        }
        Op::Resolve { resolution } => {
            let r = record()?;
            accepted(r, resolve(r, resolution.clone(), policy, now)?)
        }
        Op::Recover { owner } => {
            let (next, grant) = recover(record()?, owner.as_str(), policy, now)?;
            Decision {
                write: Write::Put(next),
                answer: Answer::Recovered(grant),
            }
        }
        Op::Gc => match existing {
            None => Decision {
                write: Write::Keep,
                answer: Answer::Gc(GcAction::Keep),
            },
            Some(r) => {
                let action = gc(r, now);
                Decision {
                    write: match action {
                        GcAction::Keep => Write::Keep,
                        GcAction::PruneBody => put_if_changed(r, prune_body(r)),
                        GcAction::Delete => Write::Delete,
                    },
                    answer: Answer::Gc(action),
                }
            }
        },
    })
}
