//! The storage seam: what a database must do for the engine ([`crate::store`]),
//! and the adapters that do it.
//!
//! An adapter stores encoded records under their [`RecordId`] and knows nothing
//! of the state machine. It offers five methods, each atomic on its own:
//!
//! | method | does | refuses (answers `None` / `false`, writes nothing) |
//! |---|---|---|
//! | [`get`](Adapter::get) | reads a record, its version and the token floor | — |
//! | [`insert`](Adapter::insert) | writes a record where there is none | an entry exists, or the token floor is not below the record's last token |
//! | [`update`](Adapter::update) | replaces the record that was read | the stored version is not the one read |
//! | [`delete`](Adapter::delete) | removes the record that was read and raises the token floor to its last token | the stored version is not the one read |
//! | [`scan`](Adapter::scan) | lists records by lease expiry, GC due time, Unknown, or all, in bounded pages | — |
//!
//! Nine provided methods have defaults an adapter may improve on:
//! [`write_all`](Adapter::write_all) (several writes at once: one fsync on
//! redb), [`clock`](Adapter::clock) (a database that keeps the time),
//! [`may_block`](Adapter::may_block) (whether a call may wait),
//! [`bytes_on_disk`](Adapter::bytes_on_disk) (for `stats`),
//! [`held_alone`](Adapter::held_alone) (no other process can hold a lease),
//! [`health`](Adapter::health) (whether it can write now),
//! [`with_lock_wait`](Adapter::with_lock_wait) (a bounded wait for another
//! process's lock), [`verify`](Adapter::verify) (the adapter's own
//! structures, for `verify`) and [`announce_to`](Adapter::announce_to) (other
//! processes' writes that ended a record's Running state, for its waiters:
//! PostgreSQL's `LISTEN`/`NOTIFY`).
//!
//! The engine reads, lets `idemkit_core::machine::apply` decide, and writes with
//! one of the conditional methods; a refused write means another writer came
//! first, and the engine reads and decides again. So an adapter needs no
//! transactions across calls, no locks held while anything is decided, and no
//! knowledge of what a record means beyond three derived keys (its GC due time,
//! lease expiry and Unknown state) that [`scan`](Adapter::scan) orders by.
//!
//! **Versions never repeat for an id**, not even after a delete: the engine
//! compares versions, never records, so a version reused by a re-inserted record
//! would let a stale writer overwrite it (redb and memory keep the highest
//! version of any deleted record and start fresh records above it). The
//! **token floor** is at least the highest fencing token of any deleted record;
//! a fresh record's first token is above it, so tokens never repeat for a key
//! either (docs/architecture.md, invariant 4).
//!
//! | adapter | what |
//! |---|---|
//! | [`redb`] | the embedded default: snapshot reads, group commit of the conditional writes, one file |
//! | `postgres` (feature `postgres`) | five statements over a connection pool, for fleets; the database's clock |
//! | [`memory`] | a map under a mutex: for tests and caches |

pub mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod redb;

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use idemkit_core::record::Record;
use idemkit_core::{LogRef, RecordId, UnixMillis};

use crate::clock::Clock;

/// Where an adapter announces other processes' writes ([`Adapter::announce_to`]).
pub trait ChangeSink: Send + Sync {
    /// The record with these id bytes ([`RecordId::as_bytes`]) left Running
    /// (completed, released, Unknown, resolved or deleted).
    fn changed(&self, id: &[u8]);
    /// The announcements are flowing (`true`) or stopped (`false`: the
    /// connection dropped; waiters poll until it is back).
    fn channel(&self, open: bool);
}

/// The version of a stored record: changes with every write, never repeats for
/// an id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version(pub u64);

/// A record as stored, with the version it was read at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    /// The decoded record.
    pub record: Record,
    /// Its version.
    pub version: Version,
}

/// What [`Adapter::get`] read: one committed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    /// The record, if there is one.
    pub stored: Option<Stored>,
    /// The store's token floor (0 until a record was deleted).
    pub token_floor: u64,
    /// The database's time at the read, for an adapter whose database keeps the
    /// time every instance decides by (PostgreSQL); `None`: the engine's clock.
    pub now: Option<UnixMillis>,
}

/// Which records a [`Scan`] lists, and in what order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanBy {
    /// Every record, in id order.
    All,
    /// Records whose next GC step is due at or before the instant, by due time.
    GcDue(UnixMillis),
    /// Running records whose lease expired at or before the instant, by expiry.
    LeaseExpired(UnixMillis),
    /// Unknown records, in id order.
    Unknown,
}

/// One bounded page of a scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scan {
    /// Which records.
    pub by: ScanBy,
    /// At most this many entries.
    pub limit: usize,
    /// Continue after this cursor (from [`ScanPage::next`]).
    pub after: Option<Cursor>,
}

/// Where a scan continues: opaque to the engine, meaningful to its adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cursor(pub Vec<u8>);

/// One record of a scan page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scanned {
    /// The record's id bytes ([`RecordId::as_bytes`]).
    pub id: Vec<u8>,
    /// The record, or why its stored bytes do not decode (such a record is
    /// listed, never skipped silently: GC leaves it alone, `verify` names it).
    pub stored: Result<Stored, String>,
}

/// A page of scanned records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanPage {
    /// The records, in the scan's order.
    pub entries: Vec<Scanned>,
    /// Where the next page starts; `None` when this page is the last.
    pub next: Option<Cursor>,
}

/// One conditional write, as data: what [`Adapter::write_all`] applies.
#[derive(Clone, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "a batch of writes lives for one call; boxing every record would add an allocation per write"
)]
pub enum Write {
    /// [`Adapter::insert`].
    Insert(RecordId, Record),
    /// [`Adapter::update`] of the record read as `.1` to `.2`.
    Update(RecordId, Stored, Record),
    /// [`Adapter::delete`] of the record read as `.1`.
    Delete(RecordId, Stored),
}

/// What failed in an adapter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FailureKind {
    /// The database cannot be used right now (a file another process holds, a
    /// lost connection, a pool timeout): try again later. Nothing was written.
    Unavailable,
    /// Stored data is damaged (bytes that do not decode, pages that fail their
    /// checksum).
    Corrupt,
    /// Anything else (an I/O error, a full disk, a refused statement).
    Failed,
}

/// Stored record bytes that do not decode (damaged, or written by an unknown
/// version). Adapters report it inside an [`AdapterError`] of kind
/// [`FailureKind::Corrupt`]; the engine turns it into
/// `StorageError::CorruptRecord`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CorruptRecord {
    /// The record's log reference (`None` when its id does not decode either).
    pub log_ref: Option<LogRef>,
    /// What the decoder reported.
    pub detail: String,
}

impl CorruptRecord {
    /// The failure to decode `bytes`, stored under `id` bytes.
    #[must_use]
    pub fn of(id: &[u8], detail: impl fmt::Display) -> Self {
        CorruptRecord {
            log_ref: RecordId::decode(id)
                .ok()
                .map(|(scope, key)| scope.record_id(&key).log_ref()),
            detail: detail.to_string(),
        }
    }
}

impl fmt::Display for CorruptRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.log_ref {
            Some(log_ref) => write!(f, "record {log_ref} is corrupt: {}", self.detail),
            None => write!(
                f,
                "a record with an undecodable id is corrupt: {}",
                self.detail
            ),
        }
    }
}

impl std::error::Error for CorruptRecord {}

/// Decodes stored record bytes; a failure names the record.
pub fn decode_record(id: &[u8], bytes: &[u8]) -> Result<Record, CorruptRecord> {
    Record::decode(bytes).map_err(|e| CorruptRecord::of(id, e))
}

/// An adapter's failure: its own error, and what kind of failure it is.
#[derive(Debug)]
pub struct AdapterError {
    kind: FailureKind,
    source: Box<dyn std::error::Error + Send + Sync + 'static>,
}

impl AdapterError {
    /// An adapter failure of `kind`, caused by `source` (the database's error).
    pub fn new(
        kind: FailureKind,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        AdapterError {
            kind,
            source: source.into(),
        }
    }

    /// What kind of failure.
    #[must_use]
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The adapter's own error, if it is (or wraps, through `source()`) an `E`:
    /// `e.downcast_ref::<redb::OpenError>()`, `e.downcast_ref::<postgres::PgError>()`.
    #[must_use]
    pub fn downcast_ref<E: std::error::Error + 'static>(&self) -> Option<&E> {
        let mut next: Option<&(dyn std::error::Error + 'static)> = Some(&*self.source);
        while let Some(error) = next {
            if let Some(found) = error.downcast_ref::<E>() {
                return Some(found);
            }
            next = error.source();
        }
        None
    }
}

impl fmt::Display for AdapterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.source.fmt(f)
    }
}

impl std::error::Error for AdapterError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// The five-method seam between the engine and a database. See the module
/// documentation for the contract each method keeps.
///
/// Implementations are `Send + Sync` (one adapter serves every thread) and
/// `Any`, so a caller that knows which adapter it built can reach its own
/// methods through [`Store::adapter_as`](crate::store::Store::adapter_as).
pub trait Adapter: Any + Send + Sync + fmt::Debug {
    /// The committed record of `id` (if any), its version, the token floor.
    fn get(&self, id: &RecordId) -> Result<Read, AdapterError>;

    /// Writes `record` under `id` if there is no record there and the token
    /// floor is below `record.last_token`; its version, or `None` if refused.
    fn insert(&self, id: &RecordId, record: &Record) -> Result<Option<Version>, AdapterError>;

    /// Replaces the record `read` (as [`get`](Adapter::get) returned it) with
    /// `next` if the stored version is still `read.version`; the new version,
    /// or `None` if refused.
    fn update(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError>;

    /// Deletes the record `read` if the stored version is still `read.version`,
    /// raising the token floor to at least its last token (before or in the
    /// same atomic step); `false` if refused.
    fn delete(&self, id: &RecordId, read: &Stored) -> Result<bool, AdapterError>;

    /// One page of records, per `scan`.
    fn scan(&self, scan: &Scan) -> Result<ScanPage, AdapterError>;

    /// The clock every decision on this adapter's records must take, when its
    /// database keeps the time for every instance that shares it (PostgreSQL's);
    /// `None` (the default): the engine's own clock. [`Read::now`] carries the
    /// same clock at each read.
    fn clock(&self) -> Option<Arc<dyn Clock>> {
        None
    }

    /// Whether a call may wait on I/O or on another caller (a disk, a network,
    /// a group commit's leader). The HTTP layer runs this adapter's calls on
    /// tokio's blocking pool unless this is `false` (the default is `true`); an
    /// adapter that only touches memory under a short lock answers `false`, and
    /// its calls then run on the executor with no thread hop.
    fn may_block(&self) -> bool {
        true
    }

    /// How many bytes the records take on disk (a file's size, a table's with
    /// its indexes), for `stats`; `None` (the default) when there is no such
    /// figure.
    fn bytes_on_disk(&self) -> Result<Option<u64>, AdapterError> {
        Ok(None)
    }

    /// Whether this process holds the database alone: no other process can
    /// read or write it while this adapter lives (a redb file kept open, which
    /// redb locks). Then every Running record found at open was left by a
    /// process that is gone, and [`crate::open`] settles it at once instead of
    /// waiting for its lease. The default says
    /// no: a shared database's leases may belong to live processes.
    fn held_alone(&self) -> bool {
        false
    }

    /// Starts telling `sink` of other processes' writes that ended a record's
    /// Running state, for the requests waiting on it
    /// ([`Store::watch`](crate::store::Store::watch)); returns at once. A
    /// database that can announce changes (PostgreSQL's `LISTEN`/`NOTIFY`)
    /// calls [`ChangeSink::channel`] as its channel opens and drops. The
    /// default announces nothing: waiters on a shared database then poll.
    fn announce_to(&self, sink: Arc<dyn ChangeSink>) {
        let _ = sink;
    }

    /// A request in this process waits for `id` to leave Running: make sure
    /// another process's write that ends it is announced
    /// ([`announce_to`](Adapter::announce_to)). Called after the waiter
    /// registered and before it reads the record again, so a write committed
    /// after this returns is announced and one committed before is seen by
    /// that read. PostgreSQL marks the row (its completions notify only for
    /// marked rows: notifying commits are serialized by the server). The
    /// default does nothing: an adapter that announces every such write, or
    /// none, needs no mark.
    ///
    /// # Errors
    ///
    /// The database could not be reached; the waiter then polls instead of
    /// waiting to be woken.
    fn watch(&self, id: &RecordId) -> Result<(), AdapterError> {
        let _ = id;
        Ok(())
    }

    /// Whether this adapter can write now, as far as it can tell, for a health
    /// check ([`Store::health`](crate::store::Store::health)). It may do I/O
    /// (PostgreSQL asks its server), so it is called on a blocking thread. The
    /// default says writable: an adapter whose failures pass with the call that
    /// met them has nothing to report between calls.
    fn health(&self) -> Health {
        Health::writable()
    }

    /// Another handle on the same database whose calls wait at most `wait`
    /// for a lock another process holds (a redb file shared between
    /// processes), for a caller that must not wait longer (a lease renewal:
    /// [`Renewer::renew_within`](crate::store::Renewer::renew_within)).
    /// `None` (the default): this adapter never waits for another process.
    fn with_lock_wait(&self, wait: Duration) -> Option<Arc<dyn Adapter>> {
        let _ = wait;
        None
    }

    /// Checks the adapter's own structures against its records (redb's
    /// indexes), for [`Store::verify`](crate::store::Store::verify): the
    /// records checked and one line per problem. `None` (the default): the
    /// adapter keeps nothing beside its records, and the engine checks that
    /// each one decodes.
    fn verify(&self) -> Option<Result<(u64, Vec<String>), AdapterError>> {
        None
    }

    /// Applies several conditional writes, each refused or applied on its own
    /// (the answers are in order: `Some` for an applied write, with the new
    /// version; `Some(Version(0))` for an applied delete). The default writes
    /// one at a time; redb commits them all with one fsync, which is what a GC
    /// batch or an import wants.
    fn write_all(&self, writes: &[Write]) -> Result<Vec<Option<Version>>, AdapterError> {
        writes
            .iter()
            .map(|write| match write {
                Write::Insert(id, record) => self.insert(id, record),
                Write::Update(id, read, next) => self.update(id, read, next),
                Write::Delete(id, read) => Ok(self.delete(id, read)?.then_some(Version(0))),
            })
            .collect()
    }
}

/// Whether a store can write now: what an adapter reports
/// ([`Adapter::health`]) and what [`Store::health`](crate::store::Store::health)
/// completes with what this process saw.
///
/// A store that cannot write answers every new key 503 (nothing executes
/// without a claim), while stored answers may still replay: a service whose
/// health check reports this should be taken out of rotation until it
/// recovers, which it does on its own once the cause is gone (a redb file is
/// reopened, a PostgreSQL pool reconnects).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Health {
    /// Why writes fail now; `None` when they can succeed.
    pub unwritable: Option<String>,
    /// Since when writes fail, if known.
    pub since: Option<SystemTime>,
    /// When a write last succeeded, or the store was last found writable, in
    /// this process, if known.
    pub last_writable: Option<SystemTime>,
    /// How this process's waits on a running key end, if the store says
    /// ([`Store::health`](crate::store::Store::health) does).
    pub wakeups: Option<Wakeups>,
}

/// How a request waiting on a running key learns that its record left
/// Running: what `/health` reports as `"wakeups"`. None of them makes a
/// store unhealthy; a waiter that polls answers later, never wrongly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wakeups {
    /// `in-process`: the store is this process's alone (a redb file it keeps
    /// open, memory), so its own completions wake its waiters.
    InProcess,
    /// `not-started`: other processes write the store too, and nothing has
    /// waited yet, so nothing listens for their completions (PostgreSQL's
    /// listener starts with the first wait).
    NotStarted,
    /// `listening`: other processes' completions are announced to this one
    /// (PostgreSQL `LISTEN`) and wake its waiters.
    Listening,
    /// `polling`: the announcements are not heard (PostgreSQL's listening
    /// connection is down and reconnecting, or the store has none), so waiters
    /// also poll their record.
    Polling,
}

impl Wakeups {
    /// The name `/health` gives it.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Wakeups::InProcess => "in-process",
            Wakeups::NotStarted => "not-started",
            Wakeups::Listening => "listening",
            Wakeups::Polling => "polling",
        }
    }
}

impl Health {
    /// Writes can succeed (nothing else known).
    #[must_use]
    pub fn writable() -> Self {
        Health::default()
    }

    /// Writes fail now, because of `reason`.
    #[must_use]
    pub fn unwritable(reason: impl Into<String>) -> Self {
        Health {
            unwritable: Some(reason.into()),
            ..Health::default()
        }
    }

    /// The same, saying since when writes fail.
    #[must_use]
    pub fn since(mut self, since: Option<SystemTime>) -> Self {
        self.since = since;
        self
    }

    /// The same, saying when the store last wrote.
    #[must_use]
    pub fn last_writable(mut self, at: Option<SystemTime>) -> Self {
        self.last_writable = at;
        self
    }

    /// The same, saying how waits end.
    #[must_use]
    pub fn wakeups(mut self, wakeups: Option<Wakeups>) -> Self {
        self.wakeups = wakeups;
        self
    }

    /// Whether the store can write now.
    #[must_use]
    pub fn is_writable(&self) -> bool {
        self.unwritable.is_none()
    }

    /// The health as JSON for a health endpoint: `{"status":"ok"|"unavailable",
    /// "writable":…, "reason":…, "since_ms":…, "last_writable_ms":…,
    /// "wakeups":…}`, instants in Unix milliseconds, [`Wakeups`] by
    /// [`Wakeups::as_str`], absent fields left out.
    #[must_use]
    pub fn to_json(&self) -> String {
        let mut out: Vec<u8> = Vec::new();
        out.extend_from_slice(if self.is_writable() {
            br#"{"status":"ok","writable":true"#
        } else {
            br#"{"status":"unavailable","writable":false"#
        });
        if let Some(reason) = &self.unwritable {
            out.extend_from_slice(br#","reason":"#);
            idemkit_core::json::write_string(reason, &mut out);
        }
        for (name, at) in [("since", self.since), ("last_writable", self.last_writable)] {
            if let Some(at) = at {
                let ms = at
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                out.extend_from_slice(format!(r#","{name}_ms":{ms}"#).as_bytes());
            }
        }
        if let Some(wakeups) = self.wakeups {
            out.extend_from_slice(format!(r#","wakeups":"{}""#, wakeups.as_str()).as_bytes());
        }
        out.push(b'}');
        // Only ASCII and the reason's own UTF-8 were written.
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// The version of a fresh record: above `deleted`, the highest version any
/// deleted record had.
#[must_use]
pub fn first_version(deleted: u64) -> Version {
    Version(deleted.saturating_add(1))
}

/// The version after `read`.
#[must_use]
pub fn next_version(read: Version) -> Version {
    Version(read.0.saturating_add(1))
}
