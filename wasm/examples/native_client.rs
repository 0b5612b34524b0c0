//! The native half of the client-side identity test (`wasm/test/node/agent-journal.test.mjs`).
//!
//! Reads cases (JSON on stdin: an array) and answers each with the native
//! `idemkit-core`, one line per case; the JavaScript test asks the wasm build the
//! same questions and requires identical lines (docs/architecture.md, invariant 6).
//!
//! Cases (`op`):
//! - `derive` (`namespace`, `runId`, `stepId`): `IdempotencyKey::derive`;
//! - `random` (`bytes`: 32 hex digits): `IdempotencyKey::from_random`;
//! - `decide` (`attempt`, `result`, `policy`, `random`: a decimal string):
//!   `RetryPolicy::decide`, printed `retry <ms>` or `stop <status>`;
//! - `status` (`results`): `ActionStatus::from_attempts`, with each result's class.
//!
//! Results are `{ kind, status, problemType, retryAfterMs, originalStatus }` and
//! policies `{ maxAttempts, baseDelayMs, maxDelayMs, maxRetryAfterMs }`, all fields
//! present, as the wasm exports take them.

use std::error::Error;
use std::io::Read;
use std::time::Duration;

use idemkit_core::IdempotencyKey;
use idemkit_core::client::{ActionStatus, AttemptResult, RetryDecision, RetryPolicy};
use idemkit_wasm::interop::attempt_class;
use serde_json::Value;

type Res<T> = Result<T, Box<dyn Error>>;

fn field<'a>(v: &'a Value, name: &str) -> Res<&'a Value> {
    v.get(name)
        .ok_or_else(|| format!("missing field {name}").into())
}

fn u64_of(v: &Value, name: &str) -> Res<u64> {
    field(v, name)?
        .as_u64()
        .ok_or_else(|| format!("{name} is not an unsigned integer").into())
}

fn str_of<'a>(v: &'a Value, name: &str) -> Res<&'a str> {
    field(v, name)?
        .as_str()
        .ok_or_else(|| format!("{name} is not a string").into())
}

fn result(v: &Value) -> Res<AttemptResult> {
    Ok(match str_of(v, "kind")? {
        "connect-error" => AttemptResult::ConnectError,
        "timeout" => AttemptResult::Timeout,
        "response" => AttemptResult::Response {
            status: u16::try_from(u64_of(v, "status")?)?,
            problem_type: field(v, "problemType")?.as_str().map(str::to_owned),
            retry_after: field(v, "retryAfterMs")?
                .as_u64()
                .map(Duration::from_millis),
            original_status: field(v, "originalStatus")?
                .as_u64()
                .map(u16::try_from)
                .transpose()?,
        },
        other => return Err(format!("unknown result kind {other}").into()),
    })
}

fn policy(v: &Value) -> Res<RetryPolicy> {
    Ok(RetryPolicy {
        max_attempts: u32::try_from(u64_of(v, "maxAttempts")?)?,
        base_delay: Duration::from_millis(u64_of(v, "baseDelayMs")?),
        max_delay: Duration::from_millis(u64_of(v, "maxDelayMs")?),
        max_retry_after: Duration::from_millis(u64_of(v, "maxRetryAfterMs")?),
    })
}

fn answer(case: &Value) -> Res<String> {
    Ok(match str_of(case, "op")? {
        "derive" => IdempotencyKey::derive(
            str_of(case, "namespace")?,
            str_of(case, "runId")?,
            str_of(case, "stepId")?,
        )
        .as_str()
        .to_owned(),
        "random" => {
            let hex = str_of(case, "bytes")?;
            let mut bytes = [0u8; 16];
            for (i, byte) in bytes.iter_mut().enumerate() {
                let digits = hex.get(2 * i..2 * i + 2).ok_or("bytes: 32 hex digits")?;
                *byte = u8::from_str_radix(digits, 16)?;
            }
            IdempotencyKey::from_random(bytes).as_str().to_owned()
        }
        "decide" => {
            let attempt = u32::try_from(u64_of(case, "attempt")?)?;
            let random: u64 = str_of(case, "random")?.parse()?;
            match policy(field(case, "policy")?)?.decide(
                attempt,
                &result(field(case, "result")?)?,
                random,
            ) {
                RetryDecision::RetryAfter(delay) => format!("retry {}", delay.as_millis()),
                RetryDecision::Stop(status) => format!("stop {status}"),
            }
        }
        "status" => {
            let results = field(case, "results")?
                .as_array()
                .ok_or("results is not an array")?
                .iter()
                .map(result)
                .collect::<Res<Vec<_>>>()?;
            let classes: Vec<&str> = results.iter().map(|r| attempt_class(r.class())).collect();
            format!(
                "{} {}",
                ActionStatus::from_attempts(&results),
                classes.join(",")
            )
        }
        other => return Err(format!("unknown op {other}").into()),
    })
}

fn main() -> Res<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let cases: Value = serde_json::from_str(&input)?;
    let mut out = String::new();
    for case in cases.as_array().ok_or("expected an array of cases")? {
        out.push_str(&answer(case)?);
        out.push('\n');
    }
    print!("{out}");
    Ok(())
}
