//! `idemkit exec`: run a command at most once per (tenant, operation, key).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, mpsc};
use std::time::Duration;

use clap::{Args, ValueEnum};
use idemkit::core::fingerprint::{ContentKind, FingerprintSpec};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StoredResponse};
use idemkit::{LogRef, UnixMillis};

use idemkit::adapters::redb::LockRetry;
use idemkit::store::{Claim, ExecutionGuard, Renewer, Store, WorkerError};
use serde_json::json;

use crate::store_args::{DbArg, record_address, storage_exit};
use crate::{exec_process, exit};

/// Run CMD at most once per (tenant, operation, key).
///
/// The first run claims the key, runs CMD, and stores its exit status and
/// stdout. A repeat with the same body prints the stored stdout and exits with
/// the stored status (stderr says it was replayed). A repeat with another body
/// exits 65 without running. While another process runs it, exit 75 (stderr
/// says when to retry). If the outcome of an earlier run is unknown, exit 69
/// with the record's log reference: `idemkit resolve` settles it.
///
/// A non-zero exit of CMD is handled per --on-failure: `release` (a retry runs
/// it again), `unknown` (nobody runs it again until resolved), or `store`
/// (replayed like a success). Default: release for --effect local, unknown for
/// --effect external. While CMD runs its lease is renewed every third of --lease;
/// each renewal waits at most a third of the lease for a store file another
/// process holds, and is tried again until the lease ends.
///
/// exec ends when CMD ends: its stdout is read for at most 2 s more (output
/// still in flight), so a process CMD started in the background, which may hold
/// the pipe for as long as it runs, never holds the lease. Such processes are
/// left running, with a warning: they are not part of the recorded outcome.
///
/// CMD runs in a process group of its own and never outlives exec: if exec is
/// killed, even with SIGKILL, CMD's group is killed with SIGKILL (on Linux CMD
/// also has a parent-death signal); the record then stays running until its
/// lease expires (--effect external: it becomes unknown; local: a retry runs it).
/// SIGTERM, SIGINT or SIGHUP sent to exec are sent on to CMD's group (a second
/// one sends SIGKILL), and the outcome is recorded per --on-failure. Being
/// outside the terminal's foreground group, CMD cannot read the terminal: when
/// exec's stdin is one, CMD's stdin is /dev/null.
///
/// Examples:
///   idemkit exec --tenant acme --operation invoice.send --key inv-42 -- ./send-invoice 42
///   idemkit exec --tenant acme --operation import --key 2026-11-30 --body batch.csv \
///     --effect local -- ./import batch.csv
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    db: DbArg,
    /// The tenant.
    #[arg(long)]
    tenant: String,
    /// The operation's name.
    #[arg(long)]
    operation: String,
    /// The idempotency key.
    #[arg(long)]
    key: String,
    /// The request body whose fingerprint guards the key (default: empty).
    #[arg(long, value_name = "FILE")]
    body: Option<PathBuf>,
    /// The body's media type: `application/json` (and `*+json`) bodies are
    /// fingerprinted by their canonical JSON, so whitespace and member order do not
    /// matter; form bodies by their sorted pairs; anything else as raw bytes.
    /// Default: `application/json` for a --body file named `*.json`, else
    /// `application/octet-stream`.
    #[arg(long, value_name = "MIME")]
    content_type: Option<String>,
    /// Whether CMD's effect is local (safe to retry after a crash) or external.
    #[arg(long, value_enum, default_value_t = Effect::External)]
    effect: Effect,
    /// The lease in seconds; renewed every third of it while CMD runs.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    lease: u64,
    /// The longest CMD's lease is renewed, in seconds (default 15 minutes). After
    /// it renewal stops: a hung CMD's lease expires, and an external record is
    /// then listed as unresolved and answered as uncertain.
    #[arg(long, value_name = "SECS", default_value_t = 900)]
    max_execution: u64,
    /// What a non-zero exit of CMD records.
    #[arg(long, value_enum)]
    on_failure: Option<OnFailure>,
    /// The most stdout bytes stored for replay.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    max_output: usize,
    /// Print one JSON object describing the outcome instead of CMD's output.
    #[arg(long)]
    json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Effect {
    Local,
    External,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum OnFailure {
    Release,
    Store,
    Unknown,
}

/// The stored-output header that says the stored stdout was cut at --max-output.
const TRUNCATED_HEADER: &str = "idemkit-exec-truncated";

pub(crate) fn run(args: ExecArgs) -> ExitCode {
    ExitCode::from(match exec(args) {
        Ok(code) | Err(code) => code,
    })
}

fn exec(args: ExecArgs) -> Result<u8, u8> {
    let (scope, key) = record_address(&args.tenant, &args.operation, &args.key)?;
    let body = match &args.body {
        Some(path) => std::fs::read(path).map_err(|e| {
            eprintln!("idemkit: cannot read --body {}: {e}", path.display());
            exit::NO_INPUT
        })?,
        None => Vec::new(),
    };
    let content_type = body_content_type(args.content_type.as_deref(), args.body.as_deref());
    let spec = FingerprintSpec::new(ContentKind::from_mime(content_type));
    let fingerprint = spec.fingerprint(scope.operation(), &body).map_err(|e| {
        eprintln!("idemkit: --body is not a valid {content_type}: {e}");
        exit::DATA_ERR
    })?;
    let effect = match args.effect {
        Effect::Local => EffectKind::Local,
        Effect::External => EffectKind::External,
    };
    let policy = Policy::default()
        .with_effect(effect)
        .with_lease(Duration::from_secs(args.lease.max(1)));
    let store = args.db.open()?;
    let owner = format!("idemkit exec (pid {})", std::process::id());
    let claim = store
        .claim(&scope, &key, fingerprint, &owner, &policy)
        .map_err(|e| {
            eprintln!("idemkit: {e}");
            match e {
                idemkit::store::ClaimError::Storage(s) => storage_exit(&s),
                _ => exit::IO_ERR,
            }
        })?;
    match claim {
        Claim::Execute(guard) => {
            // The command is about to run: from now on, recording its outcome is
            // worth waiting for, or the outcome is left to the lease expiry.
            if let Some(redb) = store.adapter_as::<idemkit::adapters::redb::RedbAdapter>() {
                redb.set_lock_retry(LockRetry {
                    budget: Duration::from_secs(60),
                    ..LockRetry::default()
                });
            }
            run_command(&args, &store, guard, effect)
        }
        Claim::Replay { response, log_ref } => {
            let status = exit_status_of(response.status);
            if args.json {
                crate::store_args::print_json(&json!({
                    "outcome": "replayed",
                    "exit_status": status,
                    "stdout": String::from_utf8_lossy(response.body.as_deref().unwrap_or_default()),
                    "log_ref": log_ref.to_string(),
                }));
            } else {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(response.body.as_deref().unwrap_or_default());
                let _ = out.flush();
                eprintln!(
                    "idemkit: replayed the stored result of an earlier run (record {log_ref}, exit status {status}); the command was not run again"
                );
            }
            Ok(status)
        }
        Claim::ResponseExpired {
            status,
            resource_ref,
            log_ref,
        } => {
            let status = exit_status_of(status);
            if args.json {
                crate::store_args::print_json(&json!({
                    "outcome": "response_expired",
                    "exit_status": status,
                    "resource_ref": resource_ref,
                    "log_ref": log_ref.to_string(),
                }));
            } else {
                eprintln!(
                    "idemkit: the command already ran (record {log_ref}, exit status {status}); its output is no longer kept, and it was not run again"
                );
            }
            Ok(status)
        }
        Claim::Mismatch { log_ref, .. } => {
            report_refusal(
                &args,
                "mismatch",
                log_ref,
                "this key was already used with a different body; the command was not run",
            );
            Err(exit::DATA_ERR)
        }
        Claim::InFlight {
            retry_after,
            log_ref,
        } => {
            let secs = retry_after.as_secs().max(1);
            if args.json {
                crate::store_args::print_json(&json!({
                    "outcome": "in_flight",
                    "retry_after_secs": secs,
                    "log_ref": log_ref.to_string(),
                }));
            } else {
                eprintln!(
                    "idemkit: another run holds this key (record {log_ref}); retry in {secs} s"
                );
            }
            Err(exit::TEMP_FAIL)
        }
        Claim::Uncertain { since, log_ref } => {
            if args.json {
                crate::store_args::print_json(&json!({
                    "outcome": "unknown",
                    "since_ms": since.as_millis(),
                    "log_ref": log_ref.to_string(),
                }));
            } else {
                eprintln!(
                    "idemkit: the outcome of an earlier run is unknown (record {log_ref}); it will not run again until `idemkit resolve` settles it"
                );
            }
            Err(exit::UNAVAILABLE)
        }
    }
}

/// --content-type, or what the --body file's name says: `*.json` is JSON (so a
/// respelled body fingerprints the same), anything else raw bytes.
fn body_content_type<'a>(given: Option<&'a str>, body: Option<&Path>) -> &'a str {
    match given {
        Some(mime) => mime,
        None if body
            .and_then(Path::extension)
            .is_some_and(|ext| ext.eq_ignore_ascii_case("json")) =>
        {
            "application/json"
        }
        None => "application/octet-stream",
    }
}

fn report_refusal(args: &ExecArgs, outcome: &str, log_ref: LogRef, message: &str) {
    if args.json {
        crate::store_args::print_json(&json!({
            "outcome": outcome,
            "log_ref": log_ref.to_string(),
        }));
    } else {
        eprintln!("idemkit: {message} (record {log_ref})");
    }
}

/// A stored status is an exit status (0–255); anything else is a generic failure.
fn exit_status_of(status: u16) -> u8 {
    u8::try_from(status).unwrap_or(1)
}

/// Runs CMD under the guard, renewing the lease, and records the outcome.
fn run_command(
    args: &ExecArgs,
    store: &Store,
    guard: ExecutionGuard,
    effect: EffectKind,
) -> Result<u8, u8> {
    let log_ref = guard.log_ref();
    let Some((program, rest)) = args.command.split_first() else {
        eprintln!("idemkit: no command given");
        return Err(exit::USAGE);
    };
    let started = exec_process::resolve_program(program)
        .and_then(|resolved| exec_process::spawn(program, &resolved, rest));
    let mut running = match started {
        Ok(running) => running,
        Err(e) => {
            eprintln!("idemkit: cannot run {program}: {e}");
            // Nothing ran, so nothing happened: a retry may run it.
            if let Err(e) = guard.release() {
                eprintln!("idemkit: releasing the claim failed (record {log_ref}): {e}");
            }
            return Err(127);
        }
    };
    let child = &mut running.child;

    // Keep the lease alive while CMD runs: a live runner is never taken over.
    let keeper = LeaseKeeper {
        renewer: guard.renewer(),
        store: store.clone(),
        lease: Duration::from_secs(args.lease.max(1)),
        expires: guard.lease_expires_at(),
        renew_until: std::time::Instant::now() + Duration::from_secs(args.max_execution),
        log_ref,
    };
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let renew_thread = std::thread::spawn(move || keeper.run(&stop_rx));

    let output = Arc::new(Mutex::new(Output::default()));
    let (ended_tx, ended_rx) = mpsc::channel::<()>();
    if let Some(pipe) = child.stdout.take() {
        let output = Arc::clone(&output);
        let (echo, max_output) = (!args.json, args.max_output);
        // Read on a thread of its own: exec waits for CMD, not for the pipe, which
        // a process CMD started in the background may hold open for as long as it
        // runs (and with it the lease).
        std::thread::spawn(move || {
            copy_output(pipe, echo, max_output, &output);
            drop(ended_tx);
        });
    } else {
        drop(ended_tx);
    }
    let status = child.wait();
    // What CMD wrote before it ended is in the pipe already: it is read within
    // the drain. A pipe still open after it is held by what CMD left running.
    let drained = !matches!(
        ended_rx.recv_timeout(OUTPUT_DRAIN),
        Err(mpsc::RecvTimeoutError::Timeout)
    );
    let (stored, truncated) = {
        let mut output = lock(&output);
        output.closed = true;
        (std::mem::take(&mut output.stored), output.truncated)
    };
    if running.group_still_running() {
        eprintln!(
            "idemkit: the command exited, but processes it started are still running in its process group{}; \
             they are left running, and what they do is not part of the recorded outcome",
            if drained {
                ""
            } else {
                " and hold its stdout (output after the command exited is neither shown nor stored)"
            }
        );
    } else if !drained {
        eprintln!(
            "idemkit: the command exited, but its stdout stayed open for {} ms after it; \
             output after the command exited is neither shown nor stored",
            OUTPUT_DRAIN.as_millis()
        );
    }
    let signalled = running.finish();
    if let Some(signal) = signalled {
        eprintln!(
            "idemkit: exec was stopped by signal {signal}; the command's process group was stopped with it"
        );
    }
    let _ = stop_tx.send(());
    let lost = renew_thread.join().ok().flatten();
    if let Some(why) = &lost {
        eprintln!("idemkit: lost the lease while the command ran: {why}");
    }

    let code: u8 = match &status {
        Ok(s) => match s.code() {
            Some(c) => u8::try_from(c).unwrap_or(1),
            None => signal_exit(s),
        },
        Err(e) => {
            eprintln!("idemkit: waiting for the command failed: {e}");
            1
        }
    };
    if truncated {
        eprintln!(
            "idemkit: stdout exceeded --max-output ({} bytes); only the first part is stored for replay",
            args.max_output
        );
    }
    let on_failure = args.on_failure.unwrap_or(match effect {
        EffectKind::Local => OnFailure::Release,
        _ => OnFailure::Unknown,
    });
    let recorded = if code == 0 || on_failure == OnFailure::Store {
        let mut response = StoredResponse::new(u16::from(code), stored.clone());
        if truncated {
            response
                .headers
                .push((TRUNCATED_HEADER.to_owned(), b"true".to_vec()));
        }
        guard.complete(response).map(|()| "completed")
    } else if on_failure == OnFailure::Release {
        guard.release().map(|()| "released")
    } else {
        guard
            .mark_unknown(format!("command exited with status {code}"))
            .map(|()| "unknown")
    };
    match recorded {
        Ok(what) => {
            if args.json {
                crate::store_args::print_json(&json!({
                    "outcome": "executed",
                    "recorded": what,
                    "exit_status": code,
                    "stdout": String::from_utf8_lossy(&stored),
                    "truncated": truncated,
                    "log_ref": log_ref.to_string(),
                }));
            }
            Ok(code)
        }
        Err(e) => {
            eprintln!(
                "idemkit: the command exited with status {code} but its outcome could not be recorded (record {log_ref}): {e}"
            );
            Err(match &e {
                WorkerError::Storage(s) => storage_exit(s),
                _ => exit::UNAVAILABLE,
            })
        }
    }
}

/// How long exec reads CMD's stdout after CMD ended, for output still in flight.
/// A pipe that stays open longer is held by a process CMD left running: exec
/// records the outcome without waiting for it.
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// CMD's stdout as read so far.
#[derive(Default)]
struct Output {
    /// Up to --max-output bytes.
    stored: Vec<u8>,
    /// More than --max-output bytes came.
    truncated: bool,
    /// exec took what was read: later output is neither shown nor stored.
    closed: bool,
}

fn lock(output: &Mutex<Output>) -> MutexGuard<'_, Output> {
    // Only whole updates happen under the lock: valid even after a panic.
    output.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Copies CMD's stdout to exec's (unless `echo` is off) and keeps up to
/// `max_output` bytes of it, until the pipe ends or exec closes `output`.
fn copy_output(mut pipe: impl Read, echo: bool, max_output: usize, output: &Mutex<Output>) {
    let mut buf = [0u8; 8192];
    loop {
        let n = match pipe.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        let chunk = buf.get(..n).unwrap_or_default();
        // Shown and stored under the lock, so nothing is written after exec
        // closed the output (its own report may follow on stdout).
        let mut output = lock(output);
        if output.closed {
            return;
        }
        if echo {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(chunk);
            let _ = out.flush();
        }
        let room = max_output.saturating_sub(output.stored.len());
        if chunk.len() > room {
            output.truncated = true;
        }
        output
            .stored
            .extend_from_slice(chunk.get(..room.min(chunk.len())).unwrap_or_default());
    }
}

/// Renews a lease every third of it while CMD runs.
struct LeaseKeeper {
    renewer: Renewer,
    store: Store,
    lease: Duration,
    /// When the lease ends unless renewed, by the store's clock.
    expires: UnixMillis,
    /// No renewal after this (`--max-execution`): a hung command's lease then
    /// expires, and an External record becomes unresolved.
    renew_until: std::time::Instant,
    log_ref: LogRef,
}

impl LeaseKeeper {
    /// Until `stop` says CMD ended: renews every third of the lease. Each attempt
    /// waits at most a third of the lease (and never past the lease's end) for a
    /// store file another process holds, rather than the minute exec allows for
    /// recording the outcome; a failed attempt is tried again shortly, until the
    /// lease ends. Answers why the lease was lost, if it was.
    fn run(mut self, stop: &mpsc::Receiver<()>) -> Option<String> {
        let interval = (self.lease / 3).max(Duration::from_millis(1));
        // After a failure: soon, but not in a tight loop on an instant error.
        let pause = (interval / 4).max(Duration::from_millis(10));
        let mut wait = interval;
        loop {
            match stop.recv_timeout(wait) {
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return None,
            }
            if std::time::Instant::now() >= self.renew_until {
                eprintln!(
                    "idemkit: maximum execution time reached; the lease is no longer renewed"
                );
                return None;
            }
            let left = self.store.now().until(self.expires);
            if left.is_zero() {
                let why = format!(
                    "the lease ended at {} ms (unix time) before a renewal got through",
                    self.expires.as_millis()
                );
                eprintln!(
                    "idemkit: {why} (record {}); the command keeps running, and its outcome is recorded if no other run took the key over",
                    self.log_ref
                );
                return Some(why);
            }
            let bound = interval.min(left);
            match self.renewer.renew_within(bound) {
                Ok(expires) => {
                    self.expires = expires;
                    wait = interval;
                }
                Err(e @ WorkerError::Rejected { .. }) => return Some(e.to_string()),
                Err(e) => {
                    eprintln!(
                        "idemkit: renewing the lease (record {}) gave up after waiting at most {} ms, the bound of one attempt (a third of the {} ms lease): {e}; trying again until the lease ends",
                        self.log_ref,
                        bound.as_millis(),
                        self.lease.as_millis()
                    );
                    wait = pause;
                }
            }
        }
    }
}

#[cfg(unix)]
fn signal_exit(status: &std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    status
        .signal()
        .and_then(|s| u8::try_from(128 + s).ok())
        .unwrap_or(1)
}

#[cfg(not(unix))]
fn signal_exit(_status: &std::process::ExitStatus) -> u8 {
    1
}
