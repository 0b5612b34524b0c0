//! `idemkit migrate | stats | list | show | resolve | gc` with `--postgres URL`:
//! the operator commands do on PostgreSQL what they do on a `--db` file.
//!
//! Needs scripts/with-postgres.sh (feature `postgres`).

#![cfg(feature = "postgres")]

use crate::support::pg as pg_support;

use std::process::{Command, Output};
use std::time::Duration;

use idemkit::adapters::postgres::{Migrations, PgOptions, PostgresAdapter};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StateName, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

fn idemkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idemkit"))
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn operator_commands_work_on_postgres() {
    let url = pg_support::url();
    let schema = pg_support::unique_schema("cli");
    let pg = ["--postgres", url.as_str(), "--pg-schema", schema.as_str()];

    // Operator commands never create tables: an unmigrated schema is an error.
    let out = idemkit(&[&["stats"][..], &pg].concat());
    assert!(!out.status.success(), "stats on an empty schema must fail");
    assert!(String::from_utf8_lossy(&out.stderr).contains("idemkit migrate"));

    let printed = idemkit(&["migrate", "--print", "--pg-schema", &schema]);
    assert!(printed.status.success());
    assert!(String::from_utf8_lossy(&printed.stdout).contains("CREATE TABLE"));
    let out = idemkit(&[&["migrate"][..], &pg].concat());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // One record completed with tiny windows (GC food), one Unknown.
    let store = Store::from(
        PostgresAdapter::connect_with(
            &url,
            PgOptions {
                migrations: Migrations::CheckOnly,
                ..pg_support::options(&schema, 2)
            },
        )
        .unwrap(),
    );
    let scope = Scope::new("acme", "invoice.send").unwrap();
    let fp = Fingerprint::from_bytes([9; 32]);
    let short = Policy::default()
        .with_effect(EffectKind::Local)
        .with_replay_window(Duration::from_millis(1))
        .with_record_window(Duration::from_millis(1));
    let done = IdempotencyKey::new("inv-1").unwrap();
    let Claim::Execute(guard) = store.claim(&scope, &done, fp, "w", &short).unwrap() else {
        panic!("fresh key must execute")
    };
    guard.complete(StoredResponse::new(200, "sent")).unwrap();
    let unsure = IdempotencyKey::new("inv-2").unwrap();
    let external = Policy::default().with_effect(EffectKind::External);
    let Claim::Execute(guard) = store.claim(&scope, &unsure, fp, "w", &external).unwrap() else {
        panic!("fresh key must execute")
    };
    guard.mark_unknown("crash").unwrap();

    let stats = json(&idemkit(&[&["stats", "--json"][..], &pg].concat()));
    assert_eq!(
        (stats["total"].as_u64(), stats["unknown"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(stats["completed"].as_u64(), Some(1));

    let unresolved = json(&idemkit(
        &[&["list", "--unresolved", "--json"][..], &pg].concat(),
    ));
    let keys: Vec<&str> = unresolved
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["key"].as_str().unwrap())
        .collect();
    assert_eq!(keys, ["inv-2"]);

    let address = [
        "--tenant",
        "acme",
        "--operation",
        "invoice.send",
        "--key",
        "inv-2",
    ];
    let resolved = json(&idemkit(
        &[&["resolve", "--not-applied", "--json"][..], &address, &pg].concat(),
    ));
    assert_eq!(resolved["state"], "released");
    let shown = json(&idemkit(&[&["show", "--json"][..], &address, &pg].concat()));
    assert_eq!(shown["state"], "released");
    assert_eq!(
        store.get(&scope, &unsure).unwrap().unwrap().state.name(),
        StateName::Released
    );

    std::thread::sleep(Duration::from_millis(5));
    let gc = json(&idemkit(&[&["gc", "--json"][..], &pg].concat()));
    assert_eq!(gc["deleted"].as_u64(), Some(1), "{gc}");
    assert!(store.get(&scope, &done).unwrap().is_none());

    // A server that cannot be reached: exit 75 (try again later), not a panic.
    let out = idemkit(&[
        "stats",
        "--postgres",
        "postgres://postgres@127.0.0.1:1/postgres",
    ]);
    assert_eq!(
        out.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
