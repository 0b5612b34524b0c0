//! The operations every idempotency store offers, as a trait, so one
//! conformance suite (`idemkit::conformance`, feature `testing`) runs against each
//! adapter through the engine. The JavaScript platform stores of the npm package (wasm/) have a
//! conformance suite of their own, in JavaScript (`wasm/test/conformance.js`).
//!
//! The trait is token-based and takes `now` explicitly: a backend applies the
//! core's decisions, and the suite drives time. Convenience layers (the
//! [`ExecutionGuard`](crate::store::ExecutionGuard), a clock) sit on top.

use idemkit_core::machine::{
    ClaimOutcome, Policy, RecoverGrant, Resolution, StepStart, TransitionError,
};
use idemkit_core::record::{FencingToken, Record, StoredResponse, UnknownReason};
use idemkit_core::{IdempotencyKey, RequestFingerprint, Scope, UnixMillis};

use super::{GcReport, ListedRecord};

/// How the conformance suite recognises a backend's errors.
pub trait BackendError: std::error::Error {
    /// The state machine's refusal (stale token, wrong state, ...), if that is
    /// what this error is.
    fn transition_error(&self) -> Option<&TransitionError>;
    /// Whether the error says there is no record under the key.
    fn is_not_found(&self) -> bool;
}

/// An idempotency store: each method is one atomic read → decide → write.
pub trait IdempotencyBackend {
    /// The backend's error.
    type Error: BackendError;

    /// Claims `(scope, key)`; see `idemkit_core::machine::claim`. A plain
    /// `Fingerprint` converts with `.into()` (scheme 1).
    fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: impl Into<RequestFingerprint>,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<ClaimOutcome, Self::Error>;

    /// Stores the outcome of the lease `token`.
    fn complete(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        response: StoredResponse,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Self::Error>;

    /// Releases the lease `token`: the attempt had no effect.
    fn release(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Self::Error>;

    /// Marks the outcome of lease `token` as unknown.
    fn mark_unknown(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        reason: UnknownReason,
        now: UnixMillis,
    ) -> Result<(), Self::Error>;

    /// Extends lease `token`; returns the new expiry.
    fn renew(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<UnixMillis, Self::Error>;

    /// Persists step `name` (and its provider key) before dispatch.
    #[allow(
        clippy::too_many_arguments,
        reason = "mirrors the core transition plus the record's address"
    )]
    fn begin_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        proposed_provider_key: &str,
        now: UnixMillis,
    ) -> Result<StepStart, Self::Error>;

    /// Marks step `name` done.
    #[allow(
        clippy::too_many_arguments,
        reason = "mirrors the core transition plus the record's address"
    )]
    fn complete_step(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        token: FencingToken,
        name: &str,
        provider_ref: Option<String>,
        now: UnixMillis,
    ) -> Result<(), Self::Error>;

    /// Settles an unresolved record.
    fn resolve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), Self::Error>;

    /// Grants a reconciler a new lease on an unresolved record.
    fn recover(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<RecoverGrant, Self::Error>;

    /// Unknown records and Running records past their lease.
    fn list_unresolved(&self, now: UnixMillis) -> Result<Vec<ListedRecord>, Self::Error>;

    /// One bounded GC batch.
    fn gc(&self, now: UnixMillis, max_batch: usize) -> Result<GcReport, Self::Error>;

    /// The record of `(scope, key)`.
    fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, Self::Error>;
}
