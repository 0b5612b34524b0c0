//! The client's rules, core's [`client`](idemkit_core::client) module: attempt
//! results and their classes, the retry policy, action statuses, and the request
//! format `idemkit call` journals (so a Python caller and the CLI share actions).

use std::time::Duration;

use idemkit_core::client::{
    ActionStatus, AttemptClass, AttemptResult as CoreResult, RetryDecision,
    RetryPolicy as CorePolicy,
};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use serde::{Deserialize, Serialize};

use crate::{errors, seconds};

/// What one attempt produced, as far as the client could tell (core's
/// `AttemptResult`). Made with `connect_error()`, `timeout()` or `response(...)`.
#[pyclass(frozen, module = "idemkit_rs._native", eq, from_py_object)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptResult {
    pub(crate) inner: CoreResult,
}

fn as_seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

#[pymethods]
impl AttemptResult {
    /// No connection was made: the request was never sent.
    #[staticmethod]
    fn connect_error() -> Self {
        AttemptResult {
            inner: CoreResult::ConnectError,
        }
    }

    /// The request was (maybe) sent and no answer came in time, or the connection broke.
    #[staticmethod]
    fn timeout() -> Self {
        AttemptResult {
            inner: CoreResult::Timeout,
        }
    }

    /// An answer: its status, the problem type of a problem+json body, its
    /// `Retry-After` in seconds, and a `response-expired` problem's `original_status`.
    #[staticmethod]
    #[pyo3(signature = (status, *, problem_type = None, retry_after = None, original_status = None))]
    fn response(
        status: u16,
        problem_type: Option<String>,
        retry_after: Option<f64>,
        original_status: Option<u16>,
    ) -> PyResult<Self> {
        Ok(AttemptResult {
            inner: CoreResult::Response {
                status,
                problem_type,
                retry_after: retry_after.map(|s| seconds(s, "retry_after")).transpose()?,
                original_status,
            },
        })
    }

    /// `"connect-error"`, `"timeout"` or `"response"`.
    #[getter]
    fn kind(&self) -> &'static str {
        match self.inner {
            CoreResult::ConnectError => "connect-error",
            CoreResult::Timeout => "timeout",
            CoreResult::Response { .. } => "response",
        }
    }

    /// The HTTP status of a response, else `None`.
    #[getter]
    fn status(&self) -> Option<u16> {
        match self.inner {
            CoreResult::Response { status, .. } => Some(status),
            _ => None,
        }
    }

    /// The problem type of a response, else `None`.
    #[getter]
    fn problem_type(&self) -> Option<String> {
        match &self.inner {
            CoreResult::Response { problem_type, .. } => problem_type.clone(),
            _ => None,
        }
    }

    /// The `Retry-After` of a response in seconds, else `None`.
    #[getter]
    fn retry_after(&self) -> Option<f64> {
        match self.inner {
            CoreResult::Response { retry_after, .. } => retry_after.map(as_seconds),
            _ => None,
        }
    }

    /// A `response-expired` problem's `original_status`, else `None`.
    #[getter]
    fn original_status(&self) -> Option<u16> {
        match self.inner {
            CoreResult::Response {
                original_status, ..
            } => original_status,
            _ => None,
        }
    }

    /// `"success"`, `"retryable"`, `"rejected"` or `"uncertain"` (core's `AttemptClass`).
    fn classify(&self) -> &'static str {
        match self.inner.class() {
            AttemptClass::Success => "success",
            AttemptClass::Retryable => "retryable",
            AttemptClass::Rejected => "rejected",
            AttemptClass::Uncertain => "uncertain",
        }
    }

    /// How `idemkit call` names this attempt in its report: `connect-error`,
    /// `timeout`, `201`, `409 request-in-progress`.
    fn describe(&self) -> String {
        match &self.inner {
            CoreResult::ConnectError => "connect-error".into(),
            CoreResult::Timeout => "timeout".into(),
            CoreResult::Response {
                status,
                problem_type: Some(p),
                ..
            } => format!("{status} {}", p.rsplit('/').next().unwrap_or(p)),
            CoreResult::Response { status, .. } => status.to_string(),
        }
    }

    fn __repr__(&self) -> String {
        format!("AttemptResult({})", self.describe())
    }
}

/// The status word of an action status.
pub(crate) fn status_name(status: ActionStatus) -> &'static str {
    status.as_str()
}

/// `action_status(results) -> str`: an action's status from its finished attempts,
/// oldest first: `"pending"`, `"confirmed"`, `"rejected"` or `"unknown"`.
#[pyfunction]
pub fn action_status(results: Vec<AttemptResult>) -> &'static str {
    status_name(ActionStatus::from_attempts(
        results.iter().map(|r| &r.inner),
    ))
}

/// Bounded retries with exponential backoff and full jitter (core's `RetryPolicy`);
/// durations in seconds.
#[pyclass(frozen, module = "idemkit_rs._native")]
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    inner: CorePolicy,
}

#[pymethods]
impl RetryPolicy {
    #[new]
    #[pyo3(signature = (*, max_attempts = 5, base_delay = 0.2, max_delay = 10.0, max_retry_after = 60.0))]
    fn new(
        max_attempts: u32,
        base_delay: f64,
        max_delay: f64,
        max_retry_after: f64,
    ) -> PyResult<Self> {
        Ok(RetryPolicy {
            inner: CorePolicy {
                max_attempts: max_attempts.max(1),
                base_delay: seconds(base_delay, "base_delay")?,
                max_delay: seconds(max_delay, "max_delay")?,
                max_retry_after: seconds(max_retry_after, "max_retry_after")?,
            },
        })
    }

    /// Attempts in all, the first included.
    #[getter]
    fn max_attempts(&self) -> u32 {
        self.inner.max_attempts
    }

    /// What follows attempt number `attempt` (1-based) that produced `result`:
    /// `("retry", seconds)` or `("stop", status)`. `random` is any uniform 64-bit
    /// integer; it only picks the jitter.
    fn decide(
        &self,
        attempt: u32,
        result: &AttemptResult,
        random: u64,
    ) -> (&'static str, f64, &'static str) {
        match self.inner.decide(attempt, &result.inner, random) {
            RetryDecision::RetryAfter(delay) => ("retry", as_seconds(delay), "pending"),
            RetryDecision::Stop(status) => ("stop", 0.0, status_name(status)),
        }
    }
}

/// The request as `idemkit call` journals it: a re-run must describe the same
/// request. The CLI's own format (`serde_json` of these fields, in this order), so
/// an action begun by either continues in the other.
#[derive(Serialize, Deserialize, PartialEq)]
struct JournalledRequest {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// `encode_request(method, url, headers, body) -> bytes`: the journalled payload of
/// a request, byte for byte what `idemkit call` journals.
#[pyfunction]
pub fn encode_request<'py>(
    py: Python<'py>,
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> PyResult<Bound<'py, PyBytes>> {
    let request = JournalledRequest {
        method,
        url,
        headers,
        body,
    };
    serde_json::to_vec(&request)
        .map(|bytes| PyBytes::new(py, &bytes))
        .map_err(|e| errors::argument(format!("the request cannot be journalled: {e}")))
}

/// `decode_request(payload) -> (method, url, headers, body)`: a journalled request,
/// or `JournalError` (code `journal-corrupt`) when the payload is not one.
#[pyfunction]
#[allow(clippy::type_complexity, reason = "the tuple Python unpacks")]
pub fn decode_request<'py>(
    py: Python<'py>,
    payload: &[u8],
) -> PyResult<(String, String, Vec<(String, String)>, Bound<'py, PyBytes>)> {
    let request: JournalledRequest = serde_json::from_slice(payload).map_err(|e| {
        let error = idemkit::journal::JournalError::Corrupt {
            action_id: String::new(),
            detail: format!("journalled request is unreadable: {e}"),
        };
        errors::journal_error(py, &error)
    })?;
    let body = PyBytes::new(py, &request.body);
    Ok((request.method, request.url, request.headers, body))
}
