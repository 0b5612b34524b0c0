//! Operator and maintenance operations: get, list, resolve, recover, GC, stats, verify.

use std::collections::BTreeMap;

use idemkit_core::machine::{self, GcAction, Policy, Resolution};
use idemkit_core::record::{Record, RecordState, StateName};
use idemkit_core::{IdempotencyKey, LogRef, RecordId, Scope, UnixMillis};
use redb::{ReadableTable, ReadableTableMetadata};

use super::Store;
use super::claim::ExecutionGuard;
use super::error::{OperatorError, QueryError, StorageError, TxError};
use super::records::{Tables, decode, load_from, log_ref_of, raise_token_floor};
use super::tables::{GC_DUE, LEASE_EXPIRY, RECORDS, UNKNOWN};

/// A record with the scope and key it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRecord {
    /// Tenant and operation.
    pub scope: Scope,
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// The record.
    pub record: Record,
}

impl ListedRecord {
    /// The record's log reference.
    #[must_use]
    pub fn log_ref(&self) -> LogRef {
        self.scope.record_id(&self.key).log_ref()
    }
}

/// What one [`Store::gc`] batch did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Completed records whose response body was dropped (replay window over).
    pub pruned: u64,
    /// Completed or Released records deleted (record window over).
    pub deleted: u64,
    /// Whether more records are due: call again.
    pub more: bool,
    /// Due records whose stored bytes do not decode: left untouched (never
    /// deleted: their state cannot be read) and skipped, so GC keeps going.
    /// `verify` names them; an operator repairs or removes them.
    pub undecodable: u64,
}

/// What one [`Store::import`] call did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    /// Records written.
    pub imported: u64,
    /// Records left alone because the store already held their scope and key.
    pub skipped: u64,
}

/// Counts per state and the file size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Records per state.
    pub by_state: BTreeMap<StateName, u64>,
    /// All records.
    pub total: u64,
    /// Running records whose lease has expired (also counted as Running).
    pub expired_leases: u64,
    /// The database file's size in bytes, when the store is a file.
    pub file_size: Option<u64>,
}

/// Problems found by [`Store::verify`]; empty when the store is consistent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records checked.
    pub records: u64,
    /// One line per problem (an undecodable record or id, an index entry without
    /// its record, a record missing from an index).
    pub problems: Vec<String>,
}

impl Store {
    /// The record of `(scope, key)`, if any.
    pub fn get(&self, scope: &Scope, key: &IdempotencyKey) -> Result<Option<Record>, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            use crate::backend::IdempotencyBackend;
            return pg.get(scope, key).map_err(pg_query);
        }
        let id = scope.record_id(key);
        self.inner.handle.read(|txn| {
            let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
            Ok(load_from(&records, id.as_bytes())?)
        })
    }

    /// All records, or those in `state`, in storage order (grouped by tenant).
    pub fn list(&self, state: Option<StateName>) -> Result<Vec<ListedRecord>, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            return pg.list(state).map_err(pg_query);
        }
        self.inner.handle.read(|txn| {
            let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
            let mut out = Vec::new();
            for entry in records.iter().map_err(StorageError::from)? {
                let (id, bytes) = entry.map_err(StorageError::from)?;
                let record = decode(id.value(), bytes.value())?;
                if state.is_none_or(|s| s == record.state.name()) {
                    out.push(listed(id.value(), record)?);
                }
            }
            Ok(out)
        })
    }

    /// Records that need an operator or reconciler (by the store's clock).
    pub fn list_unresolved(&self) -> Result<Vec<ListedRecord>, QueryError> {
        self.list_unresolved_at(self.now())
    }

    /// Unknown records and Running records past their lease, read from the
    /// indexes (not a scan): expired leases first, by expiry, then Unknown records.
    pub(crate) fn list_unresolved_at(
        &self,
        now: UnixMillis,
    ) -> Result<Vec<ListedRecord>, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            return pg.list_unresolved_at(Some(now)).map_err(pg_query);
        }
        self.inner.handle.read(|txn| {
            let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
            let leases = txn.open_table(LEASE_EXPIRY).map_err(StorageError::from)?;
            let unknown = txn.open_table(UNKNOWN).map_err(StorageError::from)?;
            let mut out = Vec::new();
            for entry in leases.iter().map_err(StorageError::from)? {
                let (key, ()) = entry.map_err(StorageError::from).map(|(k, _)| (k, ()))?;
                let (expires, id) = key.value();
                if expires > now.as_millis() {
                    break;
                }
                if let Some(record) = load_from(&records, id)?
                    && record.is_unresolved(now)
                {
                    out.push(listed(id, record)?);
                }
            }
            for entry in unknown.iter().map_err(StorageError::from)? {
                let (id, _) = entry.map_err(StorageError::from)?;
                if let Some(record) = load_from(&records, id.value())? {
                    out.push(listed(id.value(), record)?);
                }
            }
            Ok(out)
        })
    }

    /// Settles an unresolved record (Unknown, or Running past its lease):
    /// `Applied(response)` → Completed, `NotApplied` → Released. Returns the
    /// record as written.
    pub fn resolve(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
    ) -> Result<Record, OperatorError> {
        let now = self.now();
        Ok(self.resolve_at(&scope.record_id(key), resolution, policy, now)?)
    }

    pub(crate) fn resolve_at(
        &self,
        id: &RecordId,
        resolution: Resolution,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<Record, TxError> {
        let policy = *policy;
        self.transition(id, now, move |r, now| {
            let next = machine::resolve(r, resolution.clone(), &policy, now)?;
            Ok((Some(next.clone()), next))
        })
    }

    /// Takes a new lease on an unresolved record so a reconciler can re-drive its
    /// persisted steps (their provider keys are reused by
    /// [`ExecutionGuard::begin_step`]). The old token is fenced off.
    pub fn recover(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        owner: &str,
        policy: &Policy,
    ) -> Result<ExecutionGuard, OperatorError> {
        let id = scope.record_id(key);
        let now = self.now();
        let (token, record) = self.recover_at(&id, owner, policy, now)?;
        Ok(ExecutionGuard::recovered(
            self.clone(),
            id,
            token,
            &record,
            policy,
        ))
    }

    pub(crate) fn recover_at(
        &self,
        id: &RecordId,
        owner: &str,
        policy: &Policy,
        now: UnixMillis,
    ) -> Result<(idemkit_core::record::FencingToken, Record), TxError> {
        let (owner, policy) = (owner.to_owned(), *policy);
        self.transition(id, now, move |r, now| {
            let (next, grant) = machine::recover(r, &owner, &policy, now)?;
            Ok((Some(next.clone()), (grant.token, next)))
        })
    }

    /// Writes records this store does not hold yet, all in one durable
    /// transaction: for copying a store (redb ↔ PostgreSQL), restoring a backup,
    /// or filling a store for a benchmark without paying one commit per record.
    ///
    /// A record whose scope and key are already present is **kept as it is** and
    /// counted in [`ImportReport::skipped`]: an import never overwrites a live
    /// record, so replaying an import, or importing into a store in use, cannot
    /// turn a completed operation back into a running one. Records are taken
    /// as they are (their state, lease and windows; indexes are derived from
    /// them as for any write). Either every record of the call is written or,
    /// on error, none. Batches of some thousands of records per call keep each
    /// transaction's memory bounded.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use idemkit::redb_store::Store;
    ///
    /// let (old, new) = (Store::in_memory()?, Store::in_memory()?);
    /// let records = old.list(None)?;
    /// let report = new.import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))?;
    /// assert_eq!(report.imported + report.skipped, records.len() as u64);
    /// # Ok(()) }
    /// ```
    pub fn import<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a Scope, &'a IdempotencyKey, &'a Record)>,
    ) -> Result<ImportReport, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            return pg.import(records).map_err(pg_query);
        }
        let batch: Vec<(Vec<u8>, Record)> = records
            .into_iter()
            .map(|(scope, key, record)| (scope.record_id(key).as_bytes().to_vec(), record.clone()))
            .collect();
        self.inner.handle.write_if_changed(move |txn| {
            let mut tables = Tables::open(txn)?;
            let mut report = ImportReport::default();
            for (id, record) in &batch {
                if tables
                    .records
                    .get(id.as_slice())
                    .map_err(StorageError::from)?
                    .is_some()
                {
                    report.skipped += 1;
                } else {
                    tables.put(id, None, Some(record))?;
                    report.imported += 1;
                }
            }
            Ok((report, report.imported > 0))
        })
    }

    /// One bounded GC batch by the store's clock: see [`GcReport`].
    pub fn gc(&self, max_batch: usize) -> Result<GcReport, QueryError> {
        self.gc_at(self.now(), max_batch)
    }

    /// Walks the GC index up to `now`, at most `max_batch` records, in one write
    /// transaction: prunes bodies after the replay window, deletes records after
    /// the record window. Running and Unknown records are never in that index.
    pub(crate) fn gc_at(&self, now: UnixMillis, max_batch: usize) -> Result<GcReport, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            return pg.gc_at(Some(now), max_batch).map_err(pg_query);
        }
        self.inner.handle.write_if_changed(move |txn| {
            let mut tables = Tables::open(txn)?;
            // First the due records (decoded), then the writes: the index cannot
            // be walked while it is being changed.
            let mut due: Vec<(Vec<u8>, Record)> = Vec::new();
            let mut report = GcReport::default();
            for entry in tables.gc_due.iter().map_err(StorageError::from)? {
                let (key, _) = entry.map_err(StorageError::from)?;
                let (at, id) = key.value();
                if at > now.as_millis() {
                    break;
                }
                if due.len() == max_batch {
                    report.more = true;
                    break;
                }
                match load_from(&tables.records, id) {
                    Ok(Some(record)) => due.push((id.to_vec(), record)),
                    // An index entry without its record cannot be produced by
                    // `put`; `verify` reports it.
                    Ok(None) => {}
                    // A record GC cannot read is never deleted (its state is
                    // unknown: it may be Running or Unknown) and never stops GC:
                    // it is counted, left as it is, and `verify` names it. It does
                    // not take a place in the batch, so GC always progresses.
                    Err(StorageError::CorruptRecord { .. }) => report.undecodable += 1,
                    Err(other) => return Err(other.into()),
                }
            }
            let mut floor = 0;
            for (id, record) in due {
                match machine::gc(&record, now) {
                    GcAction::Delete => {
                        floor = floor.max(record.last_token.get());
                        tables.put(&id, Some(&record), None)?;
                        report.deleted += 1;
                    }
                    GcAction::PruneBody => {
                        let pruned = machine::prune_body(&record);
                        tables.put(&id, Some(&record), Some(&pruned))?;
                        report.pruned += 1;
                    }
                    GcAction::Keep => {}
                }
            }
            drop(tables);
            // Tokens never repeat for a key: a later fresh claim of a deleted key
            // starts above every token the deleted records handed out.
            raise_token_floor(txn, floor)?;
            let changed = report.pruned + report.deleted > 0;
            Ok((report, changed))
        })
    }

    /// Counts per state (a scan of the records) and the file size.
    pub fn stats(&self) -> Result<Stats, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            return pg.stats().map_err(pg_query);
        }
        let now = self.now();
        let mut stats = self.inner.handle.read(|txn| {
            let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
            let mut stats = Stats::default();
            for entry in records.iter().map_err(StorageError::from)? {
                let (id, bytes) = entry.map_err(StorageError::from)?;
                let record = decode(id.value(), bytes.value())?;
                *stats.by_state.entry(record.state.name()).or_insert(0) += 1;
                stats.total += 1;
                if matches!(record.state, RecordState::Running { .. }) && record.is_unresolved(now)
                {
                    stats.expired_leases += 1;
                }
            }
            Ok::<_, QueryError>(stats)
        })?;
        stats.file_size = self
            .path()
            .and_then(|p| std::fs::metadata(p).ok())
            .map(|m| m.len());
        Ok(stats)
    }

    /// Checks that every record and id decodes and that the three indexes hold
    /// exactly the entries the records imply. Used after crashes and I/O faults.
    ///
    /// On a PostgreSQL store the derived columns are written by the same statement
    /// as the record, so there is no separate index to compare: every row must decode.
    pub fn verify(&self) -> Result<VerifyReport, QueryError> {
        #[cfg(feature = "postgres")]
        if let Some(pg) = self.as_postgres() {
            let records = pg.list(None).map_err(pg_query)?;
            return Ok(VerifyReport {
                records: u64::try_from(records.len()).unwrap_or(u64::MAX),
                problems: Vec::new(),
            });
        }
        self.inner.handle.read(|txn| {
            let records = txn.open_table(RECORDS).map_err(StorageError::from)?;
            let gc_due = txn.open_table(GC_DUE).map_err(StorageError::from)?;
            let leases = txn.open_table(LEASE_EXPIRY).map_err(StorageError::from)?;
            let unknown = txn.open_table(UNKNOWN).map_err(StorageError::from)?;
            let mut report = VerifyReport::default();
            let mut expected_gc = std::collections::BTreeSet::new();
            let mut expected_lease = std::collections::BTreeSet::new();
            let mut expected_unknown = BTreeMap::new();
            for entry in records.iter().map_err(StorageError::from)? {
                let (id, bytes) = entry.map_err(StorageError::from)?;
                let id = id.value().to_vec();
                report.records += 1;
                if let Err(e) = RecordId::decode(&id) {
                    report
                        .problems
                        .push(format!("record id does not decode: {e}"));
                }
                let record = match Record::decode(bytes.value()) {
                    Ok(record) => record,
                    Err(e) => {
                        report.problems.push(format!(
                            "record {} does not decode: {e}",
                            display_log_ref(&id)
                        ));
                        continue;
                    }
                };
                if let Some(due) = record.gc_due_at() {
                    expected_gc.insert((due.as_millis(), id.clone()));
                }
                if let Some(at) = record.lease_expires_at() {
                    expected_lease.insert((at.as_millis(), id.clone()));
                }
                if let RecordState::Unknown { since, .. } = &record.state {
                    expected_unknown.insert(id.clone(), since.as_millis());
                }
            }
            let mut found_gc = std::collections::BTreeSet::new();
            for entry in gc_due.iter().map_err(StorageError::from)? {
                let (key, _) = entry.map_err(StorageError::from)?;
                let (at, id) = key.value();
                found_gc.insert((at, id.to_vec()));
            }
            let mut found_lease = std::collections::BTreeSet::new();
            for entry in leases.iter().map_err(StorageError::from)? {
                let (key, _) = entry.map_err(StorageError::from)?;
                let (at, id) = key.value();
                found_lease.insert((at, id.to_vec()));
            }
            let mut found_unknown = BTreeMap::new();
            for entry in unknown.iter().map_err(StorageError::from)? {
                let (id, since) = entry.map_err(StorageError::from)?;
                found_unknown.insert(id.value().to_vec(), since.value());
            }
            compare("gc_due", &expected_gc, &found_gc, &mut report.problems);
            compare(
                "lease_expiry",
                &expected_lease,
                &found_lease,
                &mut report.problems,
            );
            if expected_unknown != found_unknown {
                report.problems.push(format!(
                    "unknown index holds {} entries, records imply {}",
                    found_unknown.len(),
                    expected_unknown.len()
                ));
            }
            // Sizes too, in case a table's own metadata disagrees with its entries.
            let n = records.len().map_err(StorageError::from)?;
            if n != report.records {
                report.problems.push(format!(
                    "records table says {n} entries, iteration found {}",
                    report.records
                ));
            }
            Ok(report)
        })
    }
}

/// A PostgreSQL failure of a query or GC.
#[cfg(feature = "postgres")]
fn pg_query(e: crate::postgres::PgError) -> QueryError {
    QueryError::Storage(StorageError::Postgres(e))
}

fn compare(
    name: &str,
    expected: &std::collections::BTreeSet<(u64, Vec<u8>)>,
    found: &std::collections::BTreeSet<(u64, Vec<u8>)>,
    problems: &mut Vec<String>,
) {
    for (at, id) in expected.difference(found) {
        problems.push(format!(
            "{name} index misses record {} at {at}",
            display_log_ref(id)
        ));
    }
    for (at, id) in found.difference(expected) {
        problems.push(format!(
            "{name} index has a stray entry for {} at {at}",
            display_log_ref(id)
        ));
    }
}

fn display_log_ref(id: &[u8]) -> String {
    log_ref_of(id).map_or_else(|| "(undecodable id)".to_owned(), |r| r.to_string())
}

fn listed(id: &[u8], record: Record) -> Result<ListedRecord, StorageError> {
    let (scope, key) = RecordId::decode(id).map_err(|e| StorageError::CorruptId {
        detail: e.to_string(),
    })?;
    Ok(ListedRecord { scope, key, record })
}
