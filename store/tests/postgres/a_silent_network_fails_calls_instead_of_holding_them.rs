//! The network between the store and its server starts dropping every packet
//! without a word: no reset, no "unreachable", as in a partition or behind a
//! firewall that forgot the flow. TCP alone would resend a statement for about
//! 15 minutes before its call failed; with `dead_connection_timeout` the call
//! fails with `PgError::Unavailable` after about that long, and once the
//! network is back the next call succeeds on a new connection.
//!
//! The silence is real: the store runs in a child process inside a network
//! namespace of its own, reaching the server through a veth pair and a relay
//! in this process, and the test takes the veth link down. Creating a namespace
//! needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN) and `ip` (iproute2); where
//! either is missing the test says so and stops.

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use idemkit::adapters::postgres::{PgOptions, PostgresAdapter};
use idemkit::core::machine::Policy;
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

/// The child's store gives a connection up after this much silence.
const SILENCE: Duration = Duration::from_secs(2);
/// The URL the child connects to (set only for the child).
const CHILD_URL: &str = "IDEMKIT_TEST_SILENT_NETWORK_URL";
/// What the child prints before each of its reports.
const REPORT: &str = "silent-network: ";

/// A network namespace and the veth pair into it, deleted when dropped.
struct Namespace {
    name: String,
    /// This side of the pair: taking it down silences the link both ways.
    link: String,
    /// This side's address; the namespace's side is the next one.
    here: String,
    there: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("`ip` cannot run: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl Namespace {
    fn create() -> Result<Namespace, String> {
        let pid = std::process::id();
        let ns = Namespace {
            name: format!("idemkit-silent-{pid}"),
            link: format!("iks{pid}a"),
            here: format!("10.{}.{}.1", 200 + pid % 50, (pid / 50) % 256),
            there: format!("10.{}.{}.2", 200 + pid % 50, (pid / 50) % 256),
        };
        ip(&["netns", "add", &ns.name])?;
        // From here on, dropping `ns` deletes the namespace and the pair with it.
        let peer = format!("iks{pid}b");
        ip(&[
            "link", "add", &ns.link, "type", "veth", "peer", "name", &peer, "netns", &ns.name,
        ])?;
        ip(&["addr", "add", &format!("{}/30", ns.here), "dev", &ns.link])?;
        ip(&["link", "set", &ns.link, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns.name, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&["addr", "add", &format!("{}/30", ns.there), "dev", &peer])?;
        inside(&["link", "set", &peer, "up"])?;
        Ok(ns)
    }

    fn link(&self, state: &str) {
        ip(&["link", "set", &self.link, state]).unwrap_or_else(|e| panic!("{e}"));
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = ip(&["link", "del", &self.link]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// Relays every connection made to `listener` to `server`, both ways.
fn relay(listener: TcpListener, server: String) {
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let Ok(upstream) = TcpStream::connect(&server) else {
                continue;
            };
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), upstream.try_clone().unwrap()),
                (upstream, client),
            ] {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            }
        }
    });
}

/// `url` (`postgres://user@host:port/db…`) split at its `host:port`.
fn host_port(url: &str) -> (&str, &str, &str) {
    let start = url.find('@').map_or("postgres://".len(), |at| at + 1);
    let end = url[start..]
        .find('/')
        .map_or(url.len(), |slash| start + slash);
    (&url[..start], &url[start..end], &url[end..])
}

/// The child's next report, or a failure naming what it was waiting for.
fn next_report(lines: &mpsc::Receiver<String>, waiting_for: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                // libtest may have begun the line with the test's name.
                if let Some((_, report)) = line.split_once(REPORT) {
                    return report.to_owned();
                }
            }
            Err(e) => panic!(
                "no report of {waiting_for} from the store's process within {within:?} ({e})"
            ),
        }
    }
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_store_call_on_a_silent_network_fails_within_the_dead_connection_timeout() {
    let ns = match Namespace::create() {
        Ok(ns) => ns,
        Err(why) => {
            eprintln!(
                "skipped: a network namespace is needed to silence the network ({why}); \
                 run as root with iproute2"
            );
            return;
        }
    };
    let url = pg_support::url();
    let (before, server, after) = host_port(&url);
    let listener = TcpListener::bind((ns.here.as_str(), 0)).unwrap();
    let child_url = format!("{before}{}{after}", listener.local_addr().unwrap());
    relay(listener, server.to_owned());

    let this_test = module_path!().split_once("::").map_or("", |(_, rest)| rest);
    let mut child = Killed(
        Command::new("ip")
            .args(["netns", "exec", &ns.name])
            .arg(std::env::current_exe().unwrap())
            .args([
                "--exact",
                &format!("{this_test}::the_store_s_side"),
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_URL, &child_url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut to_child = child.0.stdin.take().unwrap();
    let from_child = BufReader::new(child.0.stdout.take().unwrap());
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in from_child.lines().map_while(Result::ok) {
            println!("{line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let ready = next_report(&lines, "a first claim", Duration::from_secs(60));
    assert_eq!(ready, "claimed", "the store's process before the silence");

    ns.link("down");
    writeln!(to_child, "silenced").unwrap();
    // TCP alone would hold the call for many minutes; the child's store gives
    // the connection up after SILENCE and fails the call.
    let failed = next_report(
        &lines,
        "the call during the silence",
        Duration::from_secs(60),
    );
    let (millis, error) = failed
        .strip_prefix("failed after ")
        .and_then(|rest| rest.split_once(" ms: "))
        .unwrap_or_else(|| panic!("the call during the silence did not fail: {failed}"));
    let waited = Duration::from_millis(millis.parse().unwrap());
    assert!(
        error.contains("PostgreSQL unavailable"),
        "the call failed, but not as the store being unavailable: {error}"
    );
    // It failed because of the silence (not at once), and about when the
    // timeout says: the dead connection, then one connect attempt that times
    // out (2 s), with room for a busy machine.
    assert!(
        waited >= SILENCE - Duration::from_millis(500),
        "failed after {waited:?}, before {SILENCE:?} of silence: {error}"
    );
    assert!(
        waited <= SILENCE * 6,
        "failed only after {waited:?} with a dead connection timeout of {SILENCE:?}: {error}"
    );

    ns.link("up");
    writeln!(to_child, "healed").unwrap();
    let recovered = next_report(&lines, "a claim once healed", Duration::from_secs(60));
    assert_eq!(
        recovered, "claimed again",
        "the store's process after the silence"
    );
    let status = child.0.wait().unwrap();
    assert!(status.success(), "the store's process: {status}");
}

#[test]
#[ignore = "the store's side of the test above, which runs it in a network namespace"]
fn the_store_s_side() {
    let url = std::env::var(CHILD_URL)
        .unwrap_or_else(|_| panic!("{CHILD_URL} is not set: the test above runs this one"));
    let options = PgOptions {
        // One connection, handed out unchecked: the call after the silence
        // starts on the connection the silence caught.
        validate_connections: false,
        dead_connection_timeout: SILENCE,
        ..pg_support::options(&pg_support::unique_schema("silent"), 1)
    };
    let store = Store::from(PostgresAdapter::connect_with(&url, options).unwrap());
    let scope = Scope::new("tenant", "book").unwrap();
    let policy = Policy::default();
    let claim = |key: &str| {
        store.claim(
            &scope,
            &IdempotencyKey::new(key).unwrap(),
            Fingerprint::from_bytes([7; 32]),
            "worker",
            &policy,
        )
    };
    let mut stdin = std::io::stdin().lock();
    let mut wait_for = |word: &str| {
        let mut line = String::new();
        stdin.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), word, "from the test");
    };

    assert!(matches!(claim("before"), Ok(Claim::Execute(_))));
    println!("{REPORT}claimed");
    wait_for("silenced");
    let started = Instant::now();
    match claim("during") {
        Ok(_) => println!("{REPORT}succeeded"),
        Err(e) => println!(
            "{REPORT}failed after {} ms: {e}",
            started.elapsed().as_millis()
        ),
    }
    wait_for("healed");
    // The pool makes a new connection; the link may take a moment to carry it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match claim("after") {
            Ok(Claim::Execute(_)) => break,
            Ok(_) => panic!("a new key was not given to execute"),
            Err(e) if Instant::now() < deadline => {
                assert!(e.to_string().contains("unavailable"), "{e}");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("still failing 30 s after the network came back: {e}"),
        }
    }
    println!("{REPORT}claimed again");
}
