//! The client-side action journal: one idempotency key per logical action, made
//! durable *before* the first attempt is sent.
//!
//! An agent tool runtime (or any client) calls [`Journal::begin`] with an action
//! id that comes from its workflow — the run and step, never the model's tool-call
//! id — and the exact payload that was approved. The first call creates a random
//! key (UUID v4 from the operating system's CSPRNG) and stores `(action id → key,
//! payload)` with a durable commit; every later call with the same action id, from
//! a restart, a replanned step or a second worker, returns the same key and
//! payload. A different payload under an existing action id is refused: a
//! deliberate second action needs its own action id.
//!
//! Each attempt is journalled too ([`Journal::start_attempt`] before sending,
//! [`Journal::finish_attempt`] after), and the action's status is derived from
//! them with [`ActionStatus::from_attempts`], so an uncertain outcome is never
//! reported as confirmed.
//!
//! ```
//! use idemkit::journal::Journal;
//! use idemkit::core::client::{ActionStatus, AttemptResult};
//! use idemkit::UnixMillis;
//!
//! let journal = Journal::in_memory()?;
//! let now = UnixMillis::from_millis(1_700_000_000_000);
//! let action = journal.begin("run-42/step-3", br#"{"slot_id":"s-9"}"#, now)?;
//! // A restart asks again and gets the same key.
//! assert_eq!(journal.begin("run-42/step-3", br#"{"slot_id":"s-9"}"#, now)?.key, action.key);
//!
//! let attempt = journal.start_attempt("run-42/step-3", now)?;
//! journal.finish_attempt("run-42/step-3", attempt.number, &AttemptResult::Timeout, now)?;
//! assert_eq!(journal.status("run-42/step-3")?, Some(ActionStatus::Pending));
//! # Ok::<(), idemkit::journal::JournalError>(())
//! ```
//!
//! The journal also keeps a circuit breaker per origin (`scheme://host:port`),
//! so that successive actions from separate processes stop sending to a
//! dependency that keeps failing: [`Journal::breaker_allow`] before each attempt,
//! [`Journal::breaker_record`] after it. The rules are core's
//! [`CircuitBreaker`]; the journal only keeps its state between processes.
//!
//! The journal lives in its own redb file, opened in redb's multi-writer mode so
//! that several processes (workers, a re-run after a kill) share it safely.
//!
//! Every method takes `now` explicitly, so tests drive time. [`Journal::now`]
//! reads the journal's [`Clock`] — the system's, or the one given with
//! [`Journal::with_clock`] (the same [`ManualClock`](crate::clock::ManualClock)
//! a test gives its store) — for callers that want the current time:
//!
//! ```
//! # use idemkit::journal::Journal;
//! let journal = Journal::in_memory()?;
//! let action = journal.begin("run-42/step-4", b"{}", journal.now())?;
//! # Ok::<(), idemkit::journal::JournalError>(())
//! ```

mod record;

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use idemkit_core::IdempotencyKey;
use idemkit_core::UnixMillis;
use idemkit_core::client::{
    ActionStatus, AttemptResult, BreakerConfig, BreakerOpen, BreakerState, CircuitBreaker,
};
use redb::{ReadableDatabase, ReadableTable, TableDefinition};

use crate::clock::{Clock, SystemClock};

pub use record::{ActionRecord, AttemptRecord, BreakerRecord};

/// action id → encoded [`ActionRecord`].
const ACTIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("idemkit.journal.actions.v1");
/// (action id, attempt number) → encoded [`AttemptRecord`].
const ATTEMPTS: TableDefinition<(&str, u32), &[u8]> =
    TableDefinition::new("idemkit.journal.attempts.v1");
/// origin (`scheme://host:port`) → encoded [`BreakerRecord`].
const BREAKERS: TableDefinition<&str, &[u8]> = TableDefinition::new("idemkit.journal.breakers.v1");

/// The longest action id accepted, in bytes.
pub const MAX_ACTION_ID_LEN: usize = 1024;

/// A durable journal of client actions.
pub struct Journal {
    db: redb::Database,
    /// What [`Journal::now`] reads.
    clock: Arc<dyn Clock>,
}

/// What [`Journal::begin`] returns: the action's key and its approved payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Action {
    /// The action id given by the runtime.
    pub action_id: String,
    /// The idempotency key to send on every attempt.
    pub key: IdempotencyKey,
    /// The payload approved when the action began.
    pub payload: Vec<u8>,
    /// When the action began.
    pub created_at: UnixMillis,
    /// True when the action already existed (a resume), false when this call created it.
    pub resumed: bool,
}

/// An attempt that has been journalled as started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptStart {
    /// 1 for the first attempt of the action.
    pub number: u32,
    /// A random id for this attempt, for logs and for the server's traces.
    pub attempt_id: String,
}

impl Journal {
    /// Opens (or creates) the journal file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Journal, JournalError> {
        let path = path.as_ref();
        // Made whole under another name first, like a store's file: a client
        // killed while creating its journal must be able to open it again.
        crate::adapters::redb::create::create_whole_if_absent(path, |temp| {
            Journal::init(redb::Database::builder().create(temp).map_err(storage)?).map(drop)
        });
        let db = redb::Database::builder()
            .set_concurrency_mode(redb::ConcurrencyMode::MultiWriter)
            .set_check_integrity_on_open(true)
            .create(path)
            .map_err(|e| JournalError::Open {
                path: path.display().to_string(),
                source: e.into(),
            })?;
        Journal::init(db)
    }

    /// A journal that lives in memory (tests, examples).
    pub fn in_memory() -> Result<Journal, JournalError> {
        let db = redb::Database::builder()
            .create_with_backend(redb::backends::InMemoryBackend::new())
            .map_err(|e| JournalError::Open {
                path: "(memory)".into(),
                source: e.into(),
            })?;
        Journal::init(db)
    }

    fn init(db: redb::Database) -> Result<Journal, JournalError> {
        let txn = db.begin_write().map_err(storage)?;
        txn.open_table(ACTIONS).map_err(storage)?;
        txn.open_table(ATTEMPTS).map_err(storage)?;
        txn.open_table(BREAKERS).map_err(storage)?;
        txn.commit().map_err(storage)?;
        Ok(Journal {
            db,
            clock: Arc::new(SystemClock),
        })
    }

    /// This journal with [`Journal::now`] reading `clock` instead of the system
    /// clock (a [`ManualClock`](crate::clock::ManualClock) in tests: clones share
    /// their instant, so one clock can drive a store and a journal together).
    #[must_use]
    pub fn with_clock(self, clock: impl Clock + 'static) -> Journal {
        Journal {
            clock: Arc::new(clock),
            ..self
        }
    }

    /// The current time by the journal's clock (the system's wall clock unless
    /// [`Journal::with_clock`] gave another), as the `now` the other methods take:
    /// `journal.begin(action_id, payload, journal.now())`.
    #[must_use]
    pub fn now(&self) -> UnixMillis {
        self.clock.now()
    }

    /// Begins the action `action_id` with `payload`, or resumes it.
    ///
    /// The key is created from the operating system's CSPRNG and committed
    /// durably before this returns; the same action id returns the same key and
    /// payload forever after. A different payload under an existing action id is
    /// [`JournalError::PayloadChanged`].
    pub fn begin(
        &self,
        action_id: &str,
        payload: &[u8],
        now: UnixMillis,
    ) -> Result<Action, JournalError> {
        self.begin_inner(action_id, payload, now, random_key)
    }

    /// Like [`Journal::begin`], with a key the caller derived deterministically
    /// (see [`IdempotencyKey::derive`]) instead of a random one. A resumed action keeps the key
    /// it was created with.
    pub fn begin_with_key(
        &self,
        action_id: &str,
        payload: &[u8],
        key: IdempotencyKey,
        now: UnixMillis,
    ) -> Result<Action, JournalError> {
        self.begin_inner(action_id, payload, now, move || Ok(key))
    }

    fn begin_inner(
        &self,
        action_id: &str,
        payload: &[u8],
        now: UnixMillis,
        make_key: impl FnOnce() -> Result<IdempotencyKey, JournalError>,
    ) -> Result<Action, JournalError> {
        check_action_id(action_id)?;
        let txn = self.db.begin_write().map_err(storage)?;
        let action = {
            let mut actions = txn.open_table(ACTIONS).map_err(storage)?;
            let existing = actions
                .get(action_id)
                .map_err(storage)?
                .map(|v| v.value().to_vec());
            match existing {
                Some(bytes) => {
                    let stored =
                        ActionRecord::decode(&bytes).map_err(|detail| JournalError::Corrupt {
                            action_id: action_id.into(),
                            detail,
                        })?;
                    if stored.payload != payload {
                        return Err(JournalError::PayloadChanged {
                            action_id: action_id.into(),
                        });
                    }
                    stored.into_action(action_id, true)?
                }
                None => {
                    let record = ActionRecord {
                        key: make_key()?.as_str().to_owned(),
                        payload: payload.to_vec(),
                        created_at: now.as_millis(),
                    };
                    actions
                        .insert(action_id, record.encode().as_slice())
                        .map_err(storage)?;
                    record.into_action(action_id, false)?
                }
            }
        };
        // Durability::Immediate is redb's default: commit returns after fsync.
        txn.commit().map_err(storage)?;
        Ok(action)
    }

    /// The action, if it was begun.
    pub fn get(&self, action_id: &str) -> Result<Option<Action>, JournalError> {
        let txn = self.db.begin_read().map_err(storage)?;
        let actions = txn.open_table(ACTIONS).map_err(storage)?;
        let Some(bytes) = actions.get(action_id).map_err(storage)? else {
            return Ok(None);
        };
        let stored =
            ActionRecord::decode(bytes.value()).map_err(|detail| JournalError::Corrupt {
                action_id: action_id.into(),
                detail,
            })?;
        Ok(Some(stored.into_action(action_id, true)?))
    }

    /// Journals the start of the next attempt, durably, before it is sent.
    pub fn start_attempt(
        &self,
        action_id: &str,
        now: UnixMillis,
    ) -> Result<AttemptStart, JournalError> {
        let txn = self.db.begin_write().map_err(storage)?;
        let start = {
            let actions = txn.open_table(ACTIONS).map_err(storage)?;
            if actions.get(action_id).map_err(storage)?.is_none() {
                return Err(JournalError::UnknownAction {
                    action_id: action_id.into(),
                });
            }
            let mut attempts = txn.open_table(ATTEMPTS).map_err(storage)?;
            let last = attempts
                .range((action_id, 0)..=(action_id, u32::MAX))
                .map_err(storage)?
                .next_back()
                .transpose()
                .map_err(storage)?
                .map(|(k, _)| k.value().1);
            let number = last.map_or(1, |n| n.saturating_add(1));
            let attempt_id = IdempotencyKey::from_random(random_bytes()?)
                .as_str()
                .to_owned();
            let record = AttemptRecord {
                attempt_id: attempt_id.clone(),
                started_at: now.as_millis(),
                ended_at: None,
                result: None,
            };
            attempts
                .insert((action_id, number), record.encode().as_slice())
                .map_err(storage)?;
            AttemptStart { number, attempt_id }
        };
        txn.commit().map_err(storage)?;
        Ok(start)
    }

    /// Journals how attempt `number` ended.
    pub fn finish_attempt(
        &self,
        action_id: &str,
        number: u32,
        result: &AttemptResult,
        now: UnixMillis,
    ) -> Result<(), JournalError> {
        let txn = self.db.begin_write().map_err(storage)?;
        {
            let mut attempts = txn.open_table(ATTEMPTS).map_err(storage)?;
            let bytes = attempts
                .get((action_id, number))
                .map_err(storage)?
                .map(|v| v.value().to_vec())
                .ok_or_else(|| JournalError::UnknownAttempt {
                    action_id: action_id.into(),
                    number,
                })?;
            let mut record =
                AttemptRecord::decode(&bytes).map_err(|detail| JournalError::Corrupt {
                    action_id: action_id.into(),
                    detail,
                })?;
            record.ended_at = Some(now.as_millis());
            record.result = Some(result.clone().into());
            attempts
                .insert((action_id, number), record.encode().as_slice())
                .map_err(storage)?;
        }
        txn.commit().map_err(storage)?;
        Ok(())
    }

    /// Every attempt of the action, oldest first.
    pub fn attempts(&self, action_id: &str) -> Result<Vec<AttemptRecord>, JournalError> {
        let txn = self.db.begin_read().map_err(storage)?;
        let attempts = txn.open_table(ATTEMPTS).map_err(storage)?;
        let mut out = Vec::new();
        for entry in attempts
            .range((action_id, 0)..=(action_id, u32::MAX))
            .map_err(storage)?
        {
            let (_, value) = entry.map_err(storage)?;
            out.push(AttemptRecord::decode(value.value()).map_err(|detail| {
                JournalError::Corrupt {
                    action_id: action_id.into(),
                    detail,
                }
            })?);
        }
        Ok(out)
    }

    /// The action's status derived from its finished attempts, or `None` if the
    /// action was never begun. An attempt that started and never finished (the
    /// process died) leaves the status `Pending`: resuming with the same key is
    /// safe, and the server will answer what became of it.
    pub fn status(&self, action_id: &str) -> Result<Option<ActionStatus>, JournalError> {
        if self.get(action_id)?.is_none() {
            return Ok(None);
        }
        let attempts = self.attempts(action_id)?;
        let results: Vec<AttemptResult> = attempts
            .into_iter()
            .filter_map(|a| a.result.map(AttemptResult::from))
            .collect();
        Ok(Some(ActionStatus::from_attempts(&results)))
    }

    /// May an attempt be sent to `origin` at `now`? Core's
    /// [`CircuitBreaker::allow_leasing_probe`] over the origin's kept state (closed when none is
    /// kept), in one write transaction, so concurrent processes see each other's
    /// decisions.
    ///
    /// When the breaker lets a probe through it stays open for `probe_lease` more
    /// (give at least the attempt's timeout): other processes are refused until the
    /// probe is reported with [`Journal::breaker_record`], and if the prober dies
    /// without reporting, another probe is allowed once the lease ends.
    pub fn breaker_allow(
        &self,
        origin: &str,
        config: &BreakerConfig,
        probe_lease: Duration,
        now: UnixMillis,
    ) -> Result<Result<(), BreakerOpen>, JournalError> {
        self.with_breaker(origin, config, |breaker| {
            let verdict = breaker.allow_leasing_probe(now, probe_lease);
            (verdict, breaker.state())
        })
    }

    /// Reports to `origin`'s breaker how an allowed attempt ended (core's
    /// [`CircuitBreaker::record`]); returns the breaker's new state.
    pub fn breaker_record(
        &self,
        origin: &str,
        config: &BreakerConfig,
        result: &AttemptResult,
        now: UnixMillis,
    ) -> Result<BreakerState, JournalError> {
        self.with_breaker(origin, config, |breaker| {
            breaker.record(result, now);
            (breaker.state(), breaker.state())
        })
    }

    /// The kept state of `origin`'s breaker, or `None` if nothing was ever sent there.
    pub fn breaker_state(&self, origin: &str) -> Result<Option<BreakerState>, JournalError> {
        let txn = self.db.begin_read().map_err(storage)?;
        let breakers = txn.open_table(BREAKERS).map_err(storage)?;
        let Some(bytes) = breakers.get(origin).map_err(storage)? else {
            return Ok(None);
        };
        let record = BreakerRecord::decode(bytes.value()).map_err(|detail| {
            JournalError::CorruptBreaker {
                origin: origin.into(),
                detail,
            }
        })?;
        Ok(Some(record.into()))
    }

    /// Loads `origin`'s breaker, lets `change` act on it and returns the state to
    /// keep, and writes that state back, all in one transaction.
    fn with_breaker<T>(
        &self,
        origin: &str,
        config: &BreakerConfig,
        change: impl FnOnce(&mut CircuitBreaker) -> (T, BreakerState),
    ) -> Result<T, JournalError> {
        let txn = self.db.begin_write().map_err(storage)?;
        let answer = {
            let mut breakers = txn.open_table(BREAKERS).map_err(storage)?;
            let kept = breakers
                .get(origin)
                .map_err(storage)?
                .map(|v| v.value().to_vec());
            let state = match kept {
                Some(bytes) => BreakerRecord::decode(&bytes)
                    .map_err(|detail| JournalError::CorruptBreaker {
                        origin: origin.into(),
                        detail,
                    })?
                    .into(),
                None => BreakerState::Closed { failures: 0 },
            };
            let mut breaker = CircuitBreaker::from_state(config.clone(), state);
            let (answer, keep) = change(&mut breaker);
            if keep != state {
                breakers
                    .insert(origin, BreakerRecord::from(keep).encode().as_slice())
                    .map_err(storage)?;
            }
            answer
        };
        txn.commit().map_err(storage)?;
        Ok(answer)
    }
}

fn random_key() -> Result<IdempotencyKey, JournalError> {
    Ok(IdempotencyKey::from_random(random_bytes()?))
}

fn random_bytes() -> Result<[u8; 16], JournalError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| JournalError::Random(e.to_string()))?;
    Ok(bytes)
}

fn check_action_id(action_id: &str) -> Result<(), JournalError> {
    if action_id.is_empty() || action_id.len() > MAX_ACTION_ID_LEN {
        return Err(JournalError::InvalidActionId {
            len: action_id.len(),
        });
    }
    Ok(())
}

fn storage(e: impl Into<redb::Error>) -> JournalError {
    JournalError::Storage(e.into())
}

/// What went wrong in the journal.
#[derive(Debug)]
#[non_exhaustive]
pub enum JournalError {
    /// The journal file could not be opened or created.
    Open {
        /// The file.
        path: String,
        /// redb's error.
        source: redb::Error,
    },
    /// The action id is empty or longer than [`MAX_ACTION_ID_LEN`] bytes.
    InvalidActionId {
        /// Its length.
        len: usize,
    },
    /// The action exists with another payload.
    PayloadChanged {
        /// The action id.
        action_id: String,
    },
    /// No action with this id was begun.
    UnknownAction {
        /// The action id.
        action_id: String,
    },
    /// No such attempt.
    UnknownAttempt {
        /// The action id.
        action_id: String,
        /// The attempt number.
        number: u32,
    },
    /// A stored entry could not be decoded.
    Corrupt {
        /// The action id.
        action_id: String,
        /// What was wrong.
        detail: String,
    },
    /// An origin's kept breaker state could not be decoded.
    CorruptBreaker {
        /// The origin.
        origin: String,
        /// What was wrong.
        detail: String,
    },
    /// The storage engine failed; nothing was acknowledged.
    Storage(redb::Error),
    /// The operating system's random number generator failed.
    Random(String),
}

impl fmt::Display for JournalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JournalError::Open { path, source } => {
                write!(f, "cannot open journal {path}: {source}")
            }
            JournalError::InvalidActionId { len } => write!(
                f,
                "action id must be 1 to {MAX_ACTION_ID_LEN} bytes long (got {len})"
            ),
            JournalError::PayloadChanged { action_id } => write!(
                f,
                "action {action_id:?} was begun with a different payload; a new action needs a new action id"
            ),
            JournalError::UnknownAction { action_id } => {
                write!(f, "no action {action_id:?} in the journal")
            }
            JournalError::UnknownAttempt { action_id, number } => {
                write!(f, "action {action_id:?} has no attempt {number}")
            }
            JournalError::Corrupt { action_id, detail } => {
                write!(
                    f,
                    "journal entry for action {action_id:?} is corrupt: {detail}"
                )
            }
            JournalError::CorruptBreaker { origin, detail } => write!(
                f,
                "journal's circuit breaker entry for {origin} is corrupt: {detail}"
            ),
            JournalError::Storage(e) => write!(f, "journal storage failed: {e}"),
            JournalError::Random(e) => write!(f, "the system random number generator failed: {e}"),
        }
    }
}

impl std::error::Error for JournalError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            JournalError::Open { source, .. } | JournalError::Storage(source) => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    const T0: u64 = 1_700_000_000_000;

    #[test]
    fn now_reads_the_clock_given_with_with_clock() {
        let clock = ManualClock::new(UnixMillis::from_millis(T0));
        let journal = Journal::in_memory().unwrap().with_clock(clock.clone());
        assert_eq!(journal.now(), UnixMillis::from_millis(T0));

        let action = journal.begin("run-1/step-1", b"{}", journal.now()).unwrap();
        assert_eq!(action.created_at, UnixMillis::from_millis(T0));

        // The journal follows the clock it shares with the test (or a store).
        clock.advance(Duration::from_secs(5));
        assert_eq!(journal.now(), UnixMillis::from_millis(T0 + 5_000));
        let attempt = journal
            .start_attempt("run-1/step-1", journal.now())
            .unwrap();
        journal
            .finish_attempt(
                "run-1/step-1",
                attempt.number,
                &AttemptResult::Timeout,
                journal.now(),
            )
            .unwrap();
        let attempts = journal.attempts("run-1/step-1").unwrap();
        assert_eq!(attempts.len(), 1);
        assert_eq!(attempts[0].started_at, T0 + 5_000);
        assert_eq!(attempts[0].ended_at, Some(T0 + 5_000));
    }

    #[test]
    fn now_is_the_system_clock_by_default() {
        let before = SystemClock.now();
        let now = Journal::in_memory().unwrap().now();
        let after = SystemClock.now();
        assert!(
            before <= now && now <= after,
            "{before:?} <= {now:?} <= {after:?}"
        );
        // Not the epoch, and not a fixed instant: 2020 or later.
        assert!(now > UnixMillis::from_millis(1_577_836_800_000));
    }
}
