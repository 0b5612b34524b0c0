//! [`IdempotencyBackend`] for the redb [`Store`].

use idemkit_core::machine::{
    ClaimOutcome, Policy, RecoverGrant, Resolution, StepStart, TransitionError,
};
use idemkit_core::record::{FencingToken, Record, StoredResponse, UnknownReason};
use idemkit_core::{IdempotencyKey, RequestFingerprint, Scope, UnixMillis};

use super::error::{Error, TxError};
use super::{GcReport, ListedRecord, Store};
use crate::backend::{BackendError, IdempotencyBackend};

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
        Ok(self
            .claim_at(
                &scope.record_id(key),
                fingerprint.into(),
                owner,
                policy,
                now,
            )?
            .0)
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
        Ok(self.complete_at(&scope.record_id(key), token, response, policy, now)?)
    }

    fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Error> {
        Ok(self.release_at(&scope.record_id(key), token, policy, now)?)
    }

    fn mark_unknown(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        reason: UnknownReason,
        now: UnixMillis,
    ) -> Result<(), Error> {
        Ok(self.mark_unknown_at(&scope.record_id(key), token, reason, now)?)
    }

    fn renew(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<UnixMillis, Error> {
        Ok(self.renew_at(&scope.record_id(key), token, policy, now)?)
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
        Ok(self.begin_step_at(
            &scope.record_id(key),
            token,
            name,
            proposed_provider_key,
            now,
        )?)
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
        Ok(self.complete_step_at(&scope.record_id(key), token, name, provider_ref, now)?)
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
        let (token, record) = self.recover_at(&scope.record_id(key), owner, policy, now)?;
        Ok(RecoverGrant {
            token,
            steps: record.steps,
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
