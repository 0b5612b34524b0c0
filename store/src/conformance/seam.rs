//! The seam suite: what every [`Adapter`] must do, checked on the adapter
//! itself (the decision table is checked through the engine by
//! [`super::run_all`]). Double inserts and stale writes are refused, versions
//! never repeat for an id (not even after a delete), a delete raises the token
//! floor, scans keep their order and their bounds, `write_all` answers each
//! write on its own.
//!
//! ```no_run
//! use std::sync::Arc;
//! use idemkit::adapters::memory::MemoryAdapter;
//!
//! idemkit::conformance::seam::run_all(|| Arc::new(MemoryAdapter::default()));
//! ```

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use idemkit_core::machine::{self, ClaimRequest, Policy};
use idemkit_core::record::{EffectKind, Record, StoredResponse, UnknownReason};
use idemkit_core::{Fingerprint, IdempotencyKey, RecordId, Scope, UnixMillis};

use crate::adapters::{Adapter, Scan, ScanBy, Stored, Version, Write};

/// One named check of an adapter.
pub type SeamCheck = (&'static str, fn(&dyn Adapter));

/// Every seam check, by name.
#[must_use]
pub fn checks() -> Vec<SeamCheck> {
    vec![
        ("insert_then_get", insert_then_get),
        ("a_second_insert_is_refused", a_second_insert_is_refused),
        ("a_stale_update_is_refused", a_stale_update_is_refused),
        (
            "an_absent_record_is_not_updated",
            an_absent_record_is_not_updated,
        ),
        ("a_stale_delete_is_refused", a_stale_delete_is_refused),
        (
            "versions_never_repeat_after_a_delete",
            versions_never_repeat_after_a_delete,
        ),
        (
            "a_delete_raises_the_token_floor",
            a_delete_raises_the_token_floor,
        ),
        ("scans_keep_order_and_bounds", scans_keep_order_and_bounds),
        (
            "write_all_answers_each_write_alone",
            write_all_answers_each_write_alone,
        ),
        (
            "write_all_keeps_the_lease_index_exact",
            write_all_keeps_the_lease_index_exact,
        ),
    ]
}

/// Runs every seam check, each on a fresh adapter from `make`.
pub fn run_all(make: impl Fn() -> Arc<dyn Adapter>) {
    for (name, check) in checks() {
        let adapter = make();
        eprintln!("seam check: {name}");
        check(&*adapter);
    }
}

const T0: u64 = 1_800_000_000_000;

fn at(ms: u64) -> UnixMillis {
    UnixMillis::from_millis(T0 + ms)
}

fn id(key: &str) -> RecordId {
    Scope::new("acme", "seam")
        .unwrap()
        .record_id(&IdempotencyKey::new(key).unwrap())
}

fn policy() -> Policy {
    Policy::default()
        .with_effect(EffectKind::Local)
        .with_lease(Duration::from_secs(30))
        .with_replay_window(Duration::from_secs(60))
        .with_record_window(Duration::from_secs(600))
}

/// A Running record claimed at `now`, its first token above `floor`.
fn running(now: UnixMillis, floor: u64) -> Record {
    let request = ClaimRequest {
        fingerprint: Fingerprint::from_bytes([3; 32]).into(),
        owner: "seam".to_owned(),
    };
    machine::claim_above(None, &request, &policy(), now, floor)
        .write
        .unwrap()
}

/// A record claimed and completed at `now` (GC due at the replay window's end).
fn completed(now: UnixMillis) -> Record {
    let r = running(now, 0);
    machine::complete(
        &r,
        r.last_token,
        StoredResponse::new(201, "done"),
        &policy(),
        now,
    )
    .unwrap()
}

fn unknown(now: UnixMillis) -> Record {
    let r = running(now, 0);
    machine::mark_unknown(&r, r.last_token, UnknownReason::GuardDropped, now).unwrap()
}

fn stored(adapter: &dyn Adapter, id: &RecordId) -> Option<Stored> {
    adapter.get(id).unwrap().stored
}

fn insert_then_get(a: &dyn Adapter) {
    let (k, record) = (id("k"), running(at(0), 0));
    let version = a
        .insert(&k, &record)
        .unwrap()
        .expect("a fresh insert is applied");
    let read = a.get(&k).unwrap();
    assert_eq!(read.stored, Some(Stored { record, version }));
    assert_eq!(read.token_floor, 0);
    assert_eq!(a.get(&id("absent")).unwrap().stored, None);
}

fn a_second_insert_is_refused(a: &dyn Adapter) {
    let k = id("k");
    let first = running(at(0), 0);
    a.insert(&k, &first).unwrap().unwrap();
    assert_eq!(a.insert(&k, &running(at(5), 0)).unwrap(), None);
    assert_eq!(
        stored(a, &k).unwrap().record,
        first,
        "the first insert stays"
    );
}

fn a_stale_update_is_refused(a: &dyn Adapter) {
    let k = id("k");
    let r = running(at(0), 0);
    a.insert(&k, &r).unwrap().unwrap();
    let read = stored(a, &k).unwrap();
    let done = completed(at(1));
    let v2 = a
        .update(&k, &read, &done)
        .unwrap()
        .expect("current version");
    assert_ne!(v2, read.version, "an update changes the version");
    // `read` is stale now: refused, and nothing changes.
    assert_eq!(a.update(&k, &read, &unknown(at(2))).unwrap(), None);
    assert_eq!(
        stored(a, &k),
        Some(Stored {
            record: done,
            version: v2
        })
    );
}

fn an_absent_record_is_not_updated(a: &dyn Adapter) {
    let k = id("k");
    let ghost = Stored {
        record: running(at(0), 0),
        version: Version(1),
    };
    assert_eq!(a.update(&k, &ghost, &completed(at(1))).unwrap(), None);
    assert!(!a.delete(&k, &ghost).unwrap());
    assert_eq!(stored(a, &k), None);
}

fn a_stale_delete_is_refused(a: &dyn Adapter) {
    let k = id("k");
    a.insert(&k, &running(at(0), 0)).unwrap().unwrap();
    let old = stored(a, &k).unwrap();
    a.update(&k, &old, &completed(at(1))).unwrap().unwrap();
    assert!(!a.delete(&k, &old).unwrap(), "a stale delete is refused");
    let current = stored(a, &k).unwrap();
    assert!(a.delete(&k, &current).unwrap());
    assert_eq!(stored(a, &k), None);
}

fn versions_never_repeat_after_a_delete(a: &dyn Adapter) {
    let k = id("k");
    let mut seen = BTreeSet::new();
    let mut floor = 0;
    for round in 0..3 {
        let v = a
            .insert(&k, &running(at(round * 10), floor))
            .unwrap()
            .unwrap();
        assert!(seen.insert(v), "round {round}: version {v:?} repeated");
        let read = stored(a, &k).unwrap();
        let v = a
            .update(&k, &read, &completed(at(round * 10 + 1)))
            .unwrap()
            .unwrap();
        assert!(seen.insert(v), "round {round}: version {v:?} repeated");
        let stale = read;
        let current = stored(a, &k).unwrap();
        assert!(a.delete(&k, &current).unwrap());
        floor = a.get(&k).unwrap().token_floor;
        // A read taken before the delete cannot write over what comes next.
        a.insert(&k, &running(at(round * 10 + 2), floor))
            .unwrap()
            .unwrap();
        assert_eq!(
            a.update(&k, &stale, &unknown(at(round * 10 + 3))).unwrap(),
            None
        );
        assert_eq!(
            a.update(&k, &current, &unknown(at(round * 10 + 3)))
                .unwrap(),
            None
        );
        let again = stored(a, &k).unwrap();
        assert!(
            seen.insert(again.version),
            "round {round}: re-insert repeated a version"
        );
        assert!(a.delete(&k, &again).unwrap());
        floor = a.get(&k).unwrap().token_floor;
    }
}

fn a_delete_raises_the_token_floor(a: &dyn Adapter) {
    let k = id("k");
    let r = running(at(0), 6); // its first token is 7
    assert_eq!(r.last_token.get(), 7);
    a.insert(&k, &r).unwrap().unwrap();
    let read = stored(a, &k).unwrap();
    assert!(a.delete(&k, &read).unwrap());
    let floor = a.get(&id("anything")).unwrap().token_floor;
    assert!(floor >= 7, "the floor covers the deleted token: {floor}");
    // A fresh record whose token is not above the floor would repeat a token.
    assert_eq!(a.insert(&k, &running(at(1), 0)).unwrap(), None);
    assert_eq!(a.insert(&id("other"), &running(at(1), 0)).unwrap(), None);
    let above = running(at(1), floor);
    assert!(a.insert(&k, &above).unwrap().is_some());
}

/// Every id a scan lists, page by page (`limit` each), checking each page's bound.
fn scan_ids(a: &dyn Adapter, by: ScanBy, limit: usize) -> Vec<Vec<u8>> {
    let mut after = None;
    let mut ids = Vec::new();
    loop {
        let page = a.scan(&Scan { by, limit, after }).unwrap();
        assert!(page.entries.len() <= limit, "{by:?}: a page over its limit");
        for entry in &page.entries {
            assert!(entry.stored.is_ok(), "{by:?}: {:?}", entry.stored);
        }
        ids.extend(page.entries.into_iter().map(|e| e.id));
        match page.next {
            Some(cursor) => after = Some(cursor),
            None => return ids,
        }
    }
}

fn scans_keep_order_and_bounds(a: &dyn Adapter) {
    // Completed at 0..5 s: GC due at the replay window's end, in that order;
    // inserted out of order so that id order and due order differ.
    let mut due = Vec::new();
    for (n, key) in ["c4", "c0", "c3", "c1", "c2"].iter().enumerate() {
        let s: u64 = key[1..].parse().unwrap();
        let k = id(key);
        a.insert(&k, &completed(at(s * 1_000))).unwrap().unwrap();
        due.push((s, k.as_bytes().to_vec(), n));
    }
    due.sort();
    let due_order: Vec<Vec<u8>> = due.iter().map(|(_, id, _)| id.clone()).collect();
    // Running with leases ending at 30 s + 0..3 s; Unknown ones.
    let mut leases = Vec::new();
    for s in [2_u64, 0, 1] {
        let k = id(&format!("r{s}"));
        a.insert(&k, &running(at(s * 1_000), 0)).unwrap().unwrap();
        leases.push((s, k.as_bytes().to_vec()));
    }
    leases.sort();
    let mut unknowns: Vec<Vec<u8>> = ["u1", "u0"]
        .iter()
        .map(|key| {
            let k = id(key);
            a.insert(&k, &unknown(at(0))).unwrap().unwrap();
            k.as_bytes().to_vec()
        })
        .collect();
    unknowns.sort();

    let replay = 60_000;
    for limit in [1, 2, 3, 100] {
        // Every due record, in due order, each once.
        let all_due = scan_ids(a, ScanBy::GcDue(at(replay + 10_000)), limit);
        assert_eq!(all_due, due_order, "limit {limit}");
        // Only those due by the instant.
        let some = scan_ids(a, ScanBy::GcDue(at(replay + 2_000)), limit);
        assert_eq!(some, due_order[..3].to_vec(), "limit {limit}");
        assert!(scan_ids(a, ScanBy::GcDue(at(replay - 1)), limit).is_empty());
        let expired = scan_ids(a, ScanBy::LeaseExpired(at(30_000 + 1_000)), limit);
        let want: Vec<Vec<u8>> = leases[..2].iter().map(|(_, id)| id.clone()).collect();
        assert_eq!(expired, want, "limit {limit}");
        assert_eq!(
            scan_ids(a, ScanBy::Unknown, limit),
            unknowns,
            "limit {limit}"
        );
        let everything = scan_ids(a, ScanBy::All, limit);
        assert_eq!(everything.len(), 10, "limit {limit}");
        let unique: BTreeSet<_> = everything.iter().collect();
        assert_eq!(unique.len(), 10, "limit {limit}: a record listed twice");
    }
}

fn write_all_answers_each_write_alone(a: &dyn Adapter) {
    let (k1, k2, k3) = (id("w1"), id("w2"), id("w3"));
    a.insert(&k1, &running(at(0), 0)).unwrap().unwrap();
    a.insert(&k2, &running(at(0), 0)).unwrap().unwrap();
    let read1 = stored(a, &k1).unwrap();
    let read2 = stored(a, &k2).unwrap();
    a.update(&k2, &read2, &completed(at(1))).unwrap().unwrap();
    let answers = a
        .write_all(&[
            Write::Insert(k1.clone(), running(at(2), 0)), // refused: present
            Write::Update(k1.clone(), read1.clone(), completed(at(2))), // applied
            Write::Delete(k2.clone(), read2),             // refused: stale
            // Applied (its token is far above any floor the delete before it
            // may raise: an adapter may raise the floor before a delete that is
            // then refused).
            Write::Insert(k3.clone(), running(at(2), 1_000)),
        ])
        .unwrap();
    assert_eq!(answers.len(), 4);
    assert!(answers[0].is_none() && answers[2].is_none(), "{answers:?}");
    assert!(answers[1].is_some() && answers[3].is_some(), "{answers:?}");
    assert_eq!(stored(a, &k1).unwrap().record, completed(at(2)));
    assert!(stored(a, &k2).is_some());
    assert!(stored(a, &k3).is_some());
    assert!(a.write_all(&[]).unwrap().is_empty());
}

/// Many leases end in one `write_all` (completions, a delete) beside a write
/// that keeps its lease's expiry and one that is refused: the expired-lease
/// scan lists exactly the records still running, and the adapter's own check
/// (if it has one) finds its indexes in step with its records.
fn write_all_keeps_the_lease_index_exact(a: &dyn Adapter) {
    let keys: Vec<RecordId> = (0..8).map(|i| id(&format!("lease{i}"))).collect();
    let mut reads = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        // Two claims per instant: entries that share an expiry.
        a.insert(k, &running(at(i as u64 / 2), 0)).unwrap().unwrap();
        reads.push(stored(a, k).unwrap());
    }
    let answers = a
        .write_all(&[
            Write::Update(keys[0].clone(), reads[0].clone(), completed(at(5))),
            Write::Update(keys[3].clone(), reads[3].clone(), completed(at(5))),
            // The same lease expiry, another token: its entry must stay.
            Write::Update(keys[2].clone(), reads[2].clone(), running(at(1), 7)),
            Write::Delete(keys[5].clone(), reads[5].clone()),
            Write::Update(keys[6].clone(), reads[6].clone(), completed(at(5))),
            // Refused (the record is there): its lease stays.
            Write::Insert(keys[7].clone(), completed(at(5))),
            Write::Update(keys[1].clone(), reads[1].clone(), completed(at(5))),
        ])
        .unwrap();
    assert_eq!(
        answers.iter().map(Option::is_some).collect::<Vec<_>>(),
        [true, true, true, true, true, false, true]
    );
    let running_now = scan_ids(a, ScanBy::LeaseExpired(UnixMillis::MAX), 2);
    let expected: Vec<Vec<u8>> = [2, 4, 7]
        .iter()
        .map(|&i| keys[i].as_bytes().to_vec())
        .collect();
    assert_eq!(running_now, expected);
    if let Some(report) = a.verify() {
        let (_, problems) = report.unwrap();
        assert!(problems.is_empty(), "{problems:?}");
    }
}
