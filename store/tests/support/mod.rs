//! What the test binaries of this crate share. This module: building the
//! examples once per test binary, running the appointments service on 127.0.0.1
//! with a free port, plain HTTP/1.1 over a socket (so a test sees the exact bytes
//! and sends the exact header values it means, malformed ones included), the
//! `idemkit` command on a database, and the scope of the engine tests.
//!
//! Its submodules: [`crash`] (reopening a killed child's file), [`local`] (one
//! Local operation), [`operators`] (the operator scenarios over any store),
//! [`pg`] (a PostgreSQL store of a test's own), [`idemkit_proxy`] (an upstream
//! and `idemkit proxy` in front of it), [`proxy`] (a proxy that loses answers),
//! [`mcp`], [`notes`], [`readme`] and [`json_model`] (core's reference model of
//! JSON values, linked from core/tests/support/model.rs).

#![allow(dead_code, reason = "each test binary uses a part of this module")]

pub(crate) mod certificates;
pub(crate) mod crash;
#[cfg(feature = "axum")]
pub(crate) mod idemkit_proxy;
pub(crate) mod json_model;
pub(crate) mod local;
pub(crate) mod mcp;
pub(crate) mod notes;
pub(crate) mod operators;
#[cfg(feature = "postgres")]
pub(crate) mod pg;
pub(crate) mod proxy;
pub(crate) mod readme;
pub(crate) mod slow_clients;
#[cfg(feature = "cli")]
pub(crate) mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use idemkit::Scope;

/// The scope of the engine and crash tests: one tenant, one operation.
pub(crate) fn scope() -> Scope {
    Scope::new("acme", "charge").unwrap()
}

/// Runs `idemkit SUBCOMMAND --db DB REST...` for `args` = `[SUBCOMMAND, REST...]`.
pub(crate) fn idemkit(db: &Path, args: &[&str]) -> Output {
    // `--db` goes right after the subcommand: after `--` it would belong to CMD.
    let (subcommand, rest) = args.split_first().unwrap();
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg(subcommand)
        .arg("--db")
        .arg(db)
        .args(rest)
        .output()
        .unwrap()
}

/// Runs `idemkit ARGS...` with `stdin` on its standard input.
pub(crate) fn idemkit_with_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A command that refuses its arguments exits without reading stdin; the write
    // then fails with a broken pipe, which is not what the tests check.
    let _ = std::io::Write::write_all(&mut child.stdin.take().unwrap(), stdin);
    child.wait_with_output().unwrap()
}

/// The example's executable, built with the same cargo and target directory as
/// the tests (a no-op when it is fresh).
pub(crate) fn example_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_example("appointments", &[]))
}

/// The deliberately wrong idempotency server (`examples/naive_idempotency.rs`).
pub(crate) fn naive_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| build_example("naive_idempotency", &[]))
}

/// The example built with the `postgres` feature (`--postgres URL`), with the
/// features scripts/test-all.sh gives the PostgreSQL tests, so it is built once.
pub(crate) fn postgres_example_binary() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        build_example(
            "appointments",
            &["--features", "idemkit/postgres,idemkit-benches/postgres"],
        )
    })
}

/// `cargo build --workspace --example name`: resolved over the whole workspace,
/// as the README's `cargo test --workspace` resolves it, so the build reuses
/// that run's dependencies instead of compiling a second set whose features
/// differ (minutes on a 2-core machine).
fn build_example(name: &str, extra: &[&str]) -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let output = Command::new(env!("CARGO"))
        .args([
            "build",
            "--workspace",
            "--example",
            name,
            "--message-format=json",
        ])
        .args(extra)
        .arg("--manifest-path")
        .arg(&manifest)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("run cargo build --example {name}: {e}"));
    assert!(
        output.status.success(),
        "building the example {name} failed"
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|msg| msg["reason"] == "compiler-artifact" && msg["target"]["name"] == name)
        .find_map(|msg| msg["executable"].as_str().map(PathBuf::from))
        .expect("cargo reported the example's executable")
}

/// A running appointments service; killed when dropped.
pub(crate) struct Service {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
}

impl Service {
    /// Starts the service on `dir`'s databases with `extra` arguments and waits
    /// until it prints its address (it listens only once start-up
    /// reconciliation is done).
    pub(crate) fn start(dir: &Path, extra: &[&str]) -> Service {
        Service::start_with_env(dir, extra, &[])
    }

    /// Like [`Service::start`], with these environment variables set.
    pub(crate) fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Service {
        let mut command = Command::new(example_binary());
        command
            .arg("--db")
            .arg(dir.join("appointments.redb"))
            .arg("--provider-db")
            .arg(dir.join("provider.redb"))
            .args(extra)
            .envs(env.iter().copied());
        Service::spawn_command(command)
    }

    /// Starts `binary` with `args` (plus `--listen 127.0.0.1:0`) and waits until
    /// it prints its address and answers `/health`.
    pub(crate) fn spawn(binary: &Path, args: &[std::ffi::OsString]) -> Service {
        let mut command = Command::new(binary);
        command.args(args);
        Service::spawn_command(command)
    }

    /// Like [`Service::spawn`], for a command the caller prepared (environment
    /// variables, for example).
    pub(crate) fn spawn_command(mut command: Command) -> Service {
        let mut child = command
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the appointments example");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = lines
            .next()
            .expect("the service printed a line")
            .expect("read stdout");
        let addr = line
            .rsplit("http://")
            .next()
            .and_then(|a| a.trim().parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        // Keep draining stdout so the service never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let service = Service { child, addr };
        let health = service.get("/health", None);
        assert_eq!(health.status, 200, "GET /health");
        service
    }

    /// Waits for the process to end (after a crash switch aborted it).
    pub(crate) fn wait_exit(mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the service did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn post(&self, key: Option<&[u8]>, tenant: Option<&str>, body: &[u8]) -> Reply {
        self.post_to("/appointments", key, tenant, body)
    }

    /// `POST path` with a JSON body, an optional key and an optional tenant.
    pub(crate) fn post_to(
        &self,
        path: &str,
        key: Option<&[u8]>,
        tenant: Option<&str>,
        body: &[u8],
    ) -> Reply {
        let mut headers: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
        if let Some(key) = key {
            headers.push(("Idempotency-Key", key));
        }
        let auth;
        if let Some(tenant) = tenant {
            auth = format!("Bearer {tenant}");
            headers.push(("Authorization", auth.as_bytes()));
        }
        request(self.addr, "POST", path, &headers, body)
            .unwrap_or_else(|e| panic!("POST {path} got no response: {e}"))
    }

    pub(crate) fn get(&self, path: &str, tenant: Option<&str>) -> Reply {
        let auth;
        let mut headers: Vec<(&str, &[u8])> = Vec::new();
        if let Some(tenant) = tenant {
            auth = format!("Bearer {tenant}");
            headers.push(("Authorization", auth.as_bytes()));
        }
        request(self.addr, "GET", path, &headers, b"").expect("GET got a response")
    }

    /// The calendar provider's bookings for `tenant` (the receiving system's view).
    pub(crate) fn bookings(&self, tenant: &str) -> Vec<serde_json::Value> {
        let reply = self.get("/appointments", Some(tenant));
        assert_eq!(reply.status, 200);
        reply.json()["appointments"]
            .as_array()
            .expect("appointments array")
            .clone()
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP response, as received.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }

    /// The problem `type` without the base URI.
    pub(crate) fn problem(&self) -> String {
        assert_eq!(
            self.header("content-type"),
            Some("application/problem+json")
        );
        let t = self.json()["type"].as_str().expect("type").to_owned();
        t.strip_prefix("https://idemkit.dev/problems/")
            .expect("stable type URI")
            .to_owned()
    }
}

/// Sends one request on a fresh connection (`Connection: close`) and reads the
/// whole response. `Err` when the connection fails or closes before a response
/// (the service crashed).
pub(crate) fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    exchange(&mut stream, &addr.to_string(), method, path, headers, body)
}

/// One request on `stream` (plain TCP, or a TLS stream over it) with
/// `Connection: close`, and the whole reply read to the end.
pub(crate) fn exchange(
    stream: &mut (impl Read + Write),
    host: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &[u8])],
    body: &[u8],
) -> std::io::Result<Reply> {
    let mut out =
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n").into_bytes();
    for (name, value) in headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(body);
    stream.write_all(&out)?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no response"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad status line {status_line:?}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Ok(Reply {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

/// Retries a POST like a well-behaved client: on 409 `request-in-progress` or a
/// 503 it waits `Retry-After` seconds (or a little when the connection failed),
/// until a final answer or `within` runs out. A 409 `outcome-uncertain` counts
/// as interim too: a restarted service settles what its previous run left
/// unfinished as Unknown when it opens its store and reconciles those records
/// in the background, so a retry may arrive before the reconciler has asked the
/// provider.
pub(crate) fn post_until_final(
    service: &Service,
    key: &[u8],
    tenant: &str,
    body: &[u8],
    within: Duration,
) -> (Reply, Vec<Reply>) {
    let deadline = Instant::now() + within;
    let mut interim = Vec::new();
    loop {
        let mut headers: Vec<(&str, &[u8])> = vec![("Content-Type", b"application/json")];
        headers.push(("Idempotency-Key", key));
        let auth = format!("Bearer {tenant}");
        headers.push(("Authorization", auth.as_bytes()));
        match request(service.addr, "POST", "/appointments", &headers, body) {
            Ok(reply) if reply.status == 409 && reply.problem() == "request-in-progress" => {
                let wait: u64 = reply
                    .header("retry-after")
                    .and_then(|v| v.parse().ok())
                    .expect("Retry-After on 409 in-progress");
                interim.push(reply);
                std::thread::sleep(Duration::from_secs(wait));
            }
            Ok(reply) if reply.status == 409 && reply.problem() == "outcome-uncertain" => {
                interim.push(reply);
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(reply) if reply.status == 503 => {
                let wait: u64 = reply
                    .header("retry-after")
                    .and_then(|v| v.parse().ok())
                    .expect("Retry-After on 503");
                interim.push(reply);
                std::thread::sleep(Duration::from_secs(wait));
            }
            Ok(reply) => return (reply, interim),
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
        assert!(
            Instant::now() < deadline,
            "no final answer in {within:?}: {interim:?}"
        );
    }
}

/// CPU time (user + system, in clock ticks of 10 ms) used by what the
/// `/proc` stat file at `stat` describes: `/proc/PID/stat` for a process,
/// `/proc/thread-self/stat` for the calling thread.
/// Everything `child` wrote to its piped stderr (read to its end: call it
/// once the child has exited).
pub(crate) fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    stderr
}

pub(crate) fn cpu_ticks(stat: &str) -> u64 {
    let stat = std::fs::read_to_string(stat).unwrap();
    // Fields after the command name (which may hold spaces) start after ')'.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}
