//! The operator scenarios (GC past a damaged record, `resolve` keeping a
//! record's own windows, fencing tokens after GC, listing a page at a time),
//! written once over the public `Store` API and run against a redb file
//! (tests/cli/operators_gc_resolve_tokens.rs) and PostgreSQL
//! (tests/postgres/operators_gc_resolve_tokens.rs). The operator steps run as real
//! `idemkit` processes; setting up records and moving time use the library.

#![allow(dead_code, reason = "each backend's test file uses a different part")]

use std::process::Output;
use std::time::Duration;

use idemkit::clock::{Clock, SystemClock};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, StateName, StoredResponse};
use idemkit::store::{Claim, ExecutionGuard, Listing, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

pub(crate) const DAY: Duration = Duration::from_secs(24 * 60 * 60);

pub(crate) use super::scope;

pub(crate) fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey::new(name).unwrap()
}

pub(crate) fn execute(store: &Store, key: &IdempotencyKey, policy: &Policy) -> ExecutionGuard {
    match store
        .claim(
            &scope(),
            key,
            Fingerprint::from_bytes([7; 32]),
            "worker",
            policy,
        )
        .unwrap()
    {
        Claim::Execute(guard) => guard,
        other => panic!("expected Execute for {key}, got {other:?}"),
    }
}

/// The JSON an `idemkit` process printed, after checking it exited 0.
pub(crate) fn json(out: &Output) -> serde_json::Value {
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Five completed records past both windows (1 ms windows, real time), one of
/// them then damaged by `corrupt`: `idemkit gc` (run by `gc`, with the given
/// extra arguments) deletes the four it can read, reports the damaged one and
/// leaves it in place; a second run finds nothing more to delete and still
/// reports it.
pub(crate) fn gc_past_a_damaged_record(
    store: &Store,
    corrupt: impl Fn(&Scope, &IdempotencyKey),
    gc: impl Fn(&[&str]) -> Output,
    still_present: impl Fn(&Scope, &IdempotencyKey) -> bool,
) {
    let policy = Policy::default()
        .with_effect(EffectKind::Local)
        .with_replay_window(Duration::from_millis(1))
        .with_record_window(Duration::from_millis(1));
    let keys: Vec<IdempotencyKey> = (0..5).map(|i| key(&format!("inv-{i}"))).collect();
    for k in &keys {
        execute(store, k, &policy)
            .complete(StoredResponse::new(201, b"sent".to_vec()))
            .unwrap();
    }
    // Past both windows by the clock `idemkit gc` reads.
    std::thread::sleep(Duration::from_millis(50));
    let damaged = &keys[2];
    corrupt(&scope(), damaged);

    // Batches of 2, so the damaged record shares a batch with good ones.
    let first = json(&gc(&["--max-batch", "2", "--json"]));
    assert_eq!(first["deleted"], 4, "{first}");
    assert_eq!(first["undecodable"], 1, "{first}");
    let human = gc(&["--max-batch", "2"]);
    assert_eq!(human.status.code(), Some(0));
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("deleted 0 records") && text.contains("skipped 1 records"),
        "{text}"
    );
    assert!(
        still_present(&scope(), damaged),
        "GC must never delete a record it cannot read"
    );
    for k in keys.iter().filter(|k| *k != damaged) {
        assert!(!still_present(&scope(), k), "{k} should be deleted");
    }
}

/// An External operation with 30-day windows ends Unknown; `idemkit resolve`
/// (run by `resolve`) settles it as applied with the record's own 30-day
/// windows, not the default policy's 24 h / 7 days, and says what it changed. A
/// retry on day 8 (by `at_day_8`'s clock) replays instead of executing.
pub(crate) fn resolve_keeps_a_30_day_window(
    store: &Store,
    resolve: impl Fn(&[&str]) -> Output,
    at_day_8: impl Fn() -> Store,
) {
    let month = Policy::default()
        .with_effect(EffectKind::External)
        .with_replay_window(30 * DAY)
        .with_record_window(30 * DAY);
    let k = key("inv-monthly");
    execute(store, &k, &month)
        .mark_unknown("provider timed out")
        .unwrap();
    let before = now_millis();
    let address = [
        "--tenant",
        "acme",
        "--operation",
        "charge",
        "--key",
        "inv-monthly",
    ];
    let mut args = address.to_vec();
    args.extend(["--applied", "--status", "201", "--json"]);
    let resolved = json(&resolve(&args));
    assert_eq!(resolved["from"], "unknown", "{resolved}");
    assert_eq!(resolved["state"], "completed", "{resolved}");
    let thirty_days = u64::try_from((30 * DAY).as_millis()).unwrap();
    assert_eq!(resolved["replay_window_ms"], thirty_days, "{resolved}");
    assert_eq!(resolved["record_window_ms"], thirty_days, "{resolved}");
    let keep = resolved["keep_until_ms"].as_u64().unwrap();
    assert!(
        keep >= before + thirty_days,
        "kept until {keep}, want >= {}",
        before + thirty_days
    );

    let later = at_day_8();
    match later
        .claim(
            &scope(),
            &k,
            Fingerprint::from_bytes([7; 32]),
            "worker",
            &month,
        )
        .unwrap()
    {
        Claim::Replay { response, .. } => assert_eq!(response.status, 201),
        other => panic!("a retry on day 8 of a 30-day operation must replay, got {other:?}"),
    }
    let record = later.get(&scope(), &k).unwrap().unwrap();
    assert_eq!(record.state.name(), StateName::Completed);
}

/// Human output of `idemkit resolve` names the change and the windows.
pub(crate) fn resolve_prints_what_it_changed(store: &Store, resolve: impl Fn(&[&str]) -> Output) {
    let month = Policy::default()
        .with_replay_window(30 * DAY)
        .with_record_window(30 * DAY);
    let k = key("inv-printed");
    execute(store, &k, &month).mark_unknown("timeout").unwrap();
    let out = resolve(&[
        "--tenant",
        "acme",
        "--operation",
        "charge",
        "--key",
        "inv-printed",
        "--not-applied",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let log_ref = scope().record_id(&k).log_ref().to_string();
    assert!(
        text.contains(&format!("record {log_ref}: unknown -> released")),
        "{text}"
    );
    assert!(text.contains("record window 30 days"), "{text}");
}

/// A key's record reaches token 3, completes and is deleted by GC; a new claim
/// of the same key gets a token above 3, never 1 again (and so does a claim of
/// a key never seen before: the floor is per store). `reopen` gives the same
/// store anew (a restart), to show the floor is durable. `advance` moves the
/// clock of both.
pub(crate) fn tokens_never_repeat_after_gc(
    store: &Store,
    advance: impl Fn(Duration),
    reopen: impl Fn() -> Store,
) {
    let policy = Policy::default()
        .with_effect(EffectKind::Local)
        .with_replay_window(DAY)
        .with_record_window(DAY);
    let k = key("inv-reused");
    execute(store, &k, &policy).release().unwrap();
    execute(store, &k, &policy).release().unwrap();
    let third = execute(store, &k, &policy);
    assert_eq!(third.token().get(), 3);
    third
        .complete(StoredResponse::new(201, b"sent".to_vec()))
        .unwrap();
    advance(2 * DAY);
    let report = store.gc(100).unwrap();
    assert_eq!(report.deleted, 1, "{report:?}");
    assert!(store.get(&scope(), &k).unwrap().is_none());

    let store = reopen();
    let again = execute(&store, &k, &policy);
    assert!(
        again.token().get() > 3,
        "token {} after GC repeats one the deleted record handed out",
        again.token()
    );
    again.abandon();
}

/// Every key `listing` holds, walked `limit` records at a time; also checks
/// that no page is longer than `limit`.
fn walk(store: &Store, listing: Listing, limit: usize) -> Vec<String> {
    let mut keys = Vec::new();
    let mut after: Option<Vec<u8>> = None;
    for _ in 0..100 {
        let page = store.list_page(listing, after.as_deref(), limit).unwrap();
        assert!(
            page.records.len() <= limit,
            "{} > {limit}",
            page.records.len()
        );
        keys.extend(page.records.iter().map(|r| r.key.as_str().to_owned()));
        match page.next {
            Some(next) => after = Some(next),
            None => {
                keys.sort();
                return keys;
            }
        }
    }
    panic!("the pages never ended");
}

/// An admin listing pages through a store instead of loading it whole:
/// `list_page` walks every record, or those of one state, or the unresolved
/// ones (Unknown, and External leases past their expiry), a bounded page at a
/// time, and finds exactly what the whole listings find.
pub(crate) fn list_page_walks_every_record_a_page_at_a_time(store: &Store) {
    let policy = Policy::default().with_effect(EffectKind::External);
    for name in ["c-1", "c-2", "c-3", "c-4", "c-5"] {
        execute(store, &key(name), &policy)
            .complete(StoredResponse::new(201, b"sent".to_vec()))
            .unwrap();
    }
    for name in ["u-1", "u-2"] {
        execute(store, &key(name), &policy)
            .mark_unknown("timeout")
            .unwrap();
    }
    execute(store, &key("r-live"), &policy).abandon();
    let short = policy.with_lease(Duration::from_millis(1));
    execute(store, &key("r-expired"), &short).abandon();
    std::thread::sleep(Duration::from_millis(20));

    let sorted = |mut keys: Vec<String>| {
        keys.sort();
        keys
    };
    let every = sorted(
        store
            .list(None)
            .unwrap()
            .iter()
            .map(|r| r.key.as_str().to_owned())
            .collect(),
    );
    assert_eq!(every.len(), 9);
    for limit in [1, 2, 4, 100] {
        assert_eq!(walk(store, Listing::All, limit), every, "limit {limit}");
    }
    assert_eq!(
        walk(store, Listing::State(StateName::Completed), 2),
        ["c-1", "c-2", "c-3", "c-4", "c-5"]
    );
    assert_eq!(
        walk(store, Listing::State(StateName::Unknown), 1),
        ["u-1", "u-2"]
    );
    assert_eq!(
        walk(store, Listing::State(StateName::Running), 2),
        ["r-expired", "r-live"]
    );
    let unresolved = sorted(
        store
            .list_unresolved()
            .unwrap()
            .iter()
            .map(|r| r.key.as_str().to_owned())
            .collect(),
    );
    assert_eq!(unresolved, ["r-expired", "u-1", "u-2"]);
    for limit in [1, 2, 10] {
        assert_eq!(
            walk(store, Listing::Unresolved, limit),
            unresolved,
            "limit {limit}"
        );
    }
    assert!(
        store.list_page(Listing::All, Some(&[7, 7]), 10).is_err(),
        "a cursor no listing made"
    );
}

pub(crate) fn now_millis() -> u64 {
    SystemClock.now().as_millis()
}
