//! Claims: the first operation on a key.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use idemkit_core::machine::{self, Answer, ClaimOutcome, ClaimRequest, Op, Policy, Write};
use idemkit_core::record::StoredResponse;
use idemkit_core::{IdempotencyKey, LogRef, RecordId, RequestFingerprint, Scope, UnixMillis};

use super::error::{ClaimError, StorageError, WorkerError};
use super::guard::ExecutionGuard;
use super::{Applied, Now, Store};
use crate::adapters::{FailureKind, Stored};

/// What the last claim's read carried: the database's time, when it arrived
/// by this node's monotonic clock, and the token floor.
///
/// The floor matters once GC deleted a record: it is then above the first
/// token, and a claim that wrote first as if it were 0 would be refused every
/// time (then read, and insert again). The floor only rises, so one that GC
/// raised since it was read makes the adapter refuse the insert, and the read
/// that follows brings the new one.
#[derive(Debug, Default)]
pub(crate) struct ObservedTime(Mutex<Option<Observed>>);

#[derive(Clone, Copy, Debug)]
struct Observed {
    at: UnixMillis,
    arrived: Instant,
    token_floor: u64,
}

impl ObservedTime {
    fn set(&self, at: UnixMillis, token_floor: u64) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(Observed {
            at,
            arrived: Instant::now(),
            token_floor,
        });
    }

    fn get(&self) -> Option<Observed> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn token_floor(&self) -> u64 {
        self.get().map_or(0, |o| o.token_floor)
    }
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
    /// Claims `(scope, key)` for a request with `fingerprint`: read the record,
    /// let the core decide, write its decision (durable before this returns).
    ///
    /// `fingerprint` is a [`RequestFingerprint`] (what the middleware computes:
    /// the request line counts, and records written before it did are compared
    /// under their own scheme) or a plain `Fingerprint` (scheme 1: operation and
    /// body only). `owner` names the worker for operators. Time comes from the
    /// store's clock (or the database's, for an adapter that keeps it).
    pub fn claim(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: impl Into<RequestFingerprint>,
        owner: &str,
        policy: &Policy,
    ) -> Result<Claim, ClaimError> {
        let id = scope.record_id(key);
        // Answers that write nothing (a replay, a request in flight, a
        // mismatch, an uncertain or expired outcome) are answered from the
        // read and never reach the adapter's write path.
        let op = Op::Claim {
            request: ClaimRequest {
                fingerprint: fingerprint.into(),
                owner: owner.to_owned(),
            },
            // The floor the last read carried, for a claim that writes first
            // (`insert_first`); each read sets it again (see `run_on`).
            token_floor: self.observed.token_floor(),
        };
        let written_first = self.insert_first(&id, &op, policy)?;
        let Applied {
            answer,
            stored,
            now,
            ..
        } = match written_first {
            Some(applied) => applied,
            None => {
                // The clock is read only if the record's read carries no time.
                let applied =
                    self.run(&id, op, policy, Now::Clock(self), None)
                        .map_err(|e| match e {
                            WorkerError::Storage(e) => ClaimError::Storage(e),
                            // A claim needs no record and refuses nothing: the core
                            // answering otherwise is a bug, reported rather than hidden.
                            other => ClaimError::Storage(StorageError::Corrupt {
                                detail: format!(
                                    "a claim was refused by the state machine: {other:?}"
                                ),
                            }),
                        })?;
                if self.estimates_time() {
                    // A claim always reads (it holds no record), so the floor
                    // is there; were it not, 0 costs one refused insert.
                    self.observed
                        .set(applied.now, applied.token_floor.unwrap_or(0));
                }
                applied
            }
        };
        let log_ref = id.log_ref();
        let Answer::Claim(outcome) = answer else {
            return Err(super::guard::unexpected("a claim", &answer).into());
        };
        Ok(match outcome {
            ClaimOutcome::Execute { token, .. } => {
                let stored = stored.ok_or_else(|| StorageError::Corrupt {
                    detail: "a claim to execute wrote no record".into(),
                })?;
                Claim::Execute(ExecutionGuard::new(
                    self.clone(),
                    id,
                    token,
                    stored,
                    policy,
                    now,
                ))
            }
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

    /// Whether the store's clock estimates an instant shortly after one it
    /// gave, without reading (a database's clock does; the system's is read).
    fn estimates_time(&self) -> bool {
        self.estimate_after(UnixMillis::from_millis(0), Duration::ZERO)
            .is_some()
    }

    /// A fresh key's claim in one write, where the store's clock can tell the
    /// time without a round trip (a database's clock, shortly after a read
    /// carried its time: [`Clock::estimate_after`](crate::clock::Clock::estimate_after)):
    /// the core decides as for a key with no record, above the token floor
    /// the last read carried, and the adapter inserts that record only if the
    /// key is free and the floor is still below its token. `None`: the claim reads and decides as usual (the
    /// key is taken, GC raised the floor, no estimate, or the insert could
    /// not reach the store, which the read then finds out again). On
    /// PostgreSQL this makes a new key's claim one statement instead of two.
    fn insert_first(
        &self,
        id: &RecordId,
        op: &Op,
        policy: &Policy,
    ) -> Result<Option<Applied>, ClaimError> {
        if !self.estimates_time() {
            return Ok(None);
        }
        let Some(Observed { at, arrived, .. }) = self.observed.get() else {
            return Ok(None);
        };
        let Some(now) = self.estimate_after(at, arrived.elapsed()) else {
            return Ok(None);
        };
        let Ok(decision) = machine::apply(None, op, policy, now) else {
            return Ok(None);
        };
        let Write::Put(record) = decision.write else {
            return Ok(None);
        };
        match self.adapter.insert(id, &record) {
            Ok(Some(version)) => Ok(Some(Applied {
                answer: decision.answer,
                stored: Some(Stored { record, version }),
                now,
                token_floor: None,
            })),
            Ok(None) => Ok(None),
            // A pooled connection a restart broke: the read retries on another.
            Err(e) if e.kind() == FailureKind::Unavailable => Ok(None),
            Err(e) => Err(ClaimError::Storage(e.into())),
        }
    }
}
