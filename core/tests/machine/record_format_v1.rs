//! Record formats are forever: bytes written by any release must decode, to the
//! same record, in every later one (redb's `backward_compatibility.rs` idea).
//!
//! Each fixture is a record the machine wrote on a fixed timeline, pinned as hex.
//! If a fixture stops decoding, or a record stops encoding to its fixture, the
//! format changed: bump `FORMAT_VERSION` and keep a version-1 decoder instead of
//! editing these bytes.

#![allow(
    clippy::unwrap_used,
    clippy::panic,
    clippy::indexing_slicing,
    reason = "test helpers: a panic is a failing test"
)]

use core::time::Duration;

use idemkit_core::machine::{self, ClaimOutcome, ClaimRequest, Policy, Resolution, StorePolicy};
use idemkit_core::record::{EffectKind, Record, StoredResponse, UnknownReason};
use idemkit_core::{Fingerprint, UnixMillis};

fn t(millis: u64) -> UnixMillis {
    UnixMillis::from_millis(1_700_000_000_000 + millis)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// The records of one operation's life: running with a step, completed, pruned,
/// unknown, released, recovered.
fn timeline() -> Vec<(&'static str, Record)> {
    let policy = Policy::default()
        .with_effect(EffectKind::External)
        .with_store(StorePolicy::Definitive)
        .with_lease(Duration::from_secs(30));
    let req = ClaimRequest {
        fingerprint: Fingerprint::from_bytes([0x5a; 32]).into(),
        owner: "worker-1".into(),
    };
    let d = machine::claim(None, &req, &policy, t(0));
    let ClaimOutcome::Execute { token, .. } = d.outcome else {
        panic!("{:?}", d.outcome)
    };
    let running = d.write.unwrap();
    let (stepped, _) = machine::begin_step(&running, token, "book", "bk-1", t(5)).unwrap();
    let stepped =
        machine::complete_step(&stepped, token, "book", Some("appt_9".into()), t(9)).unwrap();
    let response = StoredResponse {
        status: 201,
        headers: vec![("location".into(), b"/a/9".to_vec())],
        body: Some(b"{\"id\":9}".to_vec()),
        resource_ref: Some("appt_9".into()),
    };
    let completed = machine::complete(&stepped, token, response, &policy, t(12)).unwrap();
    let pruned = machine::prune_body(&completed);
    let unknown = machine::mark_unknown(
        &stepped,
        token,
        UnknownReason::MarkedByWorker("timeout".into()),
        t(12),
    )
    .unwrap();
    let released = machine::resolve(&unknown, Resolution::NotApplied, &policy, t(20)).unwrap();
    let (recovered, _) = machine::recover(&unknown, "reconciler", &policy, t(20)).unwrap();
    vec![
        ("running", stepped),
        ("completed", completed),
        ("pruned", pruned),
        ("unknown", unknown),
        ("released", released),
        ("recovered", recovered),
    ]
}

const FIXTURES: [(&str, &str); 6] = [
    (
        "running",
        "015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a010008776f726b65722d3101b0ba97ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc3189d095ffbc310000",
    ),
    (
        "completed",
        "015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0101c90101086c6f636174696f6e042f612f3901087b226964223a397d0106617070745f398cd095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc318cd095ffbc31018c88afa8bd31018cd8c79fbf31",
    ),
    (
        "pruned",
        "015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0101c90101086c6f636174696f6e042f612f39000106617070745f398cd095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc318cd095ffbc31018c88afa8bd31018cd8c79fbf31",
    ),
    (
        "unknown",
        "015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0102010774696d656f75748cd095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc318cd095ffbc310000",
    ),
    (
        "released",
        "015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a010394d095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc3194d095ffbc31000194d8c79fbf31",
    ),
    (
        "recovered",
        "015a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a01000a7265636f6e63696c657202c4ba97ffbc3102020104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc3194d095ffbc310000",
    ),
];

#[test]
fn version_1_fixtures_decode_to_the_records_that_wrote_them() {
    for ((name, record), (fixture_name, fixture)) in timeline().into_iter().zip(FIXTURES) {
        assert_eq!(name, fixture_name);
        // Release 1 kept no windows and no fingerprint scheme (it had only
        // scheme 1) in its records; everything else is the same.
        let mut expected = record;
        expected.windows = None;
        expected.fingerprint_scheme = 1;
        assert_eq!(Record::decode(&unhex(fixture)), Ok(expected), "{name}");
    }
}

/// What this release writes for the same timeline (format 2: format 1's fields,
/// then the windows the record was claimed under and the fingerprint scheme).
const FIXTURES_V2: [(&str, &str); 6] = [
    (
        "running",
        "025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a010008776f726b65722d3101b0ba97ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc3189d095ffbc3100000180b899298088b2a00201",
    ),
    (
        "completed",
        "025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0101c90101086c6f636174696f6e042f612f3901087b226964223a397d0106617070745f398cd095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc318cd095ffbc31018c88afa8bd31018cd8c79fbf310180b899298088b2a00201",
    ),
    (
        "pruned",
        "025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0101c90101086c6f636174696f6e042f612f39000106617070745f398cd095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc318cd095ffbc31018c88afa8bd31018cd8c79fbf310180b899298088b2a00201",
    ),
    (
        "unknown",
        "025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a0102010774696d656f75748cd095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc318cd095ffbc3100000180b899298088b2a00201",
    ),
    (
        "released",
        "025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a010394d095ffbc3101010104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc3194d095ffbc31000194d8c79fbf310180b899298088b2a00201",
    ),
    (
        "recovered",
        "025a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a01000a7265636f6e63696c657202c4ba97ffbc3102020104626f6f6b0104626b2d310106617070745f3985d095ffbc310189d095ffbc3180d095ffbc3194d095ffbc3100000180b899298088b2a00201",
    ),
];

#[test]
fn version_2_fixtures_pin_what_this_release_writes() {
    for ((name, record), (fixture_name, fixture)) in timeline().into_iter().zip(FIXTURES_V2) {
        assert_eq!(name, fixture_name);
        assert_eq!(
            hex(&record.encode()),
            fixture,
            "{name} no longer encodes to its fixture"
        );
        assert_eq!(Record::decode(&unhex(fixture)), Ok(record), "{name}");
    }
}
