//! `idemkit call` keeps a circuit breaker per origin in its journal: successive
//! actions, each its own process, stop sending to an endpoint that keeps failing
//! once the breaker opens, and resume after its cool-down when a probe succeeds.
//!
//! The server is a tiny HTTP server on 127.0.0.1 that counts the requests it
//! receives and answers 503 while `failing` is set, 201 otherwise.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

struct Server {
    url: String,
    requests: Arc<AtomicUsize>,
    failing: Arc<AtomicBool>,
}

impl Server {
    fn start() -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/bookings", listener.local_addr().unwrap());
        let requests = Arc::new(AtomicUsize::new(0));
        let failing = Arc::new(AtomicBool::new(true));
        let (counted, fails) = (Arc::clone(&requests), Arc::clone(&failing));
        thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (counted, fails) = (Arc::clone(&counted), Arc::clone(&fails));
                thread::spawn(move || serve(stream, &counted, &fails));
            }
        });
        Server {
            url,
            requests,
            failing,
        }
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

fn serve(stream: TcpStream, requests: &AtomicUsize, failing: &AtomicBool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            content_length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body).unwrap();
    requests.fetch_add(1, Ordering::SeqCst);
    let (status, reason, body) = if failing.load(Ordering::SeqCst) {
        (503, "Service Unavailable", r#"{"error":"down"}"#)
    } else {
        (201, "Created", r#"{"booking":"b-1"}"#)
    };
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

struct Run {
    code: i32,
    report: serde_json::Value,
    stderr: String,
}

impl Run {
    fn sent(&self) -> usize {
        self.report["attempts"].as_array().unwrap().len()
    }
}

/// One `idemkit call` process: 3 consecutive failures open the breaker, which then
/// refuses for `cool_down_ms`.
fn call(journal: &Path, action_id: &str, url: &str, cool_down_ms: u64) -> Run {
    let out = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg("call")
        .arg("--journal")
        .arg(journal)
        .args(["--action-id", action_id, "-d", r#"{"slot_id":"s-9"}"#])
        .args(["--base-delay-ms", "1", "--max-delay-ms", "5"])
        .args(["--timeout-ms", "5000", "--breaker-failures", "3"])
        .arg("--breaker-cool-down-ms")
        .arg(cool_down_ms.to_string())
        .arg(url)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("stdout is not one JSON object ({e}): {stdout}\nstderr: {stderr}")
    });
    Run {
        code: out.status.code().unwrap(),
        report,
        stderr,
    }
}

/// Opens the breaker with a first action: 3 failed attempts, then the fourth is
/// refused without sending.
fn open_breaker(server: &Server, journal: &Path, cool_down_ms: u64) {
    let first = call(journal, "run-1/step-1", &server.url, cool_down_ms);
    assert_eq!(first.code, 3, "{}\n{}", first.report, first.stderr);
    assert_eq!(first.report["status"], "pending");
    assert_eq!(first.sent(), 3, "{}", first.report);
    assert_eq!(server.requests(), 3);
    assert_eq!(first.report["breaker"]["state"], "open", "{}", first.report);
    assert!(
        first.stderr.contains("circuit breaker") && first.stderr.contains("nothing more sent"),
        "{}",
        first.stderr
    );
}

#[test]
fn successive_actions_against_a_failing_endpoint_stop_at_an_open_breaker() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("agent.journal");
    // A cool-down far longer than the test, so every later action meets it open.
    open_breaker(&server, &journal, 600_000);
    let origin = server.url.trim_end_matches("/bookings");

    for step in 2..=5 {
        let run = call(
            &journal,
            &format!("run-1/step-{step}"),
            &server.url,
            600_000,
        );
        assert_eq!(run.code, 3, "{}\n{}", run.report, run.stderr);
        assert_eq!(run.report["status"], "pending", "{}", run.report);
        assert_eq!(run.sent(), 0, "{}", run.report);
        assert_eq!(run.report["breaker"]["state"], "open");
        assert_eq!(run.report["breaker"]["origin"], origin);
        assert!(run.report["breaker"]["retry_at"].as_u64().is_some());
        assert!(
            run.stderr
                .contains(&format!("circuit breaker for {origin} is open"))
                && run.stderr.contains("nothing sent"),
            "{}",
            run.stderr
        );
        assert_eq!(server.requests(), 3, "the request count stopped growing");
    }
    // The refused action was journalled and stays pending: resuming it later sends its key.
    let resumed = call(&journal, "run-1/step-2", &server.url, 600_000);
    assert_eq!(resumed.code, 3);
    assert_eq!(resumed.report["resumed"], true);
    assert_eq!(server.requests(), 3);
}

#[test]
fn an_open_breaker_lets_a_probe_through_after_its_cool_down_and_success_closes_it() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("agent.journal");
    open_breaker(&server, &journal, 300);

    // Poll with successive actions: each is refused without sending until the
    // cool-down ends, then one probe goes out; it fails, which reopens the breaker.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut step = 2;
    loop {
        assert!(Instant::now() < deadline, "no probe within 60 s");
        let run = call(&journal, &format!("run-1/step-{step}"), &server.url, 300);
        step += 1;
        assert_eq!(run.code, 3, "{}\n{}", run.report, run.stderr);
        if run.sent() == 0 {
            assert_eq!(server.requests(), 3);
            continue;
        }
        assert_eq!(
            run.sent(),
            1,
            "one probe, then refused again: {}",
            run.report
        );
        assert_eq!(server.requests(), 4);
        assert_eq!(run.report["breaker"]["state"], "open");
        break;
    }

    // The endpoint recovers; the next probe succeeds and closes the breaker.
    server.failing.store(false, Ordering::SeqCst);
    let confirmed = loop {
        assert!(Instant::now() < deadline, "no successful probe within 60 s");
        let before = server.requests();
        let run = call(&journal, &format!("run-1/step-{step}"), &server.url, 300);
        step += 1;
        if run.code == 3 {
            assert_eq!(run.sent(), 0, "{}", run.report);
            assert_eq!(server.requests(), before);
            continue;
        }
        break run;
    };
    assert_eq!(
        confirmed.code, 0,
        "{}\n{}",
        confirmed.report, confirmed.stderr
    );
    assert_eq!(confirmed.report["status"], "confirmed");
    assert_eq!(confirmed.sent(), 1);
    assert_eq!(confirmed.report["breaker"]["state"], "closed");
    assert_eq!(confirmed.report["breaker"]["failures"], 0);
    assert_eq!(server.requests(), 5);

    // Closed: the actions left pending by the open breaker go through, each once.
    let resumed = call(&journal, "run-1/step-2", &server.url, 300);
    assert_eq!(resumed.code, 0, "{}\n{}", resumed.report, resumed.stderr);
    assert_eq!(resumed.report["resumed"], true);
    assert_eq!(resumed.sent(), 1);
    assert_eq!(server.requests(), 6);
}
