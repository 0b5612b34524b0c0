//! [`Subject`]: the store under test, its clock, and a worker's transitions
//! addressed by fencing token.

use idemkit_core::machine::{
    Answer, ClaimOutcome, Op, Policy, RecoverGrant, Resolution, StepStart,
};
use idemkit_core::record::{FencingToken, Record, StoredResponse, UnknownReason};
use idemkit_core::{IdempotencyKey, RequestFingerprint, Scope, UnixMillis};

use crate::clock::ManualClock;
use crate::store::{
    Applied, Claim, ClaimError, GcReport, ListedRecord, Now, QueryError, StorageError, Store,
    WorkerError,
};

/// A store under test and the clock it decides by. Every operation is the
/// store's own, at the instant `now` the caller gives (the clock is set to it
/// first); a worker's transitions are addressed by fencing token, so a check
/// can present a stale one, or complete twice, as a worker's guard never
/// would.
#[derive(Debug)]
pub struct Subject {
    store: Store,
    clock: ManualClock,
}

impl Subject {
    /// `store`, which must decide by `clock` ([`Store::with_clock`], or an
    /// adapter whose database time follows it).
    #[must_use]
    pub fn new(store: Store, clock: ManualClock) -> Subject {
        Subject { store, clock }
    }

    /// The store under test.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The store, its clock set to `now`.
    fn at(&self, now: UnixMillis) -> &Store {
        self.clock.set(now);
        &self.store
    }

    /// One transition of `(scope, key)` by the lease `op` names, read first.
    fn transition(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        op: Op,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<Applied, WorkerError> {
        let store = self.at(now);
        store.run(&scope.record_id(key), op, policy, Now::Clock(store), None)
    }

    /// [`Store::claim`], answered as the core's outcome: an execution's guard
    /// is abandoned (the record stays Running; the token is the caller's).
    pub fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: impl Into<RequestFingerprint>,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<ClaimOutcome, ClaimError> {
        let claim = self.at(now).claim(scope, key, fingerprint, owner, policy)?;
        Ok(match claim {
            Claim::Execute(guard) => {
                let outcome = ClaimOutcome::Execute {
                    token: guard.token(),
                    attempt: guard.attempt(),
                    lease_expires_at: guard.lease_expires_at(),
                    steps: guard.steps().to_vec(),
                };
                guard.abandon();
                outcome
            }
            Claim::Replay { response, .. } => ClaimOutcome::Replay { response },
            Claim::ResponseExpired {
                status,
                resource_ref,
                ..
            } => ClaimOutcome::ResponseExpired {
                status,
                resource_ref,
            },
            Claim::InFlight { retry_after, .. } => ClaimOutcome::InFlight { retry_after },
            Claim::Mismatch { status, .. } => ClaimOutcome::Mismatch { status },
            Claim::Uncertain { since, .. } => ClaimOutcome::Uncertain { since },
        })
    }

    /// Stores the outcome of the lease `token`.
    pub fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        response: StoredResponse,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), WorkerError> {
        self.transition(scope, key, Op::Complete { token, response }, policy, now)?;
        Ok(())
    }

    /// Releases the lease `token`: the attempt had no effect.
    pub fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), WorkerError> {
        self.transition(scope, key, Op::Release { token }, policy, now)?;
        Ok(())
    }

    /// Marks the outcome of lease `token` as unknown.
    pub fn mark_unknown(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        reason: UnknownReason,
        now: UnixMillis,
    ) -> Result<(), WorkerError> {
        let op = Op::MarkUnknown { token, reason };
        self.transition(scope, key, op, &Policy::default(), now)?;
        Ok(())
    }

    /// Extends lease `token`; the new expiry.
    pub fn renew(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<UnixMillis, WorkerError> {
        let applied = self.transition(scope, key, Op::Renew { token }, policy, now)?;
        Ok(applied
            .stored
            .as_ref()
            .and_then(|s| s.record.lease_expires_at())
            .unwrap_or(applied.now))
    }

    /// Persists step `name` (and its provider key) before dispatch.
    pub fn begin_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        proposed_provider_key: &str,
        now: UnixMillis,
    ) -> Result<StepStart, WorkerError> {
        let op = Op::BeginStep {
            token,
            name: name.to_owned(),
            proposed_provider_key: proposed_provider_key.to_owned(),
        };
        let applied = self.transition(scope, key, op, &Policy::default(), now)?;
        match applied.answer {
            Answer::Step(start) => Ok(start),
            other => Err(WorkerError::Storage(StorageError::Corrupt {
                detail: format!("begin_step was answered as another operation: {other:?}"),
            })),
        }
    }

    /// Marks step `name` done.
    pub fn complete_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        provider_ref: Option<String>,
        now: UnixMillis,
    ) -> Result<(), WorkerError> {
        let op = Op::CompleteStep {
            token,
            name: name.to_owned(),
            provider_ref,
        };
        self.transition(scope, key, op, &Policy::default(), now)?;
        Ok(())
    }

    /// [`Store::resolve`].
    pub fn resolve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), WorkerError> {
        self.at(now).resolve(scope, key, resolution, policy)?;
        Ok(())
    }

    /// [`Store::resolve_seen`].
    pub fn resolve_seen(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        seen: crate::adapters::Version,
        now: UnixMillis,
    ) -> Result<Record, WorkerError> {
        self.at(now)
            .resolve_seen(scope, key, resolution, &Policy::default(), seen)
    }

    /// [`Store::recover`], answered as the core's grant: the guard is
    /// abandoned (the token is the caller's).
    pub fn recover(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<RecoverGrant, WorkerError> {
        let guard = self.at(now).recover(scope, key, owner, policy)?;
        let grant = RecoverGrant {
            token: guard.token(),
            steps: guard.steps().to_vec(),
        };
        guard.abandon();
        Ok(grant)
    }

    /// [`Store::list_unresolved`].
    pub fn list_unresolved(&self, now: UnixMillis) -> Result<Vec<ListedRecord>, QueryError> {
        self.at(now).list_unresolved()
    }

    /// [`Store::gc`].
    pub fn gc(&self, now: UnixMillis, max_batch: usize) -> Result<GcReport, QueryError> {
        self.at(now).gc(max_batch)
    }

    /// [`Store::get`].
    pub fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, QueryError> {
        self.store.get(scope, key)
    }
}
