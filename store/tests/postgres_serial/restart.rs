//! PostgreSQL stopped and restarted in the middle of a run.
//!
//! Eight client threads (two per key, so every key is also contended) drive 120
//! keys through claim → execute → complete while the main thread stops the server
//! (`pg_ctl stop -m fast`) for about a second and starts it again. While it is
//! down every store call fails with the typed `PgError::Unavailable` (what the
//! HTTP layer answers with 503) and a client retries later; a worker whose
//! `complete` failed retries it with its token (its outcome is known, only not yet
//! durable); if the lost answer was in fact a commit, the retry is refused
//! (WrongState: Completed) and the record shows our token and response. At the end: every key executed exactly once, every record Completed,
//! and the outage really happened (Unavailable errors were seen).
//!
//! A second test restarts the server between two operations, with the pool's
//! idle rule out of the way: the first broken connection makes the idle ones
//! suspect and the read is retried, so no operation fails.
//!
//! A third runs sixteen clients through a restart and asks the store's health
//! check while the server is down (503) and after (200): every operation begun
//! after the restart succeeds, and no key executes twice.
//!
//! Needs scripts/with-postgres.sh, which says how to stop and start its server.
//! The tests share the server, so each holds `SERVER` (of support::pg, with the
//! other tests that stop or time it) throughout.

#![cfg(all(feature = "postgres", feature = "axum"))]

use crate::support::pg as pg_support;
use pg_support::SERVER;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idemkit::adapters::postgres::{PgError, PgOptions, PostgresAdapter};
use idemkit::core::machine::Policy;
use idemkit::core::record::{EffectKind, RecordState, StateName, StoredResponse};
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};

const KEYS: usize = 120;
const CLIENTS: usize = 8;

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run this test through scripts/with-postgres.sh")
    })
}

fn pg_ctl(args: &[&str]) {
    let ctl = env("IDEMKIT_TEST_PG_CTL");
    let mut cmd = match std::env::var("IDEMKIT_TEST_PG_RUNAS") {
        Ok(user) => {
            let mut c = Command::new("runuser");
            c.args(["-u", &user, "--", &ctl]);
            c
        }
        Err(_) => Command::new(&ctl),
    };
    let status = cmd.args(args).status().unwrap();
    assert!(status.success(), "pg_ctl {args:?} failed: {status}");
}

fn stop_server() {
    pg_ctl(&[
        "-D",
        &env("IDEMKIT_TEST_PG_DATA"),
        "-m",
        "fast",
        "-w",
        "stop",
    ]);
}

fn start_server() {
    let data = env("IDEMKIT_TEST_PG_DATA");
    let port = env("IDEMKIT_TEST_PG_PORT");
    let log = format!("{data}/server.log");
    let opts = format!("-c listen_addresses=127.0.0.1 -p {port} -k {data}");
    pg_ctl(&["-D", &data, "-l", &log, "-w", "-o", &opts, "start"]);
}

/// Whether the engine's error is PostgreSQL's `Unavailable` (503 and retry).
fn unavailable_pg(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut at = Some(e);
    while let Some(e) = at {
        if e.downcast_ref::<PgError>()
            .is_some_and(PgError::is_unavailable)
        {
            return true;
        }
        at = e.source();
    }
    false
}

#[test]
fn restart_mid_run_fails_typed_and_never_double_executes() {
    let _server = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let _ = pg_support::url();
    let _ = env("IDEMKIT_TEST_PG_DATA");
    let store = Store::from(pg_support::fresh_store("restart"));
    let scope = Scope::new("acme", "appointments.create").unwrap();
    // Local effect and a lease longer than the outage: a worker that lost its
    // completion to the outage still holds the lease when the server is back. (A
    // claim whose INSERT committed but whose answer was lost leaves a lease nobody
    // holds: retries get InFlight until it expires, then one takes over.)
    let policy = Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(Duration::from_secs(10));
    let executions: Mutex<HashMap<usize, u32>> = Mutex::new(HashMap::new());
    let completed = AtomicU64::new(0);
    let unavailable = AtomicU64::new(0);
    let other_errors: Mutex<Vec<String>> = Mutex::new(Vec::new());

    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (store, scope, policy) = (&store, &scope, &policy);
            let (executions, completed, unavailable, other_errors) =
                (&executions, &completed, &unavailable, &other_errors);
            s.spawn(move || {
                // Clients c and c + CLIENTS/2 share their keys.
                let keys = (0..KEYS).filter(|k| k % (CLIENTS / 2) == c % (CLIENTS / 2));
                for k in keys {
                    let key = IdempotencyKey::new(&format!("appt-{k}")).unwrap();
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        assert!(Instant::now() < deadline, "appt-{k} never settled");
                        let note = |e: &(dyn std::error::Error + 'static)| {
                            if unavailable_pg(e) {
                                unavailable.fetch_add(1, Ordering::Relaxed);
                            } else {
                                other_errors.lock().unwrap().push(e.to_string());
                            }
                        };
                        let fp = Fingerprint::from_bytes([7; 32]);
                        match store.claim(scope, &key, fp, &format!("c{c}"), policy) {
                            Err(e) => note(&e), // 503: the client retries later
                            Ok(Claim::Execute(mut guard)) => {
                                let token = guard.token();
                                *executions.lock().unwrap().entry(k).or_insert(0) += 1;
                                // Slow the run down so the outage lands mid-flight.
                                std::thread::sleep(Duration::from_millis(5));
                                let response = StoredResponse::new(201, format!("booked {k}"));
                                loop {
                                    match guard.try_complete(&response) {
                                        Ok(()) => break,
                                        Err(e) if unavailable_pg(&e) => {
                                            note(&e);
                                            std::thread::sleep(Duration::from_millis(50));
                                        }
                                        // The lost answer was a commit: the record is
                                        // Completed under our token with our response.
                                        Err(e) if e.transition_error().is_some() => {
                                            let r = store.get(scope, &key).unwrap().unwrap();
                                            assert_eq!(r.last_token, token, "complete: {e}");
                                            match r.state {
                                                RecordState::Completed {
                                                    response: stored, ..
                                                } => {
                                                    assert_eq!(stored, response, "complete: {e}");
                                                }
                                                other => panic!("complete: {e}; record {other:?}"),
                                            }
                                            break;
                                        }
                                        Err(e) => panic!("complete: {e}"),
                                    }
                                }
                                guard.abandon();
                                completed.fetch_add(1, Ordering::Relaxed);
                                break;
                            }
                            Ok(Claim::Replay { response, .. }) => {
                                assert_eq!(
                                    response.body.unwrap(),
                                    format!("booked {k}").into_bytes()
                                );
                                break;
                            }
                            Ok(Claim::InFlight { .. }) => {}
                            Ok(other) => panic!("appt-{k}: unexpected {other:?}"),
                        }
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            });
        }

        // The outage: once a quarter of the keys are done, stop the server for ~1 s.
        let wait_from = Instant::now();
        while completed.load(Ordering::Relaxed) < (KEYS / 4) as u64 {
            assert!(wait_from.elapsed() < Duration::from_secs(60), "no progress");
            std::thread::sleep(Duration::from_millis(5));
        }
        stop_server();
        let down_at = completed.load(Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(1_000));
        // While down, a direct call is a typed error too.
        match store.claim(
            &scope,
            &IdempotencyKey::new("probe").unwrap(),
            Fingerprint::from_bytes([1; 32]),
            "probe",
            &policy,
        ) {
            Err(e) => assert!(unavailable_pg(&e), "{e}"),
            Ok(o) => panic!("claimed while the server was down: {o:?}"),
        }
        assert!(
            completed.load(Ordering::Relaxed) <= down_at + CLIENTS as u64,
            "completions were acknowledged while the server was down"
        );
        start_server();
    });

    let errors = other_errors.into_inner().unwrap();
    assert!(
        errors.is_empty(),
        "errors other than Unavailable: {errors:?}"
    );
    assert!(
        unavailable.load(Ordering::Relaxed) > 0,
        "the outage was never observed"
    );
    let executions = executions.into_inner().unwrap();
    assert_eq!(executions.len(), KEYS);
    for (k, n) in &executions {
        assert_eq!(*n, 1, "appt-{k} executed {n} times");
    }
    let stats = store.stats().unwrap();
    assert_eq!(
        stats.by_state.get(&StateName::Completed),
        Some(&(KEYS as u64))
    );
    assert_eq!(stats.total, KEYS as u64);
    eprintln!(
        "restart: {} Unavailable answers during the outage, {KEYS} keys each executed once",
        unavailable.load(Ordering::Relaxed)
    );
}

#[test]
fn a_restart_between_operations_costs_no_operation() {
    let _server = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let schema = pg_support::unique_schema("quick_restart");
    let options = PgOptions {
        // Idle connections are never checked for their age here: only the
        // pool's reaction to the first broken one keeps operations whole.
        validate_after_idle: Duration::from_secs(3_600),
        ..pg_support::options(&schema, 4)
    };
    let store = Store::from(PostgresAdapter::connect_with(&pg_support::url(), options).unwrap());
    let scope = Scope::new("acme", "restart.quick").unwrap();
    let policy = Policy::default().with_effect(EffectKind::Local);
    let run = |key: String| -> Result<(), String> {
        let key = IdempotencyKey::new(&key).unwrap();
        match store
            .claim(&scope, &key, Fingerprint::from_bytes([3; 32]), "w", &policy)
            .map_err(|e| format!("claim {key}: {e}"))?
        {
            Claim::Execute(guard) => guard
                .complete(StoredResponse::new(201, b"ok".to_vec()))
                .map_err(|e| format!("complete {key}: {e}")),
            other => Err(format!("{key}: a fresh key answered {other:?}")),
        }
    };
    // Four threads at once put four connections in the pool.
    std::thread::scope(|s| {
        for t in 0..4 {
            let run = &run;
            s.spawn(move || {
                for i in 0..5 {
                    run(format!("before-{t}-{i}")).unwrap();
                }
            });
        }
    });
    stop_server();
    start_server();
    // Every pooled connection is now dead; none of these may fail.
    for i in 0..12 {
        run(format!("after-{i}")).unwrap_or_else(|e| panic!("after the restart: {e}"));
    }
    assert_eq!(store.stats().unwrap().total, 32);
}

/// What one claim + complete of a fresh key gave.
enum Attempt {
    /// Claimed, executed and completed.
    Done,
    /// Claimed and executed, but the completion failed (the server went away).
    ExecutedNotRecorded(String),
    /// The claim failed: nothing executed.
    NotClaimed(String),
}

/// Sixteen clients claim and complete fresh keys without pause while the server
/// is stopped for a second and started again. While it is down the store's
/// health check answers 503 with the reason; once `pg_ctl start` returned, every
/// operation a client begins succeeds on its first try (the pool discards the
/// broken connections and makes new ones), and the health check is 200 again.
/// No key executes twice: a key whose claim or completion failed is left alone.
#[test]
fn sixteen_clients_through_a_restart_every_operation_after_it_succeeds() {
    const CLIENTS: usize = 16;
    let _server = SERVER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let schema = pg_support::unique_schema("restart16");
    let store = Store::from(
        PostgresAdapter::connect_with(&pg_support::url(), pg_support::options(&schema, 16))
            .unwrap(),
    );
    let scope = Scope::new("acme", "restart.sixteen").unwrap();
    let policy = Policy::default().with_effect(EffectKind::External);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let health_status = || {
        runtime
            .block_on(idemkit::http::health_response(store.clone(), None))
            .status()
            .as_u16()
    };
    assert_eq!(health_status(), 200);

    let executions: Mutex<HashMap<String, u32>> = Mutex::new(HashMap::new());
    // (began after the restart, key, what happened)
    let attempts: Mutex<Vec<(bool, String, Attempt)>> = Mutex::new(Vec::new());
    // 0: before the outage, 1: down, 2: restarted, 3: stop the clients.
    let phase = AtomicU64::new(0);
    let run = |key: &str| -> Attempt {
        let key_v = IdempotencyKey::new(key).unwrap();
        match store.claim(
            &scope,
            &key_v,
            Fingerprint::from_bytes([5; 32]),
            "w",
            &policy,
        ) {
            Err(e) => Attempt::NotClaimed(e.to_string()),
            Ok(Claim::Execute(mut guard)) => {
                *executions
                    .lock()
                    .unwrap()
                    .entry(key.to_owned())
                    .or_insert(0) += 1;
                match guard.try_complete(&StoredResponse::new(201, key.as_bytes().to_vec())) {
                    Ok(()) => Attempt::Done,
                    Err(e) => {
                        // The lease decides, as after a crash; never executed again here.
                        guard.abandon();
                        Attempt::ExecutedNotRecorded(e.to_string())
                    }
                }
            }
            Ok(other) => Attempt::NotClaimed(format!("a fresh key answered {other:?}")),
        }
    };
    let mut unwritable_reason = String::new();
    std::thread::scope(|s| {
        for c in 0..CLIENTS {
            let (run, phase, attempts) = (&run, &phase, &attempts);
            s.spawn(move || {
                let mut n = 0;
                loop {
                    let began = phase.load(Ordering::SeqCst);
                    if began == 3 {
                        return;
                    }
                    let key = format!("c{c}-{n}");
                    n += 1;
                    let outcome = run(&key);
                    attempts.lock().unwrap().push((began == 2, key, outcome));
                    if began == 1 {
                        // Down: a client backs off instead of spinning on refusals.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            });
        }
        std::thread::sleep(Duration::from_millis(500));
        phase.store(1, Ordering::SeqCst);
        stop_server();
        let down = Instant::now();
        let health = store.health();
        unwritable_reason = health.unwritable.clone().unwrap_or_default();
        assert!(
            !health.is_writable(),
            "the health check passed with the server down"
        );
        assert_eq!(health_status(), 503);
        std::thread::sleep(Duration::from_millis(1_000).saturating_sub(down.elapsed()));
        start_server();
        phase.store(2, Ordering::SeqCst);
        assert_eq!(health_status(), 200);
        std::thread::sleep(Duration::from_millis(1_500));
        phase.store(3, Ordering::SeqCst);
    });

    let attempts = attempts.into_inner().unwrap();
    let after: Vec<&(bool, String, Attempt)> = attempts.iter().filter(|a| a.0).collect();
    assert!(
        after.len() > CLIENTS,
        "too few operations after the restart: {}",
        after.len()
    );
    for (_, key, outcome) in &after {
        match outcome {
            Attempt::Done => {}
            Attempt::ExecutedNotRecorded(e) | Attempt::NotClaimed(e) => {
                panic!("{key}, begun after the restart, failed: {e}")
            }
        }
    }
    let failed_before = attempts
        .iter()
        .filter(|a| !a.0 && !matches!(a.2, Attempt::Done))
        .count();
    assert!(
        failed_before > 0,
        "the outage was never observed by a client"
    );
    for (key, n) in executions.into_inner().unwrap() {
        assert_eq!(n, 1, "{key} executed {n} times");
    }
    eprintln!(
        "restart with {CLIENTS} clients: {} operations, {} after the restart (all succeeded), \
         {failed_before} refused or unrecorded during the outage; health while down: {unwritable_reason}",
        attempts.len(),
        after.len()
    );
}
