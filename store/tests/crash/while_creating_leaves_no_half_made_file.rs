//! A process killed while it creates a store (or a client journal) must not
//! leave half of a file at its path.
//!
//! redb initialises a new file in place and writes its magic number last; a
//! SIGKILL in between must not leave a non-empty file that redb refuses for ever
//! ("magic number mismatch"), or a service killed during its first start could
//! never start again. Here every round kills a child that is creating a fresh
//! file, at a moment spread over its creation, and the next open must succeed.
//!
//! The test binary re-invokes itself as the child (`creating_child`, selected by
//! `IDEMKIT_CREATE_DB`; `IDEMKIT_CREATE_WHAT` says whether it makes a store or
//! a journal). The seed is printed; `IDEMKIT_CREATE_SEED` replays it.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::crash as crash_support;

use idemkit::adapters::redb::OpenError;
use idemkit::journal::Journal;

const DB_ENV: &str = "IDEMKIT_CREATE_DB";
const WHAT_ENV: &str = "IDEMKIT_CREATE_WHAT";

/// Which file the children create.
#[derive(Clone, Copy, Debug)]
enum What {
    Store,
    Journal,
}

/// The child: creates the store, says so, and waits to be killed.
#[test]
fn creating_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let path = Path::new(&path);
    let opened: Box<dyn std::any::Any> = match std::env::var(WHAT_ENV).as_deref() {
        Ok("journal") => Box::new(Journal::open(path).unwrap()),
        _ => Box::new(idemkit::open(path).unwrap()),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "\nREADY").unwrap();
    out.flush().unwrap();
    drop(out);
    std::thread::sleep(Duration::from_secs(60));
    drop(opened);
}

fn spawn_child(path: &Path, what: What) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "crash::while_creating_leaves_no_half_made_file::creating_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(DB_ENV, path)
        .env(WHAT_ENV, format!("{what:?}").to_lowercase())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// How long a child takes from its spawn to `READY` (start-up and creation).
fn time_to_ready(path: &Path, what: What) -> Duration {
    let started = Instant::now();
    let mut child = spawn_child(path, what);
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines {
        if line.unwrap().trim_end() == "READY" {
            break;
        }
    }
    let took = started.elapsed();
    child.kill().unwrap();
    child.wait().unwrap();
    took
}

/// Opens `path` as `what`, waiting while the killed child's lock is still held.
fn open_after_kill(path: &Path, what: What, round: u64, after: Duration) {
    let started = Instant::now();
    loop {
        let opened = match what {
            What::Store => idemkit::open(path).map(|store| {
                assert!(
                    store.verify().unwrap().problems.is_empty(),
                    "round {round}: the reopened store has problems"
                );
            }),
            What::Journal => match Journal::open(path) {
                Ok(journal) => {
                    journal.get("absent").unwrap();
                    return;
                }
                Err(e) => panic!(
                    "round {round}, killed {after:?} after its spawn: reopening the journal failed: {e}"
                ),
            },
        };
        match opened {
            Ok(()) => return,
            Err(OpenError::Busy { .. }) if started.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => {
                panic!("round {round}, killed {after:?} after its spawn: reopening failed: {e}")
            }
        }
    }
}

#[test]
fn sigkill_during_creation_leaves_an_openable_store() {
    kill_while_creating(What::Store);
}

#[test]
fn sigkill_during_creation_leaves_an_openable_journal() {
    kill_while_creating(What::Journal);
}

fn kill_while_creating(what: What) {
    let seed = crash_support::seed("IDEMKIT_CREATE_SEED");
    let mut rng = seed;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let dir = tempfile::tempdir().unwrap();
    // Where to aim the kills: around the moment a child becomes ready, when the
    // file is being made. Start from the median of a few children, then follow
    // the machine's load as it changes (other tests run beside this one): a kill
    // that came after `READY` moves the aim earlier, one that came before moves
    // it later, so the kills keep straddling creation.
    let mut calibration: Vec<Duration> = (0..5)
        .map(|i| time_to_ready(&dir.path().join(format!("calibrate-{i}.redb")), what))
        .collect();
    calibration.sort();
    let mut aim_micros = u64::try_from(calibration[2].as_micros()).unwrap().max(1);
    let (mut earliest, mut latest) = (Duration::MAX, Duration::ZERO);
    let mut killed_before_ready = 0;
    for round in 0..60 {
        let path = dir.path().join(format!("round-{round}.redb"));
        let mut child = spawn_child(&path, what);
        let after = Duration::from_micros(aim_micros / 2 + next() % aim_micros);
        (earliest, latest) = (earliest.min(after), latest.max(after));
        std::thread::sleep(after);
        child.kill().unwrap();
        let ready = BufReader::new(child.stdout.take().unwrap())
            .lines()
            .any(|line| line.is_ok_and(|l| l.trim_end() == "READY"));
        child.wait().unwrap();
        if ready {
            aim_micros = (aim_micros * 7 / 8).max(1);
        } else {
            killed_before_ready += 1;
            aim_micros = aim_micros * 9 / 8 + 1;
        }
        open_after_kill(&path, what, round, after);
    }
    eprintln!(
        "{what:?}: 60 kills from {earliest:?} to {latest:?} after spawn, \
         {killed_before_ready} before the child was ready (median time to ready {:?})",
        calibration[2]
    );
    // The kills must have spread over creation, not all landed after it.
    assert!(
        killed_before_ready > 0,
        "every child was ready before its kill: the kills missed creation"
    );
}
