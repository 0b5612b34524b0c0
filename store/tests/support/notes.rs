//! The crash scenarios of the appointments service's Local route, `POST
//! /appointments/{id}/notes`, over any store (redb or PostgreSQL): the caller
//! says how to start the service, the scenario kills and restarts it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Reply, Service, request};

pub(crate) const TENANT: &str = "clinic-n";

/// Books one appointment for [`TENANT`] and returns its id.
pub(crate) fn book(service: &Service) -> String {
    let reply = service.post(
        Some(b"book-for-notes"),
        Some(TENANT),
        br#"{"customer_id":"c-7","slot_id":"2026-12-24T09:00"}"#,
    );
    assert_eq!(
        reply.status,
        201,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["id"].as_str().unwrap().to_owned()
}

/// `POST /appointments/{appointment}/notes` with `key` at `addr`.
pub(crate) fn post_note(
    addr: SocketAddr,
    appointment: &str,
    key: &str,
    text: &str,
) -> std::io::Result<Reply> {
    let auth = format!("Bearer {TENANT}");
    let body = serde_json::json!({ "text": text }).to_string();
    request(
        addr,
        "POST",
        &format!("/appointments/{appointment}/notes"),
        &[
            ("Content-Type", b"application/json"),
            ("Idempotency-Key", key.as_bytes()),
            ("Authorization", auth.as_bytes()),
        ],
        body.as_bytes(),
    )
}

/// The notes of `appointment`, as `GET /appointments/{id}/notes` lists them.
pub(crate) fn notes(service: &Service, appointment: &str) -> Vec<serde_json::Value> {
    let reply = service.get(&format!("/appointments/{appointment}/notes"), Some(TENANT));
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    reply.json()["notes"].as_array().unwrap().clone()
}

/// Retries `key` like a client that keeps its key: until a 201, through 409
/// `request-in-progress`, 503s and a service that is down (the current
/// address is read from `addr` at every attempt: a restarted service listens
/// on a new port).
fn retry_until_created(
    addr: &Mutex<SocketAddr>,
    appointment: &str,
    key: &str,
    within: Duration,
) -> Reply {
    let deadline = Instant::now() + within;
    loop {
        let at = *addr.lock().unwrap();
        match post_note(at, appointment, key, &format!("note for {key}")) {
            Ok(reply) if reply.status == 201 => return reply,
            Ok(reply)
                if (reply.status == 409 && reply.problem() == "request-in-progress")
                    || reply.status == 503 =>
            {
                std::thread::sleep(Duration::from_millis(40));
            }
            Ok(reply) => panic!(
                "{key}: unexpected {}: {}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            ),
            // Killed mid-request, or not listening yet.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
        assert!(Instant::now() < deadline, "{key}: no 201 within {within:?}");
    }
}

/// Checks what must hold after any crash: every key has exactly one note, the
/// 201 it got names that note, and the key replays the same bytes.
pub(crate) fn assert_one_note_per_key(
    service: &Service,
    appointment: &str,
    created: &BTreeMap<String, Reply>,
) {
    let listed = notes(service, appointment);
    let mut by_id: BTreeMap<String, usize> = BTreeMap::new();
    for note in &listed {
        *by_id
            .entry(note["id"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let mut per_text: BTreeMap<&str, usize> = BTreeMap::new();
    for note in &listed {
        *per_text
            .entry(note["text"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    let twice: Vec<_> = per_text.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "keys with more than one note: {twice:?}");
    assert_eq!(
        listed.len(),
        created.len(),
        "one note per key, never a note without its outcome"
    );
    for (key, reply) in created {
        let id = reply.json()["id"].as_str().unwrap().to_owned();
        assert_eq!(
            by_id.get(&id),
            Some(&1),
            "{key}: its 201 names a note listed once"
        );
        let again = post_note(service.addr, appointment, key, &format!("note for {key}")).unwrap();
        assert_eq!(again.status, 201, "{key} replays");
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(
            again.body, reply.body,
            "{key}: the replay is the same bytes"
        );
    }
}

/// With `--crash-after-note-write`: the first attempt dies inside the
/// transaction; after a restart the retry answers 201 and there is one note.
pub(crate) fn crash_after_note_write(start: &dyn Fn(&[&str]) -> Service) {
    let service = start(&[]);
    let appointment = book(&service);
    drop(service);
    let service = start(&["--crash-after-note-write"]);
    let first = post_note(
        service.addr,
        &appointment,
        "note-key-1",
        "note for note-key-1",
    );
    assert!(
        first.is_err(),
        "the process died before answering: {first:?}"
    );
    let status = service.wait_exit(Duration::from_secs(10));
    assert!(!status.success(), "aborted: {status:?}");

    // Restarted with the same switch: it fires once per provider database.
    let service = start(&["--crash-after-note-write"]);
    let addr = Mutex::new(service.addr);
    let reply = retry_until_created(&addr, &appointment, "note-key-1", Duration::from_secs(30));
    assert_eq!(reply.json()["text"], "note for note-key-1");
    let created = BTreeMap::from([("note-key-1".to_owned(), reply)]);
    assert_one_note_per_key(&service, &appointment, &created);
}

/// The SIGKILL sweep: at least `keys` keys posted by `clients` threads while
/// the service is killed at random moments and restarted, until `kills` kills
/// landed while keys were unanswered; each key is retried until it answers;
/// then [`assert_one_note_per_key`]. The threads go on posting new keys until
/// the kills are done, so a fast run cannot finish its traffic before the last
/// kill (CI once saw 9 of 10 kills land when 240 keys were all the traffic).
pub(crate) fn sigkill_sweep(
    start: &dyn Fn(&[&str]) -> Service,
    keys: usize,
    clients: usize,
    kills: usize,
) {
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("notes sigkill sweep: seed {seed}");
    let mut next = move || {
        // xorshift64: reproducible from the printed seed.
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // The transaction stays open a few ms after the note is written, so a
    // kill lands inside it as well as before and after.
    let args = ["--note-write-delay-ms", "4"];
    let mut service = start(&args);
    let appointment = book(&service);
    let addr = Arc::new(Mutex::new(service.addr));
    let created = Arc::new(Mutex::new(BTreeMap::new()));
    let kills_done = Arc::new(AtomicBool::new(false));
    let posted = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..clients)
        .map(|c| {
            let (addr, created, appointment) =
                (Arc::clone(&addr), Arc::clone(&created), appointment.clone());
            let (kills_done, posted) = (Arc::clone(&kills_done), Arc::clone(&posted));
            std::thread::spawn(move || {
                let mut k = c;
                while k < keys || !kills_done.load(Ordering::SeqCst) {
                    let key = format!("sweep-{k}");
                    posted.fetch_add(1, Ordering::SeqCst);
                    let reply =
                        retry_until_created(&addr, &appointment, &key, Duration::from_secs(120));
                    created.lock().unwrap().insert(key, reply);
                    k += clients;
                }
            })
        })
        .collect();
    let started = Instant::now();
    let (mut landed, mut rounds) = (0, 0);
    // Kill until `kills` kills landed while keys were still unanswered (a kill
    // after the last answer proves nothing), at most 3 × `kills` rounds.
    while landed < kills && rounds < 3 * kills {
        rounds += 1;
        std::thread::sleep(Duration::from_millis(20 + next() % 180));
        let in_flight = created.lock().unwrap().len() < posted.load(Ordering::SeqCst);
        // SIGKILL: no shutdown code runs.
        service.child.kill().unwrap();
        service.child.wait().unwrap();
        landed += usize::from(in_flight);
        service = start(&args);
        *addr.lock().unwrap() = service.addr;
    }
    kills_done.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().unwrap();
    }
    let created = created.lock().unwrap().clone();
    assert_eq!(created.len(), posted.load(Ordering::SeqCst));
    assert!(created.len() >= keys, "{} keys answered", created.len());
    let keys = created.len();
    assert_one_note_per_key(&service, &appointment, &created);
    eprintln!(
        "notes sigkill sweep: {keys} keys, {rounds} kills ({landed} while keys were still unanswered), {:?}",
        started.elapsed()
    );
    assert_eq!(
        landed, kills,
        "the traffic outlasted too few kills: add keys"
    );
}
