//! [`IdempotencyBackend`] for the redb [`Store`].

use idemkit_core::machine::{
    Answer, ClaimOutcome, Op, Policy, RecoverGrant, Resolution, StepStart, TransitionError,
};
use idemkit_core::record::{FencingToken, Record, StoredResponse, UnknownReason};
use idemkit_core::{IdempotencyKey, RequestFingerprint, Scope, UnixMillis};

use super::backend::{BackendError, IdempotencyBackend};
use super::error::{Error, TxError};
use super::guard::unexpected;
use super::{Applied, GcReport, ListedRecord, Store};

impl Store {
    /// One transition of `(scope, key)` at `now`, read first (no guard holds it).
    fn transition_at(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        op: Op,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<Applied, TxError> {
        self.run(&scope.record_id(key), op, policy, now, None)
    }
}

impl BackendError for Error {
    fn transition_error(&self) -> Option<&TransitionError> {
        Error::transition_error(self)
    }

    fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
}

impl From<TxError> for Error {
    fn from(e: TxError) -> Self {
        match e {
            TxError::NotFound { log_ref } => Error::NotFound { log_ref },
            TxError::Rejected { log_ref, error } => Error::Rejected { log_ref, error },
            TxError::Storage(e) => e.into(),
        }
    }
}

impl IdempotencyBackend for Store {
    type Error = Error;

    fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: impl Into<RequestFingerprint>,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<ClaimOutcome, Error> {
        let applied = self.claim_at(
            &scope.record_id(key),
            fingerprint.into(),
            owner,
            policy,
            now,
        )?;
        match applied.answer {
            Answer::Claim(outcome) => Ok(outcome),
            other => Err(unexpected("a claim", &other).into()),
        }
    }

    fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        response: StoredResponse,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Error> {
        self.transition_at(scope, key, Op::Complete { token, response }, policy, now)?;
        Ok(())
    }

    fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Error> {
        self.transition_at(scope, key, Op::Release { token }, policy, now)?;
        Ok(())
    }

    fn mark_unknown(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        reason: UnknownReason,
        now: UnixMillis,
    ) -> Result<(), Error> {
        let op = Op::MarkUnknown { token, reason };
        self.transition_at(scope, key, op, &Policy::default(), now)?;
        Ok(())
    }

    fn renew(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<UnixMillis, Error> {
        let applied = self.transition_at(scope, key, Op::Renew { token }, policy, now)?;
        Ok(applied
            .stored
            .as_ref()
            .and_then(|s| s.record.lease_expires_at())
            .unwrap_or(applied.now))
    }

    fn begin_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        proposed_provider_key: &str,
        now: UnixMillis,
    ) -> Result<StepStart, Error> {
        let op = Op::BeginStep {
            token,
            name: name.to_owned(),
            proposed_provider_key: proposed_provider_key.to_owned(),
        };
        match self
            .transition_at(scope, key, op, &Policy::default(), now)?
            .answer
        {
            Answer::Step(start) => Ok(start),
            other => Err(unexpected("begin_step", &other).into()),
        }
    }

    fn complete_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        provider_ref: Option<String>,
        now: UnixMillis,
    ) -> Result<(), Error> {
        let op = Op::CompleteStep {
            token,
            name: name.to_owned(),
            provider_ref,
        };
        self.transition_at(scope, key, op, &Policy::default(), now)?;
        Ok(())
    }

    fn resolve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Error> {
        self.resolve_at(&scope.record_id(key), resolution, policy, now)?;
        Ok(())
    }

    fn recover(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<RecoverGrant, Error> {
        let (token, stored) = self.recover_at(&scope.record_id(key), owner, policy, now)?;
        Ok(RecoverGrant {
            token,
            steps: stored.record.steps,
        })
    }

    fn list_unresolved(&self, now: UnixMillis) -> Result<Vec<ListedRecord>, Error> {
        Ok(self.list_unresolved_at(now)?)
    }

    fn gc(&self, now: UnixMillis, max_batch: usize) -> Result<GcReport, Error> {
        Ok(self.gc_at(now, max_batch)?)
    }

    fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Error> {
        Ok(Store::get(self, scope, key)?)
    }
}
