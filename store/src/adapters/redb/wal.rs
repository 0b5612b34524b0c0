//! The write-ahead log of a store file this process keeps open: `<file>.wal`.
//!
//! A durable redb commit writes its header and six to eight 4 KiB pages at
//! scattered offsets, then one `fdatasync`: 1.7 times an `fdatasync` of a
//! small append on the same disk. A group commit of a store kept open
//! ([`super::RedbAdapter::open`]) therefore writes what its transaction
//! changed, as data, to this log first: one frame, written in place into
//! space the log has already written (zeros at first), and one
//! `fdatasync`. Only then is redb's transaction committed, *without* a sync
//! (`Durability::None`), or carried on into the next group's
//! (`group_commit.rs`), and only then are the callers answered. So nothing is acknowledged
//! before it is durable (invariant 2): a frame is durable before its writes
//! are visible to anyone.
//!
//! ## Checkpoints
//!
//! Every so often a group is committed durably in redb instead (which makes
//! every earlier non-durable commit durable too) and the log starts again at
//! its first byte. That happens when the next frame would not fit in
//! [`CAPACITY`], when a group is too large to log ([`MAX_FRAME`], an import),
//! when a group runs the caller's own writes (Local completions write tables
//! this log does not describe), and when the store is closed (then the file
//! is removed). Each of these durable commits stores the sequence number of
//! the last frame written in the metadata table (`wal_applied`), so the
//! durable state says which frames it already holds. A logged transaction
//! does not: it becomes durable only with a later durable commit, which
//! records a number at least as high, and until then the durable state holds
//! none of it (one table fewer written per group).
//!
//! ## Replay
//!
//! Every open of the file ([`replay`], from `open.rs`: at start, on a reopen
//! after an I/O error, and by a process that shares the file) first applies
//! the frames the durable state lacks, in one durable transaction, then removes
//! the log. Frames are read from the start and must carry consecutive
//! sequence numbers with a valid checksum: the first frame that does not (a
//! torn last write, or an older frame a restart has not yet overwritten) ends
//! the log. A frame holds effects (this record's value is now these bytes,
//! this record is gone, the floors are now these), not decisions, so applying
//! a frame the state already holds changes nothing.
//!
//! ## Frame
//!
//! | bytes | holds |
//! |---|---|
//! | 0..4 | `IKWL` |
//! | 4..8 | payload length, u32 LE |
//! | 8..16 | sequence number, u64 LE (the first frame of a store is 1) |
//! | 16..32 | the first 16 bytes of blake3 over bytes 0..16 and the payload |
//! | 32.. | the payload: entries, each a tag byte then its fields |
//!
//! | tag | entry | fields |
//! |---|---|---|
//! | 1 | put | id length (u32 LE), id, value length (u32 LE), value (version + record, as the records table holds it) |
//! | 2 | remove | id length (u32 LE), id |
//! | 3 | floors | token floor (u64 LE), version floor (u64 LE) |

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use redb::{Database, Durability, ReadableDatabase, WriteTransaction};

use super::error::{OpenError, RedbError};
use super::records::{Tables, u64_in};
use super::tables::{META, META_WAL_APPLIED};

/// The log restarts at its first byte (after a durable commit) before it
/// grows past this.
pub(crate) const CAPACITY: u64 = 4 << 20;

/// A group whose frame would be larger is committed durably in redb instead.
pub(crate) const MAX_FRAME: usize = 1 << 20;

/// The log's file grows by this much at a time, written with zeros, so that
/// most frames overwrite bytes the file already has (an `fdatasync` then need
/// not record a new size).
const CHUNK: u64 = 1 << 20;

const MAGIC: &[u8; 4] = b"IKWL";
const HEADER: usize = 32;

const PUT: u8 = 1;
const REMOVE: u8 = 2;
const FLOORS: u8 = 3;

/// `<file>.wal`, beside the store file.
pub(crate) fn path_of(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".wal");
    PathBuf::from(name)
}

/// What one transaction changed in idemkit's tables, in frame payload form.
#[derive(Debug, Default)]
pub(crate) struct Effects(Vec<u8>);

impl Effects {
    pub(crate) fn put(&mut self, id: &[u8], value: &[u8]) {
        self.0.push(PUT);
        push_bytes(&mut self.0, id);
        push_bytes(&mut self.0, value);
    }

    pub(crate) fn remove(&mut self, id: &[u8]) {
        self.0.push(REMOVE);
        push_bytes(&mut self.0, id);
    }

    pub(crate) fn floors(&mut self, token: u64, version: u64) {
        self.0.push(FLOORS);
        self.0.extend_from_slice(&token.to_le_bytes());
        self.0.extend_from_slice(&version.to_le_bytes());
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// The records these effects leave: each id with its stored value, or
    /// `None` where the record is gone, in the order written.
    pub(crate) fn records(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> {
        entries(&self.0).filter_map(|entry| match entry {
            Ok(Entry::Put(id, value)) => Some((id, Some(value))),
            Ok(Entry::Remove(id)) => Some((id, None)),
            Ok(Entry::Floors { .. }) | Err(_) => None,
        })
    }
}

fn push_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    // Ids are 32 bytes and values hold one record: far below 4 GiB.
    out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn checksum(head: &[u8], payload: &[u8]) -> [u8; 16] {
    let mut hasher = blake3::Hasher::new();
    hasher.update(head);
    hasher.update(payload);
    let hash = hasher.finalize();
    let (first, _) = hash
        .as_bytes()
        .split_first_chunk::<16>()
        .unwrap_or((&[0; 16], &[]));
    *first
}

/// The log being written by the process that keeps the store open.
#[derive(Debug)]
pub(crate) struct Wal {
    file: File,
    path: PathBuf,
    /// Where the next frame goes.
    end: u64,
    /// How much of the file has been written (zeros or frames).
    written: u64,
    /// The sequence number of the next frame.
    next: u64,
    /// Where the last frame went, until the transaction it describes commits.
    last: Option<u64>,
    /// Every frame below this sequence number is in a durable redb commit.
    durable_below: u64,
    /// The database this log was made for was closed (a reopen made a new
    /// log): nothing may be written to it any more.
    retired: bool,
    /// A test's injected failure of the next append.
    #[cfg(test)]
    pub(crate) fail_next_append: bool,
}

impl Wal {
    /// An empty log for the store at `db_path`, whose durable state holds
    /// every frame up to `applied` (a [`replay`] just made it so).
    pub(crate) fn create(db_path: &Path, applied: u64) -> io::Result<Wal> {
        let path = path_of(db_path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)?;
        Ok(Wal {
            file,
            path,
            end: 0,
            written: 0,
            next: applied + 1,
            last: None,
            durable_below: applied + 1,
            retired: false,
            #[cfg(test)]
            fail_next_append: false,
        })
    }

    /// Whether a frame of `payload` bytes goes to the log (rather than the
    /// group being committed durably in redb).
    pub(crate) fn takes(&self, payload: usize) -> bool {
        !self.retired && payload <= MAX_FRAME && self.end + (HEADER + payload) as u64 <= CAPACITY
    }

    /// The log's file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this log may be written.
    pub(crate) fn is_retired(&self) -> bool {
        self.retired
    }

    /// Writes one frame of `effects` and syncs it. On an error nothing
    /// advances: the next frame takes the same place and number.
    pub(crate) fn append(&mut self, effects: &Effects) -> io::Result<()> {
        #[cfg(test)]
        if std::mem::take(&mut self.fail_next_append) {
            return Err(io::Error::other("injected write-ahead log failure"));
        }
        let payload = &effects.0;
        let mut frame = Vec::with_capacity(HEADER + payload.len());
        frame.extend_from_slice(MAGIC);
        frame.extend_from_slice(
            &u32::try_from(payload.len())
                .unwrap_or(u32::MAX)
                .to_le_bytes(),
        );
        frame.extend_from_slice(&self.next.to_le_bytes());
        let sum = checksum(&frame, payload);
        frame.extend_from_slice(&sum);
        frame.extend_from_slice(payload);
        let frame_end = self.end + frame.len() as u64;
        while self.written < frame_end {
            // `CHUNK` fits a usize on every platform this builds for.
            let zeros = vec![0; CHUNK as usize];
            self.file.write_all_at(&zeros, self.written)?;
            self.written += CHUNK;
        }
        let synced = self
            .file
            .write_all_at(&frame, self.end)
            .and_then(|()| self.file.sync_data());
        if let Err(error) = synced {
            // The frame may have reached the disk whole although the sync
            // failed. Its transaction is not committed, so it is wiped if the
            // disk still lets us; if not, the reopen's replay may apply it:
            // writes its callers were told had failed, never ones they were
            // told had succeeded.
            let _ = self
                .file
                .write_all_at(&[0; HEADER], self.end)
                .and_then(|()| self.file.sync_data());
            return Err(error);
        }
        self.last = Some(self.end);
        self.end = frame_end;
        self.next += 1;
        Ok(())
    }

    /// The transaction the last frame describes did not commit: its frame is
    /// wiped (so a replay does not apply it) and its place and number are
    /// taken by the next one. If the wipe fails the log is retired: the store
    /// must be reopened, and the replay then decides what is durable.
    pub(crate) fn retract(&mut self) {
        let Some(at) = self.last.take() else { return };
        let wiped = self
            .file
            .write_all_at(&[0; HEADER], at)
            .and_then(|()| self.file.sync_data());
        if wiped.is_err() {
            self.retired = true;
            return;
        }
        self.end = at;
        self.next -= 1;
    }

    /// A durable redb commit now holds every frame: the log starts again.
    pub(crate) fn checkpointed(&mut self) {
        self.last = None;
        self.end = 0;
        self.durable_below = self.next;
    }

    /// The frame sequence number a checkpoint records as applied.
    pub(crate) fn applied(&self) -> u64 {
        self.next - 1
    }

    /// Whether frames were written since the last durable redb commit.
    pub(crate) fn has_undurable_frames(&self) -> bool {
        self.next > self.durable_below
    }

    /// No frame is written to this log any more (its database was closed).
    pub(crate) fn retire(&mut self) {
        self.retired = true;
    }

    /// Removes the log's file: every frame is durable in redb.
    pub(crate) fn remove(&mut self) -> io::Result<()> {
        self.retired = true;
        std::fs::remove_file(&self.path)
    }
}

/// Stores `applied` as the last frame the transaction's state holds.
pub(crate) fn record_applied(txn: &WriteTransaction, applied: u64) -> Result<(), RedbError> {
    let mut meta = txn.open_table(META)?;
    meta.insert(META_WAL_APPLIED, applied.to_le_bytes().as_slice())?;
    Ok(())
}

/// The last frame the database's durable state holds (0: none).
pub(crate) fn applied_in(db: &Database) -> Result<u64, RedbError> {
    let read = db.begin_read()?;
    Ok(u64_in(&read.open_table(META)?, META_WAL_APPLIED)?)
}

/// One frame read back.
struct Frame<'a> {
    seq: u64,
    payload: &'a [u8],
}

/// The frames at the start of `log` with consecutive sequence numbers and
/// valid checksums.
fn frames(log: &[u8]) -> Vec<Frame<'_>> {
    let mut found: Vec<Frame<'_>> = Vec::new();
    let mut rest = log;
    while let Some((head, after)) = rest.split_first_chunk::<HEADER>() {
        let (summed, sum) = head.split_at(16);
        let Some((magic, mut fields)) = summed.split_first_chunk::<4>() else {
            break;
        };
        let (Some(len), Some(seq)) = (take_u32(&mut fields), take_u64(&mut fields)) else {
            break;
        };
        if magic != MAGIC {
            break;
        }
        let len = len as usize;
        let Some((payload, after)) = after.split_at_checked(len) else {
            break;
        };
        if checksum(summed, payload) != sum {
            break;
        }
        if found.last().is_some_and(|last| last.seq + 1 != seq) {
            break;
        }
        found.push(Frame { seq, payload });
        rest = after;
    }
    found
}

/// Applies the frames of the store at `db_path`'s log that `db`'s durable
/// state lacks, in one durable transaction, then removes the log. No log, or
/// nothing to apply: nothing is written.
pub(crate) fn replay(db_path: &Path, db: &Database) -> Result<(), OpenError> {
    let path = path_of(db_path);
    let log = match std::fs::read(&path) {
        Ok(log) => log,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(OpenError::Io(e)),
    };
    let applied = applied_in(db).map_err(|e| damaged(&path, e))?;
    let frames = frames(&log);
    let missing: Vec<&Frame<'_>> = frames.iter().filter(|f| f.seq > applied).collect();
    if let Some(first) = missing.first()
        && first.seq != applied + 1
    {
        return Err(OpenError::WriteAheadLog {
            path,
            detail: format!(
                "the store holds frames up to {applied}, but the log's next frame is {}: \
                 frames are missing",
                first.seq
            ),
        });
    }
    if let Some(last) = missing.last() {
        let apply = || -> Result<(), RedbError> {
            let mut txn = db.begin_write()?;
            txn.set_durability(Durability::Immediate)?;
            {
                let mut tables = Tables::open(&txn)?;
                for frame in &missing {
                    apply_frame(&txn, &mut tables, frame)?;
                }
                tables.flush()?;
            }
            record_applied(&txn, last.seq)?;
            txn.commit()?;
            Ok(())
        };
        apply().map_err(|e| damaged(&path, e))?;
        tracing::info!(
            frames = missing.len(),
            through = last.seq,
            log = %path.display(),
            "applied the store's write-ahead log"
        );
    }
    // Everything the log held is durable in redb now; a crash before this
    // removal leaves frames a later replay skips.
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(OpenError::Io(e)),
        _ => Ok(()),
    }
}

fn damaged(path: &Path, error: RedbError) -> OpenError {
    match error {
        RedbError::Open(e) => e,
        RedbError::Redb(redb::Error::Io(e)) => OpenError::Io(e),
        other => OpenError::WriteAheadLog {
            path: path.to_owned(),
            detail: other.to_string(),
        },
    }
}

/// Applies one frame's entries.
fn apply_frame(
    txn: &WriteTransaction,
    tables: &mut Tables<'_>,
    frame: &Frame<'_>,
) -> Result<(), RedbError> {
    apply_payload(txn, tables, frame.payload, || {
        format!("write-ahead log frame {}", frame.seq)
    })
}

/// Writes `effects` again, in order, in `txn`: the groups a transaction
/// carried (see `group_commit.rs`) when it had to be aborted.
pub(crate) fn apply_effects(txn: &WriteTransaction, effects: &[Effects]) -> Result<(), RedbError> {
    let mut tables = Tables::open(txn)?;
    for (n, one) in effects.iter().enumerate() {
        apply_payload(txn, &mut tables, &one.0, || {
            format!("the writes of carried group {n}")
        })?;
    }
    tables.flush()
}

/// Applies a payload's entries; `source` names it in an error.
fn apply_payload(
    txn: &WriteTransaction,
    tables: &mut Tables<'_>,
    payload: &[u8],
    source: impl Fn() -> String,
) -> Result<(), RedbError> {
    for entry in entries(payload) {
        let entry = entry.map_err(|what| RedbError::Corrupt {
            detail: format!("{}: {what}", source()),
        })?;
        match entry {
            Entry::Put(id, value) => tables.put_value(id, value)?,
            Entry::Remove(id) => tables.remove_id(id)?,
            Entry::Floors { token, version } => {
                super::records::Floors { token, version }.write(txn)?;
            }
        }
    }
    Ok(())
}

/// One entry of a payload.
enum Entry<'a> {
    Put(&'a [u8], &'a [u8]),
    Remove(&'a [u8]),
    Floors { token: u64, version: u64 },
}

/// The entries of `payload`, in order; an entry that cannot be read ends
/// them with what is wrong with it.
fn entries(payload: &[u8]) -> impl Iterator<Item = Result<Entry<'_>, String>> {
    let mut rest = payload;
    std::iter::from_fn(move || {
        let (&tag, after) = rest.split_first()?;
        rest = after;
        let cut = |what: &str| Some(Err(format!("{what} is cut short")));
        let entry = match tag {
            PUT => {
                let Some(id) = take_bytes(&mut rest) else {
                    return cut("a put's id");
                };
                let Some(value) = take_bytes(&mut rest) else {
                    return cut("a put's value");
                };
                Entry::Put(id, value)
            }
            REMOVE => {
                let Some(id) = take_bytes(&mut rest) else {
                    return cut("a remove's id");
                };
                Entry::Remove(id)
            }
            FLOORS => {
                let (Some(token), Some(version)) = (take_u64(&mut rest), take_u64(&mut rest))
                else {
                    return cut("the floors");
                };
                Entry::Floors { token, version }
            }
            other => {
                rest = &[];
                return Some(Err(format!("unknown entry tag {other}")));
            }
        };
        Some(Ok(entry))
    })
}

fn take_u64(rest: &mut &[u8]) -> Option<u64> {
    let (value, after) = rest.split_first_chunk::<8>()?;
    *rest = after;
    Some(u64::from_le_bytes(*value))
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (value, after) = rest.split_first_chunk::<4>()?;
    *rest = after;
    Some(u32::from_le_bytes(*value))
}

fn take_bytes<'a>(rest: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = take_u32(rest)? as usize;
    let (bytes, after) = rest.split_at_checked(len)?;
    *rest = after;
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use idemkit_core::machine::Policy;
    use idemkit_core::record::{EffectKind, StateName, StoredResponse};
    use idemkit_core::{Fingerprint, IdempotencyKey, Scope};

    use super::*;
    use crate::adapters::redb::db::Handle;
    use crate::adapters::redb::{FileOptions, RedbAdapter};
    use crate::store::{Claim, ClaimError, Store};

    fn scope() -> Scope {
        Scope::new("acme", "charge").unwrap()
    }

    fn claim(store: &Store, key: &str) -> Result<Claim, ClaimError> {
        store.claim(
            &scope(),
            &IdempotencyKey::new(key).unwrap(),
            Fingerprint::from_bytes([3; 32]),
            "w",
            &Policy::default().with_effect(EffectKind::External),
        )
    }

    /// Claims and completes `key`: two acknowledged writes.
    fn complete(store: &Store, key: &str) {
        match claim(store, key).unwrap() {
            Claim::Execute(guard) => guard
                .complete(StoredResponse::new(201, key.as_bytes().to_vec()))
                .unwrap(),
            other => panic!("expected Execute, got {other:?}"),
        }
    }

    fn state_of(store: &Store, key: &str) -> Option<StateName> {
        store
            .get(&scope(), &IdempotencyKey::new(key).unwrap())
            .unwrap()
            .map(|record| record.state.name())
    }

    fn wal_of(adapter: &RedbAdapter) -> Arc<Mutex<Wal>> {
        match &adapter.handle {
            Handle::Open(owned) => owned.wal().expect("a file kept open has a log"),
            Handle::PerTransaction { .. } => panic!("not a file kept open"),
        }
    }

    /// Copies the store file, and its log if `with_log`, as a crash would
    /// leave them: what the disk holds while the process runs.
    fn crash_image(from: &Path, to: &Path, with_log: bool) {
        std::fs::copy(from, to).unwrap();
        if with_log {
            std::fs::copy(path_of(from), path_of(to)).unwrap();
        }
    }

    fn open(path: &Path) -> (Arc<RedbAdapter>, Store) {
        let adapter = Arc::new(RedbAdapter::open_with(path, FileOptions::default()).unwrap());
        let store = Store::new(adapter.clone());
        (adapter, store)
    }

    /// A new store file `s.redb` in a directory of its own, kept open.
    fn fresh() -> (tempfile::TempDir, PathBuf, Arc<RedbAdapter>, Store) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let (adapter, store) = open(&path);
        (dir, path, adapter, store)
    }

    /// The record a fresh claim of the body `fingerprint` writes `ms` after a
    /// fixed instant, its token above `token_floor`.
    fn claimed(fingerprint: u8, ms: u64, token_floor: u64) -> idemkit_core::record::Record {
        let request = idemkit_core::machine::ClaimRequest {
            fingerprint: Fingerprint::from_bytes([fingerprint; 32]).into(),
            owner: "w".into(),
        };
        let at = idemkit_core::UnixMillis::from_millis(1_700_000_000_000 + ms);
        idemkit_core::machine::claim_above(None, &request, &Policy::default(), at, token_floor)
            .write
            .unwrap()
    }

    /// The log's frames are written and synced while the group commits: their
    /// time is part of the commit's.
    #[test]
    fn logging_is_counted_within_committing() {
        let (_dir, _path, adapter, store) = fresh();
        complete(&store, "a");
        let stats = adapter.commit_stats();
        assert_eq!(stats.logged, 2, "{stats:?}");
        assert!(stats.logging > std::time::Duration::ZERO, "{stats:?}");
        assert!(stats.logging <= stats.committing, "{stats:?}");
    }

    #[test]
    fn an_acknowledged_write_is_in_the_log_before_redb_holds_it_durably() {
        let (dir, path, adapter, store) = fresh();
        complete(&store, "a");
        let stats = adapter.commit_stats();
        assert_eq!(
            stats.logged, 2,
            "claim and completion went through the log: {stats:?}"
        );

        // The redb file alone, as a crash leaves it now: the writes are not in it.
        let alone = dir.path().join("alone.redb");
        crash_image(&path, &alone, false);
        let (_, reopened) = open(&alone);
        assert_eq!(state_of(&reopened, "a"), None);

        // With its log: every acknowledged write is there, and the log is gone.
        let whole = dir.path().join("whole.redb");
        crash_image(&path, &whole, true);
        let (_, reopened) = open(&whole);
        assert_eq!(state_of(&reopened, "a"), Some(StateName::Completed));
        assert!(reopened.verify().unwrap().problems.is_empty());
        assert_eq!(
            reopened.adapter().bytes_on_disk().unwrap(),
            std::fs::metadata(&whole).ok().map(|m| m.len()),
            "the applied log was removed and a new one is empty"
        );
        drop(store);
    }

    #[test]
    fn a_failed_log_write_acknowledges_nothing_and_the_reopen_applies_the_log() {
        let (dir, path, adapter, store) = fresh();
        complete(&store, "before");
        let first_log = wal_of(&adapter);
        first_log.lock().unwrap().fail_next_append = true;
        let failed = claim(&store, "during").map(drop).unwrap_err().to_string();
        assert!(failed.contains("write-ahead log"), "{failed}");
        // Nothing of the failed claim is visible.
        assert_eq!(state_of(&store, "during"), None);

        // The next write reopens the database, which applies the log first:
        // what was acknowledged is kept, and the refused claim runs now.
        complete(&store, "during");
        assert!(store.health().is_writable());
        assert!(
            !Arc::ptr_eq(&first_log, &wal_of(&adapter)),
            "the database was reopened, with a new log"
        );
        assert_eq!(state_of(&store, "before"), Some(StateName::Completed));
        assert_eq!(state_of(&store, "during"), Some(StateName::Completed));
        assert!(store.verify().unwrap().problems.is_empty());

        // And the same after a crash at this point.
        let image = dir.path().join("image.redb");
        crash_image(&path, &image, true);
        let (_, reopened) = open(&image);
        assert_eq!(state_of(&reopened, "before"), Some(StateName::Completed));
        assert_eq!(state_of(&reopened, "during"), Some(StateName::Completed));
    }

    #[test]
    fn a_local_write_commits_durably_in_redb_and_the_log_starts_again() {
        let (dir, path, adapter, store) = fresh();
        complete(&store, "a");
        const MINE: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("mine");
        let local: crate::adapters::redb::LocalWrites = Arc::new(Mutex::new(
            |txn: &redb::WriteTransaction| -> Result<(), RedbError> {
                txn.open_table(MINE)?.insert("n", 1)?;
                Ok(())
            },
        ));
        adapter.write_local(&local).unwrap();
        let stats = adapter.commit_stats();
        assert_eq!((stats.commits, stats.logged), (3, 2), "{stats:?}");
        assert_eq!(wal_of(&adapter).lock().unwrap().end, 0);

        // The redb file alone now holds everything: the local write and the
        // logged ones before it.
        let alone = dir.path().join("alone.redb");
        crash_image(&path, &alone, false);
        let (image, reopened) = open(&alone);
        assert_eq!(state_of(&reopened, "a"), Some(StateName::Completed));
        let n = image
            .read_local(|txn| {
                txn.open_table(MINE)
                    .unwrap()
                    .get("n")
                    .unwrap()
                    .map(|v| v.value())
            })
            .unwrap();
        assert_eq!(n, Some(1));
    }

    #[test]
    fn a_durable_commit_says_which_frames_it_holds_so_a_reopen_never_applies_them_again() {
        let (dir, path, adapter, store) = fresh();
        // The claim goes through the log as frame 1.
        let Claim::Execute(guard) = claim(&store, "a").unwrap() else {
            panic!("a new key executes")
        };
        // A completion too large for a frame commits durably in redb and the
        // log starts again, but the claim's frame still sits at its first byte.
        guard
            .complete(StoredResponse::new(201, vec![b'x'; MAX_FRAME + 1]))
            .unwrap();
        let stats = adapter.commit_stats();
        assert_eq!((stats.commits, stats.logged), (2, 1), "{stats:?}");
        let log = std::fs::read(path_of(&path)).unwrap();
        assert_eq!(frames(&log).len(), 1, "the claim's frame is still there");

        let image = dir.path().join("image.redb");
        crash_image(&path, &image, true);
        let (_, reopened) = open(&image);
        assert_eq!(
            state_of(&reopened, "a"),
            Some(StateName::Completed),
            "the claim's frame was applied again over the completion"
        );
        assert!(reopened.verify().unwrap().problems.is_empty());
        drop(store);
    }

    #[test]
    fn a_full_log_starts_again_after_a_durable_commit_and_a_crash_loses_nothing() {
        let (dir, path, adapter, store) = fresh();
        // Responses of a third of the largest frame: a few fill the log.
        let body = vec![b'x'; MAX_FRAME / 3];
        let frames_per_log = CAPACITY as usize / body.len();
        let keys: Vec<String> = (0..frames_per_log + 4).map(|i| format!("k{i}")).collect();
        for key in &keys {
            match claim(&store, key).unwrap() {
                Claim::Execute(guard) => guard
                    .complete(StoredResponse::new(201, body.clone()))
                    .unwrap(),
                other => panic!("expected Execute, got {other:?}"),
            }
        }
        let stats = adapter.commit_stats();
        assert!(
            stats.logged < stats.commits && stats.logged > 0,
            "some commits went through the log and at least one was a checkpoint: {stats:?}"
        );

        let image = dir.path().join("image.redb");
        crash_image(&path, &image, true);
        let (_, reopened) = open(&image);
        for key in &keys {
            assert_eq!(
                state_of(&reopened, key),
                Some(StateName::Completed),
                "{key}"
            );
        }
        assert!(reopened.verify().unwrap().problems.is_empty());
    }

    #[test]
    fn a_clean_close_leaves_no_log_and_the_file_holds_everything() {
        let (_dir, path, adapter, store) = fresh();
        complete(&store, "a");
        assert!(path_of(&path).exists());
        drop(store);
        drop(adapter);
        assert!(!path_of(&path).exists(), "the log was removed at close");
        let (_, reopened) = open(&path);
        assert_eq!(state_of(&reopened, "a"), Some(StateName::Completed));
    }

    #[test]
    fn a_log_that_skips_frames_refuses_the_open_and_is_left_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        drop(open(&path));
        // Frame 5 where the store holds none: frames 1 to 4 are missing.
        let mut wal = Wal::create(&path, 4).unwrap();
        wal.append(&effects(9)).unwrap();
        let refused = RedbAdapter::open_with(&path, FileOptions::default()).unwrap_err();
        let text = refused.to_string();
        assert!(
            matches!(refused, OpenError::WriteAheadLog { .. }),
            "{refused:?}"
        );
        assert!(
            text.contains("frames up to 0") && text.contains("next frame is 5"),
            "{text}"
        );
        assert!(path_of(&path).exists());
    }

    #[test]
    fn without_the_log_every_write_commits_durably_in_redb() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.redb");
        let adapter = Arc::new(
            RedbAdapter::open_with(&path, FileOptions::default().write_ahead_log(false)).unwrap(),
        );
        let store = Store::new(adapter.clone());
        complete(&store, "a");
        assert!(!path_of(&path).exists());
        let stats = adapter.commit_stats();
        assert_eq!((stats.commits, stats.logged), (2, 0), "{stats:?}");
        let alone = dir.path().join("alone.redb");
        crash_image(&path, &alone, false);
        let (_, reopened) = open(&alone);
        assert_eq!(state_of(&reopened, "a"), Some(StateName::Completed));
    }

    fn effects(n: u8) -> Effects {
        let mut e = Effects::default();
        e.put(&[n; 32], &[n; 40]);
        e
    }

    fn log_with(frames: &[(u64, Effects)]) -> Vec<u8> {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.redb");
        let mut wal = Wal::create(&db, frames.first().map_or(0, |f| f.0 - 1)).unwrap();
        for (_, e) in frames {
            wal.append(e).unwrap();
        }
        let mut bytes = std::fs::read(path_of(&db)).unwrap();
        bytes.truncate(usize::try_from(wal.end).unwrap());
        bytes
    }

    #[test]
    fn frames_read_back_in_order_up_to_the_first_bad_one() {
        let log = log_with(&[(1, effects(1)), (2, effects(2)), (3, effects(3))]);
        let seqs: Vec<u64> = frames(&log).iter().map(|f| f.seq).collect();
        assert_eq!(seqs, [1, 2, 3]);

        // A torn last frame: its payload is cut short.
        let torn = &log[..log.len() - 5];
        assert_eq!(frames(torn).len(), 2);

        // A changed byte in the second frame's payload ends the log there.
        let mut changed = log.clone();
        let second = HEADER + frames(&log)[0].payload.len();
        changed[second + HEADER + 3] ^= 1;
        assert_eq!(frames(&changed).len(), 1);
    }

    #[test]
    fn a_frame_that_does_not_follow_its_predecessor_ends_the_log() {
        // Frames 5 and 6 written after a restart over an older log whose
        // next frame happened to start right after them.
        let mut log = log_with(&[(5, effects(5)), (6, effects(6))]);
        log.extend_from_slice(&log_with(&[(2, effects(2))]));
        let seqs: Vec<u64> = frames(&log).iter().map(|f| f.seq).collect();
        assert_eq!(seqs, [5, 6]);
    }

    #[test]
    fn zeros_and_garbage_are_no_frames() {
        assert!(frames(&[0; 4096]).is_empty());
        assert!(frames(b"IKWL\xff\xff\xff\xff").is_empty());
        assert!(frames(&[]).is_empty());
    }

    #[test]
    fn entries_decode_as_they_were_written_and_cut_ones_are_refused() {
        let mut e = Effects::default();
        e.put(b"id-one", b"value");
        e.remove(b"id-two");
        e.floors(7, 9);
        let mut rest = &e.0[..];
        assert_eq!(rest[0], PUT);
        rest = &rest[1..];
        assert_eq!(take_bytes(&mut rest), Some(&b"id-one"[..]));
        assert_eq!(take_bytes(&mut rest), Some(&b"value"[..]));
        assert_eq!(rest[0], REMOVE);
        rest = &rest[1..];
        assert_eq!(take_bytes(&mut rest), Some(&b"id-two"[..]));
        assert_eq!(rest[0], FLOORS);
        rest = &rest[1..];
        assert_eq!(take_u64(&mut rest), Some(7));
        assert_eq!(take_u64(&mut rest), Some(9));
        assert!(rest.is_empty());
        let mut cut = &[9, 0, 0, 0, 1, 2][..];
        assert_eq!(take_bytes(&mut cut), None);
    }

    #[test]
    fn the_file_grows_in_chunks_and_a_retracted_frame_is_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("s.redb");
        let mut wal = Wal::create(&db, 0).unwrap();
        wal.append(&effects(1)).unwrap();
        assert_eq!(std::fs::metadata(path_of(&db)).unwrap().len(), CHUNK);
        wal.append(&effects(2)).unwrap();
        wal.retract();
        assert_eq!(
            wal.applied(),
            1,
            "the retracted frame's number is given again"
        );
        let log = std::fs::read(path_of(&db)).unwrap();
        assert_eq!(frames(&log).len(), 1, "the retracted frame is wiped");
        wal.append(&effects(3)).unwrap();
        let log = std::fs::read(path_of(&db)).unwrap();
        let read: Vec<u64> = frames(&log).iter().map(|f| f.seq).collect();
        assert_eq!(read, [1, 2]);
        assert_eq!(frames(&log)[1].payload, &effects(3).0[..]);
    }

    /// The token floor a delete raises is what a read reports at once (the
    /// store keeps it in memory), and what a reopen reads: from the log
    /// after a crash, from the file after a clean close.
    #[test]
    fn a_raised_token_floor_is_read_back_after_a_crash_and_a_reopen() {
        use crate::adapters::{Adapter as _, Stored};

        let (dir, path, adapter, _store) = fresh();
        let record = claimed(6, 0, 0);
        let id = scope().record_id(&IdempotencyKey::new("k").unwrap());
        let version = adapter.insert(&id, &record).unwrap().unwrap();
        let token = record.last_token.get();
        assert!(token > 0);
        assert_eq!(adapter.get(&id).unwrap().token_floor, 0);
        let read = Stored { record, version };
        assert!(adapter.delete(&id, &read).unwrap());
        assert_eq!(adapter.get(&id).unwrap().token_floor, token);

        let image = dir.path().join("image.redb");
        crash_image(&path, &image, true);
        assert_eq!(open(&image).0.get(&id).unwrap().token_floor, token);
        drop(_store);
        drop(adapter);
        assert!(!path_of(&path).exists(), "a clean close leaves no log");
        assert_eq!(open(&path).0.get(&id).unwrap().token_floor, token);
    }

    /// A store held open keeps the floors its last commit left for the next
    /// group's transaction instead of reading them again. A delete of an older
    /// record in a later group keeps the floor a delete raised before it, and a
    /// new record's version starts above every deleted one's, in the store as
    /// it runs and in a crash image.
    #[test]
    fn the_next_group_builds_on_the_floors_the_last_one_left() {
        use crate::adapters::redb::group_commit::WriteTarget as _;
        use crate::adapters::{Adapter as _, Stored};

        let (dir, path, adapter, _store) = fresh();
        let record = |ms: u64| claimed(7, ms, 0);
        let id = |key: &str| scope().record_id(&IdempotencyKey::new(key).unwrap());
        let insert = |key: &str| {
            let version = adapter.insert(&id(key), &record(0)).unwrap().unwrap();
            Stored {
                record: record(0),
                version,
            }
        };

        let older = insert("older");
        let mut moved = insert("moved");
        for ms in 1..=5 {
            let next = record(ms);
            let version = adapter
                .update(&id("moved"), &moved, &next)
                .unwrap()
                .unwrap();
            moved = Stored {
                record: next,
                version,
            };
        }
        assert!(moved.version.0 > older.version.0);
        // Each call is a group of its own: this delete raises the version floor
        // to `moved`'s version, and the store knows it without reading it...
        assert!(adapter.delete(&id("moved"), &moved).unwrap());
        let Handle::Open(owned) = &adapter.handle else {
            panic!("a file's store is held open")
        };
        let known = owned.for_write().unwrap().floors;
        assert_eq!(known.map(|f| f.version), Some(moved.version.0));
        // ...and the next group's delete of the older record leaves it there.
        assert!(adapter.delete(&id("older"), &older).unwrap());
        assert_eq!(
            owned.for_write().unwrap().floors.map(|f| f.version),
            Some(moved.version.0)
        );

        let image = dir.path().join("image.redb");
        crash_image(&path, &image, true);
        // A new record's token is above the floor, as a claim makes it.
        let above = claimed(7, 9, moved.record.last_token.get());
        let new_version =
            |adapter: &RedbAdapter| adapter.insert(&id("new"), &above).unwrap().unwrap().0;
        assert!(new_version(&adapter) > moved.version.0);
        assert!(new_version(&open(&image).0) > moved.version.0);
    }

    /// A write or delete refused because the record is there, or moved on, or
    /// absent puts the record tree back as it was (the record is written or
    /// removed before its version is compared) and logs nothing, though the
    /// transaction commits another write: the store, its indexes, the floors
    /// and a crash image with the log hold only the writes that were made.
    #[test]
    fn refused_writes_leave_the_store_and_its_log_as_they_were() {
        use crate::adapters::{Adapter as _, Stored, Version, Write};

        let (dir, path, adapter, _store) = fresh();
        let record = |ms| claimed(5, ms, 0);
        let id = |key: &str| scope().record_id(&IdempotencyKey::new(key).unwrap());

        let first = record(0);
        let version = adapter.insert(&id("k"), &first).unwrap().unwrap();
        let read = Stored {
            record: first.clone(),
            version,
        };
        let moved = adapter
            .update(&id("k"), &read, &record(7))
            .unwrap()
            .unwrap();
        let ghost = Stored {
            record: first,
            version: Version(1),
        };
        // One transaction: three refused writes, then one that is made, then
        // two refused deletes.
        let answers = adapter
            .write_all(&[
                Write::Insert(id("k"), record(5)),
                Write::Update(id("k"), read.clone(), record(9)),
                Write::Update(id("absent"), ghost.clone(), record(9)),
                Write::Insert(id("other"), record(11)),
                Write::Delete(id("k"), read),
                Write::Delete(id("absent"), ghost),
            ])
            .unwrap();
        assert_eq!(answers[..3], [None, None, None]);
        assert!(answers[3].is_some());
        assert_eq!(answers[4..], [None, None], "the deletes were refused");

        let check = |adapter: &RedbAdapter| {
            let k = adapter.get(&id("k")).unwrap().stored.unwrap();
            assert_eq!((k.record, k.version), (record(7), moved));
            assert_eq!(adapter.get(&id("absent")).unwrap().stored, None);
            assert!(adapter.get(&id("other")).unwrap().stored.is_some());
            assert_eq!(adapter.verify().unwrap(), (2, Vec::<String>::new()));
            assert_eq!(
                adapter.get(&id("k")).unwrap().token_floor,
                0,
                "a refused delete raises no floor"
            );
        };
        check(&adapter);
        let image = dir.path().join("image.redb");
        crash_image(&path, &image, true);
        check(&open(&image).0);
    }
}
