//! The memory adapter: records in a map under one mutex, nothing durable.
//!
//! For tests (the conformance suite runs the engine over it, as over redb and
//! PostgreSQL) and for caches that may forget. Scans sort what they find; they
//! are linear in the number of records, which is fine for what this is for.
//!
//! ```
//! use std::sync::Arc;
//! use idemkit::adapters::memory::MemoryAdapter;
//! use idemkit::store::Store;
//!
//! let store = Store::new(Arc::new(MemoryAdapter::default()));
//! assert_eq!(store.list(None).unwrap().len(), 0);
//! ```

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use idemkit_core::RecordId;
use idemkit_core::record::{Record, RecordState};

use super::{
    Adapter, AdapterError, Cursor, Read, Scan, ScanBy, ScanPage, Scanned, Stored, Version,
    first_version, next_version,
};

/// Records in memory; see the module documentation.
#[derive(Debug, Default)]
pub struct MemoryAdapter {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    records: BTreeMap<Vec<u8>, Stored>,
    token_floor: u64,
    /// The highest version of any deleted record.
    version_floor: u64,
}

impl MemoryAdapter {
    fn state(&self) -> MutexGuard<'_, State> {
        // Every change below is a single insert or remove: a panic elsewhere
        // while the lock was held cannot leave the map half-written.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Adapter for MemoryAdapter {
    /// A map under a mutex held for one operation: no I/O, no waiting.
    fn may_block(&self) -> bool {
        false
    }

    /// Memory no other process can see: every write to it is this process's
    /// (so a completion always wakes who waits for it).
    fn held_alone(&self) -> bool {
        true
    }

    fn get(&self, id: &RecordId) -> Result<Read, AdapterError> {
        let state = self.state();
        Ok(Read {
            stored: state.records.get(id.as_bytes()).cloned(),
            token_floor: state.token_floor,
            now: None,
        })
    }

    fn insert(&self, id: &RecordId, record: &Record) -> Result<Option<Version>, AdapterError> {
        let mut state = self.state();
        if state.records.contains_key(id.as_bytes()) || state.token_floor >= record.last_token.get()
        {
            return Ok(None);
        }
        let version = first_version(state.version_floor);
        state.records.insert(
            id.as_bytes().to_vec(),
            Stored {
                record: record.clone(),
                version,
            },
        );
        Ok(Some(version))
    }

    fn update(
        &self,
        id: &RecordId,
        read: &Stored,
        next: &Record,
    ) -> Result<Option<Version>, AdapterError> {
        let mut state = self.state();
        let Some(current) = state.records.get_mut(id.as_bytes()) else {
            return Ok(None);
        };
        if current.version != read.version {
            return Ok(None);
        }
        let version = next_version(read.version);
        *current = Stored {
            record: next.clone(),
            version,
        };
        Ok(Some(version))
    }

    fn delete(&self, id: &RecordId, read: &Stored) -> Result<bool, AdapterError> {
        let mut state = self.state();
        if state.records.get(id.as_bytes()).map(|s| s.version) != Some(read.version) {
            return Ok(false);
        }
        state.records.remove(id.as_bytes());
        state.token_floor = state.token_floor.max(read.record.last_token.get());
        state.version_floor = state.version_floor.max(read.version.0);
        Ok(true)
    }

    fn scan(&self, scan: &Scan) -> Result<ScanPage, AdapterError> {
        let state = self.state();
        // (order key, id) of every record the scan lists.
        let mut found: Vec<(Vec<u8>, &Vec<u8>, &Stored)> = state
            .records
            .iter()
            .filter_map(|(id, stored)| {
                order_key(scan.by, &stored.record, id).map(|key| (key, id, stored))
            })
            .collect();
        found.sort_by(|a, b| a.0.cmp(&b.0));
        let after = scan.after.as_ref().map(|c| c.0.as_slice());
        let mut entries = Vec::new();
        let mut next = None;
        for (key, id, stored) in found {
            if after.is_some_and(|after| key.as_slice() <= after) {
                continue;
            }
            if entries.len() == scan.limit {
                break;
            }
            entries.push(Scanned {
                id: id.clone(),
                stored: Ok(stored.clone()),
            });
            next = Some(Cursor(key));
        }
        if entries.len() < scan.limit {
            next = None;
        }
        Ok(ScanPage { entries, next })
    }
}

/// Where a record sorts in a scan by `by` (`None`: not in it). The same order
/// as the redb adapter's indexes: (instant, id) or id.
fn order_key(by: ScanBy, record: &Record, id: &[u8]) -> Option<Vec<u8>> {
    let timed = |at: u64| {
        let mut key = at.to_be_bytes().to_vec();
        key.extend_from_slice(id);
        key
    };
    match by {
        ScanBy::All => Some(id.to_vec()),
        ScanBy::Unknown => matches!(record.state, RecordState::Unknown { .. }).then(|| id.to_vec()),
        ScanBy::GcDue(by) => record
            .gc_due_at()
            .filter(|due| *due <= by)
            .map(|due| timed(due.as_millis())),
        ScanBy::LeaseExpired(by) => record
            .lease_expires_at()
            .filter(|at| *at <= by)
            .map(|at| timed(at.as_millis())),
    }
}
