//! `idemkit list | show | resolve | gc | stats`: operating a store file.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args};
use idemkit::core::machine::{Policy, Resolution};
use idemkit::core::record::{Record, RecordState, StateName, Step, StepState, StoredResponse};
use idemkit::store::ListedRecord;
use serde_json::{Value, json};

use crate::exit;
use crate::store_args::{print_json, record_address};
use crate::store_choice::{StoreArg, operator_failed, query_failed};

/// List records (never their response bodies).
///
/// Examples:
///   idemkit list --db app.redb
///   idemkit list --db app.redb --unresolved --json
///   idemkit list --postgres postgres://idemkit@db.internal/app --unresolved
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    db: StoreArg,
    /// Only records in this state.
    #[arg(long, value_parser = parse_state, conflicts_with = "unresolved")]
    state: Option<StateName>,
    /// Only records an operator must look at: Unknown, or Running past the lease.
    #[arg(long)]
    unresolved: bool,
    /// One JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_state(text: &str) -> Result<StateName, String> {
    text.parse::<StateName>().map_err(|e| e.to_string())
}

/// Show one record, its steps and its stored response.
#[derive(Args, Debug)]
pub(crate) struct ShowArgs {
    #[command(flatten)]
    db: StoreArg,
    #[command(flatten)]
    address: Address,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

/// The record's address.
#[derive(Args, Debug)]
pub(crate) struct Address {
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// The operation's name.
    #[arg(long)]
    operation: String,
    /// The idempotency key.
    #[arg(long)]
    key: String,
}

/// Settle a record whose outcome is unknown (or whose lease expired).
///
/// --applied records that the effect happened (retries then replay the given
/// status and body); --not-applied records that it did not (a retry runs again).
///
/// Examples:
///   idemkit resolve --tenant acme --operation invoice.send --key inv-42 --applied --status 0 --body out.txt
///   idemkit resolve --tenant acme --operation invoice.send --key inv-42 --not-applied
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("resolution").required(true).args(["applied", "not_applied"])))]
pub(crate) struct ResolveArgs {
    #[command(flatten)]
    db: StoreArg,
    #[command(flatten)]
    address: Address,
    /// The effect happened.
    #[arg(long)]
    applied: bool,
    /// The effect did not happen.
    #[arg(long)]
    not_applied: bool,
    /// With --applied: the status to replay (an exit status for `exec` records).
    #[arg(long, requires = "applied", default_value_t = 0)]
    status: u16,
    /// With --applied: a file whose bytes are replayed as the body/stdout.
    #[arg(long, requires = "applied", value_name = "FILE")]
    body: Option<PathBuf>,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

/// Prune response bodies past the replay window and delete records past the
/// record window (never Running or Unknown records), in bounded batches.
#[derive(Args, Debug)]
pub(crate) struct GcArgs {
    #[command(flatten)]
    db: StoreArg,
    /// Records per transaction.
    #[arg(long, default_value_t = idemkit::core::http::defaults::GC_BATCH)]
    max_batch: usize,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

/// Counts per state and the file size.
#[derive(Args, Debug)]
pub(crate) struct StatsArgs {
    #[command(flatten)]
    db: StoreArg,
    /// One JSON object.
    #[arg(long)]
    json: bool,
}

fn state_extra(record: &Record) -> Value {
    match &record.state {
        RecordState::Running { lease } => json!({
            "owner": lease.owner,
            "token": lease.token.get(),
            "lease_expires_at_ms": lease.expires_at.as_millis(),
        }),
        RecordState::Completed {
            response,
            completed_at,
        } => json!({
            "status": response.status,
            "resource_ref": response.resource_ref,
            "body_kept": response.body.is_some(),
            "completed_at_ms": completed_at.as_millis(),
        }),
        RecordState::Unknown { reason, since } => json!({
            "reason": reason.to_string(),
            "since_ms": since.as_millis(),
        }),
        RecordState::Released { at } => json!({ "released_at_ms": at.as_millis() }),
    }
}

fn summary(listed: &ListedRecord) -> serde_json::Map<String, Value> {
    let r = &listed.record;
    let value = json!({
        "log_ref": listed.log_ref().to_string(),
        "tenant": listed.scope.tenant(),
        "operation": listed.scope.operation(),
        "key": listed.key.as_str(),
        "state": r.state.name().to_string(),
        "effect": r.effect.to_string(),
        "attempt": r.attempt,
        "last_token": r.last_token.get(),
        "created_at_ms": r.created_at.as_millis(),
        "updated_at_ms": r.updated_at.as_millis(),
        "detail": state_extra(r),
    });
    match value {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

pub(crate) fn list(args: ListArgs) -> ExitCode {
    let store = match args.db.open() {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    let records = if args.unresolved {
        store.list_unresolved()
    } else {
        store.list(args.state)
    }
    .map_err(|e| query_failed(&e));
    let records = match records {
        Ok(r) => r,
        Err(f) => return ExitCode::from(f.code),
    };
    if args.json {
        print_json(&Value::Array(
            records.iter().map(|l| Value::Object(summary(l))).collect(),
        ));
    } else {
        println!(
            "{:<16}  {:<9}  {:>7}  {:>5}  {:<16}  {:<24}  KEY",
            "LOG_REF", "STATE", "ATTEMPT", "TOKEN", "TENANT", "OPERATION"
        );
        for l in &records {
            println!(
                "{:<16}  {:<9}  {:>7}  {:>5}  {:<16}  {:<24}  {}",
                l.log_ref().to_string(),
                l.record.state.name().to_string(),
                l.record.attempt,
                l.record.last_token.get(),
                terminal_safe(l.scope.tenant().as_bytes()),
                terminal_safe(l.scope.operation().as_bytes()),
                l.key
            );
        }
        eprintln!("{} record(s)", records.len());
    }
    ExitCode::from(exit::OK)
}

fn body_json(body: &[u8]) -> Value {
    match std::str::from_utf8(body) {
        Ok(text) => json!({ "utf8": text }),
        Err(_) => json!({ "hex": idemkit_core::hex::lower(body) }),
    }
}

/// `bytes` as text that a terminal shows and never obeys: UTF-8 as it is, except
/// control characters (escape sequences, carriage returns, backspaces: C0 other
/// than newline and tab, DEL, C1) and the bidirectional overrides and isolates,
/// which could make the text read otherwise than it is, written as `\u{1b}`;
/// bytes that are not UTF-8 as `\xff`.
fn terminal_safe(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            let bidi = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if (c.is_control() && c != '\n' && c != '\t') || bidi {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

pub(crate) fn show(args: ShowArgs) -> ExitCode {
    let (scope, key) = match record_address(
        &args.address.tenant,
        &args.address.operation,
        &args.address.key,
    ) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    let store = match args.db.open() {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    let listed = match store.get_listed(&scope, &key).map_err(|e| query_failed(&e)) {
        Ok(Some(r)) => r,
        Ok(None) => {
            eprintln!(
                "idemkit: no record for this key (record {})",
                scope.record_id(&key).log_ref()
            );
            return ExitCode::from(exit::DATA_ERR);
        }
        Err(f) => return ExitCode::from(f.code),
    };
    let mut value = summary(&listed);
    let r = &listed.record;
    value.insert("fingerprint".into(), json!(r.fingerprint.to_string()));
    value.insert(
        "replay_until_ms".into(),
        json!(r.replay_until.map(|t| t.as_millis())),
    );
    value.insert(
        "keep_until_ms".into(),
        json!(r.keep_until.map(|t| t.as_millis())),
    );
    let steps = Value::Array(r.steps.iter().map(step_json).collect());
    value.insert("steps".into(), steps);
    if let RecordState::Completed { response, .. } = &r.state {
        let response = json!({
            "status": response.status,
            "headers": headers_json(&response.headers),
            "body": response.body.as_deref().map(body_json),
            "resource_ref": response.resource_ref,
        });
        value.insert("response".into(), response);
    }
    if args.json {
        print_json(&Value::Object(value));
    } else {
        println!("record      {}", listed.log_ref());
        println!(
            "scope       tenant {:?}, operation {:?}, key {:?}",
            listed.scope.tenant(),
            listed.scope.operation(),
            listed.key.as_str()
        );
        println!("state       {}", r.state.name());
        println!("effect      {}", r.effect);
        println!("attempt     {} (last token {})", r.attempt, r.last_token);
        println!("fingerprint {}", r.fingerprint);
        println!("detail      {}", state_extra(r));
        for s in &r.steps {
            println!(
                "step        {} [{}] provider key {:?}, ref {:?}",
                terminal_safe(s.name.as_bytes()),
                match s.state {
                    StepState::Started => "started",
                    StepState::Done => "done",
                },
                s.provider_key,
                s.provider_ref
            );
        }
        if let RecordState::Completed { response, .. } = &r.state {
            println!("status      {}", response.status);
            match &response.body {
                Some(body) => {
                    println!(
                        "body        {} bytes (control characters escaped; --json for the exact bytes):",
                        body.len()
                    );
                    println!("{}", terminal_safe(body));
                }
                None => println!("body        (pruned after the replay window)"),
            }
        }
    }
    ExitCode::from(exit::OK)
}

pub(crate) fn resolve(args: ResolveArgs) -> ExitCode {
    let (scope, key) = match record_address(
        &args.address.tenant,
        &args.address.operation,
        &args.address.key,
    ) {
        Ok(a) => a,
        Err(code) => return ExitCode::from(code),
    };
    let resolution = if args.applied {
        let body = match &args.body {
            Some(path) => match std::fs::read(path) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!("idemkit: cannot read --body {}: {e}", path.display());
                    return ExitCode::from(exit::NO_INPUT);
                }
            },
            None => Vec::new(),
        };
        Resolution::Applied(StoredResponse::new(args.status, body))
    } else {
        Resolution::NotApplied
    };
    let store = match args.db.open() {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    // For the report only: the resolve itself decides on the record it reads.
    let before = store.get(&scope, &key).ok().flatten();
    // The record keeps the windows it was claimed under; the default policy's
    // windows apply only to records written before records carried theirs.
    match store
        .resolve(&scope, &key, resolution, &Policy::default())
        .map_err(|e| operator_failed(&e))
    {
        Ok(record) => {
            let log_ref = scope.record_id(&key).log_ref().to_string();
            let from = before.map(|r| r.state.name().to_string());
            let state = record.state.name();
            let windows = record.windows_or(&Policy::default());
            let at = |t: Option<idemkit_core::UnixMillis>| t.map(|t| t.as_millis());
            if args.json {
                print_json(&json!({
                    "log_ref": log_ref,
                    "from": from,
                    "state": state.to_string(),
                    "replay_until_ms": at(record.replay_until),
                    "keep_until_ms": at(record.keep_until),
                    "replay_window_ms": windows.replay_ms,
                    "record_window_ms": windows.record_ms,
                }));
            } else {
                let from = from.unwrap_or_else(|| "?".to_owned());
                println!("record {log_ref}: {from} -> {state}");
                if let RecordState::Completed { response, .. } = &record.state {
                    let body = response.body.as_ref().map_or(0, Vec::len);
                    println!(
                        "  replays status {} ({body} bytes of body)",
                        response.status
                    );
                }
                if let Some(until) = record.replay_until {
                    println!(
                        "  replayed until {} (replay window {})",
                        http_time(until),
                        human_duration(windows.replay_ms)
                    );
                }
                if let Some(until) = record.keep_until {
                    println!(
                        "  kept until {} (record window {})",
                        http_time(until),
                        human_duration(windows.record_ms)
                    );
                }
            }
            ExitCode::from(exit::OK)
        }
        Err(f) => ExitCode::from(f.code),
    }
}

/// An instant as an HTTP date (`Tue, 01 Dec 2026 10:00:00 GMT`).
fn http_time(t: idemkit_core::UnixMillis) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(t.as_millis());
    httpdate::fmt_http_date(at)
}

/// A window in the largest whole unit that states it exactly (`30 days`, `36 h`).
fn human_duration(ms: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (86_400_000, "days"),
        (3_600_000, "h"),
        (60_000, "min"),
        (1_000, "s"),
    ];
    for (size, name) in UNITS {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{} {name}", ms / size);
        }
    }
    format!("{ms} ms")
}

pub(crate) fn gc(args: GcArgs) -> ExitCode {
    let store = match args.db.open() {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    let (mut pruned, mut deleted, mut batches) = (0u64, 0u64, 0u64);
    let undecodable = loop {
        match store
            .gc(args.max_batch.max(1))
            .map_err(|e| query_failed(&e))
        {
            Ok(report) => {
                pruned += report.pruned;
                deleted += report.deleted;
                batches += 1;
                if !report.more {
                    // The last batch walked every due record, so its count of
                    // records it could not decode is the total (earlier batches
                    // saw a prefix of the same ones).
                    break report.undecodable;
                }
            }
            Err(f) => return ExitCode::from(f.code),
        }
    };
    if args.json {
        print_json(&json!({
            "pruned": pruned,
            "deleted": deleted,
            "batches": batches,
            "undecodable": undecodable,
        }));
    } else {
        println!("pruned {pruned} response bodies, deleted {deleted} records ({batches} batches)");
        if undecodable > 0 {
            println!(
                "skipped {undecodable} records whose bytes do not decode (left untouched; Store::verify names them)"
            );
        }
    }
    ExitCode::from(exit::OK)
}

pub(crate) fn stats(args: StatsArgs) -> ExitCode {
    let store = match args.db.open() {
        Ok(s) => s,
        Err(code) => return ExitCode::from(code),
    };
    let stats = match store.stats().map_err(|e| query_failed(&e)) {
        Ok(s) => s,
        Err(f) => return ExitCode::from(f.code),
    };
    let count = |s: StateName| stats.by_state.get(&s).copied().unwrap_or(0);
    if args.json {
        print_json(&json!({
            "total": stats.total,
            "running": count(StateName::Running),
            "completed": count(StateName::Completed),
            "unknown": count(StateName::Unknown),
            "released": count(StateName::Released),
            "expired_leases": stats.expired_leases,
            "file_size": stats.file_size,
        }));
    } else {
        println!("records    {}", stats.total);
        for s in [
            StateName::Running,
            StateName::Completed,
            StateName::Unknown,
            StateName::Released,
        ] {
            println!("{:<10} {}", s.to_string(), count(s));
        }
        println!("expired leases {}", stats.expired_leases);
        if let Some(size) = stats.file_size {
            println!("file size  {size} bytes");
        }
    }
    ExitCode::from(exit::OK)
}

/// A step as `show --json` and the operator console give it.
pub(crate) fn step_json(s: &Step) -> Value {
    json!({
        "name": s.name,
        "state": match s.state { StepState::Started => "started", StepState::Done => "done" },
        "provider_key": s.provider_key,
        "provider_ref": s.provider_ref,
        "started_at_ms": s.started_at.as_millis(),
        "done_at_ms": s.done_at.map(|t| t.as_millis()),
    })
}

/// Stored headers as `[name, value]` pairs, the value as text.
pub(crate) fn headers_json(headers: &[(String, Vec<u8>)]) -> Value {
    headers
        .iter()
        .map(|(n, v)| json!([n, String::from_utf8_lossy(v)]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::terminal_safe;

    #[test]
    fn terminal_safe_text_escapes_what_a_terminal_would_obey() {
        assert_eq!(
            terminal_safe(b"{\"ok\":true}\n\tdone"),
            "{\"ok\":true}\n\tdone"
        );
        assert_eq!(
            terminal_safe(b"\x1b[2J\x1b]0;owned\x07\rx\x08\x7f"),
            "\\u{1b}[2J\\u{1b}]0;owned\\u{7}\\u{d}x\\u{8}\\u{7f}"
        );
        assert_eq!(
            terminal_safe("caf\u{e9} \u{9b}31m \u{202e}txt".as_bytes()),
            "caf\u{e9} \\u{9b}31m \\u{202e}txt"
        );
        assert_eq!(terminal_safe(b"a\xffb\xc3"), "a\\xffb\\xc3");
    }
}
