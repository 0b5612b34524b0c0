//! The execution guard: the right to execute one claimed operation.

use idemkit_core::machine::{self, Answer, Op, Policy, StepStart, TransitionError};
use idemkit_core::record::{
    EffectKind, FencingToken, RecordState, Step, StoredResponse, UnknownReason,
};
use idemkit_core::{LogRef, RecordId, UnixMillis};
use std::time::Instant;

use super::error::{StorageError, WorkerError};
use super::{Seam, Store};
use crate::adapters::Stored;

/// The right to execute one claimed operation, fenced by its token.
///
/// Report the outcome with one of the consuming methods: [`complete`](Self::complete),
/// [`release`](Self::release), [`mark_unknown`](Self::mark_unknown) or
/// [`finish`](Self::finish). Each returns only after the outcome is durable.
///
/// **Dropped without an outcome** (a panic, an early return, or a consuming method
/// that failed), the guard does its best in `Drop`: an
/// [`EffectKind::Local`] record is released (nothing durable happened, a retry may
/// execute), an [`EffectKind::External`] one becomes Unknown
/// ([`UnknownReason::GuardDropped`]), never silently re-executed. Errors there are
/// ignored: the lease then expires and the state machine applies the same rule.
#[derive(Debug)]
#[must_use = "dropping the guard releases (Local) or marks Unknown (External)"]
pub struct ExecutionGuard {
    store: Store,
    id: RecordId,
    token: FencingToken,
    attempt: u32,
    lease_expires_at: UnixMillis,
    steps: Vec<Step>,
    effect: EffectKind,
    policy: Policy,
    finished: bool,
    /// The record and version this guard wrote last: its next transition is
    /// decided on it and written conditionally, with no read first (a record
    /// changed meanwhile, by a [`Renewer`] or a takeover, is read then).
    /// (Boxed: the guard travels inside `Claim`, whose other answers are small.)
    held: Option<Box<Stored>>,
    /// The instant this guard's last transition was decided at, and when (on
    /// this process's monotonic clock) that was.
    decided: (UnixMillis, Instant),
}

impl ExecutionGuard {
    /// The guard of the lease `token`, granted by the write of `stored`,
    /// decided at `decided_at` (just now).
    pub(crate) fn new(
        store: Store,
        id: RecordId,
        token: FencingToken,
        stored: Stored,
        policy: &Policy,
        decided_at: UnixMillis,
    ) -> Self {
        let record = &stored.record;
        ExecutionGuard {
            token,
            attempt: record.attempt,
            lease_expires_at: record.lease_expires_at().unwrap_or(UnixMillis::ZERO),
            steps: record.steps.clone(),
            effect: record.effect,
            policy: *policy,
            finished: false,
            store,
            id,
            held: Some(Box::new(stored)),
            decided: (decided_at, Instant::now()),
        }
    }

    /// One transition of this lease, decided on the record held (see `held`).
    ///
    /// A completion may take its time from the store clock's estimate since
    /// this guard's last decision ([`Clock::estimate_after`](crate::clock::Clock::estimate_after)):
    /// the core accepts a completion by its token whatever the time, so the
    /// instant only dates the outcome, and a database clock is spared a round
    /// trip. Every other transition reads the clock (leases are decided by it).
    /// The record written (or read) is kept as the next transition's `held`
    /// (moved, not copied); the caller gets the core's answer.
    fn transition(&mut self, op: Op) -> Result<Answer, WorkerError> {
        let estimate = match op {
            Op::Complete { .. } => self
                .store
                .estimate_after(self.decided.0, self.decided.1.elapsed()),
            _ => None,
        };
        let now = match estimate {
            Some(now) => now,
            None => self.store.try_now()?,
        };
        let held = self.held.take().map(|b| *b);
        let applied = self.store.run(&self.id, op, &self.policy, now, held)?;
        self.held = applied.stored.map(Box::new);
        self.decided = (applied.now, Instant::now());
        Ok(applied.answer)
    }

    /// The fencing token of this lease.
    #[must_use]
    pub fn token(&self) -> FencingToken {
        self.token
    }

    /// The attempt number (1 for the first).
    #[must_use]
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// When the lease expires unless renewed.
    #[must_use]
    pub fn lease_expires_at(&self) -> UnixMillis {
        self.lease_expires_at
    }

    /// Steps persisted by earlier attempts (their provider keys are reused).
    #[must_use]
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Where to resume: the first persisted step that is not done (dispatch it
    /// again with its persisted provider key), or `None`.
    #[must_use]
    pub fn resume_at(&self) -> Option<&Step> {
        self.steps
            .iter()
            .find(|s| s.state != idemkit_core::record::StepState::Done)
    }

    /// The record's effect kind (decides what dropping the guard does).
    #[must_use]
    pub fn effect(&self) -> EffectKind {
        self.effect
    }

    /// The record's log reference.
    #[must_use]
    pub fn log_ref(&self) -> LogRef {
        self.id.log_ref()
    }

    /// The record this guard holds the lease of.
    pub(crate) fn record_id(&self) -> &RecordId {
        &self.id
    }

    /// Records an outcome (`op`): once it is durable the guard is finished and
    /// dropping it does nothing; if it fails, the guard stays unfinished.
    fn record(&mut self, op: Op) -> Result<(), WorkerError> {
        match self.transition(op.clone()) {
            Ok(_) => {}
            Err(WorkerError::Rejected {
                error: TransitionError::WrongState { .. },
                ..
            }) if self.already_recorded(&op)? => {}
            Err(e) => return Err(e),
        }
        self.finished = true;
        Ok(())
    }

    /// Whether the record already holds `op`'s outcome under this lease's
    /// token: an earlier try whose write reached the database although this
    /// worker was told it failed (an fsync that failed after the data was
    /// written, a connection lost after the commit). Trying again is then a
    /// success, not a refusal: the outcome is recorded, as this worker meant it.
    fn already_recorded(&mut self, op: &Op) -> Result<bool, WorkerError> {
        let read = self
            .store
            .adapter()
            .get(&self.id)
            .map_err(StorageError::from)?;
        let Some(stored) = read.stored else {
            return Ok(false);
        };
        if stored.record.last_token != self.token {
            return Ok(false);
        }
        let same = match (op, &stored.record.state) {
            (Op::Complete { response, .. }, RecordState::Completed { response: kept, .. }) => {
                kept == response
            }
            (Op::Release { .. }, RecordState::Released { .. }) => true,
            (Op::MarkUnknown { reason, .. }, RecordState::Unknown { reason: kept, .. }) => {
                kept == reason
            }
            _ => false,
        };
        if same {
            self.held = Some(Box::new(stored));
        }
        Ok(same)
    }

    /// Records this lease's completion with `response` through `seam` instead
    /// of the store's adapter: an adapter transaction that also holds the
    /// caller's own writes ([`crate::local`]). Decided at `now` unless the
    /// seam's read carries its database's time; on the held record first when
    /// `from_held` (the seam's update checks its version), else on a read
    /// through the seam.
    ///
    /// `Ok` means the seam applied the completion: finished, and dropping the
    /// guard does nothing (for a caller's transaction, even before that
    /// transaction commits: a drop must not write the record on another
    /// connection while the caller's transaction holds its row).
    pub(crate) fn complete_through(
        &mut self,
        seam: &mut dyn Seam,
        response: &StoredResponse,
        now: UnixMillis,
        from_held: bool,
    ) -> Result<(), WorkerError> {
        let op = Op::Complete {
            token: self.token,
            response: response.clone(),
        };
        let held = if from_held {
            self.held.take().map(|b| *b)
        } else {
            None
        };
        let applied = super::run_on(seam, &self.id, op, &self.policy, now, held)?;
        self.held = applied.stored.map(Box::new);
        self.finished = true;
        Ok(())
    }

    /// The store this guard's lease is in.
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// Stores the outcome; retries replay it from now on.
    pub fn complete(mut self, response: StoredResponse) -> Result<(), WorkerError> {
        let token = self.token;
        self.record(Op::Complete { token, response })
    }

    /// Like [`complete`](Self::complete), but a failed write leaves the guard in
    /// the caller's hands (nothing settled by its drop), so the caller can try
    /// again or record the outcome another way. After `Ok` the guard is finished
    /// and dropping it does nothing.
    pub fn try_complete(&mut self, response: &StoredResponse) -> Result<(), WorkerError> {
        self.record(Op::Complete {
            token: self.token,
            response: response.clone(),
        })
    }

    /// Like [`mark_unknown`](Self::mark_unknown), but a failed write leaves the
    /// guard in the caller's hands (see [`try_complete`](Self::try_complete)).
    pub fn try_mark_unknown(&mut self, reason: &str) -> Result<(), WorkerError> {
        self.record(Op::MarkUnknown {
            token: self.token,
            reason: UnknownReason::MarkedByWorker(reason.to_owned()),
        })
    }

    /// The attempt had no effect: a retry with the same key executes again.
    pub fn release(mut self) -> Result<(), WorkerError> {
        let token = self.token;
        self.record(Op::Release { token })
    }

    /// The outcome is ambiguous: retries get `Uncertain` until an operator resolves it.
    pub fn mark_unknown(mut self, reason: impl Into<String>) -> Result<(), WorkerError> {
        let token = self.token;
        self.record(Op::MarkUnknown {
            token,
            reason: UnknownReason::MarkedByWorker(reason.into()),
        })
    }

    /// Records `response` as the policy classifies its status
    /// ([`machine::classify`]): stored, released, or marked Unknown.
    pub fn finish(self, response: StoredResponse) -> Result<machine::Disposition, WorkerError> {
        let disposition = machine::classify(response.status, &self.policy);
        match disposition {
            machine::Disposition::Store => self.complete(response)?,
            machine::Disposition::Release => self.release()?,
            machine::Disposition::Unknown => {
                let reason = format!("status {}", response.status);
                self.mark_unknown(reason)?;
            }
        }
        Ok(disposition)
    }

    /// Walks away without reporting anything: the record stays Running until its
    /// lease expires, and then the state machine decides (takeover for Local,
    /// Unknown for External) — exactly as if this process had crashed. For tests
    /// of crash recovery, and for handing a lease to a process that keeps the
    /// token (see [`ExecutionGuard::token`]).
    pub fn abandon(mut self) {
        self.finished = true;
    }

    /// Extends the lease by the policy's lease duration from now.
    pub fn renew(&mut self) -> Result<UnixMillis, WorkerError> {
        // A refusal is an error; the renewed record says the new expiry.
        let _renewed = self.transition(Op::Renew { token: self.token })?;
        let expires = lease_expiry(self.held.as_deref(), self.decided.0);
        self.lease_expires_at = expires;
        Ok(expires)
    }

    /// A handle that renews this lease from another thread (for example every
    /// third of the lease while a long task runs).
    #[must_use]
    pub fn renewer(&self) -> Renewer {
        Renewer {
            store: self.store.clone(),
            id: self.id.clone(),
            token: self.token,
            policy: self.policy,
        }
    }

    /// Persists step `name` with its downstream idempotency key *before* the
    /// caller dispatches it. A step begun by an earlier lease keeps its persisted
    /// key (`proposed_provider_key` is then ignored); a done step answers
    /// [`StepStart::AlreadyDone`].
    pub fn begin_step(
        &mut self,
        name: &str,
        proposed_provider_key: &str,
    ) -> Result<StepStart, WorkerError> {
        let answer = self.transition(Op::BeginStep {
            token: self.token,
            name: name.to_owned(),
            proposed_provider_key: proposed_provider_key.to_owned(),
        })?;
        match answer {
            Answer::Step(start) => Ok(start),
            other => Err(unexpected("begin_step", &other).into()),
        }
    }

    /// Records that step `name` is done, with the provider's reference.
    pub fn complete_step(
        &mut self,
        name: &str,
        provider_ref: Option<String>,
    ) -> Result<(), WorkerError> {
        // A refusal is an error; there is nothing more to answer.
        let _completed = self.transition(Op::CompleteStep {
            token: self.token,
            name: name.to_owned(),
            provider_ref,
        })?;
        Ok(())
    }
}

impl Drop for ExecutionGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        // Best effort, errors ignored (see the type's doc): a failure here leaves
        // the record Running, and its lease expiry has the same effect.
        let op = match self.effect {
            EffectKind::Local => Op::Release { token: self.token },
            EffectKind::External => Op::MarkUnknown {
                token: self.token,
                reason: UnknownReason::GuardDropped,
            },
        };
        let _ = self.transition(op);
    }
}

/// Renews one lease; `Send`, so a background thread can keep a long task's lease alive.
#[derive(Clone, Debug)]
pub struct Renewer {
    store: Store,
    id: RecordId,
    token: FencingToken,
    policy: Policy,
}

impl Renewer {
    /// Extends the lease by the policy's lease duration from now; a
    /// [`WorkerError::Rejected`] with a stale token means the lease was lost.
    pub fn renew(&self) -> Result<UnixMillis, WorkerError> {
        renew_by(&self.store, &self.id, self.token, &self.policy)
    }

    /// Like [`renew`](Self::renew), but waits at most `lock_wait` for a
    /// database another process holds (a redb file shared between processes:
    /// [`Adapter::with_lock_wait`](crate::adapters::Adapter::with_lock_wait)),
    /// whatever the store itself waits, and then fails (a transient
    /// [`WorkerError::Storage`]). A worker that must renew before its lease
    /// ends bounds each attempt this way (a third of the lease, say) and tries
    /// again, instead of waiting out a long retry budget meant for recording
    /// the outcome. The same as `renew` for a store that never waits so.
    pub fn renew_within(&self, lock_wait: std::time::Duration) -> Result<UnixMillis, WorkerError> {
        let store = self.store.with_lock_wait(lock_wait);
        renew_by(&store, &self.id, self.token, &self.policy)
    }
}

/// A renewal read from the store (a [`Renewer`] holds no record: the guard's
/// own writes would make it stale).
fn renew_by(
    store: &Store,
    id: &RecordId,
    token: FencingToken,
    policy: &Policy,
) -> Result<UnixMillis, WorkerError> {
    let now = store.try_now()?;
    let applied = store.run(id, Op::Renew { token }, policy, now, None)?;
    Ok(lease_expiry(applied.stored.as_ref(), applied.now))
}

/// The lease expiry a renewal wrote into `stored`, decided at `now` (`now`
/// when it kept no record).
fn lease_expiry(stored: Option<&Stored>, now: UnixMillis) -> UnixMillis {
    stored
        .and_then(|s| s.record.lease_expires_at())
        .unwrap_or(now)
}

/// An answer of another operation than the one asked: a bug, reported.
pub(crate) fn unexpected(what: &str, answer: &Answer) -> StorageError {
    StorageError::Corrupt {
        detail: format!("{what} was answered as another operation: {answer:?}"),
    }
}
