//! 16 `idemkit exec` processes started together on one key and one store file:
//! the command (which appends a line to a file) runs exactly once; every other
//! process exits 0 with the replayed output, or 75 (in progress / file busy).
//! Repeated over several keys.

use std::process::{Command, Stdio};
use std::time::Instant;

const PROCESSES: usize = 16;
const ROUNDS: usize = 3;

#[test]
fn sixteen_processes_run_the_command_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shared.redb");
    let started = Instant::now();
    for round in 0..ROUNDS {
        let ran = dir.path().join(format!("ran-{round}"));
        let key = format!("batch-{round}");
        let script = format!(
            "echo once >> {}; sleep 0.2; echo output-{round}",
            ran.display()
        );
        let children: Vec<_> = (0..PROCESSES)
            .map(|_| {
                Command::new(env!("CARGO_BIN_EXE_idemkit"))
                    .args([
                        "exec",
                        "--tenant",
                        "acme",
                        "--operation",
                        "nightly",
                        "--key",
                        &key,
                    ])
                    .args(["--effect", "local", "--db"])
                    .arg(&db)
                    .args(["--", "sh", "-c", &script])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut codes = Vec::new();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let code = out.status.code().unwrap();
            match code {
                0 => assert_eq!(
                    String::from_utf8_lossy(&out.stdout),
                    format!("output-{round}\n"),
                    "exit 0 means ran or replayed, with the same stdout"
                ),
                75 => {}
                other => panic!(
                    "unexpected exit {other}: {}",
                    String::from_utf8_lossy(&out.stderr)
                ),
            }
            codes.push(code);
        }
        let lines = std::fs::read_to_string(&ran).unwrap().lines().count();
        assert_eq!(
            lines, 1,
            "round {round}: the command ran {lines} times; exits {codes:?}"
        );
        assert!(codes.contains(&0));
        eprintln!("round {round}: exits {codes:?}");
    }
    eprintln!(
        "{ROUNDS} rounds x {PROCESSES} processes: {:?}",
        started.elapsed()
    );
}
