//! `idemkit call` sends one journalled key on every attempt and every re-run, and
//! reports outcomes without ever turning "unknown" into "confirmed".
//!
//! The server here is a tiny idempotent HTTP server on 127.0.0.1 that executes a
//! request once per key and replays afterwards, with switches to be slow, to drop
//! responses, or to answer with a fixed problem.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

#[derive(Clone, Copy)]
enum Mode {
    /// Execute once per key, replay afterwards.
    Idempotent,
    /// Like Idempotent, but the first `n` requests execute and then sleep this long
    /// before answering (longer than the client's timeout).
    SlowFirst { n: usize, sleep_ms: u64 },
    /// Like Idempotent, but the first `n` requests execute and then close the
    /// connection without answering.
    DropFirst { n: usize },
    /// Always answer with this status and problem type.
    Fixed { status: u16, problem: &'static str },
}

#[derive(Default)]
struct Seen {
    /// Every key received, in order.
    keys: Vec<String>,
    /// Executions per key.
    executions: HashMap<String, usize>,
    /// The `Authorization` and `X-Api-Key` values received, in order.
    credentials: Vec<String>,
}

struct Server {
    url: String,
    seen: Arc<Mutex<Seen>>,
}

fn start(mode: Mode) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/bookings", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let shared = Arc::clone(&seen);
    thread::spawn(move || {
        let mut served = 0usize;
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            served += 1;
            let n = served;
            let seen = Arc::clone(&shared);
            thread::spawn(move || serve(stream, mode, n, &seen));
        }
    });
    Server { url, seen }
}

fn serve(stream: TcpStream, mode: Mode, n: usize, seen: &Mutex<Seen>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut key = None;
    let mut content_length = 0usize;
    let mut credentials = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            match name.to_ascii_lowercase().as_str() {
                "idempotency-key" => key = Some(value.trim().to_owned()),
                "content-length" => content_length = value.trim().parse().unwrap_or(0),
                "authorization" | "x-api-key" => credentials.push(value.trim().to_owned()),
                _ => {}
            }
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body).unwrap();
    let key = key.unwrap_or_default();
    let (status, problem) = {
        let mut seen = seen.lock().unwrap();
        seen.keys.push(key.clone());
        seen.credentials.extend(credentials);
        match mode {
            Mode::Fixed { status, problem } => (status, Some(problem)),
            _ => {
                *seen.executions.entry(key).or_default() += 1;
                (201, None)
            }
        }
    };
    let mut stream = stream;
    match mode {
        Mode::SlowFirst { n: slow, sleep_ms } if n <= slow => {
            thread::sleep(Duration::from_millis(sleep_ms));
        }
        Mode::DropFirst { n: dropped } if n <= dropped => return,
        _ => {}
    }
    let (reason, body, content_type) = match problem {
        Some(p) => (
            "Problem",
            format!(r#"{{"status":{status},"type":"https://idemkit.dev/problems/{p}"}}"#),
            "application/problem+json",
        ),
        None => (
            "Created",
            r#"{"booking":"b-1"}"#.to_owned(),
            "application/json",
        ),
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

impl Server {
    /// Executions per key, counting replays once: the "receiving system's view".
    fn executions(&self) -> usize {
        self.seen.lock().unwrap().executions.len()
    }
    fn keys(&self) -> Vec<String> {
        self.seen.lock().unwrap().keys.clone()
    }
    fn credentials(&self) -> Vec<String> {
        self.seen.lock().unwrap().credentials.clone()
    }
}

fn idemkit(journal: &std::path::Path, action_id: &str, url: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_idemkit"));
    cmd.arg("call")
        .arg("--journal")
        .arg(journal)
        .args([
            "--action-id",
            action_id,
            "-H",
            "Content-Type: application/json",
        ])
        .args([
            "-d",
            r#"{"slot_id":"s-9"}"#,
            "--base-delay-ms",
            "20",
            "--max-delay-ms",
            "100",
        ])
        .args(extra)
        .arg(url);
    cmd
}

fn run(cmd: &mut Command) -> (i32, serde_json::Value) {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON object ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap(), report)
}

#[test]
fn latency_above_the_client_timeout_retries_with_one_key_and_books_once() {
    let server = start(Mode::SlowFirst {
        n: 2,
        sleep_ms: 800,
    });
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.redb");
    let (code, report) = run(&mut idemkit(
        &journal,
        "run-1/book",
        &server.url,
        &["--timeout-ms", "300"],
    ));
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["status"], "confirmed");
    assert_eq!(report["http_status"], 201);
    assert_eq!(report["attempts"].as_array().unwrap().len(), 3);
    assert_eq!(report["attempts"][0]["outcome"], "timeout");
    let keys = server.keys();
    assert_eq!(keys.len(), 3);
    assert!(
        keys.iter().all(|k| *k == keys[0]),
        "one key on every attempt: {keys:?}"
    );
    assert_eq!(report["idempotency_key"], keys[0].as_str());
    assert_eq!(server.executions(), 1);
}

#[test]
fn dropped_responses_are_retried_with_one_key() {
    let server = start(Mode::DropFirst { n: 2 });
    let dir = tempfile::tempdir().unwrap();
    let (code, report) = run(&mut idemkit(
        &dir.path().join("j.redb"),
        "run-1/book",
        &server.url,
        &[],
    ));
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["status"], "confirmed");
    assert_eq!(server.keys().len(), 3);
    assert_eq!(server.executions(), 1);
}

#[test]
fn outcome_uncertain_stops_the_retries_and_reports_unknown() {
    let server = start(Mode::Fixed {
        status: 409,
        problem: "outcome-uncertain",
    });
    let dir = tempfile::tempdir().unwrap();
    let (code, report) = run(&mut idemkit(
        &dir.path().join("j.redb"),
        "run-1/book",
        &server.url,
        &[],
    ));
    assert_eq!(code, 69, "{report}");
    assert_eq!(report["status"], "unknown");
    assert_eq!(server.keys().len(), 1, "no retry after outcome-uncertain");
}

#[test]
fn in_progress_is_retried_then_reported_pending() {
    let server = start(Mode::Fixed {
        status: 409,
        problem: "request-in-progress",
    });
    let dir = tempfile::tempdir().unwrap();
    let (code, report) = run(&mut idemkit(
        &dir.path().join("j.redb"),
        "run-1/book",
        &server.url,
        &["--max-attempts", "3"],
    ));
    assert_eq!(code, 75, "{report}");
    assert_eq!(report["status"], "pending");
    assert_eq!(server.keys().len(), 3);
}

#[test]
fn a_422_is_rejected_without_retry() {
    let server = start(Mode::Fixed {
        status: 422,
        problem: "idempotency-key-reused",
    });
    let dir = tempfile::tempdir().unwrap();
    let (code, report) = run(&mut idemkit(
        &dir.path().join("j.redb"),
        "run-1/book",
        &server.url,
        &[],
    ));
    assert_eq!(code, 2, "{report}");
    assert_eq!(report["status"], "rejected");
    assert_eq!(server.keys().len(), 1);
}

#[test]
fn a_killed_client_rerun_with_the_same_action_id_sends_the_same_key() {
    let server = start(Mode::SlowFirst {
        n: 1,
        sleep_ms: 3_000,
    });
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.redb");
    let mut child = idemkit(
        &journal,
        "run-7/book",
        &server.url,
        &["--timeout-ms", "10000"],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while server.keys().is_empty() {
        assert!(Instant::now() < deadline, "the first attempt never arrived");
        thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap(); // SIGKILL, mid-attempt
    child.wait().unwrap();

    let (code, report) = run(&mut idemkit(&journal, "run-7/book", &server.url, &[]));
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["resumed"], true);
    let keys = server.keys();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "the re-run reuses the journalled key");
    assert_eq!(server.executions(), 1);
    // The journal kept the killed attempt (started, never finished) and the new one.
    let attempts = report["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["number"], 2);
}

#[test]
fn a_different_request_under_a_used_action_id_is_refused_without_sending() {
    let server = start(Mode::Idempotent);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.redb");
    assert_eq!(
        run(&mut idemkit(&journal, "run-1/book", &server.url, &[])).0,
        0
    );
    let out = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg("call")
        .arg("--journal")
        .arg(&journal)
        .args([
            "--action-id",
            "run-1/book",
            "-d",
            r#"{"slot_id":"s-10"}"#,
            &server.url,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&out.stderr).contains("different payload"));
    assert_eq!(server.keys().len(), 1, "nothing was sent");
}

#[test]
fn connection_refused_is_pending_and_safe_to_rerun() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.1:{port}/bookings");
    let (code, report) = run(&mut idemkit(
        &dir.path().join("j.redb"),
        "run-1/book",
        &url,
        &["--max-attempts", "2"],
    ));
    assert_eq!(code, 75, "{report}");
    assert_eq!(report["status"], "pending");
    assert_eq!(report["attempts"][0]["outcome"], "connect-error");
}

/// A journal holds keys and requests, so it must never hold a credential: an
/// agent's journal file read by anyone (it was 0644) gave away its bearer
/// token, and the token's rotation made the next run of a pending action exit
/// 65 as if the request had changed. The credential headers, and those named
/// with --secret-header, are sent on every attempt from the run's own command
/// line and never journalled; the journal file is private.
#[test]
fn the_journal_holds_no_credential_and_a_rotated_token_continues_the_action() {
    let server = start(Mode::Idempotent);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.redb");
    let (code, first) = run(&mut idemkit(
        &journal,
        "run-9/book",
        &server.url,
        &["-H", "Authorization: Bearer tok-ONE-s3cret"],
    ));
    assert_eq!(code, 0, "{first}");
    // The token rotated; the action is the same.
    let (code, second) = run(&mut idemkit(
        &journal,
        "run-9/book",
        &server.url,
        &["-H", "Authorization: Bearer tok-TWO-s3cret"],
    ));
    assert_eq!(code, 0, "a rotated token is the same action: {second}");
    assert_eq!(second["resumed"], true);
    assert_eq!(second["idempotency_key"], first["idempotency_key"]);
    // A secret in a header of the caller's choosing, named with --secret-header.
    let (code, third) = run(&mut idemkit(
        &journal,
        "run-9/book",
        &server.url,
        &[
            "-H",
            "Authorization: Bearer tok-TWO-s3cret",
            "-H",
            "X-Api-Key: key-THREE-s3cret",
            "--secret-header",
            "x-api-key",
        ],
    ));
    assert_eq!(code, 0, "{third}");
    assert_eq!(third["idempotency_key"], first["idempotency_key"]);
    assert_eq!(
        server.credentials(),
        [
            "Bearer tok-ONE-s3cret",
            "Bearer tok-TWO-s3cret",
            "Bearer tok-TWO-s3cret",
            "key-THREE-s3cret"
        ],
        "each run sends its own credentials"
    );
    assert_eq!(server.executions(), 1);

    let bytes = std::fs::read(&journal).unwrap();
    for secret in ["tok-ONE", "tok-TWO", "key-THREE", "s3cret"] {
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "the journal holds {secret:?}"
        );
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&journal).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the journal is private: {mode:o}");
    }
}

/// An action journalled with its credential (as builds that journalled
/// credentials wrote it) resumes under its key when the token rotated, and is
/// sent with this run's credential, never the journalled one.
#[test]
fn an_action_journalled_with_its_credential_resumes_with_the_new_one() {
    let server = start(Mode::Idempotent);
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.redb");
    let legacy = serde_json::json!({
        "method": "POST",
        "url": server.url,
        "headers": [["Content-Type", "application/json"], ["Authorization", "Bearer tok-OLD"]],
        "body": br#"{"slot_id":"s-9"}"#.to_vec(),
    });
    let key = {
        let journal = idemkit::journal::Journal::open(&journal).unwrap();
        let payload = serde_json::to_vec(&legacy).unwrap();
        journal
            .begin("run-3/book", &payload, journal.now())
            .unwrap()
            .key
    };
    let (code, report) = run(&mut idemkit(
        &journal,
        "run-3/book",
        &server.url,
        &["-H", "Authorization: Bearer tok-NEW"],
    ));
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["resumed"], true);
    assert_eq!(report["idempotency_key"], key.as_str());
    assert_eq!(server.credentials(), ["Bearer tok-NEW"]);
}

/// Against the appointments service with a slow calendar: the first attempt
/// times out on the client while the booking runs on, the second gets 409
/// `request-in-progress`, and the third asks to wait (`Prefer: wait=10`): it
/// goes after the backoff instead of the 409's `Retry-After`, is held until
/// the booking is recorded, and gets its replay. One booking.
#[test]
fn a_retry_after_in_progress_asks_to_wait_and_gets_the_booking() {
    let dir = tempfile::tempdir().unwrap();
    let service = crate::support::Service::start(dir.path(), &["--provider-latency-ms", "2500"]);
    let url = format!("http://{}/appointments", service.addr);
    let started = Instant::now();
    let (code, report) = run(Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg("call")
        .arg("--journal")
        .arg(dir.path().join("journal.redb"))
        .args(["--action-id", "book-wait", "--timeout-ms", "500"])
        .args(["--base-delay-ms", "20", "--max-delay-ms", "100"])
        .args(["-H", "Content-Type: application/json"])
        .args(["-H", "Authorization: Bearer clinic-c"])
        .args([
            "-d",
            r#"{"customer_id":"anna","slot_id":"2026-12-01T10:00"}"#,
        ])
        .arg(&url));
    let elapsed = started.elapsed();
    assert_eq!(code, 0, "{report}");
    assert_eq!(report["status"], "confirmed", "{report}");
    let outcomes: Vec<&str> = report["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes[0], "timeout", "{report}");
    let in_progress = outcomes
        .iter()
        .position(|o| *o == "409 request-in-progress")
        .unwrap_or_else(|| panic!("a retry found the booking running: {report}"));
    assert_eq!(outcomes.get(in_progress + 1), Some(&"201"), "{report}");
    // Attempts are journalled with their times: the waiting retry left at
    // once, not after the 409's Retry-After (the 3 s lease's remainder).
    let attempts = report["attempts"].as_array().unwrap();
    let gap = attempts[in_progress + 1]["started_at"].as_u64().unwrap()
        - attempts[in_progress]["ended_at"].as_u64().unwrap();
    assert!(gap < 500, "{gap} ms between the 409 and the waiting retry");
    assert!(elapsed < Duration::from_secs(6), "{elapsed:?}");
    assert_eq!(service.bookings("clinic-c").len(), 1);
    let body: serde_json::Value = serde_json::from_str(report["body"].as_str().unwrap()).unwrap();
    assert_eq!(body["slot_id"], "2026-12-01T10:00", "{body}");
}
