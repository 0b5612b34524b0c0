//! The records table of the last commit, shared by the reads that come before
//! the next one.
//!
//! A claim reads its record before it writes (a replay never reaches the
//! writer). Beginning a redb read transaction and opening the records table
//! in it checks the table's stored definition and makes a dozen small
//! allocations: about a tenth of a claim + complete's instructions at 64
//! clients, and most of a replay's. Between two commits every read would see
//! the same snapshot, so the first read after a commit opens it and the reads
//! after it share it.
//!
//! A read must never see an older state than a commit whose caller was
//! already answered: a refused write reads again, and would read the same
//! stale snapshot until it gave up. So each commit counts itself before its
//! callers are answered, and a snapshot is shared under the count it was
//! begun under:
//!
//! - a reader notes the count, then begins its transaction: the snapshot
//!   holds every commit counted before it;
//! - a later reader uses it only while the count is still that one.
//!
//! A commit also drops the shared snapshot, and one begun across a commit is
//! not stored, so none outlives the next commit and keeps redb from reusing
//! the pages that commit freed (an import or a GC batch writes for long
//! without reading). A snapshot holds its database, so a reopen waits for the
//! reads still using one, as it waits for every other read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use redb::{Database, ReadOnlyTable, ReadableDatabase};

use super::error::{RedbError, guarded};
use super::tables::RECORDS;

/// The records table as one read transaction sees it, and its database: redb
/// closes the file when the database is dropped, whatever still reads it.
pub(crate) struct Snapshot {
    pub(crate) records: ReadOnlyTable<&'static [u8], &'static [u8]>,
    _database: Arc<Database>,
}

/// The shared snapshot of one open database, and the commits counted.
#[derive(Default)]
pub(crate) struct SnapshotCache {
    commits: AtomicU64,
    shared: RwLock<Option<Shared>>,
}

struct Shared {
    /// The count it was begun under.
    commits: u64,
    snapshot: Arc<Snapshot>,
}

impl std::fmt::Debug for SnapshotCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotCache")
            .field("commits", &self.commits.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl SnapshotCache {
    /// The records table of the last commit counted: the shared one, or one
    /// opened now in `db` (shared if no commit was counted meanwhile).
    pub(crate) fn records(
        &self,
        db: impl FnOnce() -> Result<Arc<Database>, RedbError>,
    ) -> Result<Arc<Snapshot>, RedbError> {
        let commits = self.commits.load(Ordering::Acquire);
        if let Some(shared) = &*self.shared.read().unwrap_or_else(PoisonError::into_inner)
            && shared.commits == commits
        {
            return Ok(Arc::clone(&shared.snapshot));
        }
        let db = db()?;
        let records = guarded(|| Ok(db.begin_read()?.open_table(RECORDS)?))?;
        let snapshot = Arc::new(Snapshot {
            records,
            _database: db,
        });
        let mut shared = self.shared.write().unwrap_or_else(PoisonError::into_inner);
        // Begun across a commit, it could never be used: not kept.
        if self.commits.load(Ordering::Acquire) == commits {
            *shared = Some(Shared {
                commits,
                snapshot: Arc::clone(&snapshot),
            });
        }
        Ok(snapshot)
    }

    /// A commit (or a reopen) made the shared snapshot old: counted before
    /// its callers are answered.
    pub(crate) fn commit_seen(&self) {
        let mut shared = self.shared.write().unwrap_or_else(PoisonError::into_inner);
        self.commits.fetch_add(1, Ordering::AcqRel);
        *shared = None;
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use redb::backends::InMemoryBackend;

    use super::*;

    fn database() -> Arc<Database> {
        let db = Database::builder()
            .create_with_backend(InMemoryBackend::new())
            .unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(RECORDS).unwrap();
        txn.commit().unwrap();
        Arc::new(db)
    }

    /// Reads between two commits share one snapshot; a commit counted makes
    /// the next read open another.
    #[test]
    fn reads_share_a_snapshot_until_a_commit_is_counted() {
        let (db, cache, opened) = (database(), SnapshotCache::default(), Cell::new(0));
        let open = || {
            opened.set(opened.get() + 1);
            Ok(Arc::clone(&db))
        };
        let first = cache.records(open).unwrap();
        let second = cache.records(open).unwrap();
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(opened.get(), 1);
        cache.commit_seen();
        let third = cache.records(open).unwrap();
        assert!(!Arc::ptr_eq(&second, &third));
        assert_eq!(opened.get(), 2);
    }

    /// A snapshot begun while a commit was counted is used by its reader
    /// alone: the reads after the commit's answer must not see a state older
    /// than it.
    #[test]
    fn a_snapshot_begun_across_a_commit_is_not_shared() {
        let (db, cache, opened) = (database(), SnapshotCache::default(), Cell::new(0));
        let first = cache
            .records(|| {
                opened.set(opened.get() + 1);
                // The commit lands between the count noted and the snapshot stored.
                cache.commit_seen();
                Ok(Arc::clone(&db))
            })
            .unwrap();
        let next = cache
            .records(|| {
                opened.set(opened.get() + 1);
                Ok(Arc::clone(&db))
            })
            .unwrap();
        assert!(!Arc::ptr_eq(&first, &next));
        assert_eq!(opened.get(), 2);
    }
}
