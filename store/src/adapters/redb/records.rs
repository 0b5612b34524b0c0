//! Reading and writing records with their indexes, inside one transaction.

use std::cell::Cell;

use idemkit_core::record::{Record, RecordState};
use redb::{Key, ReadableTable, Table, TableDefinition, Value, WriteTransaction};

use super::error::RedbError;
use super::tables::{
    GC_DUE, LEASE_EXPIRY, META, META_TOKEN_FLOOR, META_VERSION_FLOOR, RECORDS, UNKNOWN, split_value,
};
use super::wal::Effects;
use crate::adapters::{CorruptRecord, Stored, Version, decode_record};

/// The four data tables of one write transaction: the records, and each
/// index when first written.
///
/// redb's `open_table` looks the table up and checks its stored definition,
/// and every table opened for writing is looked up again at the commit: at
/// one write per transaction, opening the four tables took a tenth of the
/// instructions of a claim + complete. Most transactions write two indexes
/// (a claim: the lease expiry; a completion: that and the GC due time) and
/// few the third (Unknown records).
pub(crate) struct Tables<'txn> {
    txn: &'txn WriteTransaction,
    pub(crate) records: Table<'txn, &'static [u8], &'static [u8]>,
    gc_due: Option<Table<'txn, (u64, &'static [u8]), ()>>,
    lease_expiry: Option<Table<'txn, (u64, &'static [u8]), ()>>,
    unknown: Option<Table<'txn, &'static [u8], u64>>,
    /// Lease-expiry entries to remove, removed together by
    /// [`flush`](Tables::flush) before the transaction commits.
    ///
    /// The lease index behaves as a queue: a claim adds an entry at its
    /// right end and the completion removes it a transaction or two later,
    /// so the leaves it removes from are committed and sparse. Removed one
    /// at a time, nearly every removal copied its leaf or merged it with a
    /// sibling (a tenth of a claim + complete's instructions at 64
    /// clients); removed in one pass, each leaf is rebuilt once per
    /// transaction.
    lease_removals: Vec<(u64, Vec<u8>)>,
    /// What was written, for the write-ahead log (`wal.rs`), when the
    /// transaction goes through it.
    effects: Option<Effects>,
}

/// `slot`'s table, opened in `txn` from `definition` if it is not yet.
fn opened<'a, 'txn, K: Key + 'static, V: Value + 'static>(
    slot: &'a mut Option<Table<'txn, K, V>>,
    txn: &'txn WriteTransaction,
    definition: TableDefinition<'static, K, V>,
) -> Result<&'a mut Table<'txn, K, V>, RedbError> {
    let table = match slot.take() {
        Some(table) => table,
        None => txn.open_table(definition)?,
    };
    Ok(slot.insert(table))
}

impl<'txn> Tables<'txn> {
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, RedbError> {
        Ok(Tables {
            txn,
            records: txn.open_table(RECORDS)?,
            gc_due: None,
            lease_expiry: None,
            unknown: None,
            lease_removals: Vec::new(),
            effects: None,
        })
    }

    /// Removes the lease-expiry entries [`unindex`](Tables::unindex) set
    /// aside, in one pass over the range they span. Must run before the
    /// transaction commits (and before anything reads the lease index in it).
    pub(crate) fn flush(&mut self) -> Result<(), RedbError> {
        let mut removals = std::mem::take(&mut self.lease_removals);
        if let [(at, id)] = removals.as_slice() {
            // One removal (a transaction of one write): a descent to it is
            // cheaper than a pass over a range.
            opened(&mut self.lease_expiry, self.txn, LEASE_EXPIRY)?.remove((*at, id.as_slice()))?;
            return Ok(());
        }
        removals.sort_unstable();
        let (Some((first_at, first_id)), Some((last_at, last_id))) =
            (removals.first(), removals.last())
        else {
            return Ok(());
        };
        let gone = |at: u64, id: &[u8]| {
            removals
                .binary_search_by(|(r_at, r_id)| (*r_at, r_id.as_slice()).cmp(&(at, id)))
                .is_ok()
        };
        opened(&mut self.lease_expiry, self.txn, LEASE_EXPIRY)?.retain_in(
            (*first_at, first_id.as_slice())..=(*last_at, last_id.as_slice()),
            |(at, id), ()| !gone(at, id),
        )?;
        Ok(())
    }

    /// Writes `new` under `id` if the record stored there now is at version
    /// `read` (`None`: if there is none), in place of that record, whose index
    /// entries are `old`, keeping the three indexes in step. `false`, with
    /// nothing written, when the stored version is another.
    ///
    /// The record is written first and the version it displaced compared
    /// after (put back when it differs): one descent of the records tree
    /// instead of a lookup and then the insert, on the path every write of a
    /// group takes one after another.
    pub(crate) fn put_if(
        &mut self,
        id: &[u8],
        read: Option<u64>,
        old: Option<&IndexEntries>,
        new: &Encoded,
    ) -> Result<bool, RedbError> {
        let displaced = {
            let previous = self.records.insert(id, new.value.as_slice())?;
            unexpected(previous.as_ref().map(|value| value.value()), read)
        };
        if let Some(unexpected) = displaced {
            match &unexpected.previous {
                Some(value) => drop(self.records.insert(id, value.as_slice())?),
                None => drop(self.records.remove(id)?),
            }
            return unexpected.refusal(id);
        }
        if let Some(old) = old {
            self.unindex(id, old)?;
        }
        if let Some(effects) = &mut self.effects {
            effects.put(id, &new.value);
        }
        self.index(id, &new.entries)?;
        Ok(true)
    }

    /// Removes the record stored under `id` if it is at version `read`, with
    /// its index entries `old`. `false`, with nothing removed, when the stored
    /// version is another or there is none.
    ///
    /// Removed first and compared after (put back when it differs), as
    /// [`put_if`](Tables::put_if) writes: one descent of the records tree.
    pub(crate) fn remove_if(
        &mut self,
        id: &[u8],
        read: u64,
        old: &IndexEntries,
    ) -> Result<bool, RedbError> {
        let displaced = {
            let previous = self.records.remove(id)?;
            unexpected(previous.as_ref().map(|value| value.value()), Some(read))
        };
        if let Some(unexpected) = displaced {
            if let Some(value) = &unexpected.previous {
                self.records.insert(id, value.as_slice())?;
            }
            return unexpected.refusal(id);
        }
        self.unindex(id, old)?;
        if let Some(effects) = &mut self.effects {
            effects.remove(id);
        }
        Ok(true)
    }

    /// Stores `value` (version + record, as [`put_if`](Tables::put_if) stores it)
    /// under `id` in place of whatever is there, keeping the indexes in step:
    /// a write-ahead log frame's put, replayed.
    pub(crate) fn put_value(&mut self, id: &[u8], value: &[u8]) -> Result<(), RedbError> {
        let new = decode(id, value)?;
        self.remove_id(id)?;
        self.records.insert(id, value)?;
        self.index(id, &IndexEntries::of(&new.record))
    }

    /// Removes whatever record is stored under `id`, with its index entries:
    /// a write-ahead log frame's remove, replayed.
    pub(crate) fn remove_id(&mut self, id: &[u8]) -> Result<(), RedbError> {
        let old = self
            .records
            .remove(id)?
            .map(|old| decode(id, old.value()))
            .transpose()?;
        if let Some(old) = old {
            self.unindex(id, &IndexEntries::of(&old.record))?;
        }
        Ok(())
    }

    fn unindex(&mut self, id: &[u8], entries: &IndexEntries) -> Result<(), RedbError> {
        if let Some(due) = entries.gc_due {
            opened(&mut self.gc_due, self.txn, GC_DUE)?.remove((due, id))?;
        }
        if let Some(expires) = entries.lease_expires {
            self.lease_removals.push((expires, id.to_vec()));
        }
        if entries.unknown_since.is_some() {
            opened(&mut self.unknown, self.txn, UNKNOWN)?.remove(id)?;
        }
        Ok(())
    }

    fn index(&mut self, id: &[u8], entries: &IndexEntries) -> Result<(), RedbError> {
        if let Some(due) = entries.gc_due {
            opened(&mut self.gc_due, self.txn, GC_DUE)?.insert((due, id), ())?;
        }
        if let Some(expires) = entries.lease_expires {
            // An entry set aside for removal earlier in the transaction and
            // written again stays.
            self.lease_removals
                .retain(|(at, removed)| (*at, removed.as_slice()) != (expires, id));
            opened(&mut self.lease_expiry, self.txn, LEASE_EXPIRY)?.insert((expires, id), ())?;
        }
        if let Some(since) = entries.unknown_since {
            opened(&mut self.unknown, self.txn, UNKNOWN)?.insert(id, since)?;
        }
        Ok(())
    }
}

/// The record a conditional write displaced when it was not the one expected:
/// the value to put back (`None`: there was none), and whether that value was
/// too short to hold a version.
struct Unexpected {
    previous: Option<Vec<u8>>,
    unreadable: bool,
}

impl Unexpected {
    /// The write's answer once the value is back: refused, or an error for a
    /// value that holds no version.
    fn refusal(&self, id: &[u8]) -> Result<bool, RedbError> {
        match self.unreadable {
            true => Err(too_short(id).into()),
            false => Ok(false),
        }
    }
}

/// `None` when `previous` (the value a write displaced) is at version `read`
/// (`None`: when there was no value), else what to put back.
fn unexpected(previous: Option<&[u8]>, read: Option<u64>) -> Option<Unexpected> {
    let found = previous.map(|value| split_value(value).map(|(version, _)| version));
    match (found, read) {
        (None, None) => None,
        (Some(Some(found)), Some(read)) if found == read => None,
        (found, _) => Some(Unexpected {
            previous: previous.map(<[u8]>::to_vec),
            unreadable: found == Some(None),
        }),
    }
}

/// A record's entries in the three indexes (Unix ms), derived from it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexEntries {
    gc_due: Option<u64>,
    lease_expires: Option<u64>,
    unknown_since: Option<u64>,
}

impl IndexEntries {
    pub(crate) fn of(record: &Record) -> Self {
        IndexEntries {
            gc_due: record.gc_due_at().map(|at| at.as_millis()),
            lease_expires: record.lease_expires_at().map(|at| at.as_millis()),
            unknown_since: match &record.state {
                RecordState::Unknown { since, .. } => Some(since.as_millis()),
                _ => None,
            },
        }
    }
}

/// A record as [`Tables::put_if`] stores it: its value (the version, then the
/// encoded record) and its index entries.
///
/// Made by the caller before its write joins a group: the group's leader runs
/// every write of the group one after another, so what it does not have to do
/// (encoding, deriving the entries) the callers do at the same time, each on
/// its own thread.
#[derive(Clone, Debug)]
pub(crate) struct Encoded {
    value: Vec<u8>,
    entries: IndexEntries,
}

impl Encoded {
    pub(crate) fn new(version: u64, record: &Record) -> Self {
        let mut value = Vec::with_capacity(8 + record.encoded_len());
        value.extend_from_slice(&version.to_le_bytes());
        record.encode_into(&mut value);
        Encoded {
            value,
            entries: IndexEntries::of(record),
        }
    }

    /// Stores it at `version` instead (a new record's first version is known
    /// only in the transaction).
    pub(crate) fn set_version(&mut self, version: u64) {
        if let Some((stored, _)) = self.value.split_first_chunk_mut::<8>() {
            *stored = version.to_le_bytes();
        }
    }
}

/// One write transaction of the store and idemkit's tables in it, opened once
/// for every operation that runs in the transaction.
///
/// Group commit runs up to `MAX_BATCH` operations in one transaction; opening
/// the four tables and reading the floors for each of them cost about a fifth
/// of the instructions of a claim + complete at 64 clients (callgrind,
/// `benches/callgrind/run.sh`), redb's `open_table` checking each table's
/// stored definition every time. The floors raised by a delete stay in memory
/// until [`InTxn::close`] writes them, once, before the commit; later
/// operations of the transaction see them raised, as they saw them in the meta
/// table before.
pub(crate) struct InTxn<'txn> {
    txn: &'txn WriteTransaction,
    opened: Option<Opened<'txn>>,
    /// Whether the writes to idemkit's tables are collected for the
    /// write-ahead log.
    logged: bool,
    /// Whether the transaction was handed out for other tables' writes (a
    /// Local completion's): the log cannot describe those, so it must be
    /// committed durably in redb.
    handed_out: Cell<bool>,
    /// The floors of the commit this transaction builds on, when the store
    /// knows them exactly (see [`knowing`](InTxn::knowing)); else they are
    /// read from the meta table.
    known: Option<Floors>,
}

struct Opened<'txn> {
    tables: Tables<'txn>,
    floors: Floors,
    read: Floors,
}

impl<'txn> InTxn<'txn> {
    pub(crate) fn new(txn: &'txn WriteTransaction) -> Self {
        InTxn {
            txn,
            opened: None,
            logged: false,
            handed_out: Cell::new(false),
            known: None,
        }
    }

    /// Takes `floors`, when given, as the floors the transaction begins with
    /// instead of reading them from the meta table. They must be exactly what
    /// the last commit of its database left: lower ones would let a delete
    /// write a lower floor than the one stored, and fencing tokens repeat.
    pub(crate) fn knowing(self, floors: Option<Floors>) -> Self {
        InTxn {
            known: floors,
            ..self
        }
    }

    /// Like [`new`](InTxn::new), collecting what is written to idemkit's
    /// tables for the write-ahead log ([`close`](InTxn::close) returns it).
    pub(crate) fn logged(txn: &'txn WriteTransaction) -> Self {
        InTxn {
            logged: true,
            ..InTxn::new(txn)
        }
    }

    /// The transaction itself (for the caller's own tables: local writes).
    /// idemkit's tables may be open in it, so a closure must not open them.
    pub(crate) fn txn(&self) -> &'txn WriteTransaction {
        self.handed_out.set(true);
        self.txn
    }

    /// idemkit's tables and the floors, opened and read on first use.
    pub(crate) fn tables(&mut self) -> Result<(&mut Tables<'txn>, &mut Floors), RedbError> {
        let opened = match self.opened.take() {
            Some(opened) => opened,
            None => {
                let read = match self.known {
                    Some(known) => known,
                    None => Floors::read(self.txn)?,
                };
                let mut tables = Tables::open(self.txn)?;
                if self.logged {
                    tables.effects = Some(Effects::default());
                }
                Opened {
                    tables,
                    floors: read,
                    read,
                }
            }
        };
        let opened = self.opened.insert(opened);
        Ok((&mut opened.tables, &mut opened.floors))
    }

    /// Closes the tables and writes the floors if a delete raised them: before
    /// the transaction commits.
    pub(crate) fn close(self) -> Result<Closed, RedbError> {
        let loggable = self.logged && !self.handed_out.get();
        let Some(Opened {
            mut tables,
            floors,
            read,
        }) = self.opened
        else {
            return Ok(Closed {
                effects: loggable.then(Effects::default),
                token_floor: None,
                floors: self.known,
            });
        };
        tables.flush()?;
        let mut effects = tables.effects.take();
        drop(tables);
        let raised = floors != read;
        if raised {
            floors.write(self.txn)?;
            if let Some(effects) = &mut effects {
                effects.floors(floors.token, floors.version);
            }
        }
        Ok(Closed {
            effects: effects.filter(|_| loggable),
            token_floor: raised.then_some(floors.token),
            floors: Some(floors),
        })
    }
}

/// What [`InTxn::close`] leaves for the commit.
pub(crate) struct Closed {
    /// For a logged transaction, what it wrote to idemkit's tables; `None`
    /// when the log cannot describe the transaction (other tables were
    /// written) or it is not logged.
    pub(crate) effects: Option<Effects>,
    /// The token floor the transaction writes, when a delete raised it.
    pub(crate) token_floor: Option<u64>,
    /// The floors the transaction leaves, when they are known (it read them,
    /// or was told them and left them as they were).
    pub(crate) floors: Option<Floors>,
}

/// The two floors a delete raises (see [`META_TOKEN_FLOOR`] and
/// [`META_VERSION_FLOOR`]): 0 until GC deleted a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Floors {
    pub(crate) token: u64,
    pub(crate) version: u64,
}

impl Floors {
    pub(crate) fn read(txn: &WriteTransaction) -> Result<Floors, RedbError> {
        let meta = txn.open_table(META)?;
        Ok(Floors {
            token: u64_in(&meta, META_TOKEN_FLOOR)?,
            version: u64_in(&meta, META_VERSION_FLOOR)?,
        })
    }

    pub(crate) fn write(&self, txn: &WriteTransaction) -> Result<(), RedbError> {
        let mut meta = txn.open_table(META)?;
        meta.insert(META_TOKEN_FLOOR, self.token.to_le_bytes().as_slice())?;
        meta.insert(META_VERSION_FLOOR, self.version.to_le_bytes().as_slice())?;
        Ok(())
    }
}

/// The token floor as stored in the meta table (of a read or a write
/// transaction).
pub(crate) fn token_floor_in(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<u64, redb::StorageError> {
    u64_in(meta, META_TOKEN_FLOOR)
}

/// A u64 (LE) meta value; absent reads as 0.
pub(crate) fn u64_in(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    key: &str,
) -> Result<u64, redb::StorageError> {
    let value = meta.get(key)?;
    Ok(value
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.value()).ok())
        .map_or(0, u64::from_le_bytes))
}

/// Decodes the record stored under `id` in `table`, with its version.
pub(crate) fn load_from(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: &[u8],
) -> Result<Option<Stored>, RedbError> {
    match table.get(id)? {
        None => Ok(None),
        Some(value) => Ok(Some(decode(id, value.value())?)),
    }
}

/// Decodes a stored value (version + record); a failure names the record.
pub(crate) fn decode(id: &[u8], value: &[u8]) -> Result<Stored, CorruptRecord> {
    let (version, bytes) = split_value(value).ok_or_else(|| too_short(id))?;
    Ok(Stored {
        record: decode_record(id, bytes)?,
        version: Version(version),
    })
}

fn too_short(id: &[u8]) -> CorruptRecord {
    CorruptRecord::of(id, "the stored value is shorter than its 8-byte version")
}
