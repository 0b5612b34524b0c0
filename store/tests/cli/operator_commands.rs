//! `idemkit list | show | resolve | gc | stats` on a store written by `exec`,
//! human and `--json` output; `list` never prints response bodies.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::support::idemkit;

fn json(out: &Output) -> Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `idemkit SUBCOMMAND` on the record `key` (tenant acme, operation report),
/// then `extra`.
fn on_record(db: &Path, subcommand: &str, key: &str, extra: &[&str]) -> Output {
    let address = [
        subcommand,
        "--tenant",
        "acme",
        "--operation",
        "report",
        "--key",
        key,
    ];
    idemkit(db, &[&address[..], extra].concat())
}

fn exec(db: &Path, key: &str, extra: &[&str], script: &str) -> Output {
    on_record(
        db,
        "exec",
        key,
        &[extra, &["--", "sh", "-c", script]].concat(),
    )
}

fn show(db: &Path, key: &str, extra: &[&str]) -> Output {
    on_record(db, "show", key, extra)
}

#[test]
fn list_show_resolve_gc_stats() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    exec(&db, "done", &["--effect", "local"], "echo SECRET-BODY");
    exec(&db, "unsure", &[], "exit 4");
    exec(&db, "released", &["--effect", "local"], "exit 1");

    let all = json(&idemkit(&db, &["list", "--json"]));
    assert_eq!(all.as_array().unwrap().len(), 3);
    let human = idemkit(&db, &["list"]);
    let human_text = String::from_utf8_lossy(&human.stdout);
    assert!(human_text.contains("completed") && human_text.contains("unknown"));
    for out in [&human.stdout, &idemkit(&db, &["list", "--json"]).stdout] {
        assert!(
            !String::from_utf8_lossy(out).contains("SECRET-BODY"),
            "list never prints bodies"
        );
    }

    let unresolved = json(&idemkit(&db, &["list", "--unresolved", "--json"]));
    let keys: Vec<&str> = unresolved
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["unsure"]);
    let released = json(&idemkit(&db, &["list", "--state", "released", "--json"]));
    assert_eq!(released[0]["key"], "released");

    let shown = json(&show(&db, "done", &["--json"]));
    assert_eq!(shown["state"], "completed");
    assert_eq!(shown["response"]["body"]["utf8"], "SECRET-BODY\n");
    let missing = show(&db, "nope", &[]);
    assert_eq!(missing.status.code(), Some(65));

    // Resolve the unknown one as applied, with a body to replay.
    let body = dir.path().join("out.txt");
    std::fs::write(&body, "done by hand\n").unwrap();
    let resolved = json(&idemkit(
        &db,
        &[
            "resolve",
            "--tenant",
            "acme",
            "--operation",
            "report",
            "--key",
            "unsure",
            "--applied",
            "--status",
            "0",
            "--body",
            body.to_str().unwrap(),
            "--json",
        ],
    ));
    assert_eq!(resolved["state"], "completed");
    let replay = exec(&db, "unsure", &[], "echo must-not-run");
    assert_eq!(replay.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&replay.stdout), "done by hand\n");
    // Resolving a completed record is refused.
    let refused = idemkit(
        &db,
        &[
            "resolve",
            "--tenant",
            "acme",
            "--operation",
            "report",
            "--key",
            "done",
            "--not-applied",
        ],
    );
    assert_eq!(refused.status.code(), Some(65));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("completed"));

    let stats = json(&idemkit(&db, &["stats", "--json"]));
    assert_eq!(stats["total"], 3);
    assert_eq!(stats["completed"], 2);
    assert_eq!(stats["released"], 1);
    assert!(stats["file_size"].as_u64().unwrap() > 0);
    assert_eq!(idemkit(&db, &["stats"]).status.code(), Some(0));

    // Nothing is past its windows yet (24 h replay, 7 d record).
    let gc = json(&idemkit(&db, &["gc", "--json"]));
    assert_eq!(
        (gc["pruned"].as_u64(), gc["deleted"].as_u64()),
        (Some(0), Some(0))
    );
}

/// A stored body is whatever a handler or command produced, possibly a
/// client's input echoed back: printed raw, its escape sequences reached the
/// operator's terminal (clear the screen, retitle the window, hide a line
/// behind a carriage return). `show` prints control characters escaped; the
/// exact bytes stay available with `--json`.
#[test]
fn show_escapes_control_characters_of_stored_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.redb");
    let out = exec(
        &db,
        "esc",
        &["--effect", "local"],
        r"printf 'ok\033[2J\033]0;owned\007\rfake\n'",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown = show(&db, "esc", &[]);
    assert_eq!(shown.status.code(), Some(0));
    for raw in [0x1b_u8, 0x07, b'\r'] {
        assert!(
            !shown.stdout.contains(&raw),
            "show printed byte {raw:#04x} raw: {:?}",
            String::from_utf8_lossy(&shown.stdout)
        );
    }
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains(r"ok\u{1b}[2J\u{1b}]0;owned\u{7}\u{d}fake"),
        "{text}"
    );
    // --json keeps the exact bytes (escaped by JSON itself).
    let exact = json(&show(&db, "esc", &["--json"]));
    assert_eq!(
        exact["response"]["body"]["utf8"],
        "ok\u{1b}[2J\u{1b}]0;owned\u{7}\rfake\n"
    );
}
