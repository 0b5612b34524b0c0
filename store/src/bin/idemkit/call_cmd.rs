//! `idemkit call`: a curl-like client that sends one logical action with one
//! journalled idempotency key, retrying safely.

use std::io::Read;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use idemkit::UnixMillis;
use idemkit::core::client::{
    ActionStatus, AttemptResult, BreakerConfig, BreakerOpen, BreakerState, RetryDecision,
    RetryPolicy,
};
use idemkit::journal::{Journal, JournalError};
use serde::{Deserialize, Serialize};

use crate::exit;

/// Send a state-changing HTTP request as one logical action.
///
/// The first run with an action id creates its idempotency key and journals it
/// with the request before anything is sent; every retry and every later run
/// with the same action id sends the same key. Credentials are sent but never
/// journalled: the Authorization, Cookie and Proxy-Authorization headers, and
/// every header named with --secret-header, are left out of the journalled
/// request and taken from each run's command line, so a rerun with a rotated
/// token continues the same action. Retries are bounded, exponential
/// with full jitter, and honour Retry-After; 4xx answers other than 408/409/425/429
/// and `409 outcome-uncertain` stop them.
///
/// A circuit breaker per origin (scheme://host:port), kept in the journal, stops
/// successive actions (separate runs included) from hammering a failing endpoint:
/// after --breaker-failures consecutive failed attempts (connect error, timeout,
/// 408, 429, 5xx) it opens, and every attempt is refused without sending for
/// --breaker-cool-down-ms; then one probe is let through, and its success closes
/// the breaker again (its failure reopens it). A refused action stays pending.
///
/// Prints one JSON object: {"action_id", "idempotency_key", "status", "http_status",
/// "attempts", "body", "breaker": {"origin", "state", "failures", "retry_at"}}.
/// Exit status: 0 confirmed, 2 rejected, 3 pending because the origin's circuit
/// breaker is open (nothing more was sent; run again after "retry_at", Unix ms),
/// 75 pending (safe to run again later), 69 unknown (a person or reconciler must
/// decide), 65 the action id was used for another request, 64 a bad command line
/// (a URL that is not absolute http or https), 74 the journal failed.
///
/// Examples:
///   idemkit call --journal agent.journal --action-id run-42/book \
///     -X POST -H 'Authorization: Bearer acme' -H 'Content-Type: application/json' \
///     -d '{"customer_id":"c-1","slot_id":"s-9"}' http://127.0.0.1:8080/appointments
///   idemkit call --journal agent.journal --action-id run-42/book ... (same request: same key)
///   idemkit call ... -H "X-Api-Key: $KEY" --secret-header X-Api-Key ... (not journalled)
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct CallArgs {
    /// The journal file (created if absent).
    #[arg(long, value_name = "PATH")]
    journal: std::path::PathBuf,
    /// The logical action's id, from the workflow (run and step), not from a model.
    #[arg(long, value_name = "ID")]
    action_id: String,
    /// The HTTP method.
    #[arg(
        short = 'X',
        long = "request",
        default_value = "POST",
        value_name = "METHOD"
    )]
    method: String,
    /// A request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// A header that carries a secret (repeatable): sent on every attempt, never
    /// journalled, and not part of what a rerun must repeat. Authorization,
    /// Cookie and Proxy-Authorization are always treated so.
    #[arg(long = "secret-header", value_name = "NAME")]
    secret_headers: Vec<String>,
    /// The body: DATA, or @FILE to read a file (@- for stdin).
    #[arg(short = 'd', long = "data", value_name = "DATA")]
    data: Option<String>,
    /// Per-attempt timeout in milliseconds.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    timeout_ms: u64,
    /// Attempts in all, the first included.
    #[arg(long, default_value_t = 5, value_name = "N")]
    max_attempts: u32,
    /// The backoff ceiling for the first retry, in milliseconds.
    #[arg(long, default_value_t = 200, value_name = "N")]
    base_delay_ms: u64,
    /// The largest backoff ceiling, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    max_delay_ms: u64,
    /// After a 409 `request-in-progress`, the retry asks the server to hold
    /// it up to N seconds until the first attempt's answer exists
    /// (`Prefer: wait=N`), and goes after the backoff instead of the
    /// `Retry-After`; that attempt's timeout grows by N. 0: never ask.
    #[arg(long, default_value_t = 10, value_name = "N")]
    wait_s: u64,
    /// Consecutive failed attempts to the URL's origin, across runs, that open
    /// its circuit breaker.
    #[arg(long, default_value_t = 5, value_name = "N",
          value_parser = clap::value_parser!(u32).range(1..))]
    breaker_failures: u32,
    /// How long an open breaker refuses attempts before it lets one probe
    /// through, in milliseconds.
    #[arg(long, default_value_t = 30_000, value_name = "N")]
    breaker_cool_down_ms: u64,
    /// The URL.
    url: String,
}

/// Request headers that carry credentials: sent, never journalled.
const SECRET_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

/// The request as journalled: a re-run must describe the same request. Its
/// headers never include a secret one (see [`SECRET_HEADERS`]).
#[derive(Serialize, Deserialize, PartialEq)]
struct JournalledRequest {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

#[derive(Serialize)]
struct AttemptReport {
    number: u32,
    attempt_id: String,
    started_at: u64,
    ended_at: u64,
    outcome: String,
    http_status: Option<u16>,
}

#[derive(Serialize)]
struct CallReport {
    action_id: String,
    idempotency_key: String,
    resumed: bool,
    status: &'static str,
    http_status: Option<u16>,
    attempts: Vec<AttemptReport>,
    body: Option<String>,
    breaker: BreakerReport,
}

/// The origin's circuit breaker after the run.
#[derive(Serialize)]
struct BreakerReport {
    origin: String,
    /// `closed` or `open` (a probe that is out reads as open).
    state: &'static str,
    /// Consecutive failures counted while closed.
    failures: Option<u32>,
    /// When open: the Unix millisecond from which an attempt may be tried again.
    retry_at: Option<u64>,
}

impl BreakerReport {
    fn new(origin: &str, state: BreakerState, now: UnixMillis) -> Self {
        let (state, failures, retry_at) = match state {
            BreakerState::Closed { failures } => ("closed", Some(failures), None),
            BreakerState::Open { until } => ("open", None, Some(until.max(now).as_millis())),
            BreakerState::HalfOpen { probing: true } => ("open", None, Some(now.as_millis())),
            BreakerState::HalfOpen { probing: false } => ("half-open", None, None),
        };
        BreakerReport {
            origin: origin.to_owned(),
            state,
            failures,
            retry_at,
        }
    }
}

fn now() -> UnixMillis {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    UnixMillis::from_millis(u64::try_from(millis).unwrap_or(u64::MAX))
}

fn fail(code: u8, message: impl std::fmt::Display) -> ExitCode {
    eprintln!("idemkit call: {message}");
    ExitCode::from(code)
}

pub(crate) fn run(args: CallArgs) -> ExitCode {
    let body = match read_data(args.data.as_deref()) {
        Ok(body) => body,
        Err(e) => return fail(exit::NO_INPUT, e),
    };
    for name in &args.secret_headers {
        if ureq::http::HeaderName::from_bytes(name.trim().as_bytes()).is_err() {
            return fail(
                exit::USAGE,
                format!("--secret-header {name:?} is not a header name"),
            );
        }
    }
    let is_secret = |name: &str| {
        SECRET_HEADERS.iter().any(|s| s.eq_ignore_ascii_case(name))
            || args
                .secret_headers
                .iter()
                .any(|s| s.trim().eq_ignore_ascii_case(name))
    };
    let mut headers = Vec::new();
    let mut secrets = Vec::new();
    for header in &args.headers {
        match header.split_once(':') {
            Some((name, value)) if !name.trim().is_empty() => {
                let name = name.trim().to_owned();
                if name.eq_ignore_ascii_case("idempotency-key") {
                    return fail(
                        exit::USAGE,
                        "the Idempotency-Key header comes from the journal; do not set it",
                    );
                }
                let pair = (name, value.trim().to_owned());
                if is_secret(&pair.0) {
                    secrets.push(pair);
                } else {
                    headers.push(pair);
                }
            }
            _ => {
                return fail(
                    exit::USAGE,
                    format!("header {header:?} is not `Name: value`"),
                );
            }
        }
    }
    let origin = match origin_of(&args.url) {
        Ok(origin) => origin,
        Err(e) => return fail(exit::USAGE, e),
    };
    let request = JournalledRequest {
        method: args.method.to_uppercase(),
        url: args.url.clone(),
        headers,
        body,
    };
    let payload = match serde_json::to_vec(&request) {
        Ok(p) => p,
        Err(e) => return fail(exit::SOFTWARE, e),
    };

    let journal = match Journal::open(&args.journal) {
        Ok(j) => j,
        Err(e) => return fail(exit::IO_ERR, e),
    };
    let action = match journal.begin(&args.action_id, &payload, now()) {
        Ok(action) => action,
        Err(e @ JournalError::PayloadChanged { .. }) => {
            match journalled_with_secrets(&journal, &args.action_id, &request, &is_secret) {
                Ok(Some(action)) => action,
                Ok(None) => return fail(exit::DATA_ERR, e),
                Err(e) => return fail(exit::IO_ERR, e),
            }
        }
        Err(e) => return fail(exit::IO_ERR, e),
    };
    // From here on the journalled request is the one sent, byte for byte, with
    // this run's secret headers.
    let mut request: JournalledRequest = match serde_json::from_slice(&action.payload) {
        Ok(r) => r,
        Err(e) => {
            return fail(
                exit::IO_ERR,
                format!("journalled request is unreadable: {e}"),
            );
        }
    };
    request.headers.retain(|(name, _)| !is_secret(name));
    request.headers.extend(secrets);

    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_millis(args.timeout_ms)))
        .http_status_as_error(false)
        .build()
        .into();
    // A retry that asks to wait may be held that long before its answer.
    let waiting_agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(
            Duration::from_millis(args.timeout_ms) + Duration::from_secs(args.wait_s),
        ))
        .http_status_as_error(false)
        .build()
        .into();
    let prefer_wait = format!("wait={}", args.wait_s);
    let mut ask_to_wait = false;
    let policy = RetryPolicy {
        max_attempts: args.max_attempts.max(1),
        base_delay: Duration::from_millis(args.base_delay_ms),
        max_delay: Duration::from_millis(args.max_delay_ms),
        ..RetryPolicy::default()
    };
    let breaker = BreakerConfig {
        failure_threshold: args.breaker_failures,
        open_for: Duration::from_millis(args.breaker_cool_down_ms),
    };
    // A probe keeps others out for as long as it may take, and no longer.
    let probe_lease = breaker.open_for.max(Duration::from_millis(args.timeout_ms));

    let mut attempts = Vec::new();
    let mut last_status = None;
    let mut last_body = None;
    let mut refused: Option<BreakerOpen> = None;
    let final_status = loop {
        match journal.breaker_allow(&origin, &breaker, probe_lease, now()) {
            Ok(Ok(())) => {}
            Ok(Err(open)) => {
                refused = Some(open);
                break journal.status(&action.action_id);
            }
            Err(e) => return fail(exit::IO_ERR, e),
        }
        let start = match journal.start_attempt(&action.action_id, now()) {
            Ok(s) => s,
            Err(e) => return fail(exit::IO_ERR, e),
        };
        let started_at = now();
        // Bare unless the key must be quoted (it holds ',' or starts with '"').
        let key_header = action.key.to_client_header_value();
        let (result, body) = if ask_to_wait {
            // Only this attempt asks: the journalled request stays as it was.
            request
                .headers
                .push(("prefer".to_owned(), prefer_wait.clone()));
            let sent = send(&waiting_agent, &request, &key_header, &start.attempt_id);
            request.headers.pop();
            sent
        } else {
            send(&agent, &request, &key_header, &start.attempt_id)
        };
        let ended_at = now();
        if let Err(e) = journal.finish_attempt(&action.action_id, start.number, &result, ended_at) {
            return fail(exit::IO_ERR, e);
        }
        if let Err(e) = journal.breaker_record(&origin, &breaker, &result, ended_at) {
            return fail(exit::IO_ERR, e);
        }
        let http_status = match &result {
            AttemptResult::Response { status, .. } => Some(*status),
            _ => None,
        };
        if http_status.is_some() {
            last_status = http_status;
            last_body = body;
        }
        attempts.push(AttemptReport {
            number: start.number,
            attempt_id: start.attempt_id,
            started_at: started_at.as_millis(),
            ended_at: ended_at.as_millis(),
            outcome: describe(&result),
            http_status,
        });
        let attempt_in_this_run = u32::try_from(attempts.len()).unwrap_or(u32::MAX);
        ask_to_wait = args.wait_s > 0 && result.is_in_progress();
        let decision = if ask_to_wait {
            policy.decide_asking_to_wait(attempt_in_this_run, &result, random_u64())
        } else {
            policy.decide(attempt_in_this_run, &result, random_u64())
        };
        match decision {
            RetryDecision::RetryAfter(delay) => std::thread::sleep(delay),
            RetryDecision::Stop(_) => break journal.status(&action.action_id),
        }
    };
    let status = match final_status {
        Ok(Some(status)) => status,
        Ok(None) => ActionStatus::Pending,
        Err(e) => return fail(exit::IO_ERR, e),
    };
    let breaker_state = match journal.breaker_state(&origin) {
        Ok(state) => state.unwrap_or(BreakerState::Closed { failures: 0 }),
        Err(e) => return fail(exit::IO_ERR, e),
    };
    let stopped_by_breaker = refused.is_some() && status == ActionStatus::Pending;
    if let (Some(open), true) = (refused, stopped_by_breaker) {
        eprintln!(
            "idemkit call: the circuit breaker for {origin} is open: nothing {}sent; \
             the action stays pending; run again in {} ms",
            if attempts.is_empty() { "" } else { "more " },
            open.retry_after.as_millis()
        );
    }
    let report = CallReport {
        action_id: action.action_id.clone(),
        idempotency_key: action.key.as_str().to_owned(),
        resumed: action.resumed,
        status: status.as_str(),
        http_status: last_status,
        attempts,
        body: last_body.map(|b| String::from_utf8_lossy(&b).into_owned()),
        breaker: BreakerReport::new(&origin, breaker_state, now()),
    };
    match serde_json::to_string(&report) {
        Ok(json) => println!("{json}"),
        Err(e) => return fail(exit::SOFTWARE, e),
    }
    ExitCode::from(match status {
        ActionStatus::Pending if stopped_by_breaker => exit::BREAKER_OPEN,
        ActionStatus::Confirmed => exit::OK,
        ActionStatus::Rejected => exit::REJECTED,
        ActionStatus::Pending => exit::TEMP_FAIL,
        ActionStatus::Unknown => exit::UNAVAILABLE,
    })
}

/// The action `action_id` if its journalled request is `request` once the
/// secret headers are left out of it: an action journalled with its credentials
/// (by a build that journalled them) continues under its key instead of being
/// refused for a rotated token.
fn journalled_with_secrets(
    journal: &Journal,
    action_id: &str,
    request: &JournalledRequest,
    is_secret: &dyn Fn(&str) -> bool,
) -> Result<Option<idemkit::journal::Action>, JournalError> {
    let Some(action) = journal.get(action_id)? else {
        return Ok(None);
    };
    let Ok(mut journalled) = serde_json::from_slice::<JournalledRequest>(&action.payload) else {
        return Ok(None);
    };
    journalled.headers.retain(|(name, _)| !is_secret(name));
    Ok((journalled == *request).then_some(action))
}

/// The origin a URL's breaker is kept under: `scheme://host:port`, lowercase,
/// with the scheme's default port filled in.
fn origin_of(url: &str) -> Result<String, String> {
    let uri: ureq::http::Uri = url
        .parse()
        .map_err(|e| format!("URL {url:?} is not a URL: {e}"))?;
    let scheme = uri.scheme_str().map(str::to_ascii_lowercase);
    let default_port = match scheme.as_deref() {
        Some("http") => 80,
        Some("https") => 443,
        _ => return Err(format!("URL {url:?} is not an absolute http or https URL")),
    };
    let host = uri
        .host()
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("URL {url:?} has no host"))?
        .to_ascii_lowercase();
    let port = uri.port_u16().unwrap_or(default_port);
    Ok(format!(
        "{}://{host}:{port}",
        scheme.as_deref().unwrap_or_default()
    ))
}

fn read_data(data: Option<&str>) -> Result<Vec<u8>, String> {
    match data {
        None => Ok(Vec::new()),
        Some("@-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read stdin: {e}"))?;
            Ok(buf)
        }
        Some(text) => match text.strip_prefix('@') {
            Some(path) => std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}")),
            None => Ok(text.as_bytes().to_vec()),
        },
    }
}

/// Sends one attempt; returns what the client could tell, and the body if any.
fn send(
    agent: &ureq::Agent,
    request: &JournalledRequest,
    key: &str,
    attempt_id: &str,
) -> (AttemptResult, Option<Vec<u8>>) {
    let mut builder = ureq::http::Request::builder()
        .method(request.method.as_str())
        .uri(request.url.as_str())
        .header("idempotency-key", key)
        .header("idemkit-attempt-id", attempt_id);
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let http_request = match builder.body(request.body.clone()) {
        Ok(r) => r,
        // An unsendable request never reached the server: nothing can have happened.
        Err(_) => return (AttemptResult::ConnectError, None),
    };
    match agent.run(http_request) {
        Ok(mut response) => {
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            // If the body breaks off after the status arrived, the outcome is still
            // what the status says; only the body is lost.
            let body: Vec<u8> = response
                .body_mut()
                .with_config()
                .limit(16 << 20)
                .read_to_vec()
                .unwrap_or_default();
            let (problem_type, original_status) = problem_fields(&body);
            (
                AttemptResult::Response {
                    status,
                    problem_type,
                    retry_after,
                    original_status,
                },
                Some(body),
            )
        }
        Err(ureq::Error::ConnectionFailed | ureq::Error::HostNotFound) => {
            (AttemptResult::ConnectError, None)
        }
        Err(ureq::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            (AttemptResult::ConnectError, None)
        }
        // Anything else may have happened after the request was sent.
        Err(_) => (AttemptResult::Timeout, None),
    }
}

/// `Retry-After` is delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// The `type` and `original_status` members of a problem+json body, if it is one.
fn problem_fields(body: &[u8]) -> (Option<String>, Option<u16>) {
    let Ok(serde_json::Value::Object(members)) = serde_json::from_slice(body) else {
        return (None, None);
    };
    let problem_type = members
        .get("type")
        .and_then(|t| t.as_str())
        .map(str::to_owned);
    let original = members
        .get("original_status")
        .and_then(serde_json::Value::as_u64)
        .and_then(|s| u16::try_from(s).ok());
    (problem_type, original)
}

fn describe(result: &AttemptResult) -> String {
    match result {
        AttemptResult::ConnectError => "connect-error".into(),
        AttemptResult::Timeout => "timeout".into(),
        AttemptResult::Response {
            status,
            problem_type: Some(p),
            ..
        } => {
            format!("{status} {}", p.rsplit('/').next().unwrap_or(p))
        }
        AttemptResult::Response { status, .. } => status.to_string(),
    }
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // Jitter only spreads retries; if the OS generator fails, no jitter is safe.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_fill_in_the_default_port_and_lowercase() {
        assert_eq!(
            origin_of("HTTP://Example.COM/a?b").as_deref(),
            Ok("http://example.com:80")
        );
        assert_eq!(
            origin_of("https://api.example.com:8443/x").as_deref(),
            Ok("https://api.example.com:8443")
        );
        assert_eq!(
            origin_of("http://127.0.0.1:9/appointments").as_deref(),
            Ok("http://127.0.0.1:9")
        );
        assert!(origin_of("/relative").is_err());
        assert!(origin_of("ftp://example.com/").is_err());
    }

    #[test]
    fn retry_after_in_both_forms() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }

    #[test]
    fn problem_fields_are_read_from_problem_bodies_only() {
        let body =
            br#"{"type":"https://idemkit.dev/problems/response-expired","original_status":201}"#;
        assert_eq!(
            problem_fields(body),
            (
                Some("https://idemkit.dev/problems/response-expired".into()),
                Some(201)
            )
        );
        assert_eq!(problem_fields(b"not json"), (None, None));
        assert_eq!(problem_fields(b"[1]"), (None, None));
    }
}
