//! A tiny in-memory store driven by the real machine, checked against a plain
//! reference model written independently of it.
//!
//! Shared by `core/tests/machine/reference_model.rs` (proptest) and
//! `fuzz/fuzz_targets/machine.rs` (libFuzzer, via `#[path]`), so both explore the
//! same operations and check the same invariants. [`World::apply`] runs one
//! operation on both sides and returns `Err` with a description on the first
//! disagreement or broken invariant.
//!
//! The model uses nothing from core: plain integers for tokens and time, its own
//! little enums, its own copy of the decision table and of `classify`.

#![allow(
    clippy::panic,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test harness: a panic here is a failing test, indexes are reduced modulo the length"
)]
#![allow(
    dead_code,
    reason = "each includer (proptest, fuzz target) uses a different part"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::time::Duration;

use idemkit_core::machine::{
    self, Answer as CoreAnswer, ClaimOutcome, ClaimRequest, Decision, Disposition, GcAction,
    MismatchStatus, Op as CoreOp, Policy, Resolution, StepStart, StorePolicy, TransitionError,
    Write,
};
use idemkit_core::record::{
    EffectKind, FencingToken, Record, RecordState, StepState, StoredResponse, UnknownReason,
};
use idemkit_core::{Fingerprint, RequestFingerprint, UnixMillis};

/// Keys 0..KEYS; key 0 is Local, key 1 External, key 2 External + StoreEverything + 409.
pub(crate) const KEYS: u8 = 3;
pub(crate) const FINGERPRINTS: u8 = 2;
/// Distinct request lines (paths) a scheme-2 claim may carry.
pub(crate) const REQUEST_LINES: u8 = 2;

/// The scheme-1 (body-only) fingerprint of body `fp`.
fn body_fingerprint(fp: u8) -> Fingerprint {
    Fingerprint::from_bytes([fp; 32])
}

/// The scheme-2 fingerprint of body `fp` sent with request line `line`; never
/// equal to a body-only one.
fn line_fingerprint(line: u8, fp: u8) -> Fingerprint {
    Fingerprint::from_bytes([0x80 | (line << 4) | fp; 32])
}

/// What a claim presents.
fn request_fingerprint(fp: u8, line: Option<u8>) -> RequestFingerprint {
    match line {
        None => RequestFingerprint::body_only(body_fingerprint(fp)),
        Some(l) => {
            RequestFingerprint::with_request_line(line_fingerprint(l, fp), body_fingerprint(fp))
        }
    }
}

/// Written out independently of the machine: a record stored under `scheme` with
/// `stored` was written for the request (`fp`, `line`) — scheme-1 records by the
/// body alone, scheme-2 records by the body and the request line.
fn same_request(scheme: u8, stored: &Fingerprint, fp: u8, line: Option<u8>) -> bool {
    match scheme {
        1 => *stored == body_fingerprint(fp),
        2 => line.is_some_and(|l| *stored == line_fingerprint(l, fp)),
        _ => false,
    }
}
pub(crate) const OWNERS: u8 = 3;
pub(crate) const STEP_NAMES: [&str; 2] = ["book", "notify"];
pub(crate) const STATUSES: [u16; 8] = [200, 201, 404, 409, 429, 500, 503, 302];
pub(crate) const LEASE_MS: u64 = 1_000;
pub(crate) const REPLAY_MS: u64 = 4_000;
pub(crate) const RECORD_MS: u64 = 10_000;
/// The virtual clock starts here, so "0" never doubles as "unset".
pub(crate) const START_MS: u64 = 1_700_000_000_000;

/// Which token a worker operation presents.
#[derive(Clone, Copy, Debug)]
pub(crate) enum TokenPick {
    /// The latest token ever issued for the key.
    Latest,
    /// Some token issued for the key (index modulo how many; often stale).
    Issued(u8),
    /// A token never issued: the current one plus 1 + n.
    Bogus(u8),
}

/// One operation on the world.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// A claim for body `fp`; `line` is the request line (scheme 2), `None` a
    /// claim without one (scheme 1, as every record written before scheme 2).
    Claim {
        key: u8,
        fp: u8,
        owner: u8,
        line: Option<u8>,
    },
    /// complete() with STATUSES[status].
    Complete {
        key: u8,
        tok: TokenPick,
        status: u8,
    },
    /// classify(STATUSES[status]) then complete / release / mark_unknown.
    Finish {
        key: u8,
        tok: TokenPick,
        status: u8,
    },
    Release {
        key: u8,
        tok: TokenPick,
    },
    MarkUnknown {
        key: u8,
        tok: TokenPick,
    },
    Renew {
        key: u8,
        tok: TokenPick,
    },
    BeginStep {
        key: u8,
        tok: TokenPick,
        step: u8,
    },
    CompleteStep {
        key: u8,
        tok: TokenPick,
        step: u8,
        provider_ref: u8,
    },
    Tick {
        millis: u64,
    },
    /// Jumps to one of the key's deadlines (0 lease, 1 replay, 2 record) minus
    /// one, exactly, or plus one millisecond (offset 0, 1, 2), if it is ahead:
    /// off-by-one errors at a boundary show up here, not in random ticks.
    Jump {
        key: u8,
        deadline: u8,
        offset: u8,
    },
    Resolve {
        key: u8,
        applied: bool,
    },
    Recover {
        key: u8,
        owner: u8,
    },
    Gc,
}

impl Op {
    /// Decodes operations from raw bytes (for the fuzzer): 1–4 bytes each, total,
    /// every byte string gives some sequence.
    pub(crate) fn parse_all(mut data: &[u8]) -> Vec<Op> {
        let mut ops = Vec::new();
        let next = |data: &mut &[u8]| -> u8 {
            match data.split_first() {
                Some((&b, rest)) => {
                    *data = rest;
                    b
                }
                None => 0,
            }
        };
        while !data.is_empty() && ops.len() < 200 {
            let tag = next(&mut data);
            let a = next(&mut data);
            let key = a % KEYS;
            let tok = match (a >> 2) % 4 {
                0 | 1 => TokenPick::Latest,
                2 => TokenPick::Issued(a >> 4),
                _ => TokenPick::Bogus(a >> 4),
            };
            let b = next(&mut data);
            ops.push(match tag % 13 {
                0 => Op::Claim {
                    key,
                    fp: (a >> 2) % FINGERPRINTS,
                    owner: b % OWNERS,
                    line: match (b >> 4) % (REQUEST_LINES + 1) {
                        0 => None,
                        n => Some(n - 1),
                    },
                },
                1 => Op::Complete {
                    key,
                    tok,
                    status: b % STATUSES.len() as u8,
                },
                2 => Op::Finish {
                    key,
                    tok,
                    status: b % STATUSES.len() as u8,
                },
                3 => Op::Release { key, tok },
                4 => Op::MarkUnknown { key, tok },
                5 => Op::Renew { key, tok },
                6 => Op::BeginStep {
                    key,
                    tok,
                    step: b % 2,
                },
                7 => Op::CompleteStep {
                    key,
                    tok,
                    step: b % 2,
                    provider_ref: (b >> 1) % 2,
                },
                8 => Op::Tick {
                    millis: u64::from(a) * 64 + u64::from(b),
                },
                9 => Op::Resolve {
                    key,
                    applied: b % 2 == 0,
                },
                10 => Op::Recover {
                    key,
                    owner: b % OWNERS,
                },
                11 => Op::Jump {
                    key,
                    deadline: b % 3,
                    offset: (b >> 2) % 3,
                },
                _ => Op::Gc,
            });
        }
        ops
    }
}

/// What an operation answered, in plain terms both sides can produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    Execute {
        token: u64,
        attempt: u32,
        expires: u64,
        steps: Vec<(String, bool, String)>,
    },
    Replay {
        response: StoredResponse,
    },
    ResponseExpired {
        status: u16,
        resource_ref: Option<String>,
    },
    InFlight {
        secs: u64,
    },
    Mismatch {
        status: u16,
    },
    Uncertain {
        since: u64,
    },
    Done,
    Dispatch {
        provider_key: String,
    },
    AlreadyDone {
        provider_ref: Option<String>,
    },
    Granted {
        token: u64,
        steps: Vec<(String, bool, String)>,
    },
    Stale,
    WrongState {
        expected: &'static str,
        found: &'static str,
    },
    UnknownStep,
    StepConflict,
    NoRecord,
    Collected {
        pruned: Vec<u8>,
        deleted: Vec<u8>,
    },
    Ticked,
}

// ---------------------------------------------------------------------------
// The reference model: plain data, its own rules.
// ---------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq, Eq)]
enum MState {
    Running {
        expires: u64,
    },
    Completed {
        response: StoredResponse,
        replay_until: u64,
        keep_until: u64,
    },
    /// `by_expiry`: the lease `last` expired into this state (its worker may still report).
    Unknown {
        since: u64,
        by_expiry: bool,
    },
    Released {
        keep_until: u64,
    },
}

impl MState {
    fn name(&self) -> &'static str {
        match self {
            MState::Running { .. } => "running",
            MState::Completed { .. } => "completed",
            MState::Unknown { .. } => "unknown",
            MState::Released { .. } => "released",
        }
    }
}

#[derive(Clone, Debug)]
struct MStep {
    name: String,
    done: bool,
    key: String,
    provider_ref: Option<String>,
}

#[derive(Clone, Debug)]
struct MRecord {
    fp: u8,
    /// The request line of the claim that created it (`None`: scheme 1).
    line: Option<u8>,
    external: bool,
    state: MState,
    attempt: u32,
    last: u64,
    steps: Vec<MStep>,
}

#[derive(Default, Debug)]
struct Model {
    records: BTreeMap<u8, MRecord>,
}

fn key_is_external(key: u8) -> bool {
    key != 0
}

fn key_stores_everything(key: u8) -> bool {
    key == 2
}

fn model_mismatch_status(key: u8) -> u16 {
    if key == 2 { 409 } else { 422 }
}

fn steps_of(steps: &[MStep]) -> Vec<(String, bool, String)> {
    steps
        .iter()
        .map(|s| (s.name.clone(), s.done, s.key.clone()))
        .collect()
}

/// What the model does with a finished status: 0 store, 1 release, 2 unknown.
fn model_classify(key: u8, status: u16) -> u8 {
    if key_stores_everything(key) {
        return 0;
    }
    // 1xx-4xx are definitive, except the four "retry later" statuses, which follow
    // the effect kind like 5xx.
    if (100..500).contains(&status) && ![408, 409, 425, 429].contains(&status) {
        return 0;
    }
    if key_is_external(key) { 2 } else { 1 }
}

impl Model {
    fn claim(&mut self, key: u8, fp: u8, line: Option<u8>, now: u64) -> Answer {
        let expired = |r: &MRecord| match r.state {
            MState::Completed { keep_until, .. } | MState::Released { keep_until } => {
                now >= keep_until
            }
            _ => false,
        };
        let fresh_token = match self.records.get(&key) {
            None => Some(1),
            Some(r) if expired(r) => Some(r.last + 1),
            Some(_) => None,
        };
        if let Some(token) = fresh_token {
            let expires = now + LEASE_MS;
            self.records.insert(
                key,
                MRecord {
                    fp,
                    line,
                    external: key_is_external(key),
                    state: MState::Running { expires },
                    attempt: 1,
                    last: token,
                    steps: Vec::new(),
                },
            );
            return Answer::Execute {
                token,
                attempt: 1,
                expires,
                steps: Vec::new(),
            };
        }
        let Some(r) = self.records.get_mut(&key) else {
            return Answer::NoRecord;
        };
        // A record without a request line (scheme 1) is matched by the body; one
        // with a request line only by the same line and body.
        let same = r.fp == fp && (r.line.is_none() || r.line == line);
        if !same {
            return Answer::Mismatch {
                status: model_mismatch_status(key),
            };
        }
        match r.state.clone() {
            MState::Completed {
                response,
                replay_until,
                ..
            } if response.body.is_some() && now < replay_until => Answer::Replay { response },
            MState::Completed { response, .. } => Answer::ResponseExpired {
                status: response.status,
                resource_ref: response.resource_ref,
            },
            MState::Unknown { since, .. } => Answer::Uncertain { since },
            MState::Running { expires } if now < expires => Answer::InFlight {
                secs: (expires - now).div_ceil(1000).max(1),
            },
            MState::Running { expires } if r.external => {
                r.state = MState::Unknown {
                    since: expires,
                    by_expiry: true,
                };
                Answer::Uncertain { since: expires }
            }
            MState::Running { .. } | MState::Released { .. } => {
                r.last += 1;
                r.attempt += 1;
                let expires = now + LEASE_MS;
                r.state = MState::Running { expires };
                Answer::Execute {
                    token: r.last,
                    attempt: r.attempt,
                    expires,
                    steps: steps_of(&r.steps),
                }
            }
        }
    }

    /// The fencing check: `Ok(record)` if `token` may act; `after_expiry` also
    /// admits the worker whose lease expired into Unknown.
    fn holder(&mut self, key: u8, token: u64, after_expiry: bool) -> Result<&mut MRecord, Answer> {
        let r = self.records.get_mut(&key).ok_or(Answer::NoRecord)?;
        if token != r.last {
            return Err(Answer::Stale);
        }
        match r.state {
            MState::Running { .. } => Ok(r),
            MState::Unknown {
                by_expiry: true, ..
            } if after_expiry => Ok(r),
            ref other => Err(Answer::WrongState {
                expected: "running",
                found: other.name(),
            }),
        }
    }

    fn complete(&mut self, key: u8, token: u64, response: &StoredResponse, now: u64) -> Answer {
        match self.holder(key, token, true) {
            Ok(r) => {
                r.state = model_completed(response, now);
                Answer::Done
            }
            Err(a) => a,
        }
    }

    fn release(&mut self, key: u8, token: u64, now: u64) -> Answer {
        match self.holder(key, token, true) {
            Ok(r) => {
                r.state = MState::Released {
                    keep_until: now + RECORD_MS,
                };
                Answer::Done
            }
            Err(a) => a,
        }
    }

    fn mark_unknown(&mut self, key: u8, token: u64, now: u64) -> Answer {
        match self.holder(key, token, true) {
            Ok(r) => {
                let since = match r.state {
                    MState::Unknown { since, .. } => since,
                    _ => now,
                };
                r.state = MState::Unknown {
                    since,
                    by_expiry: false,
                };
                Answer::Done
            }
            Err(a) => a,
        }
    }

    fn renew(&mut self, key: u8, token: u64, now: u64) -> Answer {
        match self.holder(key, token, false) {
            Ok(r) => {
                r.state = MState::Running {
                    expires: now + LEASE_MS,
                };
                Answer::Done
            }
            Err(a) => a,
        }
    }

    fn begin_step(&mut self, key: u8, token: u64, name: &str, proposed: &str) -> Answer {
        let r = match self.holder(key, token, false) {
            Ok(r) => r,
            Err(a) => return a,
        };
        if let Some(s) = r.steps.iter().find(|s| s.name == name) {
            return if s.done {
                Answer::AlreadyDone {
                    provider_ref: s.provider_ref.clone(),
                }
            } else {
                Answer::Dispatch {
                    provider_key: s.key.clone(),
                }
            };
        }
        r.steps.push(MStep {
            name: name.into(),
            done: false,
            key: proposed.into(),
            provider_ref: None,
        });
        Answer::Dispatch {
            provider_key: proposed.into(),
        }
    }

    fn complete_step(
        &mut self,
        key: u8,
        token: u64,
        name: &str,
        provider_ref: Option<String>,
    ) -> Answer {
        let r = match self.holder(key, token, true) {
            Ok(r) => r,
            Err(a) => return a,
        };
        let Some(s) = r.steps.iter_mut().find(|s| s.name == name) else {
            return Answer::UnknownStep;
        };
        if s.done {
            return if s.provider_ref == provider_ref {
                Answer::Done
            } else {
                Answer::StepConflict
            };
        }
        s.done = true;
        s.provider_ref = provider_ref;
        Answer::Done
    }

    fn unresolved(r: &MRecord, now: u64) -> bool {
        match r.state {
            MState::Unknown { .. } => true,
            MState::Running { expires } => now >= expires,
            _ => false,
        }
    }

    fn resolve(&mut self, key: u8, applied: Option<&StoredResponse>, now: u64) -> Answer {
        let Some(r) = self.records.get_mut(&key) else {
            return Answer::NoRecord;
        };
        if !Self::unresolved(r, now) {
            return Answer::WrongState {
                expected: "unknown",
                found: r.state.name(),
            };
        }
        r.state = match applied {
            Some(response) => model_completed(response, now),
            None => MState::Released {
                keep_until: now + RECORD_MS,
            },
        };
        Answer::Done
    }

    fn recover(&mut self, key: u8, now: u64) -> Answer {
        let Some(r) = self.records.get_mut(&key) else {
            return Answer::NoRecord;
        };
        if !Self::unresolved(r, now) {
            return Answer::WrongState {
                expected: "unknown",
                found: r.state.name(),
            };
        }
        r.last += 1;
        r.attempt += 1;
        r.state = MState::Running {
            expires: now + LEASE_MS,
        };
        Answer::Granted {
            token: r.last,
            steps: steps_of(&r.steps),
        }
    }

    fn gc(&mut self, now: u64) -> Answer {
        let mut pruned = Vec::new();
        let mut deleted = Vec::new();
        for (&key, r) in &mut self.records {
            match &mut r.state {
                MState::Completed { keep_until, .. } | MState::Released { keep_until }
                    if now >= *keep_until =>
                {
                    deleted.push(key)
                }
                MState::Completed {
                    response,
                    replay_until,
                    ..
                } if response.body.is_some() && now >= *replay_until => {
                    response.body = None;
                    pruned.push(key);
                }
                _ => {}
            }
        }
        for key in &deleted {
            self.records.remove(key);
        }
        Answer::Collected { pruned, deleted }
    }
}

fn model_completed(response: &StoredResponse, now: u64) -> MState {
    let replay_until = now + REPLAY_MS;
    MState::Completed {
        response: response.clone(),
        replay_until,
        keep_until: (now + RECORD_MS).max(replay_until),
    }
}

// ---------------------------------------------------------------------------
// The world: the store under test, the model and the invariant trackers.
// ---------------------------------------------------------------------------

/// The outcome a completed key promised, tracked independently of both sides.
#[derive(Clone, Debug)]
struct Promise {
    /// The completed record's fingerprint and scheme.
    fingerprint: Fingerprint,
    scheme: u8,
    response: StoredResponse,
    replay_until: u64,
    keep_until: u64,
}

pub(crate) struct World {
    now: u64,
    /// key → encoded record, as a real store keeps bytes.
    store: BTreeMap<u8, Vec<u8>>,
    model: Model,
    /// Tokens handed out per key (by Execute and recover), oldest first.
    issued: BTreeMap<u8, Vec<u64>>,
    /// The lease that may still act per key: (token, expiry, external).
    active: BTreeMap<u8, (u64, u64)>,
    promises: BTreeMap<u8, Promise>,
    /// Keys whose outcome became ambiguous and was not settled since (by resolve,
    /// recover, or the holder of the expired lease reporting).
    ambiguous: BTreeSet<u8>,
    step_no: u64,
    /// Counts per answer kind, to show that runs reach every corner.
    pub(crate) stats: BTreeMap<&'static str, u64>,
}

impl Default for World {
    fn default() -> Self {
        World {
            now: START_MS,
            store: BTreeMap::new(),
            model: Model::default(),
            issued: BTreeMap::new(),
            active: BTreeMap::new(),
            promises: BTreeMap::new(),
            ambiguous: BTreeSet::new(),
            step_no: 0,
            stats: BTreeMap::new(),
        }
    }
}

pub(crate) fn policy_for(key: u8) -> Policy {
    let policy = Policy::default()
        .with_lease(Duration::from_millis(LEASE_MS))
        .with_replay_window(Duration::from_millis(REPLAY_MS))
        .with_record_window(Duration::from_millis(RECORD_MS));
    match key {
        0 => policy.with_effect(EffectKind::Local),
        1 => policy.with_effect(EffectKind::External),
        _ => policy
            .with_effect(EffectKind::External)
            .with_store(StorePolicy::StoreEverything)
            .with_mismatch(MismatchStatus::Conflict),
    }
}

fn t(millis: u64) -> UnixMillis {
    UnixMillis::from_millis(millis)
}

fn core_steps(record_steps: &[idemkit_core::record::Step]) -> Vec<(String, bool, String)> {
    record_steps
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.state == StepState::Done,
                s.provider_key.clone(),
            )
        })
        .collect()
}

fn transition_answer(err: &TransitionError) -> Answer {
    match err {
        TransitionError::StaleToken { .. } => Answer::Stale,
        TransitionError::WrongState { expected, found } => Answer::WrongState {
            expected: expected.as_str(),
            found: found.as_str(),
        },
        TransitionError::UnknownStep { .. } => Answer::UnknownStep,
        TransitionError::StepConflict { .. } => Answer::StepConflict,
        TransitionError::NotFound => Answer::NoRecord,
        other => panic!("unexpected transition error in the simulation: {other}"),
    }
}

impl World {
    fn read(&self, key: u8) -> Result<Option<Record>, String> {
        match self.store.get(&key) {
            None => Ok(None),
            Some(bytes) => Record::decode(bytes)
                .map(Some)
                .map_err(|e| format!("stored record of key {key} does not decode: {e}")),
        }
    }

    fn write(&mut self, key: u8, record: &Record) {
        self.store.insert(key, record.encode());
    }

    fn token(&self, key: u8, pick: TokenPick) -> u64 {
        let issued = self.issued.get(&key).map(Vec::as_slice).unwrap_or(&[]);
        let latest = issued.last().copied().unwrap_or(1);
        match pick {
            TokenPick::Latest => latest,
            TokenPick::Issued(i) if !issued.is_empty() => issued[usize::from(i) % issued.len()],
            TokenPick::Issued(_) => 1,
            TokenPick::Bogus(n) => latest + 1 + u64::from(n),
        }
    }

    fn response(&self, key: u8, status: u16) -> StoredResponse {
        let n = self.step_no;
        StoredResponse {
            status,
            headers: if n.is_multiple_of(2) {
                vec![("x-n".into(), n.to_le_bytes().to_vec())]
            } else {
                vec![]
            },
            body: Some(format!("key {key} status {status} op {n}").into_bytes()),
            resource_ref: (!n.is_multiple_of(3)).then(|| format!("res-{n}")),
        }
    }

    /// Applies `op` to the store (through core) and to the model; checks that they
    /// agree and that every invariant holds.
    pub(crate) fn apply(&mut self, op: &Op) -> Result<(), String> {
        self.step_no += 1;
        let before = self.store.clone();
        let (real, modeled, presented) = self.step(op)?;
        if real != modeled {
            return Err(format!(
                "{op:?} at {}: core answered {real:?}, the model {modeled:?}",
                self.now
            ));
        }
        *self.stats.entry(answer_kind(&real)).or_default() += 1;
        self.check_after(op, &before, &real, presented)
    }

    /// Runs `op` on both sides: (core's answer, the model's answer, token presented).
    fn step(&mut self, op: &Op) -> Result<(Answer, Answer, Option<u64>), String> {
        let now = self.now;
        Ok(match *op {
            Op::Tick { millis } => {
                self.now = self.now.saturating_add(millis);
                (Answer::Ticked, Answer::Ticked, None)
            }
            Op::Jump {
                key,
                deadline,
                offset,
            } => {
                if let Some(r) = self.read(key)? {
                    let target = match deadline % 3 {
                        0 => r.lease_expires_at(),
                        1 => r.replay_until,
                        _ => r.keep_until,
                    };
                    if let Some(target) = target.map(UnixMillis::as_millis) {
                        let to = (target + u64::from(offset % 3)).saturating_sub(1);
                        self.now = self.now.max(to);
                    }
                }
                (Answer::Ticked, Answer::Ticked, None)
            }
            Op::Claim {
                key,
                fp,
                owner,
                line,
            } => {
                let existing = self.read(key)?;
                let req = ClaimRequest {
                    fingerprint: request_fingerprint(fp, line),
                    owner: format!("owner-{owner}"),
                };
                let op = CoreOp::Claim {
                    request: req,
                    token_floor: 0,
                };
                let decision = self
                    .decide(key, &op)?
                    .map_err(|e| format!("claim refused: {e}"))?;
                let CoreAnswer::Claim(outcome) = decision.answer else {
                    return Err(format!("a claim answered {:?}", decision.answer));
                };
                let write = match decision.write {
                    Write::Put(record) => Some(record),
                    Write::Keep => None,
                    Write::Delete => return Err("a claim deleted its record".into()),
                };
                let real = match outcome {
                    ClaimOutcome::Execute {
                        token,
                        attempt,
                        lease_expires_at,
                        steps,
                    } => Answer::Execute {
                        token: token.get(),
                        attempt,
                        expires: lease_expires_at.as_millis(),
                        steps: core_steps(&steps),
                    },
                    ClaimOutcome::Replay { response } => Answer::Replay { response },
                    ClaimOutcome::ResponseExpired {
                        status,
                        resource_ref,
                    } => Answer::ResponseExpired {
                        status,
                        resource_ref,
                    },
                    ClaimOutcome::InFlight { retry_after } => Answer::InFlight {
                        secs: retry_after.as_secs(),
                    },
                    ClaimOutcome::Mismatch { status } => Answer::Mismatch { status },
                    ClaimOutcome::Uncertain { since } => Answer::Uncertain {
                        since: since.as_millis(),
                    },
                };
                self.check_claim(key, fp, line, existing.as_ref(), &real, &write)?;
                let modeled = self.model.claim(key, fp, line, now);
                (real, modeled, None)
            }
            Op::Complete { key, tok, status } => {
                let token = self.token(key, tok);
                let response = self.response(key, STATUSES[usize::from(status)]);
                let real = self.transition(
                    key,
                    CoreOp::Complete {
                        token: ft(token),
                        response: response.clone(),
                    },
                )?;
                let modeled = self.model.complete(key, token, &response, now);
                if real == Answer::Done {
                    self.promise(key, &response);
                }
                (real, modeled, Some(token))
            }
            Op::Finish { key, tok, status } => {
                let token = self.token(key, tok);
                let status = STATUSES[usize::from(status)];
                let response = self.response(key, status);
                let policy = policy_for(key);
                let disposition = machine::classify(status, &policy);
                let real = self.transition(
                    key,
                    match disposition {
                        Disposition::Store => CoreOp::Complete {
                            token: ft(token),
                            response: response.clone(),
                        },
                        Disposition::Release => CoreOp::Release { token: ft(token) },
                        Disposition::Unknown => CoreOp::MarkUnknown {
                            token: ft(token),
                            reason: UnknownReason::MarkedByWorker(format!("status {status}")),
                        },
                    },
                )?;
                let modeled = match model_classify(key, status) {
                    0 => self.model.complete(key, token, &response, now),
                    1 => self.model.release(key, token, now),
                    _ => self.model.mark_unknown(key, token, now),
                };
                if real == Answer::Done && disposition == Disposition::Store {
                    self.promise(key, &response);
                }
                (real, modeled, Some(token))
            }
            Op::Release { key, tok } => {
                let token = self.token(key, tok);
                let real = self.transition(key, CoreOp::Release { token: ft(token) })?;
                (real, self.model.release(key, token, now), Some(token))
            }
            Op::MarkUnknown { key, tok } => {
                let token = self.token(key, tok);
                let real = self.transition(
                    key,
                    CoreOp::MarkUnknown {
                        token: ft(token),
                        reason: UnknownReason::GuardDropped,
                    },
                )?;
                (real, self.model.mark_unknown(key, token, now), Some(token))
            }
            Op::Renew { key, tok } => {
                let token = self.token(key, tok);
                let real = self.transition(key, CoreOp::Renew { token: ft(token) })?;
                (real, self.model.renew(key, token, now), Some(token))
            }
            Op::BeginStep { key, tok, step } => {
                let token = self.token(key, tok);
                let name = STEP_NAMES[usize::from(step % 2)];
                let proposed = format!("pk-{key}-{name}-{}", self.step_no);
                let op = CoreOp::BeginStep {
                    token: ft(token),
                    name: name.to_owned(),
                    proposed_provider_key: proposed.clone(),
                };
                let real = match self.decide(key, &op)? {
                    Ok(Decision {
                        answer: CoreAnswer::Step(StepStart::Dispatch { provider_key }),
                        ..
                    }) => Answer::Dispatch { provider_key },
                    Ok(Decision {
                        answer: CoreAnswer::Step(StepStart::AlreadyDone { provider_ref }),
                        ..
                    }) => Answer::AlreadyDone { provider_ref },
                    Ok(other) => return Err(format!("begin_step answered {other:?}")),
                    Err(e) => transition_answer(&e),
                };
                (
                    real,
                    self.model.begin_step(key, token, name, &proposed),
                    Some(token),
                )
            }
            Op::CompleteStep {
                key,
                tok,
                step,
                provider_ref,
            } => {
                let token = self.token(key, tok);
                let name = STEP_NAMES[usize::from(step % 2)];
                let reference = Some(format!("ref-{provider_ref}"));
                let real = self.transition(
                    key,
                    CoreOp::CompleteStep {
                        token: ft(token),
                        name: name.to_owned(),
                        provider_ref: reference.clone(),
                    },
                )?;
                (
                    real,
                    self.model.complete_step(key, token, name, reference),
                    Some(token),
                )
            }
            Op::Resolve { key, applied } => {
                let response = self.response(key, 201);
                let resolution = if applied {
                    Resolution::Applied(response.clone())
                } else {
                    Resolution::NotApplied
                };
                let real = self.transition(key, CoreOp::Resolve { resolution })?;
                let modeled = self.model.resolve(key, applied.then_some(&response), now);
                if real == Answer::Done {
                    self.active.remove(&key);
                    if applied {
                        self.promise(key, &response);
                    }
                }
                (real, modeled, None)
            }
            Op::Recover { key, owner } => {
                let op = CoreOp::Recover {
                    owner: format!("owner-{owner}"),
                };
                let real = match self.decide(key, &op)? {
                    Ok(Decision {
                        answer: CoreAnswer::Recovered(grant),
                        ..
                    }) => {
                        self.issued.entry(key).or_default().push(grant.token.get());
                        self.active.insert(key, (grant.token.get(), now + LEASE_MS));
                        Answer::Granted {
                            token: grant.token.get(),
                            steps: core_steps(&grant.steps),
                        }
                    }
                    Ok(other) => return Err(format!("recover answered {other:?}")),
                    Err(e) => transition_answer(&e),
                };
                (real, self.model.recover(key, now), None)
            }
            Op::Gc => {
                let mut pruned = Vec::new();
                let mut deleted = Vec::new();
                for key in 0..KEYS {
                    let Some(record) = self.read(key)? else {
                        continue;
                    };
                    let decision = self
                        .decide(key, &CoreOp::Gc)?
                        .map_err(|e| format!("gc refused: {e}"))?;
                    match decision.answer {
                        CoreAnswer::Gc(GcAction::Keep) => {}
                        CoreAnswer::Gc(GcAction::PruneBody) => pruned.push(key),
                        CoreAnswer::Gc(GcAction::Delete) => {
                            if matches!(
                                record.state,
                                RecordState::Running { .. } | RecordState::Unknown { .. }
                            ) {
                                return Err(format!("GC deleted a {} record", record.state.name()));
                            }
                            self.promises.remove(&key);
                            // Tokens restart at 1 for a record created after GC: the
                            // old ones belong to workers gone for a record window.
                            self.issued.remove(&key);
                            self.active.remove(&key);
                            deleted.push(key);
                        }
                        other => return Err(format!("gc answered {other:?}")),
                    }
                }
                (
                    Answer::Collected { pruned, deleted },
                    self.model.gc(now),
                    None,
                )
            }
        })
    }

    /// The store's one loop, as every store runs it: read the record, ask
    /// [`machine::apply`], write what it says (put, delete or nothing); a
    /// refused operation writes nothing.
    fn decide(
        &mut self,
        key: u8,
        op: &CoreOp,
    ) -> Result<Result<Decision, TransitionError>, String> {
        let existing = self.read(key)?;
        let decision = machine::apply(existing.as_ref(), op, &policy_for(key), t(self.now));
        if let Ok(decision) = &decision {
            match &decision.write {
                Write::Keep => {}
                Write::Put(record) => {
                    if existing.as_ref() == Some(record) {
                        return Err(format!(
                            "{op:?} put the record it read (a write for nothing)"
                        ));
                    }
                    self.write(key, record);
                }
                Write::Delete => {
                    self.store.remove(&key);
                }
            }
        }
        Ok(decision)
    }

    /// A worker or operator transition: `Done`, or why it was refused.
    fn transition(&mut self, key: u8, op: CoreOp) -> Result<Answer, String> {
        Ok(match self.decide(key, &op)? {
            Ok(Decision {
                answer: CoreAnswer::Done,
                ..
            }) => Answer::Done,
            Ok(other) => return Err(format!("{op:?} answered {other:?}")),
            Err(e) => transition_answer(&e),
        })
    }

    fn promise(&mut self, key: u8, response: &StoredResponse) {
        let (fingerprint, scheme) = self
            .read(key)
            .ok()
            .flatten()
            .map_or((body_fingerprint(0), 1), |r| {
                (r.fingerprint, r.fingerprint_scheme)
            });
        self.promises.insert(
            key,
            Promise {
                fingerprint,
                scheme,
                response: response.clone(),
                replay_until: self.now + REPLAY_MS,
                keep_until: self.now + RECORD_MS.max(REPLAY_MS),
            },
        );
        self.active.remove(&key);
    }

    fn check_claim(
        &mut self,
        key: u8,
        fp: u8,
        line: Option<u8>,
        existing: Option<&Record>,
        answer: &Answer,
        write: &Option<Record>,
    ) -> Result<(), String> {
        let now = self.now;
        let live = existing.filter(|r| !r.is_expired(t(now)));
        // A changed fingerprint never executes or overwrites.
        if let Some(r) = live {
            let changed = !same_request(r.fingerprint_scheme, &r.fingerprint, fp, line);
            if changed && (!matches!(answer, Answer::Mismatch { .. }) || write.is_some()) {
                return Err(format!(
                    "fingerprint change answered {answer:?}, write {}",
                    write.is_some()
                ));
            }
        }
        // A completed key replays the identical response, then ResponseExpired, never Execute.
        if let Some(p) = self.promises.get(&key)
            && same_request(p.scheme, &p.fingerprint, fp, line)
            && now < p.keep_until
        {
            let want_replay = now < p.replay_until;
            let ok = match answer {
                Answer::Replay { response } => want_replay && *response == p.response,
                Answer::ResponseExpired {
                    status,
                    resource_ref,
                } => {
                    *status == p.response.status && *resource_ref == p.response.resource_ref
                        // Replay may end early only if GC pruned the body.
                        && (!want_replay || self.store.get(&key).and_then(|b| Record::decode(b).ok()).is_some_and(|r| matches!(r.state, RecordState::Completed { ref response, .. } if response.body.is_none())))
                }
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "completed key {key} answered {answer:?}, promised {p:?}"
                ));
            }
        }
        if let Answer::Execute { token, expires, .. } = answer {
            if self.ambiguous.contains(&key) {
                return Err(format!("Execute on key {key} whose outcome is ambiguous"));
            }
            // At most one live lease; an External lease that ended ambiguously is
            // never executed again without resolve/recover.
            if let Some(&(old_token, old_expires)) = self.active.get(&key)
                && (now < old_expires || key_is_external(key))
            {
                return Err(format!(
                    "Execute (token {token}) while lease {old_token} (expires {old_expires}) may still act at {now}"
                ));
            }
            if let Some(r) = existing
                && *token <= r.last_token.get()
            {
                return Err(format!("token {token} does not grow past {}", r.last_token));
            }
            self.issued.entry(key).or_default().push(*token);
            self.active.insert(key, (*token, *expires));
            self.promises.remove(&key);
        }
        Ok(())
    }

    fn check_after(
        &mut self,
        op: &Op,
        before: &BTreeMap<u8, Vec<u8>>,
        answer: &Answer,
        presented: Option<u64>,
    ) -> Result<(), String> {
        // A stale (or never issued) token never changes anything.
        if let (Some(token), Some(key)) = (presented, op_key(op)) {
            let current = before
                .get(&key)
                .and_then(|b| Record::decode(b).ok())
                .map(|r| r.last_token.get());
            let stale = current.is_some_and(|c| c != token);
            if stale && (*answer != Answer::Stale || before.get(&key) != self.store.get(&key)) {
                return Err(format!(
                    "stale token {token} answered {answer:?} or changed the record"
                ));
            }
        }
        if let (Answer::Done | Answer::Granted { .. }, Some(key)) = (answer, op_key(op)) {
            if matches!(
                op,
                Op::Complete { .. }
                    | Op::Release { .. }
                    | Op::MarkUnknown { .. }
                    | Op::Finish { .. }
            ) {
                self.active.remove(&key);
            }
            if matches!(
                op,
                Op::Complete { .. }
                    | Op::Release { .. }
                    | Op::Finish { .. }
                    | Op::Resolve { .. }
                    | Op::Recover { .. }
            ) {
                self.ambiguous.remove(&key);
            }
        }
        if let Op::Renew { key, .. } = op
            && *answer == Answer::Done
            && let Some(lease) = self.active.get_mut(key)
        {
            lease.1 = self.now + LEASE_MS;
        }
        // Every stored record decodes and obeys the record-level invariants.
        for (key, bytes) in &self.store {
            let r = Record::decode(bytes).map_err(|e| format!("key {key}: {e}"))?;
            if r.state.name() == idemkit_core::record::StateName::Unknown {
                self.ambiguous.insert(*key);
            }
            let is_live = matches!(
                r.state,
                RecordState::Running { .. } | RecordState::Unknown { .. }
            );
            if is_live && r.gc_due_at().is_some() {
                return Err(format!(
                    "key {key}: a {} record has a GC deadline",
                    r.state.name()
                ));
            }
            if let RecordState::Running { lease } = &r.state
                && r.is_unresolved(t(self.now)) != (self.now >= lease.expires_at.as_millis())
            {
                return Err(format!("key {key}: is_unresolved disagrees with the lease"));
            }
            // A store's GC index (ordered by gc_due_at) finds exactly the records
            // gc() has work for.
            let due = r.gc_due_at().is_some_and(|d| self.now >= d.as_millis());
            let work = machine::gc(&r, t(self.now)) != GcAction::Keep;
            if due != work {
                return Err(format!(
                    "key {key}: gc_due_at {:?} disagrees with gc() at {}",
                    r.gc_due_at(),
                    self.now
                ));
            }
        }
        let model_keys: Vec<u8> = self.model.records.keys().copied().collect();
        let store_keys: Vec<u8> = self.store.keys().copied().collect();
        if model_keys != store_keys {
            return Err(format!(
                "store holds keys {store_keys:?}, the model {model_keys:?}"
            ));
        }
        Ok(())
    }

    /// A one-line summary of how often each answer occurred.
    pub(crate) fn summary(&self) -> String {
        let mut out = String::new();
        for (kind, n) in &self.stats {
            let _ = write!(out, "{kind}={n} ");
        }
        out
    }
}

fn ft(token: u64) -> FencingToken {
    FencingToken::new(token).unwrap_or(FencingToken::FIRST)
}

fn op_key(op: &Op) -> Option<u8> {
    match *op {
        Op::Claim { key, .. }
        | Op::Complete { key, .. }
        | Op::Finish { key, .. }
        | Op::Release { key, .. }
        | Op::MarkUnknown { key, .. }
        | Op::Renew { key, .. }
        | Op::BeginStep { key, .. }
        | Op::CompleteStep { key, .. }
        | Op::Resolve { key, .. }
        | Op::Recover { key, .. } => Some(key),
        Op::Tick { .. } | Op::Jump { .. } | Op::Gc => None,
    }
}

pub(crate) fn answer_kind(answer: &Answer) -> &'static str {
    match answer {
        Answer::Execute { attempt: 1, .. } => "execute-first",
        Answer::Execute { .. } => "execute-again",
        Answer::Replay { .. } => "replay",
        Answer::ResponseExpired { .. } => "response-expired",
        Answer::InFlight { .. } => "in-flight",
        Answer::Mismatch { .. } => "mismatch",
        Answer::Uncertain { .. } => "uncertain",
        Answer::Done => "done",
        Answer::Dispatch { .. } => "dispatch",
        Answer::AlreadyDone { .. } => "already-done",
        Answer::Granted { .. } => "granted",
        Answer::Stale => "stale",
        Answer::WrongState { .. } => "wrong-state",
        Answer::UnknownStep => "unknown-step",
        Answer::StepConflict => "step-conflict",
        Answer::NoRecord => "no-record",
        Answer::Collected { pruned, deleted } if pruned.is_empty() && deleted.is_empty() => {
            "gc-idle"
        }
        Answer::Collected { .. } => "gc-work",
        Answer::Ticked => "tick",
    }
}
