//! `idemkit probe URL`: checks an API's idempotency contract from the outside,
//! the way h2spec checks an HTTP/2 server: real requests, fresh keys, a verdict
//! per check. See docs/probe.md.
//!
//! The checks run in this order, each with its own fresh random key (requests
//! sent in brackets):
//!
//! 1. `key-required` (1): the request without a key;
//! 2. `key-too-long` (1): a 256-character key;
//! 3. `replay` (2) and `replay-marker` (0): the request, then again with its key;
//! 4. `equivalent-body` (1, JSON only): the same value respelled, same key;
//! 5. `mismatch` (2): the same key with one field changed, then the original;
//! 6. `concurrent` (N): N simultaneous requests with one fresh key;
//! 7. `tenant-isolation` (2, with `--other-tenant-header`): the other principal
//!    with a fresh key (what it gets on its own), then with the first key;
//! 8. `problem-json` (0): every 4xx seen above.

mod body;
mod verdicts;

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Barrier;
use std::time::Duration;

use clap::Args;
use verdicts::{Check, Exchange, IsolationRun, MismatchRun, Outcome, Verdict};

/// Exit status when no check failed.
const PASSED: u8 = 0;
/// Exit status when a check failed.
const FAILED: u8 = 1;
/// Exit status of a usage error (what test tools such as h2spec use; clap's
/// errors for `probe` exit 2 too).
pub(crate) const USAGE: u8 = 2;

/// Check an API's idempotency contract from the outside.
///
/// Sends real requests to URL with fresh random Idempotency-Key values and
/// prints a verdict per check: key-required, key-too-long, replay,
/// replay-marker, equivalent-body, mismatch, concurrent, tenant-isolation and
/// problem-json (pass, fail, warn or skip, with what the server answered).
/// Exits 0 when no check failed, 1 when one did, 2 on a usage error.
///
/// It creates real resources: run it against staging. It sends 7 + N
/// requests (N = --concurrency), 9 + N with --other-tenant-header; --verbose
/// lists each one. Without a Content-Type header, a JSON body is sent as
/// application/json.
///
/// Examples:
///   idemkit probe http://localhost:8080/appointments -H 'Authorization: Bearer clinic-a' \
///     -d '{"customer_id":"c-1","slot_id":"s-9"}' --other-tenant-header 'Authorization: Bearer clinic-b'
///   idemkit probe https://staging.example.com/v1/charges -H "Authorization: Bearer $TOKEN" \
///     --data-file charge.json --vary /amount --json
#[derive(Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ProbeArgs {
    /// The endpoint of a state-changing operation.
    url: String,
    /// The method.
    #[arg(
        short = 'X',
        long = "request",
        value_name = "METHOD",
        default_value = "POST"
    )]
    method: String,
    /// A request header, 'Name: value' (repeatable).
    #[arg(short = 'H', long = "header", value_name = "'Name: value'")]
    headers: Vec<String>,
    /// The request body.
    #[arg(
        short = 'd',
        long = "data",
        value_name = "BODY",
        conflicts_with = "data_file"
    )]
    data: Option<String>,
    /// The request body, from a file (`-`: standard input).
    #[arg(long, value_name = "FILE")]
    data_file: Option<PathBuf>,
    /// The JSON Pointer of the field the mismatch check changes (default: the
    /// first string or number member).
    #[arg(long, value_name = "POINTER")]
    vary: Option<String>,
    /// A second principal's credentials, 'Name: value'; replaces the header of
    /// the same name for the tenant-isolation check.
    #[arg(long, value_name = "'Name: value'")]
    other_tenant_header: Option<String>,
    /// Simultaneous requests of the concurrent check.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u16).range(2..=1000))]
    concurrency: u16,
    /// Seconds each request may take.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    timeout: u64,
    /// Print {"target", "checks": [{"id", "result", "detail"}], "summary"}.
    #[arg(long)]
    json: bool,
    /// List every request on standard error.
    #[arg(short, long)]
    verbose: bool,
}

/// What every request of the probe starts from.
struct Target {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    agent: ureq::Agent,
    verbose: bool,
}

/// One request: the user's, with these changes.
#[derive(Default)]
struct Variation<'a> {
    key: Option<&'a str>,
    body: Option<&'a [u8]>,
    /// Replaces the header of the same name (the other principal's credentials).
    header: Option<&'a (String, String)>,
}

impl Target {
    fn send(&self, check: &str, v: &Variation<'_>) -> Outcome {
        let body = v.body.unwrap_or(&self.body);
        let mut builder = ureq::http::Request::builder()
            .method(self.method.as_str())
            .uri(self.url.as_str());
        for (name, value) in &self.headers {
            let replaced = v.header.is_some_and(|(n, _)| n.eq_ignore_ascii_case(name));
            if !replaced {
                builder = builder.header(name.as_str(), value.as_str());
            }
        }
        if let Some((name, value)) = v.header {
            builder = builder.header(name.as_str(), value.as_str());
        }
        if let Some(key) = v.key {
            builder = builder.header("idempotency-key", key);
        }
        if self.verbose {
            let key = v.key.map_or_else(|| "none".to_owned(), |k| excerpt(k, 40));
            let who = v
                .header
                .map_or(String::new(), |(n, _)| format!(", other {n}"));
            eprintln!(
                "probe: {check}: {} {} (key {key}{who}, {} body bytes)",
                self.method,
                self.url,
                body.len()
            );
        }
        let outcome = match builder.body(body.to_vec()) {
            Ok(request) => match self.agent.run(request) {
                Ok(mut response) => {
                    let status = response.status().as_u16();
                    let headers = response
                        .headers()
                        .iter()
                        .map(|(n, v)| {
                            (
                                n.as_str().to_ascii_lowercase(),
                                String::from_utf8_lossy(v.as_bytes()).into_owned(),
                            )
                        })
                        .collect();
                    match response
                        .body_mut()
                        .with_config()
                        .limit(16 << 20)
                        .read_to_vec()
                    {
                        Ok(body) => Outcome::Answered(Exchange {
                            status,
                            headers,
                            body,
                        }),
                        Err(e) => Outcome::NoAnswer(format!("the body broke off: {e}")),
                    }
                }
                Err(e) => Outcome::NoAnswer(e.to_string()),
            },
            Err(e) => Outcome::NoAnswer(format!("unsendable request: {e}")),
        };
        if self.verbose {
            eprintln!("probe: {check}: -> {outcome}");
        }
        outcome
    }
}

fn excerpt(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let cut: String = text.chars().take(max).collect();
    format!("{cut}…")
}

/// A fresh random key: `probe-` and 32 hex digits.
fn fresh_key() -> String {
    let mut bytes = [0u8; 16];
    // An unavailable OS random source leaves zeros; the counter keeps keys apart
    // within this run, which is what the checks need.
    let _ = getrandom::fill(&mut bytes);
    static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("probe-{}-{n}", idemkit_core::hex::Lower(&bytes))
}

fn parse_header(text: &str, flag: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{flag} {text:?}: expected 'Name: value'"))?;
    let name = name.trim();
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("{flag} {text:?}: the header name is not a token"));
    }
    Ok((name.to_owned(), value.trim().to_owned()))
}

fn usage(message: &str) -> ExitCode {
    eprintln!("idemkit probe: {message}");
    ExitCode::from(USAGE)
}

pub(crate) fn run(args: &ProbeArgs) -> ExitCode {
    let url = args.url.trim();
    if !(url.starts_with("http://") || url.starts_with("https://"))
        || url.parse::<ureq::http::Uri>().is_err()
    {
        return usage(&format!("{url:?} is not an http:// or https:// URL"));
    }
    let mut headers = Vec::new();
    for text in &args.headers {
        match parse_header(text, "-H") {
            // The probe sends its own keys.
            Ok((name, _)) if name.eq_ignore_ascii_case("idempotency-key") => {}
            Ok(h) => headers.push(h),
            Err(e) => return usage(&e),
        }
    }
    let other = match args.other_tenant_header.as_deref() {
        Some(text) => match parse_header(text, "--other-tenant-header") {
            Ok(h) => Some(h),
            Err(e) => return usage(&e),
        },
        None => None,
    };
    let body = match (&args.data, &args.data_file) {
        (Some(text), _) => text.clone().into_bytes(),
        (None, Some(path)) => {
            let read = if path.as_os_str() == "-" {
                let mut buf = Vec::new();
                std::io::stdin().read_to_end(&mut buf).map(|_| buf)
            } else {
                std::fs::read(path)
            };
            match read {
                Ok(bytes) => bytes,
                Err(e) => return usage(&format!("--data-file {}: {e}", path.display())),
            }
        }
        (None, None) => Vec::new(),
    };
    let is_json = serde_json::from_slice::<serde_json::Value>(&body).is_ok();
    if is_json
        && !headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
    {
        headers.push(("Content-Type".to_owned(), "application/json".to_owned()));
    }
    let pointer = match &args.vary {
        Some(p) => {
            if let Err(e) = body::varied(&body, p) {
                return usage(&e);
            }
            Some(p.clone())
        }
        None => body::default_vary_pointer(&body),
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(Duration::from_secs(args.timeout.max(1))))
        .http_status_as_error(false)
        .build()
        .into();
    let target = Target {
        method: args.method.clone(),
        url: url.to_owned(),
        headers,
        body,
        agent,
        verbose: args.verbose,
    };
    let checks = probe(
        &target,
        pointer.as_deref(),
        other.as_ref(),
        args.concurrency,
    );
    report(&target, &checks, args.json);
    if checks.iter().any(|c| c.result == Verdict::Fail) {
        ExitCode::from(FAILED)
    } else {
        ExitCode::from(PASSED)
    }
}

/// Runs every check against `target`, in the order of the module docs.
fn probe(
    target: &Target,
    pointer: Option<&str>,
    other: Option<&(String, String)>,
    concurrency: u16,
) -> Vec<Check> {
    let without_key = target.send("key-required", &Variation::default());
    let long_key: String = std::iter::repeat_n(fresh_key(), 8)
        .collect::<String>()
        .chars()
        .take(256)
        .collect();
    let too_long = target.send(
        "key-too-long",
        &Variation {
            key: Some(&long_key),
            ..Variation::default()
        },
    );

    let key = fresh_key();
    let with_key = Variation {
        key: Some(&key),
        ..Variation::default()
    };
    let first = target.send("replay", &with_key);
    let again = target.send("replay", &with_key);
    let replayed = verdicts::replay(&first, &again);
    let marker = verdicts::replay_marker(&replayed, &again);

    let accepted = verdicts::accepted(&first).is_some();
    let respelled_body = body::respelled(&target.body);
    let respelled = match (&respelled_body, accepted) {
        (Some(b), true) => Some(target.send(
            "equivalent-body",
            &Variation {
                key: Some(&key),
                body: Some(b),
                ..Variation::default()
            },
        )),
        _ => None,
    };

    let varied_body = pointer.and_then(|p| body::varied(&target.body, p).ok());
    let mismatch_answers = match (&varied_body, accepted) {
        (Some(b), true) => {
            let varied = target.send(
                "mismatch",
                &Variation {
                    key: Some(&key),
                    body: Some(b),
                    ..Variation::default()
                },
            );
            let original_again = target.send("mismatch", &with_key);
            Some((varied, original_again))
        }
        _ => None,
    };

    let concurrent_key = fresh_key();
    let barrier = Barrier::new(usize::from(concurrency));
    let simultaneous: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..concurrency)
            .map(|_| {
                scope.spawn(|| {
                    barrier.wait();
                    target.send(
                        "concurrent",
                        &Variation {
                            key: Some(&concurrent_key),
                            ..Variation::default()
                        },
                    )
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Outcome::NoAnswer("the sending thread panicked".into()))
            })
            .collect()
    });

    let isolation_answers = match (other, accepted) {
        (Some(header), true) => {
            let control_key = fresh_key();
            let control = target.send(
                "tenant-isolation",
                &Variation {
                    key: Some(&control_key),
                    header: Some(header),
                    ..Variation::default()
                },
            );
            let same_key = target.send(
                "tenant-isolation",
                &Variation {
                    key: Some(&key),
                    header: Some(header),
                    ..Variation::default()
                },
            );
            Some((control, same_key))
        }
        _ => None,
    };

    let mismatch_run = match (&mismatch_answers, pointer) {
        (Some((varied, original_again)), Some(pointer)) => Some(MismatchRun {
            pointer,
            varied,
            original_again,
        }),
        _ => None,
    };
    let isolation_run = isolation_answers
        .as_ref()
        .map(|(control, same_key)| IsolationRun { control, same_key });
    let mut seen: Vec<&Outcome> = vec![&without_key, &too_long, &first, &again];
    seen.extend(respelled.iter());
    if let Some((a, b)) = &mismatch_answers {
        seen.extend([a, b]);
    }
    seen.extend(simultaneous.iter());
    if let Some((a, b)) = &isolation_answers {
        seen.extend([a, b]);
    }
    let mismatch = verdicts::mismatch(&first, mismatch_run.as_ref());
    let tenant = match (other, accepted) {
        (Some(_), false) => Check {
            id: "tenant-isolation",
            result: Verdict::Skip,
            detail: "needs a successful first request".into(),
        },
        _ => verdicts::tenant_isolation(&first, isolation_run.as_ref()),
    };
    vec![
        verdicts::key_required(&without_key),
        verdicts::key_too_long(&too_long),
        replayed,
        marker,
        verdicts::equivalent_body(&first, respelled.as_ref()),
        mismatch,
        verdicts::concurrent(&simultaneous),
        tenant,
        verdicts::problem_json(seen),
    ]
}

fn report(target: &Target, checks: &[Check], json: bool) {
    let count = |v: Verdict| checks.iter().filter(|c| c.result == v).count();
    if json {
        let value = serde_json::json!({
            "target": target.url,
            "method": target.method,
            "checks": checks.iter().map(|c| serde_json::json!({
                "id": c.id,
                "result": c.result.as_str(),
                "detail": c.detail,
            })).collect::<Vec<_>>(),
            "summary": {
                "pass": count(Verdict::Pass),
                "fail": count(Verdict::Fail),
                "warn": count(Verdict::Warn),
                "skip": count(Verdict::Skip),
            },
        });
        println!("{value}");
        return;
    }
    println!("idemkit probe: {} {}", target.method, target.url);
    let width = checks.iter().map(|c| c.id.len()).max().unwrap_or(0);
    for c in checks {
        println!("  {:<width$}  {:<4}  {}", c.id, c.result.as_str(), c.detail);
    }
    println!(
        "{} pass, {} fail, {} warn, {} skip",
        count(Verdict::Pass),
        count(Verdict::Fail),
        count(Verdict::Warn),
        count(Verdict::Skip)
    );
}
