//! The pure state machine: every decision about a [`Record`](crate::record::Record).
//!
//! Nothing here reads a clock, a disk or a random source. Each function takes the
//! record a store just read, the caller's input, a [`Policy`] and `now`, and
//! returns what to answer and the record to write. The store (redb, a JavaScript
//! platform store, PostgreSQL) only applies it, so every backend follows one
//! decision table.
//!
//! ## How a store drives the machine
//!
//! Every operation is **read → decide → conditional write** (the engine's
//! adapter seam, docs/architecture.md, "The adapter seam"):
//!
//! 1. Read the record under the [`RecordId`](crate::RecordId) (or none) with its
//!    version.
//! 2. Call one function below with it, the [`Policy`] of the operation and `now`.
//! 3. Write what it returned — [`ClaimDecision::write`] (nothing when `None`),
//!    the `Ok` record of a transition, or per [`GcAction`] — only if the version
//!    read is still current, and make it durable *before* answering the caller
//!    (invariant 2). On `Err`, write nothing.
//!
//! Writing without the version check is a race: two claims would both see "no
//! record" and both execute.
//!
//! [`apply`] is the one entry point a store loops over: an [`Op`] on the record
//! read → a [`Decision`] (a [`Write`] — keep, put or delete — and an
//! [`Answer`]). A lost race (the version read is no longer current at the
//! write) reads again, at most [`MAX_ATTEMPTS`] times. The functions it is
//! made of, in the order a request meets them:
//!
//! - **Admission**: [`claim`] → [`ClaimOutcome`]. Only `Execute` hands out a
//!   fencing token; every other answer is final for this request.
//! - **Worker, holding a token** (each refuses a stale token with
//!   [`TransitionError::StaleToken`]): [`renew`] while working; for each
//!   external effect [`begin_step`] *then* dispatch with the returned provider key
//!   *then* [`complete_step`]; finally one of [`complete`], [`release`] or
//!   [`mark_unknown`] — pick it with [`classify_attempt`] from the response status
//!   and what the attempt knows about its dispatch ([`Dispatch`]).
//! - **Operator or reconciler** (no token): [`resolve`] settles an Unknown
//!   record; [`recover`] grants a new lease to re-drive its persisted steps.
//! - **Maintenance**: [`gc`] per record (a store walks its index ordered by
//!   [`Record::gc_due_at`](crate::record::Record::gc_due_at)); [`prune_body`] for
//!   [`GcAction::PruneBody`]. Running and Unknown records are never collected.
//!   A Completed or Released record past its record window is treated by
//!   [`claim`] as absent even before GC deletes it, so answers never depend on
//!   when GC ran.
//!
//! ## Example: one operation in virtual time
//!
//! ```
//! use core::time::Duration;
//! use idemkit_core::machine::{
//!     begin_step, claim, complete, complete_step, ClaimOutcome, ClaimRequest, Policy, StepStart,
//! };
//! use idemkit_core::record::{EffectKind, Record, StoredResponse};
//! use idemkit_core::{Fingerprint, UnixMillis};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let policy = Policy::default().with_effect(EffectKind::External);
//! let request = ClaimRequest {
//!     fingerprint: Fingerprint::from_bytes([7; 32]).into(),
//!     owner: "worker-1".into(),
//! };
//! // The "store": one slot holding the encoded record.
//! let mut stored: Option<Vec<u8>> = None;
//! let mut now = UnixMillis::from_millis(1_700_000_000_000);
//!
//! // 1. Claim: no record yet, so execute under token #1.
//! let existing = stored.as_deref().map(Record::decode).transpose()?;
//! let decision = claim(existing.as_ref(), &request, &policy, now);
//! let ClaimOutcome::Execute { token, .. } = decision.outcome else { panic!("expected Execute") };
//! let mut record = decision.write.expect("Execute always writes");
//! stored = Some(record.encode());
//!
//! // 2. Persist the provider key *before* dispatching the booking.
//! now = now.saturating_add(Duration::from_millis(120));
//! let (next, start) = begin_step(&record, token, "book", "book-2f9c", now)?;
//! let StepStart::Dispatch { provider_key } = start else { panic!("fresh step") };
//! assert_eq!(provider_key, "book-2f9c");
//! record = next;
//! stored = Some(record.encode());
//! // ... call the provider with Idempotency-Key: book-2f9c ...
//!
//! // 3. Record the provider's reference, then the outcome.
//! now = now.saturating_add(Duration::from_millis(300));
//! record = complete_step(&record, token, "book", Some("appt_81".into()), now)?;
//! let response = StoredResponse::new(201, br#"{"id":"appt_81"}"#.to_vec());
//! record = complete(&record, token, response.clone(), &policy, now)?;
//! stored = Some(record.encode());
//!
//! // 4. A retry an hour later replays the identical response, executing nothing.
//! now = now.saturating_add(Duration::from_secs(3_600));
//! let existing = stored.as_deref().map(Record::decode).transpose()?;
//! let retry = claim(existing.as_ref(), &request, &policy, now);
//! assert_eq!(retry.outcome, ClaimOutcome::Replay { response });
//! assert!(retry.write.is_none());
//!
//! // 5. After the replay window the caller learns it completed, never re-executes.
//! now = now.saturating_add(policy.replay_window);
//! let late = claim(existing.as_ref(), &request, &policy, now);
//! assert!(matches!(late.outcome, ClaimOutcome::ResponseExpired { status: 201, .. }));
//! # Ok(())
//! # }
//! ```
//!
//! ## Edges worth knowing
//!
//! - [`release`] takes the [`Policy`]: a released record is kept for the record
//!   window (`keep_until = now + record_window`).
//! - [`complete_step`] takes the provider reference as `Option<String>`: a
//!   provider may confirm without one.
//! - A Completed or Released record past its `keep_until` counts as absent for
//!   [`claim`] (the new record continues its token counter), so answers do not
//!   depend on when GC ran.
//! - A fencing-token counter at `u64::MAX` cannot lease again: [`claim`] answers
//!   `Uncertain` and writes the record as Unknown
//!   ([`UnknownReason::TokensExhausted`](crate::record::UnknownReason::TokensExhausted)),
//!   [`recover`] returns [`TransitionError::TokensExhausted`]. Only a hostile or
//!   corrupted record gets there.
//! - A done step reported again with another provider reference is
//!   [`TransitionError::StepConflict`].
//! - `Uncertain { since }` for an expired External lease is the lease's expiry
//!   instant (when the outcome became ambiguous), not `now`.
//! - [`Record::decode`](crate::record::Record::decode) refuses non-canonical
//!   encodings, so a decoded record re-encodes to its exact bytes.
//!
//! ## Tokens and the fencing rule
//!
//! A token is current iff it equals the record's `last_token` and the record is
//! Running — or Unknown because *that* lease expired
//! ([`UnknownReason::LeaseExpired`](crate::record::UnknownReason::LeaseExpired)),
//! in which case its worker may still [`complete`], [`release`],
//! [`mark_unknown`] or [`complete_step`] (it knows the real outcome) but not
//! [`renew`] or [`begin_step`] (it must not start new effects). A token that is
//! not the last one is [`TransitionError::StaleToken`]; the last token on a
//! record in another state is [`TransitionError::WrongState`].
//!
//! Tokens restart at [`FencingToken::FIRST`](crate::record::FencingToken::FIRST)
//! only for a record created after GC deleted its predecessor, that is more
//! than a record window after the old lease ended; a record replaced in place
//! after its window continues the old counter.

mod apply;
mod claim;
mod error;
mod policy;
mod transitions;

pub use apply::{Answer, Decision, MAX_ATTEMPTS, Op, Write, apply};
pub use claim::{ClaimDecision, ClaimOutcome, ClaimRequest, claim, claim_above};
pub use error::TransitionError;
pub use policy::{
    Dispatch, Disposition, MismatchStatus, Policy, StorePolicy, classify, classify_attempt,
};
pub use transitions::{
    GcAction, RecoverGrant, Resolution, StepStart, begin_step, complete, complete_step, gc,
    mark_unknown, prune_body, recover, release, renew, resolve,
};

#[cfg(test)]
mod tests;
