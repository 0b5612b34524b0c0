//! Every conversion between JavaScript values and core types, in one place.
//!
//! ## Errors
//!
//! Each core error becomes a JavaScript `Error` whose `name` is `"IdemkitError"`,
//! whose `message` is the core error's `Display` and whose `code` is a stable,
//! documented string (the core's own `code()` where it has one). The JavaScript
//! layer re-throws it as its `IdemkitError` class without changing either.
//!
//! ## Values
//!
//! - time: `now` is a JavaScript number of milliseconds since the epoch;
//! - fencing tokens: `bigint` (a `u64`, never rounded);
//! - policy: `{ leaseMs, replayWindowMs, recordWindowMs, effect: "local" | "external",
//!   mismatchStatus: 422 | 409, store: "definitive" | "everything" }`, every field
//!   required (the JavaScript layer fills in the defaults);
//! - stored response: `{ status, headers: [name, Uint8Array][], body: Uint8Array | null,
//!   resourceRef: string | null }`;
//! - attempt result (client side): `{ kind: "connect-error" }`, `{ kind: "timeout" }` or
//!   `{ kind: "response", status, problemType?, retryAfterMs?, originalStatus? }`
//!   (absent, `null` and `undefined` are the same);
//! - retry policy: `{ maxAttempts?, baseDelayMs?, maxDelayMs?, maxRetryAfterMs? }`, each
//!   field defaulting to core's `RetryPolicy::default()`;
//! - breaker config: `{ failureThreshold?, coolDownMs? }`, each defaulting to core's
//!   `BreakerConfig::default()` (5 failures, 30 000 ms);
//! - breaker state: `{ state: "closed", failures }`, `{ state: "open", until }` or
//!   `{ state: "half-open", probing }`.

use core::cell::RefCell;
use core::fmt::Display;
use core::hash::{BuildHasherDefault, Hasher};
use core::time::Duration;
use std::collections::HashMap;

use idemkit_core::client::{
    ActionStatus, AttemptClass, AttemptResult, BreakerConfig, BreakerState, RetryDecision,
    RetryPolicy,
};
use idemkit_core::fingerprint::{
    FingerprintError, FormError, RequestFingerprint, SCHEME_BODY, SCHEME_REQUEST_LINE, SpecError,
};
use idemkit_core::http::prefer::Wait;
use idemkit_core::http::{Outcome, Refusal, ReplayedHeaderError, Reply};
use idemkit_core::json::{JsonError, PointerError, Profile};
use idemkit_core::machine::{
    Answer, ClaimOutcome, ClaimRequest, Decision, Disposition, GcAction, MismatchStatus, Op,
    Policy, Resolution, StepStart, StorePolicy, TransitionError, Write,
};
use idemkit_core::record::{
    DecodeError, EffectKind, FencingToken, Record, StepState, StoredResponse, UnknownReason,
};
use idemkit_core::{
    Fingerprint, IdempotencyKey, KeyError, LogRef, ParseFingerprintError, RecordIdError, Scope,
    ScopeError, UnixMillis,
};
use js_sys::{Array, Object, Reflect, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use crate::flat::{Flat, Written};

/// The result of an exported function: a JavaScript exception on error.
pub type JsResult<T> = Result<T, JsValue>;

/// A core error with a stable machine-readable code for JavaScript.
pub trait Coded: Display {
    /// The `.code` of the JavaScript error.
    fn code(&self) -> &'static str;
}

impl Coded for KeyError {
    fn code(&self) -> &'static str {
        KeyError::code(self)
    }
}

impl Coded for ScopeError {
    fn code(&self) -> &'static str {
        match self {
            ScopeError::Empty { .. } => "scope-empty",
            ScopeError::TooLong { .. } => "scope-too-long",
            ScopeError::ControlCharacter { .. } => "scope-control-character",
            _ => "scope-invalid",
        }
    }
}

impl Coded for JsonError {
    fn code(&self) -> &'static str {
        JsonError::code(self)
    }
}

impl Coded for FingerprintError {
    fn code(&self) -> &'static str {
        FingerprintError::code(self)
    }
}

impl Coded for FormError {
    fn code(&self) -> &'static str {
        FormError::code(self)
    }
}

impl Coded for SpecError {
    fn code(&self) -> &'static str {
        SpecError::code(self)
    }
}

impl Coded for PointerError {
    fn code(&self) -> &'static str {
        PointerError::code(self)
    }
}

impl Coded for ParseFingerprintError {
    fn code(&self) -> &'static str {
        "invalid-fingerprint"
    }
}

impl Coded for RecordIdError {
    fn code(&self) -> &'static str {
        "record-id-invalid"
    }
}

impl Coded for DecodeError {
    fn code(&self) -> &'static str {
        match self {
            DecodeError::Empty => "record-empty",
            DecodeError::UnknownVersion { .. } => "record-unknown-version",
            _ => "record-corrupt",
        }
    }
}

impl Coded for TransitionError {
    fn code(&self) -> &'static str {
        match self {
            TransitionError::StaleToken { .. } => "stale-token",
            TransitionError::WrongState { .. } => "wrong-state",
            TransitionError::UnknownStep { .. } => "unknown-step",
            TransitionError::StepConflict { .. } => "step-conflict",
            TransitionError::TokensExhausted { .. } => "tokens-exhausted",
            _ => "transition-refused",
        }
    }
}

impl Coded for ReplayedHeaderError {
    fn code(&self) -> &'static str {
        ReplayedHeaderError::code(self)
    }
}

/// A bad argument from JavaScript (wrong type, out of range).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgumentError(pub String);

impl Display for ArgumentError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Coded for ArgumentError {
    fn code(&self) -> &'static str {
        "invalid-argument"
    }
}

/// Converts a core error into the JavaScript error thrown to the caller.
pub fn error<E: Coded>(err: E) -> JsValue {
    let js = js_sys::Error::new(&err.to_string());
    js.set_name("IdemkitError");
    // Setting a data property on a fresh, extensible Error object cannot fail.
    let _ = Reflect::set(&js, &"code".into(), &err.code().into());
    js.into()
}

fn argument(message: impl Into<String>) -> JsValue {
    error(ArgumentError(message.into()))
}

/// `"strict"` or `"rfc8785"`.
pub fn profile(name: &str) -> JsResult<Profile> {
    profile_from_str(name).ok_or_else(|| {
        argument(format!(
            "profile must be \"strict\" or \"rfc8785\", not {name:?}"
        ))
    })
}

fn profile_from_str(name: &str) -> Option<Profile> {
    match name {
        "strict" => Some(Profile::Strict),
        "rfc8785" => Some(Profile::Rfc8785),
        _ => None,
    }
}

/// A count (bytes, items): a finite, non-negative integer below 2^53.
pub fn count(value: f64, what: &str) -> JsResult<u64> {
    millis_from_f64(value)
        .filter(|_| value.fract() == 0.0)
        .ok_or_else(|| {
            argument(format!(
                "{what} must be a non-negative integer, not {value}"
            ))
        })
}

/// Milliseconds since the epoch: a finite, non-negative number (fractions dropped).
pub fn now(millis: f64) -> JsResult<UnixMillis> {
    millis_from_f64(millis)
        .map(UnixMillis::from_millis)
        .ok_or_else(|| {
            argument(format!(
                "now must be milliseconds since the epoch, not {millis}"
            ))
        })
}

fn millis_from_f64(millis: f64) -> Option<u64> {
    // 2^53: every integer below it is exact in a double.
    const MAX_SAFE: f64 = 9_007_199_254_740_992.0;
    if millis.is_finite() && (0.0..MAX_SAFE).contains(&millis) {
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "checked: finite, non-negative and below 2^53"
        )]
        Some(millis.trunc() as u64)
    } else {
        None
    }
}

/// A fencing token (`bigint` ≥ 1).
pub fn token(value: u64) -> JsResult<FencingToken> {
    FencingToken::new(value).ok_or_else(|| argument("a fencing token is at least 1"))
}

/// Runs `f` with the JavaScript string of the property name `field`, made once per
/// name and kept: a fresh `JsValue::from_str` for every property read or written
/// decoded the name's UTF-8 in JavaScript each time, which was most of what a
/// call across the boundary cost (`apply` reads and builds a dozen properties).
///
/// The names are string literals, so the cache is keyed by the literal's address
/// and length, with a multiplicative hash: SipHash over the name's bytes cost
/// more than the property access it saved. Two literals with the same text at
/// different addresses just get one cached string each.
fn with_key<R>(field: &'static str, f: impl FnOnce(&JsValue) -> R) -> R {
    thread_local! {
        static KEYS: RefCell<HashMap<(usize, usize), JsValue, BuildHasherDefault<AddressHasher>>> =
            RefCell::new(HashMap::default());
    }
    KEYS.with(|keys| {
        let mut keys = keys.borrow_mut();
        f(keys
            .entry((field.as_ptr() as usize, field.len()))
            .or_insert_with(|| JsValue::from_str(field)))
    })
}

/// Hashes the `(address, length)` of a string literal: Fibonacci hashing of the
/// two words, enough to spread a few dozen distinct addresses.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_usize(&mut self, word: usize) {
        self.write_u64(word as u64);
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

fn get(obj: &JsValue, field: &'static str) -> JsResult<JsValue> {
    with_key(field, |key| Reflect::get(obj, key))
}

fn get_millis(obj: &JsValue, field: &'static str) -> JsResult<Duration> {
    get(obj, field)?
        .as_f64()
        .and_then(millis_from_f64)
        .map(Duration::from_millis)
        .ok_or_else(|| {
            argument(format!(
                "policy.{field} must be a non-negative number of milliseconds"
            ))
        })
}

fn get_string(obj: &JsValue, field: &'static str, what: &str) -> JsResult<String> {
    get(obj, field)?
        .as_string()
        .ok_or_else(|| argument(format!("{what}.{field} must be a string")))
}

/// The policy object (see the module documentation).
pub fn policy(value: &JsValue) -> JsResult<Policy> {
    if !value.is_object() {
        return Err(argument("policy must be an object"));
    }
    let effect = match get_string(value, "effect", "policy")?.as_str() {
        "local" => EffectKind::Local,
        "external" => EffectKind::External,
        other => {
            return Err(argument(format!(
                "policy.effect must be \"local\" or \"external\", not {other:?}"
            )));
        }
    };
    let mismatch_status = get(value, "mismatchStatus")?.as_f64();
    let mismatch = if mismatch_status == Some(422.0) {
        MismatchStatus::UnprocessableEntity
    } else if mismatch_status == Some(409.0) {
        MismatchStatus::Conflict
    } else {
        return Err(argument("policy.mismatchStatus must be 422 or 409"));
    };
    let store = match get_string(value, "store", "policy")?.as_str() {
        "definitive" => StorePolicy::Definitive,
        "everything" => StorePolicy::StoreEverything,
        other => {
            return Err(argument(format!(
                "policy.store must be \"definitive\" or \"everything\", not {other:?}"
            )));
        }
    };
    Ok(Policy::default()
        .with_lease(get_millis(value, "leaseMs")?)
        .with_replay_window(get_millis(value, "replayWindowMs")?)
        .with_record_window(get_millis(value, "recordWindowMs")?)
        .with_effect(effect)
        .with_mismatch(mismatch)
        .with_store(store))
}

/// `"store"`, `"release"` or `"unknown"`.
#[must_use]
pub fn disposition(d: Disposition) -> &'static str {
    match d {
        Disposition::Store => "store",
        Disposition::Release => "release",
        Disposition::Unknown => "unknown",
    }
}

/// A stored response from `{ status, headers, body, resourceRef }`.
pub fn stored_response(value: &JsValue) -> JsResult<StoredResponse> {
    if !value.is_object() {
        return Err(argument("response must be an object"));
    }
    let status = get(value, "status")?
        .as_f64()
        .filter(|s| s.fract() == 0.0 && (100.0..=999.0).contains(s))
        .ok_or_else(|| argument("response.status must be an integer from 100 to 999"))?;
    let headers_value = get(value, "headers")?;
    let headers_array = headers_value
        .dyn_ref::<Array>()
        .ok_or_else(|| argument("response.headers must be an array of [name, Uint8Array]"))?;
    let mut headers = Vec::with_capacity(headers_array.length() as usize);
    for pair in headers_array.iter() {
        let pair = pair
            .dyn_into::<Array>()
            .map_err(|_| argument("each response header must be [name, Uint8Array]"))?;
        let name = pair
            .get(0)
            .as_string()
            .ok_or_else(|| argument("a response header name must be a string"))?;
        let value = pair
            .get(1)
            .dyn_into::<Uint8Array>()
            .map_err(|_| argument("a response header value must be a Uint8Array"))?;
        headers.push((name, value.to_vec()));
    }
    let body = get(value, "body")?;
    let body = if body.is_null() || body.is_undefined() {
        None
    } else {
        Some(
            body.dyn_into::<Uint8Array>()
                .map_err(|_| argument("response.body must be a Uint8Array or null"))?
                .to_vec(),
        )
    };
    let resource_ref = get(value, "resourceRef")?;
    let resource_ref = if resource_ref.is_null() || resource_ref.is_undefined() {
        None
    } else {
        Some(
            resource_ref
                .as_string()
                .ok_or_else(|| argument("response.resourceRef must be a string or null"))?,
        )
    };
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "checked: an integer from 100 to 999"
    )]
    let status = status as u16;
    Ok(StoredResponse {
        status,
        headers,
        body,
        resource_ref,
    })
}

/// An optional member: `undefined` and `null` are both "absent".
fn get_opt(obj: &JsValue, field: &'static str) -> JsResult<Option<JsValue>> {
    let value = get(obj, field)?;
    Ok((!value.is_null() && !value.is_undefined()).then_some(value))
}

/// An optional non-negative integer member no larger than `max`.
fn get_opt_integer(
    obj: &JsValue,
    field: &'static str,
    what: &str,
    max: f64,
) -> JsResult<Option<u64>> {
    let Some(value) = get_opt(obj, field)? else {
        return Ok(None);
    };
    value
        .as_f64()
        .filter(|v| v.fract() == 0.0 && (0.0..=max).contains(v))
        .and_then(millis_from_f64)
        .map(Some)
        .ok_or_else(|| argument(format!("{what}.{field} must be an integer from 0 to {max}")))
}

/// The retry policy (see the module documentation).
pub fn retry_policy(value: &JsValue) -> JsResult<RetryPolicy> {
    let mut policy = RetryPolicy::default();
    if value.is_null() || value.is_undefined() {
        return Ok(policy);
    }
    if !value.is_object() {
        return Err(argument("retry policy must be an object"));
    }
    const MAX_MILLIS: f64 = 9_007_199_254_740_991.0;
    if let Some(n) = get_opt_integer(value, "maxAttempts", "retry", f64::from(u32::MAX))? {
        policy.max_attempts = u32::try_from(n).unwrap_or(u32::MAX);
        if policy.max_attempts == 0 {
            return Err(argument("retry.maxAttempts must be at least 1"));
        }
    }
    if let Some(ms) = get_opt_integer(value, "baseDelayMs", "retry", MAX_MILLIS)? {
        policy.base_delay = Duration::from_millis(ms);
    }
    if let Some(ms) = get_opt_integer(value, "maxDelayMs", "retry", MAX_MILLIS)? {
        policy.max_delay = Duration::from_millis(ms);
    }
    if let Some(ms) = get_opt_integer(value, "maxRetryAfterMs", "retry", MAX_MILLIS)? {
        policy.max_retry_after = Duration::from_millis(ms);
    }
    Ok(policy)
}

fn duration_millis(d: Duration) -> f64 {
    // Durations come from JavaScript numbers below 2^53 ms (or core's defaults).
    #[allow(
        clippy::cast_precision_loss,
        reason = "every duration here is below 2^53 ms"
    )]
    let ms = d.as_millis() as f64;
    ms
}

/// `{ maxAttempts, baseDelayMs, maxDelayMs, maxRetryAfterMs }` of a policy.
#[must_use]
pub fn retry_policy_view(policy: &RetryPolicy) -> JsValue {
    ObjectBuilder::new()
        .set("maxAttempts", policy.max_attempts)
        .set("baseDelayMs", duration_millis(policy.base_delay))
        .set("maxDelayMs", duration_millis(policy.max_delay))
        .set("maxRetryAfterMs", duration_millis(policy.max_retry_after))
        .build()
}

/// An attempt result (see the module documentation).
pub fn attempt_result(value: &JsValue) -> JsResult<AttemptResult> {
    if !value.is_object() {
        return Err(argument("an attempt result must be an object with a kind"));
    }
    match get(value, "kind")?.as_string().as_deref() {
        Some("connect-error") => Ok(AttemptResult::ConnectError),
        Some("timeout") => Ok(AttemptResult::Timeout),
        Some("response") => {
            let status = get(value, "status")?
                .as_f64()
                .filter(|s| s.fract() == 0.0 && (0.0..=999.0).contains(s))
                .ok_or_else(|| argument("result.status must be an integer from 0 to 999"))?;
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                reason = "checked: an integer from 0 to 999"
            )]
            let status = status as u16;
            let problem_type = match get_opt(value, "problemType")? {
                None => None,
                Some(p) => Some(
                    p.as_string()
                        .ok_or_else(|| argument("result.problemType must be a string or null"))?,
                ),
            };
            let retry_after =
                get_opt_integer(value, "retryAfterMs", "result", 9_007_199_254_740_991.0)?
                    .map(Duration::from_millis);
            let original_status = get_opt_integer(value, "originalStatus", "result", 65_535.0)?
                .and_then(|s| u16::try_from(s).ok());
            Ok(AttemptResult::Response {
                status,
                problem_type,
                retry_after,
                original_status,
            })
        }
        _ => Err(argument(
            "result.kind must be \"connect-error\", \"timeout\" or \"response\"",
        )),
    }
}

/// An array of attempt results.
pub fn attempt_results(value: &JsValue) -> JsResult<Vec<AttemptResult>> {
    let array = value
        .dyn_ref::<Array>()
        .ok_or_else(|| argument("attempt results must be an array"))?;
    array.iter().map(|r| attempt_result(&r)).collect()
}

/// `"success"`, `"retryable"`, `"rejected"` or `"uncertain"`.
#[must_use]
pub fn attempt_class(class: AttemptClass) -> &'static str {
    match class {
        AttemptClass::Success => "success",
        AttemptClass::Retryable => "retryable",
        AttemptClass::Rejected => "rejected",
        AttemptClass::Uncertain => "uncertain",
    }
}

/// The breaker configuration (see the module documentation).
pub fn breaker_config(value: &JsValue) -> JsResult<BreakerConfig> {
    let mut config = BreakerConfig::default();
    if value.is_null() || value.is_undefined() {
        return Ok(config);
    }
    if !value.is_object() {
        return Err(argument("breaker options must be an object"));
    }
    const MAX_MILLIS: f64 = 9_007_199_254_740_991.0;
    if let Some(n) = get_opt_integer(value, "failureThreshold", "breaker", f64::from(u32::MAX))? {
        config.failure_threshold = u32::try_from(n).unwrap_or(u32::MAX);
        if config.failure_threshold == 0 {
            return Err(argument("breaker.failureThreshold must be at least 1"));
        }
    }
    if let Some(ms) = get_opt_integer(value, "coolDownMs", "breaker", MAX_MILLIS)? {
        config.open_for = Duration::from_millis(ms);
    }
    Ok(config)
}

/// `{ failureThreshold, coolDownMs }` of a breaker configuration.
#[must_use]
pub fn breaker_config_view(config: &BreakerConfig) -> JsValue {
    ObjectBuilder::new()
        .set("failureThreshold", config.failure_threshold)
        .set("coolDownMs", duration_millis(config.open_for))
        .build()
}

/// A breaker state (see the module documentation); `undefined` or `null` is a
/// fresh closed breaker.
pub fn breaker_state(value: &JsValue) -> JsResult<BreakerState> {
    if value.is_null() || value.is_undefined() {
        return Ok(BreakerState::Closed { failures: 0 });
    }
    if !value.is_object() {
        return Err(argument("a breaker state must be an object with a state"));
    }
    match get(value, "state")?.as_string().as_deref() {
        Some("closed") => {
            let failures =
                get_opt_integer(value, "failures", "breaker", f64::from(u32::MAX))?.unwrap_or(0);
            Ok(BreakerState::Closed {
                failures: u32::try_from(failures).unwrap_or(u32::MAX),
            })
        }
        Some("open") => {
            let until = get(value, "until")?
                .as_f64()
                .ok_or_else(|| argument("breaker.until must be milliseconds since the epoch"))?;
            Ok(BreakerState::Open { until: now(until)? })
        }
        Some("half-open") => {
            let probing = get(value, "probing")?
                .as_bool()
                .ok_or_else(|| argument("breaker.probing must be a boolean"))?;
            Ok(BreakerState::HalfOpen { probing })
        }
        _ => Err(argument(
            "breaker.state must be \"closed\", \"open\" or \"half-open\"",
        )),
    }
}

/// The JavaScript form of a breaker state.
#[must_use]
pub fn breaker_state_view(state: BreakerState) -> JsValue {
    match state {
        BreakerState::Closed { failures } => ObjectBuilder::new()
            .set("state", "closed")
            .set("failures", failures)
            .build(),
        BreakerState::Open { until } => ObjectBuilder::new()
            .set("state", "open")
            .set("until", millis(until))
            .build(),
        BreakerState::HalfOpen { probing } => ObjectBuilder::new()
            .set("state", "half-open")
            .set("probing", probing)
            .build(),
    }
}

/// `{ allowed, state, retryAfterMs }`: what `allow` said and the state after it.
#[must_use]
pub fn breaker_verdict(allowed: Result<(), Duration>, state: BreakerState) -> JsValue {
    let retry_after = match allowed {
        Ok(()) => None,
        Err(delay) => Some(duration_millis(delay)),
    };
    ObjectBuilder::new()
        .set("allowed", allowed.is_ok())
        .set("state", breaker_state_view(state))
        .set_opt("retryAfterMs", retry_after)
        .build()
}

/// `{ retry: true, delayMs }` or `{ retry: false, status }`.
#[must_use]
pub fn retry_decision(decision: RetryDecision) -> JsValue {
    match decision {
        RetryDecision::RetryAfter(delay) => ObjectBuilder::new()
            .set("retry", true)
            .set("delayMs", duration_millis(delay))
            .build(),
        RetryDecision::Stop(status) => ObjectBuilder::new()
            .set("retry", false)
            .set("status", ActionStatus::as_str(status))
            .build(),
    }
}

/// A GC due time in milliseconds for an adapter's index, or `None` (never due).
/// Clamped to 2^53 − 1 so every adapter stores and orders it exactly; an instant
/// that late (year 287396) only comes from a window of "forever".
#[must_use]
pub fn gc_due_millis(due: Option<UnixMillis>) -> Option<f64> {
    const MAX_SAFE_MILLIS: u64 = (1 << 53) - 1;
    due.map(|t| millis(UnixMillis::from_millis(t.as_millis().min(MAX_SAFE_MILLIS))))
}

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `Reflect.set` without js-sys's exception handling: setting a data
    /// property on a fresh plain object cannot throw, and the handling (a
    /// wrapper that catches) cost more than the set itself.
    #[wasm_bindgen(js_namespace = Reflect, js_name = set)]
    fn set_property(target: &Object, key: &JsValue, value: &JsValue) -> bool;
}

struct ObjectBuilder(Object);

impl ObjectBuilder {
    fn new() -> Self {
        ObjectBuilder(Object::new())
    }

    fn set(self, field: &'static str, value: impl Into<JsValue>) -> Self {
        let value = value.into();
        with_key(field, |key| set_property(&self.0, key, &value));
        self
    }

    fn set_opt<T: Into<JsValue>>(self, field: &'static str, value: Option<T>) -> Self {
        match value {
            Some(v) => self.set(field, v),
            None => self.set(field, JsValue::NULL),
        }
    }

    fn build(self) -> JsValue {
        self.0.into()
    }
}

fn millis(t: UnixMillis) -> f64 {
    // Times past 2^53 ms (year 287396) lose precision; only "never" gets there.
    #[allow(
        clippy::cast_precision_loss,
        reason = "exact for every instant before the year 287396"
    )]
    let ms = t.as_millis() as f64;
    ms
}

fn bytes(b: &[u8]) -> Uint8Array {
    Uint8Array::from(b)
}

fn response(r: &StoredResponse) -> JsValue {
    let headers = Array::new();
    for (name, value) in &r.headers {
        let pair = Array::new();
        pair.push(&JsValue::from_str(name));
        pair.push(&bytes(value));
        headers.push(&pair);
    }
    ObjectBuilder::new()
        .set("status", r.status)
        .set("headers", headers)
        .set_opt("body", r.body.as_deref().map(bytes))
        .set_opt("resourceRef", r.resource_ref.clone())
        .build()
}

fn steps(record_steps: &[idemkit_core::record::Step]) -> Array {
    let out = Array::new();
    for step in record_steps {
        out.push(
            &ObjectBuilder::new()
                .set("name", step.name.as_str())
                .set(
                    "state",
                    match step.state {
                        StepState::Started => "started",
                        StepState::Done => "done",
                    },
                )
                .set("providerKey", step.provider_key.as_str())
                .set_opt("providerRef", step.provider_ref.clone())
                .set("startedAt", millis(step.started_at))
                .set_opt("doneAt", step.done_at.map(millis))
                .build(),
        );
    }
    out
}

/// What `apply` decided, for JavaScript: `{ write, ... }` where `write` is the
/// encoded record to put (`Uint8Array`: insert if none was read, else
/// compare-and-set on the version read; then `writeGcDueAt` is its GC due time,
/// as `gcDueAt` gives it), `"delete"` (delete if the version read
/// is current), or `null` (write nothing), and the answer's fields:
///
/// | op | fields |
/// |---|---|
/// | `claim` | `outcome`, and per outcome: `execute`: `token` (bigint), `attempt`, `leaseExpiresAt`, `steps`; `replay`: `response`; `responseExpired`: `status`, `resourceRef`; `inFlight`: `retryAfterSeconds`; `mismatch`: `status`; `uncertain`: `since` |
/// | `beginStep` | `start` (`"dispatch"` with `providerKey`, `"alreadyDone"` with `providerRef`) |
/// | `recover` | `token` (bigint), `steps` |
/// | `gc` | `action` (`"keep"`, `"pruneBody"`, `"delete"`), `gcDueAt` of the record that stays, `lastToken` of the record read |
/// | the others | nothing more |
///
pub fn decision(decision: &Decision, existing: Option<&Record>) -> JsResult<JsValue> {
    let (write, due) = write_of(&decision.write);
    let out = ObjectBuilder::new().set("write", write);
    // With the record's GC due time for the adapter's index (`writeGcDueAt`),
    // so JavaScript need not decode the bytes again to ask for it.
    let out = match &decision.write {
        Write::Put(_) => out.set_opt("writeGcDueAt", due),
        Write::Delete | Write::Keep => out,
    };
    let out = match &decision.answer {
        Answer::Claim(outcome) => claim_outcome(out, outcome)?,
        Answer::Step(StepStart::Dispatch { provider_key }) => out
            .set("start", "dispatch")
            .set("providerKey", provider_key.as_str()),
        Answer::Step(StepStart::AlreadyDone { provider_ref }) => out
            .set("start", "alreadyDone")
            .set_opt("providerRef", provider_ref.clone()),
        Answer::Recovered(grant) => out
            .set("token", grant.token.get())
            .set("steps", steps(&grant.steps)),
        Answer::Gc(action) => {
            let stays = match &decision.write {
                Write::Put(next) => Some(next),
                Write::Delete => None,
                Write::Keep => existing,
            };
            out.set(
                "action",
                match action {
                    GcAction::Keep => "keep",
                    GcAction::PruneBody => "pruneBody",
                    GcAction::Delete => "delete",
                },
            )
            .set_opt("gcDueAt", gc_due_millis(stays.and_then(Record::gc_due_at)))
            .set("lastToken", existing.map_or(0, |r| r.last_token.get()))
        }
        Answer::Done => out,
        #[allow(unreachable_patterns, reason = "future answers of core")]
        _ => return Err(argument("internal error: unknown answer")),
    };
    Ok(out.build())
}

fn claim_outcome(out: ObjectBuilder, outcome: &ClaimOutcome) -> JsResult<ObjectBuilder> {
    let out = out.set("outcome", claim_outcome_name(outcome)?);
    Ok(match outcome {
        ClaimOutcome::Execute {
            token,
            attempt,
            lease_expires_at,
            steps: record_steps,
        } => out
            .set("token", token.get())
            .set("attempt", *attempt)
            .set("leaseExpiresAt", millis(*lease_expires_at))
            .set("steps", steps(record_steps)),
        ClaimOutcome::Replay { response: r } => out.set("response", response(r)),
        ClaimOutcome::ResponseExpired {
            status,
            resource_ref,
        } => out
            .set("status", *status)
            .set_opt("resourceRef", resource_ref.clone()),
        ClaimOutcome::InFlight { retry_after } => {
            #[allow(
                clippy::cast_precision_loss,
                reason = "seconds of a lease: far below 2^53"
            )]
            let secs = retry_after.as_secs() as f64;
            out.set("retryAfterSeconds", secs)
        }
        ClaimOutcome::Mismatch { status } => out.set("status", *status),
        ClaimOutcome::Uncertain { since } => out.set("since", millis(*since)),
        #[allow(unreachable_patterns, reason = "future outcomes of core")]
        _ => return Err(argument("internal error: unknown claim outcome")),
    })
}

/// A completion's decision [packed](crate::flat::Flat::into_shared), for
/// `Route.complete`, with what to write: the written record's GC due time
/// (NaN: none), then whether its view follows (1 or 0: when asked for and a
/// record was written), and the view as [`record_view`](crate::view::record_view)
/// writes it. A completion answers nothing else.
pub fn completion_decision(decision: &Decision, with_view: bool) -> usize {
    let mut out = Flat::new();
    let write = EncodedWrite::of(&decision.write);
    out.number(write.gc_due_at().unwrap_or(f64::NAN));
    match &decision.write {
        Write::Put(next) if with_view => {
            out.flag(true);
            crate::view::write_record_view(&mut out, next);
        }
        _ => out.flag(false),
    }
    out.into_shared(write.written())
}

/// A decision's write with the record it puts encoded, as
/// [`Flat::into_shared`] sends it.
enum EncodedWrite {
    /// Nothing to write.
    Keep,
    /// Delete the record.
    Delete,
    /// Put this encoded record, due for GC at `gc_due_at` (ms; `None`: never).
    Put {
        record: Vec<u8>,
        gc_due_at: Option<f64>,
    },
}

impl EncodedWrite {
    fn of(write: &Write) -> Self {
        match write {
            Write::Put(next) => EncodedWrite::Put {
                record: next.encode(),
                gc_due_at: gc_due_millis(next.gc_due_at()),
            },
            Write::Delete => EncodedWrite::Delete,
            Write::Keep => EncodedWrite::Keep,
        }
    }

    /// The GC due time of the record written, if one is and GC will act on it.
    fn gc_due_at(&self) -> Option<f64> {
        match self {
            EncodedWrite::Put { gc_due_at, .. } => *gc_due_at,
            EncodedWrite::Keep | EncodedWrite::Delete => None,
        }
    }

    fn written(&self) -> Written<'_> {
        match self {
            EncodedWrite::Put { record, .. } => Written::Put(record),
            EncodedWrite::Delete => Written::Delete,
            EncodedWrite::Keep => Written::Keep,
        }
    }
}

/// What to write as JavaScript takes it (the encoded record, `"delete"` or
/// `null`), and the GC due time of the record written.
fn write_of(write: &Write) -> (JsValue, Option<f64>) {
    let encoded = EncodedWrite::of(write);
    let value = match encoded.written() {
        Written::Put(record) => bytes(record).into(),
        Written::Delete => JsValue::from_str("delete"),
        Written::Keep => JsValue::NULL,
    };
    (value, encoded.gc_due_at())
}

/// The name JavaScript knows `outcome` by (a claim answer's `outcome`).
fn claim_outcome_name(outcome: &ClaimOutcome) -> JsResult<&'static str> {
    Ok(match outcome {
        ClaimOutcome::Execute { .. } => "execute",
        ClaimOutcome::Replay { .. } => "replay",
        ClaimOutcome::ResponseExpired { .. } => "responseExpired",
        ClaimOutcome::InFlight { .. } => "inFlight",
        ClaimOutcome::Mismatch { .. } => "mismatch",
        ClaimOutcome::Uncertain { .. } => "uncertain",
        #[allow(unreachable_patterns, reason = "future outcomes of core")]
        _ => return Err(argument("internal error: unknown claim outcome")),
    })
}

/// A claim's decision [packed](crate::flat::Flat::into_shared), for
/// `Route.claim`, with what to write. In order: the written record's GC due
/// time (NaN: none), then the answer as [`decision`] names it: `outcome`, and per outcome `token`
/// (as [`Flat::token`](crate::flat::Flat::token) writes it), `attempt`, `leaseExpiresAt`, `steps` (execute); whether a
/// `response` follows, and it (replay); `status`, `resourceRef`
/// (responseExpired); `retryAfterSeconds` (inFlight); `status` (mismatch);
/// `since` (uncertain). Last, whether an HTTP `reply` follows (1 or 0), and
/// it: `status`, the header count and each header's name and value (strings),
/// the body's range.
pub fn claim_decision(
    decision: &Decision,
    with_response: bool,
    reply: Option<&idemkit_core::http::Answer>,
) -> JsResult<usize> {
    let Answer::Claim(outcome) = &decision.answer else {
        return Err(argument("internal error: a claim was not answered as one"));
    };
    let mut out = Flat::new();
    let write = EncodedWrite::of(&decision.write);
    out.number(write.gc_due_at().unwrap_or(f64::NAN));
    out.string(claim_outcome_name(outcome)?);
    match outcome {
        ClaimOutcome::Execute {
            token,
            attempt,
            lease_expires_at,
            steps,
        } => {
            out.token(token.get());
            out.number(f64::from(*attempt));
            out.millis(*lease_expires_at);
            out.steps(steps);
        }
        ClaimOutcome::Replay { response } => {
            out.flag(with_response);
            if with_response {
                out.response(response);
            }
        }
        ClaimOutcome::ResponseExpired {
            status,
            resource_ref,
        } => {
            out.number(f64::from(*status));
            out.optional_string(resource_ref.as_deref());
        }
        ClaimOutcome::InFlight { retry_after } => {
            #[allow(
                clippy::cast_precision_loss,
                reason = "seconds of a lease: far below 2^53"
            )]
            out.number(retry_after.as_secs() as f64);
        }
        ClaimOutcome::Mismatch { status } => out.number(f64::from(*status)),
        ClaimOutcome::Uncertain { since } => out.millis(*since),
        #[allow(unreachable_patterns, reason = "future outcomes of core")]
        _ => return Err(argument("internal error: unknown claim outcome")),
    }
    out.flag(reply.is_some());
    if let Some(reply) = reply {
        out.number(f64::from(reply.status));
        out.count(reply.headers.len());
        for (name, value) in &reply.headers {
            out.string(name);
            out.string(value);
        }
        out.range(&reply.body);
    }
    Ok(out.into_shared(write.written()))
}

/// The operation `{ op, ... }` JavaScript asks `apply` to decide:
///
/// | `op` | fields |
/// |---|---|
/// | `"claim"` | `fingerprint` (64 hex), `scheme` (1 or 2), `bodyOnly` (scheme 2: the scheme-1 fingerprint), `owner`, `tokenFloor` (bigint, optional) |
/// | `"complete"` | `token`, `response` |
/// | `"release"`, `"renew"` | `token` |
/// | `"markUnknown"` | `token`, `reason` |
/// | `"beginStep"` | `token`, `name`, `proposedProviderKey` |
/// | `"completeStep"` | `token`, `name`, `providerRef` (optional) |
/// | `"resolve"` | `applied`: the response that was produced, or `null` |
/// | `"recover"` | `owner` |
/// | `"gc"` | — |
pub fn op(value: &JsValue) -> JsResult<Op> {
    let kind = get_string(value, "op", "the operation")?;
    let token = || -> JsResult<FencingToken> {
        let raw = get(value, "token")?;
        let token = u64::try_from(raw)
            .map_err(|_| argument(format!("{kind}: token must be a bigint fencing token")))?;
        self::token(token)
    };
    let text = |field: &'static str| get_string(value, field, &kind);
    let optional_text = |field: &'static str| -> JsResult<Option<String>> {
        match get_opt(value, field)? {
            None => Ok(None),
            Some(v) => v
                .as_string()
                .map(Some)
                .ok_or_else(|| argument(format!("{kind}.{field} must be a string"))),
        }
    };
    Ok(match kind.as_str() {
        "claim" => Op::Claim {
            request: ClaimRequest {
                fingerprint: claim_fingerprint(value)?,
                owner: text("owner")?,
            },
            token_floor: match get_opt(value, "tokenFloor")? {
                None => 0,
                Some(v) => u64::try_from(v)
                    .map_err(|_| argument("claim.tokenFloor must be a non-negative bigint"))?,
            },
        },
        "complete" => Op::Complete {
            token: token()?,
            response: stored_response(&get(value, "response")?)?,
        },
        "release" => Op::Release { token: token()? },
        "renew" => Op::Renew { token: token()? },
        "markUnknown" => Op::MarkUnknown {
            token: token()?,
            reason: UnknownReason::MarkedByWorker(text("reason")?),
        },
        "beginStep" => Op::BeginStep {
            token: token()?,
            name: text("name")?,
            proposed_provider_key: text("proposedProviderKey")?,
        },
        "completeStep" => Op::CompleteStep {
            token: token()?,
            name: text("name")?,
            provider_ref: optional_text("providerRef")?,
        },
        "resolve" => Op::Resolve {
            resolution: match get_opt(value, "applied")? {
                None => Resolution::NotApplied,
                Some(applied) => Resolution::Applied(stored_response(&applied)?),
            },
        },
        "recover" => Op::Recover {
            owner: text("owner")?,
        },
        "gc" => Op::Gc,
        other => return Err(argument(format!("unknown operation {other:?}"))),
    })
}

/// A claim's request fingerprint: `fingerprint` under `scheme`; scheme 2 also
/// carries `bodyOnly`, the same request's scheme-1 fingerprint.
fn claim_fingerprint(value: &JsValue) -> JsResult<RequestFingerprint> {
    let parse = |hex: String| hex.parse::<Fingerprint>().map_err(error);
    let fingerprint = parse(get_string(value, "fingerprint", "claim")?)?;
    let scheme = get(value, "scheme")?.as_f64();
    let body_only = match get_opt(value, "bodyOnly")? {
        None => None,
        Some(v) => {
            Some(parse(v.as_string().ok_or_else(|| {
                argument("claim.bodyOnly must be 64 hex characters")
            })?)?)
        }
    };
    match (scheme, body_only) {
        (Some(s), None) if s == f64::from(SCHEME_BODY) => {
            Ok(RequestFingerprint::body_only(fingerprint))
        }
        (Some(s), Some(body_only)) if s == f64::from(SCHEME_REQUEST_LINE) => Ok(
            RequestFingerprint::with_request_line(fingerprint, body_only),
        ),
        (Some(s), _) if s == f64::from(SCHEME_REQUEST_LINE) => Err(argument(
            "fingerprint scheme 2 needs its scheme-1 fingerprint (bodyOnly)",
        )),
        (Some(s), _) if s == f64::from(SCHEME_BODY) => Err(argument(
            "fingerprint scheme 1 needs no bodyOnly fingerprint",
        )),
        _ => Err(argument("claim.scheme must be 1 or 2")),
    }
}

/// `{ status, headers: [name, value][], body: Uint8Array }` of a ready-made answer.
#[must_use]
pub fn answer(a: &idemkit_core::http::Answer) -> JsValue {
    let headers = Array::new();
    for (name, value) in &a.headers {
        let pair = Array::new();
        pair.push(&JsValue::from_str(name));
        pair.push(&JsValue::from_str(value));
        headers.push(&pair);
    }
    ObjectBuilder::new()
        .set("status", a.status)
        .set("headers", headers)
        .set("body", bytes(&a.body))
        .build()
}

/// `{ scheme, value, bodyOnly }` of a request fingerprint (64 hex each).
pub fn request_fingerprint(fp: &RequestFingerprint) -> JsValue {
    ObjectBuilder::new()
        .set("scheme", fp.scheme())
        .set("value", fp.value().to_string())
        .set("bodyOnly", fp.body_only_fingerprint().to_string())
        .build()
}

/// What `httpAnswer` is asked about: a claim's view (`outcome` and its fields
/// as `apply` answers them, with the `tenant`, `operation` and `key` that name
/// the record's log reference) or a refusal by name (`outcome`: `unauthenticated`,
/// `missingKey`, `invalidKey` with `header`, `bodyTooLarge` with `limit`,
/// `invalidBody` with `code` and `message`, `storeUnavailable` and
/// `tooManyWaiters` with `retryAfterSeconds`, `outcomeNotRecorded` with
/// `originalStatus`).
/// `None`: `execute`, which the handler answers.
pub fn http_outcome(value: &JsValue) -> JsResult<Option<Outcome>> {
    const WHAT: &str = "situation";
    if !value.is_object() {
        return Err(argument("the situation must be an object"));
    }
    let integer = |field: &'static str, max: f64| -> JsResult<u64> {
        get_opt_integer(value, field, WHAT, max)?
            .ok_or_else(|| argument(format!("{WHAT}.{field} must be an integer from 0 to {max}")))
    };
    let status = |field: &'static str| -> JsResult<u16> {
        integer(field, 999.0).map(|s| u16::try_from(s).unwrap_or(u16::MAX))
    };
    let seconds =
        |field: &'static str| integer(field, f64::from(u32::MAX)).map(Duration::from_secs);
    let log_ref = || -> JsResult<LogRef> {
        let scope = Scope::new(
            &get_string(value, "tenant", WHAT)?,
            &get_string(value, "operation", WHAT)?,
        )
        .map_err(error)?;
        let key = IdempotencyKey::new(&get_string(value, "key", WHAT)?).map_err(error)?;
        Ok(scope.record_id(&key).log_ref())
    };
    let claim = |outcome: ClaimOutcome| -> JsResult<Option<Outcome>> {
        Ok(Some(Outcome::Claim(outcome, log_ref()?)))
    };
    let refused = |refusal: Refusal| Ok(Some(Outcome::Refused(refusal)));
    match get_string(value, "outcome", WHAT)?.as_str() {
        "execute" => Ok(None),
        "replay" => claim(ClaimOutcome::Replay {
            response: stored_response(&get(value, "response")?)?,
        }),
        "responseExpired" => claim(ClaimOutcome::ResponseExpired {
            status: status("status")?,
            resource_ref: get_opt(value, "resourceRef")?.and_then(|r| r.as_string()),
        }),
        "inFlight" => claim(ClaimOutcome::InFlight {
            retry_after: seconds("retryAfterSeconds")?,
        }),
        "mismatch" => claim(ClaimOutcome::Mismatch {
            status: status("status")?,
        }),
        "uncertain" => claim(ClaimOutcome::Uncertain {
            since: UnixMillis::from_millis(0),
        }),
        "unauthenticated" => refused(Refusal::Unauthenticated),
        "missingKey" => refused(Refusal::MissingKey),
        "invalidKey" => {
            let header = get_string(value, "header", WHAT)?;
            match IdempotencyKey::parse_header(header.as_bytes()) {
                Err(e) => refused(Refusal::InvalidKey(e)),
                Ok(_) => Err(argument("invalidKey: the header value is a valid key")),
            }
        }
        "bodyTooLarge" => refused(Refusal::BodyTooLarge {
            limit: integer("limit", 9_007_199_254_740_991.0)?,
        }),
        "invalidBody" => refused(Refusal::InvalidBody {
            code: get_string(value, "code", WHAT)?,
            message: get_string(value, "message", WHAT)?,
        }),
        "storeUnavailable" => refused(Refusal::StoreUnavailable {
            retry_after: seconds("retryAfterSeconds")?,
        }),
        "tooManyWaiters" => refused(Refusal::TooManyWaiters {
            retry_after: seconds("retryAfterSeconds")?,
        }),
        "outcomeNotRecorded" => refused(Refusal::OutcomeNotRecorded {
            log_ref: log_ref()?,
            original_status: status("originalStatus")?,
        }),
        other => Err(argument(format!("unknown situation outcome {other:?}"))),
    }
}

/// `{ status, headers: [name, value][], body: Uint8Array }` of what core
/// answers, or `null` for [`Reply::Execute`]. A replayed header value that is
/// not UTF-8 is decoded with replacement characters, as `Headers` would.
#[must_use]
pub fn reply(r: Reply) -> JsValue {
    reply_answer(r).map_or(JsValue::NULL, |a| answer(&a))
}

/// The HTTP answer of `r`, none for `Execute` (the handler runs instead).
pub fn reply_answer(r: Reply) -> Option<idemkit_core::http::Answer> {
    match r {
        Reply::Execute => None,
        Reply::Problem(a) => Some(a),
        Reply::Replay {
            status,
            headers,
            body,
        } => Some(idemkit_core::http::Answer {
            status,
            headers: headers
                .into_iter()
                .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
                .collect(),
            body,
        }),
    }
}

/// Milliseconds of `d` as a double (fractions kept: a third of a lease).
fn millis_f64(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Core's shared numbers (`http::defaults`) and its default policy's windows,
/// named for JavaScript.
#[must_use]
pub fn http_defaults() -> JsValue {
    use idemkit_core::http::defaults as d;
    #[allow(
        clippy::cast_precision_loss,
        reason = "byte limits, a batch size and waiter counts, far below 2^53"
    )]
    let count = |n: usize| n as f64;
    let policy = Policy::default();
    ObjectBuilder::new()
        .set("recordAttempts", d::RECORD_ATTEMPTS)
        .set("recordBackoffMs", millis_f64(d::RECORD_BACKOFF))
        .set("maxExecutionMs", millis_f64(d::DEFAULT_MAX_EXECUTION))
        .set("bodyLimitBytes", count(d::DEFAULT_BODY_LIMIT))
        .set(
            "maxStoredResponseBytes",
            count(d::DEFAULT_MAX_STORED_RESPONSE_BYTES),
        )
        .set(
            "storeRetryAfterSeconds",
            millis_f64(d::DEFAULT_STORE_RETRY_AFTER) / 1000.0,
        )
        .set("gcBatch", count(d::GC_BATCH))
        .set(
            "maxWaitMs",
            millis_f64(idemkit_core::http::prefer::DEFAULT_MAX_WAIT),
        )
        .set(
            "maxWaitersPerKey",
            count(idemkit_core::http::prefer::DEFAULT_MAX_WAITERS_PER_KEY),
        )
        .set(
            "maxWaiters",
            count(idemkit_core::http::prefer::DEFAULT_MAX_WAITERS),
        )
        .set("leaseMs", millis_f64(policy.lease))
        .set("replayWindowMs", millis_f64(policy.replay_window))
        .set("recordWindowMs", millis_f64(policy.record_window))
        .set("mismatchStatus", policy.mismatch.status())
        .build()
}

/// `{ durationMs, preferenceApplied }` of a request's wait: how long it is
/// held while its key runs, and the `Preference-Applied` value to send when it
/// asked (`null` when it did not).
#[must_use]
pub fn wait(wait: &Wait) -> JsValue {
    ObjectBuilder::new()
        .set("durationMs", millis_f64(wait.duration))
        .set(
            "preferenceApplied",
            wait.preference_applied()
                .map_or(JsValue::NULL, JsValue::from),
        )
        .build()
}

/// `{ everyMs, afterErrorMs }` for a lease of `lease`.
#[must_use]
pub fn renewal_cadence(lease: Duration) -> JsValue {
    use idemkit_core::http::defaults as d;
    ObjectBuilder::new()
        .set("everyMs", millis_f64(d::renewal_interval(lease)))
        .set("afterErrorMs", millis_f64(d::renewal_retry_interval(lease)))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable() {
        assert_eq!(Coded::code(&KeyError::Empty), "key-empty");
        assert_eq!(
            Coded::code(&ScopeError::Empty {
                part: idemkit_core::ScopePart::Tenant
            }),
            "scope-empty"
        );
        assert_eq!(Coded::code(&DecodeError::Empty), "record-empty");
        assert_eq!(
            Coded::code(&TransitionError::StaleToken {
                presented: FencingToken::FIRST,
                current: FencingToken::FIRST,
            }),
            "stale-token"
        );
    }

    #[test]
    fn times_must_be_finite_non_negative_and_exact() {
        assert_eq!(
            millis_from_f64(1_700_000_000_123.9),
            Some(1_700_000_000_123)
        );
        assert_eq!(millis_from_f64(0.0), Some(0));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 9_007_199_254_740_992.0] {
            assert_eq!(millis_from_f64(bad), None, "{bad}");
        }
    }

    #[test]
    fn gc_due_times_stay_safe_integers() {
        assert_eq!(gc_due_millis(None), None);
        assert_eq!(
            gc_due_millis(Some(UnixMillis::from_millis(1_700_000_000_000))),
            Some(1_700_000_000_000.0)
        );
        // A window of "forever" saturates: indexed at 2^53 - 1, exact in a double.
        assert_eq!(
            gc_due_millis(Some(UnixMillis::from_millis(u64::MAX))),
            Some(9_007_199_254_740_991.0)
        );
    }

    #[test]
    fn profiles_by_name() {
        assert_eq!(profile_from_str("strict"), Some(Profile::Strict));
        assert_eq!(profile_from_str("rfc8785"), Some(Profile::Rfc8785));
        assert_eq!(profile_from_str("Strict"), None);
    }
}
