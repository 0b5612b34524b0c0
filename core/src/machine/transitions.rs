//! Worker transitions (fenced by a token), operator transitions and GC.

use crate::prelude::*;

use super::claim::leased;
use super::{Policy, TransitionError};
use crate::record::{
    FencingToken, Record, RecordState, StateName, Step, StepState, StoredResponse, UnknownReason,
};
use crate::time::UnixMillis;

/// Whether a transition also accepts the token of a lease that expired into
/// [`UnknownReason::LeaseExpired`]: its worker may still report the real outcome.
#[derive(Clone, Copy, PartialEq, Eq)]
enum AfterExpiry {
    Accept,
    Refuse,
}

/// `Ok` iff `token` is current for `record`: it is the last token granted, and
/// the record is Running (or, with [`AfterExpiry::Accept`], Unknown because that
/// very lease expired).
fn check_token(
    record: &Record,
    token: FencingToken,
    after_expiry: AfterExpiry,
) -> Result<(), TransitionError> {
    if token != record.last_token {
        return Err(TransitionError::StaleToken {
            presented: token,
            current: record.last_token,
        });
    }
    match &record.state {
        RecordState::Running { .. } => Ok(()),
        RecordState::Unknown {
            reason: UnknownReason::LeaseExpired,
            ..
        } if after_expiry == AfterExpiry::Accept => Ok(()),
        other => Err(TransitionError::WrongState {
            expected: StateName::Running,
            found: other.name(),
        }),
    }
}

/// Sets the retention clocks of an outcome recorded at `now`, by the windows the
/// record was claimed under (`policy`'s only for a format-1 record that has none);
/// the record window never ends before the replay window. Credential and cookie
/// headers are dropped from the response whoever built it: a record is replayed to
/// anyone holding the key (docs/architecture.md, invariant 9).
fn completed(
    record: &Record,
    mut response: StoredResponse,
    policy: &Policy,
    now: UnixMillis,
) -> Record {
    response
        .headers
        .retain(|(name, _)| !crate::http::is_never_stored_header(name));
    let windows = record.windows_or(policy);
    let replay_until = now.saturating_add(windows.replay());
    let keep_until = now.saturating_add(windows.record()).max(replay_until);
    let mut next = record.clone();
    next.state = RecordState::Completed {
        response,
        completed_at: now,
    };
    next.updated_at = now;
    next.replay_until = Some(replay_until);
    next.keep_until = Some(keep_until);
    next
}

fn released(record: &Record, policy: &Policy, now: UnixMillis) -> Record {
    let mut next = record.clone();
    next.state = RecordState::Released { at: now };
    next.updated_at = now;
    next.replay_until = None;
    next.keep_until = Some(now.saturating_add(record.windows_or(policy).record()));
    next
}

/// The worker holding `token` reports the outcome: retries replay `response`
/// until `now + replay_window`, the record is kept until `now + record_window`.
///
/// Accepted while Running, and after the lease expired into Unknown (the worker
/// knows the real outcome).
pub fn complete(
    record: &Record,
    token: FencingToken,
    response: StoredResponse,
    policy: &Policy,
    now: UnixMillis,
) -> Result<Record, TransitionError> {
    check_token(record, token, AfterExpiry::Accept)?;
    Ok(completed(record, response, policy, now))
}

/// The worker holding `token` reports that the attempt had no effect: a retry
/// executes again. The compact record is kept until `now + record_window`.
pub fn release(
    record: &Record,
    token: FencingToken,
    policy: &Policy,
    now: UnixMillis,
) -> Result<Record, TransitionError> {
    check_token(record, token, AfterExpiry::Accept)?;
    Ok(released(record, policy, now))
}

/// The worker holding `token` reports an ambiguous outcome: the record becomes
/// Unknown and is never executed again without [`resolve`] or [`recover`].
pub fn mark_unknown(
    record: &Record,
    token: FencingToken,
    reason: UnknownReason,
    now: UnixMillis,
) -> Result<Record, TransitionError> {
    check_token(record, token, AfterExpiry::Accept)?;
    let since = match &record.state {
        RecordState::Unknown { since, .. } => *since,
        _ => now,
    };
    let mut next = record.clone();
    next.state = RecordState::Unknown { reason, since };
    next.updated_at = now;
    Ok(next)
}

/// Extends the lease of `token` to `now + lease`.
///
/// A lease that expired is renewed too as long as nobody took it over (its token
/// is still current and the record still Running); once a claim turned it into
/// Unknown, renewing is refused.
pub fn renew(
    record: &Record,
    token: FencingToken,
    policy: &Policy,
    now: UnixMillis,
) -> Result<Record, TransitionError> {
    check_token(record, token, AfterExpiry::Refuse)?;
    let mut next = record.clone();
    if let RecordState::Running { lease } = &mut next.state {
        lease.expires_at = now.saturating_add(policy.lease);
    }
    next.updated_at = now;
    Ok(next)
}

/// What the worker does about a step it is about to dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum StepStart {
    /// Dispatch the step with this provider key: the key persisted by an earlier
    /// attempt if there was one (the proposed key is then ignored), else the
    /// proposed key, now persisted.
    Dispatch {
        /// The idempotency key to send to the provider.
        provider_key: String,
    },
    /// An earlier attempt finished this step; do not dispatch it again.
    AlreadyDone {
        /// The provider's reference recorded for it.
        provider_ref: Option<String>,
    },
}

/// Persists step `name` with `proposed_provider_key` *before* the worker
/// dispatches it; write the returned record, then dispatch.
///
/// Only for a Running record: after the lease expired into Unknown, a worker must
/// not start new effects.
pub fn begin_step(
    record: &Record,
    token: FencingToken,
    name: &str,
    proposed_provider_key: impl Into<String>,
    now: UnixMillis,
) -> Result<(Record, StepStart), TransitionError> {
    check_token(record, token, AfterExpiry::Refuse)?;
    match record.step(name) {
        Some(step) => {
            let start = match step.state {
                StepState::Started => StepStart::Dispatch {
                    provider_key: step.provider_key.clone(),
                },
                StepState::Done => StepStart::AlreadyDone {
                    provider_ref: step.provider_ref.clone(),
                },
            };
            Ok((record.clone(), start))
        }
        None => {
            let provider_key = proposed_provider_key.into();
            let mut next = record.clone();
            next.steps.push(Step {
                name: name.to_owned(),
                state: StepState::Started,
                provider_key: provider_key.clone(),
                provider_ref: None,
                started_at: now,
                done_at: None,
            });
            next.updated_at = now;
            Ok((next, StepStart::Dispatch { provider_key }))
        }
    }
}

/// Records that step `name` is done, with the provider's reference.
///
/// Idempotent: completing a done step again with the same reference changes
/// nothing; a different reference is a [`TransitionError::StepConflict`]. Also
/// accepted after the lease expired into Unknown (it records a fact that helps
/// whoever resolves the record).
pub fn complete_step(
    record: &Record,
    token: FencingToken,
    name: &str,
    provider_ref: Option<String>,
    now: UnixMillis,
) -> Result<Record, TransitionError> {
    check_token(record, token, AfterExpiry::Accept)?;
    let mut next = record.clone();
    let step = next
        .steps
        .iter_mut()
        .find(|step| step.name == name)
        .ok_or_else(|| TransitionError::UnknownStep {
            name: name.to_owned(),
        })?;
    match step.state {
        StepState::Done if step.provider_ref == provider_ref => return Ok(record.clone()),
        StepState::Done => {
            return Err(TransitionError::StepConflict {
                name: name.to_owned(),
            });
        }
        StepState::Started => {
            step.state = StepState::Done;
            step.provider_ref = provider_ref;
            step.done_at = Some(now);
        }
    }
    next.updated_at = now;
    Ok(next)
}

/// An operator's (or reconciler's) finding about an ambiguous outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// The effect happened: retries replay this response.
    Applied(StoredResponse),
    /// The effect did not happen: a retry executes again.
    NotApplied,
}

/// `Ok` iff an operator may act on `record` now: Unknown, or Running past its lease.
fn check_unresolved(record: &Record, now: UnixMillis) -> Result<(), TransitionError> {
    if record.is_unresolved(now) {
        Ok(())
    } else {
        Err(TransitionError::WrongState {
            expected: StateName::Unknown,
            found: record.state.name(),
        })
    }
}

/// Settles an Unknown (or Running-past-lease) record: Applied → Completed with
/// the retention clocks of [`complete`], NotApplied → Released.
///
/// The windows are the ones the record was claimed under, so an operator's
/// resolve with a default `policy` never shortens a 30-day operation to the
/// default's 7 days; `policy`'s windows apply only to format-1 records.
pub fn resolve(
    record: &Record,
    resolution: Resolution,
    policy: &Policy,
    now: UnixMillis,
) -> Result<Record, TransitionError> {
    check_unresolved(record, now)?;
    Ok(match resolution {
        Resolution::Applied(response) => completed(record, response, policy, now),
        Resolution::NotApplied => released(record, policy, now),
    })
}

/// A new lease granted by [`recover`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub struct RecoverGrant {
    /// The new lease's fencing token (the record's last token + 1).
    pub token: FencingToken,
    /// The persisted steps to resume: the first not done is where to continue,
    /// with its persisted provider key.
    pub steps: Vec<Step>,
}

impl RecoverGrant {
    /// Where to resume: the first persisted step that is not done (dispatch it
    /// again with its persisted provider key), or `None` when all are done.
    #[must_use]
    pub fn resume_at(&self) -> Option<&Step> {
        self.steps.iter().find(|step| step.state != StepState::Done)
    }
}

/// Gives a reconciler a new lease on an Unknown (or Running-past-lease) record so
/// it can re-drive the persisted steps; the old lease's token becomes stale.
pub fn recover(
    record: &Record,
    owner: impl Into<String>,
    policy: &Policy,
    now: UnixMillis,
) -> Result<(Record, RecoverGrant), TransitionError> {
    check_unresolved(record, now)?;
    let token = record
        .last_token
        .next()
        .ok_or(TransitionError::TokensExhausted {
            current: record.last_token,
        })?;
    let next = leased(record, owner.into(), token, policy, now);
    let grant = RecoverGrant {
        token,
        steps: next.steps.clone(),
    };
    Ok((next, grant))
}

/// What GC does with one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[must_use]
pub enum GcAction {
    /// Nothing yet.
    Keep,
    /// The replay window is over: write [`prune_body`]'s record.
    PruneBody,
    /// The record window is over: delete the record.
    Delete,
}

/// What GC does with `record` at `now`. Running and Unknown records are always
/// kept: they are unfinished business, not garbage.
pub fn gc(record: &Record, now: UnixMillis) -> GcAction {
    match &record.state {
        RecordState::Running { .. } | RecordState::Unknown { .. } => GcAction::Keep,
        RecordState::Released { .. } | RecordState::Completed { .. } if record.is_expired(now) => {
            GcAction::Delete
        }
        RecordState::Completed { response, .. }
            if response.body.is_some() && record.replay_until.is_some_and(|t| now >= t) =>
        {
            GcAction::PruneBody
        }
        RecordState::Completed { .. } | RecordState::Released { .. } => GcAction::Keep,
    }
}

/// `record` without its response body (status, headers and reference kept).
#[must_use]
pub fn prune_body(record: &Record) -> Record {
    let mut next = record.clone();
    if let RecordState::Completed { response, .. } = &mut next.state {
        response.body = None;
    }
    next
}
