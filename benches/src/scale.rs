//! Filling a store with many records, fast, through the public API only.
//!
//! The fill writes one genuine Completed record under many keys with
//! [`Store::import`] (one transaction per batch) on a store opened with
//! [`RedbAdapter::with_backend`](idemkit::adapters::redb::RedbAdapter::with_backend) over a [`NoSyncFile`]: redb's own `FileBackend` whose
//! `sync_data` does nothing. Every transaction still commits (same pages, same
//! B-trees), it is just not waited for on the disk; the file is synced once at
//! the end. Measurements then reopen the file with [`idemkit::open`] (real syncs).

use std::fs::{File, OpenOptions};
use std::ops::Bound;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use idemkit::clock::Clock;
use idemkit::core::machine::Policy;
use idemkit::core::record::StoredResponse;
use idemkit::store::{Claim, Store};
use idemkit::{Fingerprint, IdempotencyKey, Scope};
use redb::backends::FileBackend;
use redb::{BackendError, StorageBackend};

/// What redb 4 (without `experimental-api-5`) backends return for I/O.
type BackendIoError = std::io::Error;

/// redb's file backend without durability: for building benchmark fixtures only.
#[derive(Debug)]
pub struct NoSyncFile(FileBackend);

/// What a [`CountingFile`] saw.
#[derive(Debug, Default)]
pub struct IoCounts {
    /// `sync_data` calls (fdatasync).
    pub syncs: AtomicU64,
    /// `write` calls.
    pub writes: AtomicU64,
    /// Bytes written.
    pub bytes: AtomicU64,
}

/// redb's file backend, durable, counting syncs and writes: how much I/O one
/// claim or complete costs.
#[derive(Debug)]
pub struct CountingFile {
    inner: FileBackend,
    counts: Arc<IoCounts>,
}

impl CountingFile {
    /// Opens (creating) `path`; the counts are shared with the caller.
    ///
    /// # Errors
    ///
    /// The file could not be opened.
    pub fn open(path: &Path, counts: Arc<IoCounts>) -> std::io::Result<Self> {
        let NoSyncFile(inner) = NoSyncFile::open(path)?;
        Ok(CountingFile { inner, counts })
    }
}

impl StorageBackend for CountingFile {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.inner.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.inner.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        self.inner.set_len(len)
    }
    fn sync_data(&self) -> Result<(), BackendIoError> {
        self.counts.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        self.counts.writes.fetch_add(1, Ordering::Relaxed);
        self.counts
            .bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset, data)
    }
    fn close(&self) -> Result<(), BackendIoError> {
        self.inner.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.inner.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.inner.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.inner.query_lock_range(start, end)
    }
}

impl NoSyncFile {
    /// Opens (creating) `path`.
    ///
    /// # Errors
    ///
    /// The file could not be opened.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        FileBackend::new(file)
            .map(NoSyncFile)
            .map_err(std::io::Error::other)
    }
}

impl StorageBackend for NoSyncFile {
    fn len(&self) -> Result<u64, BackendIoError> {
        self.0.len()
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), BackendIoError> {
        self.0.read(offset, out)
    }
    fn set_len(&self, len: u64) -> Result<(), BackendIoError> {
        self.0.set_len(len)
    }
    fn sync_data(&self) -> Result<(), BackendIoError> {
        Ok(())
    }
    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BackendIoError> {
        self.0.write(offset, data)
    }
    fn close(&self) -> Result<(), BackendIoError> {
        self.0.close()
    }
    fn try_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.try_lock_range(start, end)
    }
    fn try_lock_shared_range(
        &self,
        start: Bound<u64>,
        end: Bound<u64>,
    ) -> Result<bool, BackendError> {
        self.0.try_lock_shared_range(start, end)
    }
    fn lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_range(start, end)
    }
    fn lock_shared_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.lock_shared_range(start, end)
    }
    fn unlock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<(), BackendError> {
        self.0.unlock_range(start, end)
    }
    fn query_lock_range(&self, start: Bound<u64>, end: Bound<u64>) -> Result<bool, BackendError> {
        self.0.query_lock_range(start, end)
    }
}

/// The scope of every benchmark record.
///
/// # Panics
///
/// Never: the names are valid.
#[must_use]
pub fn scope() -> Scope {
    #[allow(clippy::expect_used)]
    Scope::new("bench", "scale").expect("valid scope")
}

/// The key of fill record `i`.
#[must_use]
pub fn fill_key(i: u64) -> String {
    format!("fill-{i:010}")
}

/// The fingerprint of every benchmark request.
#[must_use]
pub fn fingerprint() -> Fingerprint {
    Fingerprint::from_bytes(*blake3::hash(b"{\"slot\":\"10:00\"}").as_bytes())
}

/// The response stored by every benchmark record (a small JSON body).
#[must_use]
pub fn response() -> StoredResponse {
    StoredResponse::new(
        201,
        b"{\"id\":\"appt_000001\",\"status\":\"confirmed\"}".to_vec(),
    )
}

/// Records per [`Store::import`] call while filling: one transaction each.
pub const FILL_BATCH: u64 = 50_000;

/// Fills `path` (a new file) with `records` Completed records under `policy`,
/// reading time from `clock`. Returns the time it took.
///
/// One real claim + complete makes the template record (so it is exactly what the
/// store writes for a finished request under `policy`); [`Store::import`] then
/// writes it under `records` keys, [`FILL_BATCH`] per transaction, on a file
/// without syncs (synced once at the end).
///
/// # Errors
///
/// The file or a transaction failed.
pub fn fill(
    path: &Path,
    records: u64,
    policy: Policy,
    clock: impl Clock + Clone + 'static,
) -> Result<Duration, Box<dyn std::error::Error + Send + Sync>> {
    let start = Instant::now();
    let scope = scope();
    let template = {
        let scratch = idemkit::in_memory()?.with_clock(clock.clone());
        let key = IdempotencyKey::new("template")?;
        match scratch.claim(&scope, &key, fingerprint(), "fill", &policy)? {
            Claim::Execute(guard) => guard.complete(response())?,
            other => return Err(format!("fill claim answered {other:?}").into()),
        }
        scratch
            .get(&scope, &key)?
            .ok_or("the template record is missing")?
    };
    let store = Store::from(idemkit::adapters::redb::RedbAdapter::with_backend(
        NoSyncFile::open(path)?,
    )?)
    .with_clock(clock);
    let mut next = 0;
    while next < records {
        let end = (next + FILL_BATCH).min(records);
        let keys = (next..end)
            .map(|i| IdempotencyKey::new(&fill_key(i)))
            .collect::<Result<Vec<_>, _>>()?;
        let report = store.import(keys.iter().map(|k| (&scope, k, &template)))?;
        if report.skipped > 0 {
            return Err(format!("{} fill records already existed", report.skipped).into());
        }
        next = end;
        if next % 1_000_000 == 0 {
            eprintln!(
                "  filled {next} records in {:.0} s",
                start.elapsed().as_secs_f64()
            );
        }
    }
    drop(store);
    File::open(path)?.sync_all()?;
    Ok(start.elapsed())
}
