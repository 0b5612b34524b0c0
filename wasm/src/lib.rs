//! # idemkit-wasm
//!
//! The engine of the `idemkit` npm package: a thin [wasm-bindgen] wrapper that
//! only delegates to [`idemkit_core`]. Every decision a JavaScript handler acts on
//! (key validation, canonical JSON, fingerprints, the claim decision and every
//! record transition) is made here by the same code the Rust store runs, so the
//! native and wasm builds give byte-identical results (docs/architecture.md, invariant 6).
//!
//! ## What this crate does not do
//!
//! It stores nothing, reads no clock and draws no randomness: JavaScript passes
//! `now` (milliseconds) and the owner id, and writes the returned record bytes
//! atomically in its platform's store (the adapters in `wasm/js/adapters/`).
//!
//! ## How JavaScript drives it
//!
//! Records cross the boundary only as their encoded bytes ([`Record::encode`]).
//! One export decides every operation, as core does: [`apply`] takes the bytes
//! the adapter read (or `undefined`) and an operation (claim, complete, release,
//! mark unknown, renew, a step, resolve, recover, gc) and returns the answer plus
//! what to write: bytes (insert-if-absent / compare-and-set on the version read),
//! `"delete"` (delete-if-version), or nothing. JavaScript runs the one loop
//! around it (`wasm/js/adapters/loop.js`). A JavaScript object is never turned
//! back into a record, so JavaScript cannot forge a state.
//!
//! GC (docs/architecture.md, retention): every write passes [`gc_due_at`] of its bytes to the
//! adapter, which indexes it; `idempotency.gc()` scans the due records and asks
//! [`apply`] about each (`{ op: "gc" }`: keep, prune the body, or delete), then
//! writes or deletes on the version it read.
//!
//! ## Layout
//!
//! - this file: the exported functions, named in camelCase for JavaScript;
//! - [`route`]: [`Route`](route::Route), one route's policy and fingerprint rules
//!   held in WebAssembly, so a claim crosses with flat arguments and raw bytes,
//!   and its decision comes back [`flat`];
//! - [`view`]: a record's view, for `decodeRecord` and a completion's answer;
//! - [`flat`]: the form of both (numbers, one string, bytes), which JavaScript
//!   reads without a property set per field or text to parse;
//! - [`interop`]: every conversion between JavaScript values and Rust types, and
//!   the mapping of core errors to JavaScript `Error`s with a stable `.code`.
//!
//! The client side (`createJournal`, `callWithRetry` in `wasm/js/client.js`) asks
//! core's [`client`](idemkit_core::client) module through [`decide_retry`],
//! [`attempt_class`] and [`action_status`], keeps a circuit breaker per origin
//! whose every transition is core's [`CircuitBreaker`]
//! ([`breaker_allow`], [`breaker_record`]), and makes keys with [`key_from_random`]
//! and [`derive_key`], so JavaScript retries by exactly the rules `idemkit call` uses.
//!
//! The TypeScript types are written by hand (`wasm/js/index.d.ts`); the JavaScript
//! API users see (`createIdempotency`, the adapters) lives in `wasm/js/`.
//!
//! [wasm-bindgen]: https://github.com/wasm-bindgen/wasm-bindgen

#![deny(missing_docs)]

pub mod flat;
pub mod interop;
pub mod route;
pub mod view;

use core::time::Duration;

use idemkit_core::client::{
    ActionStatus, AttemptResult, CircuitBreaker, RetryDecision, RetryPolicy,
};
use idemkit_core::fingerprint::{ContentKind, FingerprintSpec, RequestLine};
use idemkit_core::http;
use idemkit_core::json::CanonicalizeOptions;
use idemkit_core::machine;
use idemkit_core::record::Record;
use idemkit_core::{IdempotencyKey, Scope};
use wasm_bindgen::prelude::*;

use interop::{ArgumentError, JsResult};

/// How often a store re-reads after losing a write race before it gives up:
/// core's `machine::MAX_ATTEMPTS`, the bound the Rust stores use too.
#[wasm_bindgen(js_name = maxAttempts)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[must_use]
pub fn max_attempts() -> u32 {
    idemkit_core::machine::MAX_ATTEMPTS
}

/// Parses an `Idempotency-Key` header value (quoted Structured-Field string or
/// bare) and returns the key; throws `IdemkitError` with a `key-*` code otherwise.
#[wasm_bindgen(js_name = parseKey)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn parse_key(header_value: &str) -> JsResult<String> {
    IdempotencyKey::parse_header(header_value.as_bytes())
        .map(String::from)
        .map_err(interop::error)
}

/// The `Idempotency-Key` value a client sends for `key`: bare when that parses
/// back to the key, else quoted (a key holding `,` or starting with `"`).
#[wasm_bindgen(js_name = keyHeaderValue)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn key_header_value(key: &str) -> JsResult<String> {
    IdempotencyKey::new(key)
        .map(|k| k.to_client_header_value())
        .map_err(interop::error)
}

/// The storage id of `(tenant, operation, key)` as lowercase hex: the injective
/// length-prefixed encoding from core, so two different triples never share an id.
#[wasm_bindgen(js_name = recordId)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn record_id(tenant: &str, operation: &str, key: &str) -> JsResult<String> {
    let scope = Scope::new(tenant, operation).map_err(interop::error)?;
    let key = IdempotencyKey::new(key).map_err(interop::error)?;
    Ok(idemkit_core::hex::lower(scope.record_id(&key).as_bytes()))
}

/// The log reference (16 hex characters) of `(tenant, operation, key)`: safe to
/// log and to show an operator, unlike the key itself.
#[wasm_bindgen(js_name = logRef)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn log_ref(tenant: &str, operation: &str, key: &str) -> JsResult<String> {
    let scope = Scope::new(tenant, operation).map_err(interop::error)?;
    let key = IdempotencyKey::new(key).map_err(interop::error)?;
    Ok(scope.record_id(&key).log_ref().to_string())
}

/// RFC 8785 canonical JSON of `input` (UTF-8 bytes) under `profile`
/// (`"strict"` or `"rfc8785"`); throws with a `json-*` code on rejected input.
#[wasm_bindgen]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn canonicalize(input: &[u8], profile: &str) -> JsResult<String> {
    let opts = CanonicalizeOptions::default().profile(interop::profile(profile)?);
    let bytes = idemkit_core::json::canonicalize_with(input, &opts).map_err(interop::error)?;
    // Canonical output is UTF-8 (the parser accepted only UTF-8 and escapes lone
    // surrogates never survive); a failure here would be a broken invariant of core.
    String::from_utf8(bytes).map_err(|_| {
        interop::error(ArgumentError(
            "internal error: canonical JSON was not UTF-8".into(),
        ))
    })
}

/// The fingerprint spec `fingerprint` and `fingerprint_request` share.
fn spec_of(
    content_type: &str,
    schema_version: u32,
    include: &[String],
    exclude: &[String],
    profile: &str,
) -> JsResult<FingerprintSpec> {
    let mut spec = FingerprintSpec::new(ContentKind::from_mime(content_type))
        .schema_version(schema_version)
        .json_options(CanonicalizeOptions::default().profile(interop::profile(profile)?));
    for pointer in include {
        spec = spec.include(pointer).map_err(interop::error)?;
    }
    for pointer in exclude {
        spec = spec.exclude(pointer).map_err(interop::error)?;
    }
    Ok(spec)
}

/// The scheme-1 fingerprint (64 lowercase hex) of `body`, exactly as `idemkit
/// fingerprint` without `--method`/`--path` computes it: `contentType` picks JSON
/// / form / raw, `include` and `exclude` are RFC 6901 pointers, `profile` the
/// JSON rules.
#[wasm_bindgen]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn fingerprint(
    body: &[u8],
    operation: &str,
    schema_version: u32,
    content_type: &str,
    include: Vec<String>,
    exclude: Vec<String>,
    profile: &str,
) -> JsResult<String> {
    spec_of(content_type, schema_version, &include, &exclude, profile)?
        .fingerprint(operation, body)
        .map(|fp| fp.to_string())
        .map_err(interop::error)
}

/// The scheme-2 fingerprint of a request, exactly as `idemkit fingerprint
/// --method M --path P --query Q` computes it: the request line counts.
/// `query` is the text after `?` (without it); `ignoreQuery` leaves it out,
/// `ignoreQueryParams` the named parameters. Returns `{ scheme, value, bodyOnly }`
/// (`bodyOnly`: the scheme-1 fingerprint of the same request, which `claim`
/// compares with records written before the request line counted).
#[wasm_bindgen(js_name = fingerprintRequest)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[allow(
    clippy::too_many_arguments,
    reason = "one flat call across the wasm boundary"
)]
pub fn fingerprint_request(
    body: &[u8],
    operation: &str,
    schema_version: u32,
    content_type: &str,
    include: Vec<String>,
    exclude: Vec<String>,
    profile: &str,
    method: &str,
    path: &str,
    query: &str,
    ignore_query: bool,
    ignore_query_params: Vec<String>,
) -> JsResult<JsValue> {
    let mut spec = spec_of(content_type, schema_version, &include, &exclude, profile)?;
    for name in &ignore_query_params {
        spec = spec.ignore_query_param(name);
    }
    if ignore_query {
        spec = spec.ignore_query();
    }
    let line = RequestLine::new(method, path, Some(query));
    let fp = spec
        .fingerprint_request(operation, &line, body)
        .map_err(interop::error)?;
    Ok(interop::request_fingerprint(&fp))
}

/// Decides `op` (see `interop::op`: `{ op: "claim" | "complete" | "release" |
/// "markUnknown" | "renew" | "beginStep" | "completeStep" | "resolve" |
/// "recover" | "gc", ... }`) on the record the adapter read (`existing`, its
/// encoded bytes, or `undefined` when there is none) at `now`, under `policy`:
/// core's one entry point, `machine::apply`.
///
/// Returns `{ write, writeGcDueAt, ...answer }` (see `interop::decision`): the adapter writes
/// `write` (a record: insert if nothing was read, else compare-and-set on the
/// version read; `"delete"`: delete if that version is current; `null`:
/// nothing) and only then acts on the answer. A refused transition (a stale
/// token, a wrong state, no record) throws an `IdemkitError` whose code names it.
#[wasm_bindgen]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn apply(
    existing: Option<Vec<u8>>,
    op: &JsValue,
    policy: &JsValue,
    now: f64,
) -> JsResult<JsValue> {
    let op = interop::op(op)?;
    decide(existing.as_deref(), &op, &interop::policy(policy)?, now)
}

/// Core's decision of `op` on the record bytes `existing` at `now`, as
/// JavaScript gets it ([`apply`], and a [`Route`](route::Route)'s calls).
fn decide(
    existing: Option<&[u8]>,
    op: &machine::Op,
    policy: &machine::Policy,
    now: f64,
) -> JsResult<JsValue> {
    let (existing, decision) = decision_on(existing, op, policy, now)?;
    interop::decision(&decision, existing.as_ref())
}

/// The record `existing` decodes to, and core's decision of `op` on it at
/// `now` (JavaScript's milliseconds): what every deciding export starts with.
pub(crate) fn decision_on(
    existing: Option<&[u8]>,
    op: &machine::Op,
    policy: &machine::Policy,
    now: f64,
) -> JsResult<(Option<Record>, machine::Decision)> {
    let existing = existing.map(decode).transpose()?;
    let decision = machine::apply(existing.as_ref(), op, policy, interop::now(now)?)
        .map_err(interop::error)?;
    Ok((existing, decision))
}

/// How a finished attempt with `status` is recorded under `policy`:
/// `"store"`, `"release"` or `"unknown"` (core's `classify_attempt`).
///
/// The evidence that nothing was dispatched, which lets an External attempt
/// answering 408/409/425/429 or a 5xx release instead of becoming Unknown:
/// `nothingDispatched` (the handler said so), or `dispatchesOnlyThroughSteps`
/// with `record` (the record's current bytes) holding no step. Both absent:
/// no evidence.
#[wasm_bindgen]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn classify(
    status: u16,
    policy: &JsValue,
    nothing_dispatched: Option<bool>,
    dispatches_only_through_steps: Option<bool>,
    record: Option<Vec<u8>>,
) -> JsResult<String> {
    classify_under(
        &interop::policy(policy)?,
        status,
        nothing_dispatched,
        dispatches_only_through_steps,
        record.as_deref(),
    )
}

/// [`classify`] under a parsed policy (a [`Route`](route::Route)'s, or one read from JavaScript).
fn classify_under(
    policy: &machine::Policy,
    status: u16,
    nothing_dispatched: Option<bool>,
    dispatches_only_through_steps: Option<bool>,
    record: Option<&[u8]>,
) -> JsResult<String> {
    let explicit = if nothing_dispatched == Some(true) {
        machine::Dispatch::Nothing
    } else {
        machine::Dispatch::Unknown
    };
    let steps = match (dispatches_only_through_steps, record) {
        (Some(true), Some(bytes)) => machine::Dispatch::from_steps(true, &decode(bytes)?.steps),
        _ => machine::Dispatch::Unknown,
    };
    let disposition = machine::classify_attempt(status, policy, explicit.or(steps));
    Ok(interop::disposition(disposition).to_owned())
}

/// This module's linear memory, where JavaScript reads the values
/// [`Flat::into_shared`](flat::Flat::into_shared) leaves (`FlatReader` keeps
/// views of it, made again when the memory grows).
#[wasm_bindgen(js_name = wasmMemory)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[must_use]
pub fn wasm_memory() -> JsValue {
    wasm_bindgen::memory()
}

/// A read-only view of encoded record bytes (state, attempt, token, times,
/// response, steps), for inspection and tests: the address of it
/// [packed](flat::Flat::into_shared) with nothing to write (see [`view`]; the
/// JavaScript `decodeRecord` assembles the object).
#[wasm_bindgen(js_name = decodeRecord)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn decode_record(record: &[u8]) -> JsResult<usize> {
    Ok(view::record_view(&decode(record)?).into_shared(flat::Written::Keep))
}

/// When GC next has something to do with the record `record` (its encoded
/// bytes), in milliseconds, for an adapter's GC index: `undefined` for Running and
/// Unknown records, which GC never touches (core's `Record::gc_due_at`).
#[wasm_bindgen(js_name = gcDueAt)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn gc_due_at(record: &[u8]) -> JsResult<Option<f64>> {
    Ok(interop::gc_due_millis(decode(record)?.gc_due_at()))
}

// ---- HTTP answers and numbers: core's `http` module, so the JavaScript handler
// answers with the same statuses, problem bodies and headers as the Rust
// middleware, and retries, renews and collects by the same numbers.

/// What to send for `situation`: core's `http::reply`. `situation.outcome` is
/// a claim's outcome as `apply` answers it (with its fields, and the `tenant`,
/// `operation` and `key` that name the log reference) or a refusal:
/// `unauthenticated`, `missingKey`, `invalidKey` (`header`), `bodyTooLarge`
/// (`limit`), `invalidBody` (`code`, `message`), `storeUnavailable` and
/// `tooManyWaiters` (`retryAfterSeconds`), `outcomeNotRecorded`
/// (`originalStatus`). Returns
/// `{ status, headers: [name, value][], body: Uint8Array }`, or `null` for
/// `execute` (the handler answers).
#[wasm_bindgen(js_name = httpAnswer)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn http_answer(situation: &JsValue) -> JsResult<JsValue> {
    Ok(match interop::http_outcome(situation)? {
        Some(outcome) => interop::reply(http::reply(outcome)),
        None => JsValue::NULL,
    })
}

/// Core's `http::defaults` and default `Policy`: `{ recordAttempts,
/// recordBackoffMs, maxExecutionMs, bodyLimitBytes, maxStoredResponseBytes,
/// storeRetryAfterSeconds, gcBatch, maxWaitMs, maxWaitersPerKey, maxWaiters, leaseMs, replayWindowMs,
/// recordWindowMs, mismatchStatus }`.
#[wasm_bindgen(js_name = httpDefaults)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[must_use]
pub fn http_defaults() -> JsValue {
    interop::http_defaults()
}

/// How often a lease of `lease_ms` is renewed, and how soon after a failed
/// renewal: `{ everyMs, afterErrorMs }` (core's `http::defaults`).
#[wasm_bindgen(js_name = renewalCadence)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn renewal_cadence(lease_ms: f64) -> JsResult<JsValue> {
    let lease = Duration::from_millis(interop::count(lease_ms.trunc(), "leaseMs")?);
    Ok(interop::renewal_cadence(lease))
}

/// The seconds of the first `wait` preference among a request's `Prefer`
/// header lines (`values`, in order), or `undefined` when there is none or the
/// first one's value is not a non-negative integer (core's `prefer_wait_in`).
/// A value past 2^53 - 1 is returned as 2^53 - 1: any cap is far below it.
#[wasm_bindgen(js_name = preferWait)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[must_use]
pub fn prefer_wait(values: Vec<String>) -> Option<f64> {
    const MAX_SAFE: u64 = (1 << 53) - 1;
    let seconds = http::prefer::prefer_wait_in(values.iter().map(String::as_bytes))?;
    #[allow(
        clippy::cast_precision_loss,
        reason = "at most 2^53 - 1, exact in a double"
    )]
    let seconds = seconds.min(MAX_SAFE) as f64;
    Some(seconds)
}

/// The wait a request gets: core's `WaitRule { default_wait, max_wait }` asked
/// about `requested_seconds` (what `preferWait` found; `undefined`: the
/// request stated none, so the route's default). Returns `{ durationMs,
/// preferenceApplied }`: how long to hold the request while its key runs (0:
/// not at all) and the `Preference-Applied` value to send when it asked
/// (`wait=N`, N the whole seconds granted), else `null`.
#[wasm_bindgen(js_name = waitFor)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn wait_for(requested_seconds: Option<f64>, default_ms: f64, max_ms: f64) -> JsResult<JsValue> {
    let requested = requested_seconds
        .map(|s| interop::count(s, "the requested wait (seconds)"))
        .transpose()?;
    let rule = http::prefer::WaitRule {
        default_wait: Duration::from_millis(interop::count(default_ms, "waitMs")?),
        max_wait: Duration::from_millis(interop::count(max_ms, "maxWaitMs")?),
    };
    Ok(interop::wait(&rule.wait_for(requested)))
}

/// Milliseconds a waiter sleeps before its poll number `polls_so_far` (from 0)
/// of the record when nothing can wake it: core's `fallback_poll` (50 ms,
/// doubling, at most 1 s).
#[wasm_bindgen(js_name = fallbackPoll)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[must_use]
pub fn fallback_poll(polls_so_far: u32) -> f64 {
    http::prefer::fallback_poll(polls_so_far).as_secs_f64() * 1000.0
}

/// Whether a response header is in the default list of stored and replayed
/// headers (core's `DEFAULT_REPLAYED_HEADERS`).
#[wasm_bindgen(js_name = isReplayableHeader)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn is_replayable_header(name: &str) -> bool {
    idemkit_core::http::is_replayable_header(name)
}

/// The allow list of stored and replayed response headers, lowercase: `names`
/// checked by core's `ReplayedHeaders::new` (a credential or cookie header, a
/// header of one transmission or a name that is not one is refused), or the
/// defaults when `names` is `undefined`.
#[wasm_bindgen(js_name = replayedHeaders)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn replayed_headers(names: Option<Vec<String>>) -> JsResult<Vec<String>> {
    let list = match names {
        None => idemkit_core::http::ReplayedHeaders::default(),
        Some(names) => idemkit_core::http::ReplayedHeaders::new(&names).map_err(interop::error)?,
    };
    Ok(list.names().to_vec())
}

// ---- The client side: core's `client` module and key constructors, so a JavaScript
// caller retries, classifies and judges an action exactly as `idemkit call` does.
// Attempt results cross the boundary as `{ kind: "connect-error" | "timeout" |
// "response", status, problemType, retryAfterMs, originalStatus }` (see
// `interop::attempt_result`).

/// A random idempotency key in UUID version 4 form from exactly 16 bytes that
/// JavaScript drew with `crypto.getRandomValues` (core draws no randomness).
#[wasm_bindgen(js_name = keyFromRandom)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn key_from_random(random: &[u8]) -> JsResult<String> {
    let bytes: [u8; 16] = random.try_into().map_err(|_| {
        interop::error(ArgumentError(format!(
            "keyFromRandom needs exactly 16 random bytes, got {}",
            random.len()
        )))
    })?;
    Ok(IdempotencyKey::from_random(bytes).as_str().to_owned())
}

/// The deterministic key of `(namespace, runId, stepId)`: core's
/// `IdempotencyKey::derive`, `ik1-` followed by 32 hex characters.
#[wasm_bindgen(js_name = deriveKey)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
#[must_use]
pub fn derive_key(namespace: &str, run_id: &str, step_id: &str) -> String {
    IdempotencyKey::derive(namespace, run_id, step_id)
        .as_str()
        .to_owned()
}

/// Validates a key given without header syntax (1–255 visible ASCII characters);
/// returns it unchanged or throws with a `key-*` code.
#[wasm_bindgen(js_name = checkKey)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn check_key(key: &str) -> JsResult<String> {
    IdempotencyKey::new(key)
        .map(String::from)
        .map_err(interop::error)
}

/// The retry policy with every field filled in: the given `{ maxAttempts,
/// baseDelayMs, maxDelayMs, maxRetryAfterMs }` over core's defaults. Throws on a
/// field of the wrong type or range.
#[wasm_bindgen(js_name = retryPolicy)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn retry_policy(options: &JsValue) -> JsResult<JsValue> {
    Ok(interop::retry_policy_view(&interop::retry_policy(options)?))
}

/// How one attempt is classified: `"success"`, `"retryable"`, `"rejected"` or
/// `"uncertain"`.
#[wasm_bindgen(js_name = attemptClass)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn attempt_class(result: &JsValue) -> JsResult<String> {
    Ok(interop::attempt_class(interop::attempt_result(result)?.class()).to_owned())
}

/// An action's status from its finished attempts' results, oldest first:
/// `"pending"`, `"confirmed"`, `"rejected"` or `"unknown"` (core's
/// `ActionStatus::from_attempts`).
#[wasm_bindgen(js_name = actionStatus)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn action_status(results: &JsValue) -> JsResult<String> {
    let results = interop::attempt_results(results)?;
    Ok(ActionStatus::from_attempts(&results).as_str().to_owned())
}

/// What follows attempt number `attempt` (1-based, counted in this run) that
/// produced `result`, under `policy` (as [`retry_policy`] accepts it). `random` is
/// a uniformly distributed `u64` (a `bigint`) that picks the full jitter.
/// Returns `{ retry: true, delayMs }` or `{ retry: false, status }`.
#[wasm_bindgen(js_name = decideRetry)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn decide_retry(
    attempt: u32,
    result: &JsValue,
    policy: &JsValue,
    random: u64,
) -> JsResult<JsValue> {
    decide_with(attempt, result, policy, random, RetryPolicy::decide)
}

/// `decideRetry` for a client whose retry after a 409 `request-in-progress`
/// asks the server to wait (`Prefer: wait=N`): core's
/// `RetryPolicy::decide_asking_to_wait` (the backoff alone, not the
/// lease's `Retry-After`).
#[wasm_bindgen(js_name = decideRetryAskingToWait)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn decide_retry_asking_to_wait(
    attempt: u32,
    result: &JsValue,
    policy: &JsValue,
    random: u64,
) -> JsResult<JsValue> {
    decide_with(
        attempt,
        result,
        policy,
        random,
        RetryPolicy::decide_asking_to_wait,
    )
}

/// Reads the policy and the attempt's result, and answers `decide`'s decision.
fn decide_with(
    attempt: u32,
    result: &JsValue,
    policy: &JsValue,
    random: u64,
    decide: fn(&RetryPolicy, u32, &AttemptResult, u64) -> RetryDecision,
) -> JsResult<JsValue> {
    let policy = interop::retry_policy(policy)?;
    let result = interop::attempt_result(result)?;
    Ok(interop::retry_decision(decide(
        &policy, attempt, &result, random,
    )))
}

/// The breaker configuration with every field filled in: the given
/// `{ failureThreshold, coolDownMs }` over core's defaults. Throws on a field of
/// the wrong type or range.
#[wasm_bindgen(js_name = breakerConfig)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn breaker_config(options: &JsValue) -> JsResult<JsValue> {
    Ok(interop::breaker_config_view(&interop::breaker_config(
        options,
    )?))
}

/// May a call be made at `now` through the breaker in `state` (`undefined` for a
/// fresh one) under `config`? Returns `{ allowed, state, retryAfterMs }`: the state
/// to keep and, when refused, how long until a call may be tried again. With
/// `probeLeaseMs` it is core's `CircuitBreaker::allow_leasing_probe` (a probe let
/// through keeps the breaker open that long, or until it is recorded), without it
/// `CircuitBreaker::allow` (half-open, `retryAfterMs` 0 while the probe is out).
#[wasm_bindgen(js_name = breakerAllow)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn breaker_allow(
    state: &JsValue,
    config: &JsValue,
    now: f64,
    probe_lease_ms: Option<f64>,
) -> JsResult<JsValue> {
    let now = interop::now(now)?;
    let mut breaker = CircuitBreaker::from_state(
        interop::breaker_config(config)?,
        interop::breaker_state(state)?,
    );
    let allowed = match probe_lease_ms {
        Some(ms) => {
            let lease = Duration::from_millis(interop::count(ms, "probeLeaseMs")?);
            breaker.allow_leasing_probe(now, lease)
        }
        None => breaker.allow(now),
    }
    .map_err(|open| open.retry_after);
    Ok(interop::breaker_verdict(allowed, breaker.state()))
}

/// The state after an allowed call produced `result` at `now` (core's
/// `CircuitBreaker::record`: a connect error, a timeout, 408, 429 and 5xx are
/// failures of the dependency, any other answer a success).
#[wasm_bindgen(js_name = breakerRecord)]
#[allow(unsafe_code, reason = "wasm-bindgen's generated export shim")]
pub fn breaker_record(
    state: &JsValue,
    config: &JsValue,
    result: &JsValue,
    now: f64,
) -> JsResult<JsValue> {
    let now = interop::now(now)?;
    let mut breaker = CircuitBreaker::from_state(
        interop::breaker_config(config)?,
        interop::breaker_state(state)?,
    );
    breaker.record(&interop::attempt_result(result)?, now);
    Ok(interop::breaker_state_view(breaker.state()))
}

fn decode(bytes: &[u8]) -> JsResult<Record> {
    Record::decode(bytes).map_err(interop::error)
}
