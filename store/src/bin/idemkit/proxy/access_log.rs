//! The access log (`access_log` in the configuration of `idemkit proxy` and
//! of `idemkit mcp` over HTTP): one JSON line per request answered, written
//! by a thread of its own so that a request never waits on the disk.
//!
//! ```json
//! {"time":"2026-12-05T19:20:01.123Z","peer":"10.0.0.7:50312","method":"POST","path":"/accounts/A/withdraw","status":201,"operation":"accounts.withdraw","claim":"execute","log_ref":"74aeb650e4585d2f","ms":3.41}
//! ```
//!
//! - `path` is the path the client sent, without its query (a query may hold
//!   a credential); no header, key or body is ever written.
//! - `operation` names the configured route (absent for a pass-through
//!   request), or for `idemkit mcp` the tool a `tools/call` names; `claim`
//!   and `log_ref` say what the route's (or tool's) claim decided
//!   (`execute`, `replay`, `in_flight`, `mismatch`, `uncertain`,
//!   `response_expired`) and which record it was, absent when the request
//!   was refused before a claim (no key, no tenant, the store unavailable).
//! - `time` is when the response head was ready, and `ms` how long that took
//!   from the request's arrival.
//!
//! Lines are queued (up to [`QUEUE`]) and written in batches, flushed
//! whenever the queue is empty. When the disk cannot keep up, lines past the
//! queue are dropped and counted in a warning, rather than slowing every
//! request. `access_log = "-"` writes to stdout; a file is created `0600` and
//! appended to, and reopened on SIGHUP (after `logrotate` moved it).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use idemkit::UnixMillis;
use idemkit::http::ClaimAnswered;
use serde::Serialize;

/// Lines waiting for the writer; past this, lines are dropped.
pub(crate) const QUEUE: usize = 65_536;

/// Where the access log goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// `access_log = "-"`.
    Stdout,
    /// `access_log = "PATH"`.
    File(PathBuf),
}

impl Target {
    /// `"-"` is stdout, anything else a file.
    pub(crate) fn of(setting: &Path) -> Target {
        if setting == Path::new("-") {
            Target::Stdout
        } else {
            Target::File(setting.to_owned())
        }
    }
}

enum Message {
    Line(String),
    /// SIGHUP: close the file and open it again at its path.
    Reopen,
    /// Write what is queued, flush, and say so.
    Flush(SyncSender<()>),
}

/// The log's queue; cheap to clone (one per worker's connections).
#[derive(Clone)]
pub(crate) struct AccessLog {
    queue: SyncSender<Message>,
    dropped: Arc<AtomicU64>,
}

/// One answered request, as the line says it.
#[derive(Serialize)]
struct Line<'a> {
    time: String,
    peer: SocketAddr,
    method: &'a str,
    path: &'a str,
    status: u16,
    #[serde(skip_serializing_if = "Option::is_none")]
    operation: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    claim: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    log_ref: Option<String>,
    ms: f64,
}

/// What the gateway saw of a request when it arrived.
pub(crate) struct Arrived {
    at: Instant,
    peer: SocketAddr,
    method: http::Method,
    path: String,
}

impl Arrived {
    /// `request`, arriving now from `peer`.
    pub(crate) fn of<B>(request: &http::Request<B>, peer: SocketAddr) -> Arrived {
        Arrived {
            at: Instant::now(),
            peer,
            method: request.method().clone(),
            path: request.uri().path().to_owned(),
        }
    }
}

impl AccessLog {
    /// [`open`](Self::open), and the file is reopened on each SIGHUP (which
    /// otherwise ends the process): what a gateway with `access_log` runs.
    pub(crate) fn start(target: Target) -> Result<AccessLog, String> {
        let log = AccessLog::open(target)?;
        log.reopen_on_hangup()?;
        Ok(log)
    }

    /// Opens `target` (a file: created `0600`, appended to) and starts its
    /// writer thread. The error names the setting and the file.
    pub(crate) fn open(target: Target) -> Result<AccessLog, String> {
        let sink = Sink::open(target)?;
        let (queue, inbox) = std::sync::mpsc::sync_channel(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&dropped);
        std::thread::Builder::new()
            .name("idemkit-access-log".to_owned())
            .spawn(move || write_all(sink, &inbox, &counted))
            .map_err(|e| format!("access_log: cannot start its writer: {e}"))?;
        Ok(AccessLog { queue, dropped })
    }

    /// Queues the line of a request that `arrived` and was answered with
    /// `response`; `operation` is its route's (or its tool's), if it has one.
    pub(crate) fn answered(
        &self,
        arrived: &Arrived,
        operation: Option<&str>,
        response: &axum::response::Response,
    ) {
        let claim = response.extensions().get::<ClaimAnswered>();
        let millis = arrived.at.elapsed().as_secs_f64() * 1000.0;
        let line = Line {
            time: now(),
            peer: arrived.peer,
            method: arrived.method.as_str(),
            path: &arrived.path,
            status: response.status().as_u16(),
            operation,
            claim: claim.map(|c| c.outcome.as_str()),
            log_ref: claim.map(|c| c.log_ref.to_string()),
            ms: (millis * 100.0).round() / 100.0,
        };
        let Ok(mut text) = serde_json::to_string(&line) else {
            return;
        };
        text.push('\n');
        if let Err(TrySendError::Full(_)) = self.queue.try_send(Message::Line(text)) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Closes the file and opens it again at its path (after a rotation).
    fn reopen(&self) {
        let _ = self.queue.send(Message::Reopen);
    }

    /// Reopens the file on each SIGHUP from now on (SIGHUP's default, the end
    /// of the process, is then replaced).
    #[cfg(unix)]
    fn reopen_on_hangup(&self) -> Result<(), String> {
        let mut hangups = signal_hook::iterator::Signals::new([signal_hook::consts::SIGHUP])
            .map_err(|e| format!("cannot install the SIGHUP handler: {e}"))?;
        let log = self.clone();
        std::thread::Builder::new()
            .name("idemkit-access-log-hangup".to_owned())
            .spawn(move || {
                for _ in hangups.forever() {
                    log.reopen();
                }
            })
            .map(drop)
            .map_err(|e| format!("cannot start the SIGHUP handler: {e}"))
    }

    /// Elsewhere there is no SIGHUP.
    #[cfg(not(unix))]
    fn reopen_on_hangup(&self) -> Result<(), String> {
        Ok(())
    }

    /// Writes every line queued so far and flushes, waiting at most `wait`.
    pub(crate) fn flush(&self, wait: Duration) {
        let (done, flushed) = std::sync::mpsc::sync_channel(1);
        if self.queue.send(Message::Flush(done)).is_ok() {
            let _ = flushed.recv_timeout(wait);
        }
    }
}

fn now() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    crate::timestamp::rfc3339(UnixMillis::from_millis(ms))
}

/// Where the writer writes.
enum Sink {
    Stdout(io::BufWriter<io::Stdout>),
    File {
        path: PathBuf,
        file: io::BufWriter<File>,
    },
}

impl Sink {
    fn open(target: Target) -> Result<Sink, String> {
        match target {
            Target::Stdout => Ok(Sink::Stdout(io::BufWriter::new(io::stdout()))),
            Target::File(path) => {
                let file =
                    append_to(&path).map_err(|e| format!("access_log {}: {e}", path.display()))?;
                Ok(Sink::File {
                    path,
                    file: io::BufWriter::new(file),
                })
            }
        }
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Sink::Stdout(out) => out,
            Sink::File { file, .. } => file,
        }
    }

    fn reopen(&mut self) {
        if let Sink::File { path, file } = self {
            let _ = file.flush();
            match append_to(path) {
                Ok(reopened) => *file = io::BufWriter::new(reopened),
                Err(e) => tracing::warn!(
                    path = %path.display(),
                    error = %e,
                    "access log not reopened; writing on to the file open before"
                ),
            }
        }
    }
}

fn append_to(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
}

/// The writer thread: takes what is queued, writes it, flushes when the
/// queue is empty; ends when every sender is gone.
fn write_all(mut sink: Sink, inbox: &Receiver<Message>, dropped: &AtomicU64) {
    let mut failing = false;
    while let Ok(first) = inbox.recv() {
        let mut acks = Vec::new();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Line(text) => {
                    let written = sink.writer().write_all(text.as_bytes());
                    report(&mut failing, written);
                }
                Message::Reopen => sink.reopen(),
                Message::Flush(ack) => acks.push(ack),
            }
            next = inbox.try_recv().ok();
        }
        report(&mut failing, sink.writer().flush());
        let lost = dropped.swap(0, Ordering::Relaxed);
        if lost > 0 {
            tracing::warn!(
                lines = lost,
                "access log lines dropped: the disk did not keep up"
            );
        }
        for ack in acks {
            let _ = ack.try_send(());
        }
    }
}

/// Warns once when writing starts failing, and once when it works again.
fn report(failing: &mut bool, result: io::Result<()>) {
    match (result, *failing) {
        (Err(e), false) => {
            *failing = true;
            tracing::warn!(error = %e, "access log write failed; lines are lost until it works again");
        }
        (Ok(()), true) => {
            *failing = false;
            tracing::warn!("access log writes work again");
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrived(path: &str) -> Arrived {
        Arrived {
            at: Instant::now(),
            peer: SocketAddr::from(([10, 0, 0, 7], 50312)),
            method: http::Method::POST,
            path: path.to_owned(),
        }
    }

    fn lines(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    #[test]
    fn a_line_per_request_names_the_route_and_what_its_claim_decided() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.jsonl");
        let log = AccessLog::open(Target::File(path.clone())).unwrap();

        let mut claimed = axum::response::Response::new(axum::body::Body::empty());
        *claimed.status_mut() = http::StatusCode::CREATED;
        let log_ref = idemkit::Scope::new("acme", "accounts.withdraw")
            .unwrap()
            .record_id(&idemkit::IdempotencyKey::new("k-1").unwrap())
            .log_ref();
        claimed.extensions_mut().insert(ClaimAnswered {
            outcome: idemkit::http::ClaimOutcomeLabel::Replay,
            log_ref,
        });
        log.answered(
            &arrived("/accounts/A/withdraw"),
            Some("accounts.withdraw"),
            &claimed,
        );
        let passed = axum::response::Response::new(axum::body::Body::empty());
        log.answered(&arrived("/health"), None, &passed);
        log.flush(Duration::from_secs(5));

        let written = lines(&path);
        assert_eq!(written.len(), 2, "{written:?}");
        let first = &written[0];
        assert_eq!(first["peer"], "10.0.0.7:50312");
        assert_eq!(first["method"], "POST");
        assert_eq!(first["path"], "/accounts/A/withdraw");
        assert_eq!(first["status"], 201);
        assert_eq!(first["operation"], "accounts.withdraw");
        assert_eq!(first["claim"], "replay");
        assert_eq!(first["log_ref"], log_ref.to_string());
        assert!(first["ms"].as_f64().unwrap() >= 0.0);
        assert!(first["time"].as_str().unwrap().ends_with('Z'), "{first}");
        // A pass-through request: no route, no claim.
        let second = written[1].as_object().unwrap();
        assert_eq!(second["status"], 200);
        for absent in ["operation", "claim", "log_ref"] {
            assert!(!second.contains_key(absent), "{second:?}");
        }
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn a_rotated_file_is_written_anew_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("access.jsonl");
        let rotated = dir.path().join("access.jsonl.1");
        let log = AccessLog::open(Target::File(path.clone())).unwrap();
        let response = axum::response::Response::new(axum::body::Body::empty());
        log.answered(&arrived("/before"), None, &response);
        log.flush(Duration::from_secs(5));
        std::fs::rename(&path, &rotated).unwrap();
        log.answered(&arrived("/rotating"), None, &response);
        log.reopen();
        log.answered(&arrived("/after"), None, &response);
        log.flush(Duration::from_secs(5));

        let paths = |file: &Path| -> Vec<String> {
            lines(file)
                .iter()
                .map(|l| l["path"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(paths(&rotated), ["/before", "/rotating"]);
        assert_eq!(paths(&path), ["/after"]);
    }

    #[test]
    fn a_file_that_cannot_be_opened_is_refused_by_name() {
        let e = AccessLog::open(Target::File(PathBuf::from("/nonexistent/dir/access.jsonl")))
            .err()
            .unwrap();
        assert!(
            e.starts_with("access_log /nonexistent/dir/access.jsonl: "),
            "{e}"
        );
        assert_eq!(Target::of(Path::new("-")), Target::Stdout);
    }
}
