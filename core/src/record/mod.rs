//! The stored record of one idempotent operation, and its versioned codec.
//!
//! A [`Record`] is what a store keeps under a [`RecordId`](crate::RecordId): the
//! fingerprint the key was first used with, the operation's [`EffectKind`], its
//! [`RecordState`], the fencing-token counter, the named [`Step`]s and the
//! retention clocks. The record is plain data; every change to it is decided by
//! [`crate::machine`].
//!
//! ```text
//!             claim                 complete(response)
//!   (none) ─────────► Running ───────────────────────► Completed ──► (pruned body) ──► deleted by GC
//!                     │  ▲  │ release (no effect happened)
//!                     │  │  └──────────────► Released ──claim──► Running (attempt+1)
//!                     │  └ renew (same lease token)
//!                     │ mark_unknown / lease expired with external effects
//!                     ▼
//!                   Unknown ──resolve(applied: response | not applied)──► Completed | Released
//! ```
//!
//! ## Encoding
//!
//! [`Record::encode`] writes one format byte ([`FORMAT_VERSION`], now 2) followed by
//! the postcard encoding of the record's fields in declaration order. The field
//! order of every type in this module is therefore part of the format: reordering
//! or inserting a field is a new format version (golden-bytes tests pin each).
//! Format 1 (the same fields without [`Record::windows`] and
//! [`Record::fingerprint_scheme`]) is still read, so stores written by earlier
//! releases keep working; it decodes with `windows: None` and scheme 1.
//! [`Record::decode`] never panics: empty, truncated, trailing, corrupt or
//! unknown-version bytes are a [`DecodeError`], and so is a well-formed encoding of
//! a record that breaks an invariant the machine relies on (a fencing token of 0, a
//! lease whose token is not the record's last token, two steps with one name, …).

use crate::prelude::*;

mod codec;

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::fingerprint::Fingerprint;
use crate::time::UnixMillis;

pub use codec::{DecodeError, FORMAT_VERSION, OLDEST_READABLE_FORMAT};

/// Whether an operation's effect commits with its outcome or happens elsewhere.
///
/// This decides what an expired lease (or a 5xx answer under
/// [`StorePolicy::Definitive`](crate::machine::StorePolicy::Definitive)) means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EffectKind {
    /// The mutation is the service's own and commits in the same transaction
    /// as the outcome: an attempt whose lease expired did nothing durable, so
    /// another worker may take over. The store makes that true only when the
    /// mutation is written through its local-transaction API (the `idemkit`
    /// crate's `local` module: `complete_with` on redb, `complete_in` on
    /// PostgreSQL); a Local mutation committed on its own, before the outcome,
    /// runs again after a takeover (at least once).
    Local,
    /// A downstream system was (maybe) written: an expired lease or an
    /// unclassified failure becomes [`RecordState::Unknown`], never a silent
    /// re-execution.
    External,
}

impl fmt::Display for EffectKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EffectKind::Local => "local",
            EffectKind::External => "external",
        })
    }
}

/// A lease's fencing token: grows with every new lease of a record.
///
/// The first lease of a record gets [`FencingToken::FIRST`]; every later lease
/// (a claim after a release, a takeover, a recovery) gets the record's last token
/// plus one. A worker presents its token with every write; a token that is not the
/// record's current one is refused, so a worker whose lease was taken over can
/// never overwrite the new owner's outcome. Zero is never a valid token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FencingToken(u64);

impl FencingToken {
    /// The token of a record's first lease.
    pub const FIRST: FencingToken = FencingToken(1);

    /// A token from its number; `None` for 0, which no lease ever gets.
    #[must_use]
    pub const fn new(value: u64) -> Option<Self> {
        if value == 0 {
            None
        } else {
            Some(FencingToken(value))
        }
    }

    /// The token's number (at least 1).
    #[must_use]
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The token of the next lease, or `None` once the counter is exhausted.
    #[must_use]
    pub const fn next(self) -> Option<Self> {
        match self.0.checked_add(1) {
            Some(value) => Some(FencingToken(value)),
            None => None,
        }
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// The right to execute an operation until `expires_at`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Lease {
    /// Who holds it (worker or process id, for operators; never used for decisions).
    pub owner: String,
    /// The fencing token the holder must present with every write.
    pub token: FencingToken,
    /// From this instant on the lease is expired (`now >= expires_at`).
    pub expires_at: UnixMillis,
}

/// The response replayed for a completed operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct StoredResponse {
    /// The HTTP status code.
    pub status: u16,
    /// The headers worth replaying, in order (name, raw value).
    #[serde(
        serialize_with = "codec::headers_as_bytes",
        deserialize_with = "codec::headers_from_bytes"
    )]
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body; `None` once GC pruned it at the end of the replay window.
    #[serde(
        default,
        serialize_with = "codec::body_as_bytes",
        deserialize_with = "codec::body_from_bytes"
    )]
    pub body: Option<Vec<u8>>,
    /// The created resource or provider reference (kept after pruning, so a late
    /// retry still learns *what* was done).
    pub resource_ref: Option<String>,
}

impl StoredResponse {
    /// A response with a status and a body, no headers and no reference.
    #[must_use]
    pub fn new(status: u16, body: impl Into<Vec<u8>>) -> Self {
        StoredResponse {
            status,
            headers: Vec::new(),
            body: Some(body.into()),
            resource_ref: None,
        }
    }
}

/// Why an outcome is unknown.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum UnknownReason {
    /// The lease of an [`EffectKind::External`] operation expired before its
    /// worker reported an outcome. The worker holding that lease may still report
    /// the real outcome with its token.
    LeaseExpired,
    /// The worker itself said the outcome is ambiguous (for example a timeout
    /// talking to the downstream system); the text is for operators.
    MarkedByWorker(String),
    /// The worker's guard was dropped without an outcome (a panic or an early
    /// return in the handler).
    GuardDropped,
    /// The process crashed or restarted while holding the lease; found by
    /// recovery at start-up.
    Crash,
    /// The record's fencing-token counter is exhausted, so no new lease can be
    /// granted; only reachable through a corrupted or hostile record.
    TokensExhausted,
}

impl fmt::Display for UnknownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UnknownReason::LeaseExpired => f.write_str("lease expired"),
            UnknownReason::MarkedByWorker(why) => write!(f, "marked by worker: {why}"),
            UnknownReason::GuardDropped => f.write_str("guard dropped"),
            UnknownReason::Crash => f.write_str("crash"),
            UnknownReason::TokensExhausted => f.write_str("fencing tokens exhausted"),
        }
    }
}

/// Where an operation stands.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RecordState {
    /// A worker holds a lease and is executing.
    Running {
        /// The lease; its token equals the record's `last_token`.
        lease: Lease,
    },
    /// The outcome is known and durable (including a definitive rejection).
    Completed {
        /// What retries get back.
        response: StoredResponse,
        /// When the outcome was recorded.
        completed_at: UnixMillis,
    },
    /// The outcome is ambiguous; never executed again without `resolve`/`recover`.
    Unknown {
        /// Why.
        reason: UnknownReason,
        /// Since when the outcome is ambiguous.
        since: UnixMillis,
    },
    /// The attempt failed with no effect; a retry executes again.
    Released {
        /// When it was released.
        at: UnixMillis,
    },
}

impl RecordState {
    /// The state's name, without its data.
    #[must_use]
    pub fn name(&self) -> StateName {
        match self {
            RecordState::Running { .. } => StateName::Running,
            RecordState::Completed { .. } => StateName::Completed,
            RecordState::Unknown { .. } => StateName::Unknown,
            RecordState::Released { .. } => StateName::Released,
        }
    }
}

/// The name of a [`RecordState`]: `running`, `completed`, `unknown`, `released`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum StateName {
    /// [`RecordState::Running`].
    Running,
    /// [`RecordState::Completed`].
    Completed,
    /// [`RecordState::Unknown`].
    Unknown,
    /// [`RecordState::Released`].
    Released,
}

impl StateName {
    /// All names, in lifecycle order.
    pub const ALL: [StateName; 4] = [
        StateName::Running,
        StateName::Completed,
        StateName::Unknown,
        StateName::Released,
    ];

    /// The lowercase name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            StateName::Running => "running",
            StateName::Completed => "completed",
            StateName::Unknown => "unknown",
            StateName::Released => "released",
        }
    }
}

impl fmt::Display for StateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The text was not one of `running`, `completed`, `unknown`, `released`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseStateNameError {
    /// The rejected text.
    pub text: String,
}

impl fmt::Display for ParseStateNameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown record state {:?}: expected running, completed, unknown or released",
            self.text
        )
    }
}

impl core::error::Error for ParseStateNameError {}

impl FromStr for StateName {
    type Err = ParseStateNameError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        StateName::ALL
            .into_iter()
            .find(|name| name.as_str() == s)
            .ok_or_else(|| ParseStateNameError { text: s.to_owned() })
    }
}

/// Where a named step stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StepState {
    /// The provider key is persisted and the step may have been dispatched.
    Started,
    /// The provider confirmed the step.
    Done,
}

/// A named step of an operation (book, then notify).
///
/// Its provider (downstream) idempotency key is persisted *before* dispatch, so a
/// replacement worker resumes with the same key instead of inventing a new one.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Step {
    /// The step's name, unique within its record.
    pub name: String,
    /// Where it stands.
    pub state: StepState,
    /// The idempotency key sent to the provider on every dispatch of this step.
    pub provider_key: String,
    /// The provider's reference for the effect (set when the step is done).
    pub provider_ref: Option<String>,
    /// When the step was first started.
    pub started_at: UnixMillis,
    /// When it was done (`Some` exactly when `state` is [`StepState::Done`]).
    pub done_at: Option<UnixMillis>,
}

/// The stored record of one idempotent operation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Record {
    /// What the key was first used with; a different fingerprint never executes.
    pub fingerprint: Fingerprint,
    /// Whether the effect commits with the outcome.
    pub effect: EffectKind,
    /// Where the operation stands.
    pub state: RecordState,
    /// The attempt number of the latest lease (1 for the first).
    pub attempt: u32,
    /// The token of the latest lease ever granted for this record.
    pub last_token: FencingToken,
    /// The named steps, in the order they were started.
    pub steps: Vec<Step>,
    /// When the record was first written.
    pub created_at: UnixMillis,
    /// When the record was last written.
    pub updated_at: UnixMillis,
    /// Until when the full response is replayed (Completed only).
    pub replay_until: Option<UnixMillis>,
    /// Until when the record is kept at all (Completed and Released only).
    pub keep_until: Option<UnixMillis>,
    /// The retention windows the record was claimed under (format 2 on), so an
    /// operator's `resolve` or a later completion keeps the operation's windows
    /// instead of a default policy's. `None` for records written in format 1,
    /// which take the windows of the policy they are completed under.
    pub windows: Option<RecordWindows>,
    /// The fingerprint scheme `fingerprint` was computed under
    /// ([`crate::fingerprint::SCHEME_BODY`] or [`crate::fingerprint::SCHEME_REQUEST_LINE`], as the claim that created it computed it; 1 for format-1 records).
    pub fingerprint_scheme: u8,
}

/// The replay and record windows of one operation, as kept in its record.
///
/// Kept in whole milliseconds (docs/architecture.md, "Retention": records carry the windows
/// they were claimed under).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct RecordWindows {
    /// How long after completion the full response is replayed, in milliseconds.
    pub replay_ms: u64,
    /// How long after completion or release the compact record is kept, in
    /// milliseconds.
    pub record_ms: u64,
}

impl RecordWindows {
    /// The windows of `policy`, saturated to whole milliseconds.
    #[must_use]
    pub fn of(policy: &crate::machine::Policy) -> Self {
        RecordWindows {
            replay_ms: u64::try_from(policy.replay_window.as_millis()).unwrap_or(u64::MAX),
            record_ms: u64::try_from(policy.record_window.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The replay window.
    #[must_use]
    pub const fn replay(&self) -> core::time::Duration {
        core::time::Duration::from_millis(self.replay_ms)
    }

    /// The record window.
    #[must_use]
    pub const fn record(&self) -> core::time::Duration {
        core::time::Duration::from_millis(self.record_ms)
    }
}

impl Record {
    /// The windows this record applies: the ones it was claimed under, or, for a
    /// format-1 record that has none, `policy`'s.
    #[must_use]
    pub fn windows_or(&self, policy: &crate::machine::Policy) -> RecordWindows {
        self.windows.unwrap_or_else(|| RecordWindows::of(policy))
    }

    /// When the lease expires, for a store's lease index; `None` unless Running.
    #[must_use]
    pub fn lease_expires_at(&self) -> Option<UnixMillis> {
        match &self.state {
            RecordState::Running { lease } => Some(lease.expires_at),
            _ => None,
        }
    }

    /// When GC next has something to do with this record, for a store's GC index.
    ///
    /// Completed: `replay_until` while the body is present, then `keep_until`;
    /// Released: `keep_until`; Running and Unknown: `None` — GC never touches them.
    #[must_use]
    pub fn gc_due_at(&self) -> Option<UnixMillis> {
        match &self.state {
            RecordState::Completed { response, .. } => {
                if response.body.is_some() {
                    self.replay_until.or(self.keep_until)
                } else {
                    self.keep_until
                }
            }
            RecordState::Released { .. } => self.keep_until,
            RecordState::Running { .. } | RecordState::Unknown { .. } => None,
        }
    }

    /// Whether an operator or reconciler must look at this record: it is Unknown,
    /// or Running past its lease.
    #[must_use]
    pub fn is_unresolved(&self, now: UnixMillis) -> bool {
        match &self.state {
            RecordState::Unknown { .. } => true,
            RecordState::Running { lease } => now >= lease.expires_at,
            RecordState::Completed { .. } | RecordState::Released { .. } => false,
        }
    }

    /// The step named `name`, if it was ever started.
    #[must_use]
    pub fn step(&self, name: &str) -> Option<&Step> {
        self.steps.iter().find(|step| step.name == name)
    }

    /// Whether the record window is over: from `keep_until` on, the record is
    /// treated exactly as if GC had already deleted it.
    #[must_use]
    pub fn is_expired(&self, now: UnixMillis) -> bool {
        match &self.state {
            RecordState::Completed { .. } | RecordState::Released { .. } => {
                self.keep_until.is_some_and(|keep| now >= keep)
            }
            RecordState::Running { .. } | RecordState::Unknown { .. } => false,
        }
    }
}
