//! A [`StorageBackend`] wrapper that fails a chosen write or sync, for testing
//! what the store acknowledges when the disk fails (compare redb's own
//! `FailingBackend` tests and its fuzzer's I/O-error backend).
//!
//! ```no_run
//! use idemkit::store::Store;
//! use idemkit::adapters::redb::{FaultSwitch, FaultyBackend, RedbAdapter};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let file = std::fs::OpenOptions::new()
//!     .read(true).write(true).create(true).truncate(false)
//!     .open("faults.redb")?;
//! let switch = FaultSwitch::default();
//! let backend = FaultyBackend::new(redb::backends::FileBackend::new(file)?, switch.clone());
//! let store = Store::from(RedbAdapter::with_backend(backend)?);
//! switch.fail_sync_after(0); // the next sync_data fails
//! # Ok(()) }
//! ```

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use redb::{BackendError, StorageBackend};

const DISARMED: u64 = u64::MAX;

#[derive(Debug)]
struct Counters {
    writes_until_failure: AtomicU64,
    syncs_until_failure: AtomicU64,
    sticky: std::sync::atomic::AtomicBool,
    failed: std::sync::atomic::AtomicBool,
    injected: AtomicU64,
    transient_transactions: AtomicU64,
}

/// The test's handle on a [`FaultyBackend`]: arms failures by count. Clones share
/// the same counters.
#[derive(Clone, Debug)]
pub struct FaultSwitch(Arc<Counters>);

impl Default for FaultSwitch {
    fn default() -> Self {
        FaultSwitch(Arc::new(Counters {
            writes_until_failure: AtomicU64::new(DISARMED),
            syncs_until_failure: AtomicU64::new(DISARMED),
            sticky: std::sync::atomic::AtomicBool::new(false),
            failed: std::sync::atomic::AtomicBool::new(false),
            injected: AtomicU64::new(0),
            transient_transactions: AtomicU64::new(0),
        }))
    }
}

impl FaultSwitch {
    /// Lets `n` more writes succeed, then fails the next one.
    pub fn fail_write_after(&self, n: u64) {
        self.0.writes_until_failure.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more syncs succeed, then fails the next one.
    pub fn fail_sync_after(&self, n: u64) {
        self.0.syncs_until_failure.store(n, Ordering::SeqCst);
    }

    /// After the first injected failure, fail every later write and sync too (a
    /// disk that went away), instead of failing just one call.
    pub fn set_sticky(&self, sticky: bool) {
        self.0.sticky.store(sticky, Ordering::SeqCst);
    }

    /// Fails the next `n` write transactions of a store opened with
    /// [`RedbAdapter::with_faulty_backend`](super::RedbAdapter::with_faulty_backend) before
    /// they touch the database, then lets them through again: a transient store
    /// error (a dropped connection, a lock held too long), after which the store
    /// works as before. (A failed write or sync of the backend itself leaves redb
    /// failing every later operation until it is reopened, so it cannot model a
    /// transient error.)
    pub fn fail_next_transactions(&self, n: u64) {
        self.0.transient_transactions.store(n, Ordering::SeqCst);
    }

    /// Whether the transaction starting now must fail (see
    /// [`fail_next_transactions`](Self::fail_next_transactions)); counts it as injected.
    pub(crate) fn take_transient_failure(&self) -> bool {
        let fire = self
            .0
            .transient_transactions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            })
            .is_ok();
        if fire {
            self.0.injected.fetch_add(1, Ordering::SeqCst);
        }
        fire
    }

    /// Disarms both counters and clears a sticky failure.
    pub fn disarm(&self) {
        self.0.transient_transactions.store(0, Ordering::SeqCst);
        self.0
            .writes_until_failure
            .store(DISARMED, Ordering::SeqCst);
        self.0.syncs_until_failure.store(DISARMED, Ordering::SeqCst);
        self.0.failed.store(false, Ordering::SeqCst);
    }

    /// How many failures were injected so far.
    #[must_use]
    pub fn injected(&self) -> u64 {
        self.0.injected.load(Ordering::SeqCst)
    }

    fn should_fail(&self, counter: &AtomicU64) -> bool {
        if self.0.sticky.load(Ordering::SeqCst) && self.0.failed.load(Ordering::SeqCst) {
            return true;
        }
        let fire = counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| match left {
                DISARMED => None,
                0 => Some(DISARMED),
                n => Some(n - 1),
            })
            .is_ok_and(|left| left == 0);
        if fire {
            self.0.failed.store(true, Ordering::SeqCst);
            self.0.injected.fetch_add(1, Ordering::SeqCst);
        }
        fire
    }
}

/// Wraps a backend (usually redb's `FileBackend`) and fails the write or sync that
/// its [`FaultSwitch`] selects with an I/O error; everything else, including the
/// file locks, is passed through.
#[derive(Debug)]
pub struct FaultyBackend<B> {
    inner: B,
    switch: FaultSwitch,
}

impl<B: StorageBackend> FaultyBackend<B> {
    /// Wraps `inner`; failures are armed through `switch`.
    pub fn new(inner: B, switch: FaultSwitch) -> Self {
        FaultyBackend { inner, switch }
    }

    /// The switch that arms this backend's failures.
    #[must_use]
    pub fn switch(&self) -> &FaultSwitch {
        &self.switch
    }
}

fn injected(what: &str) -> std::io::Error {
    std::io::Error::other(format!("idemkit fault injection: {what} failed"))
}

impl<B: StorageBackend> StorageBackend for FaultyBackend<B> {
    fn len(&self) -> Result<u64, std::io::Error> {
        self.inner.len()
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> Result<(), std::io::Error> {
        self.inner.read(offset, out)
    }

    fn set_len(&self, len: u64) -> Result<(), std::io::Error> {
        self.inner.set_len(len)
    }

    fn sync_data(&self) -> Result<(), std::io::Error> {
        if self.switch.should_fail(&self.switch.0.syncs_until_failure) {
            return Err(injected("sync_data"));
        }
        self.inner.sync_data()
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), std::io::Error> {
        if self.switch.should_fail(&self.switch.0.writes_until_failure) {
            return Err(injected("write"));
        }
        self.inner.write(offset, data)
    }

    fn close(&self) -> Result<(), std::io::Error> {
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
