//! Reading and writing records with their indexes, inside one transaction.

use idemkit_core::record::{Record, RecordState};
use idemkit_core::{LogRef, RecordId};
use redb::{ReadableTable, Table, WriteTransaction};

use super::error::StorageError;
use super::tables::{GC_DUE, LEASE_EXPIRY, META, META_TOKEN_FLOOR, RECORDS, UNKNOWN};

/// The four data tables of one write transaction.
pub(crate) struct Tables<'txn> {
    pub(crate) records: Table<'txn, &'static [u8], &'static [u8]>,
    pub(crate) gc_due: Table<'txn, (u64, &'static [u8]), ()>,
    pub(crate) lease_expiry: Table<'txn, (u64, &'static [u8]), ()>,
    pub(crate) unknown: Table<'txn, &'static [u8], u64>,
}

impl<'txn> Tables<'txn> {
    pub(crate) fn open(txn: &'txn WriteTransaction) -> Result<Self, StorageError> {
        Ok(Tables {
            records: txn.open_table(RECORDS)?,
            gc_due: txn.open_table(GC_DUE)?,
            lease_expiry: txn.open_table(LEASE_EXPIRY)?,
            unknown: txn.open_table(UNKNOWN)?,
        })
    }

    /// Replaces the record under `id` (`old` is the record stored there now,
    /// as the caller read it) with `new`, or deletes it when `new` is `None`,
    /// keeping the three indexes in step.
    pub(crate) fn put(
        &mut self,
        id: &[u8],
        old: Option<&Record>,
        new: Option<&Record>,
    ) -> Result<(), StorageError> {
        if let Some(old) = old {
            self.unindex(id, old)?;
        }
        match new {
            Some(new) => {
                let bytes = new.encode();
                self.records.insert(id, bytes.as_slice())?;
                self.index(id, new)?;
            }
            None => {
                self.records.remove(id)?;
            }
        }
        Ok(())
    }

    fn unindex(&mut self, id: &[u8], record: &Record) -> Result<(), StorageError> {
        if let Some(due) = record.gc_due_at() {
            self.gc_due.remove((due.as_millis(), id))?;
        }
        if let Some(expires) = record.lease_expires_at() {
            self.lease_expiry.remove((expires.as_millis(), id))?;
        }
        if matches!(record.state, RecordState::Unknown { .. }) {
            self.unknown.remove(id)?;
        }
        Ok(())
    }

    fn index(&mut self, id: &[u8], record: &Record) -> Result<(), StorageError> {
        if let Some(due) = record.gc_due_at() {
            self.gc_due.insert((due.as_millis(), id), ())?;
        }
        if let Some(expires) = record.lease_expires_at() {
            self.lease_expiry.insert((expires.as_millis(), id), ())?;
        }
        if let RecordState::Unknown { since, .. } = &record.state {
            self.unknown.insert(id, since.as_millis())?;
        }
        Ok(())
    }
}

/// The store's token floor (see [`META_TOKEN_FLOOR`]); 0 until GC deleted a record.
pub(crate) fn token_floor(txn: &WriteTransaction) -> Result<u64, StorageError> {
    token_floor_in(&txn.open_table(META)?)
}

/// The token floor as stored in the meta table (of a read or a write
/// transaction).
pub(crate) fn token_floor_in(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<u64, StorageError> {
    let floor = meta.get(META_TOKEN_FLOOR)?;
    Ok(floor
        .and_then(|bytes| <[u8; 8]>::try_from(bytes.value()).ok())
        .map_or(0, u64::from_le_bytes))
}

/// Raises the store's token floor to at least `to`, in `txn`.
pub(crate) fn raise_token_floor(txn: &WriteTransaction, to: u64) -> Result<(), StorageError> {
    if to > token_floor(txn)? {
        let mut meta = txn.open_table(META)?;
        meta.insert(META_TOKEN_FLOOR, to.to_le_bytes().as_slice())?;
    }
    Ok(())
}

/// Decodes the record stored under `id` in `table`.
pub(crate) fn load_from(
    table: &impl ReadableTable<&'static [u8], &'static [u8]>,
    id: &[u8],
) -> Result<Option<Record>, StorageError> {
    match table.get(id)? {
        None => Ok(None),
        Some(bytes) => decode(id, bytes.value()).map(Some),
    }
}

/// Decodes stored record bytes; a failure names the record's log reference.
pub(crate) fn decode(id: &[u8], bytes: &[u8]) -> Result<Record, StorageError> {
    Record::decode(bytes).map_err(|e| StorageError::CorruptRecord {
        log_ref: log_ref_of(id),
        detail: e.to_string(),
    })
}

/// The log reference of stored id bytes (the id's digest; safe to log), or
/// `None` when the id bytes themselves do not decode.
pub(crate) fn log_ref_of(id: &[u8]) -> Option<LogRef> {
    RecordId::decode(id)
        .ok()
        .map(|(scope, key)| scope.record_id(&key).log_ref())
}
