//! Smoke of `idemkit-loadgen --backend postgres`: a fraction of
//! a second with 2 clients against a real server, and its JSON line. Nothing is
//! timed against a target.
//!
//! Ignored by a plain `cargo test --workspace` (no server there); the PostgreSQL
//! block of scripts/test-all.sh runs it (built with `--features postgres`) through
//! scripts/with-postgres.sh with `-- --ignored`, and then it FAILS when IDEMKIT_TEST_POSTGRES_URL is unset or the
//! server cannot be reached: it never passes vacuously.

use std::process::Command;

const URL_VAR: &str = "IDEMKIT_TEST_POSTGRES_URL";

fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: run this test through scripts/with-postgres.sh \
             (it starts a throwaway server), or point {URL_VAR} at a server you own"
        )
    })
}

#[test]
#[ignore = "needs PostgreSQL: scripts/with-postgres.sh cargo test -p idemkit-benches --features postgres --test postgres_loadgen -- --ignored"]
fn postgres_loadgen_runs_two_clients_and_prints_its_json() {
    let url = url();
    for extra in [
        &[][..],
        &["--no-validate"][..],
        &["--validate-every-checkout"][..],
        &["--pool-size", "1"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_idemkit-loadgen"))
            .args([
                "--backend",
                "postgres",
                "--clients",
                "2",
                "--seconds",
                "0.3",
            ])
            .args(["--postgres", &url])
            .args(extra)
            .env_remove(URL_VAR)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{extra:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["backend"], "postgres", "{v}");
        assert_eq!(v["clients"], 2, "{v}");
        assert_eq!(v["keys"], "unique", "{v}");
        assert_eq!(v["validate_connections"], extra != ["--no-validate"], "{v}");
        assert_eq!(
            v["validate_every_checkout"],
            extra == ["--validate-every-checkout"],
            "{v}"
        );
        // One connection shared by the two clients, or one each.
        let pool = if extra == ["--pool-size", "1"] { 1 } else { 2 };
        assert_eq!(v["pool_size"], pool, "{v}");
        let ops = v["ops"].as_u64().unwrap();
        assert!(ops > 0, "{v}");
        // Every op a new key, claimed and completed.
        assert_eq!(v["executed"].as_u64(), Some(ops), "{v}");
        for field in ["seconds", "ops_per_s", "p50_us", "p99_us"] {
            assert!(v[field].as_f64().is_some_and(|x| x > 0.0), "{field}: {v}");
        }
    }
    // The run's schema is dropped after it: none is left behind.
    let out = Command::new("psql")
        .args(["-X", "-At", &url, "-c"])
        .arg("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'loadgen\\_%'")
        .output();
    if let Ok(out) = out
        && out.status.success()
    {
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0");
    }
}

#[test]
#[ignore = "needs PostgreSQL: scripts/with-postgres.sh cargo test -p idemkit-benches --features postgres --test postgres_loadgen -- --ignored"]
fn postgres_loadgen_fails_clearly_on_an_unreachable_server() {
    // The URL is required by the block; a server nobody listens on is refused.
    let _ = url();
    let out = Command::new(env!("CARGO_BIN_EXE_idemkit-loadgen"))
        .args(["--backend", "postgres", "--seconds", "0.1"])
        .args(["--postgres", "postgres://postgres@127.0.0.1:1/postgres"])
        .env_remove(URL_VAR)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("postgres connect"), "{err}");
}

#[test]
#[ignore = "needs PostgreSQL: scripts/with-postgres.sh cargo test -p idemkit-benches --features postgres --test postgres_loadgen -- --ignored"]
fn the_pgbench_script_of_the_adapters_statements_claims_and_completes_each_key() {
    let url = url();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("same.sql");
    let schema = "pgbench_smoke";
    let write_script = || {
        Command::new(env!("CARGO_BIN_EXE_idemkit-loadgen"))
            .args(["--backend", "postgres", "--postgres", &url])
            .arg("--pgbench-script")
            .arg(&script)
            .args(["--pgbench-schema", schema])
            .env_remove(URL_VAR)
            .output()
            .unwrap()
    };
    let out = write_script();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "a script run prints no load report");
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(
        text.contains(&format!("INSERT INTO \"{schema}\".idemkit_records")),
        "{text}"
    );

    // pgbench (Debian's, beside the server) runs it: 2 clients × 5 transactions.
    let Ok(pgbench) = Command::new("pgbench")
        .args([
            "-n", "-c", "2", "-j", "1", "-t", "5", "-M", "prepared", "-f",
        ])
        .arg(&script)
        .arg(&url)
        .output()
    else {
        panic!(
            "pgbench not found: it comes with PostgreSQL's client tools (Debian: postgresql-client)"
        );
    };
    assert!(
        pgbench.status.success(),
        "{}{}",
        String::from_utf8_lossy(&pgbench.stdout),
        String::from_utf8_lossy(&pgbench.stderr)
    );
    let count = |state: &str| {
        let out = Command::new("psql")
            .args(["-X", "-At", &url, "-c"])
            .arg(format!(
                "SELECT count(*) FROM \"{schema}\".idemkit_records WHERE state = '{state}'"
            ))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(
        count("completed"),
        "10",
        "every transaction a new key, claimed then completed"
    );
    assert_eq!(count("running"), "0");

    // Written again, the schema starts empty.
    assert!(write_script().status.success());
    assert_eq!(count("completed"), "0");
    let dropped = Command::new("psql")
        .args(["-X", "-q", &url, "-c"])
        .arg(format!("DROP SCHEMA \"{schema}\" CASCADE"))
        .status()
        .unwrap();
    assert!(dropped.success());
}
