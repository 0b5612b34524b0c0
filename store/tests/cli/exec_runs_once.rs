//! `idemkit exec`: first run, replay of the stored stdout and status, a changed
//! body (65, not run), an Unknown record (69, log reference), a released failure
//! that runs again, the lease renewal of a long command (each attempt bounded
//! while another process holds the file), `*.json` bodies compared by value, and
//! the command never outliving exec (SIGKILL, SIGTERM).

use std::path::Path;
use std::process::{Command, Output};

use crate::support::idemkit;

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

#[test]
fn json_bodies_are_compared_by_value_not_by_spelling() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let first_body = dir.path().join("first.json");
    let respelled = dir.path().join("respelled.json");
    let changed = dir.path().join("changed.json");
    std::fs::write(&first_body, br#"{"amount": 10, "currency": "EUR"}"#).unwrap();
    std::fs::write(
        &respelled,
        b"{\"currency\":\"\\u0045UR\",\n \"amount\":1.0e1}",
    )
    .unwrap();
    std::fs::write(&changed, br#"{"amount": 11, "currency": "EUR"}"#).unwrap();
    let script = format!("echo run >> {}; echo charged", ran.display());
    let with_body = |path: &Path| {
        let path = path.to_str().unwrap().to_owned();
        exec(
            &db,
            "charge-1",
            &[
                "--effect",
                "local",
                "--content-type",
                "application/json",
                "--body",
                &path,
            ],
            &script,
        )
    };
    assert_eq!(with_body(&first_body).status.code(), Some(0));
    let replay = with_body(&respelled);
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    assert_eq!(text(&replay.stdout), "charged\n");
    assert_eq!(with_body(&changed).status.code(), Some(65));
    assert_eq!(lines(&ran), 1, "the command ran once");

    std::fs::write(&changed, b"{\"amount\": 10, \"amount\": 10}").unwrap();
    let invalid = with_body(&changed);
    assert_eq!(invalid.status.code(), Some(65));
    assert!(
        text(&invalid.stderr).contains("duplicate"),
        "{}",
        text(&invalid.stderr)
    );
}

#[test]
fn a_respelled_json_body_file_replays_without_a_content_type() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let first_body = dir.path().join("first.json");
    let respelled = dir.path().join("respelled.json");
    let changed = dir.path().join("changed.json");
    std::fs::write(&first_body, br#"{"amount": 10, "currency": "EUR"}"#).unwrap();
    std::fs::write(&respelled, b"{\"currency\":\"EUR\",\n  \"amount\":10}").unwrap();
    std::fs::write(&changed, br#"{"amount": 11, "currency": "EUR"}"#).unwrap();
    let script = format!("echo run >> {}; echo charged", ran.display());
    // No --content-type: the file's name says JSON.
    let with_body = |path: &Path| {
        let path = path.to_str().unwrap().to_owned();
        exec(&db, "charge-2", &["--body", &path], &script)
    };
    let first = with_body(&first_body);
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let replay = with_body(&respelled);
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    assert_eq!(text(&replay.stdout), "charged\n");
    assert!(text(&replay.stderr).contains("replayed"));
    assert_eq!(with_body(&changed).status.code(), Some(65));
    assert_eq!(lines(&ran), 1, "the command ran once");

    // Any other file is still compared byte for byte.
    let first_txt = dir.path().join("first.txt");
    let respelled_txt = dir.path().join("respelled.txt");
    std::fs::copy(&first_body, &first_txt).unwrap();
    std::fs::copy(&respelled, &respelled_txt).unwrap();
    let txt = |path: &Path| {
        let path = path.to_str().unwrap().to_owned();
        exec(&db, "charge-3", &["--body", &path], &script)
    };
    assert_eq!(txt(&first_txt).status.code(), Some(0));
    assert_eq!(txt(&respelled_txt).status.code(), Some(65));
    assert_eq!(lines(&ran), 2);
}

/// Polls `done` every 20 ms for at most `secs` seconds.
fn poll_until(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    done()
}

/// The pid in `path`, once the script has written it.
fn read_pid(path: &Path) -> u32 {
    assert!(
        poll_until(30, || path.exists()),
        "{} was never written",
        path.display()
    );
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A running process: its state is not zombie, and it is the one first seen
/// (same start time, so a reused pid does not count).
#[cfg(target_os = "linux")]
struct Watched {
    pid: u32,
    start: String,
}

#[cfg(target_os = "linux")]
impl Watched {
    fn stat(pid: u32) -> Option<(String, String)> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after_name = stat.rsplit_once(')')?.1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        // Fields 3 (state) and 22 (start time) of proc_pid_stat(5).
        Some((fields[0].to_owned(), fields[19].to_owned()))
    }

    fn new(pid: u32) -> Watched {
        let (state, start) = Watched::stat(pid).expect("the process runs");
        assert_ne!(state, "Z", "pid {pid} already exited");
        Watched { pid, start }
    }

    fn alive(&self) -> bool {
        matches!(Watched::stat(self.pid), Some((state, start)) if state != "Z" && start == self.start)
    }
}

/// A command that starts a background process (in its process group) and
/// writes both pids, then waits.
#[cfg(target_os = "linux")]
fn group_script(dir: &Path, ran: &Path) -> String {
    let d = dir.display();
    format!(
        "echo run >> {ran}; sleep 30 & echo $! > {d}/bg.tmp; mv {d}/bg.tmp {d}/bg.pid; \
         echo $$ > {d}/sh.tmp; mv {d}/sh.tmp {d}/sh.pid; wait",
        ran = ran.display()
    )
}

#[cfg(target_os = "linux")]
fn spawn_exec(db: &Path, key: &str, extra: &[&str], script: &str) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["exec", "--db"])
        .arg(db)
        .args([
            "--tenant",
            "acme",
            "--operation",
            "invoice.send",
            "--key",
            key,
        ])
        .args(extra)
        .args(["--", "sh", "-c", script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[cfg(target_os = "linux")]
#[test]
fn a_sigkilled_exec_leaves_no_process_behind() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let mut runner = spawn_exec(
        &db,
        "killed",
        &["--lease", "1"],
        &group_script(dir.path(), &ran),
    );
    let shell = Watched::new(read_pid(&dir.path().join("sh.pid")));
    let background = Watched::new(read_pid(&dir.path().join("bg.pid")));
    runner.kill().unwrap(); // SIGKILL
    runner.wait().unwrap();
    let gone = poll_until(20, || !shell.alive() && !background.alive());
    assert!(
        gone,
        "after exec was SIGKILLed: the command (pid {}) alive: {}, the process it started (pid {}) alive: {}",
        shell.pid,
        shell.alive(),
        background.pid,
        background.alive()
    );
    // Nobody recorded the outcome: once the 1 s lease expires the record of an
    // external effect is unknown, and nothing runs it again.
    let mut code = None;
    assert!(poll_until(30, || {
        code = exec(&db, "killed", &["--lease", "1"], "echo again")
            .status
            .code();
        code != Some(75)
    }));
    assert_eq!(code, Some(69));
    assert_eq!(lines(&ran), 1, "the command ran once");
}

#[cfg(target_os = "linux")]
#[test]
fn a_sigtermed_exec_stops_the_command_group_and_records_the_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let runner = spawn_exec(
        &db,
        "stopped",
        &["--effect", "local"],
        &group_script(dir.path(), &ran),
    );
    let shell = Watched::new(read_pid(&dir.path().join("sh.pid")));
    let background = Watched::new(read_pid(&dir.path().join("bg.pid")));
    let killed = Command::new("kill")
        .args(["-TERM", &runner.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let out = runner.wait_with_output().unwrap();
    // The shell died of the forwarded SIGTERM: 128 + 15.
    assert_eq!(out.status.code(), Some(143), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("process group"),
        "{}",
        text(&out.stderr)
    );
    assert!(!shell.alive(), "the command outlived exec");
    assert!(
        poll_until(20, || !background.alive()),
        "the process the command started (pid {}) outlived exec",
        background.pid
    );
    // A local effect killed by a signal is released: a retry runs it.
    let again = exec(
        &db,
        "stopped",
        &["--effect", "local"],
        &format!("echo run >> {}", ran.display()),
    );
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(lines(&ran), 2);
}

#[test]
fn a_renewal_attempt_gives_up_after_a_third_of_the_lease_while_another_process_holds_the_file() {
    use std::io::BufRead;

    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let ran = dir.path().join("ran");
    let started = dir.path().join("started");
    let go = dir.path().join("go");
    let script = format!(
        "echo run >> {}; touch {}; while [ ! -e {} ]; do sleep 0.05; done; echo finished",
        ran.display(),
        started.display(),
        go.display()
    );
    let mut runner = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["exec", "--db"])
        .arg(&db)
        .args([
            "--tenant",
            "acme",
            "--operation",
            "invoice.send",
            "--key",
            "held",
        ])
        .args(["--lease", "3", "--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = runner.stderr.take().unwrap();
    let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let _ = line_tx.send(line.clone());
        }
    });
    assert!(
        poll_until(30, || started.exists()),
        "the command never started"
    );

    // This process holds the store file (exec's renewer may have it for a moment).
    let mut holder = None;
    assert!(poll_until(30, || {
        holder = idemkit::open(&db).ok();
        holder.is_some()
    }));

    // Each renewal attempt gives up at its bound (a third of the 3 s lease) and is
    // tried again until the lease ends. Were an attempt to wait out the minute
    // exec allows for recording, neither line would come.
    let mut seen = Vec::new();
    let ended = loop {
        match line_rx.recv_timeout(std::time::Duration::from_secs(30)) {
            Ok(line) => {
                let ended = line.contains("before a renewal got through");
                seen.push(line);
                if ended {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    assert!(ended, "the lease's end was never reported: {seen:#?}");
    let gave_up: Vec<&String> = seen
        .iter()
        .filter(|l| {
            l.contains("renewing the lease")
                && l.contains("the bound of one attempt (a third of the 3000 ms lease)")
        })
        .collect();
    assert!(!gave_up.is_empty(), "{seen:#?}");
    assert!(
        gave_up
            .iter()
            .all(|l| l.contains("locked by another process")),
        "each attempt failed on the held file: {gave_up:#?}"
    );

    // Let go: the command ends and its outcome is recorded (nobody took over).
    drop(holder);
    std::fs::write(&go, b"").unwrap();
    let status = runner.wait().unwrap();
    reader.join().unwrap();
    let rest: Vec<String> = line_rx.try_iter().collect();
    assert_eq!(status.code(), Some(0), "{seen:#?} {rest:#?}");
    let replay = exec(&db, "held", &["--lease", "3"], &script);
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    assert_eq!(text(&replay.stdout), "finished\n");
    assert_eq!(lines(&ran), 1, "the command ran once");
}

/// Kills a process when dropped, so a test that fails leaves nothing running.
#[cfg(target_os = "linux")]
struct KillOnDrop(u32);

#[cfg(target_os = "linux")]
impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", &self.0.to_string()])
            .status();
    }
}

/// `sh -c 'sleep 600 & echo done'` ends at once, but its background `sleep`
/// holds the command's stdout for ten minutes: exec used to read that pipe to
/// its end, so it held the lease (and kept its caller waiting) for the
/// background child. exec ends when the command ends, after a bounded drain of
/// output still in flight, records the outcome, and warns that a process the
/// command started is still running.
#[cfg(target_os = "linux")]
#[test]
fn exec_ends_when_the_command_ends_though_a_background_child_holds_its_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let bg = dir.path().join("bg.pid");
    let script = format!(
        "sleep 600 & echo $! > {d}/bg.tmp; mv {d}/bg.tmp {bg}; echo done",
        d = dir.path().display(),
        bg = bg.display()
    );
    // Files, not pipes: the background child inherits exec's stderr too, and
    // a pipe would keep this test reading until it ends.
    let (stdout, stderr) = (dir.path().join("out"), dir.path().join("err"));
    let mut runner = Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(["exec", "--db"])
        .arg(&db)
        .args(["--tenant", "acme", "--operation", "invoice.send"])
        .args(["--key", "bg-1", "--", "sh", "-c", &script])
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let background = KillOnDrop(read_pid(&bg));
    // A watchdog against a hang, far below the background child's 600 s.
    let ended = poll_until(120, || runner.try_wait().unwrap().is_some());
    if !ended {
        let _ = runner.kill();
    }
    let err = std::fs::read_to_string(&stderr).unwrap();
    assert!(ended, "exec waited for the background child: {err}");
    assert_eq!(runner.wait().unwrap().code(), Some(0), "{err}");
    assert_eq!(std::fs::read_to_string(&stdout).unwrap(), "done\n");
    assert!(err.contains("still running"), "{err}");
    assert!(
        Watched::new(background.0).alive(),
        "the background child is left running"
    );
    // The outcome was recorded: a retry replays it and runs nothing.
    let replay = exec(&db, "bg-1", &[], "echo again");
    assert_eq!(replay.status.code(), Some(0), "{}", text(&replay.stderr));
    assert_eq!(text(&replay.stdout), "done\n");
}

/// The store file holds raw keys and stored output: it is created private
/// (0600), never readable by other users.
#[cfg(unix)]
#[test]
fn a_new_store_file_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("exec.redb");
    let out = exec(&db, "private-1", &[], "echo secret-ish");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mode = std::fs::metadata(&db).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "{mode:o}");
}
