//! Claims and the execution guard.

use std::time::Duration;

use idemkit_core::machine::{
    self, Answer, ClaimOutcome, ClaimRequest, MAX_ATTEMPTS, Op, Policy, StepStart, TransitionError,
    Write,
};
use idemkit_core::record::{EffectKind, FencingToken, Record, Step, StoredResponse, UnknownReason};
use idemkit_core::{IdempotencyKey, LogRef, RecordId, RequestFingerprint, Scope, UnixMillis};

use redb::ReadableTable;

use super::Store;
use super::error::{ClaimError, StorageError, TxError, WorkerError};
use super::records::{Tables, decode, token_floor, token_floor_in};
use super::tables::{META, RECORDS};

/// A committed state of one record, read outside the writer.
struct Snapshot {
    bytes: Option<Vec<u8>>,
    record: Option<Record>,
    token_floor: u64,
}

/// What a decision taken on a [`Snapshot`] asks of the store.
#[allow(
    clippy::large_enum_variant,
    reason = "lives for one loop iteration; its record is written as it is"
)]
enum Decided<T> {
    /// Answer now: nothing to write (a replay, a refusal, no change).
    Answer(T),
    /// Write `next` if the record (and, with `check_floor`, the token floor) is
    /// still the one decided on, then answer.
    Write {
        next: Record,
        check_floor: bool,
        answer: T,
    },
}

/// The answer to [`Store::claim`]. Only [`Claim::Execute`] lets the caller run
/// the operation; every other answer is final for this request.
#[must_use = "a claim must be acted on: Execute runs the operation, the rest are answers"]
#[derive(Debug)]
pub enum Claim {
    /// Run the operation, then report its outcome through the guard.
    Execute(ExecutionGuard),
    /// Completed within the replay window: answer the stored response.
    Replay {
        /// The stored response, body included.
        response: StoredResponse,
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// Completed, but the response is no longer kept: answer that it completed,
    /// with the resource reference. Never a new execution.
    ResponseExpired {
        /// The stored status.
        status: u16,
        /// What was created, if known.
        resource_ref: Option<String>,
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// Another attempt holds a live lease.
    InFlight {
        /// When to try again (for `Retry-After`).
        retry_after: Duration,
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// The key was used with another payload; nothing executed or overwritten.
    Mismatch {
        /// The status to answer (422 or 409, per policy).
        status: u16,
        /// The record's log reference.
        log_ref: LogRef,
    },
    /// The outcome is ambiguous: only `resolve` (or a reconciler's `recover`)
    /// moves it on.
    Uncertain {
        /// Since when.
        since: UnixMillis,
        /// The record's log reference, for the operator.
        log_ref: LogRef,
    },
}

impl Store {
    /// Claims `(scope, key)` for a request with `fingerprint`, in one durable
    /// transaction: read the record, let the core decide, write its decision.
    ///
    /// `fingerprint` is a [`RequestFingerprint`] (what the middleware computes:
    /// the request line counts, and records written before it did are compared
    /// under their own scheme) or a plain `Fingerprint` (scheme 1: operation and
    /// body only). `owner` names the worker for operators. Time comes from the
    /// store's clock.
    pub fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: impl Into<RequestFingerprint>,
        owner: &str,
        policy: &Policy,
    ) -> Result<Claim, ClaimError> {
        let fingerprint = fingerprint.into();
        let id = scope.record_id(key);
        let now = self.now();
        let (outcome, effect) = self.claim_at(&id, fingerprint, owner, policy, now)?;
        let log_ref = id.log_ref();
        Ok(match outcome {
            ClaimOutcome::Execute {
                token,
                attempt,
                lease_expires_at,
                steps,
            } => Claim::Execute(ExecutionGuard {
                store: self.clone(),
                id,
                token,
                attempt,
                lease_expires_at,
                steps,
                effect: effect.unwrap_or(policy.effect),
                policy: *policy,
                finished: false,
            }),
            ClaimOutcome::Replay { response } => Claim::Replay { response, log_ref },
            ClaimOutcome::ResponseExpired {
                status,
                resource_ref,
            } => Claim::ResponseExpired {
                status,
                resource_ref,
                log_ref,
            },
            ClaimOutcome::InFlight { retry_after } => Claim::InFlight {
                retry_after,
                log_ref,
            },
            ClaimOutcome::Mismatch { status } => Claim::Mismatch { status, log_ref },
            ClaimOutcome::Uncertain { since } => Claim::Uncertain { since, log_ref },
        })
    }

    /// The claim transaction, with an explicit `now`. Also returns the effect
    /// kind of the record written (an existing record keeps its own).
    pub(crate) fn claim_at(
        &self,
        id: &RecordId,
        fingerprint: RequestFingerprint,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(ClaimOutcome, Option<EffectKind>), ClaimError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            let (scope, key) = pg_address(id)?;
            return pg
                .claim_at(&scope, &key, fingerprint, owner, policy, now)
                .map_err(|e| ClaimError::Storage(super::StorageError::Postgres(e)));
        }
        self.injected_failure()?;
        let request = ClaimRequest {
            fingerprint,
            owner: owner.to_owned(),
        };
        self.read_decide_write(id, |snapshot| {
            // The floor counts only for a fresh record (an expired one
            // continues its own counter, which the floor may still exceed);
            // the write then checks it is unchanged.
            let op = Op::Claim {
                request: request.clone(),
                token_floor: snapshot.token_floor,
            };
            let decision =
                machine::apply(snapshot.record.as_ref(), &op, policy, now).map_err(|e| {
                    StorageError::Corrupt {
                        detail: format!("a claim was refused by the state machine: {e}"),
                    }
                })?;
            let Answer::Claim(outcome) = decision.answer else {
                return Err(StorageError::Corrupt {
                    detail: "a claim was answered as another operation".into(),
                }
                .into());
            };
            match decision.write {
                // A replay, a request in flight, a mismatch, an uncertain or an
                // expired outcome: answered from the snapshot, outside the
                // write queue (nothing to make durable).
                Write::Keep => Ok(Decided::Answer((outcome, None))),
                Write::Put(next) => Ok(Decided::Write {
                    check_floor: snapshot.record.as_ref().is_none_or(|r| r.is_expired(now)),
                    answer: (outcome, Some(next.effect)),
                    next,
                }),
                Write::Delete => Err(StorageError::Corrupt {
                    detail: "a claim decided to delete its record".into(),
                }
                .into()),
            }
        })
    }

    /// The one loop of every claim and transition: read a snapshot, let
    /// `decide` take its decision on it, and commit a write as a conditional
    /// write; a lost condition reads and decides again, at most
    /// [`MAX_ATTEMPTS`] times, then [`StorageError::Contention`].
    fn read_decide_write<T, E: From<StorageError>>(
        &self,
        id: &RecordId,
        mut decide: impl FnMut(&Snapshot) -> Result<Decided<T>, E>,
    ) -> Result<T, E> {
        for _ in 0..MAX_ATTEMPTS {
            let snapshot = self.snapshot(id)?;
            match decide(&snapshot)? {
                Decided::Answer(answer) => return Ok(answer),
                Decided::Write {
                    next,
                    check_floor,
                    answer,
                } => {
                    if self.put_if_unchanged(id, snapshot, next, check_floor)? {
                        return Ok(answer);
                    }
                }
            }
        }
        Err(StorageError::Contention {
            log_ref: id.log_ref(),
            attempts: MAX_ATTEMPTS,
        }
        .into())
    }

    /// What a decision is taken on: the committed record of `id` (its bytes,
    /// to check at the write that nobody changed it), and the token floor.
    ///
    /// Deciding on a snapshot is as atomic as deciding under the writer: the
    /// snapshot is a committed state taken after the request arrived, so every
    /// answer that writes nothing is the one the request would have got at
    /// that instant, and a decision that writes is committed only if the record
    /// (and, for a fresh record, the floor) is still what it was decided on.
    fn snapshot(&self, id: &RecordId) -> Result<Snapshot, StorageError> {
        self.inner.handle.read(|txn| {
            let records = txn.open_table(RECORDS)?;
            let bytes = records.get(id.as_bytes())?.map(|b| b.value().to_vec());
            let record = bytes
                .as_deref()
                .map(|b| decode(id.as_bytes(), b))
                .transpose()?;
            let token_floor = token_floor_in(&txn.open_table(META)?)?;
            Ok(Snapshot {
                bytes,
                record,
                token_floor,
            })
        })
    }

    /// The conditional write of a decision taken on `read`: `next` replaces the
    /// record only if its stored bytes (and, with `check_floor`, the token
    /// floor) are still the ones read. `false`: another writer came first; the
    /// caller reads again and decides again. A refused condition fails alone:
    /// it writes nothing and never aborts the group it was committed with.
    fn put_if_unchanged(
        &self,
        id: &RecordId,
        read: Snapshot,
        next: Record,
        check_floor: bool,
    ) -> Result<bool, StorageError> {
        let id = id.clone();
        self.inner.handle.write_if_changed(move |txn| {
            if check_floor && token_floor(txn)? != read.token_floor {
                return Ok((false, false));
            }
            let mut tables = Tables::open(txn)?;
            let unchanged = {
                let current = tables.records.get(id.as_bytes())?;
                current.as_ref().map(|b| b.value()) == read.bytes.as_deref()
            };
            if !unchanged {
                return Ok((false, false));
            }
            tables.put(id.as_bytes(), read.record.as_ref(), Some(&next))?;
            Ok::<_, StorageError>((true, true))
        })
    }

    /// One read → decide → write on an existing record. `decide` returns the
    /// record to write (or `None` to leave it) and the caller's answer, deciding
    /// at the `now` it is given: `now` (this store's clock) on redb, the
    /// database's clock on PostgreSQL (see `PgClock`). Either store calls
    /// `decide` again on the newer record after losing a race (redb: the record
    /// changed between its snapshot and the conditional write); on redb it runs
    /// on the caller's thread, outside the writer.
    pub(crate) fn transition<T: Send + 'static>(
        &self,
        id: &RecordId,
        now: UnixMillis,
        decide: impl Fn(&Record, UnixMillis) -> Result<(Option<Record>, T), TransitionError>
        + Send
        + 'static,
    ) -> Result<T, TxError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            let (scope, key) = pg_address(id)?;
            return Ok(pg.transition(&scope, &key, Some(now), decide)?);
        }
        self.injected_failure()?;
        let log_ref = id.log_ref();
        self.read_decide_write(id, |snapshot| {
            let existing = snapshot
                .record
                .as_ref()
                .ok_or(TxError::NotFound { log_ref })?;
            // A refusal (a stale token, a wrong state) and a decision that
            // changes nothing are answered from the snapshot: they never enter
            // the write queue, so they can never abort a group of other writes.
            let (write, answer) =
                decide(existing, now).map_err(|error| TxError::Rejected { log_ref, error })?;
            Ok(match write {
                Some(next) if next != *existing => Decided::Write {
                    next,
                    check_floor: false,
                    answer,
                },
                _ => Decided::Answer(answer),
            })
        })
    }

    pub(crate) fn complete_at(
        &self,
        id: &RecordId,
        token: FencingToken,
        response: StoredResponse,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), TxError> {
        let policy = *policy;
        self.transition(id, now, move |r, now| {
            Ok((
                Some(machine::complete(r, token, response.clone(), &policy, now)?),
                (),
            ))
        })
    }

    pub(crate) fn release_at(
        &self,
        id: &RecordId,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(), TxError> {
        let policy = *policy;
        self.transition(id, now, move |r, now| {
            Ok((Some(machine::release(r, token, &policy, now)?), ()))
        })
    }

    pub(crate) fn mark_unknown_at(
        &self,
        id: &RecordId,
        token: FencingToken,
        reason: UnknownReason,
        now: UnixMillis,
    ) -> Result<(), TxError> {
        self.transition(id, now, move |r, now| {
            Ok((
                Some(machine::mark_unknown(r, token, reason.clone(), now)?),
                (),
            ))
        })
    }

    pub(crate) fn renew_at(
        &self,
        id: &RecordId,
        token: FencingToken,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<UnixMillis, TxError> {
        let policy = *policy;
        self.transition(id, now, move |r, now| {
            let next = machine::renew(r, token, &policy, now)?;
            let expires = next.lease_expires_at().unwrap_or(now);
            Ok((Some(next), expires))
        })
    }

    pub(crate) fn begin_step_at(
        &self,
        id: &RecordId,
        token: FencingToken,
        name: &str,
        proposed_provider_key: &str,
        now: UnixMillis,
    ) -> Result<StepStart, TxError> {
        let (name, proposed_provider_key) = (name.to_owned(), proposed_provider_key.to_owned());
        self.transition(id, now, move |r, now| {
            let (next, start) = machine::begin_step(r, token, &name, &proposed_provider_key, now)?;
            Ok((Some(next), start))
        })
    }

    pub(crate) fn complete_step_at(
        &self,
        id: &RecordId,
        token: FencingToken,
        name: &str,
        provider_ref: Option<String>,
        now: UnixMillis,
    ) -> Result<(), TxError> {
        let name = name.to_owned();
        self.transition(id, now, move |r, now| {
            Ok((
                Some(machine::complete_step(
                    r,
                    token,
                    &name,
                    provider_ref.clone(),
                    now,
                )?),
                (),
            ))
        })
    }
}

/// The scope and key of `id`, for a PostgreSQL store (its rows are addressed by
/// them). A `RecordId` always decodes; a failure is reported, never a panic.
#[cfg(feature = "postgres")]
pub(crate) fn pg_address(id: &RecordId) -> Result<(Scope, IdempotencyKey), super::StorageError> {
    RecordId::decode(id.as_bytes()).map_err(|e| super::StorageError::CorruptId {
        detail: e.to_string(),
    })
}

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
}

impl ExecutionGuard {
    /// Builds a guard for a lease granted by `recover`.
    pub(crate) fn recovered(
        store: Store,
        id: RecordId,
        token: FencingToken,
        record: &Record,
        policy: &Policy,
    ) -> Self {
        ExecutionGuard {
            store,
            token,
            attempt: record.attempt,
            lease_expires_at: record.lease_expires_at().unwrap_or(UnixMillis::ZERO),
            steps: record.steps.clone(),
            effect: record.effect,
            policy: *policy,
            finished: false,
            id,
        }
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

    /// Stores the outcome; retries replay it from now on.
    pub fn complete(mut self, response: StoredResponse) -> Result<(), WorkerError> {
        let now = self.store.now();
        self.store
            .complete_at(&self.id, self.token, response, &self.policy, now)?;
        self.finished = true;
        Ok(())
    }

    /// Like [`complete`](Self::complete), but a failed write leaves the guard in
    /// the caller's hands (nothing settled by its drop), so the caller can try
    /// again or record the outcome another way. After `Ok` the guard is finished
    /// and dropping it does nothing.
    pub fn try_complete(&mut self, response: &StoredResponse) -> Result<(), WorkerError> {
        let now = self.store.now();
        self.store
            .complete_at(&self.id, self.token, response.clone(), &self.policy, now)?;
        self.finished = true;
        Ok(())
    }

    /// Like [`mark_unknown`](Self::mark_unknown), but a failed write leaves the
    /// guard in the caller's hands (see [`try_complete`](Self::try_complete)).
    pub fn try_mark_unknown(&mut self, reason: &str) -> Result<(), WorkerError> {
        let now = self.store.now();
        self.store.mark_unknown_at(
            &self.id,
            self.token,
            UnknownReason::MarkedByWorker(reason.to_owned()),
            now,
        )?;
        self.finished = true;
        Ok(())
    }

    /// The attempt had no effect: a retry with the same key executes again.
    pub fn release(mut self) -> Result<(), WorkerError> {
        let now = self.store.now();
        self.store
            .release_at(&self.id, self.token, &self.policy, now)?;
        self.finished = true;
        Ok(())
    }

    /// The outcome is ambiguous: retries get `Uncertain` until an operator resolves it.
    pub fn mark_unknown(mut self, reason: impl Into<String>) -> Result<(), WorkerError> {
        let now = self.store.now();
        self.store.mark_unknown_at(
            &self.id,
            self.token,
            UnknownReason::MarkedByWorker(reason.into()),
            now,
        )?;
        self.finished = true;
        Ok(())
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
        let now = self.store.now();
        let expires = self
            .store
            .renew_at(&self.id, self.token, &self.policy, now)?;
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
        let now = self.store.now();
        let start =
            self.store
                .begin_step_at(&self.id, self.token, name, proposed_provider_key, now)?;
        Ok(start)
    }

    /// Records that step `name` is done, with the provider's reference.
    pub fn complete_step(
        &mut self,
        name: &str,
        provider_ref: Option<String>,
    ) -> Result<(), WorkerError> {
        let now = self.store.now();
        self.store
            .complete_step_at(&self.id, self.token, name, provider_ref, now)?;
        Ok(())
    }
}

impl Drop for ExecutionGuard {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        let now = self.store.now();
        // Best effort, errors ignored (see the type's doc): a failure here leaves
        // the record Running, and its lease expiry has the same effect.
        let _ = match self.effect {
            EffectKind::Local => self
                .store
                .release_at(&self.id, self.token, &self.policy, now),
            EffectKind::External => {
                self.store
                    .mark_unknown_at(&self.id, self.token, UnknownReason::GuardDropped, now)
            }
        };
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
        let now = self.store.now();
        Ok(self
            .store
            .renew_at(&self.id, self.token, &self.policy, now)?)
    }

    /// Like [`renew`](Self::renew), but waits at most `lock_wait` for a shared
    /// store's file ([`Store::open_shared`]) while another process holds it,
    /// whatever [`LockRetry`](super::LockRetry) the store itself uses, and then
    /// fails with [`OpenError::Busy`](super::OpenError::Busy) (inside
    /// [`WorkerError::Storage`]). A worker that must renew before its lease ends
    /// bounds each attempt this way (a third of the lease, say) and tries again,
    /// instead of waiting out a long retry budget meant for recording the outcome.
    /// No effect on a store that keeps its database open.
    pub fn renew_within(&self, lock_wait: std::time::Duration) -> Result<UnixMillis, WorkerError> {
        let store = self.store.with_lock_budget(lock_wait);
        let now = store.now();
        Ok(store.renew_at(&self.id, self.token, &self.policy, now)?)
    }
}
