//! The claim decision: what a request carrying a key gets.

use crate::prelude::*;

use core::time::Duration;

use super::Policy;
use crate::fingerprint::RequestFingerprint;
use crate::record::{
    EffectKind, FencingToken, Lease, Record, RecordState, RecordWindows, Step, StoredResponse,
    UnknownReason,
};
use crate::time::UnixMillis;

/// A request to execute the operation behind a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ClaimRequest {
    /// The fingerprint of this request (a plain
    /// [`Fingerprint`](crate::fingerprint::Fingerprint) converts with `.into()`
    /// as scheme 1). An existing record is compared under its own scheme
    /// ([`RequestFingerprint::matches`]); a fresh one stores this one's.
    pub fingerprint: RequestFingerprint,
    /// Who would execute it (worker or process id; recorded in the lease).
    pub owner: String,
}

/// What to answer, and what to write in the same atomic transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use = "the store must answer `outcome` and write `write` atomically"]
pub struct ClaimDecision {
    /// What the caller gets.
    pub outcome: ClaimOutcome,
    /// The record to write in the transaction that read `existing`; `None`: write
    /// nothing.
    pub write: Option<Record>,
}

/// The answer to a claim.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum ClaimOutcome {
    /// Execute the operation under a new lease: no record, a Released record, or
    /// a Local record whose lease expired (takeover).
    Execute {
        /// The fencing token to present with every write.
        token: FencingToken,
        /// The attempt number (1 for the first).
        attempt: u32,
        /// When the lease expires unless renewed.
        lease_expires_at: UnixMillis,
        /// Steps persisted by earlier attempts; `begin_step` reuses their
        /// provider keys.
        steps: Vec<Step>,
    },
    /// Completed, and the replay window is open: answer the stored response.
    Replay {
        /// The stored response, body included.
        response: StoredResponse,
    },
    /// Completed, but the body was pruned or the replay window is over.
    ResponseExpired {
        /// The stored status.
        status: u16,
        /// What was created, if known.
        resource_ref: Option<String>,
    },
    /// Another attempt holds a live lease.
    InFlight {
        /// Time left on that lease, rounded up to whole seconds, at least 1 s
        /// (for `Retry-After`).
        retry_after: Duration,
    },
    /// The key was used with a different fingerprint; nothing executed or written.
    Mismatch {
        /// The status to answer (422 or 409, per [`Policy::mismatch`]).
        status: u16,
    },
    /// The outcome is ambiguous; clients must not retry automatically.
    Uncertain {
        /// Since when.
        since: UnixMillis,
    },
}

/// Decides a claim on `existing` (the record read in this transaction, if any).
///
/// Order: a record past its record window counts as absent → fingerprint mismatch
/// (any state) → state. A new record takes its effect kind from `policy`; an
/// existing record keeps the effect kind it was created with.
pub fn claim(
    existing: Option<&Record>,
    req: &ClaimRequest,
    policy: &Policy,
    now: UnixMillis,
) -> ClaimDecision {
    claim_above(existing, req, policy, now, 0)
}

/// [`claim`], where a fresh record's first fencing token is above `token_floor`.
///
/// A store passes the highest token (or version) of any record it ever deleted
/// (its GC counter), so that a key whose record GC removed never sees a token
/// again that a worker of the deleted record may still hold: tokens never repeat
/// for a key, even across deletion (docs/architecture.md, "Retention"). [`claim`] is
/// `claim_above(.., 0)`. A floor of `u64::MAX` leaves no token: fail closed.
pub fn claim_above(
    existing: Option<&Record>,
    req: &ClaimRequest,
    policy: &Policy,
    now: UnixMillis,
    token_floor: u64,
) -> ClaimDecision {
    let Some(record) = existing.filter(|r| !r.is_expired(now)) else {
        // Fresh record. Reusing an expired record's slot continues its token
        // counter, so a worker of the old lease can never present a current token.
        let floor = match existing {
            None => token_floor,
            Some(old) => old.last_token.get().max(token_floor),
        };
        let token = floor.checked_add(1).and_then(FencingToken::new);
        return match token {
            Some(token) => fresh(req, policy, token, now),
            None => exhausted(existing, now),
        };
    };
    if !req
        .fingerprint
        .matches(record.fingerprint_scheme, &record.fingerprint)
    {
        return ClaimDecision {
            outcome: ClaimOutcome::Mismatch {
                status: policy.mismatch.status(),
            },
            write: None,
        };
    }
    match &record.state {
        RecordState::Completed { response, .. } => {
            let replayable =
                response.body.is_some() && record.replay_until.is_some_and(|t| now < t);
            let outcome = if replayable {
                ClaimOutcome::Replay {
                    response: response.clone(),
                }
            } else {
                ClaimOutcome::ResponseExpired {
                    status: response.status,
                    resource_ref: response.resource_ref.clone(),
                }
            };
            ClaimDecision {
                outcome,
                write: None,
            }
        }
        RecordState::Unknown { since, .. } => ClaimDecision {
            outcome: ClaimOutcome::Uncertain { since: *since },
            write: None,
        },
        RecordState::Running { lease } if now < lease.expires_at => ClaimDecision {
            outcome: ClaimOutcome::InFlight {
                retry_after: retry_after(now, lease.expires_at),
            },
            write: None,
        },
        RecordState::Running { lease } if record.effect == EffectKind::External => {
            // The worker may have written downstream: never execute again on our own.
            let since = lease.expires_at;
            let mut next = record.clone();
            next.state = RecordState::Unknown {
                reason: UnknownReason::LeaseExpired,
                since,
            };
            next.updated_at = now;
            ClaimDecision {
                outcome: ClaimOutcome::Uncertain { since },
                write: Some(next),
            }
        }
        // Released, or a Local lease that expired: nothing durable happened.
        RecordState::Running { .. } | RecordState::Released { .. } => {
            match record.last_token.next() {
                Some(token) => {
                    let next = leased(record, req.owner.clone(), token, policy, now);
                    ClaimDecision {
                        outcome: execute(&next),
                        write: Some(next),
                    }
                }
                None => exhausted(Some(record), now),
            }
        }
    }
}

fn fresh(
    req: &ClaimRequest,
    policy: &Policy,
    token: FencingToken,
    now: UnixMillis,
) -> ClaimDecision {
    let record = Record {
        fingerprint: req.fingerprint.value(),
        effect: policy.effect,
        state: RecordState::Running {
            lease: Lease {
                owner: req.owner.clone(),
                token,
                expires_at: now.saturating_add(policy.lease),
            },
        },
        attempt: 1,
        last_token: token,
        steps: Vec::new(),
        created_at: now,
        updated_at: now,
        replay_until: None,
        keep_until: None,
        windows: Some(RecordWindows::of(policy)),
        fingerprint_scheme: req.fingerprint.scheme(),
    };
    ClaimDecision {
        outcome: execute(&record),
        write: Some(record),
    }
}

/// `record` under a new lease with `token`: attempt + 1, steps kept, retention
/// deadlines cleared (a running record is never collected).
pub(super) fn leased(
    record: &Record,
    owner: String,
    token: FencingToken,
    policy: &Policy,
    now: UnixMillis,
) -> Record {
    let mut next = record.clone();
    next.state = RecordState::Running {
        lease: Lease {
            owner,
            token,
            expires_at: now.saturating_add(policy.lease),
        },
    };
    next.attempt = record.attempt.saturating_add(1);
    next.last_token = token;
    next.updated_at = now;
    next.replay_until = None;
    next.keep_until = None;
    // A record keeps the windows of its first claim; a format-1 record gains
    // the windows of the policy that leases it again.
    next.windows = Some(record.windows_or(policy));
    next
}

fn execute(record: &Record) -> ClaimOutcome {
    ClaimOutcome::Execute {
        token: record.last_token,
        attempt: record.attempt,
        lease_expires_at: record.lease_expires_at().unwrap_or(UnixMillis::ZERO),
        steps: record.steps.clone(),
    }
}

/// No token is left to lease with: fail closed and put the record in front of an
/// operator instead of reusing a token.
fn exhausted(record: Option<&Record>, now: UnixMillis) -> ClaimDecision {
    let write = record.map(|r| {
        let mut next = r.clone();
        next.state = RecordState::Unknown {
            reason: UnknownReason::TokensExhausted,
            since: now,
        };
        next.updated_at = now;
        next.replay_until = None;
        next.keep_until = None;
        next
    });
    ClaimDecision {
        outcome: ClaimOutcome::Uncertain { since: now },
        write,
    }
}

/// Whole seconds until `expires_at`, rounded up, at least one.
fn retry_after(now: UnixMillis, expires_at: UnixMillis) -> Duration {
    let millis = expires_at.as_millis().saturating_sub(now.as_millis());
    Duration::from_secs(millis.div_ceil(1000).max(1))
}
