//! The client-side action journal: [`idemkit::journal::Journal`], the redb file
//! `idemkit call --journal` reads and writes, so one action can be begun by either
//! and continued by the other with the same key.

use std::path::PathBuf;
use std::sync::Arc;

use idemkit::UnixMillis;
use idemkit::journal::{Journal as RustJournal, JournalError};
use idemkit_core::IdempotencyKey;
use idemkit_core::client::{BreakerConfig, BreakerState};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::client::{AttemptResult, status_name};
use crate::{errors, seconds};

/// An action as the journal holds it.
#[pyclass(frozen, get_all, module = "idemkit_rs._native")]
pub struct Action {
    /// The action id given by the runtime.
    action_id: String,
    /// The idempotency key to send on every attempt.
    key: String,
    /// The payload approved when the action began.
    payload: Py<PyBytes>,
    /// When the action began, in Unix milliseconds.
    created_at: u64,
    /// True when the action already existed (a resume), false when this call created it.
    resumed: bool,
}

#[pymethods]
impl Action {
    fn __repr__(&self) -> String {
        format!(
            "Action(action_id={:?}, key={:?}, resumed={})",
            self.action_id, self.key, self.resumed
        )
    }
}

/// An attempt journalled as started.
#[pyclass(frozen, get_all, module = "idemkit_rs._native")]
pub struct AttemptStart {
    /// 1 for the action's first attempt.
    number: u32,
    /// A random id for this attempt (sent as `Idemkit-Attempt-Id`).
    attempt_id: String,
}

/// One journalled attempt.
#[pyclass(frozen, get_all, module = "idemkit_rs._native")]
pub struct AttemptRecord {
    /// The attempt's random id.
    attempt_id: String,
    /// When it was journalled as started, in Unix milliseconds.
    started_at: u64,
    /// When it ended; `None` while running, or when the process died.
    ended_at: Option<u64>,
    /// How it ended, if it did.
    result: Option<AttemptResult>,
}

/// A durable journal of client actions in a redb file (the same file format as
/// the Rust `Journal` and `idemkit call --journal`).
#[pyclass(frozen, module = "idemkit_rs._native")]
pub struct Journal {
    inner: Arc<RustJournal>,
}

fn breaker_config(failures: u32, cool_down: f64) -> PyResult<BreakerConfig> {
    if failures == 0 {
        return Err(errors::argument("breaker_failures must be at least 1"));
    }
    Ok(BreakerConfig {
        failure_threshold: failures,
        open_for: seconds(cool_down, "breaker_cool_down")?,
    })
}

/// A breaker state as Python sees it: `{"state": "closed", "failures": n}`,
/// `{"state": "open", "until": ms}` or `{"state": "half-open", "probing": bool}`.
fn breaker_view<'py>(py: Python<'py>, state: BreakerState) -> PyResult<Bound<'py, PyDict>> {
    let view = PyDict::new(py);
    match state {
        BreakerState::Closed { failures } => {
            view.set_item("state", "closed")?;
            view.set_item("failures", failures)?;
        }
        BreakerState::Open { until } => {
            view.set_item("state", "open")?;
            view.set_item("until", until.as_millis())?;
        }
        BreakerState::HalfOpen { probing } => {
            view.set_item("state", "half-open")?;
            view.set_item("probing", probing)?;
        }
    }
    Ok(view)
}

impl Journal {
    fn at(&self, now: Option<u64>) -> UnixMillis {
        now.map_or_else(|| self.inner.now(), UnixMillis::from_millis)
    }

    /// Runs `f` on the journal with the GIL released (journal writes fsync).
    fn run<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&RustJournal) -> Result<T, JournalError> + Send,
    ) -> PyResult<T> {
        let journal = Arc::clone(&self.inner);
        py.detach(move || f(&journal))
            .map_err(|e| errors::journal_error(py, &e))
    }
}

fn action(py: Python<'_>, action: idemkit::journal::Action) -> Action {
    Action {
        action_id: action.action_id,
        key: action.key.as_str().to_owned(),
        payload: PyBytes::new(py, &action.payload).unbind(),
        created_at: action.created_at.as_millis(),
        resumed: action.resumed,
    }
}

#[pymethods]
impl Journal {
    /// Opens (or creates) the journal file at `path`.
    #[new]
    fn open(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let journal = py
            .detach(move || RustJournal::open(&path))
            .map_err(|e| errors::journal_error(py, &e))?;
        Ok(Journal {
            inner: Arc::new(journal),
        })
    }

    /// A journal that lives in memory (tests, examples).
    #[staticmethod]
    fn in_memory(py: Python<'_>) -> PyResult<Self> {
        let journal = RustJournal::in_memory().map_err(|e| errors::journal_error(py, &e))?;
        Ok(Journal {
            inner: Arc::new(journal),
        })
    }

    /// The current time by the journal's clock, in Unix milliseconds.
    fn now(&self) -> u64 {
        self.inner.now().as_millis()
    }

    /// Begins the action `action_id` with `payload`, or resumes it: the key is
    /// created (from the OS's CSPRNG, or `key` when given) and committed durably
    /// before this returns; the same action id returns the same key and payload
    /// forever after. Another payload raises `PayloadChangedError`.
    #[pyo3(signature = (action_id, payload, *, key = None, now = None))]
    fn begin(
        &self,
        py: Python<'_>,
        action_id: String,
        payload: Vec<u8>,
        key: Option<String>,
        now: Option<u64>,
    ) -> PyResult<Action> {
        let now = self.at(now);
        let key = key
            .map(|k| IdempotencyKey::new(&k).map_err(|e| errors::key_error(py, &e)))
            .transpose()?;
        let begun = self.run(py, move |j| match key {
            Some(key) => j.begin_with_key(&action_id, &payload, key, now),
            None => j.begin(&action_id, &payload, now),
        })?;
        Ok(action(py, begun))
    }

    /// The action, if it was begun.
    fn get(&self, py: Python<'_>, action_id: String) -> PyResult<Option<Action>> {
        let found = self.run(py, move |j| j.get(&action_id))?;
        Ok(found.map(|a| action(py, a)))
    }

    /// Journals the start of the next attempt, durably, before it is sent.
    #[pyo3(signature = (action_id, *, now = None))]
    fn start_attempt(
        &self,
        py: Python<'_>,
        action_id: String,
        now: Option<u64>,
    ) -> PyResult<AttemptStart> {
        let now = self.at(now);
        let start = self.run(py, move |j| j.start_attempt(&action_id, now))?;
        Ok(AttemptStart {
            number: start.number,
            attempt_id: start.attempt_id,
        })
    }

    /// Journals how attempt `number` ended.
    #[pyo3(signature = (action_id, number, result, *, now = None))]
    fn finish_attempt(
        &self,
        py: Python<'_>,
        action_id: String,
        number: u32,
        result: AttemptResult,
        now: Option<u64>,
    ) -> PyResult<()> {
        let now = self.at(now);
        self.run(py, move |j| {
            j.finish_attempt(&action_id, number, &result.inner, now)
        })
    }

    /// Every attempt of the action, oldest first.
    fn attempts(&self, py: Python<'_>, action_id: String) -> PyResult<Vec<AttemptRecord>> {
        let attempts = self.run(py, move |j| j.attempts(&action_id))?;
        Ok(attempts
            .into_iter()
            .map(|a| AttemptRecord {
                attempt_id: a.attempt_id,
                started_at: a.started_at,
                ended_at: a.ended_at,
                result: a.result.map(|r| AttemptResult { inner: r.into() }),
            })
            .collect())
    }

    /// The action's status from its finished attempts (`"pending"`,
    /// `"confirmed"`, `"rejected"` or `"unknown"`), or `None` if it was never begun.
    fn status(&self, py: Python<'_>, action_id: String) -> PyResult<Option<&'static str>> {
        let status = self.run(py, move |j| j.status(&action_id))?;
        Ok(status.map(status_name))
    }

    /// May an attempt be sent to `origin` (`scheme://host:port`) now? `None` if
    /// so, else the seconds until the breaker lets a probe through. A probe let
    /// through keeps others out for `probe_lease` seconds, or until it is recorded.
    #[pyo3(signature = (origin, *, failures = 5, cool_down = 30.0, probe_lease = 30.0, now = None))]
    fn breaker_allow(
        &self,
        py: Python<'_>,
        origin: String,
        failures: u32,
        cool_down: f64,
        probe_lease: f64,
        now: Option<u64>,
    ) -> PyResult<Option<f64>> {
        let config = breaker_config(failures, cool_down)?;
        let lease = seconds(probe_lease, "probe_lease")?;
        let now = self.at(now);
        let verdict = self.run(py, move |j| j.breaker_allow(&origin, &config, lease, now))?;
        Ok(verdict.err().map(|open| open.retry_after.as_secs_f64()))
    }

    /// Reports how an allowed attempt to `origin` ended; returns the breaker's
    /// new state.
    #[pyo3(signature = (origin, result, *, failures = 5, cool_down = 30.0, now = None))]
    fn breaker_record<'py>(
        &self,
        py: Python<'py>,
        origin: String,
        result: AttemptResult,
        failures: u32,
        cool_down: f64,
        now: Option<u64>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let config = breaker_config(failures, cool_down)?;
        let now = self.at(now);
        let state = self.run(py, move |j| {
            j.breaker_record(&origin, &config, &result.inner, now)
        })?;
        breaker_view(py, state)
    }

    /// The kept state of `origin`'s breaker, or `None` if nothing was sent there.
    fn breaker_state<'py>(
        &self,
        py: Python<'py>,
        origin: String,
    ) -> PyResult<Option<Bound<'py, PyDict>>> {
        let state = self.run(py, move |j| j.breaker_state(&origin))?;
        state.map(|s| breaker_view(py, s)).transpose()
    }
}
