//! Operator and maintenance operations: get, list, resolve, recover, GC, stats, verify.

use std::collections::BTreeMap;

use idemkit_core::machine::{self, Answer, GcAction, Op, Policy, Resolution};
use idemkit_core::record::{Record, RecordState, StateName};
use idemkit_core::{IdempotencyKey, LogRef, RecordId, Scope};

use super::error::{QueryError, StorageError, WorkerError};
use super::guard::{ExecutionGuard, unexpected};
use super::{Seam, Store, run_on};
use crate::adapters::{
    Adapter, AdapterError, Cursor, FailureKind, Read, Scan, ScanBy, ScanPage, Scanned, Stored,
    Version, Write,
};

/// How many records one scan page asks its adapter for (listing, stats, verify).
const PAGE: usize = 1_024;

/// A record with the scope and key it belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedRecord {
    /// Tenant and operation.
    pub scope: Scope,
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// The record.
    pub record: Record,
    /// The version it was read at: [`Store::resolve_seen`] settles it only
    /// while the record is still at this version.
    pub version: Version,
}

impl ListedRecord {
    /// The record's log reference.
    #[must_use]
    pub fn log_ref(&self) -> LogRef {
        self.scope.record_id(&self.key).log_ref()
    }
}

/// Which records [`Store::list_page`] lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Listing {
    /// Every record, in storage order.
    All,
    /// The records in one state.
    State(StateName),
    /// What [`Store::list_unresolved`] lists: Running records past their
    /// lease, then Unknown records.
    Unresolved,
}

/// One page of [`Store::list_page`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordPage {
    /// At most the page's limit of records.
    pub records: Vec<ListedRecord>,
    /// Where the next page starts (opaque bytes, safe to hand to a client);
    /// `None` when this page is the last.
    pub next: Option<Vec<u8>>,
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
    /// The bytes the records take on disk: the redb file, the PostgreSQL table
    /// with its indexes (`None` in memory).
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
        let read = self
            .adapter
            .get(&scope.record_id(key))
            .map_err(StorageError::from)?;
        Ok(read.stored.map(|s| s.record))
    }

    /// The record of `(scope, key)` with the version it was read at, if any.
    pub fn get_listed(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<ListedRecord>, QueryError> {
        let read = self
            .adapter
            .get(&scope.record_id(key))
            .map_err(StorageError::from)?;
        Ok(read.stored.map(|s| ListedRecord {
            scope: scope.clone(),
            key: key.clone(),
            record: s.record,
            version: s.version,
        }))
    }

    /// Every page of `by`, handed to `each` in order; stops early when `each`
    /// says so.
    pub(super) fn scan_all(
        &self,
        by: ScanBy,
        mut each: impl FnMut(Scanned) -> Result<bool, QueryError>,
    ) -> Result<(), QueryError> {
        let mut after = None;
        loop {
            let ScanPage { entries, next } = self
                .adapter
                .scan(&Scan {
                    by,
                    limit: PAGE,
                    after,
                })
                .map_err(StorageError::from)?;
            for entry in entries {
                if !each(entry)? {
                    return Ok(());
                }
            }
            match next {
                Some(cursor) => after = Some(cursor),
                None => return Ok(()),
            }
        }
    }

    /// All records, or those in `state`, in storage order (grouped by tenant).
    pub fn list(&self, state: Option<StateName>) -> Result<Vec<ListedRecord>, QueryError> {
        let mut out = Vec::new();
        self.scan_all(ScanBy::All, |entry| {
            let (id, stored) = decoded(entry)?;
            if state.is_none_or(|s| s == stored.record.state.name()) {
                out.push(listed(&id, stored)?);
            }
            Ok(true)
        })?;
        Ok(out)
    }

    /// One page of the records `listing` names: at most `limit` records (at
    /// least one), from where `after` (a page's [`RecordPage::next`]) left off.
    /// Memory stays bounded by the page, whatever the store holds. A filtered
    /// page may hold fewer records than `limit` and still have a next page.
    ///
    /// # Errors
    ///
    /// The store failed, or a record on the page does not decode.
    pub fn list_page(
        &self,
        listing: Listing,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<RecordPage, QueryError> {
        let limit = limit.max(1);
        // Unresolved records come from two scans; the cursor's first byte says
        // which one it continues.
        let (phase, cursor) = match after {
            None => (0, None),
            // Phase 1 begins with an empty cursor: its scan from the start.
            Some([phase, rest @ ..]) if *phase <= 1 => (
                *phase,
                Some(Cursor(rest.to_vec())).filter(|c| !c.0.is_empty()),
            ),
            Some(_) => {
                return Err(StorageError::CorruptId {
                    detail: "the page cursor was not made by this listing".to_owned(),
                }
                .into());
            }
        };
        let now = self.try_now()?;
        let by = match (listing, phase) {
            (Listing::Unresolved, 0) => ScanBy::LeaseExpired(now),
            (Listing::State(StateName::Unknown) | Listing::Unresolved, _) => ScanBy::Unknown,
            _ => ScanBy::All,
        };
        let ScanPage { entries, next } = self
            .adapter
            .scan(&Scan {
                by,
                limit,
                after: cursor,
            })
            .map_err(StorageError::from)?;
        let mut records = Vec::with_capacity(entries.len());
        for entry in entries {
            let (id, stored) = decoded(entry)?;
            let keep = match listing {
                Listing::All => true,
                Listing::State(state) => state == stored.record.state.name(),
                Listing::Unresolved => phase == 1 || stored.record.is_unresolved(now),
            };
            if keep {
                records.push(listed(&id, stored)?);
            }
        }
        let next = match (next, listing, phase) {
            (Some(Cursor(bytes)), _, _) => Some([&[phase][..], &bytes].concat()),
            (None, Listing::Unresolved, 0) => Some(vec![1]),
            (None, _, _) => None,
        };
        Ok(RecordPage { records, next })
    }

    /// Records that need an operator or reconciler, by the store's clock:
    /// Running records past their lease, by expiry, then Unknown records.
    pub fn list_unresolved(&self) -> Result<Vec<ListedRecord>, QueryError> {
        let now = self.try_now()?;
        let mut out = Vec::new();
        self.scan_all(ScanBy::LeaseExpired(now), |entry| {
            let (id, stored) = decoded(entry)?;
            if stored.record.is_unresolved(now) {
                out.push(listed(&id, stored)?);
            }
            Ok(true)
        })?;
        self.scan_all(ScanBy::Unknown, |entry| {
            let (id, stored) = decoded(entry)?;
            out.push(listed(&id, stored)?);
            Ok(true)
        })?;
        Ok(out)
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
    ) -> Result<Record, WorkerError> {
        let now = self.try_now()?;
        let op = Op::Resolve { resolution };
        let applied = self.run(&scope.record_id(key), op, policy, now, None)?;
        Ok(written(applied.stored)?.record)
    }

    /// [`resolve`](Self::resolve), only while the record is still at the
    /// version `seen` (a [`ListedRecord::version`]): an operator who settles a
    /// record from what a page showed must not overwrite what happened since
    /// (a worker's late completion, another operator's resolution, a lease
    /// renewal). The check and the write are one conditional write.
    ///
    /// # Errors
    ///
    /// [`WorkerError::Changed`] when the record is no longer at `seen`, else
    /// as [`resolve`](Self::resolve).
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use idemkit::core::machine::{Policy, Resolution};
    /// use idemkit::core::{Fingerprint, IdempotencyKey, Scope};
    /// use idemkit::store::{Claim, WorkerError};
    ///
    /// let store = idemkit::in_memory()?;
    /// let (scope, key) = (Scope::new("acme", "charge")?, IdempotencyKey::new("k-1")?);
    /// let policy = Policy::default();
    /// let Claim::Execute(guard) =
    ///     store.claim(&scope, &key, Fingerprint::from_bytes([7; 32]), "worker", &policy)?
    /// else {
    ///     unreachable!("a new key executes")
    /// };
    /// guard.mark_unknown("the provider timed out")?;
    ///
    /// let seen = store.get_listed(&scope, &key)?.expect("the record").version;
    /// store.resolve(&scope, &key, Resolution::NotApplied, &policy)?; // someone else settles it
    /// let late = store.resolve_seen(&scope, &key, Resolution::NotApplied, &policy, seen);
    /// assert!(matches!(late, Err(WorkerError::Changed { .. })));
    /// # Ok(()) }
    /// ```
    pub fn resolve_seen(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        resolution: Resolution,
        policy: &Policy,
        seen: Version,
    ) -> Result<Record, WorkerError> {
        let id = scope.record_id(key);
        let now = self.try_now()?;
        let mut seam = SeenAt {
            adapter: &*self.adapter,
            seen,
            changed: false,
        };
        let applied = run_on(
            &mut seam,
            &id,
            Op::Resolve { resolution },
            policy,
            now,
            None,
        );
        if seam.changed {
            return Err(WorkerError::Changed {
                log_ref: id.log_ref(),
            });
        }
        let applied = applied?;
        self.wake(&id);
        Ok(written(applied.stored)?.record)
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
    ) -> Result<ExecutionGuard, WorkerError> {
        let id = scope.record_id(key);
        let now = self.try_now()?;
        let op = Op::Recover {
            owner: owner.to_owned(),
        };
        let applied = self.run(&id, op, policy, now, None)?;
        let Answer::Recovered(grant) = applied.answer else {
            return Err(unexpected("recover", &applied.answer).into());
        };
        let stored = written(applied.stored)?;
        Ok(ExecutionGuard::new(
            self.clone(),
            id,
            grant.token,
            stored,
            policy,
            applied.now,
        ))
    }

    /// Writes records this store does not hold yet, with one call of the
    /// adapter's [`write_all`](crate::adapters::Adapter::write_all) (one
    /// durable transaction on redb): for copying a store (redb ↔ PostgreSQL),
    /// restoring a backup, or filling a store for a benchmark without paying
    /// one commit per record.
    ///
    /// A record whose scope and key are already present is **kept as it is** and
    /// counted in [`ImportReport::skipped`]: an import never overwrites a live
    /// record, so replaying an import, or importing into a store in use, cannot
    /// turn a completed operation back into a running one. So is a record whose
    /// last fencing token is not above the store's token floor (GC deleted a
    /// record of this store with a token as high: importing it could hand out
    /// a token twice). Records are taken as they are (their state, lease and
    /// windows). Batches of some thousands of records per call keep each
    /// transaction's memory bounded.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let (old, new) = (idemkit::in_memory()?, idemkit::in_memory()?);
    /// let records = old.list(None)?;
    /// let report = new.import(records.iter().map(|r| (&r.scope, &r.key, &r.record)))?;
    /// assert_eq!(report.imported + report.skipped, records.len() as u64);
    /// # Ok(()) }
    /// ```
    pub fn import<'a>(
        &self,
        records: impl IntoIterator<Item = (&'a Scope, &'a IdempotencyKey, &'a Record)>,
    ) -> Result<ImportReport, QueryError> {
        let writes: Vec<Write> = records
            .into_iter()
            .map(|(scope, key, record)| Write::Insert(scope.record_id(key), record.clone()))
            .collect();
        let answers = self
            .adapter
            .write_all(&writes)
            .map_err(StorageError::from)?;
        let imported = answers.iter().filter(|a| a.is_some()).count();
        Ok(ImportReport {
            imported: count(imported),
            skipped: count(answers.len() - imported),
        })
    }

    /// One bounded GC batch by the store's clock (see [`GcReport`]): reads
    /// the records due (at most `max_batch`), lets the core decide each (prune
    /// the body after the replay window, delete after the record window) and
    /// writes the decisions with one call of the adapter's `write_all`, each
    /// conditional on the version read. Running and Unknown records are never
    /// due. A record whose write was refused (it changed since the read) is
    /// left for the next batch.
    pub fn gc(&self, max_batch: usize) -> Result<GcReport, QueryError> {
        let now = self.try_now()?;
        let mut report = GcReport::default();
        let mut writes = Vec::new();
        let mut kinds = Vec::new();
        let mut after = None;
        // Undecodable records do not take a place in the batch (GC must
        // progress past them), so a page may need refilling; one entry more
        // than the batch says whether another batch is due.
        'pages: loop {
            let page = self
                .adapter
                .scan(&Scan {
                    by: ScanBy::GcDue(now),
                    limit: max_batch - writes.len() + 1,
                    after,
                })
                .map_err(StorageError::from)?;
            for entry in page.entries {
                let (Ok(stored), Ok((scope, key))) = (entry.stored, RecordId::decode(&entry.id))
                else {
                    // A record GC cannot read is never deleted (its state is
                    // unknown: it may be Running or Unknown) and never stops
                    // GC: it is counted, left as it is, and `verify` names it.
                    report.undecodable += 1;
                    continue;
                };
                if writes.len() == max_batch {
                    report.more = true;
                    break 'pages;
                }
                let id = scope.record_id(&key);
                match machine::gc(&stored.record, now) {
                    GcAction::Delete => {
                        writes.push(Write::Delete(id, stored));
                        kinds.push(GcAction::Delete);
                    }
                    GcAction::PruneBody => {
                        let pruned = machine::prune_body(&stored.record);
                        writes.push(Write::Update(id, stored, pruned));
                        kinds.push(GcAction::PruneBody);
                    }
                    GcAction::Keep => {}
                }
            }
            match page.next {
                Some(cursor) => after = Some(cursor),
                None => break 'pages,
            }
        }
        let answers = self
            .adapter
            .write_all(&writes)
            .map_err(StorageError::from)?;
        for (answer, kind) in answers.iter().zip(kinds) {
            match (answer, kind) {
                (Some(_), GcAction::Delete) => report.deleted += 1,
                (Some(_), GcAction::PruneBody) => report.pruned += 1,
                _ => {}
            }
        }
        Ok(report)
    }

    /// Counts per state (a scan of the records) and the size on disk.
    pub fn stats(&self) -> Result<Stats, QueryError> {
        let now = self.try_now()?;
        let mut stats = Stats::default();
        self.scan_all(ScanBy::All, |entry| {
            let (_, stored) = decoded(entry)?;
            let record = stored.record;
            *stats.by_state.entry(record.state.name()).or_insert(0) += 1;
            stats.total += 1;
            if matches!(record.state, RecordState::Running { .. }) && record.is_unresolved(now) {
                stats.expired_leases += 1;
            }
            Ok(true)
        })?;
        stats.file_size = self.adapter.bytes_on_disk().map_err(StorageError::from)?;
        Ok(stats)
    }

    /// Checks that every record and id decodes, and that the adapter's own
    /// structures agree with its records ([`Adapter::verify`]: redb's indexes).
    /// Used after crashes and I/O faults.
    ///
    /// [`Adapter::verify`]: crate::adapters::Adapter::verify
    pub fn verify(&self) -> Result<VerifyReport, QueryError> {
        if let Some(checked) = self.adapter.verify() {
            let (records, problems) = checked.map_err(StorageError::from)?;
            return Ok(VerifyReport { records, problems });
        }
        let mut report = VerifyReport::default();
        self.scan_all(ScanBy::All, |entry| {
            report.records += 1;
            if let Err(e) = RecordId::decode(&entry.id) {
                report
                    .problems
                    .push(format!("record id does not decode: {e}"));
            }
            if let Err(e) = entry.stored {
                report.problems.push(e);
            }
            Ok(true)
        })?;
        Ok(report)
    }
}

fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The record a transition wrote (an accepted transition always leaves one).
fn written(stored: Option<Stored>) -> Result<Stored, StorageError> {
    stored.ok_or_else(|| StorageError::Corrupt {
        detail: "a transition left no record".into(),
    })
}

/// A scanned record that decoded, or the error that names it.
fn decoded(entry: Scanned) -> Result<(Vec<u8>, Stored), StorageError> {
    match entry.stored {
        Ok(stored) => Ok((entry.id, stored)),
        Err(detail) => Err(StorageError::CorruptRecord {
            log_ref: RecordId::decode(&entry.id)
                .ok()
                .map(|(scope, key)| scope.record_id(&key).log_ref()),
            detail,
        }),
    }
}

fn listed(id: &[u8], stored: Stored) -> Result<ListedRecord, StorageError> {
    let (scope, key) = RecordId::decode(id).map_err(|e| StorageError::CorruptId {
        detail: e.to_string(),
    })?;
    Ok(ListedRecord {
        scope,
        key,
        record: stored.record,
        version: stored.version,
    })
}

/// The adapter, for a transition that must find the record still at the
/// version its caller saw: a read that finds another version (or a write
/// refused because the record changed after the read) ends it.
struct SeenAt<'a> {
    adapter: &'a dyn Adapter,
    seen: Version,
    changed: bool,
}

impl Seam for SeenAt<'_> {
    fn get(&mut self, id: &RecordId) -> Result<Read, AdapterError> {
        let read = self.adapter.get(id)?;
        if read.stored.as_ref().is_some_and(|s| s.version != self.seen) {
            self.changed = true;
            return Err(AdapterError::new(
                FailureKind::Failed,
                "the record changed since it was read",
            ));
        }
        Ok(read)
    }

    fn update(
        &mut self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        self.adapter.update(id, read, next)
    }
}
