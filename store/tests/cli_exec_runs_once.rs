//! `idemkit exec`: first run, replay of the stored stdout and status, a changed
//! body (65, not run), an Unknown record (69, log reference), a released failure
//! that runs again, and the lease renewal of a long command.

use std::path::Path;
use std::process::{Command, Output};

fn idemkit(db: &Path, args: &[&str]) -> Output {
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

fn exec(db: &Path, key: &str, extra: &[&str], script: &str) -> Output {
    let mut args = vec![
        "exec",
        "--tenant",
        "acme",
        "--operation",
        "invoice.send",
        "--key",
        key,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", script]);
    idemkit(db, &args)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn first_run_then_replay_with_stored_stdout_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let script = format!(
        "echo run >> {}; echo 'invoice 42 sent'; exit 0",
        ran.display()
    );
    let first = exec(&db, "inv-42", &["--effect", "local"], &script);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "invoice 42 sent\n");
    let again = exec(&db, "inv-42", &["--effect", "local"], &script);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(text(&again.stdout), "invoice 42 sent\n");
    assert!(
        text(&again.stderr).contains("replayed"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(lines(&ran), 1, "the command ran exactly once");

    // A stored non-zero status (--on-failure store) is replayed too.
    let failing = format!("echo run >> {}; echo partial; exit 7", ran.display());
    let first = exec(&db, "inv-43", &["--on-failure", "store"], &failing);
    assert_eq!(first.status.code(), Some(7));
    let again = exec(&db, "inv-43", &["--on-failure", "store"], &failing);
    assert_eq!(again.status.code(), Some(7));
    assert_eq!(text(&again.stdout), "partial\n");
    assert_eq!(lines(&ran), 2);
}

#[test]
fn changed_body_exits_65_without_running() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let a = dir.path().join("a.json");
    let b = dir.path().join("b.json");
    std::fs::write(&a, br#"{"amount":10}"#).unwrap();
    std::fs::write(&b, br#"{"amount":99}"#).unwrap();
    let script = format!("echo run >> {}", ran.display());
    let a_arg = a.to_str().unwrap();
    let b_arg = b.to_str().unwrap();
    assert_eq!(
        exec(&db, "k", &["--body", a_arg], &script).status.code(),
        Some(0)
    );
    let changed = exec(&db, "k", &["--body", b_arg], &script);
    assert_eq!(changed.status.code(), Some(65), "{}", text(&changed.stderr));
    assert!(text(&changed.stderr).contains("different body"));
    assert_eq!(lines(&ran), 1);
    // The same body still replays.
    assert_eq!(
        exec(&db, "k", &["--body", a_arg], &script).status.code(),
        Some(0)
    );
    assert_eq!(lines(&ran), 1);
}

#[test]
fn unknown_outcome_exits_69_with_the_log_reference() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let script = format!("echo run >> {}; exit 3", ran.display());
    // External effect (the default) and a failure: the outcome is unknown.
    let first = exec(&db, "k", &[], &script);
    assert_eq!(first.status.code(), Some(3));
    let again = exec(&db, "k", &[], &script);
    assert_eq!(again.status.code(), Some(69));
    let shown = idemkit(
        &db,
        &[
            "show",
            "--tenant",
            "acme",
            "--operation",
            "invoice.send",
            "--key",
            "k",
            "--json",
        ],
    );
    let record: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let log_ref = record["log_ref"].as_str().unwrap();
    assert_eq!(record["state"], "unknown");
    assert!(
        text(&again.stderr).contains(log_ref),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(lines(&ran), 1, "an unknown outcome is never re-executed");
    // Resolved as not applied, it runs again.
    let resolved = idemkit(
        &db,
        &[
            "resolve",
            "--tenant",
            "acme",
            "--operation",
            "invoice.send",
            "--key",
            "k",
            "--not-applied",
        ],
    );
    assert_eq!(
        resolved.status.code(),
        Some(0),
        "{}",
        text(&resolved.stderr)
    );
    let third = exec(&db, "k", &[], &format!("echo run >> {}", ran.display()));
    assert_eq!(third.status.code(), Some(0));
    assert_eq!(lines(&ran), 2);
}

#[test]
fn a_local_failure_is_released_and_runs_again() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let script = format!("echo run >> {}; exit 1", ran.display());
    assert_eq!(
        exec(&db, "k", &["--effect", "local"], &script)
            .status
            .code(),
        Some(1)
    );
    assert_eq!(
        exec(&db, "k", &["--effect", "local"], &script)
            .status
            .code(),
        Some(1)
    );
    assert_eq!(lines(&ran), 2);
}

#[test]
fn a_running_command_keeps_its_lease_and_others_exit_75() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let started = dir.path().join("started");
    // A 1 s lease and a command that runs for 3 s: without renewal, a second run
    // would take over (Local) after 1 s.
    let slow = format!("touch {}; sleep 3; echo slow-done", started.display());
    let runner = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args([
            "exec",
            "--tenant",
            "acme",
            "--operation",
            "invoice.send",
            "--key",
            "slow",
        ])
        .args(["--effect", "local", "--lease", "1", "--db"])
        .arg(&db)
        .args(["--", "sh", "-c", &slow])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    while !started.exists() {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for _ in 0..4 {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let other = exec(
            &db,
            "slow",
            &["--effect", "local", "--lease", "1"],
            "echo intruder",
        );
        assert_eq!(other.status.code(), Some(75), "{}", text(&other.stderr));
        assert!(text(&other.stderr).contains("retry in"));
    }
    let out = runner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), "slow-done\n");
}

#[test]
fn stored_output_is_bounded_and_json_output_is_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let first = exec(
        &db,
        "big",
        &["--max-output", "5", "--effect", "local"],
        "echo 0123456789",
    );
    assert_eq!(first.status.code(), Some(0));
    assert_eq!(
        text(&first.stdout),
        "0123456789\n",
        "the first run streams everything"
    );
    assert!(text(&first.stderr).contains("--max-output"));
    let again = exec(
        &db,
        "big",
        &["--max-output", "5", "--effect", "local"],
        "echo 0123456789",
    );
    assert_eq!(
        text(&again.stdout),
        "01234",
        "only the bounded prefix is stored"
    );

    let json_run = exec(&db, "j", &["--json", "--effect", "local"], "echo hi");
    let value: serde_json::Value = serde_json::from_slice(&json_run.stdout).unwrap();
    assert_eq!(value["outcome"], "executed");
    assert_eq!(value["recorded"], "completed");
    assert_eq!(value["stdout"], "hi\n");
    let replay = exec(&db, "j", &["--json", "--effect", "local"], "echo hi");
    let value: serde_json::Value = serde_json::from_slice(&replay.stdout).unwrap();
    assert_eq!(value["outcome"], "replayed");
    assert_eq!(value["exit_status"], 0);
}
