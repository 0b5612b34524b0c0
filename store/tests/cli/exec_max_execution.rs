//! `idemkit exec --max-execution`: after it the lease of a hung command is no
//! longer renewed, so its external record is listed as unresolved and a second
//! run exits 69 (uncertain) without running the command again.
//!
//! The waits wait for events (a file the command writes, a record listed), each
//! bounded by a generous deadline; nothing asserts a time.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::idemkit;

const TARGET: [&str; 6] = [
    "--tenant",
    "acme",
    "--operation",
    "report.generate",
    "--key",
    "hung",
];

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_hung_command_past_max_execution_is_unresolved_and_never_run_twice() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let go = dir.path().join("go");
    // Runs until the test creates `go` (a command that hangs).
    let script = format!(
        "echo run >> {}; while [ ! -f {} ]; do sleep 0.05; done; echo done",
        ran.display(),
        go.display()
    );
    let mut runner = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .arg("exec")
        .args(TARGET)
        .args(["--lease", "1", "--max-execution", "1", "--db"])
        .arg(&db)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the command started", || ran.exists());
    eventually("the hung record is listed as unresolved", || {
        let listed = idemkit(&db, &["list", "--unresolved", "--json"]);
        text(&listed.stdout).contains("\"hung\"")
    });
    let second = {
        let mut args = TARGET.to_vec();
        args.extend(["--", "sh", "-c"]);
        let again = format!("echo run >> {}", ran.display());
        let mut all: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        all.push(again);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        idemkit(&db, &[&["exec"][..], &refs].concat())
    };
    assert_eq!(second.status.code(), Some(69), "{}", text(&second.stderr));
    std::fs::write(&go, b"").unwrap();
    let out = runner.wait().unwrap();
    assert!(
        out.code().is_some(),
        "the hung command finished once let go"
    );
    let runs = std::fs::read_to_string(&ran).unwrap().lines().count();
    assert_eq!(runs, 1, "never run twice");
    let _ = runner.stdout.take();
}
