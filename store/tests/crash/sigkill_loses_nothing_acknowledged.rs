//! Crash safety (invariant 2 of docs/architecture.md): nothing acknowledged is ever lost.
//!
//! The test binary re-invokes itself as a child (`crash_child`, selected by the
//! `IDEMKIT_CRASH_DB` environment variable) that claims, completes, releases and
//! renews records on one file as fast as it can, and prints `ACK ...` for each
//! call only *after* the call returned. The parent kills it with SIGKILL at a
//! random moment (sometimes before it even finished opening the file), then
//! reopens the file and checks that:
//!
//! - opening succeeds (redb recovers the file),
//! - every record and id decodes and the three indexes agree with the records
//!   (`Store::verify`),
//! - every acknowledged claim, completion and release of *every* child so far is
//!   there, in the acknowledged state or a later one.
//!
//! 200 kills in the normal run; `sigkill_many_times` (ignored) does 2,000.
//! The seed is printed; set `IDEMKIT_CRASH_SEED` to replay a run.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::crash as crash_support;

use crash_support::{Acked, check, claim_fresh, open_retrying};
use idemkit::core::record::StoredResponse;

const DB_ENV: &str = "IDEMKIT_CRASH_DB";
const CHILD_ENV: &str = "IDEMKIT_CRASH_CHILD";
/// [`crash_child`] by its full name in this test binary.
const CHILD_TEST: &str = "crash::sigkill_loses_nothing_acknowledged::crash_child";

/// The child: runs only when the parent sets `IDEMKIT_CRASH_DB`.
#[test]
fn crash_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let child: u64 = std::env::var(CHILD_ENV).unwrap().parse().unwrap();
    let store = open_retrying(Path::new(&path));
    let mut out = std::io::stdout().lock();
    // libtest has already printed "test crash_child ... " without a newline.
    writeln!(out, "\nREADY").unwrap();
    out.flush().unwrap();
    for i in 0.. {
        let key_text = format!("c{child}-{i}");
        let mut guard = claim_fresh(&store, &key_text);
        writeln!(out, "ACK CLAIM {key_text}").unwrap();
        out.flush().unwrap();
        match i % 4 {
            0 | 1 => {
                guard
                    .complete(StoredResponse::new(200, key_text.as_bytes().to_vec()))
                    .unwrap();
                writeln!(out, "ACK COMPLETE {key_text}").unwrap();
            }
            2 => {
                guard.release().unwrap();
                writeln!(out, "ACK RELEASE {key_text}").unwrap();
            }
            _ => {
                guard.renew().unwrap();
                guard.abandon();
            }
        }
        out.flush().unwrap();
        if i % 8 == 7 {
            // Nothing is due yet; this exercises the GC index walk under kills.
            let _ = store.gc(16).unwrap();
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn run(kills: u64) {
    let seed = crash_support::seed("IDEMKIT_CRASH_SEED");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked: HashMap<String, Acked> = HashMap::new();
    let started = Instant::now();
    let mut killed_before_ready = 0;
    for child in 0..kills {
        let mut proc = Command::new(&exe)
            .args([CHILD_TEST, "--exact", "--nocapture", "--test-threads=1"])
            .env(DB_ENV, &path)
            .env(CHILD_ENV, child.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = proc.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        if rng.below(10) == 0 {
            // Kill during start-up or while redb opens (and maybe repairs) the file.
            std::thread::sleep(Duration::from_micros(rng.below(15_000)));
            killed_before_ready += 1;
        } else {
            for line in lines.by_ref() {
                if line.unwrap().trim_end() == "READY" {
                    break;
                }
            }
            std::thread::sleep(Duration::from_micros(rng.below(50_000)));
        }
        proc.kill().unwrap(); // SIGKILL
        proc.wait().unwrap();
        for line in lines {
            let line = line.unwrap();
            let mut parts = line.split(' ');
            if parts.next() != Some("ACK") {
                continue;
            }
            let (Some(what), Some(key)) = (parts.next(), parts.next()) else {
                continue;
            };
            let state = match what {
                "CLAIM" => Acked::Claimed,
                "COMPLETE" => Acked::Completed,
                "RELEASE" => Acked::Released,
                other => panic!("unexpected ack {other}"),
            };
            acked.insert(key.to_owned(), state);
        }
        check(&path, &acked, child);
    }
    let completions = acked.values().filter(|a| **a == Acked::Completed).count();
    eprintln!(
        "{kills} SIGKILLs ({killed_before_ready} before the child was ready), {} acknowledged keys ({completions} completed), {:?}",
        acked.len(),
        started.elapsed()
    );
    assert!(
        acked.len() as u64 > kills,
        "the children made too little progress to test anything"
    );
}

#[test]
fn sigkill_two_hundred_times() {
    run(200);
}

#[test]
#[ignore = "long: 2,000 kills; run with --ignored"]
fn sigkill_many_times() {
    run(2_000);
}
