//! The native half of the record byte-identity test (`wasm/test/node/native-identity.test.mjs`).
//!
//! Reads scenarios (JSON on stdin: an array of arrays of steps) and applies each
//! step with the native `idemkit-core` state machine, printing one line per step:
//! the hex of the record to write, `-` when the decision writes nothing, or
//! `error:<code>` when the machine refuses. The JavaScript test runs the same steps
//! through the wasm build and requires identical lines (docs/architecture.md, invariant 6).
//!
//! Step fields mirror the wasm exports: `op` (`claim`, `complete`, `release`,
//! `markUnknown`, `renew`, `resolve`), `now`, `policy`, `token`, `fingerprint`,
//! `owner`, `reason`, `response` (headers and bodies as hex).

use std::error::Error;
use std::io::Read;
use std::time::Duration;

use idemkit_core::hex::lower as hex;
use idemkit_core::machine::{self, ClaimRequest, MismatchStatus, Policy, Resolution, StorePolicy};
use idemkit_core::record::{EffectKind, FencingToken, Record, StoredResponse, UnknownReason};
use idemkit_core::{Fingerprint, RequestFingerprint, UnixMillis};
use idemkit_wasm::interop::Coded;
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

fn unhex(text: &str) -> Res<Vec<u8>> {
    idemkit_core::hex::decode(text).ok_or_else(|| format!("not hex: {text:?}").into())
}

fn policy(v: &Value) -> Res<Policy> {
    let effect = match str_of(v, "effect")? {
        "local" => EffectKind::Local,
        _ => EffectKind::External,
    };
    let mismatch = match u64_of(v, "mismatchStatus")? {
        409 => MismatchStatus::Conflict,
        _ => MismatchStatus::UnprocessableEntity,
    };
    let store = match str_of(v, "store")? {
        "everything" => StorePolicy::StoreEverything,
        _ => StorePolicy::Definitive,
    };
    Ok(Policy::default()
        .with_lease(Duration::from_millis(u64_of(v, "leaseMs")?))
        .with_replay_window(Duration::from_millis(u64_of(v, "replayWindowMs")?))
        .with_record_window(Duration::from_millis(u64_of(v, "recordWindowMs")?))
        .with_effect(effect)
        .with_mismatch(mismatch)
        .with_store(store))
}

fn response(v: &Value) -> Res<StoredResponse> {
    let mut headers = Vec::new();
    for pair in field(v, "headers")?
        .as_array()
        .ok_or("headers is not an array")?
    {
        let name = pair.get(0).and_then(Value::as_str).ok_or("header name")?;
        let value = pair.get(1).and_then(Value::as_str).ok_or("header value")?;
        headers.push((name.to_owned(), unhex(value)?));
    }
    let body = match field(v, "body")? {
        Value::Null => None,
        b => Some(unhex(b.as_str().ok_or("body is not hex")?)?),
    };
    let resource_ref = match field(v, "resourceRef")? {
        Value::Null => None,
        r => Some(r.as_str().ok_or("resourceRef is not a string")?.to_owned()),
    };
    Ok(StoredResponse {
        status: u16::try_from(u64_of(v, "status")?)?,
        headers,
        body,
        resource_ref,
    })
}

/// `{ scheme, value, bodyOnly }` → the claim's fingerprint.
fn request_fingerprint(v: &Value) -> Res<RequestFingerprint> {
    let value = str_of(v, "value")?.parse::<Fingerprint>()?;
    Ok(match u64_of(v, "scheme")? {
        1 => RequestFingerprint::body_only(value),
        2 => RequestFingerprint::with_request_line(value, str_of(v, "bodyOnly")?.parse()?),
        other => return Err(format!("fingerprint scheme {other}").into()),
    })
}

/// Applies one step; returns the output line and the record now stored.
fn step(current: Option<&Record>, s: &Value) -> Res<(String, Option<Record>)> {
    let now = UnixMillis::from_millis(u64_of(s, "now")?);
    let op = str_of(s, "op")?;
    if op == "claim" {
        let request = ClaimRequest {
            fingerprint: request_fingerprint(field(s, "fingerprint")?)?,
            owner: str_of(s, "owner")?.to_owned(),
        };
        let decision = machine::claim(current, &request, &policy(field(s, "policy")?)?, now);
        return Ok(match decision.write {
            Some(record) => (hex(&record.encode()), Some(record)),
            None => ("-".to_owned(), current.cloned()),
        });
    }
    let record = current.ok_or("a transition needs a record")?;
    let token = || -> Res<FencingToken> {
        FencingToken::new(u64_of(s, "token")?).ok_or_else(|| "token 0".into())
    };
    let result = match op {
        "complete" => machine::complete(
            record,
            token()?,
            response(field(s, "response")?)?,
            &policy(field(s, "policy")?)?,
            now,
        ),
        "release" => machine::release(record, token()?, &policy(field(s, "policy")?)?, now),
        "markUnknown" => machine::mark_unknown(
            record,
            token()?,
            UnknownReason::MarkedByWorker(str_of(s, "reason")?.to_owned()),
            now,
        ),
        "renew" => machine::renew(record, token()?, &policy(field(s, "policy")?)?, now),
        "resolve" => {
            let resolution = match field(s, "applied")? {
                Value::Null => Resolution::NotApplied,
                applied => Resolution::Applied(response(applied)?),
            };
            machine::resolve(record, resolution, &policy(field(s, "policy")?)?, now)
        }
        other => return Err(format!("unknown op {other}").into()),
    };
    Ok(match result {
        Ok(next) => (hex(&next.encode()), Some(next)),
        Err(e) => (format!("error:{}", e.code()), Some(record.clone())),
    })
}

fn main() -> Res<()> {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input)?;
    let scenarios: Value = serde_json::from_str(&input)?;
    let mut out = String::new();
    for scenario in scenarios
        .as_array()
        .ok_or("expected an array of scenarios")?
    {
        let mut current: Option<Record> = None;
        for s in scenario
            .as_array()
            .ok_or("a scenario is an array of steps")?
        {
            let (line, next) = step(current.as_ref(), s)?;
            out.push_str(&line);
            out.push('\n');
            current = next;
        }
        out.push_str("end\n");
    }
    print!("{out}");
    Ok(())
}
