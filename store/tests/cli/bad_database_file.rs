//! A file that is not an idemkit database, or a damaged one, gives a one-line
//! error and exit 74 from every store subcommand — never a panic.

use std::path::Path;

use crate::support::idemkit;

fn assert_clean_failure(db: &Path, what: &str) {
    for args in [
        vec!["list"],
        vec!["stats"],
        vec!["gc"],
        vec!["show", "--tenant", "t", "--operation", "o", "--key", "k"],
        vec![
            "exec",
            "--tenant",
            "t",
            "--operation",
            "o",
            "--key",
            "k",
            "--",
            "true",
        ],
    ] {
        let out = idemkit(db, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(74), "{what} {args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{what} {args:?}: {stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("internal error"),
            "{stderr}"
        );
    }
}

#[test]
fn a_text_file_is_not_an_idemkit_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("notes.txt");
    std::fs::write(&db, "just some notes\n".repeat(100)).unwrap();
    assert_clean_failure(&db, "text file");
    let out = idemkit(&db, &["list"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not an idemkit database"));
    assert_eq!(
        std::fs::read_to_string(&db).unwrap(),
        "just some notes\n".repeat(100),
        "untouched"
    );
}

#[test]
fn another_applications_redb_file_is_not_an_idemkit_database() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("other.redb");
    {
        let other = redb::Database::create(&db).unwrap();
        let txn = other.begin_write().unwrap();
        {
            let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("users");
            txn.open_table(def).unwrap().insert("ann", 1).unwrap();
        }
        txn.commit().unwrap();
    }
    assert_clean_failure(&db, "foreign redb");
    let out = idemkit(&db, &["list"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("users"));
}

#[test]
fn damaged_and_truncated_stores_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.redb");
    for key in ["a", "b", "c"] {
        let out = idemkit(
            &good,
            &[
                "exec",
                "--tenant",
                "t",
                "--operation",
                "o",
                "--key",
                key,
                "--effect",
                "local",
                "--",
                "echo",
                key,
            ],
        );
        assert_eq!(out.status.code(), Some(0));
    }
    let bytes = std::fs::read(&good).unwrap();
    // Overwrite a stretch of each 4 KiB page after the header with garbage; every
    // page that holds data is then damaged somewhere.
    let mut damaged = bytes.clone();
    for page in (4096..damaged.len()).step_by(4096) {
        for b in damaged.iter_mut().skip(page).take(64) {
            *b = b'G';
        }
    }
    let damaged_path = dir.path().join("damaged.redb");
    std::fs::write(&damaged_path, &damaged).unwrap();
    assert_clean_failure(&damaged_path, "damaged");

    let truncated = dir.path().join("truncated.redb");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert_clean_failure(&truncated, "truncated");
}
