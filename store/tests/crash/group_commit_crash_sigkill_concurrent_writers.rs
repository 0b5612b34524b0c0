//! Crash safety of group commit (invariant 2 of docs/architecture.md): with many threads whose claims and
//! completions share commits, a SIGKILL at any moment loses nothing that was
//! acknowledged.
//!
//! The test binary re-invokes itself as a child (`group_crash_child`, selected by
//! `IDEMKIT_GROUP_CRASH_DB`) in which 16 threads claim and complete fresh keys on
//! one file and print `ACK ...` only after each call returned. The parent kills
//! the child with SIGKILL after a random delay, reopens the file, and checks that
//! every acknowledged claim and completion of every child so far is there.
//! Set `IDEMKIT_CRASH_SEED` to replay a run (the seed is printed).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use crate::support::crash as crash_support;

use crash_support::{Acked, check, claim_fresh, open_retrying};
use idemkit::core::record::StoredResponse;

const DB_ENV: &str = "IDEMKIT_GROUP_CRASH_DB";
const CHILD_ENV: &str = "IDEMKIT_GROUP_CRASH_CHILD";
const THREADS: usize = 16;
const KILLS: u64 = 30;

fn say(out: &Mutex<std::io::Stdout>, line: &str) {
    let out = out.lock().unwrap();
    let mut out = out.lock();
    writeln!(out, "{line}").unwrap();
    out.flush().unwrap();
}

/// The child: runs only when the parent sets `IDEMKIT_GROUP_CRASH_DB`.
#[test]
fn group_crash_child() {
    let Ok(path) = std::env::var(DB_ENV) else {
        return;
    };
    let child: u64 = std::env::var(CHILD_ENV).unwrap().parse().unwrap();
    let store = open_retrying(Path::new(&path));
    let out = Mutex::new(std::io::stdout());
    // libtest has already printed "test group_crash_child ... " without a newline.
    say(&out, "\nREADY");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (store, out) = (&store, &out);
            s.spawn(move || {
                for i in 0.. {
                    let key_text = format!("c{child}-t{t}-{i}");
                    let guard = claim_fresh(store, &key_text);
                    say(out, &format!("ACK CLAIM {key_text}"));
                    guard
                        .complete(StoredResponse::new(200, key_text.as_bytes().to_vec()))
                        .unwrap();
                    say(out, &format!("ACK COMPLETE {key_text}"));
                }
            });
        }
    });
}

#[test]
fn sigkill_while_sixteen_threads_share_commits() {
    let mut seed = crash_support::seed("IDEMKIT_CRASH_SEED");
    let mut below = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.redb");
    let exe = std::env::current_exe().unwrap();
    let mut acked: HashMap<String, Acked> = HashMap::new();
    for child in 0..KILLS {
        let mut proc = Command::new(&exe)
            .args([
                "crash::group_commit_crash_sigkill_concurrent_writers::group_crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DB_ENV, &path)
            .env(CHILD_ENV, child.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(proc.stdout.take().unwrap()).lines();
        for line in lines.by_ref() {
            if line.unwrap().trim_end() == "READY" {
                break;
            }
        }
        std::thread::sleep(Duration::from_micros(below(60_000)));
        proc.kill().unwrap(); // SIGKILL
        proc.wait().unwrap();
        for line in lines {
            let line = line.unwrap();
            let mut parts = line.split(' ');
            if parts.next() != Some("ACK") {
                continue;
            }
            match (parts.next(), parts.next()) {
                (Some("CLAIM"), Some(key)) => {
                    acked.entry(key.to_owned()).or_insert(Acked::Claimed);
                }
                (Some("COMPLETE"), Some(key)) => {
                    acked.insert(key.to_owned(), Acked::Completed);
                }
                _ => {}
            }
        }
        check(&path, &acked, child);
    }
    let completed = acked.values().filter(|a| **a == Acked::Completed).count();
    eprintln!(
        "{KILLS} SIGKILLs, {} acknowledged claims, {completed} acknowledged completions",
        acked.len()
    );
    assert!(
        acked.len() as u64 > KILLS,
        "the children made too little progress to test anything"
    );
}
